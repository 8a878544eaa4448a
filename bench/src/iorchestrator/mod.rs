//! `tessera-bench experiment NAME`: the IOrchestrator paper's figures on a local cluster this command
//! starts itself (6 data servers, 64 KiB stripes over all of them, emulated hdd unless asked otherwise).
//! Each configuration runs with orchestration off and on (and even where the figure has it), `--runs`
//! times; the medians go to `OUT/NAME.csv`, `OUT/NAME.json` and `OUT/NAME.png`.
//!
//! Measurement decisions: programs run for a fixed time (all programs of a configuration start together
//! and stop at the same deadline), so co-runners always overlap; a program's throughput is its bytes over
//! its own elapsed time, the system throughput all bytes over the span from the common start to the last
//! program's end. Data files are written once per cluster (write runs overwrite them in place, so their
//! addresses never change) and object-file pages are dropped from the page cache before every run.

pub mod trace; // lba-trace.csv parsing: LBA over time and reuse distances per program
pub mod workloads; // the paper's five benchmarks as access plans, and their runner

use crate::experiments::{uniq, write_outputs, ExperimentArgs, ExperimentName, Variant};
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::plots::{self, BarPanel};
use crate::report::median;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_client::proto::msg::{OrchestratorMode, OrchestratorStatus};
use tessera_proto::config::DeviceKind;
use tessera_proto::units::format_size;
use workloads::{Kind, Limit, Op, Program, Spec, STRIPE};

/// One line of NAME.json / NAME.csv (medians over `runs`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    pub benchmark: String,
    pub op: String,
    pub mode: String,
    /// Distance in GB (iorch-distance) or window in ms (iorch-window); null otherwise.
    pub param: Option<f64>,
    pub device_model: String,
    pub throughput_mib_s: f64,
    pub runs: u32,
}

pub fn csv_text(records: &[Record]) -> Result<String> {
    crate::report::csv_text(
        &["benchmark", "op", "mode", "param", "device_model", "throughput_mib_s", "runs"],
        records.iter().map(|r| {
            let param = r.param.map(|p| p.to_string()).unwrap_or_default();
            let t = format!("{:.3}", r.throughput_mib_s);
            [r.benchmark.clone(), r.op.clone(), r.mode.clone(), param, r.device_model.clone(), t, r.runs.to_string()]
        }),
    )
}

/// Writes OUT/NAME.json and OUT/NAME.csv.
pub fn write_records(out: &Path, name: &str, records: &[Record]) -> Result<()> {
    write_outputs(out, name, records, &csv_text(records)?)
}

/// Resolved sizes and times of an experiment.
#[derive(Clone, Debug)]
struct Settings {
    runs: u32,
    seconds: f64,
    file_size: u64,
    procs: usize,
    n_ds: usize,
    device: DeviceKind,
    out: PathBuf,
    quick: bool,
    disk_gb: Option<f64>,
}

impl Settings {
    fn of(a: &ExperimentArgs) -> Result<Settings> {
        let s = Settings {
            runs: a.runs.unwrap_or(if a.quick { 1 } else { 3 }),
            seconds: a.seconds.unwrap_or(if a.quick { 2.5 } else { 15.0 }),
            file_size: a.file_size.unwrap_or(if a.quick { 128 << 20 } else { 1 << 30 }),
            procs: a.procs.unwrap_or(5),
            n_ds: a.n_ds.unwrap_or(6),
            device: a.device_model,
            out: a.out.clone(),
            quick: a.quick,
            disk_gb: (a.disk_gb > 0.0).then_some(a.disk_gb),
        };
        if !a.disk_gb.is_finite() || a.disk_gb < 0.0 {
            bail!("--disk-gb must be a capacity in GB (0: the configuration's default)");
        }
        if s.runs == 0 || s.n_ds == 0 || s.procs == 0 || !(s.seconds > 0.0 && s.seconds.is_finite()) {
            bail!("--runs, --n-ds, --procs and --seconds must be positive");
        }
        Ok(s)
    }

