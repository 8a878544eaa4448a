//! Request and response messages of the metadata service (MDS) and the data service (DS).
//!
//! One RPC is one bidirectional QUIC stream: a request frame (header + optional raw payload), then a
//! response frame. Headers are the types below; data travels only as raw payload (see [`crate::frame`]).

use crate::error::FsResult;
use crate::layout::{ExtentSpec, Layout, LayoutSpec};
use crate::types::*;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// Metadata service
// ---------------------------------------------------------------------------------------------

/// How `SetAttr` sets a time.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum TimeSet {
    Now,
    At(Timestamp),
}

/// Fields to change in `SetAttr`; `None` leaves a field alone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SetAttrs {
    /// Permission bits (`0o7777`).
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate/extend: the MDS truncates the objects on the data servers.
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct RenameFlags {
    /// Fail with EEXIST if the target exists (RENAME_NOREPLACE).
    pub noreplace: bool,
    /// Atomically swap the two entries (RENAME_EXCHANGE).
    pub exchange: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    /// O_TRUNC: the MDS truncates to zero as part of the open.
    pub truncate: bool,
}

/// `setxattr` flags.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum XattrMode {
    #[default]
    Any,
    /// XATTR_CREATE: fail with EEXIST if it exists.
    Create,
    /// XATTR_REPLACE: fail with ENODATA if it does not exist.
    Replace,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DirEntry {
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    /// Cookie to pass as `offset` to continue after this entry. Stable across concurrent changes.
    pub next_offset: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// What a data server tells the MDS about itself, periodically.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsReport {
    pub ds: DsId,
    /// When the server took this report (its clock, microseconds since the Unix epoch).
    pub at_unix_us: u64,
    /// Counter generation: the counters below count from zero since the server started this generation
    /// (a new one at every start). Rates come from two reports of one generation.
    pub generation: u64,
    /// Bytes of the file system holding the object store.
    pub capacity: u64,
    pub used: u64,
    pub free: u64,
    pub objects: u64,
    /// Requests waiting or in service right now.
    pub queue_depth: u32,
    /// Per-job counters since the server started.
    pub jobs: Vec<JobCounters>,
    /// Sizes of the read and write requests that arrived since the server started.
    pub sizes: SizeHistogram,
    /// Of those, the ones forwarded by forwarding nodes, and the client requests they carried.
    pub forwarded: u64,
    pub forwarded_client_requests: u64,
    /// Each storage target's space and traffic (the fields above are their sums), by index.
    pub targets: Vec<TargetReport>,
    /// The server process's share of the machine's CPU over the last report interval (0..=1), its
    /// resident memory, and the data bytes it received (writes) and sent (reads) since it started.
    pub cpu: f64,
    pub rss_bytes: u64,
    pub data_rx_bytes: u64,
    pub data_tx_bytes: u64,
}

/// `OST cost = max utilisation / mean utilisation` (Tarazu's metric; 1.0 is perfect balance, and the
/// value when nothing is stored or no target is given).
pub fn ost_cost(utilisations: &[f64]) -> f64 {
    if utilisations.is_empty() {
        return 1.0;
    }
    let max = utilisations.iter().copied().fold(0.0f64, f64::max);
    let mean = utilisations.iter().sum::<f64>() / utilisations.len() as f64;
    if mean <= 0.0 {
        1.0
    } else {
        max / mean
    }
}

impl DsStatus {
    /// The server's targets as its report gives them (a report without per-target figures, from an older
    /// server, as one target); none before its first report.
    pub fn target_reports(&self) -> Vec<TargetReport> {
        match &self.report {
            Some(r) if r.targets.is_empty() => vec![TargetReport {
                capacity: r.capacity,
                used: r.used,
                free: r.free,
                objects: r.objects,
                ..Default::default()
            }],
            Some(r) => r.targets.clone(),
            None => Vec::new(),
        }
    }
}

/// One storage target's space and traffic since the server started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct TargetReport {
    pub target: TargetIdx,
    /// Configured capacity, else the host file system's.
    pub capacity: u64,
    /// Bytes the target's objects hold (configured capacity), else the host file system's use.
    pub used: u64,
    pub free: u64,
    pub objects: u64,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    /// Whether `capacity` is configured (enforced) rather than the host file system's.
    pub enforced: bool,
    /// Sizes of the reads and writes it served, and their latency (arrival at the server to done: queueing,
    /// the device and the I/O).
    pub sizes: SizeHistogram,
    pub latency: LatencyHistogram,
    /// Its traffic per job, the busiest [`TargetJob::MAX`] jobs (the rest summed under
    /// [`TargetJob::OTHERS`]); empty when per-job counting is off (`[metrics] job_counters`).
    pub jobs: Vec<TargetJob>,
}

/// One job's requests and bytes on one storage target since the server started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct TargetJob {
    pub job: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl TargetJob {
    /// Most jobs a target reports one by one.
    pub const MAX: usize = 32;
    /// The name the jobs beyond [`TargetJob::MAX`] are summed under.
    pub const OTHERS: &'static str = "(others)";
}

/// Request latencies in buckets (upper bounds in [`LatencyHistogram::BOUNDS_US`], the last open).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LatencyHistogram {
    pub counts: [u64; LatencyHistogram::BUCKETS],
    /// The latencies' sum, microseconds.
    pub sum_us: u64,
}

impl LatencyHistogram {
    pub const BUCKETS: usize = 14;
    /// Upper bounds (exclusive, microseconds) of the buckets but the last.
    pub const BOUNDS_US: [u64; 13] =
        [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000];

