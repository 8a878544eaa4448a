//! The cluster's TOML configuration: one file describes the whole cluster; each node's file differs
//! only in its `[tls]` identity.
//!
//! ```toml
//! [mds]
//! addr = "127.0.0.1:7400"
//! data_dir = "/var/lib/tessera/mds"
//! # or, replicated metadata (issue 37), one [[mds]] entry per replica:
//! # [[mds]]
//! # name = "mds0"
//! # addr = "10.0.0.1:7400"
//! # [[mds]]
//! # name = "mds1"
//! # addr = "10.0.0.2:7400"
//!
//! [[ds]]
//! id = 0
//! addr = "127.0.0.1:7410"
//! data_dir = "/var/lib/tessera/ds0"
//! domain = "rack1"          # failure domain (optional; default: the server is its own)
//!
//! [[ion]]                 # forwarding nodes (optional; none = clients talk to servers directly)
//! name = "ion0"
//! addr = "127.0.0.1:7420"
//!
//! [defaults]
//! stripe_size = 1048576
//! stripe_count = 0          # 0 = all data servers
//! placement = "round-robin"
//! mirrors = 1               # copies of each stripe object on distinct data servers (1-3)
//!
//! [tls]
//! ca = "tls/ca.pem"         # relative paths are relative to this file
//! cert = "tls/client.pem"
//! key = "tls/client.key"
//! # crl = "tls/ca.crl.pem"  # revocation list; default: ca.crl.pem next to the CA certificate
//! ```

use crate::error::{FsError, FsResult};
use crate::rpc::Tuning;
use crate::tls::TlsFiles;
use crate::types::{DsId, TargetIdx};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A setting that is one of a few names: parsed when the configuration loads (an unknown name is an
/// error that lists the choices), written as its name in TOML, messages and flags (`FromStr`, `Display`).
macro_rules! named_setting {
    ($(#[$m:meta])* $ty:ident, default $def:ident { $($(#[$vm:meta])* $v:ident = $text:literal $(| $alias:literal)*,)+ }) => {
        $(#[$m])*
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($(#[$vm])* #[serde(rename = $text $(, alias = $alias)*)] $v,)+
        }

        impl $ty {
            /// Every choice, in the order the documentation lists them.
            pub const ALL: &'static [$ty] = &[$($ty::$v),+];
            /// Their names.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$v => $text,)+
                }
            }
        }

        impl Default for $ty {
            fn default() -> $ty {
                $ty::$def
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<$ty, UnknownName> {
                match s {
                    $($text $(| $alias)* => Ok($ty::$v),)+
                    _ => Err(UnknownName { what: stringify!($ty), name: s.to_string(), choices: $ty::NAMES }),
                }
            }
        }
    };
}

/// A name that is none of a setting's choices (defined with the other errors, so that every module can
/// name it).
pub use crate::error::UnknownName;

named_setting! {
    /// How new files' stripes are placed on the storage targets (`defaults.placement`, a directory's
    /// `tessera.placement` attribute).
    Placement, default RoundRobin {
        /// The next targets in turn (Lustre's round-robin allocator).
        RoundRobin = "round-robin" | "roundrobin" | "rr" | "simple",
        /// Lustre's weighted allocator: free space, with round-robin while balanced.
        Lustre = "lustre" | "lsa",
        /// Tarazu's: balanced by measured load.
        Balanced = "balanced" | "tarazu",
    }
}

named_setting! {
    /// What a data server's device is (`ds_options.device_model`).
    DeviceKind, default None {
        /// The real device.
        None = "none",
        /// An emulated rotating disk in front of it (`ds_options.hdd`).
        Hdd = "hdd",
    }
}

named_setting! {
    /// The order in which the emulated disk's head serves queued requests (`ds_options.hdd.elevator`).
    Elevator, default Clook {
        /// Sorted sweeps, as Linux's and the drive's schedulers do.
        Clook = "clook",
        /// Arrival order: a disk whose queue depth is 1, as behind a server that issues one I/O at a time.
        Fifo = "fifo",
    }
}

named_setting! {
    /// Which replica of a mirrored stripe a client reads (`client.replica_read`).
    ReplicaRead, default Load {
        /// The one this client has the fewest requests in flight to (its measure of the server's load),
        /// skipping servers that failed a moment ago.
        Load = "load",
        /// Always the primary while it is up, the others only when it fails (for comparison).
        First = "first",
    }
}

named_setting! {
    /// A forwarding node's request scheduler (`ion_options.scheduler`; specs/forwarding.md).
    IonScheduler, default Fifo {
        Fifo = "fifo",
        Hbrr = "hbrr",
        To = "to",
        ToAgg = "to-agg",
        Sjf = "sjf",
        Mlf = "mlf",
        Sw = "sw",
        Twins = "twins",
    }
}

named_setting! {
    /// Who arbitrates periodic jobs' I/O (`persched.scheduler`): PerSched's patterns, or an online arbiter
    /// for comparison (the greedy heuristics of the paper's earlier work).
    PerschedScheduler, default Persched {
        Persched = "persched",
        OnlineSyseff = "online-syseff",
        OnlineDilation = "online-dilation",
    }
}

/// Environment variable naming the config file when `--config` is not given.
pub const CONFIG_ENV: &str = "TESSERA_CONFIG";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The metadata servers: one `[mds]` table, or one `[[mds]]` entry per replica.
    #[serde(with = "one_or_many")]
    pub mds: Vec<MdsNode>,
    #[serde(default)]
    pub ds: Vec<DsNode>,
    /// Forwarding nodes, in order (ION k is the k-th; TWINS rotates from server k).
    #[serde(default)]
    pub ion: Vec<IonNode>,
    #[serde(default)]
    pub defaults: Defaults,
    pub tls: TlsFiles,
    #[serde(default)]
    pub ds_options: DsOptions,
    #[serde(default)]
    pub client: ClientOptions,
    #[serde(default)]
    pub transport: TransportOptions,
    #[serde(default)]
    pub orchestrator: OrchestratorOptions,
    #[serde(default)]
    pub ion_options: IonOptions,
    #[serde(default)]
    pub metrics: MetricsOptions,
    #[serde(default)]
    pub persched: PerschedOptions,
    #[serde(default)]
    pub mirror: MirrorOptions,
}

/// Mirrored files (issue 36): how replicas that miss writes are fenced off and brought back.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MirrorOptions {
    /// A data server that has not heard from the MDS for this long serves no mirrored calls (its list of
    /// replicas not in sync may be out of date); the MDS waits at most this long after a server last
    /// asked before it acknowledges a write that server missed. It asks every quarter of this.
    pub fence_lease_ms: u64,
    /// A primary waits this long after its own write for the other replicas, then pings the servers of
    /// those that have not answered; one that does not answer the ping either (0.5 s) missed the write
    /// (it is marked stale and the write acknowledged without it). A writer's longest pause when a
    /// replica's server dies is about the larger of this + 0.5 s and `fence_lease_ms`.
    pub grace_ms: u64,
    /// Resync and rebuild copying, per copy (MiB/s; 0: unthrottled).
    pub resync_mib_per_s: u64,
    /// Replicas resynced at once, cluster-wide.
    pub resync_parallel: u32,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions { fence_lease_ms: 1500, grace_ms: 500, resync_mib_per_s: 200, resync_parallel: 4 }
    }
}

