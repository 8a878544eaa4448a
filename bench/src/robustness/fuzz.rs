//! `tessera-bench fuzz`: mutated frames over real QUIC connections with mutual TLS to a running metadata
//! server, data server or forwarding node, as an authenticated peer would send them (the cluster's admin
//! identity). Each frame is a plausible request of the target's protocol (aimed at the inodes, handles,
//! leases and objects earlier replies named, in any order) or an arbitrary one, encoded, and most often
//! spoiled by one of `tessera_proto::fuzz`'s mutations; some streams are reset or left open half-sent.
//! Meanwhile a well-behaved client (the cluster's client identity, its own connection) asks the server
//! something small every `--probe-ms` and must keep getting answers, and the server's memory (VmRSS,
//! VmHWM) is sampled. A connection the server closes is replaced; the server's exit ends the run.
//!
//! The run fails (`"ok": false` and the reasons in the JSON, exit code 1) when the server exits, when a
//! reply is not the protocol's, or when one of the well-behaved client's requests fails: it sends only
//! requests any server of the target's kind must answer (see [`probe_call`]), so a failure is the
//! server's, not the probe's.

use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::report::{median, write_json};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::ClusterConfig;
use tessera_proto::error::FsResult;
use tessera_proto::frame::{self, MAX_PAYLOAD};
use tessera_proto::fuzz::{self, Known, Mutation, Rng};
use tessera_proto::msg::{
    DsCall, DsReply, DsRequest, IonCall, IonReply, MdsCall, MdsReply, MdsRequest, SchedulerSetting,
};
use tessera_proto::rpc::{self, RpcPeer, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{wire, Caller, Origin, Role};

#[derive(clap::Args, Debug, Clone)]
pub struct FuzzArgs {
    /// The server to fuzz: the metadata server, data server 0 or forwarding node 0.
    #[arg(long, value_enum)]
    pub target: Target,
    /// Frames to send.
    #[arg(long, default_value_t = 100_000)]
    pub frames: u64,
    /// Directory of a running cluster (`tessera up --dir DIR`): its server is fuzzed with the admin
    /// identity there. Without it, a local cluster (an MDS, two data servers, and a forwarding node for
    /// `--target ion`) is started in a temporary directory and removed afterwards.
    #[arg(long, value_name = "DIR")]
    pub cluster: Option<PathBuf>,
    /// Seed of the generated and mutated frames (default: a new one, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Fuzzing connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Frames each connection has in flight, one stream each.
    #[arg(long, default_value_t = 32)]
    pub depth: usize,
    /// Milliseconds between the well-behaved client's requests.
    #[arg(long, default_value_t = 100)]
    pub probe_ms: u64,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Mds,
    Ds,
    Ion,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Mds => "mds",
            Target::Ds => "ds",
            Target::Ion => "ion",
        }
    }

    /// The server's name in a cluster directory (its log, its config `NAME.toml`).
    fn server(self) -> &'static str {
        match self {
            Target::Mds => "mds",
            Target::Ds => "ds0",
            Target::Ion => "ion0",
        }
    }

    fn role(self) -> Role {
        match self {
            Target::Mds => Role::Mds,
            Target::Ds => Role::Ds,
            Target::Ion => Role::Ion,
        }
    }
}

/// Longest the fuzzer waits for the answer to one frame.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Streams a connection keeps open half-sent (the oldest is dropped when another is left).
const HELD_STREAMS: usize = 64;
/// Share of frames sent unmutated (valid requests, in whatever order the generator makes them).
const VALID_PERCENT: u64 = 20;

/// What became of the frames.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    valid: AtomicU64,
    defused: AtomicU64,
    abandoned: AtomicU64,
    answered_ok: AtomicU64,
    refused: AtomicU64,
    unanswered: AtomicU64,
    undecodable: AtomicU64,
    reconnects: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    mutations: Mutex<BTreeMap<String, u64>>,
    close_reasons: Mutex<BTreeMap<String, u64>>,
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, key: &str) {
    *map.lock().unwrap_or_else(|p| p.into_inner()).entry(key.to_string()).or_default() += 1;
}

