//! Spec: ../shared/specs/characterization.md — the job registry and per-job counters at the MDS.
//!
//! Every metadata call carries its job id ([`Origin`]); every data server sends, with its report, the
//! detail of the jobs whose counters changed ([`DsJobReport`]). Per job the registry keeps its first and
//! last activity, user, clients, processes, metadata counters, the files it created, opened or removed
//! (the job → files map), the latest data counters per data server, and a bounded time series of Δt
//! windows (default 1 s; a long job's windows are merged pairwise, doubling Δt, instead of dropping its
//! start). The registry part (everything but the series) is kept in the database's `jobs` tree, written
//! once a second and at shutdown, so it survives a restart.

use crate::store::{Store, StoreError, T};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_proto::msg::{
    DirOp, DsJobReport, IonJobReport, JobDetail, JobFile, JobInfo, MdsReply, MdsRequest, MetaCounters, SeriesPoint,
};
use tessera_proto::msg::{ProcWindow, Window};
use tessera_proto::types::{job_entry, unix_us};
use tessera_proto::{wire, DsId, FsResult, Ino, Origin, ROOT_INO};

/// Windows kept per job before pairs are merged.
pub const SERIES_MAX: usize = 1024;
/// A job is running while it was active this recently.
pub const RUNNING_FOR: Duration = Duration::from_secs(60);
/// Bounds of what one job keeps (peers must not grow the MDS without bound).
pub const MAX_CLIENTS: usize = 1024;
pub const MAX_PROCESSES: usize = 4096;
pub const MAX_FILES: usize = 4096;
/// Forwarding nodes kept per job.
pub const MAX_IONS: usize = 64;
/// Per-process entries kept in one window.
pub const MAX_PROCS_PER_WINDOW: usize = 64;
/// File names learnt from lookups (for the paths of files a job opened but did not create).
const MAX_NAMES: usize = 65536;

/// What the registry keeps of a job on disk.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
struct Record {
    job: String,
    uid: u32,
    first_us: u64,
    last_us: u64,
    clients: BTreeSet<u64>,
    /// In first-seen order: a process's index is its position.
    processes: Vec<(u64, u32)>,
    meta: MetaCounters,
    /// ino → (parent, name) when known, and what the job did with it.
    files: BTreeMap<Ino, FileRec>,
    /// The latest counters of each data server: (generation, taken at, counters).
    nodes: BTreeMap<DsId, (u64, u64, JobDetail)>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
struct FileRec {
    name: Option<(Ino, String)>,
    created: bool,
    opened: bool,
    removed: bool,
}

struct Live {
    rec: Record,
    /// Index of `rec.processes`.
    procs: HashMap<(u64, u32), u32>,
    dt_us: u64,
    series: VecDeque<SeriesPoint>,
    dirty: bool,
    /// The latest counters of each forwarding node, like `rec.nodes` (in memory only: not in the
    /// record, whose encoding stays as it was).
    ions: BTreeMap<u32, (u64, u64, JobDetail)>,
}

impl Live {
    fn new(job: &str, dt_us: u64) -> Live {
        let rec = Record { job: job.to_string(), ..Default::default() };
        Live { rec, procs: HashMap::new(), dt_us, series: VecDeque::new(), dirty: true, ions: BTreeMap::new() }
    }

    fn loaded(rec: Record, dt_us: u64) -> Live {
        let procs = rec.processes.iter().enumerate().map(|(i, p)| (*p, i as u32)).collect();
        Live { rec, procs, dt_us, series: VecDeque::new(), dirty: false, ions: BTreeMap::new() }
    }

    fn touch(&mut self, now: u64) {
        if self.rec.first_us == 0 {
            self.rec.first_us = now;
        }
        self.rec.last_us = self.rec.last_us.max(now);
        self.dirty = true;
    }

    /// A metadata call of user `uid` by `(client, pid)` at `now`: the job's user is its first call's.
    fn metadata_call(&mut self, uid: u32, now: u64, client: u64, pid: u32) {
        if self.rec.first_us == 0 {
            self.rec.uid = uid;
        }
        self.touch(now);
        self.process(client, pid);
    }

    fn process(&mut self, client: u64, pid: u32) -> Option<u32> {
        if let Some(i) = self.procs.get(&(client, pid)) {
            return Some(*i);
        }
        if self.rec.processes.len() >= MAX_PROCESSES {
            return None;
        }
        self.procs.insert((client, pid), self.rec.processes.len() as u32);
        self.rec.processes.push((client, pid));
        if self.rec.clients.len() < MAX_CLIENTS {
            self.rec.clients.insert(client);
        }
        Some(self.rec.processes.len() as u32 - 1)
    }

    fn file(&mut self, ino: Ino) -> Option<&mut FileRec> {
        if !self.rec.files.contains_key(&ino) && self.rec.files.len() >= MAX_FILES {
            return None;
        }
        Some(self.rec.files.entry(ino).or_default())
    }

