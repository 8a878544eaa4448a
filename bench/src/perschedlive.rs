//! PerSched live (specs/periodic.md, paper `gainaru2019-periodic-io-scheduling.txt`, the real-cluster
//! experiment and its Fig. 6): the periodic IOR-like job (`tessera-bench persched job`) and
//! `tessera-bench experiment persched-live`.
//!
//! The job: β tasks of one job id; each instance computes w seconds (a sleep), then the β tasks write vol
//! bytes together (vol/β each, into their own file, overwritten every instance) through the client library,
//! which follows the job's PerSched grant when the job registered. It reports each instance's start and end
//! and the job's measured ρ̃ = n·w / elapsed and dilation ρ/ρ̃.
//!
//! The experiment: a local cluster (emulated hdd data servers) whose bandwidth B is measured first with a
//! short write of all tasks at once; the MDS's `[persched]` platform is set to it (N = Σβ, b = B: a client
//! node here has no bandwidth limit of its own, so `time_io = vol/B`). Several periodic jobs run at once —
//! the paper's mix of I/O shares scaled so a cycle is seconds (`--quick`) or tens of seconds — under
//! `persched` (every job registers its profile, the client library follows the grant) and `none` (no job
//! registers: they share the bandwidth as they come). SysEff/UB and Dilation come from the jobs' own
//! timings, in steady state: ρ̃ of a job counts from the end of its first instance to the end of its last
//! (the first instance's wait for its place in the pattern is start-up, as the paper's jobs start in
//! their pattern); the whole-run values are recorded beside them. Medians over the runs; the runs
//! alternate between the schedulers.
//!
//! The platform of the model is measured first on a fresh cluster: B with all tasks of the mix writing at
//! once, and each job size of the mix alone; b is the smallest job's rate per task (the model's peak
//! min(β b, B) is linear, the cluster's is not); the MDS is configured with 90% of both (what a plan must
//! hold on).
//!
//! The online heuristics of the authors' earlier work run live too: the MDS's arbiter
//! (`[persched] scheduler = "online-syseff" | "online-dilation"`) grants each job a rate at every transfer
//! start and end, with the same greedy rules as the simulator (`mds/src/persched/online.rs`).
//!
//! **decisions**: every job stays registered until all have finished (a job
//! that finished early leaving would make the MDS replan for the others mid-measurement), and each job runs
//! as many instances as fit its share of a common target duration, so the mix stays the same throughout.

use crate::experiment::{write_outputs, ExperimentArgs};
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::plots::{grouped_bars, BarPanel};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_client::{Client, LayoutSpec, OpenOptions};
use tessera_proto::msg::PeriodicProfile;
use tessera_proto::units::format_size;

pub const NAME: &str = "persched-live";
/// Transfer size of the job's writes.
const XFER: u64 = 1 << 20;
const SERVERS: usize = 2;
/// PerSched, the online heuristics (an arbiter in the MDS, `[persched] scheduler`), and no scheduler (no
/// job registers).
const SCHEDULERS: [&str; 4] = ["persched", "online-syseff", "online-dilation", "none"];
/// PERSCHED's K' here: the paper's §4.5 finds K' = 3 within 0.3% of the best SysEff; the default 10 would
/// give periods as long as a whole run (with K' = 10 the quick mix got T = 87 s against a 30 s run, so a
/// job's place in the first period decided its ρ̃).
const K_PRIME: f64 = 3.0;

/// One periodic job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub job: String,
    /// β: tasks (nodes) of the job.
    pub tasks: u32,
    /// w, seconds.
    pub compute_s: f64,
    /// vol, bytes per instance (all tasks together).
    pub volume: u64,
    pub instances: u32,
}

/// One instance's start (compute begins) and end (its write finished), seconds from the job's start.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub start_s: f64,
    pub end_s: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobOutcome {
    pub spec: JobSpec,
    pub registered: bool,
    pub instances: Vec<Instance>,
    pub elapsed_s: f64,
    /// ρ̃ in steady state: `(n−1)·w` over the time from the end of the first instance to the end of the
    /// last (the first instance's wait for its place in the pattern, or its start-up, left out); with one
    /// instance, the whole run's.
    pub measured_rho: f64,
    /// n·w / elapsed, the whole run.
    pub whole_run_rho: f64,
}

/// The platform's bandwidths of the model, bytes/s: b of one node (here: one task) and B of the file system.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bw {
    pub node: f64,
    pub total: f64,
}

