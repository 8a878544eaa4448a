//! Directory leases on the client's side (asynchronous creates and unlinks, as Ceph's async dirops). The
//! first create in a directory this mount made, or the second unlink this mount sends to the MDS in any
//! directory, asks the MDS for its lease, granted while no other client uses it, with the directory's
//! names and kinds: the mount then answers lookups of other names as absent, and creates and removes
//! files there at once (creates with inode numbers the MDS reserved), sending the changes in batches
//! (every [`BATCH_AGE`] or [`BATCH_MAX`] changes). Anything else that goes to the MDS first sends what is
//! pending ([`DirLeases::settle`]), so the MDS always sees this mount's changes in order; any change other
//! than a create or unlink in a leased directory gives its lease up. A directory's name is never unlinked
//! here (the MDS refuses it); permissions (and the sticky rule) were checked by the kernel, as for the
//! creates.
//!
//! What a change that did not reach the MDS yet costs on a crash of this process: it is lost, like a
//! write still in the write-behind buffer. fsync of the file or the directory sends it first.

use crate::job::Who;
use crate::mds_client::MdsClient;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::Layout;
use tessera_proto::msg::{AsyncCreate, DirLease, DirOp, OpenFlags};
use tessera_proto::types::{Attr, FileKind, Ino, Timestamp};

/// A create or unlink waits at most this long before it is sent.
pub const BATCH_AGE: Duration = Duration::from_millis(20);
/// Changes sent in one batch at most (a create or unlink finding this many waiting goes to the MDS itself).
pub const BATCH_MAX: usize = 512;
/// Directories remembered as made here (forgotten all at once beyond that).
const CANDIDATES_MAX: usize = 4096;
/// A lease unused this long is given up (other clients wait for it).
const IDLE: Duration = Duration::from_millis(300);
/// Renewed this long before it would expire; never used closer to its end than this either.
const MARGIN: Duration = Duration::from_millis(500);

struct Held {
    /// 0 while the grant is on its way.
    token: u64,
    /// Usable until then (from when the granting or renewing request was sent).
    until: Instant,
    attr: Attr,
    /// Every name in the directory and what it is.
    names: HashMap<String, FileKind>,
    inos: Vec<Ino>,
    last_used: Instant,
    /// A change other than a create came while the grant was on its way: give it up on arrival.
    abandoned: bool,
    /// Names this mount removed through the MDS while the grant was on its way (the grant's listing
    /// may predate the removal).
    unlinked_meanwhile: Vec<String>,
}

/// A file created here that the MDS does not have yet.
struct Pending {
    attr: Attr,
    dir: Ino,
    name: String,
    /// The creating open, while it is open: the MDS opens the file too when it gets the batch.
    fh: Option<u64>,
    who: Arc<Who>,
    flags: OpenFlags,
    queued_at: Instant,
}

/// A change waiting to be sent.
#[derive(Clone, Debug, PartialEq)]
enum Queued {
    /// A pending file's create (see [`State::files`]).
    Create(Ino),
    Unlink {
        dir: Ino,
        name: String,
        queued_at: Instant,
        /// Who removed it (the job's registry counts it).
        job: String,
        pid: u32,
        /// When: the directory's times this mount showed from then on.
        time: Timestamp,
    },
}

#[derive(Default)]
struct State {
    dirs: HashMap<Ino, Held>,
    /// Not sent yet, in the order they were made.
    queue: Vec<Queued>,
    /// Queued or being sent.
    files: HashMap<Ino, Pending>,
    by_name: HashMap<(Ino, String), Ino>,
    /// File handles of pending files.
    fhs: HashMap<u64, Ino>,
    /// Directories whose next create or unlink here asks for their lease: made by this mount, or where
    /// it removed a file while not holding the lease.
    candidates: HashSet<Ino>,
    /// Directories made candidates by an unlink (once each).
    unlink_asked: HashSet<Ino>,
}

impl Held {
    /// Drops `name` from the directory (true if it was there); its size follows.
    fn forget(&mut self, name: &str) -> bool {
        let known = self.names.remove(name).is_some();
        if known {
            self.attr.size = self.attr.size.saturating_sub(1);
        }
        known
    }
}