    pub fn bucket(us: u64) -> usize {
        Self::BOUNDS_US.partition_point(|&b| b <= us)
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Per bucket (upper bound in seconds, count), the last `f64::INFINITY`: a Prometheus histogram's.
    pub fn buckets_s(&self) -> Vec<(f64, u64)> {
        let bound = |i: usize| Self::BOUNDS_US.get(i).map_or(f64::INFINITY, |&us| us as f64 / 1e6);
        self.counts.iter().enumerate().map(|(i, &c)| (bound(i), c)).collect()
    }

    /// The upper bound (µs) of the bucket holding the `q` quantile (`None`: no requests; `u64::MAX`: in
    /// the open last bucket).
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= rank {
                return Some(Self::BOUNDS_US.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

impl TargetReport {
    /// used / capacity (0 for no capacity).
    pub fn utilisation(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            self.used as f64 / self.capacity as f64
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobCounters {
    pub job: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

/// One data server as the MDS sees it (`tessera df`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsStatus {
    pub ds: DsId,
    pub addr: String,
    /// Milliseconds since its last report; `None` if it never reported.
    pub report_age_ms: Option<u64>,
    pub report: Option<DsReport>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum MdsRequest {
    /// Cheap liveness + version check.
    Ping,
    Lookup {
        parent: Ino,
        name: String,
    },
    /// Resolves an absolute path (`/a/b`), following symlinks in directories and, if `follow`, the last one.
    LookupPath {
        path: String,
        follow: bool,
    },
    GetAttr {
        ino: Ino,
    },
    SetAttr {
        ino: Ino,
        set: SetAttrs,
    },
    /// Creates a regular file, FIFO, socket or device node. Regular files get a layout.
    /// `exclusive`: fail with EEXIST if the name exists; otherwise an existing regular file is returned.
    Create {
        parent: Ino,
        name: String,
        kind: FileKind,
        perm: u32,
        rdev: u32,
        exclusive: bool,
        layout: Option<LayoutSpec>,
    },
    Mkdir {
        parent: Ino,
        name: String,
        perm: u32,
    },
    Symlink {
        parent: Ino,
        name: String,
        target: String,
    },
    Readlink {
        ino: Ino,
    },
    Link {
        ino: Ino,
        new_parent: Ino,
        new_name: String,
    },
    Unlink {
        parent: Ino,
        name: String,
    },
    Rmdir {
        parent: Ino,
        name: String,
    },
    Rename {
        parent: Ino,
        name: String,
        new_parent: Ino,
        new_name: String,
        flags: RenameFlags,
    },
    /// Entries after cookie `offset` (0 = from the start; `.` and `..` are not included), at most `max`.
    ReadDir {
        ino: Ino,
        offset: u64,
        max: u32,
    },
    /// Opens a file: checks permission, applies O_TRUNC, returns fresh attributes and the layout.
    /// The MDS counts open handles so an unlinked open file lives until its last close.
    Open {
        ino: Ino,
        flags: OpenFlags,
    },
    /// Closes a handle from `Open`; `size` is the end of the furthest write (max-merged into the size).
    Close {
        ino: Ino,
        handle: u64,
        size: Option<u64>,
        wrote: bool,
    },
    /// Creates a regular file and opens it in one round trip (open(2) with O_CREAT). If the name
    /// exists and `exclusive` is false, opens the existing file with `flags` (O_TRUNC applies then).
    /// The creator may open a new file as asked whatever its mode. Reply: `Opened`.
    CreateOpen {
        parent: Ino,
        name: String,
        perm: u32,
        exclusive: bool,
        layout: Option<LayoutSpec>,
        flags: OpenFlags,
    },
    /// Makes every metadata change acknowledged so far durable on the MDS's disk (fsync, fsyncdir,
    /// sync). Without it a change survives an MDS process crash at once and a power loss after the
    /// next periodic commit.
    Sync,
    /// A client reports written data: size is max-merged, mtime/ctime set to now. (flush/fsync/periodic)
    ReportWrite {
        ino: Ino,
        size: u64,
    },
    StatFs,
    Access {
        ino: Ino,
        mask: u32,
    },
    GetXattr {
        ino: Ino,
        name: String,
    },
    SetXattr {
        ino: Ino,
        name: String,
        value: Vec<u8>,
        mode: XattrMode,
    },
    ListXattr {
        ino: Ino,
    },
    RemoveXattr {
        ino: Ino,
        name: String,
    },
    GetLayout {
        ino: Ino,
    },
    /// Sets a directory's default layout for files created in it (or, on an empty regular file with no
    /// data written, re-lays the file out).
    SetLayout {
        ino: Ino,
        spec: LayoutSpec,
    },
    /// A data server's periodic report (role ds only).
    DsReport(Box<DsReport>),
    /// Cluster status for `tessera df`.
    ClusterStatus,
    /// A data server's locality statistics (role ds only; every `orchestrator.report_interval_ms`).
    LocalityReport(LocalityReport),
    /// Switches the orchestrator at run time (admin role, or root caller).
    SetOrchestratorMode {
        mode: OrchestratorMode,
    },
    /// What the orchestrator sees and decides (`tessera jobs`, `tessera orchestrator status`).
    OrchestratorStatus,
    /// Asks for a lease on a directory (see [`DirLease`]): granted (`Lease`) when the caller may write and
    /// search it, no other client holds one or has a request on it in flight, and its names fit in the
    /// grant ([`LEASE_NAMES_MAX`] entries, [`LEASE_NAME_BYTES_MAX`] bytes of names); refused otherwise
    /// (EBUSY).
    LeaseDir {
        dir: Ino,
    },
    /// The changes a lease holder made in `dir` since its last batch (files created and names removed),
    /// applied in order, each on its own (one failing does not stop the rest). Renews the lease (`keep`)
    /// or gives it up. Safe to resend: a create whose name already holds its inode number is taken as
    /// done, and an unlink of a name that is gone fails alone (ENOENT) with nothing changed. Reply: `Batch`.
    DirBatch {
        dir: Ino,
        token: u64,
        entries: Vec<DirOp>,
        keep: bool,
    },
    /// Renews the calling client's session (`origin.client`); clients send it every third of the
    /// eviction timeout while they are otherwise idle. Reply: `Session`.
    KeepAlive,
    /// Checks the namespace against itself and against every data server's objects (`tessera fsck`;
    /// admins only), online; with `repair`, fixes what it found. Reply: `Fsck`.
    Fsck {
        repair: bool,
    },
    /// The cluster's placement policy and its last solve (`tessera df --policy`). Reply: `Placement`.
    PlacementStatus,
    /// Files a job will create (`tessera declare`): placed together as one batch now, used when each
    /// create arrives. At most [`MAX_DECLARE`] per request. Reply: `Declared`.
    Declare {
        files: Vec<DeclaredFile>,
    },
    /// PerSched (specs/periodic.md): the calling job (`origin.job`) declares its periodic profile; the MDS
    /// recomputes the pattern. Reply: `Periodic` with the job's grant.
    PeriodicRegister {
        profile: PeriodicProfile,
    },
    /// Renews the calling job's reservation, tells how many instances it finished since it registered,
    /// and fetches its current grant (`Periodic(None)`: not registered, e.g. expired).
    PeriodicPoll {
        done: u64,
    },
    /// The calling job stops being periodic; the pattern is recomputed for the others. Reply: `Ok`.
    PeriodicLeave,
    /// Every periodic job's planned and measured efficiency (`tessera jobs --periodic`).
    PeriodicStatus,
    /// A data server's per-job detail (role ds only; the jobs that changed since its last one).
    DsJobReport(Box<DsJobReport>),
    /// The job registry with its counters (`tessera jobstats`, `tessera report`): one job (with its
    /// time series and files) or all (summaries). Reply: `Jobs`.
    JobStats {
        job: Option<String>,
    },
    /// Online I/O scheduling (`[persched] scheduler = "online-syseff" | "online-dilation"`): the calling
    /// job wants to transfer (`want`) or has finished its transfer, and has finished `done` instances.
    /// Reply: `PeriodicRate` with the rate the arbiter grants it now (0: wait and ask again).
    PeriodicIo {
        want: bool,
        done: u64,
    },
    /// Sets a composite (progressive) layout (`tessera setstripe -E ...`): a directory's default for files
    /// created in it, or an empty file's own layout (its first extent placed now). Reply: `Ok`.
    SetCompositeLayout {
        ino: Ino,
        extents: Vec<ExtentSpec>,
    },
    /// Instantiates the extent of `ino`'s composite layout holding file offset `offset` (and every extent
    /// before it): its objects are placed now. Idempotent. Reply: `Layout` (the file's, updated).
    InstantiateExtent {
        ino: Ino,
        offset: u64,
    },
    /// A forwarding node's per-job detail (the jobs whose forwarded requests it counted since its last
    /// one), from forwarding nodes only.
    IonJobReport(Box<IonJobReport>),
    /// An `O_APPEND` write of `len` bytes: the MDS, the one place every client's appends meet, gives it
    /// the file's end as its offset and moves the size past it (mtime/ctime now), so appends from any
    /// number of clients land one after another (as Lustre's full-file lock for `O_APPEND`). The client
    /// then writes the bytes there; answered with [`MdsReply::Appended`]. Not idempotent: a resent
    /// request appends again.
    Append {
        ino: Ino,
        len: u64,
    },
}

/// Most files one `Declare` names.
pub const MAX_DECLARE: usize = 10_000;

/// One file a job will create.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DeclaredFile {
    pub parent: Ino,
    pub name: String,
    /// Bytes it is expected to hold.
    pub expected_size: u64,
    /// `None`: the directory's or the cluster's default.
    pub stripe_count: Option<u32>,
}

/// A directory lease. While it lasts its holder is the only client that reads or changes the directory
/// (the MDS holds other clients' requests on it until the holder gives the lease up or it expires): so the
/// holder answers lookups of names it does not know as absent, and creates and removes files there without
/// waiting (creates with inode numbers reserved for it), sending the changes later in a `DirBatch`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DirLease {
    pub dir: Ino,
    pub token: u64,
    /// How long the lease lasts from when the request that returned it was sent.
    pub valid_ms: u32,
    /// Fresh inode numbers for the holder's next creates (topped up by every batch).
    pub inos: Vec<Ino>,
    /// The directory's attributes.
    pub attr: Attr,
    /// Every name in the directory and what it is, when granted (renewals carry none: the holder knows).
    pub entries: Vec<(String, FileKind)>,
}

/// Most entries a directory may have to be leased: its names come with the grant, which must fit in a
/// message header with room to spare.
pub const LEASE_NAMES_MAX: usize = 32_768;
/// Most bytes of names a directory may have to be leased.
pub const LEASE_NAME_BYTES_MAX: usize = 512 << 10;

/// One file a lease holder created: owner, mode and times as the holder gave them to the program.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct AsyncCreate {
    pub ino: Ino,
    pub name: String,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub time: Timestamp,
    /// Still open on the holder: open it at the MDS too (the reply carries the handle and layout).
    pub open: Option<OpenFlags>,
    /// The job and process that made it (the batch goes out later, on behalf of whoever flushes it);
    /// an empty job: the batch's origin.
    pub job: String,
    pub pid: u32,
}

/// One change in a [`DirBatch`](MdsRequest::DirBatch). Permissions were checked at the holder, by its
/// kernel (a mount that leaves the checks to the MDS takes no leases), as for any create or unlink there.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum DirOp {
    Create(AsyncCreate),
    /// Removes the non-directory `name` (a file created in this batch or before; an open one lives on
    /// until its last close, as with `Unlink`).
    Unlink {
        name: String,
        /// As in [`AsyncCreate::job`].
        job: String,
        pid: u32,
    },
}

impl DirOp {
    /// The job and process that made this change (empty job: the batch's origin).
    pub fn by(&self) -> (&str, u32) {
        match self {
            DirOp::Create(c) => (&c.job, c.pid),
            DirOp::Unlink { job, pid, .. } => (job, *pid),
        }
    }
}

/// What became of one [`DirOp`]: for a create, the open handle and layout when it was to be opened; for
/// an unlink, `Ok(None)` and the inode it removed (0 when it failed).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct BatchResult {
    pub ino: Ino,
    pub result: FsResult<Option<(u64, Layout)>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum MdsReply {
    Ok,
    Pong {
        version: u16,
    },
    Attr(Attr),
    /// A new or found entry; `layout` is set for regular files.
    Entry {
        attr: Attr,
        layout: Option<Layout>,
    },
    Opened {
        attr: Attr,
        layout: Option<Layout>,
        handle: u64,
        /// After a create: the parent directory's attributes the create left (the kernel asks for
        /// them next; a client may answer from this within its attribute timeout).
        parent: Option<Attr>,
    },
    Target(String),
    DirEntries(Vec<DirEntry>),
    StatFs(StatFs),
    Xattr(Vec<u8>),
    XattrNames(Vec<String>),
    Layout(Layout),
    DirLayout(LayoutSpec),
    Cluster(Vec<DsStatus>),
    Orchestrator(OrchestratorStatus),
    Lease(DirLease),
    /// A `DirBatch`'s results, in order, the directory's attributes after it, and the renewed lease
    /// (`None`: given up, expired, or recalled because another client waits for the directory; a
    /// recalled lease still holds the others until its holder gives it up with `keep` false).
    Batch {
        results: Vec<BatchResult>,
        dir_attr: Attr,
        lease: Option<DirLease>,
    },
    /// Answers `KeepAlive`: whether the MDS evicted this client since its last `KeepAlive` (its handles
    /// from before are closed: their files must be opened again), and the eviction timeout.
    Session {
        evicted: bool,
        timeout_ms: u64,
    },
    Fsck(FsckReport),
    Placement(PlacementStatus),
    /// How many files a `Declare` placed.
    Declared {
        count: u32,
    },
    Periodic(Option<PeriodicGrant>),
    PeriodicStatus(PeriodicReport),
    Jobs(Vec<JobInfo>),
    /// The job's rate now, bytes/s in total (0: wait).
    PeriodicRate(u64),
    /// A directory's composite default layout (`GetLayout` on a directory that has one).
    DirComposite(Vec<ExtentSpec>),
    /// Where an `Append`'s bytes go.
    Appended {
        offset: u64,
    },
}

/// What `tessera df --policy` shows: the cluster's placement policy and how its solves went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PlacementStatus {
    /// The cluster's policy (`[defaults] placement`); directories and files may name their own.
    pub policy: String,
    /// Batches placed since the MDS started, and how many fell back to `lustre`.
    pub solves: u64,
    pub fallbacks: u64,
    /// Files placed, and of those placed from a declaration (`tessera declare`).
    pub files: u64,
    pub declared_used: u64,
    /// Declarations waiting for their create.
    pub declared_pending: u64,
    /// Solves run as cheap ones because the MDS was loaded.
    pub deferred: u64,
    pub last: Option<SolveInfo>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SolveInfo {
    pub policy: String,
    /// Files (or composite-layout extents) in the batch, and their stripes.
    pub batch: u32,
    pub stripes: u32,
    pub micros: u64,
    /// Fell back to `lustre` (the flow could not meet the demand).
    pub fallback: bool,
    /// How long ago, in milliseconds.
    pub age_ms: u64,
}

/// One inconsistency `tessera fsck` found: its kind (a short stable name such as `dangling-entry` or
/// `orphan-object`), what exactly, and what repair does (or did) about it.
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct FsckFinding {
    pub kind: String,
    pub what: String,
    pub action: String,
    /// Whether this run did it (`repair`).
    pub repaired: bool,
}

/// What a `tessera fsck` run checked and found.
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// The findings (at most [`MAX_FSCK_FINDINGS`]; `omitted` counts the rest).
    pub findings: Vec<FsckFinding>,
    pub omitted: u64,
    /// Findings repaired (`repair` only).
    pub repaired: u64,
    pub inodes: u64,
    pub entries: u64,
    /// Objects listed on the data servers.
    pub objects: u64,
    /// Data servers whose objects were listed.
    pub servers: u32,
    /// Check (and repair) passes run: repair checks again after fixing, up to three times.
    pub passes: u32,
    pub elapsed_ms: u64,
}

/// Most findings one [`FsckReport`] lists.
pub const MAX_FSCK_FINDINGS: usize = 4096;

// ---------------------------------------------------------------------------------------------
// Orchestration (IOrchestrator, specs/iorchestrator.md)
// ---------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum OrchestratorMode {
    /// Vanilla: every data server serves work-conserving.
    Off,
    /// Dedicated slices of equal length.
    Even,
    /// Dedicated slices inversely proportional to reuse distance (the paper).
    #[default]
    IOrchestrator,
}

impl OrchestratorMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OrchestratorMode::Off => "off",
            OrchestratorMode::Even => "even",
            OrchestratorMode::IOrchestrator => "iorchestrator",
        }
    }
}