    /// Adds `w` to the window holding `at_us`, merging pairs of windows when there are too many.
    fn add_window(&mut self, at_us: u64, w: &Window) {
        let start = at_us / self.dt_us * self.dt_us;
        let pos = self.series.iter().rposition(|p| p.start_unix_us <= start);
        match pos {
            Some(i) if self.series[i].start_unix_us == start => add(&mut self.series[i].window, w),
            _ => {
                let at = pos.map_or(0, |i| i + 1);
                self.series.insert(at, SeriesPoint { start_unix_us: start, window: w.clone() });
            }
        }
        // Windows apart in time stay apart: the span, not the count of windows with I/O, is bounded.
        while self.span() > SERIES_MAX {
            self.dt_us *= 2;
            let mut merged: VecDeque<SeriesPoint> = VecDeque::new();
            for p in self.series.drain(..) {
                let s = p.start_unix_us / self.dt_us * self.dt_us;
                match merged.back_mut() {
                    Some(b) if b.start_unix_us == s => add(&mut b.window, &p.window),
                    _ => merged.push_back(SeriesPoint { start_unix_us: s, window: p.window }),
                }
            }
            self.series = merged;
        }
    }

    fn span(&self) -> usize {
        match (self.series.front(), self.series.back()) {
            (Some(a), Some(b)) => ((b.start_unix_us - a.start_unix_us) / self.dt_us) as usize + 1,
            _ => 0,
        }
    }
}

/// Adds `b` to `a` (saturating: a data server's counters are what it says they are).
fn add(a: &mut Window, b: &Window) {
    a.read_bytes = a.read_bytes.saturating_add(b.read_bytes);
    a.write_bytes = a.write_bytes.saturating_add(b.write_bytes);
    a.read_ops = a.read_ops.saturating_add(b.read_ops);
    a.write_ops = a.write_ops.saturating_add(b.write_ops);
    for p in &b.procs {
        match a.procs.iter().position(|q| q.process == p.process) {
            Some(i) => {
                a.procs[i].read_bytes = a.procs[i].read_bytes.saturating_add(p.read_bytes);
                a.procs[i].write_bytes = a.procs[i].write_bytes.saturating_add(p.write_bytes);
            }
            None if a.procs.len() < MAX_PROCS_PER_WINDOW => a.procs.push(p.clone()),
            None => {}
        }
    }
}

/// What a metadata request does, as the registry counts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaEvent {
    Open {
        ino: Ino,
    },
    Close,
    /// A create (`open`: and opened, CreateOpen); the inode comes from the reply.
    Create {
        parent: Ino,
        name: String,
        open: bool,
    },
    /// `ino`: what the name held before (looked up before the unlink).
    Unlink {
        parent: Ino,
        name: String,
        ino: Option<Ino>,
    },
    Readdir,
    InodeUpdate,
    /// A directory lease's batch: creates and unlinks, each counted under the job and process that made
    /// it (the batch is sent later, by whoever flushes it).
    Batch {
        dir: Ino,
        entries: Vec<BatchEntry>,
    },
    /// A lookup: a name for the inode in the reply.
    Lookup {
        parent: Ino,
        name: String,
    },
    LookupPath {
        path: String,
    },
    Other,
}

/// One change of a [`MetaEvent::Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchEntry {
    /// Who made it; an empty job: the batch's origin.
    pub job: String,
    pub pid: u32,
    /// A create (inode, name, opened), or `None`: an unlink.
    pub create: Option<(Ino, String, bool)>,
}

impl MetaEvent {
    /// The event of `req` (before it is served; an unlink's inode is filled in by the caller).
    pub fn of(req: &MdsRequest) -> Option<MetaEvent> {
        use MdsRequest as Q;
        Some(match req {
            Q::Open { ino, .. } => MetaEvent::Open { ino: *ino },
            Q::Close { .. } => MetaEvent::Close,
            Q::Create { parent, name, .. } => MetaEvent::Create { parent: *parent, name: name.clone(), open: false },
            Q::CreateOpen { parent, name, .. } => MetaEvent::Create { parent: *parent, name: name.clone(), open: true },
            Q::Unlink { parent, name } => MetaEvent::Unlink { parent: *parent, name: name.clone(), ino: None },
            Q::ReadDir { .. } => MetaEvent::Readdir,
            Q::SetAttr { .. }
            | Q::ReportWrite { .. }
            | Q::SetXattr { .. }
            | Q::RemoveXattr { .. }
            | Q::Rename { .. }
            | Q::Link { .. }
            | Q::SetLayout { .. }
            | Q::SetCompositeLayout { .. }
            | Q::InstantiateExtent { .. }
            | Q::Append { .. } => MetaEvent::InodeUpdate,
            Q::DirBatch { dir, entries, .. } => MetaEvent::Batch {
                dir: *dir,
                entries: entries
                    .iter()
                    .map(|e| BatchEntry {
                        job: e.by().0.to_string(),
                        pid: e.by().1,
                        create: match e {
                            DirOp::Create(c) => Some((c.ino, c.name.clone(), c.open.is_some())),
                            DirOp::Unlink { .. } => None,
                        },
                    })
                    .collect(),
            },
            Q::Lookup { parent, name } => MetaEvent::Lookup { parent: *parent, name: name.clone() },
            Q::LookupPath { path, .. } => MetaEvent::LookupPath { path: path.clone() },
            // Servers' own traffic and the statistics requests are nobody's job.
            Q::Ping
            | Q::KeepAlive
            | Q::Reopen { .. }
            | Q::DsReport(_)
            | Q::LocalityReport(_)
            | Q::DsJobReport(_)
            | Q::IonJobReport(_)
            | Q::JobStats { .. }
            | Q::ClusterStatus
            | Q::OrchestratorStatus
            | Q::SetOrchestratorMode { .. }
            | Q::Fsck { .. } => return None,
            _ => MetaEvent::Other,
        })
    }
}

