//! Per-job statistics (specs/characterization.md): the data counters a data server or forwarding node
//! reports per job (and per stream), the MDS's job registry as `tessera jobstats` shows it, and traced
//! requests; with the counts the criteria are computed from ([`Window`] of a time series, a stream's
//! [`Spatial`] class), which the characterisation itself (`tessera-iostats`) uses as they are here.

use super::common::SizeHistogram;
use crate::types::*;
use serde::{Deserialize, Serialize};

/// Requests a data server does not count as small above this size (s_small).
pub const SMALL_REQUEST: u64 = 4096;
/// Streams a data server keeps apart per job (further ones are not tracked per stream).
pub const MAX_STREAMS_PER_JOB: usize = 128;
/// Jobs in one [`DsJobReport`].
pub const MAX_JOBS_PER_DETAIL: usize = 64;

/// What one process moved in one window.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ProcWindow {
    /// The process's index in the job (see `Processes` in `tessera_iostats::characterize`).
    pub process: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One window of length Δt of a job: what moved in total and per process (empty `procs`: unknown,
/// the job counts as one process).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Window {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_ops: u64,
    pub write_ops: u64,
    pub procs: Vec<ProcWindow>,
}

impl Window {
    /// Adds another window's counts (per process by index).
    pub fn add(&mut self, o: &Window) {
        self.read_bytes += o.read_bytes;
        self.write_bytes += o.write_bytes;
        self.read_ops += o.read_ops;
        self.write_ops += o.write_ops;
        for p in &o.procs {
            match self.procs.iter_mut().find(|q| q.process == p.process) {
                Some(q) => {
                    q.read_bytes += p.read_bytes;
                    q.write_bytes += p.write_bytes;
                }
                None => self.procs.push(p.clone()),
            }
        }
    }
}

/// The spatial access pattern of a sequence of requests (classification 2.7).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum Spatial {
    /// Each request starts where the one before ended (also: a single request).
    #[default]
    Contiguous,
    /// A constant step between request starts (the stride, bytes).
    Strided(u64),
    /// Forward steps repeating with a period of two or more (inner and outer strides).
    NestedStrided,
    Random,
}

impl Spatial {
    pub fn name(self) -> &'static str {
        match self {
            Spatial::Contiguous => "contiguous",
            Spatial::Strided(_) => "strided",
            Spatial::NestedStrided => "nested-strided",
            Spatial::Random => "random",
        }
    }

    pub fn stride(self) -> Option<u64> {
        match self {
            Spatial::Strided(s) => Some(s),
            _ => None,
        }
    }

    /// The class of requests from several streams of one process and file (one per object or data
    /// server): the shared class if all agree, else the more general one.
    pub fn merge(self, o: Spatial) -> Spatial {
        use Spatial::*;
        match (self, o) {
            (a, b) if a == b => a,
            (Random, _) | (_, Random) => Random,
            (NestedStrided, _) | (_, NestedStrided) | (Strided(_), Strided(_)) => NestedStrided,
            (Contiguous, s) | (s, Contiguous) => s,
        }
    }
}

/// One process's reads or writes of one object of one file, at one data server, since it started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct StreamCounters {
    pub ino: Ino,
    pub client: u64,
    pub pid: u32,
    pub object: ObjectId,
    pub write: bool,
    pub ops: u64,
    pub bytes: u64,
    /// The stream's spatial class so far (object offsets; the same steps as in the file while they
    /// stay within a stripe).
    pub spatial: Spatial,
}

/// One job's data counters at one node since the node's counter generation began (monotonic).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobDetail {
    pub job: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub read_sizes: SizeHistogram,
    pub write_sizes: SizeHistogram,
    /// Requests of at most [`SMALL_REQUEST`] bytes.
    pub read_small: u64,
    pub write_small: u64,
    /// At most [`MAX_STREAMS_PER_JOB`].
    pub streams: Vec<StreamCounters>,
}