impl std::str::FromStr for OrchestratorMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(OrchestratorMode::Off),
            "even" => Ok(OrchestratorMode::Even),
            "iorchestrator" => Ok(OrchestratorMode::IOrchestrator),
            _ => Err(format!("unknown orchestrator mode '{s}' (off, even, iorchestrator)")),
        }
    }
}

impl std::fmt::Display for OrchestratorMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One program's locality at one data server (EWMA values, spec: SL_ij and RD_ij).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobLocality {
    pub job: String,
    /// SL_ij: EWMA of the address gap between consecutive requests of this job here, bytes.
    pub sl: f64,
    /// RD_ij: EWMA of the time between consecutive requests of this job here, microseconds. Only
    /// meaningful while the job's object is being served (`rd_valid`).
    pub rd_us: f64,
    pub rd_valid: bool,
    /// Requests of this job served since the previous report.
    pub requests: u64,
    pub bytes: u64,
}

/// A data server's locality statistics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LocalityReport {
    pub ds: DsId,
    /// SL_i: EWMA of the address gap between consecutive requests of any job, bytes.
    pub sl: f64,
    /// SeekTime_i: the expected cost of leaving to serve others, microseconds.
    pub seek_time_us: f64,
    pub jobs: Vec<JobLocality>,
    /// RD of the "others" object (all ineligible jobs together) while it was served, microseconds.
    pub others_rd_us: Option<f64>,
    /// The serve epoch this server currently follows (0 = work-conserving).
    pub epoch: u64,
}

