//! Spec: ../shared/specs/characterization.md (thesis: El Sayed 2017, chapter 3).
//!
//! The I/O criteria of a job as pure functions over what servers count: a time series of Δt windows
//! (bytes and requests, in total and per process), request-size histograms, the processes touching each
//! file and the offsets they touch. Used by the MDS (per-job series and metrics, PerSched's detector),
//! the data servers and forwarding nodes (the online spatial tracker, [`crate::counters`]) and the CLI
//! (`tessera report`); what it reads are messages of `tessera_proto::msg` ([`Window`] and [`Spatial`] are
//! re-exported here).
//!
//! Category 1 — volume and rate: [`Volume`], [`bandwidth`], [`iops`], [`intensity`].
//! Category 2 — pattern: [`SizeHistogram`] distribution and [`cdf`], [`small_fraction`], [`read_share`],
//! [`file_access`] (task-local vs shared, A_f), [`classify`] / [`SpatialTracker`] (spatial class),
//! [`burstiness`].
//! Category 3 — parallelism: [`parallelism`] (P'_IO, P_IO), [`same_file_concurrency`].

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use tessera_proto::msg::SizeHistogram;
pub use tessera_proto::msg::{ProcWindow, Spatial, Window};

/// Default window length Δt, seconds.
pub const DT_DEFAULT_S: f64 = 1.0;
/// Default threshold c: a process "does I/O" in a window when it moved more than this many bytes.
pub const C_DEFAULT: u64 = 1 << 20;
/// Default s_small: requests of at most this many bytes are small.
pub const SMALL_DEFAULT: u64 = 4096;

/// Which direction a criterion looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Read,
    Write,
    Both,
}

/// Windows of `factor` times the length: `factor` consecutive windows summed (the last one partial).
pub fn coarsen(series: &[Window], factor: usize) -> Vec<Window> {
    let factor = factor.max(1);
    series
        .chunks(factor)
        .map(|c| {
            let mut w = Window::default();
            for x in c {
                w.add(x);
            }
            w
        })
        .collect()
}

/// h_{Δt,p}(t) for every process of a window: the processes that moved more than `c` bytes (reads or
/// writes, as `dir` says). Without per-process numbers the job is one process (index 0).
fn active(w: &Window, c: u64, dir: Dir) -> BTreeSet<u32> {
    let moved = |r: u64, wr: u64| match dir {
        Dir::Read => r > c,
        Dir::Write => wr > c,
        Dir::Both => r > c || wr > c,
    };
    if w.procs.is_empty() {
        return if moved(w.read_bytes, w.write_bytes) { BTreeSet::from([0]) } else { BTreeSet::new() };
    }
    w.procs.iter().filter(|p| moved(p.read_bytes, p.write_bytes)).map(|p| p.process).collect()
}

/// H_{Δt}(t) for each window (eq. 3.31): some process moved more than `c`.
pub fn h_series(series: &[Window], c: u64, dir: Dir) -> Vec<bool> {
    series.iter().map(|w| !active(w, c, dir).is_empty()).collect()
}

/// I/O intensity (eq. 3.32): I = Δt · Σ_t H(t) / duration. `duration_s` 0 gives 0.
pub fn intensity(series: &[Window], dt_s: f64, duration_s: f64, c: u64, dir: Dir) -> f64 {
    if duration_s <= 0.0 {
        return 0.0;
    }
    let on = h_series(series, c, dir).iter().filter(|h| **h).count() as f64;
    (dt_s * on / duration_s).min(1.0)
}

/// Burstiness (eq. 3.56): ρ = 1 − tanh(l_IO / l_noIO) with the mean lengths of the runs of windows
/// with and without I/O; 0 when there is no window without I/O.
pub fn burstiness(h: &[bool]) -> f64 {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for r in runs(h) {
        if r.io {
            on.push(r.len)
        } else {
            off.push(r.len)
        }
    }
    let mean = |v: &[usize]| if v.is_empty() { 0.0 } else { v.iter().sum::<usize>() as f64 / v.len() as f64 };
    let (l_io, l_no) = (mean(&on), mean(&off));
    if l_no > 0.0 {
        1.0 - (l_io / l_no).tanh()
    } else {
        0.0
    }
}

/// A maximal run of consecutive windows of H(t) with the same value (I/O or none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Index of its first window.
    pub start: usize,
    /// Windows in it (at least one).
    pub len: usize,
    /// Windows with I/O (a burst) or without (a gap).
    pub io: bool,
}

/// The runs of `h` in order: what [`burstiness`] averages, and the bursts and gaps PerSched's detection
/// of periodic jobs looks at.
pub fn runs(h: &[bool]) -> Vec<Run> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < h.len() {
        let j = h[i..].iter().position(|x| *x != h[i]).map_or(h.len(), |k| i + k);
        out.push(Run { start: i, len: j - i, io: h[i] });
        i = j;
    }
    out
}

/// Parallel I/O intensity (eqs. 3.59–3.62): P'_IO = Σ_t ρ(t) / Σ_t H(t) with ρ(t) the fraction of the
/// `p` processes active in window t, and P_IO = (P·P'_IO − 1)/(P − 1) (0 when P'_IO = 0 or P ≤ 1).
pub fn parallelism(series: &[Window], p: u32, c: u64, dir: Dir) -> (f64, f64) {
    if p == 0 {
        return (0.0, 0.0);
    }
    let (mut rho, mut h) = (0.0, 0usize);
    for w in series {
        let a = active(w, c, dir).len();
        if a > 0 {
            rho += a as f64 / f64::from(p);
            h += 1;
        }
    }
    let pp = if h == 0 { 0.0 } else { rho / h as f64 };
    let pio =
        if pp == 0.0 || p <= 1 { 0.0 } else { ((f64::from(p) * pp - 1.0) / (f64::from(p) - 1.0)).clamp(0.0, 1.0) };
    (pp, pio)
}