    fn cluster_options(&self, reservation: u64, trace: bool, window_ms: u32) -> ClusterOptions {
        ClusterOptions {
            n_mds: 1,
            n_ds: self.n_ds,
            stripe_size: STRIPE,
            device_model: self.device,
            reservation: Some(reservation),
            disk_gb: self.disk_gb,
            trace,
            window_ms,
            mode: OrchestratorMode::Off,
            n_ion: 0,
            ion_dispatch_depth: None,
            hdd_elevator: None,
        }
    }

    /// Bytes of one file on one data server, rounded up to whole MiB: the reservation that packs files
    /// back to back (the paper's 0 GB distance).
    fn object_span(&self) -> u64 {
        let per = self.file_size.div_ceil(self.n_ds as u64);
        per.div_ceil(1 << 20).max(1) << 20
    }

    fn limit(&self) -> Limit {
        Limit { time: Some(Duration::from_secs_f64(self.seconds)), bytes: None }
    }
}

/// A running experiment: the cluster, the programs' files, and what was learned about the orchestrator.
struct Session {
    cluster: LocalCluster,
    settings: Settings,
    files: Vec<String>,
    configs_done: usize,
}

/// What one configuration measured (medians over runs).
struct Measured {
    /// Per program (same order as given).
    programs: Vec<f64>,
    system: f64,
    runs: Vec<workloads::RunResult>,
    /// (DS index, trace records of that server during run 0) when tracing.
    traces: Vec<Vec<trace::TraceRecord>>,
}

impl Session {
    async fn start(settings: &Settings, name: &str, opts: ClusterOptions, n_files: usize) -> Result<Session> {
        let dir = settings.out.join(format!(".cluster-{name}"));
        println!(
            "starting a cluster of {} data servers (device model {}{}, window {} ms, reservation {}) in {}",
            opts.n_ds,
            opts.device_model,
            opts.disk_gb
                .filter(|_| opts.device_model == DeviceKind::Hdd)
                .map(|gb| format!(" {gb} GB"))
                .unwrap_or_default(),
            opts.window_ms,
            format_size(opts.reservation.unwrap_or(0)),
            dir.display()
        );
        let cluster = LocalCluster::start(&dir, &opts).await?;
        let mut s = Session { cluster, settings: settings.clone(), files: Vec::new(), configs_done: 0 };
        if let Err(e) = s.prepare_files(n_files).await {
            s.cluster.stop().await;
            return Err(e);
        }
        Ok(s)
    }

