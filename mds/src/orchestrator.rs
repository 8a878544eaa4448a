//! IOrchestrator's decisions (specs/iorchestrator.md): the latest locality report of each data server,
//! which programs are running, which are eligible for dedicated service, and each window's plan.
//! No I/O here: [`crate::driver`] executes the plan against the data servers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_proto::config::OrchestratorOptions;
use tessera_proto::msg::{
    JobLocality, JobView, LocalityReport, MdsReply, OrchestratorMode, OrchestratorStatus, PlanSlice, ServeTarget,
};
use tessera_proto::{DsId, FsResult};

/// Label of the scheduling object holding every ineligible program (the paper's object m+1).
pub const OTHERS: &str = "(others)";
/// Label of the short work-conserving slice a plan gets when no ineligible program is running, so
/// that programs the orchestrator has not seen yet are never held for longer than a window.
pub const ALL: &str = "(all)";
/// Windows a program stays ineligible after failing condition 3 before it may try again.
pub const COOLDOWN_WINDOWS: u64 = 10;
/// **decision**: each further condition-3 failure without a pass in between doubles the cool-down, up to
/// 2^this times [`COOLDOWN_WINDOWS`] (80 s at 500 ms windows). Every retry costs a dedicated slice in which
/// the device mostly idles; a program whose reuse distance is always too long (ior-mpi-io: RD 20 ms vs
/// SeekTime 5.1 ms) was otherwise retried every 5.5 s for as long as it ran.
pub const COOLDOWN_MAX_DOUBLINGS: u32 = 4;
/// Switch skews kept for the median.
const SKEW_HISTORY: usize = 64;
/// Bounds on what one report may make us remember (a report comes from a peer).
const MAX_JOBS_PER_REPORT: usize = 1024;
const MAX_JOB_NAME: usize = 256;

/// The orchestrator's settings, from `[orchestrator]` with out-of-range values made safe.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub window: Duration,
    pub min_slice_fraction: f64,
    pub consistency_threshold: f64,
    pub locality_ratio: f64,
    pub report_interval: Duration,
    pub fallback_windows: u32,
    /// A program with no served request for this long is no longer running.
    pub job_idle: Duration,
    pub cooldown_windows: u64,
    /// Condition 3's floor on the mean SeekTime, microseconds (see [`verdict`]).
    pub min_seek_us: f64,
}

fn finite_or(v: f64, default: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        default
    }
}

impl Params {
    pub fn from_options(o: &OrchestratorOptions) -> Params {
        let d = OrchestratorOptions::default();
        let window = Duration::from_millis(u64::from(o.window_ms.max(10)));
        Params {
            window,
            min_slice_fraction: finite_or(o.min_slice_fraction, d.min_slice_fraction).clamp(0.0, 1.0),
            consistency_threshold: finite_or(o.consistency_threshold, d.consistency_threshold).max(0.0),
            locality_ratio: finite_or(o.locality_ratio, d.locality_ratio).max(0.0),
            report_interval: Duration::from_millis(o.report_interval_ms.max(1)),
            fallback_windows: o.fallback_windows.max(1),
            // A program is served only during its own slice, so it may be silent for most of a window
            // without being idle.
            job_idle: Duration::from_millis(o.job_idle_ms).max(window * 2),
            cooldown_windows: COOLDOWN_WINDOWS,
            min_seek_us: finite_or(o.min_seek_ms, d.min_seek_ms).max(0.0) * 1000.0,
        }
    }

    pub fn window_ms(&self) -> u32 {
        self.window.as_millis().min(u128::from(u32::MAX)) as u32
    }

    /// A server whose last report is older than this is left out of every decision.
    pub fn server_stale(&self) -> Duration {
        (self.report_interval * 3).max(Duration::from_millis(50))
    }

    /// A program with no served request for this long gets no slice (its statistics are kept for
    /// `job_idle`): every running program is served at least once per window, so a longer silence means
    /// it stopped or computes, and a dedicated slice would leave every server idle.
    pub fn active_span(&self) -> Duration {
        (self.window + self.window / 2).max(self.window + self.report_interval * 2).min(self.job_idle)
    }

    /// Silence after which a data server falls back to work-conserving service.
    pub fn fallback_ms(&self) -> u32 {
        self.window_ms().saturating_mul(self.fallback_windows)
    }
}

impl Default for Params {
    fn default() -> Self {
        Params::from_options(&OrchestratorOptions::default())
    }
}

/// One server's view of one program, as the eligibility test uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub ds: DsId,
    /// SL_i, bytes.
    pub sl_i: f64,
    /// SeekTime_i, microseconds.
    pub seek_us: f64,
    /// SL_ij, bytes.
    pub sl_ij: f64,
    /// RD_ij, microseconds, only when measured during this program's dedicated service.
    pub rd_us: Option<f64>,
}

/// The outcome of the three conditions for one program.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub consistent: bool,
    pub local: bool,
    /// `None`: condition 3 not checked (no RD measured under dedicated service).
    pub rd_ok: Option<bool>,
    /// The mean SeekTime reaches [`Params::min_seek_us`] (condition 3 can pass at all).
    pub seeks: bool,
    /// Mean RD_ij over the servers that measured it, microseconds.
    pub rd_us: Option<f64>,
    /// Condition 2's `sum SL_i / sum SL_ij`.
    pub ratio: f64,
    pub reason: String,
}