/// Totals of a job (classifications 1.1 and 1.2).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Volume {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_ops: u64,
    pub write_ops: u64,
}

/// Maximum over windows and mean over the run, per second (classifications 1.3 and 1.4).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct Rate {
    pub max: f64,
    pub mean: f64,
}

fn rate(series: &[Window], dt_s: f64, total: u64, duration_s: f64, f: impl Fn(&Window) -> u64) -> Rate {
    let max = if dt_s > 0.0 { series.iter().map(|w| f(w) as f64 / dt_s).fold(0.0, f64::max) } else { 0.0 };
    let mean = if duration_s > 0.0 { total as f64 / duration_s } else { 0.0 };
    Rate { max, mean }
}

/// Bandwidth B_max (max over Δt windows) and B̄ = S / duration, bytes per second.
pub fn bandwidth(series: &[Window], v: &Volume, dt_s: f64, duration_s: f64, dir: Dir) -> Rate {
    match dir {
        Dir::Read => rate(series, dt_s, v.read_bytes, duration_s, |w| w.read_bytes),
        Dir::Write => rate(series, dt_s, v.write_bytes, duration_s, |w| w.write_bytes),
        Dir::Both => rate(series, dt_s, v.read_bytes + v.write_bytes, duration_s, |w| w.read_bytes + w.write_bytes),
    }
}

/// IOPS Γ_max and Γ̄, requests per second.
pub fn iops(series: &[Window], v: &Volume, dt_s: f64, duration_s: f64, dir: Dir) -> Rate {
    match dir {
        Dir::Read => rate(series, dt_s, v.read_ops, duration_s, |w| w.read_ops),
        Dir::Write => rate(series, dt_s, v.write_ops, duration_s, |w| w.write_ops),
        Dir::Both => rate(series, dt_s, v.read_ops + v.write_ops, duration_s, |w| w.read_ops + w.write_ops),
    }
}

/// The distribution p(s) over the histogram's buckets (eq. 3.33), and its CDF.
pub fn distribution(h: &SizeHistogram) -> Vec<f64> {
    let n = h.total();
    h.counts.iter().map(|c| if n == 0 { 0.0 } else { *c as f64 / n as f64 }).collect()
}

/// The CDF of a size histogram: the share of requests in each bucket or a smaller one.
pub fn cdf(h: &SizeHistogram) -> Vec<f64> {
    let mut acc = 0.0;
    distribution(h)
        .into_iter()
        .map(|p| {
            acc += p;
            acc
        })
        .collect()
}

/// f(s_small) (eq. 3.35): share of `small` requests among `total`.
pub fn small_fraction(small: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        small as f64 / total as f64
    }
}

/// Share of reads (eqs. 3.38 and 3.40): (by request count, by bytes).
pub fn read_share(v: &Volume) -> (f64, f64) {
    let share = |r: u64, w: u64| if r + w == 0 { 0.0 } else { r as f64 / (r + w) as f64 };
    (share(v.read_ops, v.write_ops), share(v.read_bytes, v.write_bytes))
}

/// Task-local (one process) or shared (classification 2.6).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    #[serde(rename = "task-local")]
    TaskLocal,
    #[serde(rename = "shared")]
    Shared,
}

/// A file's access class and A_f = processes touching it / P (eq. 3.49).
pub fn file_access(processes_touching: usize, p: u32) -> (Access, f64) {
    let access = if processes_touching > 1 { Access::Shared } else { Access::TaskLocal };
    let af = if p == 0 { 0.0 } else { processes_touching as f64 / f64::from(p) };
    (access, af)
}

/// Same-file access concurrency (eq. 3.64) of one file: A(f, t) for each window, from the processes
/// that sent requests to it in that window.
pub fn same_file_concurrency(procs_per_window: &[BTreeSet<u32>], p: u32) -> Vec<f64> {
    procs_per_window.iter().map(|s| if p == 0 { 0.0 } else { s.len() as f64 / f64::from(p) }).collect()
}

/// Longest period looked for in nested strides.
pub const MAX_PERIOD: usize = 32;

/// Classifies requests `(offset, len)` in the order they were issued by one process to one file.
pub fn classify(requests: &[(u64, u64)]) -> Spatial {
    let mut t = SpatialTracker::default();
    for &(o, l) in requests {
        t.push(o, l);
    }
    t.class()
}

/// Requests held back and released in offset order (requests of one process that were in flight
/// together may be served out of their issue order).
pub const REORDER: usize = 16;

/// The spatial class kept online, in constant space (a data server keeps one per stream): flags over
/// all steps between request starts, and the last [`2 × MAX_PERIOD`](MAX_PERIOD) steps for the period.
/// Requests pass a window of [`REORDER`] sorted by offset first.
#[derive(Clone, Debug, Default)]
pub struct SpatialTracker {
    n: u64,
    last: Option<(u64, u64)>,
    first_step: Option<i128>,
    all_contiguous: bool,
    all_same_step: bool,
    all_forward: bool,
    /// Smallest period (≥ 2) consistent with every step seen; None: none up to MAX_PERIOD.
    period: Option<usize>,
    recent: std::collections::VecDeque<i128>,
    pending: std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>,
}

