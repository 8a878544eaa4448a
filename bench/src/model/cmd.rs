//! `tessera-bench model fit|replay|what-if`: the parametric model of [`crate::model`] against counter
//! logs (`tessera jobstats --job J --json`), fitted from short IOR runs on a local cluster it starts.

use crate::ior::IorArgs;
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::model::{self, BurstBuffer, CounterErrors, JobLog, Params, ServerCache, Validation};
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use tessera_proto::msg::JobInfo;
use tessera_proto::msg::Window;
use tessera_proto::units::parse_size;

#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    cmd: ModelCmd,
}

#[derive(Subcommand, Debug)]
enum ModelCmd {
    /// Fit the parameters to counter logs (--logs), or to short IOR runs on a local cluster it starts
    /// (their logs saved in --log-dir); without --logs, runs not fitted on are held out and their mean
    /// error per counter reported.
    Fit {
        /// Counter logs (`tessera jobstats --job J --json`) to fit on; `FILE:N`: N processes at a time.
        #[arg(long, num_args = 1..)]
        logs: Vec<PathBuf>,
        /// Where the benchmark runs' logs go.
        #[arg(long, default_value = "results/model-logs")]
        log_dir: PathBuf,
        /// The fitted parameters (JSON).
        #[arg(long, default_value = "results/model-params.json")]
        out: PathBuf,
        /// Device model of the local cluster's data servers (`none` or `hdd`).
        #[arg(long, default_value = "none")]
        device_model: tessera_proto::config::DeviceKind,
        /// Scale of the benchmark runs (MiB per task per run).
        #[arg(long, default_value_t = 128)]
        mib: u64,
        /// Each data server's write cache, MiB (`ds_options.write_cache_mb` / targets of the cluster the
        /// logs come from; 0: no cache in the model).
        #[arg(long, default_value_t = tessera_proto::config::DsOptions::default().write_cache_mb)]
        write_cache_mb: u64,
        /// Disk devices the data servers share (a local cluster: 1, all on one machine; 0: one per server).
        #[arg(long, default_value_t = 1)]
        devices: usize,
    },
    /// Predict a job's per-window counters from its counter log and report the mean error per counter.
    Replay {
        #[arg(long)]
        params: PathBuf,
        /// Counter logs (`tessera jobstats --job J --json`); `FILE:N`: N processes at a time.
        #[arg(long, num_args = 1..)]
        logs: Vec<PathBuf>,
        /// Print every window.
        #[arg(long)]
        windows: bool,
    },
    /// The same job replayed with changed parameters: the predicted effect.
    WhatIf {
        #[arg(long)]
        params: PathBuf,
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        disk_mib_s: Option<f64>,
        #[arg(long)]
        client_link_mib_s: Option<f64>,
        #[arg(long)]
        server_net_mib_s: Option<f64>,
        #[arg(long)]
        latency_us: Option<f64>,
        /// A write-back burst buffer at the forwarding node of this size (K/M/G).
        #[arg(long, value_parser = parse_size)]
        burst_buffer: Option<u64>,
        /// Its drain bandwidth (default: the server network's).
        #[arg(long)]
        drain_mib_s: Option<f64>,
    },
}

/// A counter log as the model reads it: the series made dense, the processes, the servers.
pub fn job_log(info: &JobInfo) -> (JobLog, usize) {
    let dt_us = info.dt_us.max(1);
    let mut windows = Vec::new();
    if let Some(first) = info.series.first() {
        let base = first.start_unix_us;
        for p in &info.series {
            let i = ((p.start_unix_us.saturating_sub(base)) / dt_us) as usize;
            if i >= 1 << 20 {
                break;
            }
            if windows.len() <= i {
                windows.resize(i + 1, Window::default());
            }
            let w: &mut Window = &mut windows[i];
            w.read_bytes += p.window.read_bytes;
            w.write_bytes += p.window.write_bytes;
            w.read_ops += p.window.read_ops;
            w.write_ops += p.window.write_ops;
        }
    }
    let procs = info.processes.len().max(1);
    (JobLog { dt_s: dt_us as f64 / 1e6, processes: procs, windows }, info.nodes.len().max(1))
}