impl State {
    /// Makes `dir` a candidate (forgetting them all beyond [`CANDIDATES_MAX`]).
    fn add_candidate(&mut self, dir: Ino) {
        if self.candidates.len() >= CANDIDATES_MAX {
            self.candidates.clear();
        }
        self.candidates.insert(dir);
    }

    /// The directory a queued change is in (`None`: a create already forgotten).
    fn dir_of(&self, q: &Queued) -> Option<Ino> {
        match q {
            Queued::Create(ino) => self.files.get(ino).map(|p| p.dir),
            Queued::Unlink { dir, .. } => Some(*dir),
        }
    }

    fn queued_at(&self, q: &Queued) -> Option<Instant> {
        match q {
            Queued::Create(ino) => self.files.get(ino).map(|p| p.queued_at),
            Queued::Unlink { queued_at, .. } => Some(*queued_at),
        }
    }

    /// Takes the changes made in `dir` and not sent yet out of the queue, in order.
    fn take_queued(&mut self, dir: Ino) -> Vec<Queued> {
        let queue = std::mem::take(&mut self.queue);
        let (mine, others): (Vec<Queued>, Vec<Queued>) = queue.into_iter().partition(|q| self.dir_of(q) == Some(dir));
        self.queue = others;
        mine
    }
}

/// A creating open whose file reached the MDS: the handle it opened there, to attach to `fh`.
pub struct Opened {
    pub fh: u64,
    pub who: Arc<Who>,
    pub flags: OpenFlags,
    pub attr: Attr,
    pub layout: Layout,
    pub handle: u64,
}

#[derive(Default)]
pub struct DirLeases {
    state: Mutex<State>,
    /// Creates and unlinks queued or being sent, and creates whose creating open is not attached yet (read
    /// without the lock on every request).
    pending: AtomicUsize,
    /// One batch at a time, so they reach the MDS in order.
    sending: tokio::sync::Mutex<()>,
}

impl DirLeases {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether changes wait to be sent.
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// `dir` was made by this mount: the first create in it asks for its lease ([`DirLeases::take_candidate`]),
    /// so directories that get no files cost nothing.
    pub fn note_made(&self, dir: Ino) {
        self.state().add_candidate(dir);
    }

    /// An unlink of `name` in `dir` went to the MDS (and succeeded). A lease held or being granted forgets
    /// the name. Without one, the next unlink there asks for the lease (a `rm -r`, a job cleaning up its
    /// files), once per directory, so mounts sharing a directory do not take it from each other over and
    /// over.
    pub fn note_unlinked(&self, dir: Ino, name: &str) {
        let mut st = self.state();
        if let Some(h) = st.dirs.get_mut(&dir) {
            if h.token == 0 {
                h.unlinked_meanwhile.push(name.to_string());
            } else {
                h.forget(name);
            }
            return;
        }
        if st.unlink_asked.len() >= CANDIDATES_MAX {
            st.unlink_asked.clear();
        }
        if st.unlink_asked.insert(dir) {
            st.add_candidate(dir);
        }
    }

    /// Takes `dir` off the candidates (asked once only): true if it was one.
    pub fn take_candidate(&self, dir: Ino) -> bool {
        self.state().candidates.remove(&dir)
    }