fn snapshot(map: &Mutex<BTreeMap<String, u64>>) -> BTreeMap<String, u64> {
    map.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// How one frame was answered.
enum Outcome {
    /// A reply header (success or the server's error), raw.
    Reply(Bytes),
    /// The server reset or stopped the stream, or the connection went.
    Refused,
    Unanswered,
    Abandoned,
}

#[derive(Serialize, Default)]
struct Answers {
    ok: u64,
    /// Error replies by error code.
    errors: BTreeMap<String, u64>,
    /// Streams the server reset or stopped (or whose connection it closed).
    streams_refused: u64,
    /// No answer within the reply timeout.
    unanswered: u64,
    /// Replies that are not the protocol's (should be none).
    undecodable: u64,
}

#[derive(Serialize, Default)]
struct ProbeReport {
    requests: u64,
    answers: u64,
    failures: u64,
    latency_ms_median: f64,
    latency_ms_p99: f64,
    latency_ms_max: f64,
    first_failures: Vec<String>,
}

#[derive(Serialize, Default)]
struct RssReport {
    start_kib: u64,
    end_kib: u64,
    /// Largest VmRSS sampled during the run.
    max_sampled_kib: u64,
    /// VmHWM at the end: the process's peak since it started.
    peak_kib: u64,
    /// (seconds into the run, VmRSS KiB), at most 200.
    samples: Vec<(f64, u64)>,
}

#[derive(Serialize, Default)]
struct FuzzReport {
    target: String,
    /// Whether the run passed: see [`FuzzReport::verdict`].
    ok: bool,
    /// Why it did not (empty when it did).
    failures: Vec<String>,
    server_addr: String,
    server_pid: u32,
    cluster: String,
    seed: u64,
    connections: usize,
    depth: usize,
    frames_requested: u64,
    frames_sent: u64,
    seconds: f64,
    frames_per_s: f64,
    frames_valid: u64,
    frames_defused: u64,
    streams_abandoned: u64,
    mutations: BTreeMap<String, u64>,
    answers: Answers,
    connections_closed: u64,
    close_reasons: BTreeMap<String, u64>,
    server_crashes: u64,
    server_exit: Option<String>,
    probe: ProbeReport,
    rss: RssReport,
}

/// Runs `tessera-bench fuzz`.
pub async fn run(a: FuzzArgs) -> Result<()> {
    if a.connections == 0 || a.depth == 0 || a.frames == 0 {
        bail!("--connections, --depth and --frames must be at least 1");
    }
    match &a.cluster {
        Some(dir) => fuzz(&a, dir, None).await,
        None => {
            let dir = std::env::temp_dir().join(format!("tessera-fuzz.{}", std::process::id()));
            let opts = ClusterOptions::plain(2, usize::from(a.target == Target::Ion));
            println!("fuzz: starting a local cluster in {}", dir.display());
            let mut lc = LocalCluster::start(&dir, &opts).await?;
            let pid = lc.pid(a.target.server());
            let res = fuzz(&a, &dir, pid).await;
            lc.stop().await;
            let _ = std::fs::remove_dir_all(&dir);
            res
        }
    }
}

/// The process of the server whose configuration is `config` (its command line names the file).
fn find_pid(config: &Path) -> Option<u32> {
    let want = config.canonicalize().ok()?;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        if cmdline.split(|&b| b == 0).any(|arg| Path::new(&*String::from_utf8_lossy(arg)) == want) {
            return Some(pid);
        }
    }
    None
}

/// (VmRSS, VmHWM) in KiB, or `None` once the process is gone (or a zombie).
fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    if status.lines().any(|l| l.starts_with("State:") && l.contains('Z')) {
        return None;
    }
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn load(dir: &Path, name: &str) -> Result<ClusterConfig> {
    let path = dir.join(format!("{name}.toml"));
    Ok(ClusterConfig::load(&path)?)
}

/// A peer of the target server with the identity of `cfg`.
fn peer(cfg: &ClusterConfig, target: Target, addr: &str, tuning: Tuning) -> Result<RpcPeer> {
    let id = NodeIdentity::load(&cfg.tls).map_err(|e| anyhow!("TLS identity {}: {e}", cfg.tls.cert.display()))?;
    let endpoint = rpc::client_endpoint(false).map_err(|e| anyhow!("{e}"))?;
    Ok(RpcPeer::to_host(endpoint, &id, target.role(), addr, tuning)?)
}

