//! `tessera-bench net`: the transport alone, like Lustre's `lnet_selftest`. Bulk RPCs over QUIC with mutual
//! TLS go from this process (the client) to server processes that drop what they receive and answer reads
//! from memory, the way a data server answers from its write cache. No metadata, no disk, no FUSE: what
//! this reaches is the most that any file-system path over the same transport can reach on the machine,
//! and its CPU per MiB is the transport's share of what the file system costs.

use crate::localcluster::spawn;
use crate::report::{median, mib_per_sec, write_json};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tessera_ops::child::{Child, READY_TIMEOUT};
use tessera_proto::rpc::{self, PeerInfo, RpcPeer, Service, Tuning};
use tessera_proto::tls::{NodeIdentity, TlsFiles};
use tessera_proto::units::{format_size, parse_size};
use tessera_proto::{FsError, FsResult, Role};

#[derive(clap::Args, Debug, Clone)]
pub struct NetArgs {
    /// Server processes (each like one data server).
    #[arg(long, default_value_t = 4)]
    pub servers: usize,
    /// Concurrent client tasks.
    #[arg(short = 'N', long, default_value_t = 2)]
    pub tasks: usize,
    /// Calls each task keeps in flight (a striped client has one per server it is writing to).
    #[arg(long, default_value_t = 4)]
    pub depth: usize,
    /// Payload per call; calls go to the servers in turn, like 1 MiB stripes.
    #[arg(short = 't', long, value_parser = parse_size, default_value = "1m")]
    pub transfer: u64,
    /// Bytes moved per phase.
    #[arg(short = 's', long, value_parser = parse_size, default_value = "1g")]
    pub size: u64,
    /// Repetitions of each phase (the report gives each and the median).
    #[arg(short = 'i', long, default_value_t = 3)]
    pub reps: u32,
    /// Which phases: write (payload to the servers), read (payload back) or both, alternating.
    #[arg(long, value_enum, default_value = "both")]
    pub direction: Direction,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Internal: serve as one of the server processes with the identity in DIR (printed READY ADDRESS).
    #[arg(long, hide = true, value_name = "DIR")]
    pub serve: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Write,
    Read,
    Both,
}

/// A call to a sink server.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetRequest {
    /// The payload is received (gathered page-aligned, as for a data server) and dropped.
    Put,
    /// Answer with this many bytes.
    Get(u32),
}

/// One timed phase: payloads to the servers, or back from them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Write,
    Read,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Write => "write",
            Phase::Read => "read",
        }
    }
}

/// Largest read answered; the replies are slices of one buffer of this size.
const MAX_GET: usize = 16 << 20;

/// The server side: takes writes and answers reads from one buffer without touching a disk.
pub struct Sink {
    data: Bytes,
}

impl Sink {
    pub fn new() -> Sink {
        Sink { data: Bytes::from((0..MAX_GET).map(|i| (i % 251) as u8).collect::<Vec<u8>>()) }
    }
}

impl Default for Sink {
    fn default() -> Self {
        Sink::new()
    }
}

impl Service for Sink {
    type Request = NetRequest;
    type Reply = u64;

    fn accepts(&self, role: Role) -> bool {
        role == Role::Client
    }

    async fn handle(&self, _peer: Arc<PeerInfo>, req: NetRequest, payload: Bytes) -> (FsResult<u64>, Bytes) {
        match req {
            NetRequest::Put => (Ok(payload.len() as u64), Bytes::new()),
            NetRequest::Get(n) if n as usize <= MAX_GET => (Ok(u64::from(n)), self.data.slice(..n as usize)),
            NetRequest::Get(n) => (Err(FsError::invalid(format!("read of {n} bytes > {MAX_GET}"))), Bytes::new()),
        }
    }
}

/// One phase of one repetition.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NetPhase {
    pub phase: String,
    pub rep: u32,
    pub mib_s: f64,
    /// CPU (user + system) per MiB moved, in milliseconds.
    pub client_cpu_ms_per_mib: f64,
    pub servers_cpu_ms_per_mib: f64,
    /// Share of all cores busy in the client and the servers together.
    pub cpu_busy: f64,
}

#[derive(Serialize)]
struct NetJson<'a> {
    servers: usize,
    tasks: usize,
    depth: usize,
    transfer: u64,
    size: u64,
    cores: usize,
    phases: &'a [NetPhase],
}

