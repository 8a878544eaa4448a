//! The `tessera` command-line tool: certificates, the local cluster (`up`), and file operations.

use crate::progress;
use crate::up::{self, UpOptions};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tessera_client::client::{clean_path, join_path, split_parent, Client};
use tessera_client::file::{File, OpenOptions};
use tessera_ops::ca::{CaDir, CertState};
use tessera_proto::config::ClusterConfig;
use tessera_proto::error::{chain, ErrorCode, FsError};
use tessera_proto::layout::{ExtentSpec, Layout, LayoutSpec, EOF};
use tessera_proto::msg::{
    ost_cost, FsckReport, OrchestratorMode, OrchestratorStatus, ReplicaChange, SetAttrs, TargetJob, TargetReport,
    XattrMode, PROMOTE_LAG,
};
use tessera_proto::tls;
use tessera_proto::types::{format_utc, Attr, DsId, FileKind, Role, Timestamp};
use tessera_proto::units::parse_size;
use tokio::io::AsyncWriteExt;

/// `put` reads the local file in blocks of the engine's write-behind chunk: each block is a whole chunk,
/// which the engine sends as it is (no copy into its buffers).
const PUT_BLOCK: u64 = tessera_client::cache::write_behind::WRITE_CHUNK as u64;
/// `get` and `cat` read in the engine's read-ahead chunks.
const GET_BLOCK: u64 = tessera_client::cache::read_ahead::RA_CHUNK;
/// Name used for standard output in errors.
const STDOUT: &str = "stdout";
/// Blocks of the local file `put` reads ahead of its writes.
const PUT_AHEAD: usize = 2;