    /// Writes the programs' files one after the other, so their objects are allocated in order.
    async fn prepare_files(&mut self, n: usize) -> Result<()> {
        let c = self.cluster.client("iorch-prepare").await?;
        let t = std::time::Instant::now();
        for i in 0..n {
            let path = format!("/iorch/file{i}.dat");
            workloads::prepare_file(&c, &path, self.settings.file_size).await?;
            self.files.push(path);
        }
        println!(
            "prepared {n} files of {} in {:.1} s",
            format_size(self.settings.file_size),
            t.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Runs `specs` (program i on file i) concurrently in `mode`, `runs` times.
    async fn measure(
        &mut self,
        specs: &[(String, Spec)],
        op: Op,
        mode: OrchestratorMode,
        trace: bool,
    ) -> Result<(Measured, Option<OrchestratorStatus>)> {
        self.cluster.set_mode(mode).await?;
        // Let the previous configuration's jobs go idle and the new mode take hold.
        tokio::time::sleep(Duration::from_millis(if self.settings.quick { 600 } else { 1500 })).await;
        let mut programs = Vec::new();
        for (i, (name, spec)) in specs.iter().enumerate() {
            let client = self.cluster.client(&format!("{name}#{i}")).await?;
            programs.push(Program { name: name.clone(), client, path: self.files[i].clone(), spec: *spec });
        }
        let traces_paths = self.cluster.trace_paths();
        let mut runs = Vec::new();
        let mut traces = Vec::new();
        let mut status = None;
        for run in 0..self.settings.runs {
            self.cluster.drop_caches();
            let limit = self.settings.limit();
            let probe_after = Duration::from_secs_f64(self.settings.seconds * 0.7);
            let admin = self.cluster.admin_cfg.clone();
            let want_status = mode != OrchestratorMode::Off;
            let probe = tokio::spawn(async move {
                tokio::time::sleep(probe_after).await;
                if !want_status {
                    return None;
                }
                probe_status(&admin).await
            });
            let mark = (trace && run == 0).then(|| trace::Mark::now(&traces_paths));
            let r = workloads::run_programs(&programs, op, limit).await?;
            let t_end = trace::unix_us();
            if let Ok(Some(s)) = probe.await {
                status = Some(s);
            }
            if let Some(mark) = mark {
                traces = mark.records(&traces_paths, t_end).await?;
            }
            runs.push(r);
        }
        let per_prog =
            (0..specs.len()).map(|i| median(&runs.iter().map(|r| r.programs[i].mib_s()).collect::<Vec<_>>())).collect();
        let system = median(&runs.iter().map(system_mib_s).collect::<Vec<_>>());
        self.configs_done += 1;
        Ok((Measured { programs: per_prog, system, runs, traces }, status))
    }
}

async fn probe_status(admin_cfg: &tessera_client::ClusterConfig) -> Option<OrchestratorStatus> {
    use tessera_client::proto::msg::{MdsReply, MdsRequest};
    let c = tessera_client::Client::connect(admin_cfg).await.ok()?;
    match c.mds().call(MdsRequest::OrchestratorStatus).await {
        Ok(MdsReply::Orchestrator(s)) => Some(s),
        _ => None,
    }
}

/// One line about what the orchestrator decided.
fn status_line(s: &OrchestratorStatus) -> String {
    let eligible: Vec<&str> = s.jobs.iter().filter(|j| j.eligible).map(|j| j.job.as_str()).collect();
    let plan: Vec<String> = s.plan.iter().map(|p| format!("{}:{:.0}ms", p.label, p.slice_ms)).collect();
    let skew = s.median_switch_skew_us.map(|u| format!("{u} us")).unwrap_or_else(|| "-".into());
    format!("eligible [{}], plan [{}], median switch skew {skew}", eligible.join(", "), plan.join(", "))
}

fn runs_text(m: &Measured) -> String {
    let v: Vec<String> = m.runs.iter().map(|r| format!("{:.1}", system_mib_s(r))).collect();
    v.join(", ")
}

/// The system's throughput in one run: the sum of the programs' throughputs, each over its own time.
///
/// Not total bytes over the time to the last program's end: a program stops at the limit only between
/// two of its I/O calls, and one noncontig call (8 MiB in 4 KiB requests) outlasts a 5 s limit by 1–3 s,
/// so that quotient divided the other programs' bytes by noncontig's overrun — and the more time the
/// orchestrator gave the others, the longer the overrun. The two agree when programs end together.
pub fn system_mib_s(r: &workloads::RunResult) -> f64 {
    r.programs.iter().map(|p| p.mib_s()).sum()
}

/// The IOrchestrator paper's experiments (the registry, [`crate::experiments::run`], sends them here).
pub async fn run(a: &ExperimentArgs) -> Result<()> {
    let a = a.clone();
    let s = Settings::of(&a)?;
    std::fs::create_dir_all(&s.out).with_context(|| format!("creating {}", s.out.display()))?;
    let t0 = std::time::Instant::now();
    let name = a.name.as_str();
    println!(
        "experiment {name}: {} runs of {:.1} s per configuration, files of {}, {} processes per program, device model {}",
        s.runs,
        s.seconds,
        format_size(s.file_size),
        s.procs,
        s.device.as_str()
    );
    let records = match a.name {
        ExperimentName::IorchHomogeneous => homogeneous(&a, &s, true).await?,
        ExperimentName::IorchTrace => homogeneous(&a, &s, false).await?,
        ExperimentName::IorchHeterogeneous => heterogeneous(&s).await?,
        ExperimentName::IorchDistance => distance(&s).await?,
        ExperimentName::IorchWindow => window(&s).await?,
        other => bail!("{} is not an IOrchestrator experiment", other.as_str()),
    };
    if a.name != ExperimentName::IorchTrace {
        write_records(&s.out, name, &records)?;
        println!("wrote {}/{name}.json and {name}.csv", s.out.display());
        let png = s.out.join(format!("{name}.png"));
        match plot(a.name, &records, &png, s.device.as_str()) {
            Ok(()) => println!("wrote {}", png.display()),
            Err(e) => eprintln!("warning: no plot {}: {e:#}", png.display()),
        }
    }
    println!("experiment {name} done in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

async fn finish(mut sess: Session) {
    sess.cluster.stop().await;
}

/// Figs. 2/5/6 (and 3/4 from the trace of the first mpi-io-test read configuration).
async fn homogeneous(a: &ExperimentArgs, s: &Settings, bars: bool) -> Result<Vec<Record>> {
    let kinds: Vec<Kind> = if !bars {
        vec![Kind::MpiIoTest]
    } else if a.benchmarks.is_empty() {
        Kind::ALL.to_vec()
    } else {
        a.benchmarks.clone()
    };
    let variants: Vec<Variant> = if !bars {
        vec![Variant::Barrier]
    } else if a.variants.is_empty() {
        if s.quick {
            vec![Variant::Barrier]
        } else {
            vec![Variant::Barrier, Variant::Collective, Variant::NoBarrier]
        }
    } else {
        a.variants.clone()
    };
    let ops: Vec<Op> = if !bars {
        vec![Op::Read]
    } else if a.ops.is_empty() {
        vec![Op::Read, Op::Write]
    } else {
        a.ops.clone()
    };
    let modes = [OrchestratorMode::Off, OrchestratorMode::IOrchestrator];
    let mut sess = Session::start(s, "homogeneous", s.cluster_options(s.object_span(), true, 500), 2).await?;
    let total = kinds.len() * variants.len() * ops.len() * modes.len();
    let mut records = Vec::new();
    let mut traced: Vec<(OrchestratorMode, Vec<Vec<trace::TraceRecord>>, String)> = Vec::new();
    let res: Result<()> = async {
        for &v in &variants {
            for &op in &ops {
                for &kind in &kinds {
                    let spec = Spec {
                        kind,
                        procs: s.procs,
                        file_size: s.file_size,
                        barrier: v != Variant::NoBarrier,
                        collective: v == Variant::Collective,
                    };
                    let label = format!("{}{}", kind.label(), v.suffix());
                    let specs = vec![(kind.label().to_string(), spec), (kind.label().to_string(), spec)];
                    let want_trace = kind == Kind::MpiIoTest && op == Op::Read && v == Variant::Barrier;
                    for &mode in &modes {
                        let (m, st) = sess.measure(&specs, op, mode, want_trace).await?;
                        println!(
                            "[{}/{total}] {label} {} x2, {}: {:.1} MiB/s (A {:.1}, B {:.1}; runs: {}){}",
                            sess.configs_done,
                            op.as_str(),
                            mode.as_str(),
                            m.system,
                            m.programs[0],
                            m.programs[1],
                            runs_text(&m),
                            st.map(|s| format!("\n      orchestrator: {}", status_line(&s))).unwrap_or_default()
                        );
                        if want_trace {
                            traced.push((mode, m.traces, format!("{}#0", kind.label())));
                        }
                        records.push(Record {
                            benchmark: label.clone(),
                            op: op.as_str().into(),
                            mode: mode.as_str().into(),
                            param: None,
                            device_model: s.device.as_str().into(),
                            throughput_mib_s: m.system,
                            runs: s.runs,
                        });
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    finish(sess).await;
    res?;
    if let Err(e) = trace_figures(&s.out, &traced, s.seconds, s.device.as_str()) {
        eprintln!("warning: no trace figures: {e:#}");
    }
    Ok(records)
}

/// Figs. 3 and 4 from the traced mpi-io-test read runs: LBA over time and the reuse distances of one
/// program, at one data server (the fifth, as in the paper, or the last if fewer).
fn trace_figures(
    out: &Path,
    traced: &[(OrchestratorMode, Vec<Vec<trace::TraceRecord>>, String)],
    seconds: f64,
    device: &str,
) -> Result<()> {
    let Some(first) = traced.first() else { return Ok(()) };
    let n = first.1.len();
    if n == 0 || traced.iter().all(|t| t.1.iter().all(Vec::is_empty)) {
        bail!("the data servers wrote no lba-trace.csv records (ds_options.trace not supported yet?)");
    }
    let ds = 4.min(n - 1);
    // A one-second sample after the orchestrator had time to learn (or the whole run if shorter).
    let (from, to) = if seconds >= 2.5 { (1.0, 2.0) } else { (0.0, seconds) };
    let mut jobs: Vec<String> = Vec::new();
    let mut panels = Vec::new();
    let mut hists = Vec::new();
    let edges = [0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, f64::INFINITY];
    let max_addr = traced.iter().flat_map(|t| t.1.get(ds).into_iter().flatten()).map(|r| r.address).max().unwrap_or(0);
    let (unit, div) = if max_addr > 4 << 30 { ("GiB", (1u64 << 30) as f64) } else { ("MiB", (1u64 << 20) as f64) };
    for (mode, per_ds, job0) in traced {
        let recs = &per_ds[ds];
        let t0 = recs.iter().map(|r| r.time_us).min().unwrap_or(0);
        let mut pts = Vec::new();
        for r in recs {
            let t = (r.time_us - t0) as f64 / 1e6;
            if t < from || t > to {
                continue;
            }
            let j = match jobs.iter().position(|x| *x == r.job) {
                Some(j) => j,
                None => {
                    jobs.push(r.job.clone());
                    jobs.len() - 1
                }
            };
            pts.push((t - from, r.address as f64 / div, j));
        }
        let label = if *mode == OrchestratorMode::Off { "without IOrchestrator" } else { "with IOrchestrator" };
        panels.push((format!("{label} ({device})"), pts));
        hists.push((format!("{label}: {job0}"), trace::histogram(&trace::reuse_distances_ms(recs, job0), &edges)));
    }
    let lba = out.join("iorch-lba-trace.png");
    plots::scatter_panels(
        &lba,
        &format!("Fig. 3: addresses served at data server {ds}, two mpi-io-test instances (read, barrier)"),
        "time (s)",
        &format!("address ({unit})"),
        &jobs,
        &panels,
    )?;
    println!("wrote {}", lba.display());
    let labels: Vec<String> =
        ["<1", "1-2", "2-5", "5-10", "10-20", "20-50", ">50"].iter().map(|s| s.to_string()).collect();
    let rd = out.join("iorch-reuse-distance.png");
    plots::histogram_panels(
        &rd,
        &format!("Fig. 4: reuse distances of one mpi-io-test instance at data server {ds}"),
        "reuse distance (ms)",
        &labels,
        &hists,
    )?;
    println!("wrote {}", rd.display());
    Ok(())
}

/// Fig. 7.
async fn heterogeneous(s: &Settings) -> Result<Vec<Record>> {
    let mk = |kind| Spec { kind, procs: s.procs, file_size: s.file_size, barrier: true, collective: false };
    let specs: Vec<(String, Spec)> =
        [Kind::MpiIoTest, Kind::Noncontig, Kind::Hpio].into_iter().map(|k| (k.label().to_string(), mk(k))).collect();
    let modes = [OrchestratorMode::Off, OrchestratorMode::Even, OrchestratorMode::IOrchestrator];
    let mut sess = Session::start(s, "heterogeneous", s.cluster_options(s.object_span(), false, 500), 3).await?;
    let mut records = Vec::new();
    let res: Result<()> = async {
        for &mode in &modes {
            let (m, st) = sess.measure(&specs, Op::Read, mode, false).await?;
            let parts: Vec<String> = specs.iter().zip(&m.programs).map(|((n, _), v)| format!("{n} {v:.1}")).collect();
            println!(
                "[{}/{}] heterogeneous read, {}: system {:.1} MiB/s ({}; runs: {}){}",
                sess.configs_done,
                modes.len(),
                mode.as_str(),
                m.system,
                parts.join(", "),
                runs_text(&m),
                st.map(|s| format!("\n      orchestrator: {}", status_line(&s))).unwrap_or_default()
            );
            let rec = |benchmark: String, v: f64| Record {
                benchmark,
                op: "read".into(),
                mode: mode.as_str().into(),
                param: None,
                device_model: s.device.as_str().into(),
                throughput_mib_s: v,
                runs: s.runs,
            };
            for ((n, _), v) in specs.iter().zip(&m.programs) {
                records.push(rec(n.clone(), *v));
            }
            records.push(rec("system".into(), m.system));
        }
        Ok(())
    }
    .await;
    finish(sess).await;
    res?;
    Ok(records)
}

/// Fig. 8: one cluster per distance (the reservation sets where the second file starts).
async fn distance(s: &Settings) -> Result<Vec<Record>> {
    let gbs: Vec<u64> = vec![0, 10, 20, 30];
    let spec = Spec { kind: Kind::MpiIoTest, procs: s.procs, file_size: s.file_size, barrier: true, collective: false };
    let specs = vec![("mpi-io-test".to_string(), spec), ("mpi-io-test".to_string(), spec)];
    let modes = [OrchestratorMode::Off, OrchestratorMode::IOrchestrator];
    let mut records = Vec::new();
    let total = gbs.len() * modes.len();
    let mut done = 0;
    for &gb in &gbs {
        let reservation = s.object_span() + gb * 1_000_000_000;
        let mut sess = Session::start(s, "distance", s.cluster_options(reservation, false, 500), 2).await?;
        let res: Result<()> = async {
            for &mode in &modes {
                let measured = sess.measure(&specs, Op::Read, mode, false).await?;
                done += 1;
                let what = format!("[{done}/{total}] 2x mpi-io-test read, files {gb} GB apart, {}", mode.as_str());
                records.push(mpi_io_pair_record(s, &what, mode, Some(gb as f64), measured));
            }
            Ok(())
        }
        .await;
        finish(sess).await;
        res?;
    }
    Ok(records)
}

/// Fig. 9: one cluster per window (the window is a start-up setting), plus the vanilla baseline.
async fn window(s: &Settings) -> Result<Vec<Record>> {
    let windows: [u32; 4] = [125, 250, 500, 1000];
    let spec = Spec { kind: Kind::MpiIoTest, procs: s.procs, file_size: s.file_size, barrier: true, collective: false };
    let specs = vec![("mpi-io-test".to_string(), spec), ("mpi-io-test".to_string(), spec)];
    let mut records = Vec::new();
    let total = windows.len() + 1;
    let mut done = 0;
    let mut configs: Vec<(OrchestratorMode, Option<u32>)> = vec![(OrchestratorMode::Off, None)];
    configs.extend(windows.iter().map(|&w| (OrchestratorMode::IOrchestrator, Some(w))));
    for (mode, w) in configs {
        let opts = s.cluster_options(s.object_span(), false, w.unwrap_or(500));
        let mut sess = Session::start(s, "window", opts, 2).await?;
        let res = sess.measure(&specs, Op::Read, mode, false).await;
        finish(sess).await;
        done += 1;
        let window = w.map(|w| format!(", window {w} ms")).unwrap_or_default();
        let what = format!("[{done}/{total}] 2x mpi-io-test read, {}{window}", mode.as_str());
        records.push(mpi_io_pair_record(s, &what, mode, w.map(f64::from), res?));
    }
    Ok(records)
}

/// Prints the progress line of one two-mpi-io-test read configuration (`what`) and returns its record.
fn mpi_io_pair_record(
    s: &Settings,
    what: &str,
    mode: OrchestratorMode,
    param: Option<f64>,
    (m, st): (Measured, Option<OrchestratorStatus>),
) -> Record {
    println!(
        "{what}: {:.1} MiB/s (runs: {}){}",
        m.system,
        runs_text(&m),
        st.map(|s| format!("\n      orchestrator: {}", status_line(&s))).unwrap_or_default()
    );
    Record {
        benchmark: "mpi-io-test x2".into(),
        op: "read".into(),
        mode: mode.as_str().into(),
        param,
        device_model: s.device.as_str().into(),
        throughput_mib_s: m.system,
        runs: s.runs,
    }
}

fn value(records: &[Record], bench: &str, op: &str, mode: &str, param: Option<f64>) -> f64 {
    records
        .iter()
        .find(|r| r.benchmark == bench && r.op == op && r.mode == mode && r.param == param)
        .map(|r| r.throughput_mib_s)
        .unwrap_or(f64::NAN)
}

fn mode_name(m: &str) -> String {
    match m {
        "off" => "without IOrchestrator (vanilla)".into(),
        "even" => "even time slicing".into(),
        "iorchestrator" => "with IOrchestrator".into(),
        o => o.into(),
    }
}

/// The figure of an experiment from its records.
pub fn plot(name: ExperimentName, records: &[Record], png: &Path, device: &str) -> Result<()> {
    let modes = uniq(records.iter().map(|r| r.mode.as_str()));
    match name {
        ExperimentName::IorchHomogeneous | ExperimentName::IorchHeterogeneous | ExperimentName::IorchTrace => {
            // One panel per (variant, op); groups are benchmarks.
            let mut panels = Vec::new();
            let variants = uniq(records.iter().map(|r| r.benchmark.split(" [").nth(1).unwrap_or("")));
            for v in &variants {
                for op in uniq(records.iter().map(|r| r.op.as_str())) {
                    let benches = uniq(
                        records
                            .iter()
                            .filter(|r| r.op == op && r.benchmark.split(" [").nth(1).unwrap_or("") == v)
                            .map(|r| r.benchmark.as_str()),
                    );
                    if benches.is_empty() {
                        continue;
                    }
                    let series = modes
                        .iter()
                        .map(|m| (mode_name(m), benches.iter().map(|b| value(records, b, &op, m, None)).collect()))
                        .collect();
                    let vt = if v.is_empty() {
                        if name == ExperimentName::IorchHeterogeneous {
                            "run together, barrier".to_string()
                        } else {
                            "barrier".to_string()
                        }
                    } else {
                        v.trim_end_matches(']').to_string()
                    };
                    panels.push(BarPanel {
                        title: format!("{op}, {vt}"),
                        groups: benches.iter().map(|b| b.split(" [").next().unwrap_or(b).to_string()).collect(),
                        series,
                    });
                }
            }
            let title = if name == ExperimentName::IorchHeterogeneous {
                format!("Fig. 7: mpi-io-test + noncontig(nc) + hpio(nc) together (device model {device})")
            } else {
                format!("Figs. 2/5/6: aggregate throughput of two instances of each benchmark (device model {device})")
            };
            plots::grouped_bars(png, &title, "throughput (MiB/s)", &panels)
        }
        ExperimentName::IorchDistance => {
            let series: Vec<(String, Vec<(f64, f64)>)> = modes
                .iter()
                .map(|m| {
                    let pts = records
                        .iter()
                        .filter(|r| &r.mode == m)
                        .filter_map(|r| r.param.map(|p| (p, r.throughput_mib_s)))
                        .collect();
                    (mode_name(m), pts)
                })
                .collect();
            plots::lines(
                png,
                &format!("Fig. 8: two mpi-io-test instances vs. on-disk file distance ({device})"),
                "distance between the files (GB)",
                "throughput (MiB/s)",
                &series,
                &[],
            )
        }
        ExperimentName::IorchWindow => {
            let pts: Vec<(f64, f64)> = records
                .iter()
                .filter(|r| r.mode != "off")
                .filter_map(|r| r.param.map(|p| (p, r.throughput_mib_s)))
                .collect();
            let off: Vec<(String, f64)> =
                records.iter().filter(|r| r.mode == "off").map(|r| (mode_name("off"), r.throughput_mib_s)).collect();
            plots::lines(
                png,
                &format!("Fig. 9: two mpi-io-test instances vs. scheduling window ({device})"),
                "scheduling window (ms)",
                "throughput (MiB/s)",
                &[(mode_name("iorchestrator"), pts)],
                &off,
            )
        }
        other => bail!("{} is plotted by the forwarding experiments", other.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(b: &str, op: &str, mode: &str, param: Option<f64>, v: f64) -> Record {
        Record {
            benchmark: b.into(),
            op: op.into(),
            mode: mode.into(),
            param,
            device_model: "hdd".into(),
            throughput_mib_s: v,
            runs: 3,
        }
    }

    #[test]
    fn json_records_have_exactly_the_agreed_shape() {
        let rs = vec![
            rec("mpi-io-test", "read", "off", None, 12.5),
            rec("mpi-io-test x2", "read", "iorchestrator", Some(10.0), 20.0),
        ];
        let v: serde_json::Value = serde_json::to_value(&rs).unwrap();
        let arr = v.as_array().unwrap();
        let mut keys: Vec<&str> = arr[0].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["benchmark", "device_model", "mode", "op", "param", "runs", "throughput_mib_s"]);
        assert!(arr[0]["param"].is_null());
        assert_eq!(arr[1]["param"].as_f64(), Some(10.0));
        assert_eq!(arr[1]["runs"].as_u64(), Some(3));
        let back: Vec<Record> = serde_json::from_value(v).unwrap();
        assert_eq!(back, rs);
        let csv = csv_text(&rs).unwrap();
        assert!(csv.starts_with("benchmark,op,mode,param,device_model,throughput_mib_s,runs\n"));
        assert!(csv.contains("mpi-io-test x2,read,iorchestrator,10,hdd,20.000,3"));
        // A name with the separator and quotes reads back whole.
        let odd = Record { benchmark: "a, \"b\"".into(), ..rs[1].clone() };
        let text = csv_text(&[odd]).unwrap();
        let row = csv::Reader::from_reader(text.as_bytes()).records().next().unwrap().unwrap();
        assert_eq!((&row[0], &row[1], row.len()), ("a, \"b\"", "read", 7));
    }

    #[test]
    fn system_throughput_is_the_sum_of_the_programs() {
        let p = |bytes: u64, secs: f64| workloads::ProgramResult { name: "x".into(), job: "x".into(), bytes, secs };
        // Two programs stop at 5 s, one overruns to 7.5 s with a long last call.
        let r =
            workloads::RunResult { programs: vec![p(500 << 20, 5.0), p(250 << 20, 5.0), p(15 << 20, 7.5)], secs: 7.5 };
        assert!((system_mib_s(&r) - 152.0).abs() < 1e-9, "{}", system_mib_s(&r));
        assert!(r.system_mib_s() < 103.0, "total over the overrun: {}", r.system_mib_s());
    }

    #[test]
    fn object_span_packs_files() {
        let a = ExperimentArgs {
            name: ExperimentName::IorchDistance,
            quick: true,
            device_model: DeviceKind::Hdd,
            runs: None,
            out: "r".into(),
            n_ds: Some(6),
            procs: Some(5),
            clients: None,
            dispatch_depth: None,
            hdd_elevator: None,
            replot: false,
            seconds: None,
            file_size: Some(128 << 20),
            disk_gb: crate::experiments::PAPER_DISK_GB,
            benchmarks: vec![],
            variants: vec![],
            ops: vec![],
            workloads: vec![],
            schedulers: vec![],
        };
        let s = Settings::of(&a).unwrap();
        assert_eq!(s.runs, 1);
        assert_eq!(s.object_span(), 22 << 20);
        assert_eq!(s.disk_gb, Some(150.0));
        assert_eq!(Settings::of(&ExperimentArgs { disk_gb: 0.0, ..a.clone() }).unwrap().disk_gb, None);
        assert!(Settings::of(&ExperimentArgs { disk_gb: -1.0, ..a.clone() }).is_err());
        assert!(Settings::of(&ExperimentArgs { runs: Some(0), ..a }).is_err());
    }

    #[test]
    fn plots_from_records() {
        plots::init_font().unwrap(); // a TTF font (CI installs fonts-dejavu-core)
        let dir = tempfile::tempdir().unwrap();
        let rs = vec![
            rec("mpi-io-test", "read", "off", None, 10.0),
            rec("mpi-io-test", "read", "iorchestrator", None, 15.0),
            rec("hpio(nc)", "read", "off", None, 8.0),
            rec("hpio(nc)", "read", "iorchestrator", None, 9.0),
            rec("mpi-io-test [collective]", "write", "off", None, 11.0),
        ];
        plot(ExperimentName::IorchHomogeneous, &rs, &dir.path().join("h.png"), "hdd").unwrap();
        let d = vec![rec("x", "read", "off", Some(0.0), 10.0), rec("x", "read", "off", Some(10.0), 7.0)];
        plot(ExperimentName::IorchDistance, &d, &dir.path().join("d.png"), "hdd").unwrap();
        let w = vec![rec("x", "read", "off", None, 10.0), rec("x", "read", "iorchestrator", Some(125.0), 12.0)];
        plot(ExperimentName::IorchWindow, &w, &dir.path().join("w.png"), "hdd").unwrap();
    }
}
