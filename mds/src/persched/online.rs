//! The baselines PerSched is compared with (spec "Results to reproduce", paper §4.3–4.4): no scheduler, and
//! the greedy online heuristics of the authors' earlier work ([18], Gainaru et al., IPDPS 2015), evaluated
//! by an event simulation of the model of §2 over a long horizon. Pure: no I/O, no clock.
//!
//! Every application is released at time 0 and starts computing; at every event (a compute ends and a
//! transfer is requested, or a transfer completes) the policy reallocates the bandwidth among the
//! applications that are transferring; between events the rates are constant.
//!
//! **decisions** (the paper only names [18]'s heuristics and reports the best of them per objective):
//! - [`Policy::Fair`], no scheduler: the storage shares its bandwidth equally among the nodes that are
//!   transferring (max-min fair per node: each node gets `min(b, B / Σβ)` over the transferring apps),
//!   which is what concurrent streams get from a congested file system.
//! - [`Policy::MaxSysEff`]: greedy, applications in decreasing order of `β w / vol` (the compute a transfer
//!   unlocks per unit of volume), each granted `min(β b, what is left of B)`; ties: the earliest request.
//! - [`Policy::MinDilation`]: greedy likewise, in decreasing order of the application's current dilation
//!   `ρ / ρ̃(t)` with `ρ̃(t) = (instances done) w / t` (none done yet: infinite); ties: the earliest request.
//! - Both heuristics are preemptive at events (the order is recomputed at each one) and work-conserving.
//! - ρ̃ of an application is measured as in §2.3: `Σ w` of its completed instances over the time its last
//!   instance completed (so no partial instance biases it).

use super::{App, Platform};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Fair,
    MaxSysEff,
    MinDilation,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Fair, Policy::MaxSysEff, Policy::MinDilation];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fair => "none",
            Policy::MaxSysEff => "online-syseff",
            Policy::MinDilation => "online-dilation",
        }
    }
}

/// What one simulated run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub rho_tilde: Vec<f64>,
    pub instances: Vec<u64>,
    pub syseff: f64,
    pub dilation: f64,
    /// Events simulated.
    pub events: u64,
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    Compute { until: f64 },
    Io { left: f64, since: f64 },
}

/// Upper bound on simulated events, so no input can make a run endless.
pub const MAX_EVENTS: u64 = 20_000_000;

/// Simulates `apps` under `policy` from time 0 to `horizon` seconds.
pub fn simulate(p: &Platform, apps: &[App], policy: Policy, horizon: f64) -> Outcome {
    let n = apps.len();
    let mut phase: Vec<Phase> = apps.iter().map(|a| Phase::Compute { until: a.w }).collect();
    let mut done = vec![0u64; n];
    let mut last_done = vec![0.0f64; n];
    let mut rate = vec![0.0f64; n];
    let mut now = 0.0f64;
    let mut events = 0u64;
    let rho: Vec<f64> = apps.iter().map(|a| p.rho(a)).collect();
    if p.valid(apps) && horizon.is_finite() {
        while events < MAX_EVENTS {
            allocate(p, apps, policy, &phase, &done, &rho, now, &mut rate);
            let mut dt = f64::INFINITY;
            for k in 0..n {
                let d = match phase[k] {
                    Phase::Compute { until } => until - now,
                    Phase::Io { left, .. } if rate[k] > 0.0 => left / rate[k],
                    Phase::Io { .. } => f64::INFINITY,
                };
                dt = dt.min(d.max(0.0));
            }
            if !dt.is_finite() || now + dt > horizon {
                break;
            }
            now += dt;
            events += 1;
            for k in 0..n {
                match &mut phase[k] {
                    Phase::Compute { until } => {
                        if *until <= now + now.abs() * 1e-12 {
                            phase[k] = Phase::Io { left: apps[k].vol, since: now };
                        }
                    }
                    Phase::Io { left, .. } => {
                        *left -= rate[k] * dt;
                        if *left <= apps[k].vol * 1e-9 {
                            done[k] += 1;
                            last_done[k] = now;
                            phase[k] = Phase::Compute { until: now + apps[k].w };
                        }
                    }
                }
            }
        }
    }
    let rho_tilde: Vec<f64> = (0..n)
        .map(|k| if done[k] > 0 && last_done[k] > 0.0 { done[k] as f64 * apps[k].w / last_done[k] } else { 0.0 })
        .collect();
    Outcome {
        syseff: p.syseff(apps, &rho_tilde),
        dilation: p.dilation(apps, &rho_tilde),
        rho_tilde,
        instances: done,
        events,
    }
}

/// The rates of the transferring applications at `now` under `policy` (see the module's decisions).
#[allow(clippy::too_many_arguments)]
fn allocate(
    p: &Platform,
    apps: &[App],
    policy: Policy,
    phase: &[Phase],
    done: &[u64],
    rho: &[f64],
    now: f64,
    rate: &mut [f64],
) {
    rate.iter_mut().for_each(|r| *r = 0.0);
    let io: Vec<usize> = (0..apps.len()).filter(|&k| matches!(phase[k], Phase::Io { .. })).collect();
    if io.is_empty() {
        return;
    }
    if policy == Policy::Fair {
        let nodes: f64 = io.iter().map(|&k| apps[k].beta).sum();
        let per_node = p.b.min(p.big_b / nodes);
        for &k in &io {
            rate[k] = apps[k].beta * per_node;
        }
        return;
    }
    let key = |k: usize| -> f64 {
        match policy {
            Policy::MaxSysEff => apps[k].beta * apps[k].w / apps[k].vol,
            _ => {
                let rt = if now > 0.0 { done[k] as f64 * apps[k].w / now } else { 0.0 };
                if rt > 0.0 {
                    rho[k] / rt
                } else {
                    f64::INFINITY
                }
            }
        }
    };
    let since = |k: usize| match phase[k] {
        Phase::Io { since, .. } => since,
        Phase::Compute { .. } => f64::INFINITY,
    };
    let mut order = io;
    order.sort_by(|&x, &y| key(y).total_cmp(&key(x)).then(since(x).total_cmp(&since(y))).then(x.cmp(&y)));
    let mut left = p.big_b;
    for k in order {
        let r = p.peak(&apps[k]).min(left);
        rate[k] = r.max(0.0);
        left -= rate[k];
    }
}

/// The baselines of one set: no scheduler, each heuristic, and the paper's "online" column (the best
/// dilation and the best SysEff reached by any heuristic, not necessarily the same one).
#[derive(Clone, Debug)]
pub struct Baselines {
    pub none: Outcome,
    pub max_syseff: Outcome,
    pub min_dilation: Outcome,
}

impl Baselines {
    pub fn run(p: &Platform, apps: &[App], horizon: f64) -> Baselines {
        Baselines {
            none: simulate(p, apps, Policy::Fair, horizon),
            max_syseff: simulate(p, apps, Policy::MaxSysEff, horizon),
            min_dilation: simulate(p, apps, Policy::MinDilation, horizon),
        }
    }

    pub fn online_dilation(&self) -> f64 {
        self.max_syseff.dilation.min(self.min_dilation.dilation)
    }

    pub fn online_syseff(&self) -> f64 {
        self.max_syseff.syseff.max(self.min_dilation.syseff)
    }
}