/// Runs `tessera-bench net` (or one of its servers, with `--serve`).
pub async fn run(a: NetArgs) -> Result<()> {
    if let Some(dir) = &a.serve {
        return serve(dir).await;
    }
    if a.servers == 0 || a.tasks == 0 || a.depth == 0 || a.reps == 0 {
        bail!("--servers, --tasks, --depth and -i must be at least 1");
    }
    if a.transfer == 0 || a.transfer > MAX_GET as u64 {
        bail!("-t must be between 1 byte and {}", format_size(MAX_GET as u64));
    }
    let dir = tempdir()?;
    let res = measure(&a, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    res
}

fn tempdir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tessera-net.{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn identity_files(dir: &Path) -> TlsFiles {
    TlsFiles::in_dir(dir, "node")
}

/// Writes a throwaway CA and one identity per server (`DIR/sK/`) and for the client (`DIR/client/`).
fn make_identities(dir: &Path, servers: usize) -> Result<(NodeIdentity, Vec<PathBuf>)> {
    let ca = tessera_ops::issue::generate_ca("tessera-net").map_err(|e| anyhow!("{e}"))?;
    let issue = |sub: &str, role: Role| -> Result<PathBuf> {
        let d = dir.join(sub);
        tessera_ops::ca::write_ca(&d, &ca).with_context(|| format!("writing {}", d.display()))?;
        tessera_ops::ca::issue_to_dir(&d, &ca, role, "node", &[]).map_err(|e| anyhow!("{e}"))?;
        Ok(d)
    };
    let client = issue("client", Role::Client)?;
    let client = NodeIdentity::load(&identity_files(&client)).map_err(|e| anyhow!("{e}"))?;
    let servers = (0..servers).map(|k| issue(&format!("s{k}"), Role::Ds)).collect::<Result<Vec<_>>>()?;
    Ok((client, servers))
}

/// The server process: a sink on an ephemeral loopback port until killed.
async fn serve(dir: &Path) -> Result<()> {
    let id = NodeIdentity::load(&identity_files(dir)).map_err(|e| anyhow!("{e}"))?;
    let ep = rpc::server_endpoint("127.0.0.1:0".parse()?, &id, &Tuning::default()).map_err(|e| anyhow!("{e}"))?;
    let addr = ep.local_addr()?;
    tessera_ops::child::announce_ready(addr);
    rpc::serve(ep, Arc::new(Sink::new()), id.crl.clone()).await;
    Ok(())
}

async fn measure(a: &NetArgs, dir: &Path) -> Result<()> {
    let (client_id, server_dirs) = make_identities(dir, a.servers)?;
    let exe = std::env::current_exe().context("finding tessera-bench itself")?;
    let mut children: Vec<Child> = Vec::new();
    let mut peers = Vec::new();
    let endpoint = rpc::client_endpoint(false).map_err(|e| anyhow!("{e}"))?;
    for (k, sdir) in server_dirs.iter().enumerate() {
        let args = vec!["net".into(), "--serve".into(), sdir.display().to_string()];
        let log = dir.join(format!("s{k}.log"));
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(&args);
        let mut child = spawn(&format!("server {k}"), cmd, &log)?;
        let addr = child.ready(READY_TIMEOUT).await?;
        let addr = addr.parse().with_context(|| format!("server {k} printed address {addr:?}"))?;
        children.push(child);
        peers.push(RpcPeer::new(endpoint.clone(), &client_id, Role::Ds, addr, Tuning::default())?);
    }
    let peers = Arc::new(peers);
    let server_pids: Vec<u32> = children.iter().map(|c| c.id()).collect();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "net: {} server processes, {} tasks x {} calls in flight, {} per call, {} per phase; QUIC + mutual TLS on loopback; {cores} cores",
        a.servers,
        a.tasks,
        a.depth,
        format_size(a.transfer),
        format_size(a.size)
    );
    // Connections and congestion windows warmed up before anything is timed.
    run_phase(&peers, a, Phase::Write, a.size.min(64 << 20)).await?;
    let phases = match a.direction {
        Direction::Write => vec![Phase::Write],
        Direction::Read => vec![Phase::Read],
        Direction::Both => vec![Phase::Write, Phase::Read],
    };
    // /proc counts CPU in ticks of 10 ms: the CPU columns need phases of a second or more.
    println!(
        "{:<6} {:>4} {:>9} {:>16} {:>17} {:>9}",
        "phase", "rep", "MiB/s", "client ms/MiB", "servers ms/MiB", "CPU busy"
    );
    let mut results = Vec::new();
    for rep in 1..=a.reps {
        for &phase in &phases {
            let cpu0 = (process_cpu_secs(std::process::id())?, total_cpu_secs(&server_pids)?);
            let t0 = Instant::now();
            run_phase(&peers, a, phase, a.size).await?;
            let secs = t0.elapsed().as_secs_f64();
            let cpu1 = (process_cpu_secs(std::process::id())?, total_cpu_secs(&server_pids)?);
            let mib = a.size as f64 / (1u64 << 20) as f64;
            let p = NetPhase {
                phase: phase.name().into(),
                rep,
                mib_s: mib_per_sec(a.size, secs),
                client_cpu_ms_per_mib: (cpu1.0 - cpu0.0) * 1e3 / mib,
                servers_cpu_ms_per_mib: (cpu1.1 - cpu0.1) * 1e3 / mib,
                cpu_busy: (cpu1.0 - cpu0.0 + cpu1.1 - cpu0.1) / secs / cores as f64,
            };
            print_row(&p.phase, &p.rep.to_string(), &p);
            results.push(p);
        }
    }
    for &phase in &phases {
        let of = |f: fn(&NetPhase) -> f64| {
            median(&results.iter().filter(|p| p.phase == phase.name()).map(f).collect::<Vec<f64>>())
        };
        let med = NetPhase {
            phase: phase.name().into(),
            rep: 0,
            mib_s: of(|p| p.mib_s),
            client_cpu_ms_per_mib: of(|p| p.client_cpu_ms_per_mib),
            servers_cpu_ms_per_mib: of(|p| p.servers_cpu_ms_per_mib),
            cpu_busy: of(|p| p.cpu_busy),
        };
        print_row(phase.name(), "med", &med);
    }
    if let Some(path) = &a.json {
        let j = NetJson {
            servers: a.servers,
            tasks: a.tasks,
            depth: a.depth,
            transfer: a.transfer,
            size: a.size,
            cores,
            phases: &results,
        };
        write_json(path, &j)?;
    }
    Ok(())
}

/// One line of the table: a repetition's phase, or the medians (`rep` = "med").
fn print_row(phase: &str, rep: &str, p: &NetPhase) {
    println!(
        "{phase:<6} {rep:>4} {:>9.1} {:>16.3} {:>17.3} {:>8.0}%",
        p.mib_s,
        p.client_cpu_ms_per_mib,
        p.servers_cpu_ms_per_mib,
        p.cpu_busy * 100.0
    );
}

/// Moves `size` bytes in calls of `a.transfer` to the servers in turn, `a.tasks * a.depth` calls in flight.
async fn run_phase(peers: &Arc<Vec<RpcPeer>>, a: &NetArgs, phase: Phase, size: u64) -> Result<()> {
    let calls = size.div_ceil(a.transfer);
    let next = Arc::new(AtomicU64::new(0));
    let payload = Bytes::from(vec![0x5au8; a.transfer as usize]);
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..a.tasks * a.depth {
        let (peers, next, payload) = (peers.clone(), next.clone(), payload.clone());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= calls {
                    return Ok::<(), anyhow::Error>(());
                }
                let peer = &peers[(i % peers.len() as u64) as usize];
                let (req, body) = match phase {
                    Phase::Write => (NetRequest::Put, payload.clone()),
                    Phase::Read => (NetRequest::Get(payload.len() as u32), Bytes::new()),
                };
                let (n, reply): (u64, Vec<Bytes>) = peer.call_chunked(&req, body).await?;
                let got: usize = reply.iter().map(Bytes::len).sum();
                let want = payload.len() as u64;
                if n != want || (phase == Phase::Read && got as u64 != want) {
                    bail!("server {} answered {n} bytes ({got} carried) for a call of {want}", peer.addr());
                }
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.context("a benchmark task failed")??;
    }
    Ok(())
}

/// User + system CPU seconds of a process so far, from /proc/PID/stat.
pub fn process_cpu_secs(pid: u32) -> Result<f64> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    cpu_secs_of_stat(&stat).ok_or_else(|| anyhow!("unreadable /proc/{pid}/stat"))
}