impl MirrorOptions {
    pub fn fence_lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.fence_lease_ms.max(100))
    }
    pub fn grace(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.grace_ms.max(10))
    }
}

/// PerSched's platform (specs/periodic.md): N, b and B of the model, and the reservation lease.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PerschedOptions {
    /// N: client nodes SysEff is normalised by (and the largest β a job may declare).
    pub nodes: u32,
    /// b: bandwidth of one client node, bytes/s.
    pub node_bandwidth: u64,
    /// B: the file system's total bandwidth, bytes/s.
    pub total_bandwidth: u64,
    /// A periodic job that has not polled for this long loses its reservation.
    pub lease_ms: u64,
    /// PERSCHED's K' = T_max / T_min: the longest pattern period tried (the paper's 10; its §4.5 finds 3
    /// within 0.3% of SysEff). A smaller K' gives shorter periods, so a run sees more of them.
    pub k_prime: f64,
    /// `persched` (patterns), or an online arbiter for comparison: `online-syseff` | `online-dilation`
    /// (the greedy heuristics of the paper's earlier work; every transfer start and end asks the MDS).
    pub scheduler: PerschedScheduler,
    /// Detect periodic jobs from their byte counters (bursts and gaps) without registration; only jobs
    /// detected as periodic are ever delayed.
    pub detect: bool,
    /// How often the MDS looks for periodic jobs, ms.
    pub detect_interval_ms: u64,
    /// A grant's rate is the pattern's times (1 + this), so a job the storage serves as planned ends its
    /// transfer before its interval does: the slack absorbs jitter instead of delaying its next instance
    /// (PERSCHED's second loop shortens the period until an instance fits with none to spare). Configure B
    /// and b at least this far below what the storage delivers.
    pub rate_headroom: f64,
}

impl Default for PerschedOptions {
    fn default() -> Self {
        PerschedOptions {
            nodes: 64,
            node_bandwidth: 100 << 20,
            total_bandwidth: 1 << 30,
            lease_ms: 10_000,
            k_prime: 10.0,
            scheduler: PerschedScheduler::Persched,
            detect: true,
            detect_interval_ms: 2_000,
            rate_headroom: 0.1,
        }
    }
}

/// IOrchestrator settings (specs/iorchestrator.md); the mode can be switched at run time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OrchestratorOptions {
    /// off | even | iorchestrator
    pub mode: crate::msg::OrchestratorMode,
    pub window_ms: u32,
    /// Smallest slice, as a fraction of the window (nothing starves).
    pub min_slice_fraction: f64,
    /// Condition 1: std-dev of SL_i and of SL_ij across servers below this fraction of the mean.
    pub consistency_threshold: f64,
    /// Condition 2: sum SL_i / sum SL_ij at least this.
    pub locality_ratio: f64,
    /// How often data servers report locality statistics.
    pub report_interval_ms: u64,
    /// Windows of silence after which data servers fall back to work-conserving service.
    pub fallback_windows: u32,
    /// A job with no request for this long is no longer considered running.
    pub job_idle_ms: u64,
    /// Condition 3's floor: while the servers' mean SeekTime is below this (milliseconds), no program is
    /// eligible — leaving a program costs less than any reuse distance it could have through the network,
    /// so a dedicated slice could only hold the others (flash and the page cache seek in microseconds).
    pub min_seek_ms: f64,
}