async fn fuzz(a: &FuzzArgs, dir: &Path, pid: Option<u32>) -> Result<()> {
    let admin = load(dir, "admin")?;
    let client = load(dir, "client")?;
    let addr = match a.target {
        Target::Mds => admin.mds0().addr.clone(),
        Target::Ds => admin.ds.first().map(|d| d.addr.clone()).context("the cluster has no data server")?,
        Target::Ion => admin.ion.first().map(|i| i.addr.clone()).context("the cluster has no forwarding node")?,
    };
    let pid = match pid {
        Some(p) => p,
        None => find_pid(&dir.join(format!("{}.toml", a.target.server())))
            .with_context(|| format!("no running {} of {} found", a.target.server(), dir.display()))?,
    };
    let seed = a.seed.unwrap_or_else(fuzz::seed);
    let (rss0, _) = memory(pid).context("the server is not running")?;
    println!(
        "fuzz {} at {addr} (pid {pid}): {} frames over {} connections x {} streams, seed {seed}; probe every {} ms",
        a.target.name(),
        a.frames,
        a.connections,
        a.depth,
        a.probe_ms
    );
    let tuning = Tuning { call_timeout: Duration::from_secs(5), ..admin.tuning() };
    let gen = Arc::new(Generator { target: a.target, data_servers: admin.ds.len().max(1) as u32 });
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();

    let mut workers = tokio::task::JoinSet::new();
    for w in 0..a.connections {
        let conn = Arc::new(Connection {
            peer: peer(&admin, a.target, &addr, tuning)?,
            known: Mutex::new(Known::default()),
            held: Mutex::new(Vec::new()),
            client: 0xf022_0000 + w as u64,
            last: Mutex::new(None),
            stop: stop.clone(),
        });
        for _ in 0..a.depth {
            let (conn, gen, counts, stop, next) =
                (conn.clone(), gen.clone(), counts.clone(), stop.clone(), next.clone());
            let frames = a.frames;
            workers.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= frames || stop.load(Ordering::Relaxed) {
                        return;
                    }
                    conn.one(&gen, &counts, seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).await;
                }
            });
        }
    }
    let probe = tokio::spawn(probe_loop(peer(&client, a.target, &addr, tuning)?, a.target, a.probe_ms, stop.clone()));
    let sampler = tokio::spawn(sample_loop(pid, t0, stop.clone(), counts.clone(), a.frames, a.target));
    while workers.join_next().await.is_some() {}
    stop.store(true, Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let (samples, exit) = sampler.await.context("the memory sampler failed")?;
    let probe = probe.await.context("the probe failed")?;
    let end = memory(pid);
    let sent = counts.sent.load(Ordering::Relaxed);
    let max_sampled = samples.iter().map(|s| s.1).max().unwrap_or(rss0);
    let step = samples.len().div_ceil(200).max(1);
    let mut report = FuzzReport {
        target: a.target.name().into(),
        ok: false,
        failures: Vec::new(),
        server_addr: addr,
        server_pid: pid,
        cluster: if a.cluster.is_some() { dir.display().to_string() } else { "started for the run".into() },
        seed,
        connections: a.connections,
        depth: a.depth,
        frames_requested: a.frames,
        frames_sent: sent,
        seconds,
        frames_per_s: sent as f64 / seconds,
        frames_valid: counts.valid.load(Ordering::Relaxed),
        frames_defused: counts.defused.load(Ordering::Relaxed),
        streams_abandoned: counts.abandoned.load(Ordering::Relaxed),
        mutations: snapshot(&counts.mutations),
        answers: Answers {
            ok: counts.answered_ok.load(Ordering::Relaxed),
            errors: snapshot(&counts.errors),
            streams_refused: counts.refused.load(Ordering::Relaxed),
            unanswered: counts.unanswered.load(Ordering::Relaxed),
            undecodable: counts.undecodable.load(Ordering::Relaxed),
        },
        connections_closed: counts.reconnects.load(Ordering::Relaxed),
        close_reasons: snapshot(&counts.close_reasons),
        server_crashes: u64::from(exit.is_some() || end.is_none()),
        server_exit: exit,
        probe,
        rss: RssReport {
            start_kib: rss0,
            end_kib: end.map_or(0, |m| m.0),
            max_sampled_kib: max_sampled,
            peak_kib: end.map_or(max_sampled, |m| m.1),
            samples: samples.iter().step_by(step).copied().collect(),
        },
    };
    report.failures = report.verdict();
    report.ok = report.failures.is_empty();
    print_report(&report);
    if let Some(path) = &a.json {
        write_json(path, &report)?;
    }
    if !report.ok {
        bail!("fuzz {} failed: {}", report.target, report.failures.join("; "));
    }
    Ok(())
}