/// The job registry.
pub struct Jobs {
    /// Where the registry is kept (its `jobs` tree, written through transactions like every change,
    /// so a journal or a replicated log carries it).
    store: Option<Arc<Store>>,
    live: Mutex<HashMap<String, Live>>,
    /// ino → (parent, name) or a full path (parent 0), learnt from lookups.
    names: Mutex<HashMap<Ino, (Ino, String)>>,
    dt_us: u64,
}

impl Jobs {
    /// The registry kept in `store`'s `jobs` tree (its records loaded), with windows of `dt`.
    pub fn open(store: &Arc<Store>, dt: Duration) -> FsResult<Jobs> {
        let dt_us = (dt.as_micros() as u64).max(1000);
        let mut live = HashMap::new();
        for v in store.begin().scan(T::Jobs, b"")?.into_values() {
            match wire::decode::<Record>(&v) {
                Ok(rec) => {
                    let job = rec.job.clone();
                    live.insert(job, Live::loaded(rec, dt_us));
                }
                Err(e) => tracing::warn!("skipping a corrupt job record: {}", tessera_proto::error::chain(&e)),
            }
        }
        Ok(Jobs { store: Some(store.clone()), live: Mutex::new(live), names: Mutex::default(), dt_us })
    }

    /// A registry in memory only (tests).
    pub fn in_memory(dt: Duration) -> Jobs {
        let dt_us = (dt.as_micros() as u64).max(1000);
        Jobs { store: None, live: Mutex::default(), names: Mutex::default(), dt_us }
    }

    fn with<R>(&self, job: &str, f: impl FnOnce(&mut Live) -> R) -> R {
        let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let dt = self.dt_us;
        f(job_entry(&mut m, job, |k| Live::new(k, dt)))
    }

    /// A metadata request of `origin` by user `uid` was served with `reply`.
    pub fn on_metadata(&self, origin: &Origin, uid: u32, ev: MetaEvent, reply: &FsResult<MdsReply>) {
        if let MetaEvent::Batch { dir, entries } = ev {
            return self.on_batch(origin, uid, dir, entries, reply);
        }
        let ok = reply.is_ok();
        let replied_ino = match reply {
            Ok(MdsReply::Entry { attr, .. }) | Ok(MdsReply::Opened { attr, .. }) => Some(attr.ino),
            _ => None,
        };
        match &ev {
            MetaEvent::Lookup { parent, name } => {
                if let Some(ino) = replied_ino {
                    self.learn(ino, *parent, name.clone());
                }
            }
            MetaEvent::LookupPath { path } => {
                if let Some(ino) = replied_ino {
                    self.learn(ino, 0, path.clone());
                }
            }
            _ => {}
        }
        let now = unix_us();
        self.with(&origin.job, |l| {
            l.metadata_call(uid, now, origin.client, origin.pid);
            match ev {
                MetaEvent::Open { ino } if ok => {
                    l.rec.meta.opens += 1;
                    if let Some(f) = l.file(ino) {
                        f.opened = true;
                    }
                }
                MetaEvent::Close if ok => l.rec.meta.closes += 1,
                MetaEvent::Create { parent, name, open } if ok => {
                    l.rec.meta.creates += 1;
                    // A CreateOpen of an existing file is an open (the reply names no parent then).
                    let created = !matches!(reply, Ok(MdsReply::Opened { parent: None, .. }));
                    if !created {
                        l.rec.meta.creates -= 1;
                    }
                    if open {
                        l.rec.meta.opens += 1;
                    }
                    if let Some(f) = replied_ino.and_then(|ino| l.file(ino)) {
                        f.name = Some((parent, name));
                        f.created |= created;
                        f.opened |= open;
                    }
                }
                MetaEvent::Unlink { parent, name, ino } if ok => {
                    l.rec.meta.unlinks += 1;
                    if let Some(f) = ino.and_then(|ino| l.file(ino)) {
                        f.removed = true;
                        f.name.get_or_insert((parent, name));
                    }
                }
                MetaEvent::Readdir if ok => l.rec.meta.readdirs += 1,
                MetaEvent::InodeUpdate if ok => l.rec.meta.inode_updates += 1,
                _ => l.rec.meta.other += 1,
            }
        });
    }

    /// A lease holder's batch: each change that took effect counted under the job and process that made it
    /// (an entry without a job under the batch's origin); the batch itself, a lease renewal, is nobody's.
    fn on_batch(&self, origin: &Origin, uid: u32, dir: Ino, entries: Vec<BatchEntry>, reply: &FsResult<MdsReply>) {
        let Ok(MdsReply::Batch { results, .. }) = reply else { return };
        let now = unix_us();
        for (e, r) in entries.into_iter().zip(results) {
            if r.result.is_err() {
                continue;
            }
            let (job, pid) = if e.job.is_empty() { (origin.job.as_str(), origin.pid) } else { (e.job.as_str(), e.pid) };
            self.with(job, |l| {
                l.metadata_call(uid, now, origin.client, pid);
                match e.create {
                    Some((ino, name, open)) => {
                        l.rec.meta.creates += 1;
                        l.rec.meta.opens += u64::from(open);
                        if let Some(f) = l.file(ino) {
                            f.name = Some((dir, name));
                            f.created = true;
                            f.opened |= open;
                        }
                    }
                    None => {
                        l.rec.meta.unlinks += 1;
                        if let Some(f) = (r.ino != 0).then_some(r.ino).and_then(|ino| l.file(ino)) {
                            f.removed = true;
                        }
                    }
                }
            });
        }
    }