impl Default for OrchestratorOptions {
    fn default() -> Self {
        OrchestratorOptions {
            mode: crate::msg::OrchestratorMode::IOrchestrator,
            window_ms: 500,
            min_slice_fraction: 0.05,
            consistency_threshold: 0.2,
            locality_ratio: 1.5,
            report_interval_ms: 100,
            fallback_windows: 2,
            job_idle_ms: 1000,
            min_seek_ms: 2.0,
        }
    }
}

/// Environment variable choosing a client's forwarding node: a name, an index, or `none`.
pub const ION_ENV: &str = "TESSERA_ION";

/// A forwarding node (ION).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IonNode {
    pub name: String,
    pub addr: String,
}

/// Forwarding nodes' settings (specs/forwarding.md); the scheduler can be switched at run time.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IonOptions {
    /// fifo | hbrr | to | to-agg | sjf | mlf | sw | twins
    pub scheduler: IonScheduler,
    /// TWINS's window (and SW's), microseconds.
    pub window_us: u64,
    /// HBRR's (and MLF's first level's) requests per queue visit.
    pub quantum: u32,
    /// Merged requests a forwarding node has in flight to data servers at once (its dispatch threads).
    /// 64 (16 per server of a 4-server cluster): with 16 the servers' elevators had too few requests to
    /// sort and small reads through forwarding nodes lost to direct access (results/fwd-analysis/).
    pub dispatch_depth: u32,
    /// A client whose forwarding nodes are all unreachable talks to the servers directly.
    pub failover_direct: bool,
    /// A forwarding node unanswered for this long counts as dead (its clients move on).
    pub failover_ms: u64,
}

impl Default for IonOptions {
    fn default() -> Self {
        IonOptions {
            scheduler: IonScheduler::Fifo,
            window_us: 1_000,
            quantum: 8,
            dispatch_depth: 64,
            failover_direct: true,
            failover_ms: 3_000,
        }
    }
}

/// Which way a client's requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IonChoice {
    /// Straight to the servers.
    Direct,
    /// Through the forwarding node of this index.
    Ion(usize),
}

/// Prometheus metrics over HTTP (`GET /metrics`, OpenMetrics text; served by `tessera-metrics`), and
/// the per-job counters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsOptions {
    /// Address of the MDS's metrics endpoint (none = off).
    pub mds_addr: Option<String>,
    /// Port of each data server's metrics endpoint = this + ds id, on the DS's host (none = off).
    pub ds_base_port: Option<u16>,
    /// Port of each forwarding node's metrics endpoint = this + its index, on its host (none = off).
    pub ion_base_port: Option<u16>,
    /// Per-job counters (specs/characterization.md) at the data servers, forwarding nodes and MDS
    /// (default on). Off, the data path counts nothing per job and the MDS registers no metadata call
    /// (`tessera jobstats` and `tessera report` then have nothing new); to measure their overhead.
    pub job_counters: bool,
}

impl Default for MetricsOptions {
    fn default() -> Self {
        MetricsOptions { mds_addr: None, ds_base_port: None, ion_base_port: None, job_counters: true }
    }
}

/// Parameters of the emulated rotating disk (`device_model = "hdd"`); defaults: a 7200 rpm SATA disk.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HddParams {
    pub track_to_track_ms: f64,
    pub average_seek_ms: f64,
    pub full_stroke_ms: f64,
    pub rpm: f64,
    pub media_rate_mb_s: f64,
    /// Size of the emulated disk; seek distances are relative to it.
    pub capacity_gb: f64,
    /// The order in which the head serves queued requests: `clook` (sorted sweeps, as Linux's and the
    /// drive's schedulers do) or `fifo` (arrival order: a disk whose queue depth is 1, as behind a server
    /// that issues one I/O at a time).
    pub elevator: Elevator,
}