/// Which requests a data server releases to its device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ServeTarget {
    /// Work-conserving: everything.
    All,
    /// Dedicated service to one program.
    Job(String),
    /// Every program except the eligible ones (the paper's object m+1).
    Others { eligible: Vec<String> },
}

/// The orchestrator's command at a slice start.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ServeCommand {
    /// Increases with every command; older commands are ignored.
    pub epoch: u64,
    pub target: ServeTarget,
    /// Length of this slice, milliseconds.
    pub slice_ms: u32,
    /// If no newer command arrives within this many milliseconds, the server falls back to
    /// work-conserving service (the orchestrator must never be able to hang I/O).
    pub fallback_ms: u32,
}

/// One scheduling object of the current plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PlanSlice {
    /// The job, or "(others)".
    pub label: String,
    pub target: ServeTarget,
    pub slice_ms: f64,
    /// Mean reuse distance used for the slice, microseconds (None: not measured yet).
    pub rd_us: Option<f64>,
}

/// A program as the orchestrator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobView {
    pub job: String,
    pub eligible: bool,
    /// Why (not) eligible: which condition passed or failed, with the numbers.
    pub reason: String,
    /// Per server: (ds, SL_ij bytes, RD_ij microseconds if valid).
    pub servers: Vec<(DsId, f64, Option<f64>)>,
    /// Share of the window this job's object gets (0 when it is served among the others).
    pub slice_share: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct OrchestratorStatus {
    pub mode: OrchestratorMode,
    pub window_ms: u32,
    /// Per server: (ds, SL_i bytes, SeekTime_i microseconds, report age ms).
    pub servers: Vec<(DsId, f64, f64, u64)>,
    pub jobs: Vec<JobView>,
    pub plan: Vec<PlanSlice>,
    /// Spread of the servers' switch times at the last slice start, microseconds.
    pub last_switch_skew_us: Option<u64>,
    /// Median switch skew over recent slices, microseconds.
    pub median_switch_skew_us: Option<u64>,
    pub windows_run: u64,
}