impl FuzzReport {
    /// Why the run failed, if it did: the server exited, a reply was not the protocol's, or a request of
    /// the well-behaved client failed (it was not answered, or answered with an error).
    fn verdict(&self) -> Vec<String> {
        let mut why = Vec::new();
        if self.server_crashes > 0 {
            let exit = self.server_exit.as_deref().unwrap_or("gone at the end of the run");
            why.push(format!("the server exited ({exit})"));
        }
        if self.answers.undecodable > 0 {
            why.push(format!("{} replies were not the protocol's", self.answers.undecodable));
        }
        let p = &self.probe;
        if p.failures > 0 || p.answers < p.requests {
            let first = p.first_failures.first().map(|f| format!(", the first: {f}")).unwrap_or_default();
            why.push(format!(
                "the well-behaved client got {} answers to {} requests ({} failed{first})",
                p.answers, p.requests, p.failures
            ));
        }
        why
    }
}

fn print_report(r: &FuzzReport) {
    let errors: u64 = r.answers.errors.values().sum();
    println!("fuzz {} done: {} frames in {:.1} s, {:.0} frames/s", r.target, r.frames_sent, r.seconds, r.frames_per_s);
    println!(
        "  frames: {} valid, {} mutated, {} defused, {} streams abandoned",
        r.frames_valid,
        r.frames_sent - r.frames_valid,
        r.frames_defused,
        r.streams_abandoned
    );
    println!(
        "  answers: {} ok, {errors} errors, {} streams refused, {} unanswered, {} undecodable replies",
        r.answers.ok, r.answers.streams_refused, r.answers.unanswered, r.answers.undecodable
    );
    println!("  errors by code: {:?}", r.answers.errors);
    println!("  connections the server closed: {} {:?}", r.connections_closed, r.close_reasons);
    println!(
        "  server crashes: {}{}",
        r.server_crashes,
        r.server_exit.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
    );
    println!(
        "  well-behaved client: {} requests, {} answered, {} failed; latency median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        r.probe.requests,
        r.probe.answers,
        r.probe.failures,
        r.probe.latency_ms_median,
        r.probe.latency_ms_p99,
        r.probe.latency_ms_max
    );
    println!(
        "  server memory: VmRSS {} MiB at start, {} MiB at end, {} MiB at most sampled; VmHWM {} MiB",
        r.rss.start_kib >> 10,
        r.rss.end_kib >> 10,
        r.rss.max_sampled_kib >> 10,
        r.rss.peak_kib >> 10
    );
    for f in &r.probe.first_failures {
        println!("  well-behaved client's failure: {f}");
    }
    if r.ok {
        println!("  verdict: ok");
    } else {
        println!("  verdict: FAILED: {}", r.failures.join("; "));
    }
}

/// Makes the target's requests.
struct Generator {
    target: Target,
    data_servers: u32,
}

impl Generator {
    /// One encoded frame (prefix, header, payload) of a plausible or arbitrary request.
    fn frame(&self, rng: &mut Rng, known: &Known, client: u64) -> Vec<u8> {
        let mds = |rng: &mut Rng| MdsCall {
            caller: fuzz::caller(rng),
            origin: fuzz::origin(rng, client),
            req: fuzz::mds_request(rng, known),
            seq: 0,
        };
        let (head, payload) = match self.target {
            Target::Mds => (frame::encode_head(&mds(rng), 0), Vec::new()),
            Target::Ds => {
                let (call, payload) = fuzz::ds_call(rng, 0, known);
                (frame::encode_head(&call, payload.len()), payload)
            }
            Target::Ion => {
                let (call, payload) = match rng.below(10) {
                    0..=3 => (IonCall::Mds(mds(rng)), Vec::new()),
                    4..=8 => {
                        let ds = rng.below(u64::from(self.data_servers)) as u32;
                        let (call, payload) = fuzz::ds_call(rng, ds, known);
                        let app_len = rng.usually(payload.len() as u64);
                        (IonCall::Ds { call, app_len }, payload)
                    }
                    _ => (scheduler_call(rng), Vec::new()),
                };
                (frame::encode_head(&call, payload.len()), payload)
            }
        };
        let mut f = head.unwrap_or_default();
        f.extend_from_slice(&payload);
        f
    }