impl Default for HddParams {
    fn default() -> Self {
        HddParams {
            track_to_track_ms: 0.8,
            average_seek_ms: 8.5,
            full_stroke_ms: 17.0,
            rpm: 7200.0,
            media_rate_mb_s: 78.0,
            capacity_gb: 500.0,
            elevator: Elevator::Clook,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MdsNode {
    /// The replica's name (`mds0`, `mds1`, ...; default `mds<position>`): its certificate's and
    /// `tessera mds status`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub addr: String,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// When a metadata change counts as committed (see [`MetadataCommit`]).
    #[serde(default)]
    pub metadata_commit: MetadataCommit,
    /// A client silent for longer than this is evicted: its open handles are closed (files it unlinked
    /// while open are destroyed) and its stale handles fail with EIO when it comes back.
    #[serde(default = "default_eviction_timeout_s")]
    pub eviction_timeout_s: u64,
    /// Δt of the job registry's per-job time series (`tessera jobstats`, PerSched's detection), ms.
    #[serde(default = "default_job_window_ms")]
    pub job_window_ms: u64,
}

impl MdsNode {
    /// Metadata server (or replica) `name` at `addr` with its database in `data_dir`, every other setting
    /// its default.
    pub fn new(name: Option<String>, addr: String, data_dir: Option<PathBuf>) -> MdsNode {
        MdsNode {
            name,
            addr,
            data_dir,
            metadata_commit: MetadataCommit::default(),
            eviction_timeout_s: default_eviction_timeout_s(),
            job_window_ms: default_job_window_ms(),
        }
    }
}

fn default_eviction_timeout_s() -> u64 {
    30
}

fn default_job_window_ms() -> u64 {
    1000
}

/// When the MDS acknowledges a metadata change.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetadataCommit {
    /// After appending it to the MDS's redo journal (one write(2), no fsync): it survives a crash or
    /// kill of the MDS process at once, and a power loss after the next periodic commit (100 ms) or
    /// a client's fsync/fsyncdir/sync — the contract of a local file system.
    #[default]
    Journal,
    /// After an fsync of the database (shared by concurrent changes): survives a power loss at once.
    Fsync,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DsNode {
    pub id: DsId,
    pub addr: String,
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// Storage targets this server serves (as a Lustre OSS serves OSTs), default 1: target 0 is the
    /// data directory, target k its subdirectory `target<k>`, each its own object namespace, capacity
    /// and device queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<TargetIdx>,
    /// Capacity of each target (`capacity = "10G"`), enforced: a write that would pass it fails with
    /// ENOSPC. Default: the host file system's capacity, shared by the targets on it.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::units::opt_size")]
    pub capacity: Option<u64>,
    /// The failure domain the server belongs to (`domain = "rack1"`): servers that can fail together,
    /// such as one rack, power feed or host. A mirrored file's replicas of one stripe go to distinct
    /// domains. Servers naming the same domain share it; a server without one is its own domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

impl DsNode {
    pub fn new(id: DsId, addr: String, data_dir: Option<PathBuf>) -> DsNode {
        DsNode { id, addr, data_dir, targets: None, capacity: None, domain: None }
    }

    /// How many targets the server serves (at least 1).
    pub fn target_count(&self) -> TargetIdx {
        self.targets.unwrap_or(1).max(1)
    }
}

/// Most targets a data server may serve.
pub const MAX_TARGETS: TargetIdx = 256;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    pub stripe_size: u64,
    /// 0 = all data servers.
    pub stripe_count: u32,
    pub placement: Placement,
    /// Mirror count of new files (1..=3; 1 = one copy): each stripe object kept on this many data
    /// servers (`tessera setstripe -N` sets it per directory or file).
    pub mirrors: u8,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults { stripe_size: 1 << 20, stripe_count: 0, placement: Placement::RoundRobin, mirrors: 1 }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DsOptions {
    /// How often each data server reports load and free space to the MDS.
    pub report_interval_ms: u64,
    /// `none` (real device) or `hdd` (emulated rotating disk).
    pub device_model: DeviceKind,
    /// Requests a data server hands to its device at once (work-conserving mode).
    pub device_queue_depth: u32,
    /// Fsync every write before acknowledging it (like `sync` exports); normally only on fsync/`sync` flag.
    pub sync_writes: bool,
    /// Write large requests (≥ 128 KiB, their 4 KiB-aligned part) around the page cache with O_DIRECT.
    /// Faster writes; data just written is then read back from the device, not the page cache. Falls
    /// back to buffered writes where the file system refuses O_DIRECT.
    pub direct_writes: bool,
    /// MiB of what direct writes wrote kept in memory per data server for reads (0: none), since the
    /// page cache no longer holds it.
    pub write_cache_mb: u64,
    /// Address space reserved per object in the server's volume: object k's data lies at
    /// base(k) + offset, base(k) = k-th allocation * reservation. Sets on-disk distances between files.
    pub object_reservation_bytes: u64,
    pub hdd: HddParams,
    /// Record every request served (time, job, address, length, op, client, pid) to `<data_dir>/`[`TRACE_FILE`],
    /// for the locality figures (LBA over time, reuse-distance histogram).
    pub trace: bool,
}

/// The request trace's file in a data server's data directory (`ds_options.trace`).
pub const TRACE_FILE: &str = "lba-trace.csv";

impl Default for DsOptions {
    fn default() -> Self {
        DsOptions {
            report_interval_ms: 1000,
            device_model: DeviceKind::None,
            device_queue_depth: 8,
            sync_writes: false,
            direct_writes: true,
            write_cache_mb: 256,
            object_reservation_bytes: 1 << 30,
            hdd: HddParams::default(),
            trace: false,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClientOptions {
    /// Requests in flight per data server per client.
    pub inflight_per_server: u32,
    /// Largest single data request (larger transfers are split).
    pub max_request: u32,
    pub call_timeout_ms: u64,
    /// The forwarding node to use: a name, an index or `none` (overridden by `TESSERA_ION`); unset:
    /// clients are spread over the configured forwarding nodes by client id.
    pub ion: Option<String>,
    /// Which replica of a mirrored stripe is read: `load` or `first`.
    pub replica_read: ReplicaRead,
    /// A read of a mirrored stripe not answered within this many milliseconds is also sent to the next
    /// replica, and the first answer is taken (a read in flight to a server that died waits no longer
    /// than this for another replica); a mirrored write not answered within it is taken over by another
    /// replica once the MDS says its server lost its fence lease. 0: only once a call fails.
    pub hedge_ms: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            inflight_per_server: 8,
            max_request: 4 << 20,
            call_timeout_ms: 60_000,
            ion: None,
            replica_read: ReplicaRead::Load,
            hedge_ms: 1000,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TransportOptions {
    /// Initial UDP payload size; 0 = automatic.
    pub mtu: u16,
    /// A connection whose peer has been silent this long is dead (keep-alives run at a third of it):
    /// what a call to a killed or unreachable server waits at most before it fails.
    pub idle_timeout_ms: u64,
    /// How long a connection attempt (the QUIC and TLS handshake) may take.
    pub connect_timeout_ms: u64,
    /// UDP segmentation offload (batching datagrams into one syscall).
    pub gso: bool,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions { mtu: 0, idle_timeout_ms: 5_000, connect_timeout_ms: 2_000, gso: true }
    }
}

impl ClusterConfig {
    /// A cluster of these servers, with `defaults` for new files and identity `tls`; every other section
    /// its default.
    pub fn of_nodes(
        mds: Vec<MdsNode>,
        ds: Vec<DsNode>,
        ion: Vec<IonNode>,
        defaults: Defaults,
        tls: crate::tls::TlsFiles,
    ) -> ClusterConfig {
        ClusterConfig {
            mds,
            ds,
            ion,
            defaults,
            tls,
            ds_options: Default::default(),
            client: Default::default(),
            transport: TransportOptions::default(),
            orchestrator: Default::default(),
            ion_options: Default::default(),
            mirror: Default::default(),
            metrics: Default::default(),
            persched: Default::default(),
        }
    }

    /// Reads a config file; relative paths inside it are resolved against the file's directory.
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        ClusterConfig::load_with(path, &[])
    }

    /// [`ClusterConfig::load`], with `overrides` set over the file's values before they are checked: each
    /// `KEY=VALUE`, KEY a dotted path into the file (`ds_options.device_model`, `ds.1.data_dir`: a number
    /// picks an array's element), VALUE a TOML value, or a string when it is not one. Every value of the
    /// file can so be given on a daemon's command line (`--set`).
    pub fn load_with(path: &Path, overrides: &[String]) -> Result<ClusterConfig, ConfigError> {
        let at = || path.to_path_buf();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: at(), source })?;
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|source| ConfigError::Parse { path: at(), source })?;
        for kv in overrides {
            set_value(&mut table, kv).map_err(|source| ConfigError::Set { path: at(), kv: kv.clone(), source })?;
        }
        let mut cfg: ClusterConfig = table.try_into().map_err(|source| ConfigError::Parse { path: at(), source })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut cfg.tls.ca);
        fix(&mut cfg.tls.cert);
        fix(&mut cfg.tls.key);
        if let Some(crl) = cfg.tls.crl.as_mut() {
            fix(crl);
        }
        for m in &mut cfg.mds {
            if let Some(d) = m.data_dir.as_mut() {
                fix(d);
            }
        }
        for ds in &mut cfg.ds {
            if let Some(d) = ds.data_dir.as_mut() {
                fix(d);
            }
        }
        cfg.validate().map_err(|e| ConfigError::Invalid { path: at(), detail: e.detail })?;
        Ok(cfg)
    }

    /// The first metadata server (the only one unless the metadata is replicated).
    pub fn mds0(&self) -> &MdsNode {
        &self.mds[0]
    }

    /// Name of the metadata server at position `i` (its `name`, else `mds<i>`).
    pub fn mds_name(&self, i: usize) -> String {
        self.mds.get(i).and_then(|m| m.name.clone()).unwrap_or_else(|| format!("mds{i}"))
    }

    /// Every metadata server's address, in order.
    pub fn mds_addrs(&self) -> Vec<&str> {
        self.mds.iter().map(|m| m.addr.as_str()).collect()
    }

    /// Finds the config: the explicit path, else `$TESSERA_CONFIG`.
    pub fn locate(explicit: Option<&Path>) -> Result<ClusterConfig, ConfigError> {
        ClusterConfig::locate_with(explicit, &[])
    }

    /// [`ClusterConfig::locate`] with `overrides` ([`ClusterConfig::load_with`]).
    pub fn locate_with(explicit: Option<&Path>, overrides: &[String]) -> Result<ClusterConfig, ConfigError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => std::env::var_os(CONFIG_ENV).map(PathBuf::from).ok_or(ConfigError::Missing)?,
        };
        ClusterConfig::load_with(&path, overrides)
    }

