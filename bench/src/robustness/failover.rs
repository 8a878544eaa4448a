//! `tessera-bench failover`: metadata failover under load (issue 37). A local cluster with `--replicas`
//! metadata replicas runs mdtest iterations (each task creates, stats and checks, reads and removes its
//! files: a lost create fails the stat, a create or unlink applied twice by a resend fails with
//! EEXIST/ENOENT) through the library or a FUSE mount, and a probe that creates and removes a directory
//! every 50 ms, while the leading replica is killed (SIGKILL, restarted after `--down-s`) or paused
//! (SIGSTOP; SIGCONT once another serves: it must then refuse a write sent to it directly, and end by
//! itself, deposed) `--kills` times. Measured per kill: the time until another replica serves
//! (`election_s`) and the probe's longest gap around it (`gap_s`, the time without service a user sees).
//! At the end: the workload's errors (there must be none), fsck's findings (none), the probe's
//! directories all removed, and a plot of the probe's latency over time with the kills marked.
//!
//! Soft state across failover: before each kill a holder client writes a file, keeps it open and
//! unlinks it. Each new leader keeps such files for its grace period (`--eviction-timeout-s`), in which
//! the holder reasserts its handles; at the end every one must still read back intact (opened by inode
//! from another client) and be gone once the holder closes it.

