//! `tessera-bench persched sim`: the paper's Table 4 from the model (specs/periodic.md "Results to
//! reproduce"): per set the upper bound, PerSched's dilation and SysEff, the online heuristics' best, the
//! chosen period and the planner's time, next to the paper's values.
//!
//! The planner lives in `tessera_mds::persched` (it is the MDS's decision; bench is the top layer and may
//! depend on it), so the simulator runs exactly the code the file system runs.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;
use tessera_mds::persched::online::Baselines;
use tessera_mds::persched::table1::{self, PLATFORM};
use tessera_mds::persched::{persched, Params};

#[derive(Args, Debug)]
pub struct PerschedArgs {
    #[command(subcommand)]
    cmd: PerschedCmd,
}

#[derive(Subcommand, Debug)]
enum PerschedCmd {
    /// Table 4 from the model: PerSched against the online heuristics on the paper's ten sets.
    Sim(SimArgs),
    /// A periodic IOR-like job: β tasks; compute w seconds (a sleep), then write vol; N times; with
    /// --register it follows its PerSched grant. Reports each instance and the measured ρ̃ and dilation.
    Job(crate::perschedlive::JobArgs),
}

#[derive(Args, Debug)]
pub struct SimArgs {
    /// Which set (1..10) or `all`.
    #[arg(long, default_value = "all")]
    set: String,
    /// Also write the records as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Horizon of the online simulation, in multiples of T_min (the longest instance).
    #[arg(long, default_value_t = 100.0)]
    horizon: f64,
    /// Diagnostic: start PerSched's period sweep here (seconds) instead of T_min (T_max = 10 times it).
    #[arg(long)]
    sweep_from: Option<f64>,
}

/// One set's result, exactly the fields of the issue.
#[derive(Serialize, Debug, Clone)]
pub struct SimRecord {
    pub set: usize,
    pub upper_bound: f64,
    pub persched_dilation: f64,
    pub persched_syseff: f64,
    pub online_dilation: f64,
    pub online_syseff: f64,
    pub period_s: f64,
    pub planner_ms: f64,
}

fn parse_sets(s: &str) -> Result<Vec<usize>> {
    if s == "all" {
        return Ok((1..=10).collect());
    }
    let n: usize = s.parse().with_context(|| format!("--set {s}: expected 1..10 or all"))?;
    if !(1..=10).contains(&n) {
        bail!("--set {n}: the paper has sets 1..10");
    }
    Ok(vec![n])
}

/// Runs PerSched and the baselines on one set.
pub fn sim_set(set: usize, horizon_periods: f64, sweep_from: Option<f64>) -> Result<(SimRecord, f64, f64)> {
    let apps = table1::set(set).context("no such set")?;
    let t0 = Instant::now();
    let plan = persched(&PLATFORM, &apps, Params { sweep_from, ..Params::default() }).context("no plan")?;
    let planner_ms = t0.elapsed().as_secs_f64() * 1e3;
    let base = Baselines::run(&PLATFORM, &apps, horizon_periods * plan.t_min);
    let rec = SimRecord {
        set,
        upper_bound: PLATFORM.upper_bound(&apps),
        persched_dilation: plan.pattern.dilation(),
        persched_syseff: plan.pattern.syseff(),
        online_dilation: base.online_dilation(),
        online_syseff: base.online_syseff(),
        period_s: plan.pattern.period(),
        planner_ms,
    };
    Ok((rec, base.none.dilation, base.none.syseff))
}

fn pct(ours: f64, paper: f64) -> f64 {
    (ours / paper - 1.0) * 100.0
}

pub async fn run(a: PerschedArgs) -> Result<()> {
    match a.cmd {
        PerschedCmd::Sim(s) => sim(s),
        PerschedCmd::Job(j) => crate::perschedlive::job_cmd(j).await,
    }
}

fn sim(a: SimArgs) -> Result<()> {
    let sets = parse_sets(&a.set)?;
    if !(a.horizon.is_finite() && a.horizon >= 1.0) {
        bail!("--horizon must be at least 1");
    }
    println!(
        "{:>3} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>10} {:>9} | paper: {:>6} {:>7} {:>6} {:>7} | diff% dil SE",
        "set", "UB", "PS dil", "PS SE", "onl dil", "onl SE", "none dil", "none SE", "period s", "plan ms",
        "PS dil", "PS SE", "onl dil", "onl SE"
    );
    let mut recs = Vec::new();
    for set in sets {
        let (r, none_dil, none_se) = sim_set(set, a.horizon, a.sweep_from)?;
        let p = table1::TABLE4[set - 1];
        println!(
            "{:>3} {:>6.3} | {:>8.3} {:>8.4} | {:>8.3} {:>8.4} | {:>8.3} {:>8.4} | {:>10.1} {:>9.1} | paper: {:>6.3} {:>7.4} {:>6.3} {:>7.4} | {:+.2} {:+.2}",
            r.set, r.upper_bound, r.persched_dilation, r.persched_syseff, r.online_dilation, r.online_syseff,
            none_dil, none_se, r.period_s, r.planner_ms, p.1, p.2, p.3, p.4,
            pct(r.persched_dilation, p.1), pct(r.persched_syseff, p.2)
        );
        recs.push(r);
    }
    if let Some(path) = a.json {
        crate::report::write_json(&path, &recs)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