    pub fn validate(&self) -> FsResult<()> {
        if self.mds.is_empty() {
            return Err(FsError::invalid("no metadata server: an [mds] table or [[mds]] entries"));
        }
        let mut mds: Vec<String> = (0..self.mds.len()).map(|i| self.mds_name(i)).collect();
        mds.sort_unstable();
        if mds.windows(2).any(|w| w[0] == w[1]) {
            return Err(FsError::invalid("duplicate metadata server name"));
        }
        let mut ids: Vec<DsId> = self.ds.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(FsError::invalid("duplicate data server id"));
        }
        if let Some(d) = self.ds.iter().find(|d| d.targets.is_some_and(|t| t == 0 || t > MAX_TARGETS)) {
            return Err(FsError::invalid(format!("data server {}: targets must be 1 to {MAX_TARGETS}", d.id)));
        }
        let mut names: Vec<&str> = self.ion.iter().map(|i| i.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(FsError::invalid("duplicate forwarding node name"));
        }
        if let Some(bad) = names.iter().find(|n| n.is_empty() || **n == "none" || n.parse::<usize>().is_ok()) {
            return Err(FsError::invalid(format!(
                "forwarding node name '{bad}': must be non-empty, not 'none' and not a number"
            )));
        }
        crate::layout::LayoutSpec {
            stripe_size: Some(self.defaults.stripe_size),
            stripe_count: None,
            mirrors: Some(self.defaults.mirrors),
        }
        .validate()
        .map_err(|e| FsError::invalid(format!("[defaults] {}", e.detail)))?;
        if !["persched", "online-syseff", "online-dilation"].contains(&self.persched.scheduler.as_str()) {
            return Err(FsError::invalid(format!(
                "[persched] scheduler '{}': must be persched, online-syseff or online-dilation",
                self.persched.scheduler
            )));
        }
        if !(self.persched.k_prime.is_finite() && self.persched.k_prime >= 1.0) {
            return Err(FsError::invalid("[persched] k_prime must be a number ≥ 1"));
        }
        if !(self.persched.rate_headroom.is_finite() && (0.0..=1.0).contains(&self.persched.rate_headroom)) {
            return Err(FsError::invalid("[persched] rate_headroom must be a number from 0 to 1"));
        }
        Ok(())
    }

    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = toml::to_string_pretty(self).map_err(ConfigError::Serialize)?;
        std::fs::write(path, text).map_err(|source| ConfigError::Write { path: path.to_path_buf(), source })
    }

    /// The forwarding node a client goes through: `setting` (`TESSERA_ION` or `client.ion`: a name,
    /// an index or `none`), else client `client_id`'s share of the configured ones (direct if none).
    pub fn choose_ion(&self, setting: Option<&str>, client_id: u64) -> FsResult<IonChoice> {
        match setting.map(str::trim) {
            None | Some("") => Ok(if self.ion.is_empty() {
                IonChoice::Direct
            } else {
                IonChoice::Ion((client_id % self.ion.len() as u64) as usize)
            }),
            Some("none") => Ok(IonChoice::Direct),
            Some(s) => {
                let found = match s.parse::<usize>() {
                    Ok(i) if i < self.ion.len() => Some(i),
                    Ok(_) => None,
                    Err(_) => self.ion.iter().position(|n| n.name == s),
                };
                found.map(IonChoice::Ion).ok_or_else(|| {
                    let names: Vec<&str> = self.ion.iter().map(|n| n.name.as_str()).collect();
                    FsError::invalid(format!(
                        "forwarding node '{s}' is not in the configuration (configured: {}; or 'none')",
                        if names.is_empty() { "none".to_string() } else { names.join(", ") }
                    ))
                })
            }
        }
    }

    /// [`ClusterConfig::choose_ion`] with the setting of `TESSERA_ION`, else `client.ion`.
    pub fn client_ion(&self, client_id: u64) -> FsResult<IonChoice> {
        let env = std::env::var(ION_ENV).ok();
        self.choose_ion(env.as_deref().or(self.client.ion.as_deref()), client_id)
    }

    pub fn ds_node(&self, id: DsId) -> Option<&DsNode> {
        self.ds.iter().find(|d| d.id == id)
    }

    pub fn tuning(&self) -> Tuning {
        Tuning {
            mtu: self.transport.mtu,
            idle_timeout: Duration::from_millis(self.transport.idle_timeout_ms.max(1000)),
            connect_timeout: Duration::from_millis(self.transport.connect_timeout_ms.max(100)),
            call_timeout: Duration::from_millis(self.client.call_timeout_ms.max(1000)),
            gso: self.transport.gso,
        }
    }
}