impl Bw {
    /// What a job of `tasks` nodes transfers at alone: `min(β b, B)`.
    pub fn peak(&self, tasks: u32) -> f64 {
        (f64::from(tasks) * self.node).min(self.total)
    }
}

/// `ρ = w / (w + vol / min(β b, B))` of the model.
pub fn rho(w: f64, vol: u64, tasks: u32, bw: Bw) -> f64 {
    w / (w + vol as f64 / bw.peak(tasks))
}

/// The bytes task `t` of `tasks` writes per instance: vol split as evenly as possible.
pub fn task_share(vol: u64, tasks: u32, t: u32) -> u64 {
    let n = u64::from(tasks.max(1));
    vol / n + u64::from(u64::from(t) < vol % n)
}

/// Runs the job on `client` (which carries the job id); `register`: declare the profile to PerSched first.
/// Does not leave the pattern (the caller does, see the module's decisions). `start`: a common instant
/// the job waits for after registering, so jobs of an experiment start together.
pub async fn run_job(
    client: &Client,
    spec: &JobSpec,
    dir: &str,
    register: bool,
    start: Option<tokio::time::Instant>,
    verbose: bool,
) -> Result<JobOutcome> {
    if spec.tasks == 0 || spec.instances == 0 || spec.volume < u64::from(spec.tasks) {
        bail!("{}: needs at least one task, one instance and a byte per task", spec.job);
    }
    if !(spec.compute_s.is_finite() && spec.compute_s >= 0.0) {
        bail!("{}: compute must be a non-negative number of seconds", spec.job);
    }
    client.mkdir_all(dir, 0o755).await.map_err(|e| anyhow!("{dir}: {e}"))?;
    if register {
        let profile = PeriodicProfile {
            nodes: spec.tasks,
            compute_ms: (spec.compute_s * 1e3).round() as u64,
            volume: spec.volume,
        };
        client.periodic_register(profile).await.map_err(|e| anyhow!("{}: periodic register: {e}", spec.job))?;
    }
    let mut files = Vec::new();
    for t in 0..spec.tasks {
        let path = format!("{dir}/{}.{t:04}", spec.job);
        let spec_l = LayoutSpec { stripe_size: None, stripe_count: None };
        let f = match client.create(&path, 0o644, Some(spec_l)).await {
            Ok(f) => f,
            Err(_) => client.open(&path, OpenOptions::read_write()).await.map_err(|e| anyhow!("{path}: {e}"))?,
        };
        files.push(Arc::new(f));
    }
    let data = crate::tarazu::pattern(XFER as usize, 7);
    if let Some(at) = start {
        tokio::time::sleep_until(at).await;
    }
    let t0 = Instant::now();
    let mut instances = Vec::new();
    for i in 0..spec.instances {
        let s = t0.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs_f64(spec.compute_s)).await;
        let mut writers = Vec::new();
        for (t, f) in files.iter().enumerate() {
            let (f, data) = (f.clone(), data.clone());
            let share = task_share(spec.volume, spec.tasks, t as u32);
            writers.push(async move {
                let mut off = 0;
                while off < share {
                    let l = XFER.min(share - off);
                    f.write_at(off, data.slice(..l as usize)).await?;
                    off += l;
                }
                Ok::<(), tessera_proto::FsError>(())
            });
        }
        futures::future::try_join_all(writers).await.map_err(|e| anyhow!("{}: write: {e}", spec.job))?;
        client.periodic().instance_done();
        let e = t0.elapsed().as_secs_f64();
        if verbose {
            println!("  {} instance {i}: start {s:.2} s, end {e:.2} s (I/O {:.2} s)", spec.job, e - s - spec.compute_s);
        }
        instances.push(Instance { start_s: s, end_s: e });
    }
    let elapsed_s = t0.elapsed().as_secs_f64();
    for f in files {
        if let Ok(f) = Arc::try_unwrap(f) {
            f.close().await.map_err(|e| anyhow!("{}: close: {e}", spec.job))?;
        }
    }
    let whole_run_rho = f64::from(spec.instances) * spec.compute_s / elapsed_s.max(1e-9);
    let measured_rho = match (instances.first(), instances.last()) {
        (Some(a), Some(z)) if instances.len() >= 2 && z.end_s > a.end_s => {
            (instances.len() - 1) as f64 * spec.compute_s / (z.end_s - a.end_s)
        }
        _ => whole_run_rho,
    };
    Ok(JobOutcome { spec: spec.clone(), registered: register, instances, elapsed_s, measured_rho, whole_run_rho })
}