impl SpatialTracker {
    pub fn push(&mut self, offset: u64, len: u64) {
        self.pending.push(std::cmp::Reverse((offset, len)));
        if self.pending.len() > REORDER {
            if let Some(std::cmp::Reverse((o, l))) = self.pending.pop() {
                self.feed(o, l);
            }
        }
    }

    fn feed(&mut self, offset: u64, len: u64) {
        self.n += 1;
        let Some((lo, ll)) = self.last.replace((offset, len)) else {
            (self.all_contiguous, self.all_same_step, self.all_forward, self.period) = (true, true, true, Some(2));
            return;
        };
        let step = i128::from(offset) - i128::from(lo);
        self.all_contiguous &= offset == lo.saturating_add(ll);
        self.all_forward &= step > 0;
        let first = *self.first_step.get_or_insert(step);
        self.all_same_step &= step == first;
        self.recent.push_back(step);
        if self.recent.len() > 2 * MAX_PERIOD {
            self.recent.pop_front();
        }
        // The new step must repeat the one a period back; else the next period fitting what is kept.
        let fits = |p: usize, r: &std::collections::VecDeque<i128>| {
            let k = r.len();
            (p..k).all(|i| r[i] == r[i - p]) || k <= p
        };
        while let Some(p) = self.period {
            if fits(p, &self.recent) {
                break;
            }
            self.period = if p < MAX_PERIOD { Some(p + 1) } else { None };
        }
    }

    /// Requests seen.
    pub fn count(&self) -> u64 {
        self.n + self.pending.len() as u64
    }

    pub fn class(&self) -> Spatial {
        if !self.pending.is_empty() {
            let mut t = self.clone();
            while let Some(std::cmp::Reverse((o, l))) = t.pending.pop() {
                t.feed(o, l);
            }
            return t.class();
        }
        if self.n <= 1 || self.all_contiguous {
            return Spatial::Contiguous;
        }
        let step = self.first_step.unwrap_or(0);
        if self.all_same_step && step > 0 {
            return Spatial::Strided(step as u64);
        }
        // A period must have been seen repeating at least twice to count.
        match self.period {
            Some(p) if self.all_forward && self.recent.len() >= 2 * p => Spatial::NestedStrided,
            _ => Spatial::Random,
        }
    }
}

/// Process ids `(client, pid)` of a job numbered 0.. in the order first seen (P = their count).
#[derive(Clone, Debug, Default)]
pub struct Processes {
    ids: BTreeMap<(u64, u32), u32>,
}

impl Processes {
    pub fn index(&mut self, client: u64, pid: u32) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry((client, pid)).or_insert(next)
    }

    pub fn count(&self) -> u32 {
        self.ids.len() as u32
    }
}

/// One file of a job's report (the JSON names are `tessera report`'s contract).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FileReport {
    pub path: String,
    pub processes: u32,
    pub access: Access,
    /// A_f: processes touching the file / P.
    pub access_fraction: f64,
    /// "contiguous", "strided", "nested-strided" or "random"; the most general of its processes'.
    pub spatial: String,
    /// The stride of simple strided access, bytes (null otherwise).
    pub stride_bytes: Option<u64>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Largest fraction of the processes accessing it in one window (trace-based; null without).
    pub concurrency_max: Option<f64>,
}

/// `tessera report`'s JSON document: the criteria of one job. The names of the first fields are fixed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct JobReport {
    pub job: String,
    pub duration_s: f64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub requests_read: u64,
    pub requests_written: u64,
    pub bandwidth_max_mib_s: f64,
    pub bandwidth_mean_mib_s: f64,
    pub iops_max: f64,
    pub iops_mean: f64,
    pub intensity: f64,
    pub burstiness: f64,
    /// P_IO (normalised parallel I/O intensity).
    pub parallelism: f64,
    pub small_request_fraction: f64,
    pub read_share_bytes: f64,
    pub files: Vec<FileReport>,
    // Further criteria.
    pub processes: u32,
    pub dt_s: f64,
    pub threshold_bytes: u64,
    pub small_request_bytes: u64,
    pub bandwidth_read_max_mib_s: f64,
    pub bandwidth_write_max_mib_s: f64,
    pub bandwidth_read_mean_mib_s: f64,
    pub bandwidth_write_mean_mib_s: f64,
    pub iops_read_max: f64,
    pub iops_write_max: f64,
    pub intensity_read: f64,
    pub intensity_write: f64,
    pub burstiness_read: f64,
    pub burstiness_write: f64,
    /// P'_IO (unnormalised).
    pub parallelism_raw: f64,
    pub small_request_fraction_read: f64,
    pub small_request_fraction_write: f64,
    pub read_share_requests: f64,
    pub files_created: u64,
    pub files_opened: u64,
    pub files_closed: u64,
    pub files_removed: u64,
    pub files_task_local: u64,
    pub files_shared: u64,
    /// Bucket labels and the read and write request counts and CDFs per bucket.
    pub size_buckets: Vec<String>,
    pub read_sizes: Vec<u64>,
    pub write_sizes: Vec<u64>,
    pub read_size_cdf: Vec<f64>,
    pub write_size_cdf: Vec<f64>,
    /// MiB/s read and written per window (the bandwidth plot).
    pub read_mib_s_series: Vec<f64>,
    pub write_mib_s_series: Vec<f64>,
    /// Where the spatial classes come from: "trace" or "counters".
    pub spatial_source: String,
}

