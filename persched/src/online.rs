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
    if p.valid(apps) && horizon.is_finite() {
        while events < MAX_EVENTS {
            let since: Vec<Option<f64>> = phase
                .iter()
                .map(|ph| match ph {
                    Phase::Io { since, .. } => Some(*since),
                    Phase::Compute { .. } => None,
                })
                .collect();
            rate = rates(p, apps, policy, &since, &done, &vec![now; n]);
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

/// The rates of the transferring applications under `policy` (see the module's decisions), also used by
/// the live arbiter ([`super::live`]): `since[k]` is when application k's pending transfer was requested
/// (`None`: it computes), `done[k]` its completed instances and `elapsed[k]` the time since it was
/// released (the simulator releases all at 0). Returns bytes/s per application.
pub fn rates(
    p: &Platform,
    apps: &[App],
    policy: Policy,
    since: &[Option<f64>],
    done: &[u64],
    elapsed: &[f64],
) -> Vec<f64> {
    let n = apps.len();
    let mut rate = vec![0.0f64; n];
    let io: Vec<usize> = (0..n).filter(|&k| since.get(k).copied().flatten().is_some()).collect();
    if io.is_empty() {
        return rate;
    }
    if policy == Policy::Fair {
        let nodes: f64 = io.iter().map(|&k| apps[k].beta).sum();
        let per_node = p.b.min(p.big_b / nodes);
        for &k in &io {
            rate[k] = apps[k].beta * per_node;
        }
        return rate;
    }
    let key = |k: usize| -> f64 {
        match policy {
            Policy::MaxSysEff => apps[k].beta * apps[k].w / apps[k].vol,
            _ => {
                let t = elapsed.get(k).copied().unwrap_or(0.0);
                let d = done.get(k).copied().unwrap_or(0);
                let rt = if t > 0.0 { d as f64 * apps[k].w / t } else { 0.0 };
                if rt > 0.0 {
                    p.rho(&apps[k]) / rt
                } else {
                    f64::INFINITY
                }
            }
        }
    };
    let at = |k: usize| since[k].unwrap_or(f64::INFINITY);
    let mut order = io;
    order.sort_by(|&x, &y| key(y).total_cmp(&key(x)).then(at(x).total_cmp(&at(y))).then(x.cmp(&y)));
    let mut left = p.big_b;
    for k in order {
        let r = p.peak(&apps[k]).min(left);
        rate[k] = r.max(0.0);
        left -= rate[k];
    }
    rate
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