// ---------------------------------------------------------------------------------------------
// `tessera-bench persched job`
// ---------------------------------------------------------------------------------------------

#[derive(clap::Args, Debug)]
pub struct JobArgs {
    #[command(flatten)]
    pub cluster: crate::backend::ClusterArgs,
    /// β: tasks of the job (each writes vol/β per instance into its own file).
    #[arg(long, default_value_t = 4)]
    pub tasks: u32,
    /// w: seconds of compute (a sleep) before each write.
    #[arg(long)]
    pub compute: f64,
    /// vol: bytes the job writes per instance (all tasks together), e.g. 512m.
    #[arg(long, value_parser = tessera_proto::units::parse_size)]
    pub volume: u64,
    /// N: instances (compute + write) to run.
    #[arg(long, default_value_t = 5)]
    pub instances: u32,
    /// Register the profile with PerSched (and follow its grant); without it the job is not scheduled.
    #[arg(long)]
    pub register: bool,
    /// Directory of the job's files.
    #[arg(long, default_value = "/persched")]
    pub dir: String,
    /// B (bytes/s) to compute ρ and the dilation with (default: the MDS's `[persched] total_bandwidth`
    /// from the configuration).
    #[arg(long, value_parser = tessera_proto::units::parse_size)]
    pub total_bandwidth: Option<u64>,
    /// b (bytes/s, one task) likewise (default: `[persched] node_bandwidth`).
    #[arg(long, value_parser = tessera_proto::units::parse_size)]
    pub node_bandwidth: Option<u64>,
}