/// Every MDS request is sent together with the caller's credentials and who issues it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct MdsCall {
    pub caller: Caller,
    pub origin: Origin,
    pub req: MdsRequest,
}

pub type MdsResponse = FsResult<MdsReply>;

// ---------------------------------------------------------------------------------------------
// Data service
// ---------------------------------------------------------------------------------------------

/// Every data request names the data server it is for, so it can be routed: sent to that server
/// directly, or through a forwarding node that passes it on. A server refuses a call naming another.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsCall {
    pub ds: DsId,
    pub req: DsRequest,
    /// Set by a forwarding node on what it passes on (data servers accept it only from the `ion`
    /// role): the request then carries the data of `requests` client requests, merged.
    pub via: Option<Forwarded>,
}

impl DsCall {
    /// A call straight from its sender.
    pub fn new(ds: DsId, req: DsRequest) -> DsCall {
        DsCall { ds, req, via: None }
    }
}

/// Which forwarding node passed a data call on, and how many client requests it merged into it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Forwarded {
    /// The forwarding node's index in the cluster configuration.
    pub ion: u32,
    pub requests: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum DsRequest {
    Ping,
    /// Reads up to `len` bytes; bytes past the object's end are not returned (short read), holes read
    /// as zeros. Reply: `Data { len }` with the bytes as payload.
    Read {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        len: u32,
    },
    /// Reads several runs of one object (a strided reader's blocks): each run as a [`DsRequest::Read`]
    /// of its own. Reply: `DataV { lens }`, what each run got (short past the object's end), with their
    /// bytes one after the other as payload. Checked by [`check_read_extents`] before anything is read.
    ReadV {
        tag: IoTag,
        object: ObjectId,
        extents: Vec<Extent>,
    },
    /// Writes the payload at `offset`. `sync`: fdatasync before replying.
    Write {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        sync: bool,
    },
    /// Writes several runs of one object (a client's batch of small writes): the payload is their bytes,
    /// in the order of `extents`. Reply: `Written { len }`, the payload's length. Checked by
    /// [`check_extents`] before anything is written.
    WriteV {
        tag: IoTag,
        object: ObjectId,
        extents: Vec<Extent>,
        sync: bool,
    },
    /// `fallocate(2)` on `[offset, offset+len)` of an object, never changing its size (the file's size
    /// is the MDS's): `punch` deallocates the range so it reads as zeros (PUNCH_HOLE; a missing object
    /// needs nothing), otherwise space is reserved for it (creating the object if needed).
    Fallocate {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        len: u64,
        punch: bool,
    },
    /// Sets an object's size (creating it if needed).
    Truncate {
        object: ObjectId,
        size: u64,
    },
    /// Removes objects (missing ones are fine: removal is idempotent for the destroy log); at most
    /// [`MAX_REMOVE_OBJECTS`].
    Remove {
        objects: Vec<ObjectId>,
    },
    /// Makes an object's data durable.
    Fsync {
        tag: IoTag,
        object: ObjectId,
    },
    /// This server's report (the same it sends to the MDS).
    Report,
    /// Orchestrator: which requests to release from now on (role mds only).
    Serve(ServeCommand),
    /// Lists objects with their sizes (`tessera fsck`; roles mds and admin): those of shard `shard`
    /// (objects are kept in 256 shards by the low byte of their id) with ids above `after`, in id order,
    /// at most `max` (capped at [`MAX_LIST_OBJECTS`]). Reply: `Objects`.
    ListObjects {
        shard: u8,
        after: ObjectId,
        max: u32,
    },
    /// A job's request trace here (`tessera trace start|stop|export`): `set` switches it on or off
    /// (kept in a bounded ring of [`MAX_TRACE_RECORDS`] per job, at most [`MAX_TRACED_JOBS`] jobs);
    /// then the records numbered from `after` on, at most `max` (capped at [`MAX_TRACE_PAGE`]).
    /// Reply: `JobTrace`.
    JobTrace {
        job: String,
        set: Option<bool>,
        after: u64,
        max: u32,
    },
}