    /// Asks the MDS for the lease on `dir` (granted while no other client uses it). Its attributes and
    /// names come with it.
    pub async fn acquire(&self, mds: &MdsClient, dir: Ino) {
        {
            // Never served (no token yet); the grant brings the real attributes.
            let attr = Attr::new(dir, FileKind::Dir, 0, 0, 0, Timestamp::default());
            let mut st = self.state();
            let now = Instant::now();
            st.dirs.insert(
                dir,
                Held {
                    token: 0,
                    until: now,
                    attr,
                    names: HashMap::new(),
                    inos: Vec::new(),
                    last_used: now,
                    abandoned: false,
                    unlinked_meanwhile: Vec::new(),
                },
            );
        }
        let sent = Instant::now();
        let r = mds.lease_dir(dir).await;
        let give_back = {
            let mut st = self.state();
            match (r, st.dirs.get_mut(&dir)) {
                (Ok(l), Some(h)) if !h.abandoned => {
                    tracing::debug!(dir, names = l.entries.len(), "lease granted");
                    install(h, &l, sent);
                    None
                }
                (Ok(l), _) => {
                    tracing::debug!(dir, "lease granted, given back: a change came meanwhile");
                    st.dirs.remove(&dir);
                    Some(l.token)
                }
                (Err(e), _) => {
                    tracing::debug!(dir, "no lease: {e}");
                    st.dirs.remove(&dir);
                    None
                }
            }
        };
        if let Some(token) = give_back {
            let _ = mds.dir_batch(dir, token, Vec::new(), false).await;
        }
    }

    /// A lookup this mount can answer: a pending file, or (`Err`) a name a leased directory lacks.
    pub fn lookup(&self, dir: Ino, name: &str) -> Option<FsResult<Attr>> {
        let st = self.state();
        if let Some(ino) = st.by_name.get(&(dir, name.to_string())) {
            return st.files.get(ino).map(|p| Ok(p.attr.clone()));
        }
        let h = st.dirs.get(&dir)?;
        (h.token != 0 && Instant::now() < h.until && !h.names.contains_key(name))
            .then(|| Err(FsError::new(ErrorCode::NotFound, name.to_string())))
    }

    /// Whether `name` is in `dir`, leased here, and no change to it waits to be sent: the MDS answers a
    /// lookup of it as it would after those changes, so the lookup need not send them first.
    pub fn knows(&self, dir: Ino, name: &str) -> bool {
        let st = self.state();
        let Some(h) = st.dirs.get(&dir) else { return false };
        h.token != 0
            && Instant::now() < h.until
            && h.names.contains_key(name)
            && !st.by_name.contains_key(&(dir, name.to_string()))
    }

    /// Attributes this mount has authority over: a pending file's, a leased directory's.
    pub fn getattr(&self, ino: Ino) -> Option<Attr> {
        let st = self.state();
        if let Some(p) = st.files.get(&ino) {
            return Some(p.attr.clone());
        }
        st.dirs.get(&ino).filter(|h| h.token != 0 && Instant::now() < h.until).map(|h| h.attr.clone())
    }

    /// Creates `name` in `dir` here if this mount leases `dir` and the create needs nothing from the MDS:
    /// a regular file without set-id bits in a directory without set-group-id (whose group it would
    /// inherit), with an inode number in reserve and room in the batch. `fh` is the creating open's.
    pub fn try_create(
        &self,
        dir: Ino,
        name: &str,
        perm: u32,
        who: &Arc<Who>,
        flags: OpenFlags,
        fh: u64,
    ) -> Option<Attr> {
        if perm & 0o6000 != 0 {
            return None;
        }
        let mut st = self.state();
        if st.queue.len() >= BATCH_MAX {
            return None;
        }
        let now = Instant::now();
        let h = st.dirs.get_mut(&dir)?;
        if h.token == 0 || now >= h.until || h.attr.perm & 0o2000 != 0 || h.names.contains_key(name) {
            return None;
        }
        let ino = h.inos.pop()?;
        let time = Timestamp::now();
        let attr = Attr::new(ino, FileKind::File, perm, who.caller.uid, who.caller.gid, time);
        h.names.insert(name.to_string(), FileKind::File);
        h.attr.size += 1;
        h.attr.mtime = time;
        h.attr.ctime = time;
        h.last_used = now;
        st.queue.push(Queued::Create(ino));
        st.by_name.insert((dir, name.to_string()), ino);
        st.fhs.insert(fh, ino);
        let p = Pending {
            attr: attr.clone(),
            dir,
            name: name.to_string(),
            fh: Some(fh),
            who: who.clone(),
            flags,
            queued_at: now,
        };
        st.files.insert(ino, p);
        self.pending.fetch_add(1, Ordering::AcqRel);
        Some(attr)
    }