    /// Whether the header these bytes carry (as the server would read it) asks a data server to reserve
    /// more than [`fuzz::FALLOCATE_CAP`]: a mutation may make one of any request.
    fn reserves_space(&self, bytes: &[u8]) -> bool {
        let Some(p) = bytes.get(..frame::PREFIX) else { return false };
        let Ok((hlen, _)) = frame::parse_prefix(p.try_into().unwrap_or(&[0; frame::PREFIX]), MAX_PAYLOAD) else {
            return false;
        };
        let Some(h) = bytes.get(frame::PREFIX..frame::PREFIX + hlen) else { return false };
        match self.target {
            Target::Mds => false,
            Target::Ds => wire::decode::<DsCall>(h).is_ok_and(|mut c| fuzz::defuse(&mut c.req)),
            Target::Ion => wire::decode::<IonCall>(h).is_ok_and(|mut c| fuzz::defuse_ion(&mut c)),
        }
    }
}

/// A forwarding node's scheduler switch with plausible or absurd settings.
fn scheduler_call(rng: &mut Rng) -> IonCall {
    if rng.percent(50) {
        return IonCall::Status;
    }
    const NAMES: [&str; 9] = ["fifo", "hbrr", "to", "to-agg", "sjf", "mlf", "sw", "twins", "bogus"];
    let setting = SchedulerSetting {
        name: NAMES[rng.index(NAMES.len())].into(),
        window_us: rng.percent(50).then(|| rng.usually(1000)),
        quantum: rng.percent(50).then(|| rng.usually32(8)),
    };
    IonCall::SetScheduler { caller: fuzz::caller(rng), setting }
}

/// One fuzzing connection, shared by `--depth` streams.
struct Connection {
    peer: RpcPeer,
    known: Mutex<Known>,
    /// Streams left open half-sent.
    held: Mutex<Vec<(quinn::SendStream, quinn::RecvStream)>>,
    client: u64,
    /// The connection last used (to notice the server closed it).
    last: Mutex<Option<quinn::Connection>>,
    /// Set when the run ends early (the server exited): no more reconnecting.
    stop: Arc<AtomicBool>,
}

