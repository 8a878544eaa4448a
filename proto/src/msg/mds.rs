//! The metadata service: [`MdsCall`] (credentials, origin and an [`MdsRequest`]) and its [`MdsReply`];
//! directory leases and their batches, declared files, the placement and fsck reports.

use super::common::{DirEntry, OpenFlags, RenameFlags, SetAttrs, StatFs, XattrMode};
use super::ds_report::{DsReport, DsStatus};
use super::jobs::{DsJobReport, IonJobReport, JobInfo};
use super::orchestrator::{LocalityReport, OrchestratorMode, OrchestratorStatus};
use super::periodic::{PeriodicGrant, PeriodicProfile, PeriodicReport};
use crate::error::FsResult;
use crate::layout::{ExtentSpec, Layout, LayoutSpec, StripeTarget};
use crate::types::*;
use serde::{Deserialize, Serialize};

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
        /// The creating process's umask, applied by the MDS unless the parent has a default ACL (which
        /// masks `perm` instead, POSIX.1e); 0 when `perm` is final.
        umask: u32,
        rdev: u32,
        exclusive: bool,
        layout: Option<LayoutSpec>,
    },
    Mkdir {
        parent: Ino,
        name: String,
        perm: u32,
        /// The creating process's umask, applied by the MDS unless the parent has a default ACL (which
        /// masks `perm` instead, POSIX.1e); 0 when `perm` is final.
        umask: u32,
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
        /// The creating process's umask, applied by the MDS unless the parent has a default ACL (which
        /// masks `perm` instead, POSIX.1e); 0 when `perm` is final.
        umask: u32,
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
    /// The MDS's channel to a client (its recalls of cached names and attributes): the client keeps one
    /// `Watch` waiting at all times. Answered once a recall numbered above `acked` is queued for the
    /// caller, or after `wait_ms` (at most [`WATCH_WAIT_MAX_MS`]) with none. `acked`: the last recall
    /// the client has carried out (the kernel dropped what it names); the MDS goes on with the change
    /// that recalled it. While a client watches, every name and attribute the MDS answers it is leased
    /// to it for [`Recalls::lease_ms`] from the sending of its last answered `Watch` (see
    /// [`Recalls`]). Reply: `Recalls`.
    Watch {
        acked: u64,
        wait_ms: u32,
        /// The client goes away (unmounts): it caches nothing any more, no change waits for it.
        leave: bool,
    },
    /// Checks the namespace against itself and against every data server's objects (`tessera fsck`;
    /// admins only), online; with `repair`, fixes what it found. Reply: `Fsck`.
    Fsck {
        repair: bool,
        /// Also compare the in-sync replicas of every mirrored stripe by checksum (every object read
        /// whole on its data server), not only by size.
        verify_mirrors: bool,
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
    /// From a data server holding replica `from` of a mirrored stripe, in sync: the replicas `missed`
    /// did not get a write (issue 36, degraded mode). The MDS marks them stale and makes that durable,
    /// and answers once each one's data server knows it or has stopped serving mirrored reads (its fence
    /// lease ran out); only then is the write acknowledged. Marking the primary makes `from` the
    /// primary. `logs`: one per replica of `missed` (or none), the id of the log `from` keeps of the
    /// ranges that replica misses (0: none), so that its resync copies only those. Reply: `MirrorMarked`.
    MirrorMarkStale {
        from: StripeTarget,
        missed: Vec<StripeTarget>,
        logs: Vec<u64>,
    },
    /// From data server `ds`: which of its objects are replicas not in sync (it serves no reads of them
    /// and no calls as their primary), unless its copy (`known`, a version) is current. A data server
    /// asks often; one that has not had an answer for the fence lease serves no mirrored calls. Reply:
    /// `Fences`.
    MirrorFences {
        ds: DsId,
        known: u64,
        /// The identity of the server's object store (made when its data directory was first used): a
        /// new one means the store was lost (a wiped or replaced disk), and every replica on it is stale.
        store: u64,
    },
    /// Mirrored files' health (`tessera mirror status`). Reply: `MirrorStatus`.
    MirrorStatus,
    /// Whether data server `ds` still holds its fence lease (it asked for its fences within half the
    /// lease). A client whose mirrored write its primary has not answered asks: a server that stopped
    /// asking is down or cut off, will refuse mirrored calls once its lease runs out, and another replica
    /// may take the write over; one still asking is only slow. Reply: `MirrorLease`.
    MirrorLease {
        ds: DsId,
    },
    /// Takes data server `ds` out of the cluster's placement (`tessera ds remove N`); with `rebuild`, every
    /// mirrored replica on it is replaced by a new one on another server, resynced from a surviving copy
    /// (admins only). Reply: `MirrorStatus`.
    DsRemove {
        ds: DsId,
        rebuild: bool,
    },
    /// Between metadata replicas (issue 37): one of the replicated log's messages, the Raft library's
    /// request encoded in the payload; the reply's payload holds its answer. Reply: `Raft`.
    Raft {
        rpc: RaftRpc,
    },
    /// This replica's place in the replicated metadata service (`tessera mds status`): any replica
    /// answers for itself, leader or not. Reply: `Replica`.
    ReplicaStatus,
    /// A client's open handles, reasserted to a metadata server that started since it opened them (a
    /// restart, or a new leading replica: `Session::boot` changed): during its grace period the server
    /// keeps the files unlinked while open that it found, and those a client reasserts stay until their
    /// last close (NFSv4's reclaim, Lustre's open replay). At most [`MAX_REOPEN`] per request.
    /// Reply: `Reopened`.
    Reopen {
        handles: Vec<HeldHandle>,
    },
    /// Changes which replicas the replicated metadata service has, without stopping it (`tessera mds
    /// add`, `tessera mds remove`; admins only, answered by the leader). Reply: `Replica`, the leader's
    /// status after the change.
    ChangeReplicas {
        change: ReplicaChange,
    },
    /// Places, changes or removes a POSIX (`fcntl`) or `flock` lock of `owner` (the lock owner the
    /// client's kernel named; with the client id it names the owner across nodes) on `ino` (issue 42).
    /// Refused with `WouldBlock` (EAGAIN) when another owner's lock is in the way and `wait_ms` is 0;
    /// otherwise the server holds the request until the lock is free, for at most `wait_ms` (capped at
    /// [`LOCK_WAIT_SLICE_MS`]; then `Lock { granted: false }`: ask again with the same `wait_id`; the
    /// client keeps it well within its call timeout), refuses it with `Deadlock`
    /// (EDEADLK) when the owners in the way wait, directly or not, for this one, and with `Interrupted`
    /// (EINTR) once `CancelLock` named it. `reclaim`: a lock granted by an earlier start of the service,
    /// reasserted in the grace period after a restart or failover (new locks wait until it ends).
    /// Reply: `Lock`.
    Lock {
        ino: Ino,
        owner: u64,
        spec: crate::locks::LockSpec,
        wait_ms: u32,
        wait_id: u64,
        reclaim: bool,
    },
    /// `F_GETLK`: the first lock of another owner that would keep `owner` from placing `spec` on `ino`.
    /// Reply: `LockTest`.
    TestLock {
        ino: Ino,
        owner: u64,
        spec: crate::locks::LockSpec,
    },
    /// Gives up `owner`'s wait `wait_id` (the waiting process got a signal): the `Lock` request waiting
    /// answers `Interrupted`, unless it was granted already. Reply: `Ok`.
    CancelLock {
        owner: u64,
        wait_id: u64,
    },
}

/// Longest a `Lock` request with `wait` is held at the server before it answers "not yet" (the client
/// asks again): well within any request timeout, and a waiter whose client died is forgotten by then.
pub const LOCK_WAIT_SLICE_MS: u64 = 10_000;

/// A change of the metadata replicas' membership: a new replica joins as a learner (receives the log,
/// catches up from a snapshot, does not vote), is promoted to a voter once caught up, and a replica (a
/// dead one, or one moving to another host) is removed. Every change is a joint-consensus change of the
/// replicated log, so the service goes on throughout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ReplicaChange {
    /// Replica `id` at `addr` (`host:port`) joins as a learner.
    Add { id: u64, addr: String },
    /// Learner `id` becomes a voter.
    Promote { id: u64 },
    /// Replica `id` leaves the group (a voter, or a learner).
    Remove { id: u64 },
}

