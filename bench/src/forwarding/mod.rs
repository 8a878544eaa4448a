//! `tessera-bench experiment fwd-*`: the forwarding thesis's experiments (`specs/forwarding.md`; Bez 2016,
//! chapter 5) on a local cluster this command starts: 4 data servers (hdd model unless asked), 64 KiB
//! stripes over all of them, 128 synchronous processes spread over 32 client instances (each its own
//! client id and connection), M forwarding nodes. Placement as an MPI job's: consecutive ranks share a
//! client instance (ranks `c*P/C ..` on client c, like `mpirun --map-by slot` on nodes), and consecutive
//! clients share a forwarding node (clients `k*C/M ..` on ION k, as nodes are assigned to IONs in blocks).
//!
//! Patterns (process p of P, its k-th request of `xfer` bytes): file per process (`fpp`, file p at
//! `k*xfer`), shared file with one contiguous segment per process (`contiguous`, at
//! `p*per_proc + k*xfer`), shared file 1D-strided (`strided`, at `(k*P + p)*xfer`).
//!
//! Measurement decisions: the files are written once per cluster; then every configuration (scheduler,
//! window) runs reads and writes over them, `runs` times, in rounds (each round runs every configuration
//! once, so a slow spell of the shared machine hits all of them alike). A run starts all processes
//! together; each issues its requests one at a time straight to the data path (layouts are known, as
//! after an open; no client cache in between). Makespan = the slowest process's end; throughput = all
//! bytes over the makespan. Object files stay in the data servers' page cache: with the hdd model the
//! emulated disk is the device under test, and this VM's own disk, whose time the model adds to its
//! own, made the same configuration vary 2x between runs when reads went to it.
//! Scheduler "none" is direct access (clients configured with `ion = "none"`).

use crate::experiments::{uniq, ExperimentArgs, ExperimentName};
use crate::iorchestrator::trace;
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::plots::{self, BarPanel};
use crate::report::median;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tessera_client::proto::msg::{OrchestratorMode, SchedulerSetting};
use tessera_client::{Client, IoTag, Layout, OpenOptions};
use tessera_proto::config::{DeviceKind, Elevator};
use tessera_proto::types::Origin;
use tessera_proto::units::format_size;

/// The four experiments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    Schedulers,
    Ions,
    TwinsWindow,
    TwoApps,
}