/// What a job report is computed from.
#[derive(Clone, Debug, Default)]
pub struct JobInputs {
    pub job: String,
    pub duration_s: f64,
    pub dt_s: f64,
    pub c: u64,
    pub small_bytes: u64,
    pub series: Vec<Window>,
    pub volume: Volume,
    pub read_sizes: SizeHistogram,
    pub write_sizes: SizeHistogram,
    pub read_small: u64,
    pub write_small: u64,
    /// P: processes of the job.
    pub processes: u32,
    pub files: Vec<FileReport>,
    pub files_created: u64,
    pub files_opened: u64,
    pub files_closed: u64,
    pub files_removed: u64,
    pub spatial_source: String,
}

const MIB: f64 = (1u64 << 20) as f64;

/// Computes every criterion of a job.
pub fn report(i: &JobInputs) -> JobReport {
    let (dt, d, c) = (i.dt_s, i.duration_s, i.c);
    let bw = |dir| bandwidth(&i.series, &i.volume, dt, d, dir);
    let io = |dir| iops(&i.series, &i.volume, dt, d, dir);
    let (bwb, bwr, bww) = (bw(Dir::Both), bw(Dir::Read), bw(Dir::Write));
    let (iob, ior, iow) = (io(Dir::Both), io(Dir::Read), io(Dir::Write));
    let (pp, pio) = parallelism(&i.series, i.processes, c, Dir::Both);
    let (rs_ops, rs_bytes) = read_share(&i.volume);
    let total_ops = i.volume.read_ops + i.volume.write_ops;
    JobReport {
        job: i.job.clone(),
        duration_s: d,
        bytes_read: i.volume.read_bytes,
        bytes_written: i.volume.write_bytes,
        requests_read: i.volume.read_ops,
        requests_written: i.volume.write_ops,
        bandwidth_max_mib_s: bwb.max / MIB,
        bandwidth_mean_mib_s: bwb.mean / MIB,
        iops_max: iob.max,
        iops_mean: iob.mean,
        intensity: intensity(&i.series, dt, d, c, Dir::Both),
        burstiness: burstiness(&h_series(&i.series, c, Dir::Both)),
        parallelism: pio,
        small_request_fraction: small_fraction(i.read_small + i.write_small, total_ops),
        read_share_bytes: rs_bytes,
        files: i.files.clone(),
        processes: i.processes,
        dt_s: dt,
        threshold_bytes: c,
        small_request_bytes: i.small_bytes,
        bandwidth_read_max_mib_s: bwr.max / MIB,
        bandwidth_write_max_mib_s: bww.max / MIB,
        bandwidth_read_mean_mib_s: bwr.mean / MIB,
        bandwidth_write_mean_mib_s: bww.mean / MIB,
        iops_read_max: ior.max,
        iops_write_max: iow.max,
        intensity_read: intensity(&i.series, dt, d, c, Dir::Read),
        intensity_write: intensity(&i.series, dt, d, c, Dir::Write),
        burstiness_read: burstiness(&h_series(&i.series, c, Dir::Read)),
        burstiness_write: burstiness(&h_series(&i.series, c, Dir::Write)),
        parallelism_raw: pp,
        small_request_fraction_read: small_fraction(i.read_small, i.volume.read_ops),
        small_request_fraction_write: small_fraction(i.write_small, i.volume.write_ops),
        read_share_requests: rs_ops,
        files_created: i.files_created,
        files_opened: i.files_opened,
        files_closed: i.files_closed,
        files_removed: i.files_removed,
        files_task_local: i.files.iter().filter(|f| f.access == Access::TaskLocal).count() as u64,
        files_shared: i.files.iter().filter(|f| f.access == Access::Shared).count() as u64,
        size_buckets: SizeHistogram::LABELS.iter().map(|s| s.to_string()).collect(),
        read_sizes: i.read_sizes.counts.to_vec(),
        write_sizes: i.write_sizes.counts.to_vec(),
        read_size_cdf: cdf(&i.read_sizes),
        write_size_cdf: cdf(&i.write_sizes),
        read_mib_s_series: i.series.iter().map(|w| w.read_bytes as f64 / MIB / dt.max(1e-9)).collect(),
        write_mib_s_series: i.series.iter().map(|w| w.write_bytes as f64 / MIB / dt.max(1e-9)).collect(),
        spatial_source: i.spatial_source.clone(),
    }
}

/// One request of a trace, its offset in the file.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TracedRequest {
    pub ino: u64,
    pub client: u64,
    pub pid: u32,
    pub offset: u64,
    pub len: u64,
    pub write: bool,
    pub start_us: u64,
}

/// What a trace tells of one file: its processes, the most general spatial class of its processes'
/// reads and writes (each in start order), and the largest same-file concurrency A(f, t) over windows
/// of `dt_us` among `p` processes.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedFile {
    pub processes: u32,
    pub spatial: Spatial,
    pub concurrency_max: f64,
}