use crate::backend::{Backend, ClusterArgs, PosixBackend, TesseraBackend};
use crate::ior::Api;
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::mdtest::{self, MdtestArgs};
use crate::report::{median, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_client::proto::msg::{MdsCall, MdsReply, MdsRequest};
use tessera_client::{Client, ClusterConfig};

#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    /// Leader kills (or pauses) to survive.
    #[arg(long, default_value_t = 5)]
    pub kills: usize,
    /// Metadata replicas.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Pause the leader (SIGSTOP, then SIGCONT once another serves) instead of killing it.
    #[arg(long)]
    pub pause: bool,
    /// Data servers.
    #[arg(long, default_value_t = 2)]
    pub ds: usize,
    /// mdtest tasks.
    #[arg(long, default_value_t = 4)]
    pub tasks: usize,
    /// Files per mdtest iteration (split over the tasks).
    #[arg(long, default_value_t = 2000)]
    pub files: u64,
    /// Bytes mdtest writes into each file it creates (and the stat phase checks): data writes under the
    /// kills too.
    #[arg(long, default_value_t = 0, value_parser = tessera_proto::units::parse_size)]
    pub write_bytes: u64,
    /// Seconds between kills (±25%).
    #[arg(long, default_value_t = 4.0)]
    pub every_s: f64,
    /// Seconds a killed replica stays down before it is started again.
    #[arg(long, default_value_t = 2.0)]
    pub down_s: f64,
    /// Run mdtest through a FUSE mount of the cluster (POSIX calls) instead of the library.
    #[arg(long)]
    pub mount: bool,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Working directory (cluster, logs; default: a temporary one, removed at the end).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The metadata service's eviction timeout, also its grace period after a failover for clients to
    /// reassert their open handles (they do every third of it).
    #[arg(long, default_value_t = 3)]
    pub eviction_timeout_s: u64,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Plot the probe's latency over time, kills marked (PNG).
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

#[derive(Serialize, Clone, Debug)]
struct Kill {
    /// Seconds from the start.
    at_s: f64,
    victim: String,
    /// `kill` or `pause`.
    kind: &'static str,
    /// Until another replica served.
    election_s: f64,
    /// The probe's longest gap between two successes around the kill.
    gap_s: f64,
    new_leader: String,
    /// Paused only: whether the old leader took a write sent to it after SIGCONT (must be false).
    stale_write_accepted: Option<bool>,
    /// Paused only: seconds after SIGCONT until it ended by itself (deposed).
    deposed_exit_s: Option<f64>,
}

#[derive(Serialize, Default)]
struct Results {
    replicas: usize,
    api: String,
    write_bytes: u64,
    kills: Vec<Kill>,
    election_s_median: f64,
    election_s_max: f64,
    gap_s_median: f64,
    gap_s_max: f64,
    mdtest_iterations: usize,
    mdtest_errors: Vec<String>,
    create_ops_s_median: f64,
    probe_ops: usize,
    probe_errors: usize,
    /// Probe directories left after the run whose removal was acknowledged (must be 0).
    probe_left: usize,
    stale_writes_accepted: usize,
    /// Replicas that ended without being killed (a leader deposed by an election; restarted).
    unexpected_exits: usize,
    /// Files held open and unlinked before a kill (one per kill).
    held_files: usize,
    /// Of those, the ones that did not read back intact at the end (must be 0: the new leaders kept them).
    held_files_lost: usize,
    /// Of those, the ones still there after the holder closed them (must be 0).
    held_files_leaked: usize,
    fsck_findings: u64,
    elapsed_s: f64,
    seed: u64,
}

/// Bytes of each held file.
const HELD_BYTES: usize = 64 << 10;

/// Held file `k`'s content.
fn held_content(k: usize) -> Vec<u8> {
    let mut b = vec![0u8; HELD_BYTES];
    crate::ior::fill_pattern(&mut b, 0, k);
    b
}

/// Writes `/held/fK`, makes it durable, unlinks it and keeps it open: its inode and open file.
async fn hold_unlinked(c: &Client, k: usize) -> Result<(u64, tessera_client::File)> {
    let path = format!("/held/f{k}");
    let f = c.create(&path, 0o644, None).await.map_err(|e| anyhow!("create {path}: {e}"))?;
    f.write_at(0, held_content(k).into()).await.map_err(|e| anyhow!("write {path}: {e}"))?;
    f.fsync().await.map_err(|e| anyhow!("fsync {path}: {e}"))?;
    let ino = c.stat(&path).await.map_err(|e| anyhow!("stat {path}: {e}"))?.ino;
    c.unlink(&path).await.map_err(|e| anyhow!("unlink {path}: {e}"))?;
    Ok((ino, f))
}

/// Held file `k` (inode `ino`) reads back intact through another client.
async fn check_held(c: &Client, ino: u64, k: usize) -> Result<()> {
    let f = c.open_ino(ino, tessera_client::OpenOptions::read_only()).await.map_err(|e| anyhow!("open: {e}"))?;
    let got = f.read_at(0, HELD_BYTES as u64).await.map_err(|e| anyhow!("read: {e}"));
    f.close().await.map_err(|e| anyhow!("close: {e}"))?;
    if got?.as_ref() != held_content(k).as_slice() {
        bail!("content differs");
    }
    Ok(())
}

/// A replica other than `not` that serves (leads and is caught up), by name, asking each one.
async fn serving(admin: &Client, names: &[String], not: Option<&str>) -> Option<String> {
    let asks = (0..names.len())
        .filter(|&i| Some(names[i].as_str()) != not)
        .map(|i| async move { (i, admin.mds().replica_status(i, Duration::from_millis(500)).await.1) });
    let all = futures::future::join_all(asks).await;
    all.into_iter().find(|(_, r)| r.as_ref().is_ok_and(|s| s.serving)).map(|(i, _)| names[i].clone())
}

/// Waits (up to a minute) for a replica other than `not` to serve.
/// Meanwhile a replica that ended by itself (a leader deposed by an election it did not expect) is
/// started again at once, as a supervisor (`tessera up`, systemd, Docker) would, and counted in
/// `unexpected`; `not` (the one killed on purpose) stays down.
async fn wait_serving(
    lc: &mut LocalCluster,
    admin: &Client,
    names: &[String],
    not: Option<&str>,
    unexpected: &mut usize,
) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for (name, status) in lc.procs.exited() {
            if Some(name.as_str()) != not {
                println!("  {name} ended by itself ({status}); starting it again");
                *unexpected += 1;
                lc.restart(&name).await?;
            }
        }
        if let Some(n) = serving(admin, names, not).await {
            return Ok(n);
        }
        if Instant::now() > deadline {
            bail!("no replica (other than {not:?}) serves a minute on");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a create straight to replica `addr` (not through leader discovery): whether it was applied.
async fn write_directly(cfg: &ClusterConfig, addr: &str, name: &str) -> Result<bool> {
    let id = tessera_proto::tls::NodeIdentity::load(&cfg.tls).map_err(|e| anyhow!("{e}"))?;
    let endpoint = tessera_proto::rpc::client_endpoint(false)?;
    let peer = tessera_proto::rpc::RpcPeer::to_host(endpoint, &id, tessera_proto::Role::Mds, addr, cfg.tuning())?;
    let call = MdsCall {
        caller: tessera_proto::Caller::root(),
        origin: tessera_proto::Origin { job: "failover".into(), client: rand::random::<u64>() | 1, pid: 1 },
        req: MdsRequest::Mkdir { parent: 1, name: name.into(), perm: 0o755, umask: 0 },
        seq: 0,
    };
    let r = tokio::time::timeout(Duration::from_secs(10), call.send(&peer)).await;
    Ok(matches!(r, Ok(Ok(MdsReply::Entry { .. }))))
}

/// The probe: a directory created and removed every 50 ms until `stop`; (seconds, latency ms, ok) per op.
async fn probe(c: Client, start: Instant, stop: Arc<AtomicBool>, log: Arc<Mutex<Vec<(f64, f64, bool)>>>) -> Result<()> {
    c.mkdir_all("/probe", 0o755).await.map_err(|e| anyhow!("mkdir /probe: {e}"))?;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let p = format!("/probe/d{n}");
        let t0 = Instant::now();
        let ok = c.mkdir(&p, 0o755).await.is_ok() && c.rmdir(&p).await.is_ok();
        log.lock().unwrap_or_else(|e| e.into_inner()).push((
            t0.duration_since(start).as_secs_f64(),
            t0.elapsed().as_secs_f64() * 1e3,
            ok,
        ));
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// mdtest iterations until `stop`: (iterations, create rates, errors).
async fn workload<B: Backend>(
    a: MdtestArgs,
    backends: Vec<Arc<B>>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<f64>, Vec<String>) {
    let (mut n, mut rates, mut errors) = (0, Vec::new(), Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let it = MdtestArgs { dir: format!("{}/it{n}", a.dir), ..a.clone() };
        match mdtest::iteration(&it, &backends).await {
            Ok(j) => rates.push(j.create_ops_s),
            Err(e) => errors.push(format!("iteration {n}: {e:#}")),
        }
        n += 1;
    }
    (n, rates, errors)
}

/// A FUSE mount of the cluster, unmounted when dropped.
struct Mounted {
    child: tessera_ops::child::Child,
    path: PathBuf,
}

impl Mounted {
    fn new(cfg: &Path, path: &Path, log: &Path) -> Result<Mounted> {
        std::fs::create_dir_all(path)?;
        let bin = tessera_ops::child::server_binary("tessera-fuse")?;
        let mut cmd = std::process::Command::new(bin);
        cmd.arg(path).arg("--config").arg(cfg);
        let mut child =
            tessera_ops::child::spawn("tessera-fuse", tessera_ops::child::die_with_parent(&mut cmd), Some(log))?;
        child.wait_ready(Duration::from_secs(30)).context("waiting for the mount")?;
        Ok(Mounted { child, path: path.to_path_buf() })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.child.stop(Duration::from_secs(10));
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

pub async fn run(a: FailoverArgs) -> Result<()> {
    if a.replicas < 3 && a.kills > 0 {
        bail!("a majority must survive a replica's loss: --replicas 3 or more");
    }
    let seed = a.seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp = tempfile::tempdir()?;
    let dir = a.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let mut o = ClusterOptions::plain(a.ds, 0);
    o.n_mds = a.replicas;
    let eviction_s = a.eviction_timeout_s.max(1);
    let mut lc = LocalCluster::start_edited(&dir.join("cluster"), &o, |c| {
        for m in &mut c.mds {
            m.eviction_timeout_s = eviction_s;
        }
    })
    .await?;
    let names: Vec<String> = lc.files().mds_servers().into_iter().map(|s| s.name).collect();
    let admin = lc.admin().await?;
    let cfg_path = lc.files().client_config.clone();
    let start = Instant::now();
    let mut res = Results { replicas: a.replicas, seed, write_bytes: a.write_bytes, ..Default::default() };
    println!(
        "tessera-bench failover: {} replicas, {} {}s, seed {seed}",
        a.replicas,
        a.kills,
        if a.pause { "pause" } else { "kill" }
    );
    let leader = wait_serving(&mut lc, &admin, &names, None, &mut res.unexpected_exits).await?;
    println!("  {leader} serves");

    let stop = Arc::new(AtomicBool::new(false));
    let md = MdtestArgs {
        api: if a.mount { Api::Posix } else { Api::Tessera },
        files: a.files,
        tasks: a.tasks,
        dir: String::new(),
        write_bytes: a.write_bytes,
        read_bytes: a.write_bytes,
        cluster: ClusterArgs { config: Some(cfg_path.clone()), ..Default::default() },
    };
    let _mount;
    let work = if a.mount {
        let m = Mounted::new(&cfg_path, &dir.join("mnt"), &lc.files().log_path("fuse"))?;
        let md = MdtestArgs { dir: m.path.join("failover").display().to_string(), ..md };
        _mount = Some(m);
        res.api = "posix (FUSE mount)".into();
        let backends: Vec<Arc<PosixBackend>> = (0..a.tasks).map(|_| Arc::new(PosixBackend)).collect();
        tokio::spawn(workload(md, backends, stop.clone()))
    } else {
        _mount = None;
        res.api = "tessera (library)".into();
        let cfg = ClusterConfig::load(&cfg_path)?;
        let mut backends = Vec::new();
        for _ in 0..a.tasks {
            backends.push(Arc::new(TesseraBackend::connect(&cfg, Some("failover")).await?));
        }
        tokio::spawn(workload(MdtestArgs { dir: "/failover".into(), ..md }, backends, stop.clone()))
    };
    let probe_log = Arc::new(Mutex::new(Vec::new()));
    let prober = tokio::spawn(probe(lc.client("probe").await?, start, stop.clone(), probe_log.clone()));
    let holder = lc.client("holder").await?;
    holder.mkdir_all("/held", 0o755).await.map_err(|e| anyhow!("mkdir /held: {e}"))?;
    let mut held = Vec::new();

    for k in 0..a.kills {
        let wait = a.every_s * rng.gen_range(0.75..1.25);
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        if work.is_finished() {
            bail!("the workload ended early");
        }
        held.push(hold_unlinked(&holder, k).await?);
        // (It also starts again a replica that ended by itself.)
        let victim = wait_serving(&mut lc, &admin, &names, None, &mut res.unexpected_exits).await?;
        let addr = lc.client_cfg.mds[names.iter().position(|n| *n == victim).unwrap_or(0)].addr.clone();
        let at = start.elapsed().as_secs_f64();
        if a.pause {
            lc.procs.child(&victim)?.signal(libc::SIGSTOP);
        } else {
            lc.kill9(&victim)?;
        }
        let new_leader = wait_serving(&mut lc, &admin, &names, Some(&victim), &mut res.unexpected_exits).await?;
        let election_s = start.elapsed().as_secs_f64() - at;
        let (mut stale, mut deposed) = (None, None);
        if a.pause {
            lc.procs.child(&victim)?.signal(libc::SIGCONT);
            let cont = Instant::now();
            let took = write_directly(&lc.client_cfg, &addr, &format!("stale-{k}")).await?;
            stale = Some(took);
            // Deposed, it ends by itself; then it is started again (as a supervisor would).
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if lc.procs.exited().iter().any(|(n, _)| *n == victim) {
                    deposed = Some(cont.elapsed().as_secs_f64());
                    break;
                }
                if Instant::now() > deadline {
                    lc.kill9(&victim)?;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_secs_f64(a.down_s)).await;
        }
        lc.restart(&victim).await?;
        println!(
            "  {} {k}: {victim} -> {new_leader} serving after {election_s:.2} s{}",
            if a.pause { "pause" } else { "kill" },
            match (stale, deposed) {
                (Some(s), d) => format!(
                    "; a write to the old leader was {}; it ended {}",
                    if s { "ACCEPTED" } else { "refused" },
                    d.map_or("only when killed".to_string(), |d| format!("{d:.2} s after SIGCONT"))
                ),
                _ => String::new(),
            }
        );
        res.kills.push(Kill {
            at_s: at,
            victim,
            kind: if a.pause { "pause" } else { "kill" },
            election_s,
            gap_s: 0.0,
            new_leader,
            stale_write_accepted: stale,
            deposed_exit_s: deposed,
        });
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (iterations, rates, errors) = work.await?;
    prober.await??;
    res.mdtest_iterations = iterations;
    res.mdtest_errors = errors;
    res.create_ops_s_median = median(&rates);

    let log = probe_log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    res.probe_ops = log.len();
    res.probe_errors = log.iter().filter(|p| !p.2).count();
    for kill in &mut res.kills {
        // The last success before the kill and the first after it (an op's end: start + latency).
        let done = |p: &(f64, f64, bool)| p.0 + p.1 / 1e3;
        let before = log.iter().filter(|p| p.2 && done(p) <= kill.at_s).map(done).fold(f64::NAN, f64::max);
        let after = log.iter().filter(|p| p.2 && done(p) > kill.at_s).map(done).fold(f64::NAN, f64::min);
        kill.gap_s = after - before;
    }
    let elections: Vec<f64> = res.kills.iter().map(|k| k.election_s).collect();
    let gaps: Vec<f64> = res.kills.iter().map(|k| k.gap_s).collect();
    res.election_s_median = median(&elections);
    res.election_s_max = elections.iter().copied().fold(0.0, f64::max);
    res.gap_s_median = median(&gaps);
    res.gap_s_max = gaps.iter().copied().fold(0.0, f64::max);
    res.stale_writes_accepted = res.kills.iter().filter(|k| k.stale_write_accepted == Some(true)).count();
    res.probe_left = admin.readdir("/probe").await.map(|v| v.len()).unwrap_or(usize::MAX);
    // The last new leader's grace period over (the holder reasserted within it, or its files are gone).
    tokio::time::sleep(Duration::from_secs(eviction_s + 1)).await;
    let checker = lc.client("checker").await?;
    res.held_files = held.len();
    for (k, (ino, file)) in held.into_iter().enumerate() {
        let read = check_held(&checker, ino, k).await;
        // A file the service dropped fails its close too (ESTALE).
        let closed = file.close().await.map_err(|e| anyhow!("close: {e}"));
        if let Err(e) = read.and(closed) {
            println!("  held file {k} (inode {ino}): {e}");
            res.held_files_lost += 1;
        }
        match checker.mds().getattr(ino).await {
            Err(e) if e.code == tessera_client::proto::error::ErrorCode::NotFound => {}
            other => {
                println!("  held file {k} (inode {ino}) still there after its last close: {other:?}");
                res.held_files_leaked += 1;
            }
        }
    }
    let fsck = admin.mds().fsck(false).await.map_err(|e| anyhow!("fsck: {e}"))?;
    for f in &fsck.findings {
        eprintln!("  fsck: {} {} -> {}", f.kind, f.what, f.action);
    }
    res.fsck_findings = fsck.findings.len() as u64 + fsck.omitted;
    res.elapsed_s = start.elapsed().as_secs_f64();
    drop(_mount);
    lc.stop().await;

    println!(
        "{} kills: election median {:.2} s (max {:.2}); without service median {:.2} s (max {:.2})",
        res.kills.len(),
        res.election_s_median,
        res.election_s_max,
        res.gap_s_median,
        res.gap_s_max
    );
    println!(
        "mdtest: {} iterations, {} errors, create median {:.0}/s; probe: {} ops, {} failed, {} left; fsck findings {}; writes a paused old leader took {}",
        res.mdtest_iterations,
        res.mdtest_errors.len(),
        res.create_ops_s_median,
        res.probe_ops,
        res.probe_errors,
        res.probe_left,
        res.fsck_findings,
        res.stale_writes_accepted
    );
    println!(
        "files held open and unlinked across the kills: {}, lost {}, left after their close {}",
        res.held_files, res.held_files_lost, res.held_files_leaked
    );
    for e in &res.mdtest_errors {
        println!("  mdtest error: {e}");
    }
    if let Some(p) = &a.plot {
        let ops: Vec<(f64, f64, usize)> = log.iter().map(|p| (p.0, p.1, if p.2 { 0 } else { 1 })).collect();
        let mut pts = ops;
        pts.extend(res.kills.iter().map(|k| (k.at_s, 0.0, 2)));
        tessera_plots::figures::scatter_panels(
            p,
            &format!(
                "Metadata failover: {} replicas, {} leader {}s",
                a.replicas,
                res.kills.len(),
                if a.pause { "pause" } else { "kill" }
            ),
            "seconds",
            "probe mkdir+rmdir latency (ms)",
            &["probe ok".into(), "probe failed".into(), "leader killed".into()],
            &[(res.api.clone(), pts)],
        )?;
    }
    if let Some(j) = &a.json {
        write_json(j, &res)?;
    }
    if !res.mdtest_errors.is_empty()
        || res.fsck_findings > 0
        || res.stale_writes_accepted > 0
        || res.probe_left > 0
        || res.held_files_lost > 0
        || res.held_files_leaked > 0
    {
        bail!("failover lost or broke something (see above)");
    }
    Ok(())
}