impl Connection {
    /// The live connection; counts the ones the server (or the transport) closed since the last call.
    async fn conn(&self, counts: &Counts) -> Option<quinn::Connection> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            match self.peer.connection().await {
                Ok(c) => {
                    let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(old) = last.as_ref().filter(|old| old.stable_id() != c.stable_id()) {
                        counts.reconnects.fetch_add(1, Ordering::Relaxed);
                        let reason = old.close_reason().map(|r| r.to_string()).unwrap_or_else(|| "open".into());
                        bump(&counts.close_reasons, &reason);
                    }
                    *last = Some(c.clone());
                    return Some(c);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Generates, mutates, sends and reads the answer of frame number `seed`.
    async fn one(&self, gen: &Generator, counts: &Counts, seed: u64) {
        let mut rng = Rng::new(seed);
        let (valid, other) = {
            let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            (gen.frame(&mut rng, &known, self.client), gen.frame(&mut rng, &known, self.client))
        };
        let mutation = (!rng.percent(VALID_PERCENT)).then(|| Mutation::ALL[rng.index(Mutation::ALL.len())]);
        let mut bytes = match mutation {
            Some(m) => fuzz::mutate(&mut rng, m, &valid, &other),
            None => valid.clone(),
        };
        if mutation.is_some() && gen.reserves_space(&bytes) {
            counts.defused.fetch_add(1, Ordering::Relaxed);
            bytes = valid;
        }
        let abandon = match rng.below(100) {
            0 => Abandon::Reset,
            1 => Abandon::Hold,
            _ => Abandon::No,
        };
        let Some(conn) = self.conn(counts).await else { return };
        counts.sent.fetch_add(1, Ordering::Relaxed);
        match mutation {
            Some(m) => bump(&counts.mutations, m.name()),
            None => {
                counts.valid.fetch_add(1, Ordering::Relaxed);
            }
        }
        match self.exchange(&conn, &bytes, abandon, &mut rng).await {
            Outcome::Reply(h) => self.answered(gen.target, &h, counts, &mut rng),
            Outcome::Refused => {
                counts.refused.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Unanswered => {
                counts.unanswered.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Abandoned => {
                counts.abandoned.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    async fn exchange(&self, conn: &quinn::Connection, bytes: &[u8], abandon: Abandon, rng: &mut Rng) -> Outcome {
        let Ok((mut send, mut recv)) = conn.open_bi().await else { return Outcome::Refused };
        let part = match abandon {
            Abandon::No => bytes.len(),
            _ => rng.index(bytes.len().max(1)),
        };
        if send.write_all(&bytes[..part]).await.is_err() {
            return Outcome::Refused;
        }
        match abandon {
            Abandon::Reset => {
                let _ = send.reset(0u32.into());
                return Outcome::Abandoned;
            }
            Abandon::Hold => {
                let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                if held.len() >= HELD_STREAMS {
                    held.remove(0);
                }
                held.push((send, recv));
                return Outcome::Abandoned;
            }
            Abandon::No => {}
        }
        let _ = send.finish();
        let read = async {
            let (header, len) = frame::read_head(&mut recv, MAX_PAYLOAD).await?;
            frame::read_payload_chunked(&mut recv, len).await?;
            Ok::<Bytes, frame::FrameError>(header)
        };
        match tokio::time::timeout(REPLY_TIMEOUT, read).await {
            Ok(Ok(header)) => Outcome::Reply(header),
            Ok(Err(_)) => Outcome::Refused,
            Err(_) => Outcome::Unanswered,
        }
    }

    /// Counts a reply by its code and learns what it names.
    fn answered(&self, target: Target, header: &[u8], counts: &Counts, rng: &mut Rng) {
        let result: Option<Result<Option<MdsReply>, tessera_proto::error::ErrorCode>> = match target {
            Target::Mds => wire::decode::<FsResult<MdsReply>>(header).ok().map(|r| r.map(Some).map_err(code)),
            Target::Ds => wire::decode::<FsResult<DsReply>>(header).ok().map(|r| r.map(|_| None).map_err(code)),
            Target::Ion => wire::decode::<FsResult<IonReply>>(header).ok().map(|r| {
                r.map(|r| match r {
                    IonReply::Mds(m) => Some(m),
                    _ => None,
                })
                .map_err(code)
            }),
        };
        match result {
            None => {
                counts.undecodable.fetch_add(1, Ordering::Relaxed);
            }
            Some(Err(code)) => bump(&counts.errors, &format!("{code:?}")),
            Some(Ok(reply)) => {
                counts.answered_ok.fetch_add(1, Ordering::Relaxed);
                if let Some(r) = reply {
                    self.known.lock().unwrap_or_else(|p| p.into_inner()).learn_mds(rng, &r);
                }
            }
        }
    }
}

fn code(e: tessera_proto::FsError) -> tessera_proto::error::ErrorCode {
    e.code
}

#[derive(Clone, Copy)]
enum Abandon {
    No,
    /// Part of the frame sent, then the stream reset.
    Reset,
    /// Part of the frame sent, the stream left open.
    Hold,
}

/// Sequence number of the object the well-behaved client reads (one no file has: reading it answers no
/// bytes, but takes the data server's whole read path, its device queue included).
const PROBE_OBJECT_SEQ: u64 = 0x9b0b_0000_0001;

/// One request of the well-behaved client.
#[derive(Debug)]
enum ProbeCall {
    Mds(MdsCall),
    Ds(DsCall),
    Ion(IonCall),
}

/// The well-behaved client's request number `turn` (from 1): a ping on odd turns, a real request on even
/// ones. Each is one every server of the kind must answer: the data server's read names an object in
/// target 0, which every data server has (a single-target server has only that one), by proto's own
/// object id constructor.
fn probe_call(target: Target, turn: u64) -> ProbeCall {
    let origin = Origin { job: "probe".into(), client: 0x9b0b, pid: 1 };
    let real = turn % 2 == 0;
    let mds = |req| MdsCall { caller: Caller::root(), origin: origin.clone(), req, seq: 0 };
    match target {
        Target::Mds => ProbeCall::Mds(mds(if real { MdsRequest::StatFs } else { MdsRequest::Ping })),
        Target::Ds => {
            let req = if real {
                let tag = tessera_proto::IoTag { origin: origin.clone(), ino: 1 };
                DsRequest::Read { tag, object: tessera_proto::object_in(0, PROBE_OBJECT_SEQ), offset: 0, len: 4096 }
            } else {
                DsRequest::Ping
            };
            ProbeCall::Ds(DsCall::new(0, req))
        }
        Target::Ion => ProbeCall::Ion(if real { IonCall::Status } else { IonCall::Mds(mds(MdsRequest::Ping)) }),
    }
}

/// The well-behaved client: a small request every `every_ms` (see [`probe_call`]), at least one of each
/// kind however short the run.
async fn probe_loop(peer: RpcPeer, target: Target, every_ms: u64, stop: Arc<AtomicBool>) -> ProbeReport {
    let mut lat = Vec::new();
    let mut failures = Vec::new();
    let mut requests = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(every_ms.max(1)));
    while requests < 2 || !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        requests += 1;
        let t = Instant::now();
        let r: Result<(), tessera_proto::FsError> = match probe_call(target, requests) {
            ProbeCall::Mds(call) => peer.call::<_, MdsReply>(&call, Bytes::new()).await.map(drop),
            ProbeCall::Ds(call) => peer.call::<_, DsReply>(&call, Bytes::new()).await.map(drop),
            ProbeCall::Ion(call) => peer.call::<_, IonReply>(&call, Bytes::new()).await.map(drop),
        };
        match r {
            Ok(()) => lat.push(t.elapsed().as_secs_f64() * 1e3),
            Err(e) => failures.push(format!("{:.1} s into the probe: {e}", requests as f64 * every_ms as f64 / 1e3)),
        }
    }
    lat.sort_by(f64::total_cmp);
    let p99 = lat.get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1))).copied().unwrap_or(0.0);
    ProbeReport {
        requests,
        answers: lat.len() as u64,
        failures: failures.len() as u64,
        latency_ms_median: median(&lat),
        latency_ms_p99: p99,
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        first_failures: failures.into_iter().take(10).collect(),
    }
}

/// Samples the server's VmRSS every 250 ms and prints progress every 10 s; stops the run when the
/// server exits. Returns the samples and the exit, if any.
async fn sample_loop(
    pid: u32,
    t0: Instant,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
    frames: u64,
    target: Target,
) -> (Vec<(f64, u64)>, Option<String>) {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last_print = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let at = t0.elapsed().as_secs_f64();
        let Some((rss, hwm)) = memory(pid) else {
            stop.store(true, Ordering::Relaxed);
            return (samples, Some(format!("pid {pid} exited {at:.1} s into the run")));
        };
        samples.push((at, rss));
        if last_print.elapsed() >= Duration::from_secs(10) {
            last_print = Instant::now();
            let sent = counts.sent.load(Ordering::Relaxed);
            println!(
                "fuzz {}: {sent}/{frames} frames ({:.0}%), {:.0} frames/s, {} ok, {} refused, {} unanswered, {} reconnects; RSS {} MiB (peak {} MiB)",
                target.name(),
                sent as f64 * 100.0 / frames as f64,
                sent as f64 / at,
                counts.answered_ok.load(Ordering::Relaxed),
                counts.refused.load(Ordering::Relaxed),
                counts.unanswered.load(Ordering::Relaxed),
                counts.reconnects.load(Ordering::Relaxed),
                rss >> 10,
                hwm >> 10
            );
        }
    }
    (samples, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_of_this_process_and_of_none() {
        let (rss, hwm) = memory(std::process::id()).unwrap();
        assert!(rss > 0 && hwm >= rss);
        assert!(memory(u32::MAX).is_none());
    }

    #[test]
    fn mutated_fallocates_are_caught_before_they_are_sent() {
        let gen = Generator { target: Target::Ds, data_servers: 1 };
        let tag = tessera_proto::IoTag::default();
        let req = DsRequest::Fallocate { tag, object: 1, offset: 0, len: 1 << 40, punch: false };
        let f = frame::encode_head(&DsCall::new(0, req), 0).unwrap();
        assert!(gen.reserves_space(&f));
        let mut rng = Rng::new(5);
        let ok = gen.frame(&mut rng, &Known::default(), 1);
        assert!(!gen.reserves_space(&ok[..ok.len().min(frame::PREFIX + 3)]));
    }

    /// The well-behaved client's requests to a data server are ones a data server with a single target
    /// (the data directory, as `tessera up` and the fuzzer's own cluster make them) serves: the object is
    /// in target 0, the tag's origin passes the server's check, the read fits a frame. (Its object id
    /// used to be 0x9b0b000000000001, in target 39691, refused with `Invalid` every other request.)
    #[test]
    fn probe_requests_are_valid_for_a_one_target_data_server() {
        let targets = 1usize;
        let mut reads = 0;
        for turn in 1..=6 {
            let ProbeCall::Ds(call) = probe_call(Target::Ds, turn) else { panic!("turn {turn}: not a DS call") };
            assert_eq!((call.ds, call.via.is_none()), (0, true), "turn {turn}");
            match &call.req {
                DsRequest::Ping => {}
                DsRequest::Read { tag, object, offset, len } => {
                    reads += 1;
                    let t = tessera_proto::target_of(*object);
                    assert!(usize::from(t) < targets, "object {object:#x} is in target {t}");
                    tag.origin.check().unwrap();
                    assert!(*len as usize <= MAX_PAYLOAD && offset.checked_add(u64::from(*len)).is_some());
                }
                other => panic!("turn {turn}: the probe sends only pings and reads, not {other:?}"),
            }
            frame::encode_head(&call, 0).unwrap();
        }
        assert_eq!(reads, 3, "every other request is a real one");
        for target in [Target::Mds, Target::Ion] {
            for turn in 1..=2 {
                match probe_call(target, turn) {
                    ProbeCall::Mds(c) => c.origin.check().unwrap(),
                    ProbeCall::Ion(IonCall::Mds(c)) => c.origin.check().unwrap(),
                    ProbeCall::Ion(IonCall::Status) => {}
                    other => panic!("{target:?} turn {turn}: {other:?}"),
                }
            }
        }
    }

    /// A run passes only if the server stayed up, every reply was the protocol's and every one of the
    /// well-behaved client's requests was answered.
    #[test]
    fn a_failed_probe_fails_the_run() {
        let answered = ProbeReport { requests: 211, answers: 211, ..Default::default() };
        let good = FuzzReport { probe: answered, ..Default::default() };
        assert_eq!(good.verdict(), Vec::<String>::new());

        // Issue 34's run: 106 answers and 105 failures, and it exited 0.
        let first = "0.2 s into the probe: object 0x9b0b000000000001 is in target 39691".to_string();
        let probe = ProbeReport {
            requests: 211,
            answers: 106,
            failures: 105,
            first_failures: vec![first],
            ..Default::default()
        };
        let why = FuzzReport { probe, ..Default::default() }.verdict();
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].contains("106 answers to 211 requests (105 failed") && why[0].contains("target 39691"),
            "{why:?}"
        );

        // Failures not recorded as such (a request left without either) fail it too.
        let probe = ProbeReport { requests: 3, answers: 2, ..Default::default() };
        assert_eq!(FuzzReport { probe, ..Default::default() }.verdict().len(), 1);

        let crashed = FuzzReport {
            server_crashes: 1,
            server_exit: Some("pid 7 exited 3.0 s into the run".into()),
            answers: Answers { undecodable: 2, ..Default::default() },
            ..Default::default()
        };
        let why = crashed.verdict();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("pid 7 exited") && why[1].contains("2 replies"), "{why:?}");
    }
}