/// Reads `tessera jobstats --job J --json` (a list of jobs: the first) or one job's JSON. `FILE:N`: the
/// job ran N processes at a time (the log counts every process it saw: a job of repeated runs, each with
/// its own processes, would otherwise look as wide as all of them together).
pub fn read_log(path: &Path) -> Result<(String, JobLog, usize)> {
    let at_once = path.to_str().and_then(|s| s.rsplit_once(':')).and_then(|(f, n)| Some((f, n.parse::<usize>().ok()?)));
    if let Some((file, n)) = at_once.filter(|_| !path.exists()) {
        let (job, mut log, servers) = read_log(Path::new(file))?;
        log.processes = n.clamp(1, log.processes);
        return Ok((job, log, servers));
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let info: JobInfo = match serde_json::from_str::<Vec<JobInfo>>(&text) {
        Ok(v) => v.into_iter().next().with_context(|| format!("{}: no job", path.display()))?,
        Err(_) => serde_json::from_str(&text).with_context(|| format!("{}: not a jobstats JSON", path.display()))?,
    };
    if info.series.is_empty() {
        bail!("{}: job {} has no series (ask for one job: jobstats --job J --json)", path.display(), info.job);
    }
    let (log, servers) = job_log(&info);
    Ok((info.job, log, servers))
}

fn read_params(path: &Path) -> Result<Params> {
    let t = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&t).with_context(|| format!("{}: not model parameters", path.display()))
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn print_errors(name: &str, e: &CounterErrors) {
    println!(
        "{name:<34} bytes_read {:>7}  bytes_written {:>7}  read_requests {:>7}  write_requests {:>7}  duration {:>7}",
        pct(e.read_bytes),
        pct(e.write_bytes),
        pct(e.read_ops),
        pct(e.write_ops),
        pct(e.duration)
    );
}

/// The errors of one log and whether it read and wrote at all (a counter never measured is left out of
/// the means, not counted as 0%).
type Evaluated = (Validation, bool, bool);
/// One way's errors of a log, with whether it read and wrote.
type OneWay = (CounterErrors, bool, bool);

/// Replays each log with `p` (its own server count); prints and returns the errors: the thesis's
/// (§5.4.1, requests at each window's start) and the free-running replay's, window by window.
fn evaluate(p: &Params, logs: &[(String, JobLog, usize)]) -> Vec<Evaluated> {
    logs.iter()
        .map(|(name, log, servers)| {
            let q = Params { servers: *servers, ..p.clone() };
            let v = model::validate(&q, log);
            print_errors(&format!("{name} (thesis)"), &v.thesis);
            print_errors(&format!("{name} (thesis, by volume)"), &v.volume);
            print_errors(&format!("{name} (free-running)"), &v.free);
            print_errors(&format!("{name} (free, by volume)"), &v.free_volume);
            let r = log.windows.iter().any(|w| w.read_ops > 0);
            let w = log.windows.iter().any(|w| w.write_ops > 0);
            (v, r, w)
        })
        .collect()
}

fn print_mean(label: &str, es: &[Evaluated]) {
    type Way = fn(&Validation) -> &CounterErrors;
    let ways: [(&str, Way); 4] = [
        ("thesis", |v| &v.thesis),
        ("thesis, by volume", |v| &v.volume),
        ("free-running", |v| &v.free),
        ("free, by volume", |v| &v.free_volume),
    ];
    for (way, get) in ways {
        let of: Vec<_> = es.iter().map(|(v, r, w)| (get(v).clone(), *r, *w)).collect();
        print_mean_of(&format!("{label} ({way})"), &of);
    }
}

fn print_mean_of(label: &str, es: &[OneWay]) {
    let avg = |f: &dyn Fn(&OneWay) -> Option<f64>| {
        let v: Vec<f64> = es.iter().filter_map(f).collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let m = CounterErrors {
        read_bytes: avg(&|e| e.1.then_some(e.0.read_bytes)),
        write_bytes: avg(&|e| e.2.then_some(e.0.write_bytes)),
        read_ops: avg(&|e| e.1.then_some(e.0.read_ops)),
        write_ops: avg(&|e| e.2.then_some(e.0.write_ops)),
        duration: avg(&|e| Some(e.0.duration)),
    };
    print_errors(label, &m);
}

/// One benchmark run: IOR options and whether it repeats with pauses (a periodic job).
struct Run {
    name: &'static str,
    args: String,
    repeats: usize,
    held_out: bool,
}

fn runs(mib: u64) -> Vec<Run> {
    let b = format!("{mib}m");
    let half = format!("{}m", (mib / 2).max(1));
    vec![
        Run { name: "fpp-1m-n2", args: format!("-F -N 2 -t 1m -b {b}"), repeats: 1, held_out: false },
        Run { name: "shared-64k-n2", args: format!("-N 2 -t 64k -b {half}"), repeats: 1, held_out: false },
        Run { name: "fpp-256k-n1", args: format!("-F -N 1 -t 256k -b {b}"), repeats: 1, held_out: false },
        Run { name: "shared-1m-n2", args: format!("-N 2 -t 1m -b {b}"), repeats: 1, held_out: true },
        Run { name: "fpp-128k-n1", args: format!("-F -N 1 -t 128k -b {half}"), repeats: 1, held_out: true },
        Run { name: "periodic-1m-n2", args: format!("-F -N 2 -t 1m -b {half} -w"), repeats: 3, held_out: true },
    ]
}

#[derive(Parser)]
struct IorWrap {
    #[command(flatten)]
    a: IorArgs,
}

async fn bench_logs(
    dir: &Path,
    device_model: tessera_proto::config::DeviceKind,
    mib: u64,
) -> Result<Vec<(PathBuf, bool)>> {
    std::fs::create_dir_all(dir)?;
    let cdir = tempfile::tempdir()?;
    let mut o = ClusterOptions::plain(2, 0);
    o.device_model = device_model;
    let mut lc = LocalCluster::start(cdir.path(), &o).await?;
    let res = async {
        let mut out = Vec::new();
        let admin = tessera_client::Client::connect(&lc.admin_cfg).await?;
        for r in runs(mib) {
            let job = format!("model-{}-{}", r.name, std::process::id());
            for k in 0..r.repeats {
                if k > 0 {
                    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                }
                let line = format!(
                    "ior {} -o /model-{} --job {job} --config {}",
                    r.args,
                    r.name,
                    lc.files().client_config.display()
                );
                let w = IorWrap::try_parse_from(line.split_whitespace())?;
                crate::ior::run(w.a).await.with_context(|| format!("run {}", r.name))?;
            }
            // The data servers report every 0.5 s; let the last window arrive.
            tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            let info = admin.mds().job_stats(Some(&job)).await.map_err(|e| anyhow::anyhow!("jobstats {job}: {e}"))?;
            let path = dir.join(format!("{}.json", r.name));
            std::fs::write(&path, serde_json::to_string_pretty(&info)? + "\n")?;
            // Each repetition is its own processes: the run's task count is how many ran at once.
            let tasks = if r.args.contains("-N 1 ") { 1 } else { 2 };
            out.push((PathBuf::from(format!("{}:{tasks}", path.display())), r.held_out));
        }
        anyhow::Ok(out)
    }
    .await;
    lc.stop().await;
    res
}

/// Entry point of `tessera-bench model`.
pub async fn run(a: ModelArgs) -> Result<()> {
    match a.cmd {
        ModelCmd::Fit { logs, log_dir, out, device_model, mib, write_cache_mb, devices } => {
            let files: Vec<(PathBuf, bool)> = if logs.is_empty() {
                println!("benchmark runs on a local cluster (2 data servers, device model {device_model}); numbers are noisy");
                bench_logs(&log_dir, device_model, mib).await?
            } else {
                logs.into_iter().map(|p| (p, false)).collect()
            };
            let mut train = Vec::new();
            let mut held = Vec::new();
            for (p, h) in &files {
                let l = read_log(p)?;
                if *h {
                    held.push(l)
                } else {
                    train.push(l)
                }
            }
            let servers = train.first().map(|l| l.2).unwrap_or(2);
            let cache = (write_cache_mb > 0).then(|| ServerCache::tessera(write_cache_mb << 20));
            let start = Params { servers, cache, devices, ..Params::default() };
            let only: Vec<JobLog> = train.iter().map(|l| l.1.clone()).collect();
            let (p, f) = model::fit(&start, &only, 60);
            println!(
                "fitted: client link {:.0} MiB/s, server network {:.0} MiB/s, disk {:.0} MiB/s write, {:.0} MiB/s read, latency {:.0} µs (objective {:.3})",
                p.client_link_mib_s,
                p.server_net_mib_s,
                p.disk_mib_s,
                p.disk_rate(false),
                p.latency_us,
                f
            );
            println!(
                "known: write cache {} MiB per server, {} servers on {} disk device(s)",
                p.cache.map_or(0, |c| c.write_cache_bytes >> 20),
                p.servers,
                if p.devices == 0 { p.servers } else { p.devices }
            );
            if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(&out, serde_json::to_string_pretty(&p)? + "\n")?;
            println!("parameters written to {}", out.display());
            println!("\nmean error per counter, runs fitted on:");
            let e = evaluate(&p, &train);
            print_mean("mean (fitted)", &e);
            if !held.is_empty() {
                println!("\nmean error per counter, runs NOT fitted on:");
                let e = evaluate(&p, &held);
                print_mean("mean (held out)", &e);
            }
        }
        ModelCmd::Replay { params, logs, windows } => {
            let p = read_params(&params)?;
            let mut all = Vec::new();
            for path in &logs {
                let l = read_log(path)?;
                let q = Params { servers: l.2, ..p.clone() };
                let pr = model::replay(&q, &l.1);
                if windows {
                    let at = model::replay_windows(&q, &l.1);
                    println!(
                        "{}: window  measured(rB wB rN wN)  free-running(rB wB rN wN)  thesis drive(rB wB rN wN)",
                        l.0
                    );
                    let z = Window::default();
                    let n = l.1.windows.len().max(pr.windows.len()).max(at.windows.len());
                    for i in 0..n {
                        let row: Vec<String> = [&l.1.windows, &pr.windows, &at.windows]
                            .iter()
                            .map(|v| {
                                let w = v.get(i).unwrap_or(&z);
                                format!("{} {} {} {}", w.read_bytes, w.write_bytes, w.read_ops, w.write_ops)
                            })
                            .collect();
                        println!("  {i:>4}  {}", row.join("   "));
                    }
                }
                println!(
                    "{}: measured busy {:.1} s, predicted (free-running) I/O time {:.2} s, job span {:.2} s",
                    l.0,
                    l.1.windows.iter().filter(|w| w.read_ops + w.write_ops > 0).count() as f64 * l.1.dt_s,
                    pr.io_time_s,
                    pr.duration_s
                );
                all.push(l);
            }
            println!();
            let e = evaluate(&p, &all);
            print_mean("mean", &e);
        }
        ModelCmd::WhatIf {
            params,
            log,
            disk_mib_s,
            client_link_mib_s,
            server_net_mib_s,
            latency_us,
            burst_buffer,
            drain_mib_s,
        } => {
            let base = read_params(&params)?;
            let (job, l, servers) = read_log(&log)?;
            let base = Params { servers, ..base };
            let mut c = base.clone();
            if let Some(v) = disk_mib_s {
                // Another device: one rate for reads and writes.
                (c.disk_mib_s, c.disk_read_mib_s) = (v, None);
            }
            if let Some(v) = client_link_mib_s {
                c.client_link_mib_s = v;
            }
            if let Some(v) = server_net_mib_s {
                c.server_net_mib_s = v;
            }
            if let Some(v) = latency_us {
                c.latency_us = v;
            }
            if let Some(size) = burst_buffer {
                c.burst_buffer =
                    Some(BurstBuffer { size_bytes: size, drain_mib_s: drain_mib_s.unwrap_or(c.server_net_mib_s) });
            }
            let (a, b) = (model::replay(&base, &l), model::replay(&c, &l));
            let ch = |x: f64, y: f64| if x > 0.0 { format!("{:+.1}%", (y - x) / x * 100.0) } else { "-".into() };
            println!(
                "job {job}: {} windows of {:.1} s, {} processes, {servers} servers",
                l.windows.len(),
                l.dt_s,
                l.processes
            );
            println!("                 fitted      what-if     change");
            println!("I/O time      {:>9.2} s  {:>9.2} s  {}", a.io_time_s, b.io_time_s, ch(a.io_time_s, b.io_time_s));
            println!(
                "job span      {:>9.2} s  {:>9.2} s  {}",
                a.duration_s,
                b.duration_s,
                ch(a.duration_s, b.duration_s)
            );
            println!("last on disk  {:>9.2} s  {:>9.2} s  {}", a.drained_s, b.drained_s, ch(a.drained_s, b.drained_s));
        }
    }
    Ok(())
}