/// How far behind the leader's log (in entries) a learner may be when it is made a voter: a voter far
/// behind would hold up every commit that needs it until it has caught up.
pub const PROMOTE_LAG: u64 = 1000;

/// Longest address a [`ReplicaChange::Add`] names.
pub const MAX_REPLICA_ADDR: usize = 256;

/// One member of the replicated metadata service, as a replica knows the membership.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ReplicaMember {
    pub id: u64,
    /// Its `host:port`.
    pub addr: String,
    /// Whether it votes (a learner does not).
    pub voter: bool,
}

/// Most handles one `Reopen` reasserts.
pub const MAX_REOPEN: usize = 4096;

/// One handle a client holds, as the server that granted it saw it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct HeldHandle {
    pub ino: Ino,
    pub handle: u64,
}

/// The replicated log's messages between metadata replicas.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum RaftRpc {
    Vote,
    AppendEntries,
    InstallSnapshot,
}

/// One metadata replica's state (`tessera mds status`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ReplicaStatus {
    /// Its id in the group (its position in the configuration's `[[mds]]` list, plus one).
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner`, `shutdown`, or `not-member` (a replica not in the
    /// group's membership: new and not added yet, or removed); `single` for a metadata server without
    /// replicas.
    pub role: String,
    pub term: u64,
    /// The last entry in its log.
    pub log_index: u64,
    /// The last entry applied to its database.
    pub applied_index: u64,
    /// The replica it believes leads (its id).
    pub leader: Option<u64>,
    /// Only on the leader: the last log index each replica (by id) is known to hold.
    pub matched: Vec<(u64, u64)>,
    /// Whether it serves metadata requests (a leader once caught up).
    pub serving: bool,
    /// The group's members as this replica knows them (empty for a single metadata server).
    pub members: Vec<ReplicaMember>,
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

/// Longest a `Watch` waits for a recall before it is answered empty.
pub const WATCH_WAIT_MAX_MS: u32 = 10_000;
/// Most recalls one `Recalls` answer carries (the rest come with the next).
pub const RECALLS_MAX: usize = 1024;
/// Most names one recall names (beyond: `all_names`).
pub const RECALL_NAMES_MAX: usize = 64;

/// Answers `Watch`: the recalls queued for the caller and not acknowledged yet, in order. While the
/// caller keeps watching (a `Watch` answered at least every `lease_ms`), what the MDS answers it about
/// names and attributes stays leased to it: a change another client makes to them is held until the
/// caller acknowledged the recall (or its lease expired), so it may cache them until its lease ends
/// ([`Recalls::lease_ms`] after the sending of its last answered `Watch`). An answer that was on its
/// way while a recall of one of its inodes arrived is not leased.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Recalls {
    /// Which start of the metadata service answers: a new one knows of no lease granted before.
    pub boot: u64,
    /// How long a lease lasts after the sending of the `Watch` this answers.
    pub lease_ms: u32,
    pub recalls: Vec<Recall>,
}

/// One recall: what the client must stop caching of inode `ino`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Recall {
    /// Numbered from 1 per client; acknowledged by the next `Watch`'s `acked`.
    pub seq: u64,
    pub ino: Ino,
    /// Its attributes changed.
    pub attrs: bool,
    /// Names in it (a directory) that changed.
    pub names: Vec<String>,
    /// Any name in it may have changed.
    pub all_names: bool,
    /// Everything this client caches (`ino` 0): its lease is void.
    pub everything: bool,
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
    /// When the holder made it: the file's times, and the directory's new mtime and ctime, as the
    /// holder showed them (the MDS records these, so no time changes when the batch arrives).
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
        /// When the holder removed it: the directory's new mtime and ctime, as the holder showed them.
        time: Timestamp,
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
    /// A replicated log message's answer (in the payload).
    Raft,
    Replica(ReplicaStatus),
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
        /// Which start of the metadata service answers (a new number after a restart or a failover:
        /// the client then reasserts its open handles with `Reopen`).
        boot: u64,
    },
    /// Answers `Watch`.
    Recalls(Recalls),
    /// Answers `Reopen`: the handles whose files are gone (their reads and writes fail).
    Reopened {
        stale: Vec<u64>,
    },
    /// Answers `Lock`: granted (or removed), or still blocked after the wait slice (ask again).
    Lock {
        granted: bool,
    },
    /// Answers `TestLock`: the lock in the way, if any.
    LockTest(Option<crate::locks::HeldLock>),
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
    /// A `MirrorMarkStale` is durable: the file's layout generation after it.
    MirrorMarked {
        gen: u64,
    },
    /// A data server's replicas not in sync (`None`: its copy of version `version` is current).
    Fences {
        version: u64,
        objects: Option<Vec<ObjectId>>,
    },
    MirrorStatus(MirrorStatus),
    /// Whether the server asked about in `MirrorLease` holds its fence lease.
    MirrorLease {
        held: bool,
    },
}

/// What `tessera mirror status` shows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct MirrorStatus {
    /// Mirrored files with a replica not in sync.
    pub degraded_files: u64,
    /// Replica objects not in sync (stale or resyncing).
    pub degraded_objects: u64,
    pub stale: u64,
    pub resyncing: u64,
    /// Bytes the replicas not in sync have to copy at most (their stripes' share of their files'
    /// sizes: what a whole-object resync copies; one from the primary's log of what a replica missed
    /// copies only that).
    pub bytes_to_resync: u64,
    /// Since the MDS started: resyncs finished and the bytes they copied.
    pub resyncs_done: u64,
    pub resynced_bytes: u64,
    /// Bytes copied per second over the last few seconds.
    pub resync_rate: u64,
    /// Data servers taken out of placement (`tessera ds remove`).
    pub removed: Vec<DsId>,
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

/// Every MDS request is sent together with the caller's credentials and who issues it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct MdsCall {
    pub caller: Caller,
    pub origin: Origin,
    pub req: MdsRequest,
    /// The client's number for a request that is not idempotent (1, 2, ... per client, `origin.client`):
    /// the MDS answers a resent one from its reply cache with the first answer, so it can be resent
    /// safely (a lost reply no longer turns a create's success into EEXIST). 0: none.
    pub seq: u64,
}

pub type MdsResponse = FsResult<MdsReply>;

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
}