/// Why a configuration was not loaded or saved ([`ClusterConfig::load_with`], [`ClusterConfig::save`]);
/// the file's path and the underlying error (I/O, TOML) are kept. A reply carries it as an
/// [`FsError`] (`Invalid`, or `Io` when the file could not be written).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("no cluster configuration: pass --config FILE or set {CONFIG_ENV} (`tessera up` writes DIR/client.toml)")]
    Missing,
    #[error("config {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("config {}: --set {kv}", path.display())]
    Set {
        path: PathBuf,
        kv: String,
        #[source]
        source: SetError,
    },
    /// The values read are not a valid cluster ([`ClusterConfig::validate`]).
    #[error("config {}: {detail}", path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("config")]
    Serialize(#[source] toml::ser::Error),
    #[error("{}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<ConfigError> for FsError {
    fn from(e: ConfigError) -> FsError {
        let code = match e {
            ConfigError::Write { .. } => crate::error::ErrorCode::Io,
            _ => crate::error::ErrorCode::Invalid,
        };
        FsError::from_error(code, &e)
    }
}

/// Why a `--set KEY=VALUE` override was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    #[error("expected KEY=VALUE")]
    NoValue,
    #[error("'{0}' is not a dotted key")]
    NotDotted(String),
    #[error("empty key")]
    Empty,
    #[error("'{key}': '{part}' must index a list")]
    NotIndex { key: String, part: String },
    #[error("'{key}': the list has {len} element(s)")]
    OutOfRange { key: String, len: usize },
    #[error("'{key}': '{part}' is inside a value, not a table")]
    InsideValue { key: String, part: String },
}

/// Sets `KEY=VALUE` in `table` ([`ClusterConfig::load_with`]): the tables on the way are made when
/// missing; a number indexes a list.
fn set_value(table: &mut toml::Table, kv: &str) -> Result<(), SetError> {
    let (key, value) = kv.split_once('=').ok_or(SetError::NoValue)?;
    let key = key.trim();
    let value = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(value.to_string())),
        Err(_) => toml::Value::String(value.to_string()),
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(SetError::NotDotted(key.to_string()));
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    let r = set_in(&mut root, &parts, value, key);
    if let toml::Value::Table(t) = root {
        *table = t;
    }
    r
}