    /// Removes `name` from `dir` here if this mount leases `dir`, the name is there and is not a directory,
    /// and there is room in the batch: true when done, to be sent with the next batch. A file still
    /// pending keeps its create, sent before the unlink.
    pub fn try_unlink(&self, dir: Ino, name: &str, who: &Who) -> bool {
        let mut st = self.state();
        if st.queue.len() >= BATCH_MAX {
            return false;
        }
        let now = Instant::now();
        let Some(h) = st.dirs.get_mut(&dir) else { return false };
        if h.token == 0 || now >= h.until || h.names.get(name).is_none_or(|k| *k == FileKind::Dir) {
            return false;
        }
        h.forget(name);
        let time = Timestamp::now();
        h.attr.mtime = time;
        h.attr.ctime = time;
        h.last_used = now;
        if let Some(ino) = st.by_name.remove(&(dir, name.to_string())) {
            if let Some(p) = st.files.get_mut(&ino) {
                p.attr.nlink = 0;
                p.attr.ctime = time;
            }
        }
        st.queue.push(Queued::Unlink {
            dir,
            name: name.to_string(),
            queued_at: now,
            job: who.job.clone(),
            pid: who.pid,
            time,
        });
        self.pending.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Whether `fh` is a pending file's creating open.
    pub fn is_pending_fh(&self, fh: u64) -> bool {
        self.has_pending() && self.state().fhs.contains_key(&fh)
    }

    /// Closes a pending file's creating open if its batch has not left: true when done (nothing to send).
    pub fn release_fh(&self, fh: u64) -> bool {
        let mut st = self.state();
        let Some(&ino) = st.fhs.get(&fh) else { return false };
        if !st.queue.contains(&Queued::Create(ino)) {
            return false;
        }
        st.fhs.remove(&fh);
        if let Some(p) = st.files.get_mut(&ino) {
            p.fh = None;
        }
        true
    }

    /// A create in `dir` that went to the MDS itself: its name is now known here.
    pub fn note_created(&self, dir: Ino, name: &str) {
        if let Some(h) = self.state().dirs.get_mut(&dir) {
            h.names.insert(name.to_string(), FileKind::File);
        }
    }

    /// Gives up the lease on `dir` (`None`: on every directory) before another kind of change. What was
    /// created there and not sent yet goes with the giving up (a create may slip in between the caller's
    /// settle and this). Returns the creating opens to attach.
    pub async fn give_up(&self, mds: &MdsClient, dir: Option<Ino>) -> Vec<Opened> {
        let _one = self.sending.lock().await;
        let mut opened = Vec::new();
        self.give_up_locked(mds, dir, false, &mut opened).await;
        opened
    }

    /// [`DirLeases::give_up`] with `sending` held; `only_idle`: only leases unused for [`IDLE`].
    async fn give_up_locked(&self, mds: &MdsClient, dir: Option<Ino>, only_idle: bool, opened: &mut Vec<Opened>) {
        let released: Vec<(Ino, u64, Vec<Queued>)> = {
            let mut st = self.state();
            let dirs: Vec<Ino> = match dir {
                Some(d) => st.dirs.contains_key(&d).then_some(d).into_iter().collect(),
                None => st.dirs.keys().copied().collect(),
            };
            let now = Instant::now();
            let mut out = Vec::new();
            for d in dirs {
                let Some(h) = st.dirs.get_mut(&d) else { continue };
                if only_idle && (h.token == 0 || now - h.last_used < IDLE) {
                    continue;
                }
                if h.token == 0 {
                    h.abandoned = true;
                    continue;
                }
                let token = h.token;
                st.dirs.remove(&d);
                out.push((d, token, st.take_queued(d)));
            }
            out
        };
        for (d, token, ops) in released {
            self.send_once(mds, d, token, ops, false, opened).await;
        }
    }

    /// Whether this mount leases `dir` (`None`: any directory), granted or being granted.
    pub fn leases_any(&self, dir: Option<Ino>) -> bool {
        let st = self.state();
        match dir {
            Some(d) => st.dirs.contains_key(&d),
            None => !st.dirs.is_empty(),
        }
    }

    /// A creating open that came back from a batch is now an ordinary handle (or failed to become one).
    pub fn attached(&self, fh: u64) {
        if self.state().fhs.remove(&fh).is_some() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Sends every pending change (in order, a batch per directory) and returns the creating opens to
    /// attach to the handles the MDS opened. A change the MDS refused is logged and forgotten.
    pub async fn settle(&self, mds: &MdsClient) -> Vec<Opened> {
        if !self.has_pending() {
            return Vec::new();
        }
        let _one = self.sending.lock().await;
        let mut by_dir: Vec<(Ino, Vec<Queued>)> = Vec::new();
        {
            let mut st = self.state();
            for q in std::mem::take(&mut st.queue) {
                let Some(dir) = st.dir_of(&q) else { continue };
                match by_dir.iter_mut().find(|(d, _)| *d == dir) {
                    Some((_, v)) => v.push(q),
                    None => by_dir.push((dir, vec![q])),
                }
            }
        }
        let mut opened = Vec::new();
        for (dir, ops) in by_dir {
            self.send(mds, dir, ops, true, &mut opened).await;
        }
        opened
    }

    /// Sends `ops` (made in `dir`) and renews the lease (`keep`) or gives it up. When the reply says it
    /// was recalled, what was changed there meanwhile goes with the giving up.
    async fn send(&self, mds: &MdsClient, dir: Ino, ops: Vec<Queued>, keep: bool, opened: &mut Vec<Opened>) {
        let token = self.state().dirs.get(&dir).map_or(0, |h| h.token);
        if self.send_once(mds, dir, token, ops, keep, opened).await {
            let rest = self.state().take_queued(dir);
            // Another client waits for the directory: it goes on once this mount has stopped answering
            // for it, which the giving up tells the MDS.
            self.send_once(mds, dir, token, rest, false, opened).await;
        }
    }

    /// One batch; true when the lease was recalled (this mount has stopped using it, and must give it up).
    async fn send_once(
        &self,
        mds: &MdsClient,
        dir: Ino,
        token: u64,
        ops: Vec<Queued>,
        keep: bool,
        opened: &mut Vec<Opened>,
    ) -> bool {
        let (sent, entries): (Vec<Queued>, Vec<DirOp>) = {
            let st = self.state();
            ops.into_iter()
                .filter_map(|q| {
                    let op = match &q {
                        Queued::Create(ino) => {
                            let p = st.files.get(ino)?;
                            DirOp::Create(AsyncCreate {
                                ino: p.attr.ino,
                                name: p.name.clone(),
                                perm: p.attr.perm,
                                uid: p.attr.uid,
                                gid: p.attr.gid,
                                time: p.attr.crtime,
                                open: p.fh.map(|_| p.flags),
                                job: p.who.job.clone(),
                                pid: p.who.pid,
                            })
                        }
                        Queued::Unlink { name, job, pid, time, .. } => {
                            DirOp::Unlink { name: name.clone(), job: job.clone(), pid: *pid, time: *time }
                        }
                    };
                    Some((q, op))
                })
                .unzip()
        };
        let asked = Instant::now();
        let reply = mds.dir_batch(dir, token, entries, keep).await;
        let mut recalled = false;
        let mut st = self.state();
        let results: Vec<FsResult<Option<(u64, Layout)>>> = match reply {
            Ok((results, _, lease)) => {
                // Changes made while this batch was out are not in the MDS's attributes yet.
                let queued: i64 = st
                    .queue
                    .iter()
                    .filter(|q| st.dir_of(q) == Some(dir))
                    .map(|q| if matches!(q, Queued::Create(_)) { 1 } else { -1 })
                    .sum();
                match (lease, st.dirs.get_mut(&dir)) {
                    (Some(l), Some(h)) => {
                        let local = h.attr.clone();
                        install(h, &l, asked);
                        h.attr.size = h.attr.size.saturating_add_signed(queued);
                        h.attr.mtime = h.attr.mtime.max(local.mtime);
                        h.attr.ctime = h.attr.ctime.max(local.ctime);
                    }
                    _ => {
                        recalled = keep && st.dirs.remove(&dir).is_some();
                    }
                }
                let mut results: Vec<_> = results.into_iter().map(|r| r.result).collect();
                results.resize_with(sent.len(), || Err(FsError::protocol("the MDS answered fewer entries")));
                results
            }
            Err(e) => {
                // Retried through an MDS restart already: the lease is gone, and so are these changes.
                st.dirs.remove(&dir);
                sent.iter().map(|_| Err(e.clone())).collect()
            }
        };
        for (q, result) in sent.into_iter().zip(results) {
            match q {
                Queued::Create(ino) => self.created(&mut st, dir, ino, result, opened),
                Queued::Unlink { name, .. } => {
                    match result {
                        Ok(_) => {}
                        // Removed by an earlier send of this batch (or by another client after the lease
                        // was lost): gone either way.
                        Err(e) if e.code == ErrorCode::NotFound => {}
                        Err(e) => {
                            tracing::error!(dir, name = %name, "unlink lost: the MDS refused it: {e}");
                            if let Some(h) = st.dirs.get_mut(&dir) {
                                h.names.insert(name, FileKind::File);
                            }
                        }
                    }
                    self.pending.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        recalled
    }

    /// What became of a create sent in a batch.
    fn created(
        &self,
        st: &mut State,
        dir: Ino,
        ino: Ino,
        result: FsResult<Option<(u64, Layout)>>,
        opened: &mut Vec<Opened>,
    ) {
        let Some(p) = st.files.remove(&ino) else { return };
        let key = (p.dir, p.name.clone());
        if st.by_name.get(&key) == Some(&ino) {
            st.by_name.remove(&key);
        }
        match (result, p.fh) {
            // Still counted as pending (its handle is in `fhs`) until the caller attached it.
            (Ok(Some((handle, layout))), Some(fh)) => {
                opened.push(Opened { fh, who: p.who, flags: p.flags, attr: p.attr, layout, handle });
                return;
            }
            (Ok(_), _) => {}
            (Err(e), _) => {
                tracing::error!(dir, name = %p.name, ino, "create lost: the MDS refused it: {e}");
                // Unless the name was unlinked here since (and maybe made again).
                if p.attr.nlink > 0 && !st.by_name.contains_key(&key) {
                    if let Some(h) = st.dirs.get_mut(&dir) {
                        h.names.remove(&p.name);
                    }
                }
            }
        }
        if let Some(fh) = p.fh {
            st.fhs.remove(&fh);
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }

    /// The periodic work: sends changes older than [`BATCH_AGE`] (or a full batch), renews leases in
    /// use before they expire and gives up idle ones. Returns the creating opens to attach.
    pub async fn tick(&self, mds: &MdsClient) -> Vec<Opened> {
        let now = Instant::now();
        let (due, renew, idle) = {
            let st = self.state();
            let due = st.queue.len() >= BATCH_MAX / 2
                || st.queue.first().and_then(|q| st.queued_at(q)).is_some_and(|t| now - t >= BATCH_AGE);
            let mut renew = Vec::new();
            let mut idle = Vec::new();
            for (&d, h) in &st.dirs {
                if h.token == 0 {
                    continue;
                }
                if now - h.last_used >= IDLE {
                    idle.push(d);
                } else if h.until.saturating_duration_since(now) < MARGIN * 2 {
                    renew.push(d);
                }
            }
            (due, renew, idle)
        };
        let mut opened = if due { self.settle(mds).await } else { Vec::new() };
        for d in renew {
            let _one = self.sending.lock().await;
            self.send(mds, d, Vec::new(), true, &mut opened).await;
        }
        for d in idle {
            let _one = self.sending.lock().await;
            // Checked again under the lock: a create may have used it meanwhile.
            self.give_up_locked(mds, Some(d), true, &mut opened).await;
        }
        opened
    }
}

/// Takes a grant or renewal: usable until `MARGIN` before its end, counted from when it was asked for.
fn install(h: &mut Held, l: &DirLease, sent: Instant) {
    h.token = l.token;
    h.until = sent + Duration::from_millis(u64::from(l.valid_ms)).saturating_sub(MARGIN);
    h.inos.extend_from_slice(&l.inos);
    h.attr = l.attr.clone();
    h.names.extend(l.entries.iter().cloned());
    for name in std::mem::take(&mut h.unlinked_meanwhile) {
        h.forget(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::types::Caller;

    /// A lease as if the MDS had just granted it.
    fn leases_with(dir: Ino, perm: u32, inos: Vec<Ino>, valid: Duration) -> DirLeases {
        let l = DirLeases::default();
        let now = Instant::now();
        l.state().dirs.insert(
            dir,
            Held {
                token: 1,
                until: now + valid,
                attr: Attr::new(dir, FileKind::Dir, perm, 0, 0, Timestamp::now()),
                names: HashMap::new(),
                inos,
                last_used: now,
                abandoned: false,
                unlinked_meanwhile: Vec::new(),
            },
        );
        l
    }

    fn who(uid: u32) -> Arc<Who> {
        Arc::new(Who { caller: Caller { uid, gid: uid + 1, groups: vec![] }, job: "j".into(), pid: uid })
    }

    const RW: OpenFlags = OpenFlags { read: true, write: true, truncate: false };

    #[test]
    fn a_leased_directory_answers_lookups_and_creates_here() {
        let l = leases_with(10, 0o755, vec![100, 101], Duration::from_secs(1));
        assert_eq!(l.lookup(10, "x").unwrap().unwrap_err().code, ErrorCode::NotFound);
        assert!(l.lookup(11, "x").is_none(), "not leased: the MDS answers");
        let a = l.try_create(10, "x", 0o640, &who(1000), RW, 7).unwrap();
        assert_eq!((a.ino, a.uid, a.gid, a.perm, a.kind), (101, 1000, 1001, 0o640, FileKind::File));
        assert_eq!(l.lookup(10, "x").unwrap().unwrap().ino, 101);
        assert_eq!(l.getattr(101).unwrap().ino, 101);
        assert_eq!(l.getattr(10).unwrap().size, 1, "the directory counts the new entry");
        assert!(l.has_pending() && l.is_pending_fh(7));
        assert!(l.try_create(10, "x", 0o640, &who(1000), RW, 8).is_none(), "the name exists: the MDS says EEXIST");
        assert!(l.try_create(10, "s", 0o4755, &who(1000), RW, 8).is_none(), "set-id bits: the MDS decides");
        l.note_created(10, "synced");
        assert!(l.lookup(10, "synced").is_none(), "a name known to exist: the MDS has its attributes");
        assert!(l.try_create(10, "y", 0o600, &who(0), RW, 9).is_some());
        assert!(l.try_create(10, "z", 0o600, &who(0), RW, 10).is_none(), "no inode number left");
        // Closing a create not sent yet needs nothing from the MDS; an unknown handle is not ours.
        assert!(l.release_fh(7));
        assert!(!l.is_pending_fh(7));
        assert!(!l.release_fh(12345));
    }

    #[test]
    fn a_leased_directory_unlinks_here_in_order_with_its_creates() {
        let l = leases_with(10, 0o755, vec![100, 101, 102], Duration::from_secs(1));
        assert!(!l.try_unlink(10, "x", &who(1)), "not there: the MDS says ENOENT");
        assert!(!l.try_unlink(11, "x", &who(1)), "not leased");
        l.try_create(10, "x", 0o640, &who(1000), RW, 7).unwrap();
        l.note_created(10, "synced");
        assert!(l.try_unlink(10, "x", &who(1)));
        assert_eq!(l.lookup(10, "x").unwrap().unwrap_err().code, ErrorCode::NotFound, "gone at once");
        assert_eq!(l.getattr(102).unwrap().nlink, 0, "the open file lives on, unlinked");
        assert!(l.try_unlink(10, "synced", &who(1)), "a name the MDS has");
        assert_eq!(l.getattr(10).unwrap().size, 0);
        let again = l.try_create(10, "x", 0o600, &who(1000), RW, 8).unwrap();
        assert!(!l.knows(10, "x"), "its create waits to be sent");
        assert_eq!(l.lookup(10, "x").unwrap().unwrap().ino, again.ino, "the name made again is the new file");
        let st = l.state();
        let q: Vec<_> = st.queue.iter().map(|q| (st.dir_of(q), matches!(q, Queued::Create(_)))).collect();
        assert_eq!(q, vec![(Some(10), true), (Some(10), false), (Some(10), false), (Some(10), true)]);
        drop(st);
        assert!(l.has_pending());
        // The creating open of a file unlinked here still closes without the MDS while its create waits.
        assert!(l.release_fh(7));
    }

    #[test]
    fn a_name_removed_while_the_grant_is_on_its_way_stays_removed() {
        let l = leases_with(10, 0o755, vec![], Duration::from_secs(1));
        l.state().dirs.get_mut(&10).unwrap().token = 0;
        l.note_unlinked(10, "gone");
        let mut attr = Attr::new(10, FileKind::Dir, 0o755, 0, 0, Timestamp::now());
        attr.size = 3;
        let entries =
            vec![("gone".into(), FileKind::File), ("kept".into(), FileKind::File), ("d".into(), FileKind::Dir)];
        let grant = DirLease { dir: 10, token: 5, valid_ms: 2000, inos: vec![100], attr, entries };
        install(l.state().dirs.get_mut(&10).unwrap(), &grant, Instant::now());
        assert_eq!(l.lookup(10, "gone").unwrap().unwrap_err().code, ErrorCode::NotFound);
        assert!(l.lookup(10, "kept").is_none(), "known: the MDS has its attributes");
        assert!(l.knows(10, "kept") && !l.knows(10, "gone") && !l.knows(11, "kept"));
        assert_eq!(l.getattr(10).unwrap().size, 2);
        assert!(!l.try_unlink(10, "d", &who(1)), "a directory: the MDS (or the kernel) refuses");
        assert!(l.try_unlink(10, "kept", &who(1)));
        // Granted now: a name removed through the MDS goes at once.
        l.try_create(10, "x", 0o600, &who(1), RW, 1).unwrap();
        l.note_unlinked(10, "x");
        assert_eq!(l.getattr(10).unwrap().size, 1);
    }

    #[test]
    fn unlinks_wait_for_the_mds_beyond_a_full_batch_or_an_expired_lease() {
        let l = leases_with(10, 0o755, (1000..1000 + BATCH_MAX as u64).collect(), Duration::from_secs(1));
        for i in 0..BATCH_MAX {
            l.try_create(10, &format!("f{i}"), 0o600, &who(1), RW, i as u64).unwrap();
        }
        assert!(!l.try_unlink(10, "f0", &who(1)), "the batch is full");
        assert_eq!(l.lookup(10, "f0").unwrap().unwrap().ino, 1000 + BATCH_MAX as u64 - 1);
        let l = leases_with(10, 0o755, vec![], Duration::ZERO);
        l.note_created(10, "a");
        assert!(!l.try_unlink(10, "a", &who(1)));
    }

    #[test]
    fn a_directory_made_here_asks_for_its_lease_once() {
        let l = DirLeases::default();
        l.note_made(10);
        assert!(!l.take_candidate(11), "not made here");
        assert!(l.take_candidate(10));
        assert!(!l.take_candidate(10), "asked once only");
        l.note_unlinked(12, "a");
        assert!(l.take_candidate(12), "an unlink that went to the MDS");
        l.note_unlinked(12, "b");
        assert!(!l.take_candidate(12), "once per directory");
    }

    #[test]
    fn no_local_answers_from_an_expired_lease_or_a_setgid_directory() {
        let l = leases_with(10, 0o755, vec![100], Duration::ZERO);
        assert!(l.lookup(10, "x").is_none());
        assert!(l.getattr(10).is_none());
        assert!(l.try_create(10, "x", 0o640, &who(1), RW, 1).is_none());
        let l = leases_with(10, 0o2775, vec![100], Duration::from_secs(1));
        assert!(l.try_create(10, "x", 0o640, &who(1), RW, 1).is_none(), "the group comes from the directory");
    }
}