/// Files of a trace (classification 2.7 on file offsets, 3.4).
pub fn trace_files(reqs: &[TracedRequest], p: u32, dt_us: u64) -> BTreeMap<u64, TracedFile> {
    /// (ino, client, pid, write) → (start, offset, len) of its requests.
    type Streams = BTreeMap<(u64, u64, u32, bool), Vec<(u64, u64, u64)>>;
    /// ino → processes, merged class, concurrency.
    type Files = BTreeMap<u64, (BTreeSet<(u64, u32)>, Option<Spatial>, f64)>;
    let mut streams: Streams = BTreeMap::new();
    let mut windows: BTreeMap<(u64, u64), BTreeSet<(u64, u32)>> = BTreeMap::new();
    for r in reqs {
        streams.entry((r.ino, r.client, r.pid, r.write)).or_default().push((r.start_us, r.offset, r.len));
        windows.entry((r.ino, r.start_us / dt_us.max(1))).or_default().insert((r.client, r.pid));
    }
    let mut out: Files = BTreeMap::new();
    for ((ino, client, pid, _), mut v) in streams {
        v.sort();
        let class = classify(&v.iter().map(|&(_, o, l)| (o, l)).collect::<Vec<_>>());
        let e = out.entry(ino).or_default();
        e.0.insert((client, pid));
        e.1 = Some(e.1.map_or(class, |c| c.merge(class)));
    }
    for ((ino, _), procs) in windows {
        let a = if p == 0 { 0.0 } else { procs.len() as f64 / f64::from(p) };
        if let Some(e) = out.get_mut(&ino) {
            e.2 = e.2.max(a);
        }
    }
    out.into_iter()
        .map(|(ino, (procs, s, c))| {
            (ino, TracedFile { processes: procs.len() as u32, spatial: s.unwrap_or_default(), concurrency_max: c })
        })
        .collect()
}

/// Uses a trace's classes for the files it saw (spatial class, stride, concurrency).
pub fn apply_trace(files: &mut [FileReport], traced: &BTreeMap<u64, TracedFile>, ino_of: impl Fn(&str) -> Option<u64>) {
    for f in files {
        if let Some(t) = ino_of(&f.path).and_then(|i| traced.get(&i)) {
            f.spatial = t.spatial.name().to_string();
            f.stride_bytes = t.spatial.stride();
            f.concurrency_max = Some(t.concurrency_max);
        }
    }
}

/// Most windows a job's series is filled out to (longer idle spans are not filled).
const MAX_FILLED: u64 = 1 << 20;