/// One run of a [`DsRequest::WriteV`] (the next `len` bytes of the payload go to object offset `offset`)
/// or of a [`DsRequest::ReadV`] (`len` bytes from `offset`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Extent {
    pub offset: u64,
    pub len: u32,
}

/// Most objects one [`DsRequest::Remove`] may name (the MDS's destroy log sends a burst of unlinks'
/// objects to each data server in requests of at most this many).
pub const MAX_REMOVE_OBJECTS: usize = 4096;

/// Most objects one [`DsRequest::ListObjects`] answers with.
pub const MAX_LIST_OBJECTS: usize = 16384;

/// Most runs one [`DsRequest::WriteV`] or [`DsRequest::ReadV`] may carry.
pub const MAX_EXTENTS: usize = 1024;

/// The bytes of a vectored request's runs: at most [`MAX_EXTENTS`], none empty or ending past the
/// largest offset.
fn runs_total(extents: &[Extent]) -> crate::FsResult<u64> {
    use crate::FsError;
    if extents.is_empty() || extents.len() > MAX_EXTENTS {
        return Err(FsError::invalid(format!(
            "a vectored request carries {} runs (1 to {MAX_EXTENTS})",
            extents.len()
        )));
    }
    let mut total: u64 = 0;
    for e in extents {
        if e.len == 0 || e.offset.checked_add(u64::from(e.len)).is_none() {
            return Err(FsError::invalid(format!("bad run of {} bytes at offset {}", e.len, e.offset)));
        }
        total += u64::from(e.len);
    }
    Ok(total)
}

/// Checks a vectored read's runs ([`runs_total`]'s rules), together at most `max` bytes; returns their total.
pub fn check_read_extents(extents: &[Extent], max: usize) -> crate::FsResult<u64> {
    let total = runs_total(extents)?;
    if total > max as u64 {
        return Err(crate::FsError::invalid(format!("a vectored read of {total} bytes exceeds the limit of {max}")));
    }
    Ok(total)
}

/// Checks a vectored write's runs against its payload: at most [`MAX_EXTENTS`], none empty or ending
/// past the largest offset, together exactly the payload.
pub fn check_extents(extents: &[Extent], payload_len: usize) -> crate::FsResult<()> {
    use crate::FsError;
    let total = runs_total(extents)?;
    if total != payload_len as u64 {
        return Err(FsError::protocol(format!("runs of {total} bytes with a payload of {payload_len}")));
    }
    Ok(())
}

/// A vectored write's runs as (object offset, its bytes of the payload), after [`check_extents`].
pub fn split_runs<'a>(
    extents: &'a [Extent],
    payload: &'a bytes::Bytes,
) -> crate::FsResult<impl Iterator<Item = (u64, bytes::Bytes)> + 'a> {
    check_extents(extents, payload.len())?;
    let mut at = 0;
    Ok(extents.iter().map(move |e| {
        let run = payload.slice(at..at + e.len as usize);
        at += e.len as usize;
        (e.offset, run)
    }))
}