impl Verdict {
    pub fn eligible(&self) -> bool {
        self.consistent && self.local && self.seeks && self.rd_ok != Some(false)
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Bytes in a short human form for reasons.
pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Microseconds as milliseconds for reasons.
pub fn fmt_us(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn pct(sd: f64, mean: f64) -> String {
    if sd == 0.0 {
        "0%".into()
    } else if mean <= 0.0 {
        "inf%".into()
    } else {
        format!("{:.1}%", sd / mean * 100.0)
    }
}

/// The three eligibility conditions over the servers a program appears on.
///
/// 1. sd(SL_i) < t·mean(SL_i) and sd(SL_ij) < t·mean(SL_ij). A zero spread always passes. The spread
///    of SL_ij is measured against max(mean SL_ij, mean SL_i / ratio): for a (nearly) sequential
///    program mean SL_ij is tiny and a relative test would fail on noise that is irrelevant next to
///    the mixed stream's gaps, which is the scale at which locality matters (condition 2).
/// 2. ΣSL_i / ΣSL_ij ≥ ratio (ΣSL_ij = 0: infinite, passes).
/// 3. mean RD_ij ≤ mean SeekTime_i, only over servers that measured RD under dedicated service.
///    **decision**: before any RD is measured, a mean SeekTime below [`Params::min_seek_us`] (default
///    2 ms) fails it too, without a dedicated slice to find out and without a cool-down: no program's
///    reuse distance through the network is that short, so the trial slice could only hold the others.
///    Measured on the page cache (device model `none`): SeekTime 0.02–1.6 ms, RD under dedication
///    0.07 ms, so two fio random writers passed condition 3 and held each other for 240 ms slices
///    (their worst write). The emulated disk's positioning time is never below its half rotation (4 ms).
pub fn verdict(samples: &[Sample], p: &Params) -> Verdict {
    let n = samples.len();
    let sl_i: Vec<f64> = samples.iter().map(|s| s.sl_i).collect();
    let sl_ij: Vec<f64> = samples.iter().map(|s| s.sl_ij).collect();
    let (mi, si) = mean_sd(&sl_i);
    let (mj, sj) = mean_sd(&sl_ij);
    let t = p.consistency_threshold;
    let scale_j = if p.locality_ratio > 0.0 { mj.max(mi / p.locality_ratio) } else { mj };
    let c1i = si == 0.0 || si < t * mi;
    let c1j = sj == 0.0 || sj < t * scale_j;
    let consistent = n > 0 && c1i && c1j;
    let (sum_i, sum_j) = (sl_i.iter().sum::<f64>(), sl_ij.iter().sum::<f64>());
    let ratio = if sum_j > 0.0 { sum_i / sum_j } else { f64::INFINITY };
    let local = n > 0 && ratio >= p.locality_ratio;
    let rds: Vec<f64> = samples.iter().filter_map(|s| s.rd_us).collect();
    let seek = mean_sd(&samples.iter().map(|s| s.seek_us).collect::<Vec<_>>()).0;
    let rd_us = (!rds.is_empty()).then(|| mean_sd(&rds).0);
    let rd_ok = rd_us.map(|rd| rd <= seek);
    let seeks = seek >= p.min_seek_us;

    let ok = |b: bool| if b { "ok" } else { "FAILS" };
    // A sequential program's SL_ij decays towards 0 without reaching it: huge ratios in short form.
    let ratio_text = match ratio {
        r if !r.is_finite() => "inf".into(),
        r if r >= 1e6 => format!("{r:.1e}"),
        r => format!("{r:.2}"),
    };
    let rd_text = match (rd_us, rd_ok) {
        (Some(rd), Some(b)) => {
            format!("RD {} vs SeekTime {} {} ({} of {n} servers)", fmt_us(rd), fmt_us(seek), ok(b), rds.len())
        }
        _ if !seeks => format!("SeekTime {} below the floor {} FAILS", fmt_us(seek), fmt_us(p.min_seek_us)),
        _ => format!("RD not measured yet (SeekTime {})", fmt_us(seek)),
    };
    let v = Verdict { consistent, local, rd_ok, seeks, rd_us, ratio, reason: String::new() };
    let head = if n == 0 {
        "not eligible: no live server reports it".to_string()
    } else if v.eligible() {
        "eligible".to_string()
    } else if !consistent {
        "not eligible (1: inconsistent across servers)".to_string()
    } else if !local {
        "not eligible (2: own locality not much stronger than the mixed stream's)".to_string()
    } else if rd_ok == Some(false) {
        "not eligible (3: waiting costs more than seeking)".to_string()
    } else {
        "not eligible (3: the devices seek faster than any program returns)".to_string()
    };
    let reason = format!(
        "{head}; [1] SL_i {} sd {} / SL_ij {} sd {} (limit {:.0}%) {}; [2] ratio {ratio_text} (min {}) {}; [3] {rd_text}; {n} servers",
        fmt_bytes(mi),
        pct(si, mi),
        fmt_bytes(mj),
        pct(sj, scale_j),
        t * 100.0,
        ok(consistent),
        p.locality_ratio,
        ok(local),
    );
    Verdict { reason, ..v }
}

/// Splits 1.0 into shares proportional to `weights`, each at least `floor` (water-filling: floored
/// objects are fixed at the floor and the rest is re-divided in proportion). Bad weights → even.
pub fn floored_shares(weights: &[f64], floor: f64) -> Vec<f64> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let even = vec![1.0 / n as f64; n];
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().sum::<f64>() <= 0.0 {
        return even;
    }
    if floor * n as f64 >= 1.0 - 1e-12 {
        return even;
    }
    let floor = floor.max(0.0);
    let mut fixed = vec![false; n];
    let mut shares = vec![0.0; n];
    loop {
        let free: f64 = weights.iter().zip(&fixed).filter(|(_, f)| !**f).map(|(w, _)| *w).sum();
        let budget = 1.0 - floor * fixed.iter().filter(|f| **f).count() as f64;
        if free <= 0.0 {
            // Everything left has no weight: split what remains evenly among it.
            let left = fixed.iter().filter(|f| !**f).count();
            for (s, f) in shares.iter_mut().zip(&fixed) {
                *s = if *f { floor } else { budget / left.max(1) as f64 };
            }
            return shares;
        }
        let mut changed = false;
        for i in 0..n {
            if fixed[i] {
                shares[i] = floor;
            } else {
                shares[i] = weights[i] / free * budget;
            }
        }
        for i in 0..n {
            if !fixed[i] && shares[i] < floor {
                fixed[i] = true;
                shares[i] = floor;
                changed = true;
            }
        }
        if !changed {
            return shares;
        }
        if fixed.iter().all(|f| *f) {
            return even;
        }
    }
}

/// A program's evaluation at a window start.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEval {
    pub job: String,
    pub eligible: bool,
    pub reason: String,
    /// Per server: (ds, SL_ij, RD_ij if measured under dedicated service).
    pub servers: Vec<(DsId, f64, Option<f64>)>,
    /// Mean RD_ij (microseconds) under dedicated service.
    pub rd_us: Option<f64>,
    /// Eligible again after failing condition 3, RD not measured yet: a probe slice ([`PROBE_MS`]).
    pub probe: bool,
}

/// **decision**: a program whose RD has not been measured under dedication yet is given a probe slice
/// of this length (at least the floor) — enough for the servers to measure it for condition 3 — and its
/// inverse-RD slice once it passed, when (a) it failed condition 3 before and is retried after its
/// cool-down, or (b) its locality ratio is marginal (below [`MARGINAL_RATIO`] times the threshold). The
/// spec can only check condition 3 during dedication, so a weak-locality program that passes conditions
/// 1 and 2 by a hair (ior-mpi-io hovers at the 1.5 ratio) costs the others a probe instead of half a
/// window. A program with clearly strong locality gets its full slice at once and loses nothing.
/// Outside its probe slice a probed program is served with the others (`(others)` does not exclude it):
/// holding it for the rest of the window cost ior-mpi-io pairs ~6% in 5 s runs although it was only
/// on trial.
pub const PROBE_MS: f64 = 50.0;
/// See [`PROBE_MS`]: a locality ratio below this multiple of the threshold is marginal.
pub const MARGINAL_RATIO: f64 = 2.0;

/// The window's plan: scheduling objects in order with their slice lengths.
///
/// `off`, no eligible program, or fewer than two running programs (nothing to isolate a program
/// from) → one work-conserving `All` slice. Otherwise each eligible program, then `(others)` if other
/// programs run, else a floor-length work-conserving `(all)` slice.
pub fn build_plan(mode: OrchestratorMode, evals: &[JobEval], others_rd_us: Option<f64>, p: &Params) -> Vec<PlanSlice> {
    let w = p.window.as_secs_f64() * 1000.0;
    let eligible: Vec<&JobEval> = evals.iter().filter(|e| e.eligible).collect();
    if mode == OrchestratorMode::Off || eligible.is_empty() || evals.len() < 2 {
        return vec![PlanSlice { label: ALL.into(), target: ServeTarget::All, slice_ms: w, rd_us: None }];
    }
    let probes: Vec<&str> = match mode {
        OrchestratorMode::IOrchestrator => eligible.iter().filter(|e| e.probe).map(|e| e.job.as_str()).collect(),
        _ => vec![],
    };
    // A program on probation is not held during the others' slice: only proven programs are isolated.
    let names: Vec<String> =
        eligible.iter().filter(|e| !probes.contains(&e.job.as_str())).map(|e| e.job.clone()).collect();
    let mut objects: Vec<(String, ServeTarget, Option<f64>)> =
        eligible.iter().map(|e| (e.job.clone(), ServeTarget::Job(e.job.clone()), e.rd_us)).collect();
    let has_others = evals.len() > eligible.len();
    if has_others {
        objects.push((OTHERS.into(), ServeTarget::Others { eligible: names }, others_rd_us));
    }
    let weights: Vec<f64> = match mode {
        OrchestratorMode::Even | OrchestratorMode::Off => vec![1.0; objects.len()],
        OrchestratorMode::IOrchestrator => {
            let known: Vec<f64> = objects.iter().filter_map(|o| o.2).filter(|rd| *rd > 0.0).collect();
            if known.is_empty() {
                vec![1.0; objects.len()]
            } else {
                let fill = known.iter().sum::<f64>() / known.len() as f64;
                objects.iter().map(|o| 1.0 / o.2.filter(|rd| *rd > 0.0).unwrap_or(fill)).collect()
            }
        }
    };
    let mut shares = floored_shares(&weights, p.min_slice_fraction);
    let mut plan: Vec<PlanSlice> = objects
        .into_iter()
        .zip(&shares)
        .map(|((label, target, rd_us), s)| PlanSlice { label, target, slice_ms: w * s, rd_us })
        .collect();
    if !has_others {
        let f = p.min_slice_fraction.max(0.01);
        for (slice, s) in plan.iter_mut().zip(shares.iter_mut()) {
            *s *= 1.0 - f;
            slice.slice_ms = w * *s;
        }
        plan.push(PlanSlice { label: ALL.into(), target: ServeTarget::All, slice_ms: w * f, rd_us: None });
    }
    if !probes.is_empty() {
        shorten_probes(&mut plan, (w * p.min_slice_fraction).max(PROBE_MS).min(w), &probes);
    }
    plan
}

/// Cuts the slices of the `probes` programs to `probe` ms and gives the time to the other objects in
/// proportion to their slices (there is always one: `(others)` or `(all)`).
fn shorten_probes(plan: &mut [PlanSlice], probe: f64, probes: &[&str]) {
    let is_probe = |s: &PlanSlice| matches!(&s.target, ServeTarget::Job(j) if probes.contains(&j.as_str()));
    let mut freed = 0.0;
    for s in plan.iter_mut().filter(|s| is_probe(s) && s.slice_ms > probe) {
        freed += s.slice_ms - probe;
        s.slice_ms = probe;
    }
    let rest: f64 = plan.iter().filter(|s| !is_probe(s)).map(|s| s.slice_ms).sum();
    if freed <= 0.0 || rest <= 0.0 {
        return;
    }
    for s in plan.iter_mut().filter(|s| !is_probe(s)) {
        s.slice_ms += freed * s.slice_ms / rest;
    }
}

/// The mean of the values reported within the last window. The servers' EWMAs weigh the newest request
/// 7/8 (spec), so one report is close to the last gap seen (0 or the distance to another program); the
/// conditions are judged on the window's mean of reports instead of on a single one.
#[derive(Default)]
struct WindowMean {
    samples: VecDeque<(Instant, f64)>,
}

impl WindowMean {
    /// Most reports kept per series (a window at 10 ms reports).
    const MAX: usize = 128;