pub async fn job_cmd(a: JobArgs) -> Result<()> {
    let cfg = tessera_client::ClusterConfig::locate(a.cluster.config.as_deref())?;
    let job = a.cluster.job.clone().unwrap_or_else(|| format!("periodic-{}", std::process::id()));
    let client = Client::connect(&cfg).await.context("connecting to the Tessera cluster")?.with_job(job.clone());
    let spec =
        JobSpec { job: job.clone(), tasks: a.tasks, compute_s: a.compute, volume: a.volume, instances: a.instances };
    let res = run_job(&client, &spec, &a.dir, a.register, None, true).await;
    if a.register {
        let _ = client.periodic_leave().await;
    }
    let out = res?;
    let bw = Bw {
        node: a.node_bandwidth.unwrap_or(cfg.persched.node_bandwidth) as f64,
        total: a.total_bandwidth.unwrap_or(cfg.persched.total_bandwidth) as f64,
    };
    let r = rho(spec.compute_s, spec.volume, spec.tasks, bw);
    println!(
        "job {job}: {} instances of w = {} s + {} in {:.2} s; measured ρ̃ = {:.4}, ρ = {r:.4} (b = {}/s, B = {}/s), dilation ρ/ρ̃ = {:.4}",
        spec.instances,
        spec.compute_s,
        format_size(spec.volume),
        out.elapsed_s,
        out.measured_rho,
        format_size(bw.node as u64),
        format_size(bw.total as u64),
        r / out.measured_rho
    );
    if let Some(p) = &a.cluster.json {
        crate::report::write_json(p, &out)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// `tessera-bench experiment persched-live`
// ---------------------------------------------------------------------------------------------

/// A job of the mix: β, w (s) and the share of its cycle its I/O alone takes at B.
struct MixJob {
    name: &'static str,
    tasks: u32,
    compute_s: f64,
    io_share: f64,
}

/// The paper's mix of short/long, light/heavy applications, scaled: I/O alone 20–40% of a cycle, cycles of
/// 6–15 s so that a run of a few minutes holds several pattern periods.
fn mix(quick: bool) -> Vec<MixJob> {
    let m = |name, tasks, compute_s, io_share| MixJob { name, tasks, compute_s, io_share };
    if quick {
        vec![m("A", 4, 6.0, 0.30), m("B", 2, 4.0, 0.35), m("C", 2, 7.0, 0.25)]
    } else {
        vec![m("A", 8, 10.0, 0.30), m("B", 4, 6.0, 0.35), m("C", 4, 12.0, 0.20), m("D", 2, 8.0, 0.40)]
    }
}

/// The job specs for the platform `bw`: vol = min(β b, B)·w·f/(1−f) (the job's I/O alone takes the share f of
/// its cycle), instances so each job runs about `duration_s`.
fn specs(quick: bool, bw: Bw, duration_s: f64) -> Vec<JobSpec> {
    mix(quick)
        .into_iter()
        .map(|m| {
            let vol = (bw.peak(m.tasks) * m.compute_s * m.io_share / (1.0 - m.io_share)) as u64;
            let cycle = m.compute_s / (1.0 - m.io_share);
            JobSpec {
                job: format!("ps-{}", m.name),
                tasks: m.tasks,
                compute_s: m.compute_s,
                volume: vol.max(u64::from(m.tasks)),
                instances: ((duration_s / cycle).round() as u32).max(2),
            }
        })
        .collect()
}

/// One line of persched-live.json: one scheduler, medians over the runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LiveRecord {
    pub scheduler: String,
    pub syseff: f64,
    pub upper_bound: f64,
    pub syseff_ub: f64,
    pub dilation: f64,
    /// The same from each job's whole run (start-up included).
    pub whole_run_syseff_ub: f64,
    pub whole_run_dilation: f64,
    /// B the platform was configured with (bytes/s; measured at the start).
    pub total_bandwidth: f64,
    /// b (one task) the platform was configured with (bytes/s; measured at the start).
    pub node_bandwidth: f64,
    pub period_s: Option<f64>,
    pub jobs: Vec<LiveJob>,
    pub device_model: String,
    pub runs: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LiveJob {
    pub job: String,
    pub tasks: u32,
    pub compute_s: f64,
    pub volume: u64,
    pub instances: u32,
    pub rho: f64,
    /// ρ̃ of the MDS's pattern (PerSched only).
    pub planned_rho: Option<f64>,
    /// Median over the runs of the steady-state ρ̃ (see [`JobOutcome::measured_rho`]).
    pub measured_rho: f64,
    /// Median over the runs of n·w / elapsed.
    pub whole_run_rho: f64,
    pub dilation: f64,
    /// Instances of the median run: (start, end) seconds from the job's start.
    pub instances_s: Vec<(f64, f64)>,
}

/// One run with its SysEff, UB and Dilation in steady state, then SysEff and Dilation of the whole run.
type Scored = (f64, f64, f64, RunOut, f64, f64);

struct RunOut {
    jobs: Vec<JobOutcome>,
    planned: Vec<Option<f64>>,
    period_s: Option<f64>,
}

fn options(device: &str) -> ClusterOptions {
    let mut o = ClusterOptions::plain(SERVERS, 0);
    o.device_model = device.into();
    o
}

/// What `tasks` tasks writing `bytes` together at once, unscheduled, on a fresh cluster reach (bytes/s).
async fn measure_bandwidth(dir: &Path, device: &str, tasks: u32, bytes: u64) -> Result<f64> {
    let mut lc = LocalCluster::start(dir, &options(device)).await?;
    let res = async {
        let client = lc.client("ps-measure").await?;
        let spec = JobSpec { job: "ps-measure".into(), tasks, compute_s: 0.0, volume: bytes, instances: 2 };
        let out = run_job(&client, &spec, "/measure", false, None, false).await?;
        // The second instance (files exist, as in the jobs' later instances).
        let i = out.instances[1];
        Ok::<f64, anyhow::Error>(bytes as f64 / (i.end_s - i.start_s))
    }
    .await;
    lc.stop().await;
    res
}

async fn one_run(dir: &Path, device: &str, bw: Bw, jobs: &[JobSpec], sched: &str) -> Result<RunOut> {
    let register = sched != "none";
    let scheduled = sched == "persched";
    let n: u32 = jobs.iter().map(|j| j.tasks).sum();
    let mut lc = LocalCluster::prepare_edited(dir, &options(device), |c| {
        c.persched.nodes = n;
        c.persched.node_bandwidth = bw.node as u64;
        c.persched.total_bandwidth = bw.total as u64;
        // Polls every 0.5 s: a recomputed pattern reaches every job quickly.
        c.persched.lease_ms = 1500;
        c.persched.k_prime = K_PRIME;
        if sched.starts_with("online") {
            c.persched.scheduler = sched.into();
        }
        // The baselines are "no scheduler": the MDS must not find the unregistered jobs periodic.
        c.persched.detect = false;
    })?
    .boot()
    .await?;
    let res = async {
        let mut clients = Vec::new();
        for j in jobs {
            // One client per job: the grant is per client, the job id per request.
            clients.push(lc.client(&j.job).await?);
        }
        // Registration and file creation first; then every job starts at the same instant.
        let start = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut tasks = Vec::new();
        for (j, c) in jobs.iter().zip(&clients) {
            let (j, c) = (j.clone(), c.clone());
            tasks.push(tokio::spawn(async move { run_job(&c, &j, "/persched", register, Some(start), false).await }));
        }
        tokio::time::sleep_until(start).await;
        let (mut planned, mut period_s) = (vec![None; jobs.len()], None);
        if scheduled {
            let st = clients[0].mds().periodic_status().await.map_err(|e| anyhow!("periodic status: {e}"))?;
            period_s = Some(st.period_ms as f64 / 1e3);
            for (k, j) in jobs.iter().enumerate() {
                planned[k] = st.jobs.iter().find(|x| x.job == j.job).map(|x| x.planned_rho);
            }
        }
        let mut outs = Vec::new();
        for t in tasks {
            outs.push(t.await??);
        }
        if register {
            for c in &clients {
                let _ = c.periodic_leave().await;
            }
        }
        Ok::<RunOut, anyhow::Error>(RunOut { jobs: outs, planned, period_s })
    }
    .await;
    lc.stop().await;
    res
}

fn median(v: Vec<f64>) -> f64 {
    crate::report::median(&v)
}

/// SysEff = (1/N) Σ β_k ρ̃_k, UB = (1/N) Σ β_k ρ_k, Dilation = max_k ρ_k/ρ̃_k.
pub fn objectives(jobs: &[(u32, f64, f64)]) -> (f64, f64, f64) {
    let n: f64 = jobs.iter().map(|j| f64::from(j.0)).sum::<f64>().max(1.0);
    let se = jobs.iter().map(|j| f64::from(j.0) * j.2).sum::<f64>() / n;
    let ub = jobs.iter().map(|j| f64::from(j.0) * j.1).sum::<f64>() / n;
    let dil = jobs.iter().map(|j| j.1 / j.2).fold(0.0, f64::max);
    (se, ub, dil)
}

pub async fn run(a: &ExperimentArgs) -> Result<()> {
    let runs = a.runs.unwrap_or(if a.quick { 1 } else { 3 }).max(1);
    // Each job runs about this long: at least 4 pattern periods of the mix (T ≤ K' T_min).
    let duration = a.seconds.unwrap_or(if a.quick { 60.0 } else { 150.0 });
    let device = a.device_model.as_str();
    std::fs::create_dir_all(&a.out)?;
    let scratch = std::env::temp_dir().join(format!("tessera-{NAME}-{}", std::process::id()));
    let tasks: u32 = mix(a.quick).iter().map(|m| m.tasks).sum();
    let probe = a.file_size.unwrap_or(if a.quick { 128 << 20 } else { 512 << 20 });
    let measured = measure_bandwidth(&scratch, device, tasks, probe).await.context("measuring B")?;
    // What each job size of the mix reaches alone. The model's peak is linear, min(β b, B), and the
    // cluster's is not (one task reaches more than half of what two reach): b is taken from the smallest
    // job, so that every job can move at its planned rate.
    let mut sizes: Vec<u32> = mix(a.quick).iter().map(|m| m.tasks).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut alone = Vec::new();
    for &t in &sizes {
        let r = measure_bandwidth(&scratch, device, t, probe * u64::from(t) / u64::from(tasks).max(1))
            .await
            .with_context(|| format!("measuring {t} tasks"))?;
        alone.push((t, r));
    }
    let (t_min, r_min) = alone[0];
    let one = r_min / f64::from(t_min);
    let alone: Vec<String> = alone.iter().map(|(t, r)| format!("{t} tasks {}/s", format_size(*r as u64))).collect();
    // The plan must hold on what the cluster delivers: 90% of the measured rates.
    let bw = Bw { node: 0.9 * one, total: 0.9 * measured };
    let jobs = specs(a.quick, bw, duration);
    println!(
        "experiment {NAME}: {SERVERS} data servers, device model {device}; B measured {}/s ({} tasks writing {}), b = {}/s (per task of the smallest job); alone: {}; configured b = {}/s, B = {}/s, N = {tasks}; {runs} run(s) per scheduler: {}",
        format_size(measured as u64),
        tasks,
        format_size(probe),
        format_size(one as u64),
        alone.join(", "),
        format_size(bw.node as u64),
        format_size(bw.total as u64),
        SCHEDULERS.join(", ")
    );
    for j in &jobs {
        println!(
            "  {}: β = {}, w = {} s, vol = {}, {} instances, ρ = {:.3}",
            j.job,
            j.tasks,
            j.compute_s,
            format_size(j.volume),
            j.instances,
            rho(j.compute_s, j.volume, j.tasks, bw)
        );
    }
    let mut records = Vec::new();
    // Runs alternate between the schedulers (round r runs each once), so drift on this shared machine hits
    // all alike.
    let mut all: Vec<Vec<Scored>> = SCHEDULERS.iter().map(|_| Vec::new()).collect();
    for r in 0..runs {
        for (si, sched) in SCHEDULERS.iter().enumerate() {
            let out = one_run(&scratch, device, bw, &jobs, sched).await.with_context(|| format!("{sched} run {r}"))?;
            let of = |whole: bool| {
                let v: Vec<(u32, f64, f64)> = out
                    .jobs
                    .iter()
                    .map(|o| {
                        let m = if whole { o.whole_run_rho } else { o.measured_rho };
                        (o.spec.tasks, rho(o.spec.compute_s, o.spec.volume, o.spec.tasks, bw), m)
                    })
                    .collect();
                objectives(&v)
            };
            let (se, ub, dil) = of(false);
            let (wse, _, wdil) = of(true);
            println!(
                "  {sched:<15} run {r}: SysEff {se:.4} (UB {ub:.4}, {:.3} of it), Dilation {dil:.3}; whole run: {:.3} of UB, Dilation {wdil:.3}{}",
                se / ub,
                wse / ub,
                out.period_s.map_or(String::new(), |t| format!("; period {t:.1} s"))
            );
            for (o, p) in out.jobs.iter().zip(&out.planned) {
                println!(
                    "    {}: measured ρ̃ {:.3} (whole run {:.3}), planned {}, elapsed {:.1} s",
                    o.spec.job,
                    o.measured_rho,
                    o.whole_run_rho,
                    p.map_or("-".into(), |p| format!("{p:.3}")),
                    o.elapsed_s
                );
            }
            all[si].push((se, ub, dil, out, wse, wdil));
        }
    }
    for (sched, outs) in SCHEDULERS.iter().zip(all) {
        let whole_se = median(outs.iter().map(|o| o.4).collect());
        let whole_dil = median(outs.iter().map(|o| o.5).collect());
        let se = median(outs.iter().map(|o| o.0).collect());
        let ub = outs[0].1;
        let dil = median(outs.iter().map(|o| o.2).collect());
        let mid = outs.iter().min_by(|a, b| (a.0 - se).abs().total_cmp(&(b.0 - se).abs())).unwrap_or(&outs[0]);
        let live_jobs = jobs
            .iter()
            .enumerate()
            .map(|(k, j)| {
                let r = rho(j.compute_s, j.volume, j.tasks, bw);
                let m = median(outs.iter().map(|o| o.3.jobs[k].measured_rho).collect());
                let whole = median(outs.iter().map(|o| o.3.jobs[k].whole_run_rho).collect());
                LiveJob {
                    job: j.job.clone(),
                    tasks: j.tasks,
                    compute_s: j.compute_s,
                    volume: j.volume,
                    instances: j.instances,
                    rho: r,
                    planned_rho: mid.3.planned[k],
                    measured_rho: m,
                    whole_run_rho: whole,
                    dilation: r / m,
                    instances_s: mid.3.jobs[k].instances.iter().map(|i| (i.start_s, i.end_s)).collect(),
                }
            })
            .collect();
        records.push(LiveRecord {
            scheduler: (*sched).into(),
            syseff: se,
            upper_bound: ub,
            syseff_ub: se / ub,
            dilation: dil,
            whole_run_syseff_ub: whole_se / ub,
            whole_run_dilation: whole_dil,
            total_bandwidth: bw.total,
            node_bandwidth: bw.node,
            period_s: mid.3.period_s,
            jobs: live_jobs,
            device_model: device.into(),
            runs,
        });
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let mut csv = String::from(
        "scheduler,job,tasks,compute_s,volume,instances,rho,planned_rho,measured_rho,whole_run_rho,dilation,syseff,upper_bound,syseff_ub,system_dilation,total_bandwidth,node_bandwidth,period_s,runs\n",
    );
    for r in &records {
        for j in &r.jobs {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{:.4},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.0},{:.0},{},{}\n",
                r.scheduler,
                j.job,
                j.tasks,
                j.compute_s,
                j.volume,
                j.instances,
                j.rho,
                j.planned_rho.map_or(String::new(), |p| format!("{p:.4}")),
                j.measured_rho,
                j.whole_run_rho,
                j.dilation,
                r.syseff,
                r.upper_bound,
                r.syseff_ub,
                r.dilation,
                r.total_bandwidth,
                r.node_bandwidth,
                r.period_s.map_or(String::new(), |p| format!("{p:.3}")),
                r.runs
            ));
        }
    }
    write_outputs(&a.out, NAME, &records, &csv)?;
    plot(&records, &a.out.join(format!("{NAME}.png")))?;
    println!("wrote {}/{NAME}.{{json,csv,png}}", a.out.display());
    for r in &records {
        println!(
            "  {:<9} SysEff/UB {:.3} (SysEff {:.4}, UB {:.4}), Dilation {:.3}",
            r.scheduler, r.syseff_ub, r.syseff, r.upper_bound, r.dilation
        );
    }
    Ok(())
}