/// True for the requests that carry data in their payload.
pub fn carries_data(req: &DsRequest) -> bool {
    matches!(req, DsRequest::Write { .. } | DsRequest::WriteV { .. })
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum DsReply {
    Ok,
    Pong {
        version: u16,
        ds: DsId,
    },
    /// Payload carries `len` bytes.
    Data {
        len: u32,
    },
    /// A [`DsRequest::ReadV`]'s: each run's bytes, one after the other in the payload.
    DataV {
        lens: Vec<u32>,
    },
    Written {
        len: u32,
    },
    Report(DsReport),
    /// A `Serve` command was applied at this wall-clock time (microseconds since the Unix epoch).
    Switched {
        epoch: u64,
        at_unix_us: u64,
    },
    /// A `ListObjects`'s page: `(id, size)` in id order; `more` when the shard holds further objects.
    Objects {
        objects: Vec<(ObjectId, u64)>,
        more: bool,
    },
    /// A job's trace records numbered `first..next`; `dropped`: older records no longer kept.
    JobTrace {
        on: bool,
        first: u64,
        next: u64,
        dropped: u64,
        records: Vec<TraceRecord>,
    },
}

pub type DsResponse = FsResult<DsReply>;

// ---------------------------------------------------------------------------------------------
// Forwarding nodes (specs/forwarding.md)
// ---------------------------------------------------------------------------------------------

/// A call to a forwarding node (ION): the metadata and data calls it passes on, and its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum IonCall {
    /// Passed on to the MDS unchanged (not scheduled). Reply: [`IonReply::Mds`].
    Mds(MdsCall),
    /// Passed on to the data server it names, reads and writes through the request scheduler.
    /// `app_len`: the size of the application's read or write this request is part of (the ION's
    /// "leaving clients" histogram). Reply: [`IonReply::Ds`].
    Ds { call: DsCall, app_len: u64 },
    /// Reply: [`IonReply::Status`].
    Status,
    /// Switches the request scheduler (the admin certificate, or a root caller). Queued requests move
    /// to the new scheduler in their order; nothing acknowledged is lost. Reply: [`IonReply::Status`].
    SetScheduler { caller: Caller, setting: SchedulerSetting },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum IonReply {
    Mds(MdsReply),
    Ds(DsReply),
    Status(IonStatus),
}

/// A scheduler and its parameters (`None`: keep the current value).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SchedulerSetting {
    pub name: String,
    pub window_us: Option<u64>,
    pub quantum: Option<u32>,
}

/// Request sizes in Darshan's buckets (0–100 B, 100 B–1 KiB, 1–10 KiB, 10–100 KiB, 100 KiB–1 MiB,
/// 1–4 MiB, 4–10 MiB, 10–100 MiB, 100 MiB–1 GiB, 1 GiB and more).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SizeHistogram {
    pub counts: [u64; SizeHistogram::BUCKETS],
}

impl SizeHistogram {
    pub const BUCKETS: usize = 10;
    /// Upper bounds (exclusive) of the buckets but the last.
    pub const BOUNDS: [u64; 9] = [100, 1 << 10, 10 << 10, 100 << 10, 1 << 20, 4 << 20, 10 << 20, 100 << 20, 1 << 30];
    pub const LABELS: [&'static str; 10] =
        ["0-100", "100-1K", "1K-10K", "10K-100K", "100K-1M", "1M-4M", "4M-10M", "10M-100M", "100M-1G", "1G+"];

    pub fn bucket(len: u64) -> usize {
        Self::BOUNDS.partition_point(|&b| b <= len)
    }

    pub fn record(&mut self, len: u64) {
        self.counts[Self::bucket(len)] += 1;
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn add(&mut self, other: &SizeHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }
}

/// One job's traffic through a forwarding node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IonJob {
    pub job: String,
    pub requests: u64,
    pub bytes: u64,
}

/// A forwarding node's state (`tessera ion status`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IonStatus {
    pub name: String,
    /// Its index in the configuration (TWINS's rotation k).
    pub index: u32,
    pub scheduler: String,
    pub window_us: u64,
    pub quantum: u32,
    /// Queued requests by scheduler queue.
    pub queues: Vec<(String, u64)>,
    /// Merged requests sent to data servers and not answered yet.
    pub in_flight: u32,
    /// Client data requests answered.
    pub requests_forwarded: u64,
    pub bytes_forwarded: u64,
    /// Requests sent to data servers (after merging).
    pub dispatched: u64,
    pub metadata_calls: u64,
    /// Sizes of the applications' reads and writes the requests were part of.
    pub sizes_leaving_clients: SizeHistogram,
    /// Sizes of the requests arriving here.
    pub sizes_arriving: SizeHistogram,
    /// Sizes of the (merged) requests sent to data servers.
    pub sizes_leaving: SizeHistogram,
    /// Mean |offset distance| between consecutive requests leaving to the same data server, bytes
    /// (object offsets, between requests for the same object).
    pub mean_offset_distance: f64,
    /// Consecutive requests leaving to the same data server for another object than the one before.
    pub object_switches: u64,
    /// Median time between consecutive arrivals over the recent ones, microseconds.
    pub median_interarrival_us: Option<u64>,
    pub jobs: Vec<IonJob>,
}

/// A periodic job's profile (PerSched, specs/periodic.md): β nodes, w of compute, then `volume` bytes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicProfile {
    pub nodes: u32,
    pub compute_ms: u64,
    pub volume: u64,
}

/// During `[start_ms, end_ms)` modulo the period the job may transfer at `bytes_per_sec` in total.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicInterval {
    pub start_ms: u64,
    pub end_ms: u64,
    pub bytes_per_sec: u64,
}

/// A job's reservation in the current pattern, whose time 0 is `origin_ms` (Unix ms).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicGrant {
    pub epoch: u64,
    pub origin_ms: u64,
    pub period_ms: u64,
    pub intervals: Vec<PeriodicInterval>,
    /// Poll again within this long or lose the reservation.
    pub lease_ms: u64,
    /// The cluster schedules online instead of by pattern: the job asks for its rate with `PeriodicIo`
    /// when a transfer starts and says when it ends (no intervals).
    pub online: bool,
    /// The job's volume per instance (bytes): a transfer that began in an interval goes on until the job has
    /// moved this much, even past the interval's end (0: unknown, intervals are strict).
    pub volume: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicJob {
    pub job: String,
    pub profile: PeriodicProfile,
    pub planned_rho: f64,
    pub measured_rho: Option<f64>,
    pub dilation: f64,
    /// How the MDS learnt the profile.
    pub source: PeriodicSource,
}