#[derive(Parser, Debug)]
#[command(
    name = "tessera",
    version,
    about = "Tessera parallel file system: run a local cluster and work with its files",
    long_about = "Tessera parallel file system command-line tool.\n\n\
        `tessera up --dir DIR` starts a whole cluster on this machine; then\n\
        `export TESSERA_CONFIG=DIR/client.toml` and use the file commands (put, get, ls, ...).\n\
        Paths inside Tessera are absolute (a relative path is taken from the root)."
)]
struct Cli {
    /// Cluster configuration file (as written by `tessera up` into DIR/client.toml).
    #[arg(long, global = true, env = "TESSERA_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Job id to tag this command's I/O with (default: batch-scheduler job or session id).
    #[arg(long, global = true, env = "TESSERA_JOB", value_name = "NAME")]
    job: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Manage the cluster's certificate authority and node certificates.
    #[command(subcommand)]
    Ca(CaCmd),
    /// Run a whole cluster on this machine (MDS, data servers, forwarding nodes with --ion) until Ctrl-C.
    ///
    /// `tessera up` supervises its servers: one that ends (a crash, `kill -9`) is logged and started
    /// again with the same arguments, its log appended to, after 0.5 s, doubling while it keeps ending
    /// soon after a start, up to 30 s (back to 0.5 s once it has served for a minute); the other servers
    /// keep running. It stops on Ctrl-C or SIGTERM (the forwarding nodes first, then the data servers,
    /// the MDS last), or, with exit status 1 and the end of that server's log, when a server fails to start
    /// 5 times in a row. Each server's state, pid, restarts, uptime and last exit are kept in
    /// DIR/status.json (`tessera status`).
    Up(UpArgs),
    /// Show the servers a `tessera up` runs: each one's state, pid, restarts, uptime and last exit.
    ///
    /// Reads DIR/status.json, which `tessera up` keeps current. Exit status 0 when `tessera up` runs and
    /// every server is running, 3 when not (a server starting again, or `up` stopped), 1 when there is no
    /// status to read.
    Status {
        /// Cluster directory of `tessera up` (default: the directory of --config / TESSERA_CONFIG, which
        /// `tessera up` writes as DIR/client.toml).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print JSON: {"dir", "pid", "state", "message", "updated_at_ms", "up_running", "children": [{"name",
        /// "state", "pid", "restarts", "started_at_ms", "uptime_s", "last_exit", "last_exit_at_ms",
        /// "restart_at_ms", "log"}]}; states: waiting, starting, running, backoff, failed, stopping, stopped.
        #[arg(long)]
        json: bool,
    },
    /// List a directory (or show one file).
    Ls {
        /// Long listing: mode, links, owner, group, size, modification time.
        #[arg(short = 'l')]
        long: bool,
        /// Directory or file to list.
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show a file's attributes.
    Stat {
        /// File to examine (symlinks are not followed).
        path: String,
    },
    /// Create a directory.
    Mkdir {
        /// Create missing parents too; no error if it exists.
        #[arg(short = 'p', long)]
        parents: bool,
        /// Permission bits in octal.
        #[arg(short = 'm', long, default_value = "755")]
        mode: String,
        /// Directory to create.
        path: String,
    },
    /// Remove a file (or, with -r, a directory tree).
    Rm {
        /// Remove directories and their contents recursively.
        #[arg(short = 'r', short_alias = 'R', long)]
        recursive: bool,
        /// Path to remove.
        path: String,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Directory to remove.
        path: String,
    },
    /// Rename or move a file or directory (into DST if DST is a directory).
    Mv {
        /// Existing path.
        src: String,
        /// New path, or a directory to move into.
        dst: String,
    },
    /// Make a hard link (or with -s a symbolic link) named LINK.
    Ln {
        /// Make a symbolic link.
        #[arg(short = 's', long)]
        symbolic: bool,
        /// Existing path (for -s: the text the link points to).
        target: String,
        /// Name of the new link.
        link: String,
    },
    /// Change a file's permission bits.
    Chmod {
        /// Permission bits in octal (e.g. 644).
        mode: String,
        /// File to change.
        path: String,
    },
    /// Set a file's size (creating it if missing).
    Truncate {
        /// New size (K/M/G/T suffixes, powers of 1024).
        #[arg(short = 's', long, value_parser = parse_size)]
        size: u64,
        /// File to resize.
        path: String,
    },
    /// Copy a local file into Tessera.
    Put {
        /// Stripe size for the new file (K/M/G suffixes).
        #[arg(short = 'S', long = "stripe-size", value_parser = parse_size)]
        stripe_size: Option<u64>,
        /// Stripe count for the new file (0 = all data servers).
        #[arg(short = 'c', long = "stripe-count")]
        stripe_count: Option<u32>,
        /// No progress bar.
        #[arg(short = 'q', long)]
        quiet: bool,
        /// Local file to read.
        local: PathBuf,
        /// Destination in Tessera (a directory: keep the local name).
        path: String,
    },
    /// Copy a file out of Tessera.
    Get {
        /// No progress bar.
        #[arg(short = 'q', long)]
        quiet: bool,
        /// File in Tessera.
        path: String,
        /// Local destination (a directory: keep the name).
        local: PathBuf,
    },
    /// Write a file's content to standard output.
    Cat {
        /// File to print.
        path: String,
    },
    /// Set the stripe layout of a new/empty file or a directory's default for new files. A composite
    /// (progressive) layout gives each extent its own count and size:
    /// `setstripe -E 128M -c 1 -E 512M -c 3 -E -1 -c 8 PATH` (an extent is placed when the file reaches it).
    Setstripe {
        /// Composite layout: the end of an extent (K/M/G suffixes; -1 = EOF, required for the last),
        /// followed by that extent's own -c and -S. Repeat once per extent.
        #[arg(short = 'E', long = "component-end", value_parser = parse_extent_end, allow_hyphen_values = true)]
        extent_end: Vec<u64>,
        /// Stripe size (K/M/G suffixes; multiple of 4 KiB); with -E, of the extent before it.
        #[arg(short = 'S', long = "stripe-size", value_parser = parse_size)]
        stripe_size: Vec<u64>,
        /// Number of storage targets to stripe over (0 or -1 = all); with -E, of the extent before it.
        #[arg(short = 'c', long = "stripe-count", value_parser = parse_count, allow_hyphen_values = true)]
        stripe_count: Vec<u32>,
        /// Mirror count (1-3): keep each stripe object on this many data servers (distinct failure
        /// domains); with -E, of the extent before it (before the first -E: of every extent).
        #[arg(short = 'N', long = "mirror-count", value_parser = clap::value_parser!(u8).range(1..=3))]
        mirrors: Vec<u8>,
        /// Placement policy for the directory's new files (or to place an empty file anew):
        /// round-robin, lustre or balanced (stored as the `tessera.placement` attribute).
        #[arg(long)]
        policy: Option<String>,
        /// File (created empty if missing) or directory.
        path: String,
        /// The extents of `-E`, each with its own `-c`/`-S` (filled in from the order of the arguments).
        #[arg(skip)]
        extents: Vec<ExtentSpec>,
    },
    /// Declare files a job will create, so the placement policy places them together as one batch now
    /// (Tarazu's pre-declared creates); each create then uses its declared targets.
    Declare {
        /// Expected size of each file (K/M/G suffixes).
        #[arg(short = 's', long = "size", value_parser = parse_size, default_value = "0")]
        size: u64,
        /// Stripe count of each (default: the directory's).
        #[arg(short = 'c', long = "stripe-count")]
        stripe_count: Option<u32>,
        /// Also read files from FILE: one per line, `PATH [SIZE [COUNT]]`.
        #[arg(long)]
        list: Option<PathBuf>,
        /// Files to declare.
        paths: Vec<String>,
    },
    /// Show a file's stripe layout (or a directory's default).
    Getstripe {
        /// File or directory.
        path: String,
    },
    /// Show every storage target's capacity, usage and request latency (median/99th percentile) and the OST
    /// cost (max / mean utilisation); with --jobs also bytes and ops per job on each target, with --policy
    /// the placement policy's last solve.
    Df {
        /// Also list the per-job counters of each storage target (reads/writes since its server started).
        #[arg(long)]
        jobs: bool,
        /// Print JSON: {"ost_cost", "targets": [{"server", "target", "capacity", "used", "free", ...}],
        /// "servers": [{ds, addr, report_age_ms, report}]} in exact bytes (and "placement" with --policy).
        #[arg(long)]
        json: bool,
        /// Show the cluster's placement policy and its last solve (batch size, time taken, fallbacks).
        #[arg(long)]
        policy: bool,
    },
    /// Check that the MDS and every data server answer, with round-trip times.
    Ping,
    /// Check the namespace against itself and every data server's objects, online (admin): dangling
    /// entries, inodes no entry names, link counts, layouts on unknown servers, orphan objects, a destroy
    /// log that does not drain, sizes smaller than the data. Exit status as e2fsck's: 0 clean, 1 all
    /// findings repaired, 4 findings left.
    Fsck {
        /// Repair what is found: orphan objects destroyed, dangling entries removed, unreachable inodes
        /// moved to /lost+found, counts and sizes fixed (then checked again).
        #[arg(long)]
        repair: bool,
        /// Print the report as JSON: {"findings": [{"kind", "what", "action", "repaired"}], "repaired": N,
        /// "omitted", "inodes", "entries", "objects", "servers", "passes", "elapsed_ms"}.
        #[arg(long)]
        json: bool,
        /// Also compare every mirrored stripe's in-sync replicas by checksum (each object read whole on
        /// its data server), not only by size; with --repair, a replica that differs is marked stale and
        /// resynced from the primary.
        #[arg(long)]
        verify_mirrors: bool,
    },
    /// Running programs as the orchestrator sees them: per-server SL/RD, eligibility, slice share.
    Jobs {
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// PerSched instead: per periodic job planned ρ̃, measured ρ̃, dilation and source (registered or
        /// detected from its I/O bursts); SysEff and SysEff/UB.
        #[arg(long)]
        periodic: bool,
    },
    /// Per-job settings: `job periodic` registers a periodic profile for PerSched.
    #[command(subcommand)]
    Job(JobCmd),
    /// IOrchestrator: its status, or switch its mode at run time.
    #[command(subcommand)]
    Orchestrator(OrchCmd),
    /// Mirrored files (`setstripe -N`): replicas not in sync and the resync's progress.
    #[command(subcommand)]
    Mirror(MirrorCmd),
    /// Data servers: take one out of the cluster.
    #[command(subcommand)]
    Ds(DsCmd),
    /// Metadata servers: each replica's role, term and log (replicated metadata, `tessera up --mds 3`).
    #[command(subcommand)]
    Mds(MdsCmd),
    /// A cluster on several hosts: `cluster init --hosts FILE` writes the CA, every node's certificate and
    /// configuration (see the README's "On several hosts").
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Forwarding nodes (IONs): their status, or switch their request scheduler at run time.
    #[command(subcommand)]
    Ion(crate::ion::IonCmd),
    /// Per-job counters per node, like Lustre's job_stats: the MDS's metadata operations and each data
    /// server's requests, bytes and request sizes.
    Jobstats {
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// Print JSON (the registry's records) instead.
        #[arg(long)]
        json: bool,
    },
    /// A job's I/O characterisation (volume, rates, intensity, burstiness, request sizes, task-local vs
    /// shared files and their spatial pattern, parallelism) from the per-job counters.
    Report {
        /// The job id.
        job: String,
        /// Also write the report as JSON to FILE ("-": print JSON instead of the text page).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Write the report's files into DIR: JOB.json and the PNG plots JOB-bandwidth.png (bandwidth over
        /// time), JOB-sizes.png (request-size CDF) and JOB-files.png (per-file access map).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Window length Δt in seconds (a multiple of the MDS's 1 s windows; default: theirs).
        #[arg(long, value_name = "SECONDS")]
        dt: Option<f64>,
        /// Threshold c: a process does I/O in a window when it moves more than this (default 1M).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        threshold: Option<u64>,
    },
    /// A job's request trace at the data servers (bounded; off by default): `start`, `stop`, or `export`
    /// as CSV (job,client,pid,file,offset,size,op,t_start_us,t_end_us,ds,object,object_offset).
    /// `tessera report` uses a trace, where there is one, for the spatial classes.
    Trace {
        /// start, stop or export.
        #[arg(value_parser = ["start", "stop", "export"])]
        action: String,
        /// The job id.
        job: String,
        /// export: write the CSV to FILE instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Mount the file system with FUSE: runs `tessera-fuse` (installed next to `tessera`) with these arguments.
    Mount {
        /// MOUNTPOINT [--daemon] [--allow-other] [-o OPTS] (see `tessera-fuse --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum MirrorCmd {
    /// Files and replica objects not in sync (stale: missed writes; resyncing: being copied), bytes left
    /// to copy, and the resync rate.
    Status {
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// Print JSON: {"degraded_files", "degraded_objects", "stale", "resyncing", "bytes_to_resync",
        /// "resyncs_done", "resynced_bytes", "resync_rate", "removed"} (bytes, bytes/s).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// From a hosts file (one node per line: ROLE NAME HOST:PORT [DATA_DIR]; roles mds, ds, ion, client,
    /// admin, the last two with address -), write into --out the CA, each node's certificate (naming its
    /// host) and NAME.toml per node; prints what to copy where and how to start each server.
    Init {
        /// The hosts file.
        #[arg(long)]
        hosts: PathBuf,
        /// Output directory (a CA already there is reused).
        #[arg(long, default_value = "tessera-cluster")]
        out: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum MdsCmd {
    /// Each metadata replica as it sees itself: role (leader, follower, candidate, learner; single
    /// without replicas; unreachable), whether the leader's membership counts it (member: voter,
    /// learner, or no once removed), term, last log index, applied index, and how far behind the
    /// leader's log it is (lag, in entries, as the leader knows it). Replicas added at run time (`tessera
    /// mds add`) are listed after the configured ones.
    Status {
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// Print JSON: a list of {"name", "addr", "id", "role", "term", "log_index", "applied_index",
        /// "lag", "leader", "serving", "voter", "error"}.
        #[arg(long)]
        json: bool,
    },
    /// Adds a metadata replica while the service runs (to replace a dead one, or to move one to another
    /// host): start it first (`tessera-mds --config CFG --replica ID` on its host, CFG listing it as
    /// [[mds]] entry ID), then this adds it as a learner, shows its catching up, and makes it a voter.
    /// Then remove the replica it replaces with `tessera mds remove`.
    Add {
        /// Its id in the group: its position in its configuration's [[mds]] list (1 is the first), and
        /// not a member's id.
        id: u64,
        /// Its address, host:port, as the other replicas and the clients reach it.
        addr: String,
        /// Leave it a learner (receives the log, does not vote).
        #[arg(long)]
        no_promote: bool,
        /// Give up waiting for it to catch up after this long (it stays a learner; run add again to go on).
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
    /// Removes a metadata replica (a dead one, or one moved elsewhere) from the group while the service
    /// runs; stop its process afterwards if it still runs.
    Remove {
        /// Its id in the group (`tessera mds status` shows ids).
        id: u64,
    },
}

#[derive(Subcommand, Debug)]
enum DsCmd {
    /// Take data server N out of the cluster for good (admin): no new objects are placed on it; with
    /// --rebuild, each mirrored replica it held is replaced by a new one on another server, copied from
    /// a surviving replica in the background (`tessera mirror status --watch` shows the progress).
    /// Unmirrored files' objects on it are not moved.
    Remove {
        /// The data server's id.
        id: DsId,
        /// Rebuild its mirrored replicas on the other servers.
        #[arg(long)]
        rebuild: bool,
    },
}

#[derive(Subcommand, Debug)]
enum OrchCmd {
    /// Mode, window, the current plan with its slices, per-server SL_i/SeekTime, switch skew.
    Status {
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
    },
    /// Switch the mode: off | even | iorchestrator (needs the admin config `tessera up` writes to
    /// DIR/admin.toml, or root with a client certificate).
    Mode {
        /// off, even or iorchestrator.
        mode: OrchestratorMode,
    },
}

#[derive(Subcommand, Debug)]
enum CaCmd {
    /// Create a new cluster CA (DIR/ca.pem, DIR/ca.key, an empty revocation list DIR/ca.crl.pem and the
    /// record of issued certificates DIR/issued.toml); refuses to overwrite an existing one.
    Init {
        /// Directory for the CA files.
        #[arg(long)]
        dir: PathBuf,
        /// Cluster name written into the CA certificate.
        #[arg(long, default_value = "tessera")]
        name: String,
        /// Days the CA certificate is valid for (node certificates never outlive it).
        #[arg(long, default_value_t = tessera_ops::issue::CA_DAYS, value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
    },
    /// Issue a node certificate signed by the CA (writes DIR/NAME.pem and DIR/NAME.key, and records it).
    Issue {
        #[command(flatten)]
        dir: CaDirArg,
        /// Node role: mds, ds, ion, client or admin.
        #[arg(long)]
        role: Role,
        /// Node name (certificate CN and file name).
        #[arg(long)]
        name: String,
        /// Extra host name or IP address the node is reached at (repeatable).
        #[arg(long = "san", value_name = "HOST_OR_IP")]
        sans: Vec<String>,
        /// Days the certificate is valid for (from now; 5 minutes earlier, for clocks a little behind).
        #[arg(long, default_value_t = tessera_ops::issue::NODE_DAYS, value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
        /// Overwrite an existing certificate of that name.
        #[arg(long)]
        force: bool,
    },
    /// List the certificates the CA issued: name, role, serial, validity, state (valid, not yet valid,
    /// expired, revoked; "(replaced)" once renewed) and the revocation list's number.
    List {
        #[command(flatten)]
        dir: CaDirArg,
    },
    /// Revoke the certificates issued to NAME and write a new revocation list (DIR/ca.crl.pem). Nodes
    /// reading that file take it into use within a second, without a restart: a server closes the
    /// revoked peer's connections at once, a node connected to a revoked server drops the connection at
    /// its next call, and every new connection is refused. Copy the file to nodes that keep their own
    /// copy.
    Revoke {
        /// Node name the certificates were issued to.
        name: String,
        #[command(flatten)]
        dir: CaDirArg,
        /// Revoke only the certificate with this serial (as `tessera ca list` shows it).
        #[arg(long)]
        serial: Option<String>,
    },
    /// Issue NAME a new certificate (new key, new serial, same role and host names) into DIR/NAME.pem
    /// and DIR/NAME.key; the node uses it from its next start. The old certificate stays valid until it
    /// expires unless revoked (`tessera ca revoke NAME --serial OLD`).
    Renew {
        /// Node name whose certificate to renew.
        name: String,
        #[command(flatten)]
        dir: CaDirArg,
        /// Days the new certificate is valid for.
        #[arg(long, default_value_t = tessera_ops::issue::NODE_DAYS, value_parser = clap::value_parser!(u32).range(1..))]
        days: u32,
    },
}

/// Where the CA is.
#[derive(Args, Debug)]
struct CaDirArg {
    /// Directory holding ca.pem and ca.key (default: the directory of the CA certificate named by
    /// --config / TESSERA_CONFIG, e.g. DIR/tls of `tessera up --dir DIR`).
    #[arg(long, value_name = "CA_DIR")]
    dir: Option<PathBuf>,
}

impl CaDirArg {
    fn resolve(&self, config: Option<&Path>) -> CliResult<PathBuf> {
        if let Some(d) = &self.dir {
            return Ok(d.clone());
        }
        let Some(config) = config else {
            return Err(CliError::plain("give --dir CA_DIR (the directory holding ca.pem and ca.key) or --config"));
        };
        let cfg = ClusterConfig::load(config).map_err(CliError::error)?;
        Ok(cfg.tls.ca.parent().map(Path::to_path_buf).unwrap_or_default())
    }
}

#[derive(Args, Debug)]
struct UpArgs {
    /// Cluster directory: certificates, configs, data and logs (reused if it already holds a cluster).
    #[arg(long)]
    dir: PathBuf,
    /// Number of data servers (default: the existing cluster's, else 4).
    #[arg(long = "ds")]
    ds: Option<usize>,
    /// Number of forwarding nodes (IONs) clients go through (default: the existing cluster's, else 0).
    #[arg(long = "ion")]
    ion: Option<usize>,
    /// Metadata replicas (default: the existing cluster's, else 1). With 3 (or more), the metadata service
    /// survives the loss of a replica: one leads, the others follow its replicated log and take over.
    #[arg(long = "mds")]
    mds: Option<usize>,
    /// First port: MDS on P (replica i on P+i), data server i on P+10+i, forwarding node i on P+100+i; 0
    /// picks free ports.
    #[arg(long, default_value_t = 7400)]
    port_base: u16,
    /// Default stripe size of the new cluster (K/M/G suffixes).
    #[arg(long, value_parser = parse_size)]
    stripe_size: Option<u64>,
    /// Default stripe count of the new cluster (0 = all storage targets).
    #[arg(long)]
    stripe_count: Option<u32>,
    /// Storage targets per data server of the new cluster (as a Lustre OSS serves several OSTs).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    targets: u16,
    /// Capacity of each target of the new cluster, enforced (K/M/G suffixes; default: the disk's).
    #[arg(long, value_parser = parse_size)]
    target_capacity: Option<u64>,
    /// Placement policy of the new cluster: round-robin, lustre or balanced (Tarazu).
    #[arg(long)]
    placement: Option<tessera_proto::config::Placement>,
}

/// A failed command: the path it concerns (if any) and the error.
#[derive(Debug)]
struct CliError {
    path: Option<String>,
    msg: String,
}

impl CliError {
    fn at(path: impl AsRef<str>, e: impl Into<ErrText>) -> CliError {
        CliError { path: Some(path.as_ref().to_string()), msg: e.into().0 }
    }
    fn plain(e: impl std::fmt::Display) -> CliError {
        CliError { path: None, msg: e.to_string() }
    }
    /// An error with its sources ([`chain`]: `config x.toml: No such file or directory`).
    fn error(e: impl std::error::Error + 'static) -> CliError {
        CliError::plain(chain(&e))
    }
}

impl From<anyhow::Error> for CliError {
    fn from(e: anyhow::Error) -> CliError {
        CliError::plain(format!("{e:#}"))
    }
}

type CliResult<T> = Result<T, CliError>;

/// An error's text as the CLI prints it.
struct ErrText(String);

impl From<FsError> for ErrText {
    /// strerror-like text; the detail only where it says more than the code and the path already do.
    fn from(e: FsError) -> ErrText {
        let terse = matches!(
            e.code,
            ErrorCode::NotFound
                | ErrorCode::Exists
                | ErrorCode::NotDir
                | ErrorCode::IsDir
                | ErrorCode::NotEmpty
                | ErrorCode::Access
                | ErrorCode::Perm
                | ErrorCode::NameTooLong
        );
        if terse || e.detail.is_empty() {
            ErrText(e.code.to_string())
        } else {
            ErrText(format!("{} ({})", e.code, e.detail))
        }
    }
}

impl From<std::io::Error> for ErrText {
    fn from(e: std::io::Error) -> ErrText {
        ErrText(e.to_string())
    }
}

impl From<tls::TlsError> for ErrText {
    fn from(e: tls::TlsError) -> ErrText {
        ErrText(chain(&e))
    }
}

impl From<tokio::task::JoinError> for ErrText {
    fn from(e: tokio::task::JoinError) -> ErrText {
        ErrText(e.to_string())
    }
}

impl From<&str> for ErrText {
    fn from(e: &str) -> ErrText {
        ErrText(e.to_string())
    }
}

impl From<String> for ErrText {
    fn from(e: String) -> ErrText {
        ErrText(e)
    }
}

/// Attaches a path to an error.
trait At<T> {
    fn at(self, path: &str) -> CliResult<T>;
}

impl<T, E: Into<ErrText>> At<T> for Result<T, E> {
    fn at(self, path: &str) -> CliResult<T> {
        self.map_err(|e| CliError::at(path, e))
    }
}

/// Parses octal permission bits (`644`, `0755`, `1777`).
pub fn parse_mode(s: &str) -> anyhow::Result<u32> {
    let t = s.trim().trim_start_matches("0o");
    match u32::from_str_radix(t, 8) {
        Ok(m) if m <= 0o7777 && !t.is_empty() => Ok(m),
        _ => anyhow::bail!("invalid mode '{s}': give octal permission bits such as 644 or 0755"),
    }
}

/// `1536` → `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `ls -l` style mode string.
pub fn mode_string(kind: FileKind, perm: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        FileKind::File => '-',
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDev => 'c',
        FileKind::BlockDev => 'b',
    });
    let special = [(0o4000, 's', 'S'), (0o2000, 's', 'S'), (0o1000, 't', 'T')];
    for (i, (bit, set_x, set_nox)) in special.iter().enumerate() {
        let shift = 6 - 3 * i as u32;
        let p = (perm >> shift) & 7;
        s.push(if p & 4 != 0 { 'r' } else { '-' });
        s.push(if p & 2 != 0 { 'w' } else { '-' });
        let x = p & 1 != 0;
        s.push(match (perm & bit != 0, x) {
            (true, true) => *set_x,
            (true, false) => *set_nox,
            (false, true) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn format_time(t: Timestamp) -> String {
    t.utc()
}

fn kind_name(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "regular file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "fifo",
        FileKind::Socket => "socket",
        FileKind::CharDev => "character device",
        FileKind::BlockDev => "block device",
    }
}

/// `tessera mount ...`: replaces this process with the `tessera-fuse` next to it.
fn exec_mount(config: Option<&Path>, args: &[String]) -> CliResult<ExitCode> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| CliError::plain(format!("cannot find my own path: {e}")))?;
    let fuse = exe.with_file_name("tessera-fuse");
    let mut cmd = std::process::Command::new(&fuse);
    cmd.args(args);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let e = cmd.exec();
    Err(CliError::plain(format!("cannot run {}: {e}", fuse.display())))
}

/// `tessera status`: the status file of the `tessera up` in `dir` (or in the directory of `config`).
fn up_status(dir: Option<&Path>, config: Option<&Path>, json: bool) -> CliResult<ExitCode> {
    use crate::supervise::{now_ms, up_process_alive, UpStatus};
    let dir = match (dir, config) {
        (Some(d), _) => d.to_path_buf(),
        (None, Some(c)) => match c.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        },
        (None, None) => {
            return Err(CliError::plain(
                "give --dir DIR (the directory of `tessera up --dir DIR`) or --config DIR/client.toml",
            ))
        }
    };
    let path = dir.join(tessera_ops::clusterdir::STATUS_FILE);
    if !path.exists() {
        return Err(CliError::plain(format!(
            "{}: no status file: no `tessera up` has run in {} (it writes one while it runs)",
            path.display(),
            dir.display()
        )));
    }
    let st = UpStatus::read(&path)?;
    let alive = up_process_alive(st.pid);
    let now = now_ms();
    if json {
        let mut v = st.to_json(if alive { now } else { st.updated_at_ms });
        v["up_running"] = serde_json::Value::Bool(alive);
        println!("{}", serde_json::to_string_pretty(&v).map_err(CliError::error)?);
    } else {
        print!("{}", st.table(now, alive));
    }
    Ok(if st.healthy(alive) { ExitCode::SUCCESS } else { ExitCode::from(3) })
}

/// `-E` of `setstripe`: an extent's end (K/M/G suffixes), `-1` or `EOF` for the last.
fn parse_extent_end(s: &str) -> Result<u64, tessera_proto::units::SizeError> {
    match s {
        "-1" | "EOF" | "eof" => Ok(tessera_proto::layout::EOF),
        _ => parse_size(s),
    }
}

/// `-c` of `setstripe`: a stripe count, `-1` (Lustre's spelling) or 0 for all targets.
fn parse_count(s: &str) -> anyhow::Result<u32> {
    match s {
        "-1" => Ok(0),
        _ => s.parse().map_err(|_| anyhow::anyhow!("'{s}' is not a stripe count")),
    }
}

/// Parses the command line. `setstripe -E` pairs each `-c`/`-S` with the `-E` before it, which clap's
/// derive cannot: the argument positions tell.
fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let m = Cli::command().try_get_matches_from(args)?;
    let mut cli = Cli::from_arg_matches(&m)?;
    if let (Cmd::Setstripe { extents, .. }, Some(("setstripe", sm))) = (&mut cli.cmd, m.subcommand()) {
        *extents = setstripe_extents(sm)
            .map_err(|e| Cli::command().error(clap::error::ErrorKind::ValueValidation, format!("{e:#}")))?;
    }
    Ok(cli)
}

/// The extents of `setstripe -E END [-c COUNT] [-S SIZE] -E ...`, in order (empty without `-E`).
fn setstripe_extents(m: &clap::ArgMatches) -> anyhow::Result<Vec<ExtentSpec>> {
    let at = |id: &str| -> Vec<usize> { m.indices_of(id).map(|i| i.collect()).unwrap_or_default() };
    let ends: Vec<(usize, u64)> =
        at("extent_end").into_iter().zip(m.get_many::<u64>("extent_end").into_iter().flatten().copied()).collect();
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    let mut specs: Vec<ExtentSpec> =
        ends.iter().map(|&(_, end)| ExtentSpec { end, stripe_size: None, stripe_count: None, mirrors: None }).collect();
    let owner = |i: usize, flag: &str| {
        ends.iter().rposition(|&(e, _)| e < i).ok_or_else(|| anyhow::anyhow!("{flag} before the first -E"))
    };
    // -N before the first -E: every extent's (Lustre's `lfs mirror create -N2 -E ...`); after one: its own.
    let mut every = None;
    for (i, &v) in at("mirrors").into_iter().zip(m.get_many::<u8>("mirrors").into_iter().flatten()) {
        match ends.iter().rposition(|&(e, _)| e < i) {
            None if every.replace(v).is_some() => anyhow::bail!("two -N before the first -E"),
            None => {}
            Some(k) if specs[k].mirrors.replace(v).is_some() => anyhow::bail!("two -N for extent {k}"),
            Some(_) => {}
        }
    }
    for s in &mut specs {
        s.mirrors = s.mirrors.or(every);
    }
    for (i, &v) in at("stripe_size").into_iter().zip(m.get_many::<u64>("stripe_size").into_iter().flatten()) {
        let k = owner(i, "-S")?;
        if specs[k].stripe_size.replace(v).is_some() {
            anyhow::bail!("two -S for extent {k}");
        }
    }
    for (i, &v) in at("stripe_count").into_iter().zip(m.get_many::<u32>("stripe_count").into_iter().flatten()) {
        let k = owner(i, "-c")?;
        if specs[k].stripe_count.replace(v).is_some() {
            anyhow::bail!("two -c for extent {k}");
        }
    }
    tessera_proto::layout::validate_extents(&specs).map_err(|e| anyhow::anyhow!(e.detail))?;
    Ok(specs)
}

/// Entry point of the `tessera` binary.
pub fn main_entry() -> ExitCode {
    let cli = parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let Some(rt) = tessera_ops::daemon::start("tessera") else { return ExitCode::FAILURE };
    let res = rt.block_on(run(cli));
    // Do not wait for lingering connection tasks.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match res {
        Ok(code) => code,
        Err(e) => {
            match e.path {
                Some(p) => eprintln!("tessera: {p}: {}", e.msg),
                None => eprintln!("tessera: {}", e.msg),
            }
            ExitCode::FAILURE
        }
    }
}

async fn connect(cli: &Cli) -> CliResult<Client> {
    let cfg = ClusterConfig::locate(cli.config.as_deref()).map_err(CliError::error)?;
    let client = Client::connect(&cfg).await.map_err(CliError::error)?;
    Ok(match &cli.job {
        Some(j) => client.with_job(j.clone()),
        None => client,
    })
}

async fn run(cli: Cli) -> CliResult<ExitCode> {
    match &cli.cmd {
        Cmd::Ca(ca) => {
            ca_cmd(ca, cli.config.as_deref())?;
            return Ok(ExitCode::SUCCESS);
        }
        Cmd::Mount { args } => return exec_mount(cli.config.as_deref(), args),
        Cmd::Cluster(ClusterCmd::Init { hosts, out }) => {
            cluster_init(hosts, out)?;
            return Ok(ExitCode::SUCCESS);
        }
        Cmd::Status { dir, json } => return up_status(dir.as_deref(), cli.config.as_deref(), *json),
        Cmd::Up(a) => {
            let opts = UpOptions {
                dir: a.dir.clone(),
                n_ds: a.ds,
                n_ion: a.ion,
                n_mds: a.mds,
                port_base: a.port_base,
                stripe_size: a.stripe_size,
                stripe_count: a.stripe_count,
                targets: a.targets,
                target_capacity: a.target_capacity,
                placement: a.placement,
            };
            return Ok(up::up(opts).await?);
        }
        _ => {}
    }
    let c = connect(&cli).await?;
    match cli.cmd {
        Cmd::Ca(_) | Cmd::Up(_) | Cmd::Mount { .. } | Cmd::Status { .. } | Cmd::Cluster(_) => {}
        Cmd::Ls { long, path } => ls(&c, &path, long).await?,
        Cmd::Stat { path } => stat(&c, &path).await?,
        Cmd::Mkdir { parents, mode, path } => {
            let perm = parse_mode(&mode)?;
            if parents {
                c.mkdir_all(&path, perm).await.at(&path)?;
            } else {
                c.mkdir(&path, perm).await.at(&path)?;
            }
        }
        Cmd::Rm { recursive, path } => {
            let attr = c.lstat(&path).await.at(&path)?;
            if attr.kind == FileKind::Dir {
                if !recursive {
                    return Err(CliError::at(&path, "Is a directory (use rm -r)"));
                }
                c.remove_all(&path).await.at(&path)?;
            } else {
                c.unlink(&path).await.at(&path)?;
            }
        }
        Cmd::Rmdir { path } => c.rmdir(&path).await.at(&path)?,
        Cmd::Mv { src, dst } => {
            let dst = into_dir(&c, &dst, &src).await?;
            c.rename(&src, &dst).await.at(&src)?;
        }
        Cmd::Ln { symbolic, target, link } => {
            if symbolic {
                c.symlink(&target, &link).await.at(&link)?;
            } else {
                let link = into_dir(&c, &link, &target).await?;
                c.link(&target, &link).await.at(&link)?;
            }
        }
        Cmd::Chmod { mode, path } => {
            let perm = parse_mode(&mode)?;
            c.setattr(&path, SetAttrs { perm: Some(perm), ..Default::default() }).await.at(&path)?;
        }
        Cmd::Truncate { size, path } => {
            if let Err(e) = c.truncate(&path, size).await {
                if e.code != ErrorCode::NotFound {
                    return Err(CliError::at(&path, e));
                }
                let f =
                    c.open(&path, OpenOptions { write: true, create: true, ..Default::default() }).await.at(&path)?;
                f.close().await.at(&path)?;
                c.truncate(&path, size).await.at(&path)?;
            }
        }
        Cmd::Put { stripe_size, stripe_count, quiet, local, path } => {
            let spec = (stripe_size.is_some() || stripe_count.is_some()).then_some(LayoutSpec {
                stripe_size,
                stripe_count,
                mirrors: None,
            });
            put(&c, &local, &path, spec, quiet).await?
        }
        Cmd::Get { quiet, path, local } => get(&c, &path, &local, quiet).await?,
        Cmd::Cat { path } => cat(&c, &path).await?,
        Cmd::Setstripe { extents, policy, path, .. } if !extents.is_empty() => {
            match c.lstat(&path).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::NotFound => {
                    c.create(&path, 0o644, None).await.at(&path)?.close().await.at(&path)?;
                }
                Err(e) => return Err(CliError::at(&path, e)),
            }
            c.set_composite_layout(&path, extents).await.at(&path)?;
            if let Some(p) = policy {
                let attr = c.lstat(&path).await.at(&path)?;
                c.mds().setxattr(attr.ino, "tessera.placement", p.into_bytes(), XattrMode::Any).await.at(&path)?;
            }
        }
        Cmd::Setstripe { stripe_size, stripe_count, mirrors, policy, path, .. } => {
            if stripe_size.len() > 1 || stripe_count.len() > 1 || mirrors.len() > 1 {
                return Err(CliError::plain("one -S, one -c and one -N per layout (or per extent, after each -E)"));
            }
            let (stripe_size, stripe_count) = (stripe_size.first().copied(), stripe_count.first().copied());
            let mirrors = mirrors.first().copied();
            let shaped = stripe_size.is_some() || stripe_count.is_some() || mirrors.is_some();
            if !shaped && policy.is_none() {
                return Err(CliError::plain(
                    "setstripe needs -S SIZE, -c COUNT, -N MIRRORS, -E END ... and/or --policy NAME",
                ));
            }
            let spec = LayoutSpec { stripe_size, stripe_count, mirrors };
            match c.lstat(&path).await {
                Ok(_) if shaped => c.set_layout(&path, spec).await.at(&path)?,
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::NotFound => {
                    let f = c.create(&path, 0o644, shaped.then_some(spec)).await.at(&path)?;
                    f.close().await.at(&path)?;
                }
                Err(e) => return Err(CliError::at(&path, e)),
            }
            if let Some(p) = policy {
                let attr = c.lstat(&path).await.at(&path)?;
                c.mds().setxattr(attr.ino, "tessera.placement", p.into_bytes(), XattrMode::Any).await.at(&path)?;
            }
        }
        Cmd::Getstripe { path } => getstripe(&c, &path).await?,
        Cmd::Declare { size, stripe_count, list, paths } => {
            let mut files: Vec<(String, u64, Option<u32>)> =
                paths.into_iter().map(|p| (p, size, stripe_count)).collect();
            if let Some(l) = list {
                let text =
                    std::fs::read_to_string(&l).map_err(|e| CliError::at(l.display().to_string(), e.to_string()))?;
                for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
                    let bad = |what: &str| CliError::plain(format!("{}:{}: {what}", l.display(), n + 1));
                    let mut w = line.split_whitespace();
                    let path = w.next().ok_or_else(|| bad("no path"))?.to_string();
                    let sz = w.next().map(parse_size).transpose().map_err(|e| bad(&e.to_string()))?.unwrap_or(size);
                    let count = w.next().map(|c| c.parse::<u32>()).transpose().map_err(|_| bad("bad stripe count"))?;
                    files.push((path, sz, count.or(stripe_count)));
                }
            }
            if files.is_empty() {
                return Err(CliError::plain("declare needs PATH... or --list FILE"));
            }
            let n = c.declare(&files).await.map_err(CliError::error)?;
            println!("declared {n} files");
        }
        Cmd::Df { jobs, json, policy } => df(&c, jobs, json, policy).await?,
        Cmd::Ping => return ping(&c).await,
        Cmd::Fsck { repair, json, verify_mirrors } => return fsck(&c, repair, json, verify_mirrors).await,
        Cmd::Jobs { periodic: true, watch: false } => print!("{}", periodic_text(&c).await?),
        Cmd::Jobs { periodic: true, watch: true } => {
            crate::watch::every_second(|| async { periodic_text(&c).await.unwrap_or_else(|e| format!("{}\n", e.msg)) })
                .await
        }
        Cmd::Jobs { watch, .. } => watch_status(&c, watch, jobs_text).await?,
        Cmd::Job(JobCmd::Periodic { job, nodes, compute, volume }) => {
            periodic_register(c, job, nodes, compute, volume).await?
        }
        Cmd::Orchestrator(OrchCmd::Status { watch }) => watch_status(&c, watch, orchestrator_text).await?,
        Cmd::Ion(cmd) => crate::ion::run(&c, cmd).await?,
        Cmd::Jobstats { job, watch, json } => crate::jobreport::jobstats(&c, job.as_deref(), watch, json).await?,
        Cmd::Report { job, json, out, dt, threshold } => {
            crate::jobreport::report(&c, &job, json.as_deref(), out.as_deref(), dt, threshold).await?
        }
        Cmd::Trace { action, job, out } => crate::jobreport::trace(&c, &action, &job, out.as_deref()).await?,
        Cmd::Mirror(MirrorCmd::Status { watch, json }) => mirror_status(&c, watch, json).await?,
        Cmd::Mds(MdsCmd::Status { watch, json }) => {
            let cfg = ClusterConfig::locate(cli.config.as_deref()).map_err(CliError::error)?;
            let names: Vec<String> = (0..cfg.mds.len()).map(|i| cfg.mds_name(i)).collect();
            if watch {
                crate::watch::every_second(|| async { mds_status_text(&c, &names, json).await.0 }).await
            } else {
                let (text, all_down) = mds_status_text(&c, &names, json).await;
                print!("{text}");
                if all_down {
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        Cmd::Mds(MdsCmd::Add { id, addr, no_promote, timeout_s }) => {
            mds_add(&c, id, &addr, !no_promote, Duration::from_secs(timeout_s)).await?
        }
        Cmd::Mds(MdsCmd::Remove { id }) => {
            let st = c.mds().change_replicas(ReplicaChange::Remove { id }).await.map_err(admin_hint)?;
            println!("metadata replica {id} removed from the group (stop its process if it still runs)");
            println!("members: {}", members_text(&st.members));
        }
        Cmd::Ds(DsCmd::Remove { id, rebuild }) => {
            let st = c.mds().ds_remove(id, rebuild).await.map_err(admin_hint)?;
            println!(
                "data server {id} removed from placement{}",
                if rebuild { "; its mirrored replicas are rebuilt on the others" } else { "" }
            );
            print!("{}", mirror_text(&st));
        }
        Cmd::Orchestrator(OrchCmd::Mode { mode }) => {
            c.mds().set_orchestrator_mode(mode).await.map_err(admin_hint)?;
            println!("orchestrator mode: {mode} (from the next slice boundary)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn ca_cmd(ca: &CaCmd, config: Option<&Path>) -> CliResult<()> {
    match ca {
        CaCmd::Init { dir, name, days } => {
            let d = dir.display().to_string();
            if dir.join("ca.pem").exists() || dir.join("ca.key").exists() {
                return Err(CliError::at(&d, "a CA already exists here (refusing to overwrite it)"));
            }
            let ca = tessera_ops::issue::generate_ca_valid(name, tls::Validity::days(*days)).at(&d)?;
            tessera_ops::ca::write_ca(dir, &ca).at(&d)?;
            println!(
                "CA for cluster '{name}' written to {d}/ca.pem and ca.key, valid until {} UTC; revocation list {d}/{}",
                format_utc(tls::Validity::days(*days).not_after),
                tls::CRL_FILE
            );
        }
        CaCmd::Issue { dir, role, name, sans, days, force } => {
            let dir = dir.resolve(config)?;
            let mut ca_dir = CaDir::open(&dir).map_err(CliError::error)?;
            let (files, info) =
                ca_dir.issue(*role, name, sans, tls::Validity::days(*days), *force).map_err(CliError::error)?;
            println!(
                "{role} certificate for '{name}': {} and {} (serial {}, valid until {} UTC)",
                files.cert.display(),
                files.key.display(),
                info.serial,
                format_utc(info.validity.not_after)
            );
        }
        CaCmd::List { dir } => {
            let dir = dir.resolve(config)?;
            let ca_dir = CaDir::open(&dir).map_err(CliError::error)?;
            ca_dir.save().map_err(CliError::error)?;
            let now = tls::unix_now();
            println!(
                "{:<12} {:<7} {:<32} {:<19}  {:<19}  STATE",
                "NAME", "ROLE", "SERIAL", "VALID FROM (UTC)", "VALID UNTIL (UTC)"
            );
            for r in &ca_dir.index.cert {
                let replaced = if ca_dir.is_current(r) { "" } else { " (replaced)" };
                println!(
                    "{:<12} {:<7} {:<32} {}  {}  {}{replaced}",
                    r.name,
                    r.role,
                    r.serial,
                    format_utc(r.not_before),
                    format_utc(r.not_after),
                    r.state(now)
                );
            }
            let revoked = ca_dir.index.cert.iter().filter(|r| r.revoked_at.is_some()).count();
            println!(
                "revocation list {}: number {}, {revoked} revoked",
                ca_dir.crl_path().display(),
                ca_dir.index.crl_number
            );
        }
        CaCmd::Revoke { name, dir, serial } => {
            let dir = dir.resolve(config)?;
            let mut ca_dir = CaDir::open(&dir).map_err(CliError::error)?;
            let revoked = ca_dir.revoke(name, serial.as_deref()).map_err(CliError::error)?;
            if revoked.is_empty() {
                println!("'{name}': already revoked");
            }
            for r in &revoked {
                println!("revoked {} '{}' (serial {})", r.role, r.name, r.serial);
            }
            println!(
                "revocation list number {} written to {}: nodes reading it refuse these certificates within a \
                 second",
                ca_dir.index.crl_number,
                ca_dir.crl_path().display()
            );
        }
        CaCmd::Renew { name, dir, days } => {
            let dir = dir.resolve(config)?;
            let d = dir.display().to_string();
            let mut ca_dir = CaDir::open(&dir).map_err(CliError::error)?;
            let (old, new) = ca_dir.renew(name, tls::Validity::days(*days)).map_err(CliError::error)?;
            println!(
                "{} certificate for '{name}' renewed: {d}/{name}.pem and .key (new key), serial {}, valid until {} \
                 UTC; restart the node to use it",
                new.role,
                new.serial,
                format_utc(new.validity.not_after)
            );
            let old_state = ca_dir.index.cert.iter().find(|r| r.serial == old.serial).map(|r| r.state(tls::unix_now()));
            if old_state == Some(CertState::Valid) {
                println!(
                    "the old certificate (serial {}) stays valid until {} UTC: `tessera ca revoke {name} --serial {}` \
                     retires it now",
                    old.serial,
                    format_utc(old.validity.not_after),
                    old.serial
                );
            }
        }
    }
    Ok(())
}

/// If `dst` is an existing directory, the path of `src`'s name inside it (as `mv` and `ln` do).
async fn into_dir(c: &Client, dst: &str, src: &str) -> CliResult<String> {
    match c.stat(dst).await {
        Ok(a) if a.kind == FileKind::Dir => {
            let (_, name) = split_parent(src).at(src)?;
            Ok(join_path(&clean_path(dst).at(dst)?, &name))
        }
        _ => Ok(dst.to_string()),
    }
}

fn long_line(a: &Attr, name: &str, target: Option<&str>) -> String {
    let mut s = format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {}",
        mode_string(a.kind, a.perm),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        format_time(a.mtime),
        name
    );
    if let Some(t) = target {
        s.push_str(" -> ");
        s.push_str(t);
    }
    s
}

async fn ls(c: &Client, path: &str, long: bool) -> CliResult<()> {
    let attr = c.stat(path).await.at(path)?;
    if attr.kind != FileKind::Dir {
        let l = c.lstat(path).await.at(path)?;
        if long {
            let target = if l.kind == FileKind::Symlink { c.readlink(path).await.ok() } else { None };
            println!("{}", long_line(&l, path, target.as_deref()));
        } else {
            println!("{path}");
        }
        return Ok(());
    }
    let mut entries = c.readdir(path).await.at(path)?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    if !long {
        let mut out = std::io::stdout().lock();
        for e in &entries {
            use std::io::Write;
            if writeln!(out, "{}", e.name).is_err() {
                break;
            }
        }
        return Ok(());
    }
    let dir = clean_path(path).at(path)?;
    let lines: Vec<String> = futures::stream::iter(entries)
        .map(|e| {
            let dir = &dir;
            async move {
                let full = join_path(dir, &e.name);
                let a = match c.mds().getattr(e.ino).await {
                    Ok(a) => a,
                    // Removed meanwhile: skip it.
                    Err(err) if err.code == ErrorCode::NotFound => return Ok(None),
                    Err(err) => return Err(CliError::at(&full, err)),
                };
                let target = if a.kind == FileKind::Symlink { c.mds().readlink(a.ino).await.ok() } else { None };
                Ok(Some(long_line(&a, &e.name, target.as_deref())))
            }
        })
        .buffered(32)
        .try_filter_map(|x| async move { Ok(x) })
        .try_collect()
        .await?;
    for l in lines {
        println!("{l}");
    }
    Ok(())
}

async fn stat(c: &Client, path: &str) -> CliResult<()> {
    let a = c.lstat(path).await.at(path)?;
    let shown = if a.kind == FileKind::Symlink {
        format!("{path} -> {}", c.readlink(path).await.at(path)?)
    } else {
        path.to_string()
    };
    println!("  File: {shown}");
    println!("  Size: {:<15} Type: {}", a.size, kind_name(a.kind));
    println!(" Inode: {:<15} Links: {}", a.ino, a.nlink);
    println!("Access: ({:04o}/{})  Uid: {}  Gid: {}", a.perm, mode_string(a.kind, a.perm), a.uid, a.gid);
    println!("Access: {}.{:09} UTC", format_time(a.atime), a.atime.nanos);
    println!("Modify: {}.{:09} UTC", format_time(a.mtime), a.mtime.nanos);
    println!("Change: {}.{:09} UTC", format_time(a.ctime), a.ctime.nanos);
    println!(" Birth: {}.{:09} UTC", format_time(a.crtime), a.crtime.nanos);
    Ok(())
}

fn file_name(p: &Path) -> CliResult<String> {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CliError::at(p.display().to_string(), "has no file name"))
}

async fn put(c: &Client, local: &Path, path: &str, spec: Option<LayoutSpec>, quiet: bool) -> CliResult<()> {
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let lname = local.display().to_string();
    let lf = std::fs::File::open(local).at(&lname)?;
    let meta = lf.metadata().at(&lname)?;
    if meta.is_dir() {
        return Err(CliError::at(&lname, "Is a directory"));
    }
    let total = meta.len();
    let perm = meta.permissions().mode() & 0o777;
    let mut dst = path.to_string();
    if let Ok(a) = c.stat(&dst).await {
        if a.kind == FileKind::Dir {
            dst = join_path(&clean_path(&dst).at(&dst)?, &file_name(local)?);
        }
    }
    // The engine's write-behind: blocks are sent in the background (their errors come back at the
    // latest from the close), as the mount's writes are.
    let file = match spec {
        Some(spec) => {
            // A layout is fixed at creation: replace an existing file.
            match c.unlink(&dst).await {
                Ok(()) => {}
                Err(e) if e.code == ErrorCode::NotFound => {}
                Err(e) => return Err(CliError::at(&dst, e)),
            }
            let opts =
                OpenOptions { read: true, write: true, create: true, exclusive: true, perm, ..Default::default() };
            c.create_with(&dst, opts.with_cache(), Some(spec)).await.at(&dst)?
        }
        None => c.open(&dst, OpenOptions { perm, ..OpenOptions::write_truncate() }.with_cache()).await.at(&dst)?,
    };
    let bar = progress::transfer_bar(total, "put", quiet);
    let lf = Arc::new(lf);
    let res: CliResult<()> = futures::stream::iter((0..total).step_by(PUT_BLOCK as usize))
        .map(|off| {
            let (lf, lname) = (lf.clone(), &lname);
            async move {
                let len = PUT_BLOCK.min(total - off) as usize;
                let buf = tokio::task::spawn_blocking(move || {
                    let mut b = vec![0u8; len];
                    lf.read_exact_at(&mut b, off).map(|_| b)
                })
                .await
                .map_err(|e| CliError::at(lname, e))?
                .at(lname)?;
                Ok::<_, CliError>((off, buf))
            }
        })
        .buffered(PUT_AHEAD)
        .try_for_each(|(off, buf)| {
            let (file, bar, dst) = (&file, &bar, &dst);
            async move {
                let len = buf.len() as u64;
                file.write_at(off, Bytes::from(buf)).await.at(dst)?;
                bar.inc(len);
                Ok(())
            }
        })
        .await;
    let closed = file.close().await;
    bar.finish_and_clear();
    res?;
    closed.at(&dst)
}

/// Copies `file` into `out` in the engine's read-ahead chunks, in the pieces they arrive in.
async fn stream_out<W: tokio::io::AsyncWrite + Unpin>(
    file: &File,
    path: &str,
    bar: &indicatif::ProgressBar,
    out: &mut W,
    out_name: &str,
) -> CliResult<u64> {
    let mut done = 0u64;
    loop {
        let pieces = file.read_pieces(done, GET_BLOCK).await.at(path)?;
        let mut got = 0u64;
        for p in &pieces {
            out.write_all(p).await.at(out_name)?;
            got += p.len() as u64;
        }
        done += got;
        bar.inc(got);
        if got < GET_BLOCK {
            return Ok(done);
        }
    }
}

async fn get(c: &Client, path: &str, local: &Path, quiet: bool) -> CliResult<()> {
    let local = if local.is_dir() {
        let (_, name) = split_parent(path).at(path)?;
        local.join(name)
    } else {
        local.to_path_buf()
    };
    let lname = local.display().to_string();
    let file = c.open(path, OpenOptions::read_only().with_cache()).await.at(path)?;
    let out = tokio::fs::File::create(&local).await.at(&lname)?;
    let bar = progress::transfer_bar(file.attr().size, "get", quiet);
    let mut w = tokio::io::BufWriter::with_capacity(1 << 20, out);
    let res = stream_out(&file, path, &bar, &mut w, &lname).await;
    bar.finish_and_clear();
    let closed = file.close().await;
    res?;
    w.flush().await.at(&lname)?;
    closed.at(path)
}

async fn cat(c: &Client, path: &str) -> CliResult<()> {
    let file = c.open(path, OpenOptions::read_only().with_cache()).await.at(path)?;
    let mut out = tokio::io::stdout();
    let res = stream_out(&file, path, &indicatif::ProgressBar::hidden(), &mut out, STDOUT).await;
    let closed = file.close().await;
    match res {
        Ok(_) => out.flush().await.at(STDOUT)?,
        // The reader went away (`tessera cat f | head`): like cat killed by SIGPIPE, but quietly.
        Err(e) if e.path.as_deref() == Some(STDOUT) && e.msg.contains("Broken pipe") => return Ok(()),
        Err(e) => return Err(e),
    }
    closed.at(path)
}

async fn getstripe(c: &Client, path: &str) -> CliResult<()> {
    let attr = c.stat(path).await.at(path)?;
    let defaults = &c.config().defaults;
    if attr.kind == FileKind::Dir {
        if let Some(extents) = c.get_dir_composite(path).await.at(path)? {
            println!("{path} (directory default for new files: composite layout, {} extents)", extents.len());
            let mut start = 0;
            for (k, e) in extents.iter().enumerate() {
                let size = e.stripe_size.map_or(format!("default {}", defaults.stripe_size), |s| s.to_string());
                let count = match e.stripe_count {
                    Some(0) => "all".to_string(),
                    Some(n) => n.to_string(),
                    None => format!("default {}", defaults.stripe_count),
                };
                let mirrors = e.mirrors.map_or(String::new(), |m| format!("  mirror_count {m}"));
                println!(
                    "extent {k}: {}  stripe_size {size}  stripe_count {count}{mirrors}",
                    extent_range(start, e.end)
                );
                start = e.end;
            }
            return Ok(());
        }
        let spec = c.get_dir_layout(path).await.at(path)?;
        println!("{path} (directory default for new files)");
        if spec.is_none() {
            println!("  none of its own: cluster default");
        }
        let spec = spec.unwrap_or_default();
        match spec.stripe_size {
            Some(s) => println!("stripe_size:  {s} ({})", human_bytes(s)),
            None => println!("stripe_size:  inherited (cluster default {})", defaults.stripe_size),
        }
        match spec.stripe_count {
            Some(0) => println!("stripe_count: 0 (all data servers)"),
            Some(n) => println!("stripe_count: {n}"),
            None => println!("stripe_count: inherited (cluster default {})", defaults.stripe_count),
        }
        match spec.mirrors {
            Some(n) => println!("mirror_count: {n}"),
            None => println!("mirror_count: inherited (cluster default {})", defaults.mirrors),
        }
        return Ok(());
    }
    let l = c.get_layout(path).await.at(path)?;
    print!("{}", format_file_layout(path, &l));
    Ok(())
}

/// `[start, end)` in human units, `EOF` for the last extent's end.
fn extent_range(start: u64, end: u64) -> String {
    let end = if end == EOF { "EOF".to_string() } else { human_bytes(end) };
    format!("[{}, {end})", human_bytes(start))
}

/// What `getstripe` prints for a file: its stripes, or each extent of a composite layout with its
/// stripes (an extent not instantiated yet has none: it is placed when the file reaches it).
fn format_file_layout(path: &str, l: &Layout) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // An unmirrored extent: one row per stripe. A mirrored one: one row per replica (the primary, 0,
    // first) with its state: in-sync, stale or resyncing.
    let stripes = |out: &mut String, e: &tessera_proto::layout::ExtentView<'_>| {
        let target = |t: &tessera_proto::layout::StripeTarget| tessera_proto::target_of(t.object);
        if e.mirror_count <= 1 {
            let _ = writeln!(out, "{:>6} {:>6} {:>6} {:>20}", "stripe", "ds", "target", "object");
            for (i, t) in e.targets.iter().enumerate() {
                let _ = writeln!(out, "{:>6} {:>6} {:>6} {:>20}", e.first_stripe + i, t.ds, target(t), t.object);
            }
            return;
        }
        let _ = writeln!(out, "{:>6} {:>7} {:>6} {:>6} {:>20}  state", "stripe", "replica", "ds", "target", "object");
        for (i, t) in e.targets.iter().enumerate() {
            let primary =
                tessera_proto::layout::Replica { target: *t, state: tessera_proto::layout::ReplicaState::InSync };
            let others = e.mirrors.get(i).map_or(&[][..], Vec::as_slice);
            for (r, x) in std::iter::once(&primary).chain(others).enumerate() {
                let t = &x.target;
                let _ = writeln!(
                    out,
                    "{:>6} {:>7} {:>6} {:>6} {:>20}  {}",
                    e.first_stripe + i,
                    r,
                    t.ds,
                    target(t),
                    t.object,
                    x.state
                );
            }
        }
    };
    let _ = writeln!(out, "{path}");
    if !l.is_composite() {
        let _ = writeln!(out, "stripe_size:  {} ({})", l.stripe_size, human_bytes(l.stripe_size));
        let _ = writeln!(out, "stripe_count: {}", l.targets.len());
        if l.mirror_count > 1 {
            let _ = writeln!(out, "mirror_count: {}", l.mirror_count);
        }
        if let Some(e) = l.extent(0) {
            stripes(&mut out, &e);
        }
        return out;
    }
    let inst = l.extent_views().filter(|e| e.instantiated()).count();
    let _ = writeln!(out, "composite layout: {} extents, {inst} instantiated", l.extent_count());
    for e in l.extent_views() {
        let _ = write!(
            out,
            "extent {}: {}  stripe_size {} ({})",
            e.index,
            extent_range(e.start, e.end),
            e.stripe_size,
            human_bytes(e.stripe_size)
        );
        let mirrors = if e.mirror_count > 1 { format!("  mirror_count {}", e.mirror_count) } else { String::new() };
        if e.instantiated() {
            let _ = writeln!(out, "  stripe_count {}{mirrors}", e.targets.len());
            stripes(&mut out, &e);
        } else {
            let asked = if e.stripe_count == 0 { "all".to_string() } else { e.stripe_count.to_string() };
            let _ =
                writeln!(out, "  stripe_count {asked}{mirrors}  (not instantiated: placed when the file reaches it)");
        }
    }
    out
}

async fn df(c: &Client, jobs: bool, json: bool, policy: bool) -> CliResult<()> {
    let mut status = c.cluster_status().await.map_err(CliError::error)?;
    status.sort_by_key(|s| s.ds);
    let targets: Vec<(DsId, TargetReport, Option<u64>)> =
        status.iter().flat_map(|s| s.target_reports().into_iter().map(move |t| (s.ds, t, s.report_age_ms))).collect();
    let utilisations: Vec<f64> = targets.iter().map(|(_, t, _)| t.utilisation()).collect();
    let cost = ost_cost(&utilisations);
    let placement = match policy {
        true => Some(c.placement_status().await.map_err(CliError::error)?),
        false => None,
    };
    if json {
        let list: Vec<serde_json::Value> = targets
            .iter()
            .map(|(ds, t, age)| {
                serde_json::json!({
                    "server": ds, "target": t.target, "capacity": t.capacity, "used": t.used, "free": t.free,
                    "objects": t.objects, "utilisation": t.utilisation(), "capacity_enforced": t.enforced,
                    "report_age_ms": age, "requests": t.latency.total(),
                    "latency_p50_us": t.latency.quantile_us(0.5), "latency_p99_us": t.latency.quantile_us(0.99),
                    "sizes": t.sizes.counts, "jobs": t.jobs,
                })
            })
            .collect();
        let mut doc = serde_json::json!({ "ost_cost": cost, "targets": list, "servers": status });
        if let Some(p) = placement {
            doc["placement"] = serde_json::to_value(p).map_err(CliError::error)?;
        }
        println!("{}", serde_json::to_string_pretty(&doc).map_err(CliError::error)?);
        return Ok(());
    }
    println!(
        "{:>4} {:>6}  {:<22} {:>11} {:>11} {:>11} {:>5} {:>9} {:>15}",
        "DS", "TARGET", "ADDRESS", "CAPACITY", "USED", "FREE", "USE%", "REPORTED", "LATENCY p50/p99"
    );
    let (mut cap, mut used, mut free) = (0u64, 0u64, 0u64);
    for s in &status {
        let age = match s.report_age_ms {
            Some(ms) => format!("{:.1}s ago", ms as f64 / 1000.0),
            None => "never".to_string(),
        };
        let ts = s.target_reports();
        if ts.is_empty() {
            println!(
                "{:>4} {:>6}  {:<22} {:>11} {:>11} {:>11} {:>5} {:>9}",
                s.ds, "-", s.addr, "-", "-", "-", "-", age
            );
        }
        // Targets without a configured capacity share the host file system: counted once in the total.
        let mut shared_counted = false;
        for t in &ts {
            if t.enforced || !shared_counted {
                cap += t.capacity;
                used += t.used;
                free += t.free;
                shared_counted |= !t.enforced;
            }
            println!(
                "{:>4} {:>6}  {:<22} {:>11} {:>11} {:>11} {:>5} {:>9} {:>15}",
                s.ds,
                t.target,
                s.addr,
                human_bytes(t.capacity),
                human_bytes(t.used),
                human_bytes(t.free),
                // As df(1): of what is used or still available (a disk's reserved blocks are neither).
                percent(t.used, t.used + t.free),
                age,
                latency_range(&t.latency)
            );
        }
    }
    println!(
        "{:>4} {:>6}  {:<22} {:>11} {:>11} {:>11} {:>5}",
        "",
        "",
        format!("total ({} servers, {} targets)", status.len(), targets.len()),
        human_bytes(cap),
        human_bytes(used),
        human_bytes(free),
        percent(used, used + free)
    );
    let (max, mean) = (
        utilisations.iter().copied().fold(0.0f64, f64::max),
        utilisations.iter().sum::<f64>() / utilisations.len().max(1) as f64,
    );
    println!(
        "OST cost = max utilisation / mean utilisation = {cost:.3} (max {:.2}%, mean {:.2}%)",
        max * 100.0,
        mean * 100.0
    );
    if let Some(p) = placement {
        println!();
        println!(
            "placement policy: {} (directories and files may set their own: tessera setstripe --policy)",
            p.policy
        );
        println!(
            "files placed: {} in {} solves, {} fell back to lustre, {} run cheaply while the MDS was loaded",
            p.files, p.solves, p.fallbacks, p.deferred
        );
        println!("declared creates: {} used, {} waiting", p.declared_used, p.declared_pending);
        match p.last {
            Some(l) => println!(
                "last solve: {} — {} files, {} stripes, {:.3} ms{}, {:.1} s ago",
                l.policy,
                l.batch,
                l.stripes,
                l.micros as f64 / 1000.0,
                if l.fallback { ", fell back to lustre" } else { "" },
                l.age_ms as f64 / 1000.0
            ),
            None => println!("last solve: none yet"),
        }
    }
    if jobs {
        println!();
        println!(
            "{:>4} {:>6}  {:<24} {:>10} {:>11} {:>10} {:>11}",
            "DS", "TARGET", "JOB", "READ OPS", "READ", "WRITE OPS", "WRITTEN"
        );
        for s in &status {
            let Some(r) = &s.report else { continue };
            // Per target where the server reports it, else (per-job counting off at the targets) its totals.
            let mut rows: Vec<(String, TargetJob)> =
                r.targets.iter().flat_map(|t| t.jobs.iter().map(move |j| (t.target.to_string(), j.clone()))).collect();
            if rows.is_empty() {
                rows = r
                    .jobs
                    .iter()
                    .map(|j| {
                        let t = TargetJob {
                            job: j.job.clone(),
                            read_ops: j.read_ops,
                            read_bytes: j.read_bytes,
                            write_ops: j.write_ops,
                            write_bytes: j.write_bytes,
                        };
                        ("all".to_string(), t)
                    })
                    .collect();
            }
            rows.sort_by(|a, b| a.1.job.cmp(&b.1.job).then_with(|| a.0.cmp(&b.0)));
            for (target, j) in rows {
                println!(
                    "{:>4} {:>6}  {:<24} {:>10} {:>11} {:>10} {:>11}",
                    s.ds,
                    target,
                    j.job,
                    j.read_ops,
                    human_bytes(j.read_bytes),
                    j.write_ops,
                    human_bytes(j.write_bytes)
                );
            }
        }
    }
    Ok(())
}

/// A target's median and 99th percentile request latency (bucket upper bounds), e.g. `1ms/25ms`.
fn latency_range(l: &tessera_proto::msg::LatencyHistogram) -> String {
    let show = |us: Option<u64>| match us {
        None => "-".to_string(),
        Some(u64::MAX) => ">1s".to_string(),
        Some(us) if us >= 1000 => format!("{}ms", us / 1000),
        Some(us) => format!("{us}us"),
    };
    match l.total() {
        0 => "-".to_string(),
        _ => format!("{}/{}", show(l.quantile_us(0.5)), show(l.quantile_us(0.99))),
    }
}

/// `df`'s use%: used / (used + available), rounded up.
fn percent(used: u64, cap: u64) -> String {
    if cap == 0 {
        "-".to_string()
    } else {
        format!("{}%", ((used as f64 / cap as f64) * 100.0).ceil() as u64)
    }
}

async fn ping(c: &Client) -> CliResult<ExitCode> {
    let mut ok = true;
    match c.ping().await {
        Ok(d) => println!("mds   {:<22} {:.2} ms", c.config().mds0().addr, d.as_secs_f64() * 1e3),
        Err(e) => {
            ok = false;
            println!("mds   {:<22} FAILED: {e}", c.config().mds0().addr);
        }
    }
    let results =
        futures::future::join_all(c.ds_ids().into_iter().map(|id| async move { (id, c.ping_ds(id).await) })).await;
    for (id, r) in results {
        let addr = c.config().ds_node(id).map(|d| d.addr.clone()).unwrap_or_default();
        match r {
            Ok(d) => println!("ds {id:<2} {addr:<22} {:.2} ms", d.as_secs_f64() * 1e3),
            Err(e) => {
                ok = false;
                println!("ds {id:<2} {addr:<22} FAILED: {e}");
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The hint an admin-only request adds to a permission error.
fn admin_hint(e: FsError) -> CliError {
    if e.code == ErrorCode::Perm {
        return CliError::plain(format!(
            "{e}\n(use the admin configuration: --config DIR/admin.toml as written by `tessera up`)"
        ));
    }
    CliError::plain(e)
}

async fn fsck(c: &Client, repair: bool, json: bool, verify_mirrors: bool) -> CliResult<ExitCode> {
    if !json {
        eprintln!(
            "checking the namespace and every data server's objects{}{}...",
            if verify_mirrors { ", mirrored replicas by checksum" } else { "" },
            if repair { " (repair)" } else { "" }
        );
    }
    let r = c.mds().fsck_with(repair, verify_mirrors).await.map_err(admin_hint)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(CliError::error)?);
    } else {
        print!("{}", fsck_text(&r));
    }
    let left = r.omitted > 0 || r.findings.iter().any(|f| !f.repaired);
    Ok(ExitCode::from(match (r.findings.is_empty() && r.omitted == 0, left) {
        (true, _) => 0,
        (false, false) => 1,
        (false, true) => 4,
    }))
}

fn fsck_text(r: &FsckReport) -> String {
    let mut out = format!(
        "{} inodes, {} entries, {} objects on {} data servers; {} pass{}, {:.2} s\n",
        r.inodes,
        r.entries,
        r.objects,
        r.servers,
        r.passes,
        if r.passes == 1 { "" } else { "es" },
        r.elapsed_ms as f64 / 1000.0
    );
    if r.findings.is_empty() {
        out.push_str("clean: no findings\n");
        return out;
    }
    let w = r.findings.iter().map(|f| f.kind.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!("{:<w$}  {}\n", "KIND", "WHAT -> ACTION"));
    for f in &r.findings {
        let done = if f.repaired { " [repaired]" } else { "" };
        out.push_str(&format!("{:<w$}  {} -> {}{done}\n", f.kind, f.what, f.action));
    }
    if r.omitted > 0 {
        out.push_str(&format!("... and {} more findings\n", r.omitted));
    }
    out.push_str(&format!("{} findings, {} repaired\n", r.findings.len() as u64 + r.omitted, r.repaired));
    out
}

/// Prints the orchestrator's status rendered by `render`; with `watch`, redraws it every second in
/// place (like `top`) until Ctrl-C.
/// `tessera job ...`.
#[derive(Subcommand, Debug)]
enum JobCmd {
    /// PerSched: registers job J as periodic (β nodes; compute SECONDS, then write BYTES; repeat). The MDS
    /// recomputes the pattern; the job's clients follow it while they poll (the reservation lapses after
    /// the lease when none does).
    Periodic {
        #[arg(long)]
        job: String,
        /// β: nodes the job runs on.
        #[arg(long)]
        nodes: u32,
        /// w: compute phase, seconds.
        #[arg(long)]
        compute: f64,
        /// vol: bytes transferred per instance (suffixes like 4G allowed).
        #[arg(long, value_parser = parse_size)]
        volume: u64,
    },
}

async fn periodic_register(c: Client, job: String, nodes: u32, compute: f64, volume: u64) -> CliResult<()> {
    if !(compute.is_finite() && compute > 0.0) {
        return Err(CliError::plain(FsError::invalid("--compute must be a positive number of seconds")));
    }
    let profile = tessera_proto::msg::PeriodicProfile { nodes, compute_ms: (compute * 1e3).round() as u64, volume };
    let c = c.with_job(job.clone());
    let g = c.mds().periodic_register(profile).await.map_err(CliError::error)?.unwrap_or_default();
    println!(
        "job {job}: period {:.3} s, {} interval(s), lease {} ms",
        g.period_ms as f64 / 1e3,
        g.intervals.len(),
        g.lease_ms
    );
    for i in &g.intervals {
        println!(
            "  [{:.3}, {:.3}) s at {}/s",
            i.start_ms as f64 / 1e3,
            i.end_ms as f64 / 1e3,
            tessera_proto::units::format_size(i.bytes_per_sec)
        );
    }
    Ok(())
}

async fn periodic_text(c: &Client) -> CliResult<String> {
    let r = c.mds().periodic_status().await.map_err(CliError::error)?;
    let mut out = format!(
        "{:<24} {:>5} {:>10} {:>12} {:>10} {:>10} {:>9} {:>10}\n",
        "JOB", "NODES", "COMPUTE_S", "VOLUME", "PLANNED", "MEASURED", "DILATION", "SOURCE"
    );
    for j in &r.jobs {
        let m = j.measured_rho.map_or("-".to_string(), |m| format!("{m:.4}"));
        out += &format!(
            "{:<24} {:>5} {:>10.3} {:>12} {:>10.4} {:>10} {:>9.3} {:>10}\n",
            j.job,
            j.profile.nodes,
            j.profile.compute_ms as f64 / 1e3,
            j.profile.volume,
            j.planned_rho,
            m,
            j.dilation,
            j.source.name()
        );
    }
    let ratio = if r.upper_bound > 0.0 { r.syseff / r.upper_bound } else { 0.0 };
    out += &format!("period {:.3} s, SysEff {:.4}, SysEff/UB {:.4}\n", r.period_ms as f64 / 1e3, r.syseff, ratio);
    Ok(out)
}

async fn watch_status(c: &Client, watch: bool, render: fn(&OrchestratorStatus) -> String) -> CliResult<()> {
    once_or_watch(watch, || c.mds().orchestrator_status(), render).await
}

/// Prints `render` of what `fetch` gets from the MDS once, or (`watch`) every second until Ctrl-C, a
/// failed fetch shown in the frame.
async fn once_or_watch<T, F, Fut>(watch: bool, fetch: F, render: impl Fn(&T) -> String) -> CliResult<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = tessera_proto::FsResult<T>>,
{
    if !watch {
        let st = fetch().await.map_err(CliError::error)?;
        print!("{}", render(&st));
        return Ok(());
    }
    crate::watch::every_second(|| async {
        match fetch().await {
            Ok(st) => render(&st),
            Err(e) => format!("metadata server: {e}\n"),
        }
    })
    .await;
    Ok(())
}

/// `tessera cluster init --hosts FILE --out DIR`.
fn cluster_init(hosts: &Path, out: &Path) -> CliResult<()> {
    let text = std::fs::read_to_string(hosts).map_err(|e| CliError::at(hosts.display().to_string(), e.to_string()))?;
    let nodes = tessera_ops::hosts::parse(&text).map_err(CliError::error)?;
    let plans = tessera_ops::hosts::init(&nodes, out).map_err(CliError::error)?;
    println!("wrote the CA and {} nodes' certificates and configurations into {}", plans.len(), out.display());
    println!("on each node's host, into one directory: NAME.toml, tls/ca.pem, tls/NAME.pem, tls/NAME.key; then:");
    for (p, n) in plans.iter().zip(&nodes) {
        let host = n.addr.as_deref().unwrap_or("-");
        println!("  {:<10} {:<6} {:<22} {}", p.name, p.role.to_string(), host, p.command);
    }
    println!("keep tls/ca.key off the nodes (it issues certificates: tessera ca ...).");
    Ok(())
}

/// The group's members, `1 (voter) at ADDR, ...`.
fn members_text(members: &[tessera_proto::msg::ReplicaMember]) -> String {
    let each: Vec<String> = members
        .iter()
        .map(|m| format!("{} ({}) at {}", m.id, if m.voter { "voter" } else { "learner" }, m.addr))
        .collect();
    each.join(", ")
}

/// `tessera mds add`: adds replica `id` at `addr` as a learner, shows how much of the leader's log it
/// holds until it is within [`PROMOTE_LAG`] entries of it, then (with `promote`) makes it a voter.
async fn mds_add(c: &Client, id: u64, addr: &str, promote: bool, timeout: Duration) -> CliResult<()> {
    let mds = c.mds();
    let st = mds.change_replicas(ReplicaChange::Add { id, addr: addr.to_string() }).await.map_err(admin_hint)?;
    println!("metadata replica {id} at {addr} is a member (a learner); catching up with the leader's log");
    if !promote {
        println!("members: {}", members_text(&st.members));
        return Ok(());
    }
    let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("replica {prefix}: [{bar:40.cyan/blue}] {pos}/{len} entries {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(id.to_string());
    let deadline = std::time::Instant::now() + timeout;
    let (mut held, mut last) = (0, 0);
    loop {
        let leader = mds.replica_statuses().await.into_iter().filter_map(|(_, r)| r.ok()).find(|s| s.role == "leader");
        if let Some(l) = leader {
            held = l.matched.iter().find(|(n, _)| *n == id).map_or(0, |(_, i)| *i);
            last = l.log_index;
            bar.set_length(last);
            bar.set_position(held.min(last));
            if last.saturating_sub(held) <= PROMOTE_LAG && held > 0 {
                break;
            }
        }
        if std::time::Instant::now() >= deadline {
            bar.abandon();
            return Err(CliError::plain(format!(
                "metadata replica {id} holds the leader's log up to {held} of {last} after {timeout:?}: is it \
                 running (tessera-mds --replica {id}) and can the leader reach {addr}? It stays a learner; run \
                 `tessera mds add {id} {addr}` again to go on waiting"
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bar.finish_with_message("caught up");
    let st = mds.change_replicas(ReplicaChange::Promote { id }).await.map_err(admin_hint)?;
    println!("metadata replica {id} votes now; members: {}", members_text(&st.members));
    Ok(())
}

/// `tessera mds status`: the table (or JSON) and whether no replica answered.
async fn mds_status_text(c: &Client, names: &[String], json: bool) -> (String, bool) {
    let all = c.mds().replica_statuses().await;
    let answered = || all.iter().filter_map(|(_, r)| r.as_ref().ok());
    let leader = answered().find(|s| s.role == "leader");
    let leader_matched: Option<(u64, Vec<(u64, u64)>)> = leader.map(|s| (s.log_index, s.matched.clone()));
    // The membership as the leader (else any replica answering) knows it: who votes.
    let members: Vec<tessera_proto::msg::ReplicaMember> =
        leader.or_else(|| answered().next()).map(|s| s.members.clone()).unwrap_or_default();
    let rows: Vec<serde_json::Value> = all
        .iter()
        .enumerate()
        .map(|(i, (addr, r))| {
            // A configured replica is named by its configuration; one added at run time by its id.
            let id = r.as_ref().map_or(i as u64 + 1, |s| s.id);
            let name = names.get(i).cloned().unwrap_or_else(|| format!("mds{}", id.saturating_sub(1)));
            let voter = members.iter().find(|m| m.id == id && m.addr == *addr).map(|m| m.voter);
            match r {
                Ok(s) => {
                    let lag = leader_matched.as_ref().and_then(|(last, m)| {
                        m.iter().find(|(id, _)| *id == s.id).map(|(_, idx)| last.saturating_sub(*idx))
                    });
                    serde_json::json!({
                        "name": name, "addr": addr, "id": s.id, "role": s.role, "term": s.term,
                        "log_index": s.log_index, "applied_index": s.applied_index, "lag": lag,
                        "leader": s.leader, "serving": s.serving, "voter": voter, "error": null,
                    })
                }
                Err(e) => serde_json::json!({
                    "name": name, "addr": addr, "id": id, "role": "unreachable", "term": null,
                    "log_index": null, "applied_index": null, "lag": null, "leader": null, "serving": false,
                    "voter": voter, "error": e.to_string(),
                }),
            }
        })
        .collect();
    let all_down = all.iter().all(|(_, r)| r.is_err());
    if json {
        return (serde_json::to_string(&rows).unwrap_or_default() + "\n", all_down);
    }
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<8} {:<22} {:<12} {:<8} {:>6} {:>10} {:>10} {:>6}  SERVING",
        "NAME", "ADDRESS", "ROLE", "MEMBER", "TERM", "LOG", "APPLIED", "LAG"
    );
    let cell = |v: &serde_json::Value| if v.is_null() { "-".to_string() } else { v.to_string() };
    for r in &rows {
        let _ = writeln!(
            o,
            "{:<8} {:<22} {:<12} {:<8} {:>6} {:>10} {:>10} {:>6}  {}",
            r["name"].as_str().unwrap_or("-"),
            r["addr"].as_str().unwrap_or("-"),
            r["role"].as_str().unwrap_or("-"),
            // Whether the leader's membership counts it: a voter, a learner, or not at all (removed).
            match r["voter"].as_bool() {
                Some(true) => "voter",
                Some(false) => "learner",
                None if members.is_empty() => "-",
                None => "no",
            },
            cell(&r["term"]),
            cell(&r["log_index"]),
            cell(&r["applied_index"]),
            cell(&r["lag"]),
            if r["serving"].as_bool() == Some(true) { "yes" } else { "no" }
        );
        if let Some(e) = r["error"].as_str() {
            let _ = writeln!(o, "         {e}");
        }
    }
    (o, all_down)
}

async fn mirror_status(c: &Client, watch: bool, json: bool) -> CliResult<()> {
    let render = |st: &tessera_proto::msg::MirrorStatus| {
        if json {
            serde_json::to_string(st).unwrap_or_default() + "\n"
        } else {
            mirror_text(st)
        }
    };
    once_or_watch(watch, || c.mds().mirror_status(), render).await
}

fn mirror_text(st: &tessera_proto::msg::MirrorStatus) -> String {
    use tessera_proto::units::format_size;
    let mut o = String::new();
    use std::fmt::Write;
    let _ = writeln!(o, "degraded files:    {}", st.degraded_files);
    let _ = writeln!(o, "degraded objects:  {} ({} stale, {} resyncing)", st.degraded_objects, st.stale, st.resyncing);
    let _ = writeln!(o, "bytes to resync:   {}", format_size(st.bytes_to_resync));
    let _ = writeln!(o, "resync rate:       {}/s", format_size(st.resync_rate));
    let _ = writeln!(
        o,
        "resynced:          {} replicas, {} since the MDS started",
        st.resyncs_done,
        format_size(st.resynced_bytes)
    );
    if !st.removed.is_empty() {
        let ids: Vec<String> = st.removed.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(o, "removed servers:   {}", ids.join(", "));
    }
    o
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn opt_ms(us: Option<f64>) -> String {
    us.map_or_else(|| "-".to_string(), ms)
}

fn skew_text(st: &OrchestratorStatus) -> String {
    let f = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |us| ms(us as f64));
    format!("last {}, median {}", f(st.last_switch_skew_us), f(st.median_switch_skew_us))
}

/// `tessera jobs`: every running program with its per-server locality and the decision about it.
fn jobs_text(st: &OrchestratorStatus) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let eligible = st.jobs.iter().filter(|j| j.eligible).count();
    let _ = writeln!(
        o,
        "orchestrator {} · window {} ms · {} servers reporting · {} programs running, {eligible} eligible",
        st.mode,
        st.window_ms,
        st.servers.len(),
        st.jobs.len()
    );
    if st.jobs.is_empty() {
        let _ = writeln!(o, "no running programs");
    }
    for j in &st.jobs {
        let _ = writeln!(
            o,
            "\n{}  eligible: {}  slice share: {:.1}%",
            j.job,
            if j.eligible { "yes" } else { "no" },
            j.slice_share * 100.0
        );
        let _ = writeln!(o, "  {}", j.reason);
        let _ = writeln!(o, "  {:>4}  {:>11}  {:>11}  {:>10}  {:>10}", "DS", "SL_i", "SL_ij", "RD_ij", "SeekTime");
        for (ds, sl, rd) in &j.servers {
            let srv = st.servers.iter().find(|s| s.0 == *ds);
            let _ = writeln!(
                o,
                "  {ds:>4}  {:>11}  {:>11}  {:>10}  {:>10}",
                srv.map_or_else(|| "-".to_string(), |s| human_bytes(s.1 as u64)),
                human_bytes(*sl as u64),
                opt_ms(*rd),
                srv.map_or_else(|| "-".to_string(), |s| ms(s.2)),
            );
        }
    }
    o
}

/// `tessera orchestrator status`: mode, plan, servers, skew.
fn orchestrator_text(st: &OrchestratorStatus) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "mode:         {}", st.mode);
    let _ = writeln!(o, "window:       {} ms ({} windows run)", st.window_ms, st.windows_run);
    let _ = writeln!(o, "switch skew:  {}", skew_text(st));
    let _ = writeln!(o, "plan:");
    let _ = writeln!(o, "  {:<24} {:>10} {:>7} {:>10}", "OBJECT", "SLICE", "SHARE", "RD");
    for p in &st.plan {
        let share = if st.window_ms > 0 { p.slice_ms / f64::from(st.window_ms) * 100.0 } else { 0.0 };
        let _ = writeln!(o, "  {:<24} {:>7.1} ms {:>6.1}% {:>10}", p.label, p.slice_ms, share, opt_ms(p.rd_us));
    }
    let _ = writeln!(o, "servers:");
    let _ = writeln!(o, "  {:>4}  {:>11}  {:>10}  {:>10}", "DS", "SL_i", "SeekTime", "REPORTED");
    for (ds, sl, seek, age) in &st.servers {
        let _ = writeln!(
            o,
            "  {ds:>4}  {:>11}  {:>10}  {:>10}",
            human_bytes(*sl as u64),
            ms(*seek),
            format!("{:.1}s ago", *age as f64 / 1000.0)
        );
    }
    let eligible = st.jobs.iter().filter(|j| j.eligible).count();
    let _ = writeln!(o, "programs:     {} running, {eligible} eligible (details: tessera jobs)", st.jobs.len());
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn sample_status() -> OrchestratorStatus {
        use tessera_proto::msg::{JobView, PlanSlice, ServeTarget};
        OrchestratorStatus {
            mode: OrchestratorMode::IOrchestrator,
            window_ms: 500,
            servers: vec![(0, 2e9, 8500.0, 40), (1, 2.1e9, 8600.0, 90)],
            jobs: vec![JobView {
                job: "mpi-io-test".into(),
                eligible: true,
                reason: "eligible; [1] ...".into(),
                servers: vec![(0, 0.0, Some(1200.0)), (1, 4096.0, None)],
                slice_share: 0.7,
            }],
            plan: vec![
                PlanSlice {
                    label: "mpi-io-test".into(),
                    target: ServeTarget::Job("mpi-io-test".into()),
                    slice_ms: 350.0,
                    rd_us: Some(1200.0),
                },
                PlanSlice {
                    label: "(others)".into(),
                    target: ServeTarget::Others { eligible: vec![] },
                    slice_ms: 150.0,
                    rd_us: None,
                },
            ],
            last_switch_skew_us: Some(210),
            median_switch_skew_us: None,
            windows_run: 12,
        }
    }

    #[test]
    fn orchestrator_views_render() {
        let st = sample_status();
        let j = jobs_text(&st);
        assert!(j.contains("mpi-io-test  eligible: yes  slice share: 70.0%"), "{j}");
        assert!(j.contains("1.20 ms") && j.contains("4.0 KiB") && j.contains("8.60 ms"), "{j}");
        let o = orchestrator_text(&st);
        assert!(o.contains("mode:         iorchestrator"), "{o}");
        assert!(o.contains("350.0 ms   70.0%"), "{o}");
        assert!(o.contains("last 0.21 ms, median -"), "{o}");
        assert!(o.contains("1 running, 1 eligible"), "{o}");
        let c = Cli::try_parse_from(["tessera", "orchestrator", "mode", "even"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Orchestrator(OrchCmd::Mode { mode: OrchestratorMode::Even })));
        assert!(Cli::try_parse_from(["tessera", "orchestrator", "mode", "fast"]).is_err());
        let c = Cli::try_parse_from(["tessera", "jobs", "--watch"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Jobs { watch: true, .. }));
        let c = Cli::try_parse_from(["tessera", "orchestrator", "status"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Orchestrator(OrchCmd::Status { watch: false })));
        let c = Cli::try_parse_from(["tessera", "jobs", "--periodic"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Jobs { periodic: true, watch: false }));
        let args = ["tessera", "job", "periodic", "--job", "J", "--nodes", "4", "--compute", "2.5", "--volume", "2G"];
        let c = Cli::try_parse_from(args).unwrap();
        let Cmd::Job(JobCmd::Periodic { job, nodes, compute, volume }) = c.cmd else { panic!("{:?}", c.cmd) };
        assert_eq!((job.as_str(), nodes, compute, volume), ("J", 4, 2.5, 2 << 30));
    }

    #[test]
    fn modes_parse_and_print() {
        assert_eq!(parse_mode("644").unwrap(), 0o644);
        assert_eq!(parse_mode("0755").unwrap(), 0o755);
        assert_eq!(parse_mode("1777").unwrap(), 0o1777);
        assert!(parse_mode("u+x").is_err());
        assert!(parse_mode("17777").is_err());
        assert_eq!(mode_string(FileKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(FileKind::File, 0o4644), "-rwSr--r--");
        assert_eq!(mode_string(FileKind::Dir, 0o1777), "drwxrwxrwt");
    }

    #[test]
    fn human_output() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_time(Timestamp { secs: 0, nanos: 0 }), "1970-01-01 00:00:00");
        assert_eq!(format_time(Timestamp { secs: 951_782_400 + 3661, nanos: 0 }), "2000-02-29 01:01:01");
        assert_eq!(percent(1, 3), "34%");
        assert_eq!(percent(1, 0), "-");
    }

    #[test]
    fn command_line_parses() {
        Cli::command().debug_assert();
        let c =
            Cli::try_parse_from(["tessera", "--config", "x.toml", "put", "-S", "64K", "-c", "2", "a", "/b"]).unwrap();
        match c.cmd {
            Cmd::Put { stripe_size, stripe_count, .. } => {
                assert_eq!(stripe_size, Some(65536));
                assert_eq!(stripe_count, Some(2));
            }
            other => panic!("{other:?}"),
        }
        let c = Cli::try_parse_from(["tessera", "up", "--dir", "/tmp/x", "--port-base", "0"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Up(UpArgs { port_base: 0, ds: None, .. })));
        let c = Cli::try_parse_from(["tessera", "status", "--dir", "/tmp/x", "--json"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Status { dir: Some(_), json: true }));
        let c =
            Cli::try_parse_from(["tessera", "ca", "issue", "--dir", "d", "--role", "ds", "--name", "n", "--san", "h"])
                .unwrap();
        assert!(matches!(c.cmd, Cmd::Ca(CaCmd::Issue { role: Role::Ds, days: tessera_ops::issue::NODE_DAYS, .. })));
        let c = Cli::try_parse_from(["tessera", "ca", "revoke", "c1", "--dir", "d"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Ca(CaCmd::Revoke { ref name, serial: None, .. }) if name == "c1"));
        let c = Cli::try_parse_from(["tessera", "ca", "renew", "ds1", "--days", "30"]).unwrap();
        assert!(matches!(c.cmd, Cmd::Ca(CaCmd::Renew { days: 30, dir: CaDirArg { dir: None }, .. })));
        assert!(Cli::try_parse_from(["tessera", "ca", "renew", "ds1", "--days", "0"]).is_err());
        assert!(Cli::try_parse_from(["tessera", "ca", "list"]).is_ok());
        assert!(Cli::try_parse_from(["tessera", "ca", "issue", "--dir", "d", "--role", "king", "--name", "n"]).is_err());
        assert!(Cli::try_parse_from(["tessera", "truncate", "-s", "1G", "/f"]).is_ok());
    }

    #[test]
    fn setstripe_pairs_each_count_and_size_with_its_extent() {
        let c = parse_args([
            "tessera",
            "setstripe",
            "-E",
            "128M",
            "-c",
            "1",
            "-E",
            "512M",
            "-c",
            "3",
            "-S",
            "2M",
            "-E",
            "-1",
            "-c",
            "8",
            "/d",
        ])
        .unwrap();
        let Cmd::Setstripe { extents, path, .. } = c.cmd else { panic!() };
        assert_eq!(path, "/d");
        let e = |end, c, s| ExtentSpec { end, stripe_count: Some(c), stripe_size: s, mirrors: None };
        assert_eq!(extents, vec![e(128 << 20, 1, None), e(512 << 20, 3, Some(2 << 20)), e(EOF, 8, None)]);
        let c = parse_args(["tessera", "setstripe", "-E", "1M", "-E", "-1", "-c", "-1", "/d"]).unwrap();
        let Cmd::Setstripe { extents, .. } = c.cmd else { panic!() };
        assert_eq!((extents[0].stripe_count, extents[1].stripe_count), (None, Some(0)), "-c -1 is all");
        let c = parse_args(["tessera", "setstripe", "-c", "2", "/f"]).unwrap();
        let Cmd::Setstripe { extents, stripe_count, .. } = c.cmd else { panic!() };
        assert!(extents.is_empty());
        assert_eq!(stripe_count, vec![2], "plain setstripe unchanged");
        for bad in [
            &["tessera", "setstripe", "-c", "1", "-E", "-1", "/d"][..],
            &["tessera", "setstripe", "-E", "1M", "-c", "1", "/d"],
            &["tessera", "setstripe", "-E", "1M", "-c", "1", "-c", "2", "-E", "-1", "/d"],
            &["tessera", "setstripe", "-E", "2M", "-E", "1M", "-E", "-1", "/d"],
        ] {
            assert!(parse_args(bad.iter().copied()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn getstripe_shows_every_extent_instantiated_or_not() {
        use tessera_proto::layout::{Component, StripeTarget};
        let mut l = Layout::plain(1 << 20, vec![StripeTarget { ds: 2, object: 77 }]);
        l.extents = vec![Component {
            start: 1 << 20,
            end: EOF,
            stripe_size: 1 << 20,
            stripe_count: 2,
            targets: vec![],
            mirror_count: 1,
            mirrors: vec![],
        }];
        let text = format_file_layout("/f", &l);
        assert!(text.contains("composite layout: 2 extents, 1 instantiated"), "{text}");
        assert!(text.contains("extent 1: [1.0 MiB, EOF)"), "{text}");
        assert!(text.contains("not instantiated"), "{text}");
        assert!(text.contains("77"), "{text}");
        l.extents[0].targets = vec![StripeTarget { ds: 0, object: 80 }, StripeTarget { ds: 1, object: 81 }];
        let text = format_file_layout("/f", &l);
        assert!(
            text.contains("2 extents, 2 instantiated") && text.contains("81") && !text.contains("not inst"),
            "{text}"
        );
    }
}