    fn push(&mut self, now: Instant, v: f64, span: Duration) -> f64 {
        self.samples.push_back((now, v));
        while self.samples.len() > Self::MAX
            || self.samples.front().is_some_and(|&(t, _)| now.saturating_duration_since(t) > span)
        {
            self.samples.pop_front();
        }
        self.samples.iter().map(|&(_, v)| v).sum::<f64>() / self.samples.len() as f64
    }
}

struct JobEntry {
    loc: JobLocality,
    at: Instant,
    sl_mean: WindowMean,
}

struct ServerState {
    sl: f64,
    seek_us: f64,
    sl_mean: WindowMean,
    seek_mean: WindowMean,
    others_rd_us: Option<f64>,
    epoch: u64,
    at: Instant,
    jobs: BTreeMap<String, JobEntry>,
}

#[derive(Default)]
struct JobTrack {
    last_active: Option<Instant>,
    /// Ineligible until this window (condition 3 failed).
    cooldown_until: u64,
    cooldown_why: String,
    /// Condition-3 failures since it last passed condition 3 (sets the next cool-down's length).
    strikes: u32,
    /// First dedicated slice of the current eligibility run: RD_ij reported before it is stale.
    served_since: Option<Instant>,
}

struct Inner {
    mode: OrchestratorMode,
    servers: BTreeMap<DsId, ServerState>,
    jobs: BTreeMap<String, JobTrack>,
    windows: u64,
    evals: Vec<JobEval>,
    plan: Vec<PlanSlice>,
    last_skew: Option<u64>,
    skews: VecDeque<u64>,
    epoch: u64,
}

/// The orchestrator's state, shared by the RPC service, the driver and the metrics endpoint.
pub struct Orchestrator {
    params: Params,
    configured: Vec<DsId>,
    inner: Mutex<Inner>,
}

fn clean(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 {
        v
    } else {
        0.0
    }
}

impl Orchestrator {
    pub fn new(params: Params, mode: OrchestratorMode, configured: Vec<DsId>) -> Orchestrator {
        // Epochs start at the wall clock so that after an MDS restart the data servers, which ignore
        // commands older than the last one they applied, still accept ours.
        let epoch = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1);
        Orchestrator {
            params,
            configured,
            inner: Mutex::new(Inner {
                mode,
                servers: BTreeMap::new(),
                jobs: BTreeMap::new(),
                windows: 0,
                evals: Vec::new(),
                plan: Vec::new(),
                last_skew: None,
                skews: VecDeque::new(),
                epoch,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    pub fn servers(&self) -> &[DsId] {
        &self.configured
    }

    pub fn mode(&self) -> OrchestratorMode {
        self.lock().mode
    }

    pub fn set_mode(&self, mode: OrchestratorMode) {
        self.lock().mode = mode;
    }

    /// A fresh serve epoch (strictly increasing).
    pub fn next_epoch(&self) -> u64 {
        let mut g = self.lock();
        g.epoch += 1;
        g.epoch
    }

    /// `LocalityReport`: kept (one from an unconfigured data server is dropped).
    pub fn report(&self, r: LocalityReport) -> FsResult<MdsReply> {
        let ds = r.ds;
        if !self.record(r, Instant::now()) {
            tracing::debug!(ds, "locality report from an unconfigured data server");
        }
        Ok(MdsReply::Ok)
    }

    /// `SetOrchestratorMode`: the mode changed (and logged).
    pub fn change_mode(&self, mode: OrchestratorMode) -> FsResult<MdsReply> {
        let old = self.mode();
        self.set_mode(mode);
        tracing::info!(%old, new = %mode, "orchestrator mode changed");
        Ok(MdsReply::Ok)
    }

    /// `OrchestratorStatus`: the mode, the window, each server's and job's state, the plan.
    pub fn status_reply(&self) -> FsResult<MdsReply> {
        Ok(MdsReply::Orchestrator(self.status(Instant::now())))
    }

    /// Keeps a data server's report; false (and nothing kept) for an unconfigured server.
    pub fn record(&self, r: LocalityReport, now: Instant) -> bool {
        if !self.configured.contains(&r.ds) {
            return false;
        }
        let idle = self.params.job_idle;
        let mut g = self.lock();
        let Inner { servers, jobs, .. } = &mut *g;
        let span = self.params.window;
        let s = servers.entry(r.ds).or_insert_with(|| ServerState {
            sl: 0.0,
            seek_us: 0.0,
            sl_mean: WindowMean::default(),
            seek_mean: WindowMean::default(),
            others_rd_us: None,
            epoch: 0,
            at: now,
            jobs: BTreeMap::new(),
        });
        s.sl = s.sl_mean.push(now, clean(r.sl), span);
        s.seek_us = s.seek_mean.push(now, clean(r.seek_time_us), span);
        s.others_rd_us = r.others_rd_us.filter(|v| v.is_finite() && *v > 0.0);
        s.epoch = r.epoch;
        s.at = now;
        for mut loc in r.jobs.into_iter().take(MAX_JOBS_PER_REPORT) {
            if loc.job.is_empty() || loc.job.len() > MAX_JOB_NAME {
                continue;
            }
            loc.sl = clean(loc.sl);
            loc.rd_valid = loc.rd_valid && loc.rd_us.is_finite() && loc.rd_us > 0.0;
            loc.rd_us = clean(loc.rd_us);
            if loc.requests > 0 {
                jobs.entry(loc.job.clone()).or_default().last_active = Some(now);
            }
            let mut sl_mean = s.jobs.remove(&loc.job).map(|e| e.sl_mean).unwrap_or_default();
            loc.sl = sl_mean.push(now, loc.sl, span);
            s.jobs.insert(loc.job.clone(), JobEntry { loc, at: now, sl_mean });
        }
        s.jobs.retain(|_, e| now.saturating_duration_since(e.at) <= idle);
        true
    }

    /// Evaluates every running program (updating cool-downs); sorted by name.
    fn evaluate(&self, g: &mut Inner, now: Instant) -> Vec<JobEval> {
        let p = &self.params;
        let stale = p.server_stale();
        let window = g.windows;
        let Inner { servers, jobs, .. } = g;
        // Forget programs long gone (memory stays bounded by what runs).
        jobs.retain(|_, t| {
            t.cooldown_until > window
                || t.last_active.is_some_and(|a| now.saturating_duration_since(a) <= p.job_idle * 10)
        });
        let mut evals = Vec::new();
        for (name, track) in jobs.iter_mut() {
            let running = track.last_active.is_some_and(|a| now.saturating_duration_since(a) <= p.active_span());
            if !running {
                track.served_since = None;
                continue;
            }
            let samples: Vec<Sample> = servers
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.at) <= stale)
                .filter_map(|(ds, s)| {
                    let e = s.jobs.get(name).filter(|e| now.saturating_duration_since(e.at) <= p.job_idle)?;
                    let measured = track.served_since.is_some_and(|since| e.at > since);
                    Some(Sample {
                        ds: *ds,
                        sl_i: s.sl,
                        seek_us: s.seek_us,
                        sl_ij: e.loc.sl,
                        rd_us: (e.loc.rd_valid && measured).then_some(e.loc.rd_us),
                    })
                })
                .collect();
            if samples.is_empty() {
                track.served_since = None;
                continue;
            }
            let v = verdict(&samples, p);
            let (eligible, reason) = if track.cooldown_until > window {
                let left = track.cooldown_until - window;
                (false, format!("not eligible: cooling down for {left} more windows after: {}", track.cooldown_why))
            } else if v.rd_ok == Some(false) {
                track.cooldown_until = window + (p.cooldown_windows << track.strikes.min(COOLDOWN_MAX_DOUBLINGS));
                track.strikes = track.strikes.saturating_add(1);
                track.cooldown_why = v.reason.clone();
                tracing::info!(job = %name, reason = %v.reason, "program lost eligibility");
                (false, v.reason.clone())
            } else {
                if v.rd_ok == Some(true) {
                    track.strikes = 0;
                }
                (v.eligible(), v.reason.clone())
            };
            if !eligible {
                track.served_since = None;
            }
            evals.push(JobEval {
                job: name.clone(),
                eligible,
                reason,
                servers: samples.iter().map(|s| (s.ds, s.sl_ij, s.rd_us)).collect(),
                rd_us: v.rd_us,
                probe: eligible
                    && v.rd_us.is_none()
                    && (track.strikes > 0 || v.ratio < MARGINAL_RATIO * p.locality_ratio),
            });
        }
        evals
    }

    /// Starts a window: re-evaluates from the latest reports and returns its plan.
    pub fn plan_window(&self, now: Instant) -> Vec<PlanSlice> {
        let mut g = self.lock();
        g.windows += 1;
        let mut evals = self.evaluate(&mut g, now);
        let stale = self.params.server_stale();
        let others: Vec<f64> = g
            .servers
            .values()
            .filter(|s| now.saturating_duration_since(s.at) <= stale)
            .filter_map(|s| s.others_rd_us)
            .collect();
        let others_rd = (!others.is_empty()).then(|| others.iter().sum::<f64>() / others.len() as f64);
        let plan = build_plan(g.mode, &evals, others_rd, &self.params);
        if evals.len() == 1 && evals[0].eligible {
            evals[0].reason.push_str("; but it is the only program running: served work-conserving");
        }
        // One line per window (RUST_LOG=tessera_mds::orchestrator=debug): how eligibility and the plan
        // evolve is what the experiments' throughput depends on.
        if tracing::enabled!(tracing::Level::DEBUG) {
            let slices: Vec<String> = plan.iter().map(|s| format!("{}={:.0}ms", s.label, s.slice_ms)).collect();
            for e in &evals {
                tracing::debug!(window = g.windows, job = %e.job, eligible = e.eligible, reason = %e.reason, "verdict");
            }
            tracing::debug!(window = g.windows, plan = %slices.join(" "), "plan");
        }
        g.evals = evals;
        g.plan = plan.clone();
        plan
    }

    /// The driver sent a program its dedicated slice.
    pub fn mark_served(&self, job: &str, now: Instant) {
        let mut g = self.lock();
        if let Some(t) = g.jobs.get_mut(job) {
            t.served_since.get_or_insert(now);
        }
    }

    /// Spread of the servers' switch times at one slice start.
    pub fn record_skew(&self, us: u64) {
        let mut g = self.lock();
        g.last_skew = Some(us);
        g.skews.push_back(us);
        while g.skews.len() > SKEW_HISTORY {
            g.skews.pop_front();
        }
    }

    pub fn status(&self, now: Instant) -> OrchestratorStatus {
        let g = self.lock();
        let w = self.params.window.as_secs_f64() * 1000.0;
        let share = |job: &str| -> f64 {
            g.plan
                .iter()
                .filter(|s| matches!(&s.target, ServeTarget::Job(j) if j == job))
                .fold(0.0, |a, s| a + s.slice_ms / w)
        };
        let mut skews: Vec<u64> = g.skews.iter().copied().collect();
        skews.sort_unstable();
        OrchestratorStatus {
            mode: g.mode,
            window_ms: self.params.window_ms(),
            servers: g
                .servers
                .iter()
                .map(|(ds, s)| {
                    let age = now.saturating_duration_since(s.at).as_millis().min(u128::from(u64::MAX)) as u64;
                    (*ds, s.sl, s.seek_us, age)
                })
                .collect(),
            jobs: g
                .evals
                .iter()
                .map(|e| JobView {
                    job: e.job.clone(),
                    eligible: e.eligible,
                    reason: e.reason.clone(),
                    servers: e.servers.clone(),
                    slice_share: share(&e.job),
                })
                .collect(),
            plan: g.plan.clone(),
            last_switch_skew_us: g.last_skew,
            median_switch_skew_us: skews.get(skews.len() / 2).copied(),
            windows_run: g.windows,
        }
    }

    /// The epoch each server last said it follows (for metrics and tests).
    pub fn server_epochs(&self) -> Vec<(DsId, u64)> {
        self.lock().servers.iter().map(|(d, s)| (*d, s.epoch)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_averaged_over_the_last_window() {
        let span = Duration::from_millis(500);
        let t0 = Instant::now();
        let mut m = WindowMean::default();
        // The last gap alternates between 0 and 28 GiB from one report to the next.
        let mut mean = 0.0;
        for k in 0..10u64 {
            let v = if k % 2 == 0 { 0.0 } else { 28.0 * (1u64 << 30) as f64 };
            mean = m.push(t0 + Duration::from_millis(100 * k), v, span);
        }
        // Reports 4..=9 are within 500 ms of the last: three zeros, three 28 GiB.
        assert_eq!(mean, 14.0 * (1u64 << 30) as f64);
        // An old value leaves the window.
        let later = m.push(t0 + Duration::from_millis(2000), 1.0, span);
        assert_eq!(later, 1.0);
    }

    const GB: f64 = 1024.0 * 1024.0 * 1024.0;
    const MB: f64 = 1024.0 * 1024.0;

    fn sample(ds: DsId, sl_i: f64, sl_ij: f64, rd: Option<f64>) -> Sample {
        Sample { ds, sl_i, seek_us: 8000.0, sl_ij, rd_us: rd }
    }

    fn six(sl_i: f64, sl_ij: f64, rd: Option<f64>) -> Vec<Sample> {
        (0..6).map(|d| sample(d, sl_i * (1.0 + 0.01 * d as f64), sl_ij, rd)).collect()
    }

    #[test]
    fn sequential_program_is_eligible() {
        let v = verdict(&six(4.0 * GB, 0.0, None), &Params::default());
        assert!(v.consistent && v.local && v.rd_ok.is_none() && v.eligible(), "{}", v.reason);
        assert!(v.reason.starts_with("eligible") && v.reason.contains("ratio inf"), "{}", v.reason);
        // An SL_ij that decayed towards 0 gives a huge but short ratio.
        let v = verdict(&six(4.0 * GB, 1e-90, None), &Params::default());
        assert!(v.eligible() && v.reason.contains("e99 (min"), "{}", v.reason);
    }

    #[test]
    fn condition_1_fails_on_inconsistent_sl_i() {
        let mut s = six(4.0 * GB, 0.0, None);
        s[0].sl_i = 0.5 * GB;
        s[1].sl_i = 9.0 * GB;
        let v = verdict(&s, &Params::default());
        assert!(!v.consistent && !v.eligible());
        assert!(v.reason.contains("(1:"), "{}", v.reason);
    }

    #[test]
    fn condition_1_fails_on_inconsistent_sl_ij_but_ignores_noise_on_a_tiny_mean() {
        // Half the servers see the program sequential, half see it jump around: inconsistent.
        let mut s = six(4.0 * GB, 0.0, None);
        for x in s.iter_mut().take(3) {
            x.sl_ij = 2.0 * GB;
        }
        let v = verdict(&s, &Params::default());
        assert!(!v.consistent, "{}", v.reason);
        // A few KiB of jitter on an almost sequential stream is not inconsistency.
        let mut s = six(4.0 * GB, 0.0, None);
        s[2].sl_ij = 64.0 * 1024.0;
        s[4].sl_ij = 8.0 * 1024.0;
        let v = verdict(&s, &Params::default());
        assert!(v.consistent && v.eligible(), "{}", v.reason);
    }

    #[test]
    fn condition_2_locality_ratio() {
        // ior-mpi-io: its own gaps are as large as the mixed stream's.
        let v = verdict(&six(2.0 * GB, 1.9 * GB, None), &Params::default());
        assert!(v.consistent && !v.local && !v.eligible(), "{}", v.reason);
        assert!(v.reason.contains("(2:"), "{}", v.reason);
        // Just above the ratio passes; the threshold is configurable.
        let v = verdict(&six(3.1 * GB, 2.0 * GB, None), &Params::default());
        assert!(v.local, "{}", v.reason);
        let strict = Params { locality_ratio: 2.0, ..Params::default() };
        assert!(!verdict(&six(3.1 * GB, 2.0 * GB, None), &strict).local);
    }

    #[test]
    fn condition_3_reuse_distance_against_seek_time() {
        let v = verdict(&six(4.0 * GB, 0.0, Some(2000.0)), &Params::default());
        assert_eq!(v.rd_ok, Some(true));
        assert!(v.eligible());
        let v = verdict(&six(4.0 * GB, 0.0, Some(20_000.0)), &Params::default());
        assert_eq!(v.rd_ok, Some(false));
        assert!(!v.eligible() && v.reason.contains("(3:"), "{}", v.reason);
        // Only servers that measured RD count.
        let mut s = six(4.0 * GB, 0.0, None);
        s[0].rd_us = Some(1000.0);
        let v = verdict(&s, &Params::default());
        assert_eq!(v.rd_us, Some(1000.0));
    }

    #[test]
    fn condition_3_fails_without_a_trial_on_devices_that_barely_seek() {
        // The page cache's measured SeekTime (0.2 ms) is below the 2 ms floor: not eligible, RD unmeasured.
        let mut s = six(4.0 * GB, 0.0, None);
        s.iter_mut().for_each(|x| x.seek_us = 200.0);
        let v = verdict(&s, &Params::default());
        assert_eq!((v.consistent, v.local, v.rd_ok, v.seeks), (true, true, None, false));
        assert!(
            !v.eligible() && v.reason.contains("(3: the devices seek") && v.reason.contains("floor"),
            "{}",
            v.reason
        );
        // Without the floor it is eligible and would get a slice to measure its RD.
        let p = Params::from_options(&OrchestratorOptions { min_seek_ms: 0.0, ..Default::default() });
        assert!(verdict(&s, &p).eligible());
        // A measured RD shorter than the (low) SeekTime still does not pass below the floor.
        s.iter_mut().for_each(|x| x.rd_us = Some(70.0));
        let v = verdict(&s, &Params::default());
        assert_eq!(v.rd_ok, Some(true));
        assert!(!v.eligible(), "{}", v.reason);
        // Non-finite or negative settings fall back to the default or to no floor.
        let nan = Params::from_options(&OrchestratorOptions { min_seek_ms: f64::NAN, ..Default::default() });
        assert_eq!(nan.min_seek_us, 2000.0);
        let neg = Params::from_options(&OrchestratorOptions { min_seek_ms: -1.0, ..Default::default() });
        assert_eq!(neg.min_seek_us, 0.0);
    }

    #[test]
    fn a_program_on_a_fast_device_is_never_planned_nor_cooled_down() {
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, (0..6).collect());
        let t0 = Instant::now();
        for w in 0..3u32 {
            let now = t0 + Duration::from_millis(500 * u64::from(w));
            for ds in 0..6 {
                let mut r = report(ds, 4.0 * GB, &[("a", 2.0 * MB, None), ("b", 2.0 * MB, None)]);
                r.seek_time_us = 300.0;
                assert!(o.record(r, now));
            }
            let plan = o.plan_window(now);
            assert_eq!(plan.len(), 1, "{plan:?}");
            assert_eq!(plan[0].target, ServeTarget::All);
        }
        let st = o.status(t0 + Duration::from_millis(1000));
        assert!(st.jobs.iter().all(|j| !j.eligible && !j.reason.contains("cooling")), "{:?}", st.jobs);
        // Once the servers seek like a disk, the same programs are eligible at once (no cool-down left).
        let now = t0 + Duration::from_millis(1500);
        feed(&o, now, &[("a", 2.0 * MB, None), ("b", 2.0 * MB, None)]);
        let plan = o.plan_window(now);
        assert!(plan.iter().any(|s| s.target == ServeTarget::Job("a".into())), "{plan:?}");
    }

    #[test]
    fn shares_are_inverse_to_reuse_distance_with_a_floor() {
        let s = floored_shares(&[1.0 / 1000.0, 1.0 / 3000.0], 0.05);
        assert!((s[0] - 0.75).abs() < 1e-9 && (s[1] - 0.25).abs() < 1e-9, "{s:?}");
        // The floor lifts a starving object and the rest is renormalised.
        let s = floored_shares(&[1.0, 0.001, 0.5], 0.1);
        assert!((s[1] - 0.1).abs() < 1e-9, "{s:?}");
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!((s[0] / s[2] - 2.0).abs() < 1e-9, "{s:?}");
        // A floor too large for the count: even.
        assert_eq!(floored_shares(&[1.0, 0.0, 0.0], 0.5), vec![1.0 / 3.0; 3]);
        assert_eq!(floored_shares(&[f64::NAN, 1.0], 0.05), vec![0.5, 0.5]);
        assert!(floored_shares(&[], 0.05).is_empty());
    }

    fn eval(job: &str, eligible: bool, rd: Option<f64>) -> JobEval {
        JobEval { job: job.into(), eligible, reason: String::new(), servers: vec![], rd_us: rd, probe: false }
    }

    #[test]
    fn plan_iorchestrator_mode() {
        let p = Params::default();
        let evals = [eval("a", true, Some(1000.0)), eval("b", false, None), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, Some(3000.0), &p);
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[0].target, ServeTarget::Job("a".into()));
        assert_eq!(plan[1].target, ServeTarget::Others { eligible: vec!["a".into()] });
        assert!((plan[0].slice_ms - 375.0).abs() < 1e-6 && (plan[1].slice_ms - 125.0).abs() < 1e-6, "{plan:?}");
        // Unknown RD for the others: the mean of the known ones → equal.
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        assert!((plan[0].slice_ms - 250.0).abs() < 1e-6, "{plan:?}");
        // Nothing known, first trials: even.
        let evals = [eval("a", true, None), eval("b", true, None), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        assert!(plan.iter().all(|s| (s.slice_ms - 500.0 / 3.0).abs() < 1e-6), "{plan:?}");
        // Retried after failing condition 3: probe slices (PROBE_MS), the rest to the others.
        let probe = |job: &str| JobEval { probe: true, ..eval(job, true, None) };
        let evals = [probe("a"), probe("b"), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        let ms: Vec<f64> = plan.iter().map(|s| s.slice_ms).collect();
        assert!((ms[0] - PROBE_MS).abs() < 1e-6 && (ms[1] - PROBE_MS).abs() < 1e-6, "{plan:?}");
        assert!((ms[2] - (500.0 - 2.0 * PROBE_MS)).abs() < 1e-6, "{plan:?}");
        // Probed programs are served in the others' slice too; a proven one is not.
        assert_eq!(plan[2].target, ServeTarget::Others { eligible: vec![] }, "{plan:?}");
        let evals = [probe("a"), eval("b", true, Some(1000.0)), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        assert_eq!(plan[2].target, ServeTarget::Others { eligible: vec!["b".into()] }, "{plan:?}");
        // One measured, one probing, nobody else: the measured program and (all) share what the probe leaves.
        let evals = [eval("a", true, Some(1000.0)), probe("b")];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        assert_eq!(plan[1].target, ServeTarget::Job("b".into()));
        assert!((plan[1].slice_ms - PROBE_MS).abs() < 1e-6, "{plan:?}");
        assert!((plan.iter().map(|s| s.slice_ms).sum::<f64>() - 500.0).abs() < 1e-6, "{plan:?}");
        assert!(plan[0].slice_ms > 5.0 * plan[2].slice_ms, "{plan:?}");
        // Even slicing knows no probes.
        let evals = [probe("a"), probe("b"), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::Even, &evals, None, &p);
        assert!(plan.iter().all(|s| (s.slice_ms - 500.0 / 3.0).abs() < 1e-6), "{plan:?}");
        // A huge RD is floored at 5% of the window.
        let evals = [eval("a", true, Some(100.0)), eval("b", false, None)];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, Some(1e9), &p);
        assert!((plan[1].slice_ms - 25.0).abs() < 1e-6 && (plan[0].slice_ms - 475.0).abs() < 1e-6, "{plan:?}");
    }

    #[test]
    fn plan_even_off_and_degenerate_cases() {
        let p = Params::default();
        let evals = [eval("a", true, Some(1000.0)), eval("b", true, Some(9000.0)), eval("c", false, None)];
        let plan = build_plan(OrchestratorMode::Even, &evals, Some(50.0), &p);
        assert_eq!(plan.len(), 3);
        assert!(plan.iter().all(|s| (s.slice_ms - 500.0 / 3.0).abs() < 1e-6), "{plan:?}");
        let plan = build_plan(OrchestratorMode::Off, &evals, None, &p);
        assert_eq!(plan, vec![PlanSlice { label: ALL.into(), target: ServeTarget::All, slice_ms: 500.0, rd_us: None }]);
        // No eligible program: work-conserving.
        let plan =
            build_plan(OrchestratorMode::IOrchestrator, &[eval("a", false, None), eval("b", false, None)], None, &p);
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].target, ServeTarget::All);
        // A lone program has nothing to be isolated from.
        let plan = build_plan(OrchestratorMode::IOrchestrator, &[eval("a", true, None)], None, &p);
        assert_eq!(plan[0].target, ServeTarget::All);
        // Every running program eligible: no (others), a short work-conserving slice instead.
        let evals = [eval("a", true, Some(1000.0)), eval("b", true, Some(1000.0))];
        let plan = build_plan(OrchestratorMode::IOrchestrator, &evals, None, &p);
        assert_eq!(plan.len(), 3);
        assert_eq!(plan[2].target, ServeTarget::All);
        assert!((plan[2].slice_ms - 25.0).abs() < 1e-6 && (plan[0].slice_ms - 237.5).abs() < 1e-6, "{plan:?}");
        let total: f64 = plan.iter().map(|s| s.slice_ms).sum();
        assert!((total - 500.0).abs() < 1e-6);
    }

    fn report(ds: DsId, sl: f64, jobs: &[(&str, f64, Option<f64>)]) -> LocalityReport {
        LocalityReport {
            ds,
            sl,
            seek_time_us: 8000.0,
            jobs: jobs
                .iter()
                .map(|(j, sl, rd)| JobLocality {
                    job: j.to_string(),
                    sl: *sl,
                    rd_us: rd.unwrap_or(0.0),
                    rd_valid: rd.is_some(),
                    requests: 10,
                    bytes: 10 << 16,
                })
                .collect(),
            others_rd_us: None,
            epoch: 0,
        }
    }

    fn feed(o: &Orchestrator, now: Instant, jobs: &[(&str, f64, Option<f64>)]) {
        for ds in 0..6 {
            assert!(o.record(report(ds, 4.0 * GB, jobs), now));
        }
    }

    #[test]
    fn marginal_locality_is_probed_strong_locality_served_at_once() {
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, (0..6).collect());
        let t0 = Instant::now();
        // SL_i 4 GiB: "weak" has ratio 1.6 (marginal, below 2 x 1.5), "seq" a huge one.
        feed(&o, t0, &[("seq", 0.0, None), ("weak", 2.5 * GB, None), ("other", 16.0 * GB, None)]);
        let plan = o.plan_window(t0);
        let slice = |job: &str| plan.iter().find(|s| s.target == ServeTarget::Job(job.into())).map(|s| s.slice_ms);
        assert!((slice("weak").unwrap() - PROBE_MS).abs() < 1e-6, "{plan:?}");
        assert!(slice("seq").unwrap() > 2.0 * PROBE_MS, "{plan:?}");
        assert!((plan.iter().map(|s| s.slice_ms).sum::<f64>() - 500.0).abs() < 1e-6, "{plan:?}");
    }