/// What `tessera report` computes a job's criteria from: the MDS's [`JobInfo`](tessera_proto::msg::JobInfo)
/// (registry, counters summed over data servers, series with the windows without I/O filled in, files
/// with their processes and spatial classes from the data servers' per-stream counters).
pub fn inputs_from_info(info: &tessera_proto::msg::JobInfo, c: u64, small_bytes: u64) -> JobInputs {
    let dt_us = info.dt_us.max(1);
    let mut total = tessera_proto::msg::JobDetail::default();
    for (_, d) in &info.nodes {
        total.add(d);
    }
    // The windows from the job's first activity to its last, those without I/O as zeros.
    let first = info.first_unix_us.min(info.series.first().map_or(u64::MAX, |p| p.start_unix_us));
    let last = info.last_unix_us.max(info.series.last().map_or(0, |p| p.start_unix_us));
    let (start, end) = (first / dt_us, last / dt_us);
    let mut series;
    let duration_s;
    if first <= last && end - start < MAX_FILLED {
        series = vec![Window::default(); (end - start + 1) as usize];
        for p in &info.series {
            let i = (p.start_unix_us / dt_us).saturating_sub(start) as usize;
            if let Some(w) = series.get_mut(i) {
                w.add(&p.window);
            }
        }
        duration_s = series.len() as f64 * dt_us as f64 / 1e6;
    } else {
        series = info.series.iter().map(|p| p.window.clone()).collect();
        duration_s = last.saturating_sub(first) as f64 / 1e6;
    }
    // Files: the processes touching each and the most general spatial class of their streams.
    /// Per file: its processes, the merged class, bytes read and written.
    type FileAcc = (BTreeSet<(u64, u32)>, Option<Spatial>, u64, u64);
    let mut per_file: BTreeMap<u64, FileAcc> = BTreeMap::new();
    for s in &total.streams {
        let e = per_file.entry(s.ino).or_default();
        e.0.insert((s.client, s.pid));
        e.1 = Some(e.1.map_or(s.spatial, |c| c.merge(s.spatial)));
        if s.write {
            e.3 += s.bytes;
        } else {
            e.2 += s.bytes;
        }
    }
    let p = info.processes.len() as u32;
    let mut files: Vec<FileReport> = info
        .files
        .iter()
        .map(|f| (f.ino, f.path.clone()))
        .chain(per_file.keys().filter(|i| !info.files.iter().any(|f| f.ino == **i)).map(|i| (*i, format!("inode {i}"))))
        .filter_map(|(ino, path)| {
            let (procs, spatial, rb, wb) = per_file.get(&ino)?.clone();
            let (access, af) = file_access(procs.len(), p.max(procs.len() as u32));
            let spatial = spatial.unwrap_or_default();
            Some(FileReport {
                path,
                processes: procs.len() as u32,
                access,
                access_fraction: af,
                spatial: spatial.name().to_string(),
                stride_bytes: spatial.stride(),
                read_bytes: rb,
                write_bytes: wb,
                concurrency_max: None,
            })
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let count = |f: fn(&tessera_proto::msg::JobFile) -> bool| info.files.iter().filter(|x| f(x)).count() as u64;
    JobInputs {
        job: info.job.clone(),
        duration_s,
        dt_s: dt_us as f64 / 1e6,
        c,
        small_bytes,
        series,
        volume: Volume {
            read_bytes: total.read_bytes,
            write_bytes: total.write_bytes,
            read_ops: total.read_ops,
            write_ops: total.write_ops,
        },
        read_sizes: total.read_sizes.clone(),
        write_sizes: total.write_sizes.clone(),
        read_small: total.read_small,
        write_small: total.write_small,
        processes: p,
        files,
        files_created: info.meta.creates.max(count(|f| f.created)),
        files_opened: info.meta.opens,
        files_closed: info.meta.closes,
        files_removed: info.meta.unlinks,
        spatial_source: "counters".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `seconds` one-second windows; in those where `on(t)`, process `p` writes 2 MiB for each p in `procs(t)`.
    fn series(seconds: usize, procs: impl Fn(usize) -> Vec<u32>) -> Vec<Window> {
        (0..seconds)
            .map(|t| {
                let ps = procs(t);
                let procs: Vec<ProcWindow> =
                    ps.iter().map(|&p| ProcWindow { process: p, read_bytes: 0, write_bytes: 2 << 20 }).collect();
                Window {
                    write_bytes: (2 << 20) * ps.len() as u64,
                    write_ops: 2 * ps.len() as u64,
                    procs,
                    ..Default::default()
                }
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn intensity_of_30_s_every_120_s_depends_on_the_window() {
        // Ten periods: I/O in the first 30 s of every 120 s.
        let s = series(1200, |t| if t % 120 < 30 { vec![0] } else { vec![] });
        for (dt, want) in [(30, 0.25), (60, 0.5), (120, 1.0)] {
            let w = coarsen(&s, dt);
            let i = intensity(&w, dt as f64, 1200.0, C_DEFAULT, Dir::Both);
            assert!(close(i, want), "Δt = {dt}: I = {i}, want {want}");
        }
        assert!(close(intensity(&s, 1.0, 1200.0, C_DEFAULT, Dir::Read), 0.0), "no reads: I_r = 0");
        assert!(close(intensity(&s, 1.0, 1200.0, C_DEFAULT, Dir::Write), 0.25));
        // Below the threshold c nothing counts.
        assert!(close(intensity(&s, 1.0, 1200.0, 4 << 20, Dir::Both), 0.0));
    }

    #[test]
    fn runs_split_h_into_bursts_and_gaps() {
        let h = [true, true, false, true, false, false];
        let r = runs(&h);
        let got: Vec<(usize, usize, bool)> = r.iter().map(|r| (r.start, r.len, r.io)).collect();
        assert_eq!(got, vec![(0, 2, true), (2, 1, false), (3, 1, true), (4, 2, false)]);
        assert!(runs(&[]).is_empty());
    }

    #[test]
    fn burstiness_of_10_on_30_off() {
        let h: Vec<bool> = (0..400).map(|t| t % 40 < 10).collect();
        let rho = burstiness(&h);
        assert!(close(rho, 1.0 - (1.0f64 / 3.0).tanh()), "{rho}");
        assert!((rho - 0.678).abs() < 0.001);
        assert_eq!(burstiness(&[true; 10]), 0.0, "no pause: 0");
        assert!(close(burstiness(&[false; 10]), 1.0), "no I/O at all: l_IO = 0");
    }

    #[test]
    fn parallelism_from_active_processes() {
        // Four processes; all of them in every I/O window: P' = 1, P = 1.
        let all = series(10, |t| if t % 2 == 0 { vec![0, 1, 2, 3] } else { vec![] });
        let (pp, p) = parallelism(&all, 4, C_DEFAULT, Dir::Both);
        assert!(close(pp, 1.0) && close(p, 1.0));
        // One at a time: P' = 1/P, P_IO = 0.
        let one = series(8, |t| vec![(t % 4) as u32]);
        let (pp, p) = parallelism(&one, 4, C_DEFAULT, Dir::Both);
        assert!(close(pp, 0.25) && close(p, 0.0), "{pp} {p}");
        // Two of four: P' = 0.5, P_IO = (4·0.5 − 1)/3 = 1/3.
        let two = series(8, |_| vec![0, 1]);
        let (pp, p) = parallelism(&two, 4, C_DEFAULT, Dir::Both);
        assert!(close(pp, 0.5) && close(p, 1.0 / 3.0));
        assert_eq!(parallelism(&[], 4, C_DEFAULT, Dir::Both), (0.0, 0.0), "no I/O: 0");
        assert_eq!(parallelism(&all, 1, C_DEFAULT, Dir::Both).1, 0.0, "P = 1 is 0");
    }

    #[test]
    fn rates_and_volume() {
        let s = series(4, |t| if t == 1 { vec![0, 1] } else { vec![0] });
        let v = Volume { write_bytes: 10 << 20, write_ops: 10, ..Default::default() };
        let b = bandwidth(&s, &v, 1.0, 5.0, Dir::Both);
        assert!(close(b.max, (4 << 20) as f64) && close(b.mean, (2 << 20) as f64));
        let b = bandwidth(&s, &v, 2.0, 5.0, Dir::Read);
        assert_eq!((b.max, b.mean), (0.0, 0.0));
        let g = iops(&s, &v, 1.0, 5.0, Dir::Write);
        assert!(close(g.max, 4.0) && close(g.mean, 2.0));
        let (by_ops, by_bytes) = read_share(&Volume { read_ops: 1, write_ops: 3, read_bytes: 30, write_bytes: 10 });
        assert!(close(by_ops, 0.25) && close(by_bytes, 0.75));
        assert_eq!(read_share(&Volume::default()), (0.0, 0.0));
    }

    #[test]
    fn size_distribution_cdf_and_small_fraction() {
        let mut h = SizeHistogram::default();
        for len in [10, 50, 2048, 32 << 10, 32 << 10, 1 << 20, 2 << 30, 5 << 20] {
            h.record(len);
        }
        let p = distribution(&h);
        assert!(close(p[0], 0.25) && close(p[3], 0.25) && close(p.iter().sum::<f64>(), 1.0));
        let c = cdf(&h);
        assert!(close(c[0], 0.25) && close(c[2], 0.375) && close(c[9], 1.0));
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(cdf(&SizeHistogram::default()), vec![0.0; 10]);
        assert!(close(small_fraction(3, 8), 0.375));
        assert_eq!(small_fraction(0, 0), 0.0);
    }

    #[test]
    fn file_per_process_is_task_local_and_shared_file_is_shared() {
        // IOR -F with P = 4: four files, one process each: A_f = 1/P.
        for _ in 0..4 {
            assert_eq!(file_access(1, 4), (Access::TaskLocal, 0.25));
        }
        assert_eq!(file_access(4, 4), (Access::Shared, 1.0));
        assert_eq!(file_access(2, 4), (Access::Shared, 0.5));
        let conc = same_file_concurrency(&[BTreeSet::from([0, 1]), BTreeSet::new(), BTreeSet::from([3])], 4);
        assert_eq!(conc, vec![0.5, 0.0, 0.25]);
    }

    #[test]
    fn spatial_classes_on_synthetic_traces() {
        let xfer = 32 << 10;
        // Contiguous, also with varying sizes.
        let contiguous: Vec<(u64, u64)> = (0..64).map(|i| (i * xfer, xfer)).collect();
        assert_eq!(classify(&contiguous), Spatial::Contiguous);
        assert_eq!(classify(&[(0, 10), (10, 100), (110, 1), (111, 4096)]), Spatial::Contiguous);
        assert_eq!(classify(&[(5, 10)]), Spatial::Contiguous, "one request");
        assert_eq!(classify(&[]), Spatial::Contiguous);
        // IOR strided shared file, P = 2, 32 KiB transfers: rank r at (k·P + r)·xfer, stride P·xfer.
        for p in [2u64, 4, 16] {
            for r in 0..p {
                let reqs: Vec<(u64, u64)> = (0..64).map(|k| ((k * p + r) * xfer, xfer)).collect();
                assert_eq!(classify(&reqs), Spatial::Strided(p * xfer), "P = {p}, rank {r}");
            }
        }
        // Nested strided (thesis fig. 3.2): n_s = 2 requests 2s apart, then on to the next 12s block.
        let s = 100;
        let nested: Vec<(u64, u64)> = (0..40).map(|i| ((i / 2) * 12 * s + (i % 2) * 2 * s, s)).collect();
        assert_eq!(classify(&nested), Spatial::NestedStrided);
        // Three levels: 3 inner steps of 1 KiB, then 64 KiB on.
        let three: Vec<(u64, u64)> = (0..60).map(|i| ((i / 3) * 65536 + (i % 3) * 1024, 512)).collect();
        assert_eq!(classify(&three), Spatial::NestedStrided);
        // Random offsets.
        let mut x: u64 = 12345;
        let random: Vec<(u64, u64)> = (0..200)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 20) % (1 << 30) / 4096 * 4096, 4096)
            })
            .collect();
        assert_eq!(classify(&random), Spatial::Random);
        // Backwards steps with a period are not sequential: random.
        let back: Vec<(u64, u64)> = (0..40).map(|i| (if i % 2 == 0 { 1000 } else { 0 }, 10)).collect();
        assert_eq!(classify(&back), Spatial::Random);
        // Requests served a little out of their order keep their class.
        let mut shuffled: Vec<(u64, u64)> = (0..64).map(|k| ((k * 2 + 1) * xfer, xfer)).collect();
        for c in shuffled.chunks_mut(8) {
            c.reverse();
        }
        assert_eq!(classify(&shuffled), Spatial::Strided(2 * xfer));
        let mut t = SpatialTracker::default();
        t.push(xfer, xfer);
        t.push(0, xfer);
        assert_eq!((t.class(), t.count()), (Spatial::Contiguous, 2));
        // A pattern broken after a long run: random.
        let mut broken = contiguous.clone();
        broken.push((7, 1));
        assert_eq!(classify(&broken), Spatial::Random);
    }

    #[test]
    fn spatial_classes_merge_to_the_more_general() {
        use Spatial::*;
        assert_eq!(Contiguous.merge(Strided(64)), Strided(64));
        assert_eq!(Strided(64).merge(Strided(64)), Strided(64));
        assert_eq!(Strided(64).merge(Strided(32)), NestedStrided);
        assert_eq!(NestedStrided.merge(Contiguous), NestedStrided);
        assert_eq!(Random.merge(Contiguous), Random);
        assert_eq!((Strided(5).name(), Strided(5).stride(), Random.stride()), ("strided", Some(5), None));
    }

    #[test]
    fn a_report_has_the_fixed_json_names() {
        let s = series(40, |t| if t % 40 < 10 { vec![0, 1] } else { vec![] });
        let mut sizes = SizeHistogram::default();
        sizes.record(32 << 10);
        let files = vec![FileReport {
            path: "/f".into(),
            processes: 2,
            access: Access::Shared,
            access_fraction: 1.0,
            spatial: "strided".into(),
            stride_bytes: Some(64 << 10),
            read_bytes: 0,
            write_bytes: 40 << 20,
            concurrency_max: None,
        }];
        let i = JobInputs {
            job: "j".into(),
            duration_s: 40.0,
            dt_s: 1.0,
            c: C_DEFAULT,
            small_bytes: SMALL_DEFAULT,
            volume: Volume { write_bytes: 40 << 20, write_ops: 40, ..Default::default() },
            series: s,
            write_sizes: sizes,
            processes: 2,
            files,
            ..Default::default()
        };
        let r = report(&i);
        assert!(close(r.intensity, 0.25) && close(r.parallelism, 1.0));
        assert!(close(r.bandwidth_max_mib_s, 4.0) && close(r.bandwidth_mean_mib_s, 1.0));
        let v = serde_json_like(&r);
        for k in [
            "job",
            "duration_s",
            "bytes_read",
            "bytes_written",
            "requests_read",
            "requests_written",
            "bandwidth_max_mib_s",
            "bandwidth_mean_mib_s",
            "iops_max",
            "iops_mean",
            "intensity",
            "burstiness",
            "parallelism",
            "small_request_fraction",
            "read_share_bytes",
            "files",
            "path",
            "processes",
            "access",
            "spatial",
            "stride_bytes",
        ] {
            assert!(v.contains(&format!("\"{k}\"")), "{k} missing");
        }
        assert!(v.contains("\"shared\""));
    }

    #[test]
    fn inputs_from_the_mds_view_of_a_strided_shared_file() {
        use tessera_proto::msg::{JobDetail, JobFile, JobInfo, SeriesPoint, StreamCounters};
        let stream = |pid, object, ops| StreamCounters {
            ino: 7,
            client: 1,
            pid,
            object,
            write: true,
            ops,
            bytes: ops * 32768,
            spatial: Spatial::Strided(65536),
        };
        let d = |pid| JobDetail {
            job: "j".into(),
            write_ops: 16,
            write_bytes: 16 * 32768,
            write_small: 0,
            streams: vec![stream(pid, 1, 8), stream(pid, 2, 8)],
            ..Default::default()
        };
        let s = 1_000_000;
        let w = |b| Window { write_bytes: b, write_ops: 1, ..Default::default() };
        let info = JobInfo {
            job: "j".into(),
            first_unix_us: 10 * s,
            last_unix_us: 19 * s + 5,
            processes: vec![(1, 1), (1, 2)],
            nodes: vec![(0, d(1)), (1, d(2))],
            files: vec![JobFile { ino: 7, path: "/shared".into(), created: true, opened: true, removed: false }],
            dt_us: s,
            series: vec![
                SeriesPoint { start_unix_us: 10 * s, window: w(2 << 20) },
                SeriesPoint { start_unix_us: 15 * s, window: w(2 << 20) },
            ],
            ..Default::default()
        };
        let i = inputs_from_info(&info, C_DEFAULT, SMALL_DEFAULT);
        assert_eq!((i.series.len(), i.duration_s, i.processes), (10, 10.0, 2));
        assert_eq!(i.volume.write_ops, 32);
        assert_eq!(i.files.len(), 1);
        let f = &i.files[0];
        assert_eq!((f.path.as_str(), f.processes, f.access), ("/shared", 2, Access::Shared));
        assert_eq!((f.spatial.as_str(), f.stride_bytes), ("strided", Some(65536)));
        let r = report(&i);
        assert!(close(r.intensity, 0.2), "{}", r.intensity);
        assert_eq!(i.files_created, 1);
    }

    #[test]
    fn files_from_a_trace_in_file_offsets() {
        let xfer = 32768;
        let mut reqs = Vec::new();
        // A shared strided file written by two processes at once, and a file of one process.
        for k in 0..16u64 {
            for r in 0..2u32 {
                let offset = (k * 2 + u64::from(r)) * xfer;
                reqs.push(TracedRequest {
                    ino: 5,
                    client: 1,
                    pid: r,
                    offset,
                    len: xfer,
                    write: true,
                    start_us: k * 1000,
                });
            }
            let offset = k * xfer;
            reqs.push(TracedRequest { ino: 6, client: 1, pid: 2, offset, len: xfer, write: false, start_us: k * 10 });
        }
        let t = trace_files(&reqs, 4, 1_000_000);
        assert_eq!(t[&5], TracedFile { processes: 2, spatial: Spatial::Strided(2 * xfer), concurrency_max: 0.5 });
        assert_eq!(t[&6], TracedFile { processes: 1, spatial: Spatial::Contiguous, concurrency_max: 0.25 });
        let mut files = vec![FileReport {
            path: "/s".into(),
            processes: 2,
            access: Access::Shared,
            access_fraction: 0.5,
            spatial: "random".into(),
            stride_bytes: None,
            read_bytes: 0,
            write_bytes: 0,
            concurrency_max: None,
        }];
        apply_trace(&mut files, &t, |p| (p == "/s").then_some(5));
        assert_eq!((files[0].spatial.as_str(), files[0].stride_bytes), ("strided", Some(65536)));
        assert_eq!(files[0].concurrency_max, Some(0.5));
    }

    /// The field names a serde serializer sees (no JSON crate here): a tiny key collector.
    fn serde_json_like(r: &JobReport) -> String {
        // Serialize with the toml crate's serializer through a map of names: field names are what matter.
        let t = toml::Value::try_from(r).expect("serializable");
        fn keys(v: &toml::Value, out: &mut String) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        out.push_str(&format!("\"{k}\" "));
                        keys(v, out);
                    }
                }
                toml::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
                toml::Value::String(s) => out.push_str(&format!("\"{s}\" ")),
                _ => {}
            }
        }
        let mut out = String::new();
        keys(&t, &mut out);
        out
    }
}