    fn learn(&self, ino: Ino, parent: Ino, name: String) {
        let mut n = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if n.len() >= MAX_NAMES && !n.contains_key(&ino) {
            n.clear();
        }
        n.insert(ino, (parent, name));
    }

    /// A data server's per-job detail: the latest counters per server, and what moved since its previous
    /// detail (same generation; a new generation counts from zero) added to the job's window.
    pub fn on_detail(&self, r: &DsJobReport) {
        for d in &r.jobs {
            self.with(&d.job, |l| {
                let before = match l.rec.nodes.get(&r.ds) {
                    Some((g, at, prev)) if *g == r.generation => {
                        if *at >= r.at_unix_us {
                            return; // reordered in transit
                        }
                        Some(prev.clone())
                    }
                    _ => None,
                };
                let w = delta(l, before.as_ref(), d);
                l.touch(r.at_unix_us);
                if w.read_ops > 0 || w.write_ops > 0 {
                    l.add_window(r.at_unix_us, &w);
                }
                l.rec.nodes.insert(r.ds, (r.generation, r.at_unix_us, d.clone()));
            });
        }
    }

    /// A forwarding node's per-job detail: its latest counters per job (shown as a node of the job, not
    /// added to the job's totals or windows: the data servers count the same requests).
    pub fn on_ion_detail(&self, r: &IonJobReport) {
        for d in &r.jobs {
            self.with(&d.job, |l| {
                match l.ions.get(&r.ion) {
                    Some((g, at, _)) if *g == r.generation && *at >= r.at_unix_us => return, // reordered
                    None if l.ions.len() >= MAX_IONS => return,
                    _ => {}
                }
                l.touch(r.at_unix_us);
                l.ions.insert(r.ion, (r.generation, r.at_unix_us, d.clone()));
            });
        }
    }

    /// Writes the records changed since the last flush to the database (one transaction).
    pub fn flush(&self) -> FsResult<()> {
        let Some(store) = &self.store else { return Ok(()) };
        let dirty: Vec<Record> = {
            let mut m = self.live.lock().unwrap_or_else(|p| p.into_inner());
            m.values_mut()
                .filter(|l| l.dirty)
                .map(|l| {
                    l.dirty = false;
                    l.rec.clone()
                })
                .collect()
        };
        if dirty.is_empty() {
            return Ok(());
        }
        let mut tx = store.begin();
        for rec in dirty {
            let v = wire::encode(&rec).map_err(|source| StoreError::Encode { what: "job record", source })?;
            tx.put(T::Jobs, rec.job.as_bytes(), v);
        }
        tx.commit()
    }

    /// One job (with files and series) or every job (summaries), newest activity first. `path_of`
    /// names a directory.
    pub fn info(&self, job: Option<&str>, store: &Store) -> Vec<JobInfo> {
        let now = unix_us();
        let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let names = self.names.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out: Vec<JobInfo> = m
            .values()
            .filter(|l| job.is_none_or(|j| l.rec.job == j))
            .map(|l| {
                let r = &l.rec;
                let mut i = JobInfo {
                    job: r.job.clone(),
                    uid: r.uid,
                    first_unix_us: r.first_us,
                    last_unix_us: r.last_us,
                    running: now.saturating_sub(r.last_us) < RUNNING_FOR.as_micros() as u64,
                    clients: r.clients.iter().copied().collect(),
                    processes: r.processes.clone(),
                    meta: r.meta.clone(),
                    nodes: r.nodes.iter().map(|(ds, (_, _, d))| (*ds, d.clone())).collect(),
                    files: Vec::new(),
                    dt_us: l.dt_us,
                    series: Vec::new(),
                    ions: l.ions.iter().map(|(ion, (_, _, d))| (*ion, d.clone())).collect(),
                };
                if job.is_some() {
                    let mut dirs = DirNames::new(store);
                    // Files seen only in the data counters too.
                    let mut inos: BTreeSet<Ino> = r.files.keys().copied().collect();
                    for (_, _, d) in r.nodes.values() {
                        inos.extend(d.streams.iter().map(|s| s.ino));
                    }
                    i.files = inos
                        .into_iter()
                        .take(MAX_FILES)
                        .map(|ino| {
                            let f = r.files.get(&ino).cloned().unwrap_or_default();
                            let name = f.name.clone().or_else(|| names.get(&ino).cloned());
                            let path = match name {
                                Some((0, p)) => p,
                                Some((parent, n)) => dirs.join(parent, &n),
                                None => format!("inode {ino}"),
                            };
                            JobFile { ino, path, created: f.created, opened: f.opened, removed: f.removed }
                        })
                        .collect();
                    i.series = l.series.iter().cloned().collect();
                } else {
                    // Summaries: no per-stream detail.
                    for (_, d) in i.nodes.iter_mut().chain(i.ions.iter_mut()) {
                        d.streams.clear();
                    }
                }
                i
            })
            .collect();
        out.sort_by(|a, b| b.last_unix_us.cmp(&a.last_unix_us).then(a.job.cmp(&b.job)));
        if job.is_none() {
            out.truncate(MAX_SUMMARIES);
            for i in &mut out {
                i.processes.truncate(64);
                i.clients.truncate(64);
            }
        }
        fit(&mut out);
        out
    }
}