fn set_in(at: &mut toml::Value, parts: &[&str], value: toml::Value, key: &str) -> Result<(), SetError> {
    let Some((first, rest)) = parts.split_first() else { return Err(SetError::Empty) };
    let next = match at {
        toml::Value::Table(t) if rest.is_empty() => {
            t.insert(first.to_string(), value);
            return Ok(());
        }
        toml::Value::Table(t) => t.entry(first.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new())),
        toml::Value::Array(a) => {
            let n = a.len();
            let i: usize =
                first.parse().map_err(|_| SetError::NotIndex { key: key.to_string(), part: first.to_string() })?;
            a.get_mut(i).ok_or_else(|| SetError::OutOfRange { key: key.to_string(), len: n })?
        }
        _ => return Err(SetError::InsideValue { key: key.to_string(), part: first.to_string() }),
    };
    if rest.is_empty() {
        *next = value;
        return Ok(());
    }
    set_in(next, rest, value, key)
}

/// A list that TOML may also give as a single table: `[mds]` is one metadata server, `[[mds]]` entries
/// are several. One is written back as a table.
mod one_or_many {
    use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
    use serde::{Deserialize, Serialize, Serializer};
    use std::marker::PhantomData;

    pub fn serialize<T: Serialize, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        match v {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }

    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: DeserializeOwned> Visitor<'de> for V<T> {
            type Value = Vec<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table or an array of tables")
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Vec<T>, A::Error> {
                Ok(vec![T::deserialize(de::value::MapAccessDeserializer::new(m))?])
            }
            fn visit_seq<A: SeqAccess<'de>>(self, s: A) -> Result<Vec<T>, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(s))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[mds]` is one metadata server, `[[mds]]` entries are replicas (named, or `mds<i>`); one is
    /// written back as a table; a field it does not know is still refused; names are unique.
    #[test]
    fn one_mds_table_or_replica_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        let tail = "[tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n";
        std::fs::write(
            &p,
            format!("[[mds]]\naddr = \"h1:1\"\ndata_dir = \"m\"\n[[mds]]\nname = \"b\"\naddr = \"h2:1\"\n{tail}"),
        )
        .unwrap();
        let c = ClusterConfig::load(&p).unwrap();
        assert_eq!(c.mds_addrs(), ["h1:1", "h2:1"]);
        assert_eq!((c.mds_name(0), c.mds_name(1)), ("mds0".to_string(), "b".to_string()));
        assert_eq!(c.mds[0].data_dir.as_deref(), Some(dir.path().join("m").as_path()));
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("[[mds]]"), "{text}");
        let one = ClusterConfig { mds: vec![c.mds[0].clone()], ..c.clone() };
        let text = toml::to_string(&one).unwrap();
        assert!(text.contains("[mds]\n") && !text.contains("[[mds]]"), "{text}");
        std::fs::write(&p, format!("[mds]\naddr = \"h:1\"\nbogus = 1\n{tail}")).unwrap();
        let e = ClusterConfig::load(&p).unwrap_err();
        assert!(format!("{e:#}").contains("bogus") || format!("{e:?}").contains("bogus"), "{e:?}");
        std::fs::write(
            &p,
            format!("[[mds]]\naddr = \"h:1\"\nname = \"x\"\n[[mds]]\naddr = \"h:2\"\nname = \"x\"\n{tail}"),
        )
        .unwrap();
        assert!(ClusterConfig::load(&p).unwrap_err().to_string().contains("duplicate metadata server"));
    }

    #[test]
    fn load_resolves_relative_paths_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "[mds]\naddr = \"127.0.0.1:1\"\n[[ds]]\nid = 0\naddr = \"127.0.0.1:2\"\ndata_dir = \"d0\"\n[tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n",
        )
        .unwrap();
        let c = ClusterConfig::load(&p).unwrap();
        assert_eq!(c.tls.ca, dir.path().join("ca.pem"));
        assert_eq!(c.ds[0].data_dir.as_deref(), Some(dir.path().join("d0").as_path()));
        assert_eq!(c.defaults.stripe_size, 1 << 20);
        std::fs::write(&p, "[mds]\naddr = 1\n").unwrap();
        assert!(ClusterConfig::load(&p).is_err());
    }

    /// The named settings are parsed when the file loads: their names and aliases read, an unknown name
    /// fails with the choices, and they are written back as their names.
    #[test]
    fn named_settings_are_checked_at_load() {
        let base = "[mds]\naddr = \"127.0.0.1:1\"\n[tls]\nca = \"ca\"\ncert = \"c\"\nkey = \"k\"\n";
        let c: ClusterConfig = toml::from_str(&format!(
            "{base}[defaults]\nplacement = \"tarazu\"\n[ds_options]\ndevice_model = \"hdd\"\n[ds_options.hdd]\nelevator = \"fifo\"\n\
             [ion_options]\nscheduler = \"to-agg\"\n[orchestrator]\nmode = \"even\"\n[persched]\nscheduler = \"online-syseff\"\n"
        ))
        .unwrap();
        assert_eq!(c.defaults.placement, Placement::Balanced, "an alias");
        assert_eq!((c.ds_options.device_model, c.ds_options.hdd.elevator), (DeviceKind::Hdd, Elevator::Fifo));
        assert_eq!(c.ion_options.scheduler, IonScheduler::ToAgg);
        assert_eq!(c.orchestrator.mode, crate::msg::OrchestratorMode::Even);
        assert_eq!(c.persched.scheduler, PerschedScheduler::OnlineSyseff);
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("placement = \"balanced\"") && text.contains("mode = \"even\""), "{text}");
        let e = toml::from_str::<ClusterConfig>(&format!("{base}[ds_options]\ndevice_model = \"ssd\"\n")).unwrap_err();
        assert!(e.to_string().contains("ssd"), "{e}");
        let e = "cfq".parse::<IonScheduler>().unwrap_err().to_string();
        assert_eq!(e, "unknown IonScheduler 'cfq' (one of: fifo, hbrr, to, to-agg, sjf, mlf, sw, twins)");
        for p in Placement::ALL {
            assert_eq!(p.as_str().parse::<Placement>(), Ok(*p));
        }
    }

    /// `--set KEY=VALUE` over the file: scalars, strings, named settings, list elements; bad keys and
    /// values are errors that name them.
    #[test]
    fn values_are_set_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "[mds]\naddr = \"127.0.0.1:1\"\n[[ds]]\nid = 0\naddr = \"127.0.0.1:2\"\n[[ds]]\nid = 1\naddr = \"127.0.0.1:3\"\n\
             [tls]\nca = \"ca.pem\"\ncert = \"c.pem\"\nkey = \"c.key\"\n",
        )
        .unwrap();
        let set = |kv: &[&str]| ClusterConfig::load_with(&p, &kv.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let c = set(&[
            "ds_options.device_model=hdd",
            "ds_options.hdd.capacity_gb=150",
            "orchestrator.window_ms=250",
            "ds.1.data_dir=d1",
            "defaults.placement=lustre",
        ])
        .unwrap();
        assert_eq!((c.ds_options.device_model, c.ds_options.hdd.capacity_gb), (DeviceKind::Hdd, 150.0));
        assert_eq!((c.orchestrator.window_ms, c.defaults.placement), (250, Placement::Lustre));
        assert_eq!(c.ds[1].data_dir.as_deref(), Some(dir.path().join("d1").as_path()), "relative to the file");
        for (kv, says) in [
            ("ds_options.device_model=ssd", "ssd"),
            ("nonsense=1", "nonsense"),
            ("ds.7.addr=x", "2 element"),
            ("ds.x.addr=x", "must index"),
            ("mds.addr.port=1", "inside a value"),
            ("orchestrator.window_ms", "KEY=VALUE"),
        ] {
            let e = crate::error::chain(&set(&[kv]).unwrap_err());
            assert!(e.contains(says), "--set {kv}: {e}");
        }
    }

    /// `[[ds]] domain`: a server's failure domain, optional (none: the server is its own), written back
    /// only when set.
    #[test]
    fn data_servers_name_their_failure_domain() {
        let c: ClusterConfig = toml::from_str(
            "[mds]\naddr = \"m:1\"\n[[ds]]\nid = 0\naddr = \"x:1\"\ndomain = \"rack1\"\n[[ds]]\nid = 1\naddr = \"x:2\"\n\
             domain = \"rack1\"\n[[ds]]\nid = 2\naddr = \"x:3\"\n[tls]\nca = \"ca\"\ncert = \"c\"\nkey = \"k\"\n",
        )
        .unwrap();
        let domains: Vec<Option<&str>> = c.ds.iter().map(|d| d.domain.as_deref()).collect();
        assert_eq!(domains, [Some("rack1"), Some("rack1"), None]);
        let text = toml::to_string(&c).unwrap();
        assert_eq!(text.matches("domain = \"rack1\"").count(), 2, "{text}");
        assert_eq!(toml::from_str::<ClusterConfig>(&text).unwrap(), c);
        assert_eq!(DsNode::new(3, "x:4".into(), None).domain, None);
    }

    #[test]
    fn clients_choose_a_forwarding_node() {
        let mut c: ClusterConfig = toml::from_str(
            "[mds]\naddr = \"m:1\"\n[[ion]]\nname = \"a\"\naddr = \"x:1\"\n[[ion]]\nname = \"b\"\naddr = \"x:2\"\n[[ion]]\nname = \"c\"\naddr = \"x:3\"\n[tls]\nca = \"ca\"\ncert = \"c\"\nkey = \"k\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        // Spread by client id when nothing is chosen.
        let picks: Vec<IonChoice> = (0..6).map(|id| c.choose_ion(None, id).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2].map(IonChoice::Ion));
        assert_eq!(c.choose_ion(Some("b"), 0).unwrap(), IonChoice::Ion(1));
        assert_eq!(c.choose_ion(Some("2"), 0).unwrap(), IonChoice::Ion(2));
        assert_eq!(c.choose_ion(Some("none"), 0).unwrap(), IonChoice::Direct);
        let e = c.choose_ion(Some("zz"), 0).unwrap_err();
        assert!(e.detail.contains("a, b, c"), "{e}");
        assert!(c.choose_ion(Some("3"), 0).is_err());
        c.ion[1].name = "a".into();
        assert!(c.validate().is_err(), "duplicate names");
        c.ion[1].name = "7".into();
        assert!(c.validate().is_err(), "a number is an index, not a name");
        c.ion.clear();
        assert_eq!(c.choose_ion(None, 5).unwrap(), IonChoice::Direct, "no forwarding nodes: direct");
    }
}