impl Experiment {
    pub fn of(name: ExperimentName) -> Option<Experiment> {
        Some(match name {
            ExperimentName::FwdSchedulers => Experiment::Schedulers,
            ExperimentName::FwdIons => Experiment::Ions,
            ExperimentName::FwdTwinsWindow => Experiment::TwinsWindow,
            ExperimentName::FwdTwoApps => Experiment::TwoApps,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Experiment::Schedulers => "fwd-schedulers",
            Experiment::Ions => "fwd-ions",
            Experiment::TwinsWindow => "fwd-twins-window",
            Experiment::TwoApps => "fwd-two-apps",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Fpp,
    Contiguous,
    Strided,
}

impl Pattern {
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::Fpp => "fpp",
            Pattern::Contiguous => "contiguous",
            Pattern::Strided => "strided",
        }
    }

    /// Offsets of process `p`'s requests in its file (for `fpp`, its own file).
    pub fn offsets(self, p: usize, procs: usize, per_proc: u64, xfer: u64) -> Vec<u64> {
        let n = per_proc / xfer;
        (0..n)
            .map(|k| match self {
                Pattern::Fpp => k * xfer,
                Pattern::Contiguous => p as u64 * per_proc + k * xfer,
                Pattern::Strided => (k * procs as u64 + p as u64) * xfer,
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// One line of NAME.json / NAME.csv (medians over `runs`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FwdRecord {
    pub pattern: String,
    pub op: String,
    pub request_kib: u64,
    /// `none` (direct access) or the forwarding nodes' scheduler.
    pub scheduler: String,
    pub ions: usize,
    /// TWINS's (and SW's) window; null for the others.
    pub window_ms: Option<f64>,
    pub device_model: String,
    pub throughput_mib_s: f64,
    pub makespan_s: f64,
    pub runs: u32,
    /// fwd-two-apps: each application's makespan (median), seconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub app_makespans_s: Option<Vec<f64>>,
    /// Mean offset distance of the streams leaving the forwarding nodes during the runs, bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ion_offset_distance: Option<f64>,
    /// SL_i at the end of the runs, the data servers' EWMA of the address gap between consecutive
    /// requests they served (locality monitor), mean over the servers, bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ds_sl_bytes: Option<f64>,
    /// The emulated disk's elevator when not the default (clook).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hdd_elevator: Option<String>,
}

/// A scheduler configuration: `none` or an ION scheduler with its window.
#[derive(Clone, Debug, PartialEq)]
struct Sched {
    name: &'static str,
    window_ms: Option<f64>,
}

impl Sched {
    fn plain(name: &'static str) -> Sched {
        let window_ms = matches!(name, "twins" | "sw").then_some(if name == "sw" { 1000.0 } else { 1.0 });
        Sched { name, window_ms }
    }

    fn label(&self) -> String {
        sched_label(self.name, self.window_ms)
    }
}

/// Sizes and counts, from the arguments.
#[derive(Clone, Debug)]
struct Settings {
    procs: usize,
    clients: usize,
    n_ds: usize,
    per_proc: u64,
    runs: u32,
    device: DeviceKind,
    quick: bool,
    dispatch_depth: Option<u32>,
    hdd_elevator: Option<Elevator>,
}

/// One configuration to measure.
#[derive(Clone, Debug)]
struct Config {
    pattern: Pattern,
    op: Op,
    xfer: u64,
    sched: Sched,
    /// Applications (the processes are split evenly; each its own shared file and job).
    apps: usize,
}

const SMALL: u64 = 32 << 10;
const LARGE: u64 = 256 << 10;

fn configs(e: Experiment, s: &Settings) -> Vec<(usize, Vec<Config>)> {
    let scheds = |names: &[&'static str]| names.iter().map(|n| Sched::plain(n)).collect::<Vec<_>>();
    let cross = |patterns: &[Pattern], ops: &[Op], sizes: &[u64], scheds: &[Sched], apps: usize| {
        let mut v = Vec::new();
        for &pattern in patterns {
            for &op in ops {
                for &xfer in sizes {
                    for sched in scheds {
                        v.push(Config { pattern, op, xfer, sched: sched.clone(), apps });
                    }
                }
            }
        }
        v
    };
    use Pattern::*;
    match e {
        Experiment::Schedulers if s.quick => vec![(
            4,
            cross(&[Strided, Contiguous], &[Op::Read], &[SMALL], &scheds(&["none", "fifo", "hbrr", "twins"]), 1),
        )],
        Experiment::Schedulers => vec![(
            4,
            cross(
                &[Fpp, Contiguous, Strided],
                &[Op::Read, Op::Write],
                &[SMALL, LARGE],
                &scheds(&["none", "fifo", "hbrr", "to", "to-agg", "sjf", "mlf", "sw", "twins"]),
                1,
            ),
        )],
        Experiment::Ions => {
            let (patterns, sizes): (&[Pattern], &[u64]) =
                if s.quick { (&[Strided], &[SMALL]) } else { (&[Strided, Contiguous], &[SMALL, LARGE]) };
            [1, 2, 4]
                .into_iter()
                .map(|m| (m, cross(patterns, &[Op::Read], sizes, &scheds(&["none", "fifo", "hbrr", "twins"]), 1)))
                .collect()
        }
        Experiment::TwinsWindow => {
            let mut sc = scheds(&["none", "fifo"]);
            sc.extend([0.125, 1.0, 8.0].map(|w| Sched { name: "twins", window_ms: Some(w) }));
            let patterns: &[Pattern] = if s.quick { &[Strided] } else { &[Strided, Contiguous] };
            vec![(4, cross(patterns, &[Op::Read], &[SMALL], &sc, 1))]
        }
        Experiment::TwoApps => {
            vec![(4, cross(&[Strided], &[Op::Read], &[SMALL], &scheds(&["none", "fifo", "hbrr", "twins"]), 2))]
        }
    }
}

/// A running cluster with its clients and files.
struct Fixture {
    cluster: LocalCluster,
    /// Client i goes through ION i*M/C.
    via_ion: Vec<Client>,
    direct: Vec<Client>,
    /// Per file: (ino, layout). Files: `fpp/p<i>` for each process, then one shared file per app.
    fpp: Vec<(u64, Layout)>,
    shared: Vec<(u64, Layout)>,
    current: Option<Sched>,
    /// The data servers' `lba-trace.csv` when the cluster traces (fwd-schedulers), else empty.
    traces: Vec<PathBuf>,
    /// Client id → the process group it belongs to (its index i → ION i*M/C, for direct clients too).
    groups: HashMap<u64, usize>,
}

async fn file_of(c: &Client, path: &str, size: u64) -> Result<(u64, Layout)> {
    crate::iorchestrator::workloads::prepare_file(c, path, size).await?;
    let f = c.open(path, OpenOptions::read_only()).await.map_err(|e| anyhow!("{path}: {e}"))?;
    let r = (f.ino(), Layout::clone(&f.layout()));
    f.close().await.map_err(|e| anyhow!("{path}: {e}"))?;
    Ok(r)
}

impl Fixture {
    async fn start(dir: &Path, s: &Settings, n_ion: usize, apps: usize, trace: bool) -> Result<Fixture> {
        let o = ClusterOptions {
            n_mds: 1,
            n_ds: s.n_ds,
            stripe_size: crate::iorchestrator::workloads::STRIPE,
            device_model: s.device,
            // Objects a little apart on the emulated disk, as files of one file system would be.
            reservation: Some(s.per_proc.max(1 << 20) * 4),
            disk_gb: Some(crate::experiments::PAPER_DISK_GB),
            trace,
            window_ms: 500,
            mode: OrchestratorMode::Off,
            n_ion,
            ion_dispatch_depth: s.dispatch_depth,
            hdd_elevator: s.hdd_elevator,
        };
        let cluster = LocalCluster::start(dir, &o).await?;
        let mut via_ion = Vec::with_capacity(s.clients);
        let mut direct = Vec::with_capacity(s.clients);
        let mut groups = HashMap::new();
        for i in 0..s.clients {
            let ion = i * n_ion.max(1) / s.clients;
            via_ion.push(cluster.client_via(Some(ion), "fwd").await?);
            direct.push(cluster.client_via(None, "fwd").await?);
            groups.insert(via_ion[i].client_id(), ion);
            groups.insert(direct[i].client_id(), ion);
        }
        let c = &direct[0];
        c.mkdir_all("/fpp", 0o755).await.map_err(|e| anyhow!("{e}"))?;
        let mut fpp = Vec::with_capacity(s.procs);
        for p in 0..s.procs {
            fpp.push(file_of(c, &format!("/fpp/p{p}"), s.per_proc).await?);
        }
        let mut shared = Vec::new();
        let per_app = s.procs / apps;
        for a in 0..apps {
            shared.push(file_of(c, &format!("/shared{a}"), per_app as u64 * s.per_proc).await?);
        }
        let traces = if trace { cluster.trace_paths() } else { Vec::new() };
        Ok(Fixture { cluster, via_ion, direct, fpp, shared, current: None, traces, groups })
    }

    async fn select(&mut self, sched: &Sched) -> Result<()> {
        if sched.name == "none" || self.current.as_ref() == Some(sched) {
            return Ok(());
        }
        let setting = SchedulerSetting {
            name: sched.name.to_string(),
            window_us: sched.window_ms.map(|w| (w * 1000.0).round() as u64),
            quantum: None,
        };
        self.cluster.set_ion_scheduler(&setting).await?;
        self.current = Some(sched.clone());
        Ok(())
    }

    /// The forwarding nodes' offset distances since they started: (sum, count); zeros when they cannot be
    /// read. An ION's mean is over the requests that followed one to the same server and object: all it
    /// sent but the object switches (and the first per server, which differences of two readings cancel).
    async fn offset_distances(&mut self) -> (f64, u64) {
        let Ok(st) = self.cluster.ion_status().await else { return (0.0, 0) };
        let pairs = |s: &tessera_client::proto::msg::IonStatus| s.dispatched.saturating_sub(s.object_switches);
        let n: u64 = st.iter().map(pairs).sum();
        let sum: f64 = st.iter().map(|s| s.mean_offset_distance * pairs(s) as f64).sum();
        (sum, n)
    }
}

/// Runs one configuration once: (makespan of each app, bytes moved).
async fn run_once(fx: &Fixture, s: &Settings, c: &Config) -> Result<(Vec<f64>, u64)> {
    let clients = if c.sched.name == "none" { &fx.direct } else { &fx.via_ion };
    let per_app = s.procs / c.apps;
    let payload = Bytes::from(vec![0x5au8; c.xfer as usize]);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(s.procs);
    for p in 0..per_app * c.apps {
        let app = p / per_app;
        let rank = p % per_app;
        let client = clients[p * clients.len() / (per_app * c.apps)].clone();
        let (ino, layout) = match c.pattern {
            Pattern::Fpp => fx.fpp[p].clone(),
            _ => fx.shared[app].clone(),
        };
        let offsets = c.pattern.offsets(rank, per_app, s.per_proc, c.xfer);
        let tag =
            IoTag { origin: Origin { job: format!("app{app}"), client: client.client_id(), pid: p as u32 + 1 }, ino };
        let (op, xfer, payload) = (c.op, c.xfer, payload.clone());
        tasks.push(tokio::spawn(async move {
            for off in offsets {
                match op {
                    Op::Read => {
                        client.data().read(&tag, &layout, off, xfer).await?;
                    }
                    Op::Write => {
                        client.data().write(&tag, &layout, off, payload.clone()).await?;
                    }
                }
            }
            Ok::<_, tessera_client::FsError>((app, start.elapsed().as_secs_f64()))
        }));
    }
    let mut ends = vec![0f64; c.apps];
    for t in tasks {
        let (app, end) = t.await.context("a process panicked")?.map_err(|e| anyhow!("{e}"))?;
        ends[app] = ends[app].max(end);
    }
    let bytes = (per_app * c.apps) as u64 * (s.per_proc / c.xfer) * c.xfer;
    Ok((ends, bytes))
}

fn settings(a: &ExperimentArgs) -> Result<Settings> {
    let s = Settings {
        procs: a.procs.unwrap_or(128),
        clients: a.clients.unwrap_or(32),
        n_ds: a.n_ds.unwrap_or(4),
        per_proc: a.file_size.unwrap_or(if a.quick { 1 << 20 } else { 2 << 20 }),
        runs: a.runs.unwrap_or(if a.quick { 1 } else { 3 }),
        device: a.device_model,
        quick: a.quick,
        dispatch_depth: a.dispatch_depth,
        hdd_elevator: a.hdd_elevator,
    };
    if s.procs < 2 || s.clients == 0 || s.n_ds == 0 || s.runs == 0 {
        bail!("--procs (at least 2), --clients, --n-ds and --runs must be positive");
    }
    if s.per_proc < LARGE || s.per_proc % LARGE != 0 {
        bail!("--file-size (bytes per process) must be a multiple of 256 KiB");
    }
    Ok(s)
}

/// Runs a forwarding experiment and writes `OUT/NAME.{json,csv,png}`.
pub async fn run(e: Experiment, a: &ExperimentArgs) -> Result<()> {
    let s = settings(a)?;
    let name = e.name();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let t0 = Instant::now();
    println!(
        "experiment {name}: {} processes over {} clients, {} per process, {} data servers, device model {}{}, {} runs, \
         dispatch depth {}",
        s.procs,
        s.clients,
        format_size(s.per_proc),
        s.n_ds,
        s.device.as_str(),
        s.hdd_elevator.as_ref().map(|e| format!(" (elevator {e})")).unwrap_or_default(),
        s.runs,
        s.dispatch_depth.map_or("default".to_string(), |d| d.to_string())
    );
    let work = tempfile::Builder::new().prefix("tessera-fwd-").tempdir().context("temp dir")?;
    let mut records = Vec::new();
    let mut traced = Vec::new();
    for (n_ion, group) in configs(e, &s) {
        let apps = group.iter().map(|c| c.apps).max().unwrap_or(1);
        let trace = matches!(e, Experiment::Schedulers | Experiment::TwinsWindow);
        let mut fx = Fixture::start(&work.path().join(format!("ions{n_ion}")), &s, n_ion, apps, trace).await?;
        let result = measure(&mut fx, &s, n_ion, &group).await;
        fx.cluster.stop().await;
        let (r, t) = result?;
        records.extend(r);
        traced.extend(t);
    }
    if !traced.is_empty() {
        if let Err(err) = write_traces(&a.out, name, &traced, s.device.as_str()) {
            eprintln!("warning: no {name}-trace outputs: {err:#}");
        }
    }
    crate::experiments::write_outputs(&a.out, name, &records, &csv_text(&records)?)?;
    println!("wrote {}/{name}.json and {name}.csv", a.out.display());
    let png = a.out.join(format!("{name}.png"));
    match plot(e, &records, &png) {
        Ok(()) => println!("wrote {}", png.display()),
        Err(err) => eprintln!("warning: no plot {}: {err:#}", png.display()),
    }
    println!("experiment {name} done in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// The configurations whose first run is traced (when the cluster traces): small strided reads, direct and
/// through the main schedulers — the thesis's headline case.
fn traced_config(c: &Config) -> bool {
    c.pattern == Pattern::Strided
        && c.op == Op::Read
        && c.xfer == SMALL
        && c.apps == 1
        && matches!(c.sched.name, "none" | "fifo" | "hbrr" | "twins")
}

/// A served request as the trace figure draws it: (time µs, address, process group).
type Served = (u64, u64, usize);

/// One traced run: the configuration's label, its forwarding nodes, and each data server's shape and
/// requests in time order.
struct Traced {
    label: String,
    ions: usize,
    per_ds: Vec<(trace::StreamShape, Vec<Served>)>,
}

/// Every configuration of one cluster, in rounds; medians per configuration (and the traced runs).
async fn measure(
    fx: &mut Fixture,
    s: &Settings,
    n_ion: usize,
    group: &[Config],
) -> Result<(Vec<FwdRecord>, Vec<Traced>)> {
    let mut traced = Vec::new();
    let mut samples: Vec<Vec<(Vec<f64>, u64)>> = vec![Vec::new(); group.len()];
    let mut distances: Vec<Vec<f64>> = vec![Vec::new(); group.len()];
    let mut sls: Vec<Vec<f64>> = vec![Vec::new(); group.len()];
    for round in 0..s.runs {
        for (i, c) in group.iter().enumerate() {
            fx.select(&c.sched).await?;
            let forwarded = c.sched.name != "none";
            let (s0, n0) = if forwarded { fx.offset_distances().await } else { (0.0, 0) };
            let mark = (round == 0 && !fx.traces.is_empty() && traced_config(c)).then(|| trace::Mark::now(&fx.traces));
            let (ends, bytes) = run_once(fx, s, c).await?;
            let t_end = trace::unix_us();
            if forwarded {
                let (s1, n1) = fx.offset_distances().await;
                if n1 > n0 {
                    distances[i].push((s1 - s0) / (n1 - n0) as f64);
                }
            }
            // The servers' locality reports come every 100 ms: wait for the one after the run.
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(mark) = mark {
                let group = |cl| fx.groups.get(&cl).copied().unwrap_or(usize::MAX);
                let per_ds = mark
                    .records(&fx.traces, t_end)
                    .await?
                    .iter()
                    .map(|recs| {
                        let served = recs.iter().map(|r| (r.time_us, r.address, group(r.client))).collect();
                        (trace::stream_shape(recs, group), served)
                    })
                    .collect();
                let ions = if forwarded { n_ion } else { 0 };
                traced.push(Traced { label: c.sched.label(), ions, per_ds });
            }
            if let Ok(Some(st)) = fx.cluster.status().await {
                if !st.servers.is_empty() {
                    sls[i].push(st.servers.iter().map(|s| s.1).sum::<f64>() / st.servers.len() as f64);
                }
            }
            let makespan = ends.iter().copied().fold(0.0, f64::max);
            println!(
                "  round {} {:>10} {:>5} {:>4} KiB {} ION(s) {:<12} {:8.1} MiB/s  makespan {:.2} s",
                round + 1,
                c.pattern.as_str(),
                c.op.as_str(),
                c.xfer >> 10,
                n_ion,
                c.sched.label(),
                bytes as f64 / (1 << 20) as f64 / makespan,
                makespan
            );
            samples[i].push((ends, bytes));
        }
    }
    let records = group
        .iter()
        .zip(samples)
        .zip(distances)
        .zip(sls)
        .map(|(((c, runs), dist), sl)| {
            let makespans: Vec<f64> = runs.iter().map(|(e, _)| e.iter().copied().fold(0.0, f64::max)).collect();
            let mib_s: Vec<f64> =
                runs.iter().zip(&makespans).map(|((_, b), m)| *b as f64 / (1 << 20) as f64 / m).collect();
            let app_makespans_s = (c.apps > 1)
                .then(|| (0..c.apps).map(|a| median(&runs.iter().map(|(e, _)| e[a]).collect::<Vec<_>>())).collect());
            FwdRecord {
                pattern: c.pattern.as_str().into(),
                op: c.op.as_str().into(),
                request_kib: c.xfer >> 10,
                scheduler: c.sched.name.into(),
                ions: if c.sched.name == "none" { 0 } else { n_ion },
                window_ms: c.sched.window_ms,
                device_model: s.device.as_str().into(),
                throughput_mib_s: median(&mib_s),
                makespan_s: median(&makespans),
                runs: runs.len() as u32,
                app_makespans_s,
                ion_offset_distance: (!dist.is_empty()).then(|| median(&dist)),
                ds_sl_bytes: (!sl.is_empty()).then(|| median(&sl)),
                hdd_elevator: s.hdd_elevator.map(|e| e.to_string()),
            }
        })
        .collect();
    Ok((records, traced))
}

/// One line of NAME-trace.json: the stream one data server served in a traced run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TraceShapeRecord {
    pub scheduler: String,
    pub ions: usize,
    pub data_server: usize,
    pub device_model: String,
    #[serde(flatten)]
    pub shape: trace::StreamShape,
}

/// `NAME-trace.{json,png}`: per data server, the shape of the stream it served in each traced run
/// (address gaps, contiguity, how often the process group changed), and the addresses data server 0
/// served over 100 ms of each run, coloured by process group (the ION the group goes through).
fn write_traces(out: &Path, name: &str, traced: &[Traced], device: &str) -> Result<()> {
    let mut rows = Vec::new();
    for t in traced {
        for (ds, (shape, _)) in t.per_ds.iter().enumerate() {
            rows.push(TraceShapeRecord {
                scheduler: t.label.clone(),
                ions: t.ions,
                data_server: ds,
                device_model: device.to_string(),
                shape: shape.clone(),
            });
        }
    }
    let json = out.join(format!("{name}-trace.json"));
    std::fs::write(&json, serde_json::to_string_pretty(&rows)?)
        .with_context(|| format!("writing {}", json.display()))?;
    println!("wrote {}", json.display());
    for t in traced {
        let n = t.per_ds.len().max(1) as f64;
        let mean = |f: fn(&trace::StreamShape) -> f64| t.per_ds.iter().map(|(s, _)| f(s)).sum::<f64>() / n;
        println!(
            "  trace {:<12} mean over servers: gap {:7.1} KiB (median {:6.1}), contiguous {:4.1}%, group switches {:4.1}%",
            t.label,
            mean(|s| s.mean_gap_kib),
            mean(|s| s.median_gap_kib),
            100.0 * mean(|s| s.contiguous_fraction),
            100.0 * mean(|s| s.source_switch_fraction)
        );
    }
    let groups = traced.iter().map(|t| t.ions).max().unwrap_or(1).max(1);
    let names: Vec<String> = (0..groups).map(|g| format!("processes of ION {g}")).collect();
    let mut panels = Vec::new();
    for t in traced {
        let Some((shape, recs)) = t.per_ds.first() else { continue };
        let (Some(first), Some(last)) = (recs.first(), recs.last()) else { continue };
        // 100 ms from a quarter into the run (steady state); addresses from the lowest one served then.
        let from = first.0 + (last.0 - first.0) / 4;
        let window: Vec<&Served> =
            recs.iter().filter(|r| r.0 >= from && r.0 < from + 100_000 && r.2 < groups).collect();
        let base = window.iter().map(|r| r.1).min().unwrap_or(0);
        let pts = window.iter().map(|&&(t, a, g)| ((t - from) as f64 / 1e3, (a - base) as f64 / 1024.0, g)).collect();
        panels.push((
            format!(
                "{}: gap {:.0} KiB, {:.0}% switches",
                t.label,
                shape.mean_gap_kib,
                100.0 * shape.source_switch_fraction
            ),
            pts,
        ));
    }
    let png = out.join(format!("{name}-trace.png"));
    plots::scatter_panels(
        &png,
        &format!("Addresses served by data server 0 over 100 ms, 32 KiB strided reads ({device} device model)"),
        "time (ms)",
        "address − lowest (KiB)",
        &names,
        &panels,
    )?;
    println!("wrote {}", png.display());
    Ok(())
}

pub fn csv_text(records: &[FwdRecord]) -> Result<String> {
    let header = [
        "pattern",
        "op",
        "request_kib",
        "scheduler",
        "ions",
        "window_ms",
        "device_model",
        "throughput_mib_s",
        "makespan_s",
        "runs",
        "ion_offset_distance",
        "ds_sl_bytes",
    ];
    crate::report::csv_text(
        &header,
        records.iter().map(|r| {
            [
                r.pattern.to_string(),
                r.op.to_string(),
                r.request_kib.to_string(),
                r.scheduler.to_string(),
                r.ions.to_string(),
                r.window_ms.map(|w| w.to_string()).unwrap_or_default(),
                r.device_model.to_string(),
                format!("{:.3}", r.throughput_mib_s),
                format!("{:.4}", r.makespan_s),
                r.runs.to_string(),
                r.ion_offset_distance.map(|d| format!("{d:.0}")).unwrap_or_default(),
                r.ds_sl_bytes.map(|d| format!("{d:.0}")).unwrap_or_default(),
            ]
        }),
    )
}

/// A scheduler as figures and progress lines name it: TWINS with its window.
fn sched_label(name: &str, window_ms: Option<f64>) -> String {
    match (name, window_ms) {
        ("twins", Some(w)) => format!("twins {w} ms"),
        (n, _) => n.to_string(),
    }
}

fn label(r: &FwdRecord) -> String {
    sched_label(&r.scheduler, r.window_ms)
}

/// Throughput bars: one panel per (op, request size) — per pattern for fwd-ions — with the schedulers as
/// series.
pub fn plot(e: Experiment, records: &[FwdRecord], png: &Path) -> Result<()> {
    let device = records.first().map(|r| r.device_model.clone()).unwrap_or_default();
    let series_names = uniq(records.iter().map(label));
    let mut panels = Vec::new();
    let keys = uniq(records.iter().map(|r| format!("{} {} KiB", r.op, r.request_kib)));
    for key in &keys {
        let rs: Vec<&FwdRecord> =
            records.iter().filter(|r| format!("{} {} KiB", r.op, r.request_kib) == *key).collect();
        let group_of = |r: &FwdRecord| match e {
            Experiment::Ions => format!("{} · {} ION(s)", r.pattern, ion_count(records, r)),
            _ => r.pattern.clone(),
        };
        let groups = uniq(rs.iter().map(|r| group_of(r)));
        let series = series_names
            .iter()
            .map(|sname| {
                let v = groups
                    .iter()
                    .map(|g| {
                        rs.iter()
                            .find(|r| label(r) == *sname && group_of(r) == *g)
                            .map_or(f64::NAN, |r| r.throughput_mib_s)
                    })
                    .collect();
                (sname.clone(), v)
            })
            .collect();
        panels.push(BarPanel { title: key.clone(), groups, series });
    }
    plots::grouped_bars(png, &format!("{} ({device} device model)", e.name()), "MiB/s", &panels)
}

/// The forwarding nodes of the cluster a record was measured on ("none" records carry 0: the cluster's
/// count is the one of the other records measured with it, in order).
fn ion_count(records: &[FwdRecord], r: &FwdRecord) -> usize {
    if r.ions > 0 {
        return r.ions;
    }
    let i = records.iter().position(|x| std::ptr::eq(x, r)).unwrap_or(0);
    records[i..]
        .iter()
        .find(|x| x.ions > 0 && x.pattern == r.pattern && x.request_kib == r.request_kib)
        .map_or(0, |x| x.ions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_place_requests_as_the_thesis_does() {
        let xfer = 32 << 10;
        let per_proc = 4 * xfer;
        assert_eq!(Pattern::Fpp.offsets(3, 8, per_proc, xfer), vec![0, xfer, 2 * xfer, 3 * xfer]);
        assert_eq!(Pattern::Contiguous.offsets(3, 8, per_proc, xfer)[0], 3 * per_proc);
        // Process 3 of 8: requests at (k*8 + 3) * xfer.
        assert_eq!(Pattern::Strided.offsets(3, 8, per_proc, xfer), vec![3 * xfer, 11 * xfer, 19 * xfer, 27 * xfer]);
        // Together the processes cover the shared file exactly once.
        for pat in [Pattern::Contiguous, Pattern::Strided] {
            let mut all: Vec<u64> = (0..8).flat_map(|p| pat.offsets(p, 8, per_proc, xfer)).collect();
            all.sort_unstable();
            assert_eq!(all, (0..32).map(|k| k * xfer).collect::<Vec<_>>(), "{pat:?}");
        }
    }

    #[test]
    fn quick_runs_the_main_effect_and_full_runs_everything() {
        let s = Settings {
            procs: 128,
            clients: 32,
            n_ds: 4,
            per_proc: 1 << 20,
            runs: 1,
            device: DeviceKind::Hdd,
            quick: true,
            dispatch_depth: None,
            hdd_elevator: None,
        };
        let q = configs(Experiment::Schedulers, &s);
        assert_eq!(q[0].0, 4);
        assert!(q[0].1.iter().any(|c| c.sched.name == "twins" && c.pattern == Pattern::Strided && c.xfer == SMALL));
        assert!(q[0].1.iter().any(|c| c.sched.name == "none"));
        let full = configs(Experiment::Schedulers, &Settings { quick: false, ..s.clone() });
        assert_eq!(full[0].1.len(), 3 * 2 * 2 * 9);
        assert_eq!(configs(Experiment::Ions, &s).iter().map(|g| g.0).collect::<Vec<_>>(), vec![1, 2, 4]);
        let w = configs(Experiment::TwinsWindow, &s);
        let windows: Vec<Option<f64>> =
            w[0].1.iter().filter(|c| c.sched.name == "twins").map(|c| c.sched.window_ms).collect();
        assert_eq!(windows, vec![Some(0.125), Some(1.0), Some(8.0)]);
        assert!(configs(Experiment::TwoApps, &s)[0].1.iter().all(|c| c.apps == 2));
    }

    #[test]
    fn records_serialise_with_the_issue_s_fields_and_plot() {
        let r = FwdRecord {
            pattern: "strided".into(),
            op: "read".into(),
            request_kib: 32,
            scheduler: "twins".into(),
            ions: 4,
            window_ms: Some(1.0),
            device_model: "hdd".into(),
            throughput_mib_s: 50.0,
            makespan_s: 2.0,
            runs: 3,
            app_makespans_s: None,
            ion_offset_distance: Some(4096.0),
            ds_sl_bytes: Some(65536.0),
            hdd_elevator: None,
        };
        let v = serde_json::to_value(&r).unwrap();
        for k in [
            "pattern",
            "op",
            "request_kib",
            "scheduler",
            "ions",
            "window_ms",
            "device_model",
            "throughput_mib_s",
            "makespan_s",
            "runs",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        let none =
            FwdRecord { scheduler: "none".into(), ions: 0, window_ms: None, throughput_mib_s: 30.0, ..r.clone() };
        assert!(serde_json::to_value(&none).unwrap()["window_ms"].is_null());
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("f.png");
        plot(Experiment::Schedulers, &[none.clone(), r.clone()], &png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        plot(Experiment::Ions, &[none, r], &png).unwrap();
        assert!(csv_text(&[]).unwrap().starts_with("pattern,op,request_kib"));
    }
}