impl Jobs {
    /// For PerSched's detection: every job with I/O in a window starting at or after `since_us`, its bytes
    /// (read + written) per window up to the window of `now_us`, windows without I/O as zeros (at most
    /// 2 × [`SERIES_MAX`] windows, the newest).
    pub fn series(&self, since_us: u64, now_us: u64) -> Vec<tessera_persched::detect::JobSeries> {
        let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
        m.values()
            .filter_map(|l| {
                let (first, last) = (l.series.front()?, l.series.back()?);
                if last.start_unix_us < since_us {
                    return None;
                }
                let dt = l.dt_us.max(1);
                let end = (now_us / dt * dt).max(last.start_unix_us);
                let n = ((end - first.start_unix_us) / dt) as usize + 1;
                let n = n.min(2 * SERIES_MAX);
                let from = end - (n as u64 - 1) * dt;
                let mut bytes = vec![0u64; n];
                for p in l.series.iter().filter(|p| p.start_unix_us >= from) {
                    let i = ((p.start_unix_us - from) / dt) as usize;
                    if let Some(b) = bytes.get_mut(i) {
                        *b += p.window.read_bytes + p.window.write_bytes;
                    }
                }
                Some(tessera_persched::detect::JobSeries {
                    job: l.rec.job.clone(),
                    nodes: (l.rec.clients.len() as u32).max(1),
                    dt_ms: (dt / 1000).max(1),
                    bytes,
                    last_io_ms: last.start_unix_us / 1000,
                })
            })
            .collect()
    }