fn total_cpu_secs(pids: &[u32]) -> Result<f64> {
    pids.iter().map(|&p| process_cpu_secs(p)).sum()
}

/// Fields 14 and 15 (utime, stime) of a /proc/PID/stat line, in seconds; the command name (field 2) may
/// hold spaces and ')', so fields are counted from its last ')'.
fn cpu_secs_of_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some((utime + stime) as f64 / if hz > 0 { hz as f64 } else { 100.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_past_a_command_name_with_spaces() {
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let line = "42 (a) b) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 1000 0 0";
        assert_eq!(cpu_secs_of_stat(line), Some(300.0 / hz));
        assert_eq!(cpu_secs_of_stat("42 (x) S 1"), None);
        assert!(process_cpu_secs(std::process::id()).unwrap() >= 0.0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sink_takes_writes_and_answers_reads_over_real_quic() {
        let dir = tempfile::tempdir().unwrap();
        let (client, servers) = make_identities(dir.path(), 1).unwrap();
        let id = NodeIdentity::load(&identity_files(&servers[0])).unwrap();
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &id, &Tuning::default()).unwrap();
        let addr = ep.local_addr().unwrap();
        tokio::spawn(rpc::serve(ep, Arc::new(Sink::new()), id.crl.clone()));
        let peer =
            RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client, Role::Ds, addr, Tuning::default()).unwrap();
        let (n, _) = peer.call::<_, u64>(&NetRequest::Put, Bytes::from(vec![1u8; 300_000])).await.unwrap();
        assert_eq!(n, 300_000);
        let (n, data) = peer.call::<_, u64>(&NetRequest::Get(70_000), Bytes::new()).await.unwrap();
        assert_eq!((n, data.len()), (70_000, 70_000));
        assert_eq!(data[252], 1, "replies carry the sink's pattern");
        let err = peer.call::<_, u64>(&NetRequest::Get(u32::MAX), Bytes::new()).await.unwrap_err();
        assert!(err.to_string().contains("read of"), "{err}");
    }
}