    #[test]
    fn running_programs_eligibility_and_status() {
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, (0..6).collect());
        let t0 = Instant::now();
        assert!(!o.record(report(9, 1.0, &[]), t0), "unconfigured server ignored");
        feed(&o, t0, &[("seq", 0.0, None), ("ior", 3.9 * GB, None)]);
        let plan = o.plan_window(t0);
        assert_eq!(plan.len(), 2, "{plan:?}");
        assert_eq!(plan[0].target, ServeTarget::Job("seq".into()));
        let st = o.status(t0);
        assert_eq!(st.windows_run, 1);
        assert_eq!(st.servers.len(), 6);
        let seq = st.jobs.iter().find(|j| j.job == "seq").unwrap();
        assert!(seq.eligible && (seq.slice_share - 0.5).abs() < 1e-9, "{seq:?}");
        assert_eq!(seq.servers.len(), 6);
        let ior = st.jobs.iter().find(|j| j.job == "ior").unwrap();
        assert!(!ior.eligible && ior.slice_share == 0.0 && ior.reason.contains("(2:"), "{ior:?}");
        // A program that stops issuing requests gets no slice once it has missed a window and a half,
        // although the servers still report its statistics.
        let mut quiet = report(0, 4.0 * GB, &[("seq", 0.0, None), ("ior", 3.9 * GB, None)]);
        quiet.jobs[0].requests = 0;
        for (i, dt) in [300u64, 700, 800].into_iter().enumerate() {
            for ds in 0..6 {
                assert!(o.record(LocalityReport { ds, ..quiet.clone() }, t0 + Duration::from_millis(dt)));
            }
            let plan = o.plan_window(t0 + Duration::from_millis(dt));
            let served = plan.iter().any(|s| s.target == ServeTarget::Job("seq".into()));
            assert_eq!(served, i < 2, "{dt} ms: {plan:?}");
        }
        // Reports stop: servers go stale, programs stop running, the plan is work-conserving.
        let later = t0 + Duration::from_secs(5);
        let plan = o.plan_window(later);
        assert_eq!(plan[0].target, ServeTarget::All);
        assert!(o.status(later).jobs.is_empty());
    }