impl JobDetail {
    /// Adds another node's counters (streams are appended).
    pub fn add(&mut self, o: &JobDetail) {
        self.read_ops += o.read_ops;
        self.read_bytes += o.read_bytes;
        self.write_ops += o.write_ops;
        self.write_bytes += o.write_bytes;
        self.read_sizes.add(&o.read_sizes);
        self.write_sizes.add(&o.write_sizes);
        self.read_small += o.read_small;
        self.write_small += o.write_small;
        self.streams.extend(o.streams.iter().cloned());
    }
}

/// A data server's per-job detail, sent with its report: the jobs whose counters changed since the
/// last one (at most [`MAX_JOBS_PER_DETAIL`]; the rest follow next time).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsJobReport {
    pub ds: DsId,
    pub at_unix_us: u64,
    /// The counters' generation (as in [`DsReport`](super::DsReport)); a snapshot's values count from its start.
    pub generation: u64,
    pub jobs: Vec<JobDetail>,
}

/// One job's metadata operations at the MDS.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct MetaCounters {
    /// Opens, creates included.
    pub opens: u64,
    pub closes: u64,
    pub creates: u64,
    pub unlinks: u64,
    pub readdirs: u64,
    /// Attribute changes, size reports, xattr changes, renames, links.
    pub inode_updates: u64,
    /// Every other metadata request (lookups, getattr, ...).
    pub other: u64,
}

/// A file a job created, opened or removed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobFile {
    pub ino: Ino,
    /// Its path when the job used it (`inode N` when unknown).
    pub path: String,
    pub created: bool,
    pub opened: bool,
    pub removed: bool,
}

/// One window of a job's time series: its start and what moved in it (summed over data servers).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SeriesPoint {
    pub start_unix_us: u64,
    pub window: Window,
}

/// One job as the MDS knows it (`tessera jobstats`, `tessera report`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobInfo {
    pub job: String,
    /// The user of its first metadata call.
    pub uid: u32,
    pub first_unix_us: u64,
    pub last_unix_us: u64,
    /// Active within the last minute.
    pub running: bool,
    pub clients: Vec<u64>,
    /// `(client, pid)` of every process seen (metadata or data).
    pub processes: Vec<(u64, u32)>,
    pub meta: MetaCounters,
    /// Data counters per data server (summed: [`JobDetail::add`]).
    pub nodes: Vec<(DsId, JobDetail)>,
    /// The files (only when one job was asked for).
    pub files: Vec<JobFile>,
    /// Window length of `series`, microseconds (grows as a long job's series is coarsened).
    pub dt_us: u64,
    pub series: Vec<SeriesPoint>,
    /// Data counters per forwarding node (by index): the same requests again as they passed it on the
    /// way to the data servers, so not part of the job's totals.
    pub ions: Vec<(u32, JobDetail)>,
}

/// A forwarding node's per-job detail, like a data server's [`DsJobReport`]: the jobs whose
/// forwarded reads and writes changed since its last one (at most [`MAX_JOBS_PER_DETAIL`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IonJobReport {
    /// The forwarding node's index in the configuration's `[[ion]]` list.
    pub ion: u32,
    pub at_unix_us: u64,
    /// The counters' generation: its values count from its start.
    pub generation: u64,
    pub jobs: Vec<JobDetail>,
}

/// Records a data server keeps per traced job (the oldest go first).
pub const MAX_TRACE_RECORDS: usize = 1 << 16;
/// Jobs a data server traces at once.
pub const MAX_TRACED_JOBS: usize = 16;
/// Records in one `JobTrace` reply.
pub const MAX_TRACE_PAGE: usize = 8192;

/// One traced request at a data server: who, which file and object, where, how much, when (its clock,
/// microseconds since the Unix epoch; start = when it was queued, end = when it was served).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct TraceRecord {
    pub client: u64,
    pub pid: u32,
    pub ino: Ino,
    pub object: ObjectId,
    /// Offset in the object.
    pub offset: u64,
    pub len: u64,
    pub write: bool,
    pub start_us: u64,
    pub end_us: u64,
}