    /// The per-job families of the MDS's metrics (label `job`; data counters also by `ds`), for the jobs
    /// active within `idle`: idle jobs leave the metrics, not the registry.
    pub fn scrape(&self, s: &mut tessera_metrics::Scrape, idle: Duration) -> std::fmt::Result {
        let since = unix_us().saturating_sub(idle.as_micros() as u64);
        type Row = (String, MetaCounters, Vec<(DsId, JobDetail)>);
        let jobs: Vec<Row> = {
            let m = self.live.lock().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<_> = m
                .values()
                .filter(|l| l.rec.last_us >= since)
                .map(|l| {
                    let nodes = l.rec.nodes.iter().map(|(ds, (_, _, d))| (*ds, d.clone())).collect();
                    (l.rec.job.clone(), l.rec.meta.clone(), nodes)
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        let mut f = s.counter("tessera_job_metadata_ops_total", "Metadata operations of a job at the MDS, by op.")?;
        for (job, m, _) in &jobs {
            for (op, n) in [
                ("open", m.opens),
                ("close", m.closes),
                ("create", m.creates),
                ("unlink", m.unlinks),
                ("readdir", m.readdirs),
                ("inode_update", m.inode_updates),
                ("other", m.other),
            ] {
                f.sample(&[("job", job), ("op", op)], n)?;
            }
        }
        type Field = fn(&JobDetail) -> u64;
        let data: [(&str, &str, Field); 4] = [
            ("tessera_job_read_bytes_total", "Bytes a job read, by data server.", |d| d.read_bytes),
            ("tessera_job_write_bytes_total", "Bytes a job wrote, by data server.", |d| d.write_bytes),
            ("tessera_job_read_requests_total", "Read requests of a job, by data server.", |d| d.read_ops),
            ("tessera_job_write_requests_total", "Write requests of a job, by data server.", |d| d.write_ops),
        ];
        for (name, help, get) in data {
            let mut f = s.counter(name, help)?;
            for (job, _, nodes) in &jobs {
                for (ds, d) in nodes {
                    f.sample(&[("job", job), ("ds", &ds.to_string())], get(d))?;
                }
            }
        }
        Ok(())
    }
}

/// Jobs listed when all are asked for (the most recently active).
pub const MAX_SUMMARIES: usize = 256;

/// Trims a reply until it fits in a message header with room to spare: per-process window detail
/// first, then files, then jobs.
fn fit(out: &mut Vec<JobInfo>) {
    let limit = wire::MAX_HEADER * 3 / 4;
    let size = |o: &Vec<JobInfo>| wire::encode(o).map(|b| b.len()).unwrap_or(usize::MAX);
    if size(out) <= limit {
        return;
    }
    for i in out.iter_mut() {
        i.series.iter_mut().for_each(|p| p.window.procs.clear());
    }
    while size(out) > limit {
        match out.iter().position(|i| !i.files.is_empty()) {
            Some(k) => {
                let n = out[k].files.len() / 2;
                out[k].files.truncate(n)
            }
            None if out.len() > 1 => {
                out.pop();
            }
            None => {
                let i = &mut out[0];
                i.series.clear();
                i.processes.truncate(64);
                i.nodes.iter_mut().chain(i.ions.iter_mut()).for_each(|(_, d)| d.streams.clear());
                return;
            }
        }
    }
}

/// The window of what moved between `before` and `now` at one data server (per process too).
fn delta(l: &mut Live, before: Option<&JobDetail>, now: &JobDetail) -> Window {
    let zero = JobDetail::default();
    let b = before.unwrap_or(&zero);
    let mut w = Window {
        read_bytes: now.read_bytes.saturating_sub(b.read_bytes),
        write_bytes: now.write_bytes.saturating_sub(b.write_bytes),
        read_ops: now.read_ops.saturating_sub(b.read_ops),
        write_ops: now.write_ops.saturating_sub(b.write_ops),
        procs: Vec::new(),
    };
    let prev: HashMap<_, u64> =
        b.streams.iter().map(|s| ((s.ino, s.client, s.pid, s.object, s.write), s.bytes)).collect();
    for s in &now.streams {
        let moved =
            s.bytes.saturating_sub(prev.get(&(s.ino, s.client, s.pid, s.object, s.write)).copied().unwrap_or(0));
        let Some(p) = l.process(s.client, s.pid) else { continue };
        if moved == 0 {
            continue;
        }
        let (r, wr) = if s.write { (0, moved) } else { (moved, 0) };
        add(
            &mut w,
            &Window { procs: vec![ProcWindow { process: p, read_bytes: r, write_bytes: wr }], ..Default::default() },
        );
    }
    w
}

/// Directory paths, found by walking up (`..`) and looking each directory up in its parent.
struct DirNames<'a> {
    store: &'a Store,
    cache: HashMap<Ino, String>,
}

impl<'a> DirNames<'a> {
    fn new(store: &'a Store) -> DirNames<'a> {
        DirNames { store, cache: HashMap::from([(ROOT_INO, String::new())]) }
    }

    fn join(&mut self, dir: Ino, name: &str) -> String {
        format!("{}/{name}", self.path(dir))
    }

    fn path(&mut self, dir: Ino) -> String {
        if let Some(p) = self.cache.get(&dir) {
            return p.clone();
        }
        let p = self.lookup(dir, 0).unwrap_or_else(|| format!("inode {dir}"));
        self.cache.insert(dir, p.clone());
        p
    }

    fn lookup(&mut self, dir: Ino, depth: usize) -> Option<String> {
        if let Some(p) = self.cache.get(&dir) {
            return Some(p.clone());
        }
        if depth > 64 {
            return None;
        }
        let txn = self.store.begin();
        let parent = txn.get_inode(dir).ok()??.parent;
        let entries = txn.scan(T::Dentries, &crate::store::ino_key(parent)).ok()?;
        let name = entries.iter().find_map(|(k, v)| {
            let d: crate::store::Dentry = wire::decode(v).ok()?;
            (d.ino == dir).then(|| String::from_utf8_lossy(&k[8..]).into_owned())
        })?;
        let p = format!("{}/{name}", self.lookup(parent, depth + 1)?);
        self.cache.insert(dir, p.clone());
        Some(p)
    }
}

/// Writes the registry to the database every second.
pub fn spawn_flusher(jobs: std::sync::Arc<Jobs>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = jobs.flush() {
                tracing::warn!("writing the job registry: {e}");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::msg::Spatial;
    use tessera_proto::msg::StreamCounters;
    use tessera_proto::{Attr, FileKind, Timestamp};

    fn origin(job: &str, client: u64, pid: u32) -> Origin {
        Origin { job: job.into(), client, pid }
    }

    fn opened(ino: Ino, created: bool) -> FsResult<MdsReply> {
        let attr = Attr::new(ino, FileKind::File, 0o644, 0, 0, Timestamp::now());
        let parent = created.then(|| attr.clone());
        Ok(MdsReply::Opened { attr, layout: None, handle: 1, parent })
    }

    fn detail(job: &str, streams: &[(Ino, u32, u64)]) -> JobDetail {
        let mut d = JobDetail { job: job.into(), ..Default::default() };
        for &(ino, pid, bytes) in streams {
            d.write_ops += (bytes / 1000).max(1);
            d.write_bytes += bytes;
            d.streams.push(StreamCounters {
                ino,
                client: 1,
                pid,
                object: ino,
                write: true,
                ops: (bytes / 1000).max(1),
                bytes,
                spatial: Spatial::Contiguous,
            });
        }
        d
    }

    #[test]
    fn metadata_counts_and_files_per_job() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        let o = origin("a", 1, 10);
        let create = MdsRequest::CreateOpen {
            parent: ROOT_INO,
            name: "f".into(),
            perm: 0o644,
            umask: 0,
            exclusive: false,
            layout: None,
            flags: Default::default(),
        };
        j.on_metadata(&o, 1000, MetaEvent::of(&create).unwrap(), &opened(5, true));
        j.on_metadata(&o, 1000, MetaEvent::of(&create).unwrap(), &opened(5, false));
        j.on_metadata(&origin("a", 1, 11), 1000, MetaEvent::Close, &Ok(MdsReply::Ok));
        j.on_metadata(&o, 1000, MetaEvent::Readdir, &Ok(MdsReply::Ok));
        j.on_metadata(&o, 1000, MetaEvent::Open { ino: 9 }, &Err(tessera_proto::FsError::invalid("x")));
        let unlink = MetaEvent::Unlink { parent: ROOT_INO, name: "f".into(), ino: Some(5) };
        j.on_metadata(&o, 1000, unlink, &Ok(MdsReply::Ok));
        assert!(MetaEvent::of(&MdsRequest::Ping).is_none());
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        let i = j.info(Some("a"), &store);
        let i = &i[0];
        let m = &i.meta;
        assert_eq!((m.creates, m.opens, m.closes, m.readdirs, m.unlinks, m.other), (1, 2, 1, 1, 1, 1));
        assert_eq!((i.uid, i.processes.len(), i.clients.clone()), (1000, 2, vec![1]));
        assert!(i.running);
        assert_eq!(i.files.len(), 1);
        let f = &i.files[0];
        assert_eq!((f.ino, f.path.as_str(), f.created, f.opened, f.removed), (5, "/f", true, true, true));
    }

    #[test]
    fn a_lease_batch_counts_each_change_under_the_job_that_made_it() {
        use tessera_proto::msg::{AsyncCreate, BatchResult, DirOp};
        let j = Jobs::in_memory(Duration::from_secs(1));
        let create = |ino, name: &str, job: &str| {
            DirOp::Create(AsyncCreate {
                ino,
                name: name.into(),
                perm: 0o644,
                uid: 0,
                gid: 0,
                time: Timestamp::now(),
                open: None,
                job: job.into(),
                pid: 7,
            })
        };
        let entries = vec![
            create(5, "a", "mdtest"),
            create(6, "b", "mdtest"),
            create(7, "c", ""),
            DirOp::Unlink { name: "a".into(), job: "mdtest".into(), pid: 8, time: tessera_proto::Timestamp::now() },
            create(8, "d", "mdtest"),
        ];
        let req = MdsRequest::DirBatch { dir: ROOT_INO, token: 1, entries, keep: true };
        let ok = |ino| BatchResult { ino, result: Ok(None) };
        let results = vec![
            ok(5),
            ok(6),
            ok(7),
            ok(5),
            BatchResult { ino: 8, result: Err(tessera_proto::FsError::invalid("refused")) },
        ];
        let attr = Attr::new(ROOT_INO, FileKind::Dir, 0o755, 0, 0, Timestamp::now());
        let reply = Ok(MdsReply::Batch { results, dir_attr: attr, lease: None });
        // Sent by the mount's flusher, whose own job is "kernel".
        j.on_metadata(&origin("kernel", 1, 0), 0, MetaEvent::of(&req).unwrap(), &reply);
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        let i = j.info(Some("mdtest"), &store);
        let m = &i[0].meta;
        assert_eq!((m.creates, m.unlinks), (2, 1), "the refused create is not counted");
        assert_eq!(i[0].processes.len(), 2, "pids 7 and 8 of client 1");
        let f = i[0].files.iter().find(|f| f.ino == 5).unwrap();
        assert!(f.created && f.removed);
        let k = j.info(Some("kernel"), &store);
        assert_eq!(k[0].meta.creates, 1, "an entry without a job is the batch's origin's");
    }

    #[test]
    fn forwarding_nodes_are_nodes_of_the_job_not_in_its_totals() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        let r = |ion, at_s: u64, jobs| IonJobReport { ion, at_unix_us: at_s * 1_000_000, generation: 1, jobs };
        j.on_detail(&DsJobReport {
            ds: 0,
            at_unix_us: 10_000_000,
            generation: 1,
            jobs: vec![detail("a", &[(5, 1, 4000)])],
        });
        j.on_ion_detail(&r(1, 10, vec![detail("a", &[(5, 1, 4000)])]));
        j.on_ion_detail(&r(1, 11, vec![detail("a", &[(5, 1, 8000)])]));
        j.on_ion_detail(&r(1, 11, vec![detail("a", &[(5, 1, 1)])])); // reordered: ignored
        for k in 0..MAX_IONS as u32 + 5 {
            j.on_ion_detail(&r(100 + k, 12, vec![detail("a", &[(5, 1, 1)])]));
        }
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        let i = &j.info(Some("a"), &store)[0];
        assert_eq!(i.ions.len(), MAX_IONS, "bounded");
        assert_eq!((i.ions[0].0, i.ions[0].1.write_bytes, i.ions[0].1.streams.len()), (1, 8000, 1));
        assert_eq!(i.nodes.len(), 1);
        let written: u64 = i.series.iter().map(|p| p.window.write_bytes).sum();
        assert_eq!(written, 4000, "the windows count the data servers only");
        let all = j.info(None, &store);
        assert!(all[0].ions.iter().all(|(_, d)| d.streams.is_empty()), "summaries without streams");
    }

    #[test]
    fn data_details_become_windows_per_process() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        let r = |ds, at_s: u64, gen, jobs| DsJobReport { ds, at_unix_us: at_s * 1_000_000, generation: gen, jobs };
        j.on_detail(&r(0, 10, 1, vec![detail("a", &[(5, 1, 4000)])]));
        j.on_detail(&r(1, 10, 1, vec![detail("a", &[(6, 2, 2000)])]));
        j.on_detail(&r(0, 11, 1, vec![detail("a", &[(5, 1, 9000)])]));
        j.on_detail(&r(0, 11, 1, vec![detail("a", &[(5, 1, 1)])])); // reordered: same time, ignored
        j.on_detail(&r(0, 13, 2, vec![detail("a", &[(5, 1, 500)])])); // restarted server: from zero
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        let i = j.info(Some("a"), &store).remove(0);
        let s: Vec<(u64, u64, usize)> = i
            .series
            .iter()
            .map(|p| (p.start_unix_us / 1_000_000, p.window.write_bytes, p.window.procs.len()))
            .collect();
        assert_eq!(s, vec![(10, 6000, 2), (11, 5000, 1), (13, 500, 1)]);
        assert_eq!(i.processes, vec![(1, 1), (1, 2)]);
        assert_eq!(i.nodes.len(), 2);
        assert_eq!(i.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["inode 5", "inode 6"]);
        assert!(j.info(None, &store)[0].nodes.iter().all(|(_, d)| d.streams.is_empty()), "summaries");
    }

    #[test]
    fn metrics_have_a_job_label_and_idle_jobs_leave_them() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        j.on_metadata(&origin("now", 1, 1), 0, MetaEvent::Readdir, &Ok(MdsReply::Ok));
        j.on_detail(&DsJobReport {
            ds: 3,
            at_unix_us: unix_us(),
            generation: 1,
            jobs: vec![detail("now", &[(5, 1, 4000)])],
        });
        j.on_detail(&DsJobReport { ds: 3, at_unix_us: 1, generation: 1, jobs: vec![detail("old", &[(5, 1, 4000)])] });
        let mut reg = tessera_metrics::prometheus_client::registry::Registry::default();
        let jobs = std::sync::Arc::new(j);
        let j2 = jobs.clone();
        reg.register_collector(tessera_metrics::collector(move |s| j2.scrape(s, Duration::from_secs(300))));
        let text = tessera_metrics::render(&reg).unwrap();
        assert!(text.contains("tessera_job_metadata_ops_total{job=\"now\",op=\"readdir\"} 1"), "{text}");
        assert!(text.contains("tessera_job_write_bytes_total{job=\"now\",ds=\"3\"} 4000"), "{text}");
        assert!(!text.contains("\"old\""), "idle: not in the metrics");
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        assert_eq!(jobs.info(Some("old"), &store).len(), 1, "still in the registry");
    }