    #[test]
    fn failing_condition_3_cools_down_then_retries() {
        let p = Params::default();
        let o = Orchestrator::new(p.clone(), OrchestratorMode::IOrchestrator, (0..6).collect());
        let mut now = Instant::now();
        // RD reported before the program was ever given dedicated service is ignored.
        feed(&o, now, &[("seq", 0.0, Some(50_000.0)), ("other", 4.0 * GB, None)]);
        assert_eq!(o.plan_window(now)[0].target, ServeTarget::Job("seq".into()));
        o.mark_served("seq", now);
        now += Duration::from_millis(100);
        // Under dedicated service its reuse distance is longer than a seek: it loses eligibility.
        feed(&o, now, &[("seq", 0.0, Some(50_000.0)), ("other", 4.0 * GB, None)]);
        assert_eq!(o.plan_window(now)[0].target, ServeTarget::All);
        let st = o.status(now);
        let seq = st.jobs.iter().find(|j| j.job == "seq").unwrap();
        assert!(!seq.eligible && seq.reason.contains("(3:"), "{}", seq.reason);
        for w in 0..COOLDOWN_WINDOWS - 1 {
            now += Duration::from_millis(100);
            feed(&o, now, &[("seq", 0.0, Some(50_000.0)), ("other", 4.0 * GB, None)]);
            assert_eq!(o.plan_window(now)[0].target, ServeTarget::All, "window {w}");
            assert!(o.status(now).jobs[1].reason.contains("cooling down"), "{}", o.status(now).jobs[1].reason);
        }
        // Cool-down over: it may try again (old RD no longer counts).
        now += Duration::from_millis(100);
        feed(&o, now, &[("seq", 0.0, Some(50_000.0)), ("other", 4.0 * GB, None)]);
        assert_eq!(o.plan_window(now)[0].target, ServeTarget::Job("seq".into()));
        o.mark_served("seq", now);
        // Failing again: twice as long a cool-down this time (windows counted: the failing one and the
        // cooling ones, until it is planned again).
        let windows_after = |o: &Orchestrator, now: &mut Instant, rd: f64| {
            let mut n = 0;
            loop {
                *now += Duration::from_millis(100);
                feed(o, *now, &[("seq", 0.0, Some(rd)), ("other", 4.0 * GB, None)]);
                if o.plan_window(*now)[0].target == ServeTarget::Job("seq".into()) {
                    return n;
                }
                n += 1;
            }
        };
        assert_eq!(windows_after(&o, &mut now, 50_000.0), 2 * COOLDOWN_WINDOWS);
        o.mark_served("seq", now);
        assert_eq!(windows_after(&o, &mut now, 50_000.0), 4 * COOLDOWN_WINDOWS);
        // A short RD under dedicated service: it keeps its slice, and passing resets the back-off.
        o.mark_served("seq", now);
        now += Duration::from_millis(100);
        feed(&o, now, &[("seq", 0.0, Some(900.0)), ("other", 4.0 * GB, None)]);
        let plan = o.plan_window(now);
        assert_eq!(plan[0].target, ServeTarget::Job("seq".into()));
        assert_eq!(plan[0].rd_us, Some(900.0));
        assert_eq!(windows_after(&o, &mut now, 50_000.0), COOLDOWN_WINDOWS);
    }