/// Where a periodic job's profile comes from: the job registered it, or the MDS detected it from the
/// job's byte counters (bursts and gaps).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum PeriodicSource {
    #[default]
    Registered,
    Detected,
}

impl PeriodicSource {
    pub fn name(self) -> &'static str {
        match self {
            PeriodicSource::Registered => "registered",
            PeriodicSource::Detected => "detected",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicReport {
    pub jobs: Vec<PeriodicJob>,
    pub period_ms: u64,
    pub syseff: f64,
    pub upper_bound: f64,
}

// ---------------------------------------------------------------------------------------------
// Per-job statistics (specs/characterization.md)
// ---------------------------------------------------------------------------------------------

/// Requests a data server does not count as small above this size (s_small).
pub const SMALL_REQUEST: u64 = 4096;
/// Streams a data server keeps apart per job (further ones are not tracked per stream).
pub const MAX_STREAMS_PER_JOB: usize = 128;
/// Jobs in one [`DsJobReport`].
pub const MAX_JOBS_PER_DETAIL: usize = 64;

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
    pub spatial: crate::characterize::Spatial,
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
    /// The counters' generation (as in [`DsReport`]); a snapshot's values count from its start.
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
    pub window: crate::characterize::Window,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_lease_grant_fits_in_a_header() {
        let per_name = LEASE_NAME_BYTES_MAX / LEASE_NAMES_MAX;
        let entries = (0..LEASE_NAMES_MAX).map(|i| (format!("{i:0per_name$}"), FileKind::Symlink)).collect();
        let attr = Attr::new(u64::MAX, FileKind::Dir, 0o7777, u32::MAX, u32::MAX, Timestamp::now());
        let inos = vec![u64::MAX; 256];
        let lease = DirLease { dir: u64::MAX, token: u64::MAX, valid_ms: u32::MAX, inos, attr, entries };
        let len = crate::wire::encode(&MdsReply::Lease(lease)).unwrap().len();
        assert!(len > LEASE_NAME_BYTES_MAX && len < crate::wire::MAX_HEADER * 3 / 4, "{len} bytes");
    }

    #[test]
    fn latency_quantiles_name_their_bucket_bound() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in [10, 60, 60, 3_000, 2_000_000] {
            h.counts[LatencyHistogram::bucket(us)] += 1;
        }
        assert_eq!(LatencyHistogram::bucket(50), 1, "bounds are exclusive");
        assert_eq!(h.quantile_us(0.0), Some(50));
        assert_eq!(h.quantile_us(0.5), Some(100));
        assert_eq!(h.quantile_us(0.8), Some(5_000));
        assert_eq!(h.quantile_us(1.0), Some(u64::MAX));
    }

    #[test]
    fn vectored_write_runs_must_match_the_payload() {
        let runs = |v: &[(u64, u32)]| v.iter().map(|&(offset, len)| Extent { offset, len }).collect::<Vec<_>>();
        assert!(check_extents(&runs(&[(0, 4096), (8192, 10)]), 4106).is_ok());
        assert!(check_extents(&runs(&[(0, 4096), (8192, 10)]), 4105).is_err(), "payload short");
        assert!(check_extents(&runs(&[(0, 4096)]), 4097).is_err(), "payload long");
        assert!(check_extents(&[], 0).is_err(), "no runs");
        assert!(check_extents(&runs(&[(5, 0)]), 0).is_err(), "empty run");
        assert!(check_extents(&runs(&[(u64::MAX - 2, 4)]), 4).is_err(), "past the largest offset");
        let many = vec![Extent { offset: 0, len: 1 }; MAX_EXTENTS + 1];
        assert!(check_extents(&many, MAX_EXTENTS + 1).is_err(), "too many runs");
        assert!(check_extents(&many[..MAX_EXTENTS], MAX_EXTENTS).is_ok());
        // u32 lengths summed in u64: a thousand 4 GiB runs do not wrap.
        let huge = vec![Extent { offset: 0, len: u32::MAX }; MAX_EXTENTS];
        assert!(check_extents(&huge, 0).is_err());
        let payload = bytes::Bytes::from_static(b"xyzab");
        let split: Vec<_> = split_runs(&runs(&[(10, 3), (0, 2)]), &payload).unwrap().collect();
        assert_eq!(split, [(10, payload.slice(0..3)), (0, payload.slice(3..5))]);
        assert!(split_runs(&runs(&[(0, 4)]), &payload).is_err(), "checked first");
    }

    #[test]
    fn vectored_read_runs_are_bounded_in_count_and_bytes() {
        let runs = |v: &[(u64, u32)]| v.iter().map(|&(offset, len)| Extent { offset, len }).collect::<Vec<_>>();
        assert_eq!(check_read_extents(&runs(&[(0, 4096), (65536, 10)]), 1 << 20).unwrap(), 4106);
        assert!(check_read_extents(&runs(&[(0, 4096), (65536, 10)]), 4105).is_err(), "over the byte limit");
        assert!(check_read_extents(&[], 1 << 20).is_err(), "no runs");
        assert!(check_read_extents(&runs(&[(5, 0)]), 1 << 20).is_err(), "empty run");
        assert!(check_read_extents(&runs(&[(u64::MAX, 1)]), 1 << 20).is_err(), "past the largest offset");
        let huge = vec![Extent { offset: 0, len: u32::MAX }; MAX_EXTENTS];
        assert!(check_read_extents(&huge, usize::MAX).is_ok(), "summed in u64");
        assert!(check_read_extents(&huge, 64 << 20).is_err());
        let many = vec![Extent { offset: 0, len: 1 }; MAX_EXTENTS + 1];
        assert!(check_read_extents(&many, usize::MAX).is_err(), "too many runs");
    }
}