    #[test]
    fn detection_gets_dense_series_of_recently_active_jobs() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        let r = |at_s: u64, bytes| DsJobReport {
            ds: 0,
            at_unix_us: at_s * 1_000_000 + 500,
            generation: 1,
            jobs: vec![detail("a", &[(5, 1, bytes)])],
        };
        for (t, b) in [(10, 4000), (11, 5000), (14, 9000)] {
            j.on_detail(&r(t, b));
        }
        j.on_detail(&DsJobReport {
            ds: 0,
            at_unix_us: 3_000_000,
            generation: 1,
            jobs: vec![detail("old", &[(6, 1, 10)])],
        });
        let s = j.series(5_000_000, 16_200_000);
        assert_eq!(s.len(), 1, "only jobs with I/O since 5 s");
        let s = &s[0];
        assert_eq!((s.job.as_str(), s.nodes, s.dt_ms, s.last_io_ms), ("a", 1, 1000, 14_000));
        // Windows 10..=16 s: deltas of the cumulative counters, idle windows and the current one as zeros.
        assert_eq!(s.bytes, vec![4000, 1000, 0, 0, 4000, 0, 0]);
    }

    #[test]
    fn a_long_series_is_coarsened_not_cut() {
        let j = Jobs::in_memory(Duration::from_secs(1));
        for t in 0..(SERIES_MAX as u64 * 3) {
            let d = detail("a", &[(5, 1, 1000 * (t + 1))]);
            j.on_detail(&DsJobReport { ds: 0, at_unix_us: (t + 1) * 1_000_000, generation: 1, jobs: vec![d] });
        }
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), Default::default()).unwrap();
        let i = j.info(Some("a"), &store).remove(0);
        assert!(i.series.len() <= SERIES_MAX && i.dt_us == 4_000_000, "{} windows of {}", i.series.len(), i.dt_us);
        let total: u64 = i.series.iter().map(|p| p.window.write_bytes).sum();
        assert_eq!(total, 1000 * SERIES_MAX as u64 * 3, "nothing lost");
    }

    #[test]
    fn the_registry_survives_a_restart() {
        let d = tempfile::tempdir().unwrap();
        {
            let store = Arc::new(Store::open(d.path(), Default::default()).unwrap());
            let j = Jobs::open(&store, Duration::from_secs(1)).unwrap();
            let create = MetaEvent::Create { parent: ROOT_INO, name: "out".into(), open: true };
            j.on_metadata(&origin("keep", 3, 4), 42, create, &opened(7, true));
            j.on_detail(&DsJobReport {
                ds: 0,
                at_unix_us: 5,
                generation: 1,
                jobs: vec![detail("keep", &[(7, 4, 3000)])],
            });
            j.flush().unwrap();
            store.flush_sync().unwrap();
        }
        let store = Arc::new(Store::open(d.path(), Default::default()).unwrap());
        let j = Jobs::open(&store, Duration::from_secs(1)).unwrap();
        let i = j.info(Some("keep"), &store).remove(0);
        assert_eq!((i.uid, i.meta.creates, i.processes.clone()), (42, 1, vec![(3, 4), (1, 4)]));
        assert_eq!(i.files[0].path, "/out");
        assert_eq!(i.nodes[0].1.write_bytes, 3000);
    }
}