/// Fig. 6's two panels: SysEff/UB and Dilation per scheduler; and per job planned vs measured ρ̃.
pub fn plot(records: &[LiveRecord], png: &Path) -> Result<()> {
    let groups: Vec<String> = records.iter().map(|r| r.scheduler.clone()).collect();
    let mut panels = vec![
        BarPanel {
            title: "SysEff / upper bound (higher is better)".into(),
            groups: groups.clone(),
            series: vec![("SysEff/UB".into(), records.iter().map(|r| r.syseff_ub).collect())],
        },
        BarPanel {
            title: "Dilation (lower is better, 1 = no slowdown)".into(),
            groups,
            series: vec![("Dilation".into(), records.iter().map(|r| r.dilation).collect())],
        },
    ];
    if let Some(ps) = records.iter().find(|r| r.scheduler == "persched") {
        let jg: Vec<String> = ps.jobs.iter().map(|j| j.job.clone()).collect();
        let mut series = vec![
            ("ρ".to_string(), ps.jobs.iter().map(|j| j.rho).collect()),
            ("planned ρ̃".to_string(), ps.jobs.iter().map(|j| j.planned_rho.unwrap_or(f64::NAN)).collect()),
        ];
        for r in records {
            series.push((format!("measured ρ̃ ({})", r.scheduler), r.jobs.iter().map(|j| j.measured_rho).collect()));
        }
        panels
            .push(BarPanel { title: "Per job: ρ, PerSched's planned ρ̃, measured ρ̃".into(), groups: jg, series });
    }
    let device = records.first().map(|r| r.device_model.as_str()).unwrap_or("?");
    grouped_bars(png, &format!("PerSched live (device model {device}): like the paper's Fig. 6"), "", &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_the_mix_is_io_heavy_enough() {
        for (vol, n) in [(10u64, 3u32), (1 << 20, 4), (7, 7)] {
            assert_eq!((0..n).map(|t| task_share(vol, n, t)).sum::<u64>(), vol);
        }
        let bw = Bw { node: 40e6, total: 100e6 };
        for quick in [true, false] {
            let js = specs(quick, bw, 60.0);
            for j in &js {
                let r = rho(j.compute_s, j.volume, j.tasks, bw);
                assert!((0.6..=0.8).contains(&r), "{}: ρ {r}", j.job);
            }
            // Together they ask for more than B: there is congestion to schedule.
            let demand: f64 =
                js.iter().map(|j| (1.0 - rho(j.compute_s, j.volume, j.tasks, bw)) * bw.peak(j.tasks) / bw.total).sum();
            assert!(demand > 0.75, "{demand}");
        }
    }

    #[test]
    fn objectives_follow_the_spec() {
        // Two jobs: β 1 and 3; ρ 0.8 and 0.6; measured 0.4 and 0.6.
        let (se, ub, dil) = objectives(&[(1, 0.8, 0.4), (3, 0.6, 0.6)]);
        assert!((se - (0.4 + 1.8) / 4.0).abs() < 1e-12);
        assert!((ub - (0.8 + 1.8) / 4.0).abs() < 1e-12);
        assert!((dil - 2.0).abs() < 1e-12);
    }
}