    #[test]
    fn hostile_reports_are_sanitised() {
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, vec![0, 1]);
        let now = Instant::now();
        let mut r = report(0, f64::NAN, &[("a", f64::INFINITY, Some(f64::NAN)), ("", 1.0, None)]);
        r.jobs.push(JobLocality { job: "x".repeat(10_000), requests: 1, ..Default::default() });
        r.seek_time_us = -5.0;
        r.others_rd_us = Some(f64::NAN);
        assert!(o.record(r, now));
        let _ = o.plan_window(now);
        let st = o.status(now);
        assert_eq!(st.servers, vec![(0, 0.0, 0.0, 0)]);
        assert_eq!(st.jobs.len(), 1);
        assert_eq!(st.jobs[0].servers, vec![(0, 0.0, None)]);
    }

    #[test]
    fn requests_are_answered() {
        // Who may send them (the admin certificate or root for the mode, data servers for reports) is the
        // request table's (tessera_proto::requests), checked before the MDS's dispatch hands them here.
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, vec![0]);
        assert!(o.change_mode(OrchestratorMode::Even).is_ok());
        assert_eq!(o.mode(), OrchestratorMode::Even);
        assert!(o.change_mode(OrchestratorMode::Off).is_ok());
        assert_eq!(o.mode(), OrchestratorMode::Off);
        assert_eq!(o.report(LocalityReport { ds: 0, ..Default::default() }).unwrap(), MdsReply::Ok);
        match o.status_reply().unwrap() {
            MdsReply::Orchestrator(s) => {
                assert_eq!((s.mode, s.window_ms, s.servers.len()), (OrchestratorMode::Off, 500, 1))
            }
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn skew_median_and_epochs() {
        let o = Orchestrator::new(Params::default(), OrchestratorMode::IOrchestrator, vec![0]);
        for s in [50, 10, 30, 1000, 20] {
            o.record_skew(s);
        }
        let st = o.status(Instant::now());
        assert_eq!((st.last_switch_skew_us, st.median_switch_skew_us), (Some(20), Some(30)));
        let a = o.next_epoch();
        assert!(o.next_epoch() > a && a > 1_600_000_000_000_000);
    }

    #[test]
    fn params_from_options_are_made_safe() {
        let o = OrchestratorOptions {
            window_ms: 0,
            min_slice_fraction: f64::NAN,
            locality_ratio: -1.0,
            fallback_windows: 0,
            job_idle_ms: 1,
            ..Default::default()
        };
        let p = Params::from_options(&o);
        assert_eq!(p.window, Duration::from_millis(10));
        assert_eq!(p.min_slice_fraction, 0.05);
        assert_eq!(p.locality_ratio, 0.0);
        assert_eq!(p.fallback_ms(), 10);
        assert_eq!(p.job_idle, Duration::from_millis(20));
        assert_eq!(Params::default().fallback_ms(), 1000);
    }
}
