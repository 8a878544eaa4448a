//! Spec: specs/periodic.md "In the file system" — the MDS's registry of periodic jobs. Pure (times are
//! passed in, milliseconds since the Unix epoch): a job registers its profile (β, w, vol), the pattern is
//! recomputed with [`super::persched`] when a periodic job arrives or leaves, each job is handed its
//! intervals (start, end, bandwidth, modulo T, from a common origin), and a job that stops polling loses
//! its reservation after the lease. Jobs that do not register may be detected from their byte counters
//! ([`Registry::observe`], [`super::detect`]); a detected job keeps its reservation while it does I/O
//! and loses it after a few idle periods.
//!
//! Changes and planning are separate steps, so the MDS can plan outside its lock (PERSCHED takes up to
//! seconds with K' = 10): a change marks the pattern stale, [`Registry::plan_input`] takes what the planner
//! needs, [`PlanInput::solve`] is the planner (no registry), and [`Registry::install`] puts its result in
//! place unless the jobs changed meanwhile. [`Registry::replan`] does the three at once. Until a new pattern
//! is installed the jobs keep following the old one; a job that is not in it yet gets an empty grant (it is
//! not delayed).

use super::online::{self, Policy};
use super::{detect, persched, App, Params, Platform};
use std::collections::{BTreeMap, BTreeSet};
use tessera_proto::config::{PerschedOptions, PerschedScheduler};
use tessera_proto::msg::{
    PeriodicGrant, PeriodicInterval, PeriodicJob, PeriodicProfile, PeriodicReport, PeriodicSource,
};

/// Periodic jobs one MDS plans for at most (the planner's cost grows with K²).
pub const MAX_JOBS: usize = 64;
/// Longest compute phase accepted, ms (one day).
pub const MAX_COMPUTE_MS: u64 = 86_400_000;
/// Most instances the largest pattern PERSCHED tries may hold (`Σ_k K' T_min / (w_k + time_io_k)`): bounds the
/// planner's time and memory whatever jobs declare (a 1 ms job beside a 1 day job would otherwise ask for
/// hundreds of millions). The paper's set 5 needs about 22 000.
pub const MAX_PATTERN_INSTANCES: f64 = 50_000.0;
/// Jobs remembered as having left on their own (not detected again); beyond this, no more are remembered.
pub const MAX_LEFT: usize = 1024;
/// The online arbiter hands out no rate below this share of the job's peak `min(β b, B)`: the job waits
/// instead (see [`Registry::io`]).
pub const MIN_RATE_SHARE: f64 = 0.01;
/// A detected job loses its reservation after this many of its periods without I/O (or the lease, if longer).
pub const DETECTED_IDLE_PERIODS: u64 = 3;

/// The platform of the live system, bytes and bytes per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiveConfig {
    /// N: the nodes SysEff is normalised by.
    pub nodes: u32,
    /// b: bandwidth of one client node, bytes/s.
    pub node_bw: f64,
    /// B: the file system's total bandwidth, bytes/s.
    pub total_bw: f64,
    /// A job that has not polled for this long loses its reservation, ms.
    pub lease_ms: u64,
    /// PERSCHED's K' (`T_max = K' T_min`).
    pub k_prime: f64,
    /// Grants pace at the pattern's rates times (1 + this) (`[persched] rate_headroom`).
    pub headroom: f64,
    /// `Some`: no pattern; an online arbiter grants rates at every transfer's start and end with this
    /// greedy policy (the baselines of [`super::online`], live).
    pub online: Option<Policy>,
}

/// What a job declares: β nodes, compute w, then a transfer of `volume` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub nodes: u32,
    pub compute_ms: u64,
    pub volume: u64,
}

/// One job's reservation: during `[start_ms, end_ms)` modulo `period_ms` (counted from `origin_ms`) the job
/// may transfer at `bytes_per_sec` in total.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// Changes whenever the pattern is recomputed.
    pub epoch: u64,
    pub origin_ms: u64,
    pub period_ms: u64,
    pub intervals: Vec<(u64, u64, u64)>,
    /// Poll again within this long or lose the reservation.
    pub lease_ms: u64,
    /// Scheduled online: no intervals; ask for a rate with [`Registry::io`].
    pub online: bool,
    /// The job's volume per instance, bytes.
    pub volume: u64,
}

/// One job's line of `tessera jobs --periodic`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobStatus {
    pub job: String,
    pub profile: Profile,
    /// ρ̃ of the pattern.
    pub planned_rho: f64,
    /// ρ̃ from the job's own count of finished instances since it registered (`None`: none reported).
    pub measured_rho: Option<f64>,
    /// ρ / measured ρ̃ (or / planned ρ̃ while nothing is measured).
    pub dilation: f64,
    pub source: PeriodicSource,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    pub jobs: Vec<JobStatus>,
    pub period_ms: u64,
    pub syseff: f64,
    pub upper_bound: f64,
}

#[derive(Clone, Debug)]
struct Entry {
    profile: Profile,
    registered_ms: u64,
    /// Last poll (registered) or last I/O seen (detected).
    last_seen_ms: u64,
    done: u64,
    /// Online mode: since when the job waits for or makes a transfer.
    io_since_ms: Option<u64>,
    /// Online mode: when the job last asked for a rate.
    io_asked_ms: u64,
    source: PeriodicSource,
    /// Silent for longer than this: the reservation goes.
    idle_ms: u64,
}

/// The registry and its current pattern.
#[derive(Debug)]
pub struct Registry {
    cfg: LiveConfig,
    jobs: BTreeMap<String, Entry>,
    /// Counts changes to the set of periodic jobs or their profiles.
    changes: u64,
    /// The value of `changes` the current pattern was planned for.
    planned_for: u64,
    epoch: u64,
    origin_ms: u64,
    period_ms: u64,
    grants: BTreeMap<String, Vec<(u64, u64, u64)>>,
    planned: BTreeMap<String, f64>,
    /// Jobs that left on their own: they said they are not periodic, detection leaves them alone.
    left: BTreeSet<String>,
}

/// Why a periodic job was not taken into the pattern ([`Registry::register`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("nodes must be 1..={0} (the platform's N)")]
    Nodes(u32),
    #[error("compute must be 1 ms..={MAX_COMPUTE_MS} ms")]
    Compute,
    #[error("volume must be at least one byte")]
    Volume,
    #[error("at most {MAX_JOBS} periodic jobs")]
    TooManyJobs,
    #[error(
        "this profile beside the other periodic jobs would need patterns of {0:.0} instances \
         (at most {MAX_PATTERN_INSTANCES:.0}): their periods differ too much"
    )]
    PeriodsDiffer(f64),
}

impl Profile {
    pub fn check(&self, cfg: &LiveConfig) -> Result<(), Refused> {
        if self.nodes == 0 || self.nodes > cfg.nodes {
            return Err(Refused::Nodes(cfg.nodes));
        }
        if self.compute_ms == 0 || self.compute_ms > MAX_COMPUTE_MS {
            return Err(Refused::Compute);
        }
        if self.volume == 0 {
            return Err(Refused::Volume);
        }
        Ok(())
    }

    fn app(&self) -> App {
        App { beta: f64::from(self.nodes), w: self.compute_ms as f64 / 1e3, vol: self.volume as f64 }
    }
}

impl Registry {
    pub fn new(cfg: LiveConfig) -> Registry {
        Registry {
            cfg,
            jobs: BTreeMap::new(),
            changes: 0,
            planned_for: 0,
            epoch: 0,
            origin_ms: 0,
            period_ms: 0,
            grants: BTreeMap::new(),
            planned: BTreeMap::new(),
            left: BTreeSet::new(),
        }
    }

    fn params(&self) -> Params {
        let k = self.cfg.k_prime;
        Params { k_prime: if k.is_finite() && k >= 1.0 { k } else { Params::default().k_prime }, ..Params::default() }
    }

    fn platform(&self) -> Platform {
        Platform { nodes: f64::from(self.cfg.nodes.max(1)), b: self.cfg.node_bw, big_b: self.cfg.total_bw }
    }

    /// Registers (or updates) `job`'s profile; the pattern goes stale when the set of periodic jobs or a
    /// profile changes (its grant comes with the next plan: [`Registry::replan`], then [`Registry::grant`]).
    pub fn register(&mut self, job: &str, p: Profile, now_ms: u64) -> Result<(), Refused> {
        self.admit(job, p, now_ms, PeriodicSource::Registered, self.cfg.lease_ms)?;
        self.left.remove(job);
        Ok(())
    }

    /// [`Registry::register`] from either source.
    fn admit(
        &mut self,
        job: &str,
        p: Profile,
        now_ms: u64,
        source: PeriodicSource,
        idle_ms: u64,
    ) -> Result<(), Refused> {
        p.check(&self.cfg)?;
        let known = self.jobs.get(job).map(|e| e.profile);
        if known.is_none() && self.jobs.len() >= MAX_JOBS {
            return Err(Refused::TooManyJobs);
        }
        let pf = self.platform();
        let cycles: Vec<f64> = self
            .jobs
            .iter()
            .filter(|(j, _)| j.as_str() != job)
            .map(|(_, e)| e.profile.app())
            .chain([p.app()])
            .map(|a| a.w + pf.time_io(&a))
            .collect();
        let t_min = cycles.iter().copied().fold(0.0, f64::max);
        let instances: f64 = cycles.iter().map(|c| self.params().k_prime * t_min / c).sum();
        if instances > MAX_PATTERN_INSTANCES {
            return Err(Refused::PeriodsDiffer(instances));
        }
        let e = self.jobs.entry(job.to_string()).or_insert(Entry {
            profile: p,
            registered_ms: now_ms,
            last_seen_ms: now_ms,
            done: 0,
            io_since_ms: None,
            io_asked_ms: 0,
            source,
            idle_ms,
        });
        e.last_seen_ms = now_ms;
        e.source = source;
        e.idle_ms = idle_ms;
        if known != Some(p) {
            e.profile = p;
            e.registered_ms = now_ms;
            e.done = 0;
            e.io_since_ms = None;
            self.changes += 1;
        }
        Ok(())
    }

    /// The job leaves; the pattern goes stale for the others. It is not detected again (until it
    /// registers again): leaving says it is not periodic.
    pub fn leave(&mut self, job: &str) -> bool {
        if self.left.len() < MAX_LEFT {
            self.left.insert(job.to_string());
        }
        let gone = self.jobs.remove(job).is_some();
        if gone {
            self.changes += 1;
        }
        gone
    }

    /// Renews `job`'s lease, records how many instances it finished since it registered, and returns its
    /// current grant (`None`: not registered, e.g. expired — it must register again). A detected job's
    /// reservation is renewed by its I/O, not by polls (clients that follow it poll whatever it does);
    /// `done` 0 reports nothing (a client that does not count instances, such as a mount).
    pub fn poll(&mut self, job: &str, done: u64, now_ms: u64) -> Option<Grant> {
        let e = self.jobs.get_mut(job)?;
        if e.source == PeriodicSource::Registered {
            e.last_seen_ms = now_ms;
        }
        if done > 0 {
            e.done = done;
        }
        self.grant(job)
    }

    /// Detection (specs/periodic.md, our addition): looks at the recent byte series of jobs that did
    /// I/O lately. A job that is neither registered nor opted out and whose series is periodic
    /// ([`detect::detect`]) joins the pattern as `detected`, with β = its clients (one per node, at most
    /// N), w = the gap and vol = the mean burst; a detected job's reservation is renewed by its I/O and
    /// goes after [`DETECTED_IDLE_PERIODS`] of its periods without any (or the lease, if longer).
    /// **decision**: a detected profile is kept as first detected while the job stays (once gated, its
    /// bursts are reshaped by its own pattern, so re-detecting would chase itself). Returns the jobs
    /// newly detected.
    pub fn observe(&mut self, series: &[detect::JobSeries], params: &detect::Params, now_ms: u64) -> Vec<String> {
        let mut new = Vec::new();
        for s in series {
            if let Some(e) = self.jobs.get_mut(&s.job) {
                if e.source == PeriodicSource::Detected {
                    e.last_seen_ms = e.last_seen_ms.max(s.last_io_ms.min(now_ms));
                }
                continue;
            }
            if self.left.contains(&s.job) {
                continue;
            }
            let Some(d) = detect::detect(&s.bytes, s.dt_ms, params) else { continue };
            let p = Profile {
                nodes: s.nodes.clamp(1, self.cfg.nodes.max(1)),
                compute_ms: d.gap_ms.clamp(1, MAX_COMPUTE_MS),
                volume: d.volume.max(1),
            };
            let idle = self.cfg.lease_ms.max(d.period_ms.saturating_mul(DETECTED_IDLE_PERIODS));
            match self.admit(&s.job, p, now_ms, PeriodicSource::Detected, idle) {
                Ok(_) => new.push(s.job.clone()),
                Err(e) => tracing::debug!(job = %s.job, "detected periodic job not planned: {e}"),
            }
        }
        new
    }

    /// Drops the jobs silent for longer than the lease (registered: they stopped following or died;
    /// detected: no I/O for a few periods); the pattern goes stale if any went. Returns their names.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let gone: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, e)| now_ms.saturating_sub(e.last_seen_ms) > e.idle_ms)
            .map(|(j, _)| j.clone())
            .collect();
        for j in &gone {
            self.jobs.remove(j);
            self.changes += 1;
        }
        gone
    }

    fn empty_grant(&self) -> Grant {
        Grant {
            epoch: self.epoch,
            origin_ms: self.origin_ms,
            period_ms: 0,
            intervals: Vec::new(),
            lease_ms: self.cfg.lease_ms,
            online: self.cfg.online.is_some(),
            volume: 0,
        }
    }

    /// `job`'s grant in the current pattern (`None`: not registered). A job the current pattern was planned
    /// without (it arrived since, or the planner found no pattern) gets an empty one: no delay.
    pub fn grant(&self, job: &str) -> Option<Grant> {
        let volume = self.jobs.get(job)?.profile.volume;
        let empty = Grant { volume, ..self.empty_grant() };
        if self.cfg.online.is_some() {
            return Some(empty);
        }
        let Some(iv) = self.grants.get(job) else { return Some(empty) };
        Some(Grant {
            epoch: self.epoch,
            origin_ms: self.origin_ms,
            period_ms: self.period_ms,
            intervals: iv.clone(),
            lease_ms: self.cfg.lease_ms,
            online: false,
            volume,
        })
    }

    /// Whether the jobs or their profiles changed since the current pattern was planned.
    pub fn stale(&self) -> bool {
        self.changes != self.planned_for
    }

    /// What the planner needs if the pattern is [stale](Registry::stale), else `None`.
    pub fn plan_input(&self) -> Option<PlanInput> {
        self.stale().then(|| PlanInput {
            changes: self.changes,
            names: self.jobs.keys().cloned().collect(),
            apps: self.jobs.values().map(|e| e.profile.app()).collect(),
            platform: self.platform(),
            params: self.params(),
            headroom: self.cfg.headroom,
            online: self.cfg.online.is_some(),
        })
    }

    /// Puts `plan` in place as the current pattern, starting at `now_ms`, unless the jobs changed since its
    /// input was taken (then it returns `false`: plan again).
    ///
    /// **decision**: the new pattern starts at `now` (its origin) for every job at once; jobs pick it up at
    /// their next poll.
    pub fn install(&mut self, plan: Plan, now_ms: u64) -> bool {
        if plan.changes != self.changes {
            return false;
        }
        self.planned_for = plan.changes;
        self.epoch += 1;
        self.origin_ms = now_ms;
        self.period_ms = plan.period_ms;
        self.grants = plan.grants;
        self.planned = plan.planned;
        true
    }

    /// Plans now, under the caller's borrow, if the pattern is stale (tests and callers that hold no lock).
    pub fn replan(&mut self, now_ms: u64) {
        if let Some(input) = self.plan_input() {
            self.install(input.solve(), now_ms);
        }
    }

    /// Online mode: `job` wants to transfer (`want`) or has just finished (and has finished `done` instances
    /// since it registered). Renews its lease like a poll. Returns the rate the policy gives it now among
    /// the jobs that want to transfer, bytes/s (0: wait; it asks again). `None`: not registered.
    ///
    /// **decision**: the arbiter is stateless between calls: each call recomputes every rate from who is
    /// waiting or transferring ([`online::rates`], preemptive at events as in the simulator), and a
    /// transferring job learns a changed rate when it next asks (the client asks at least every 100 ms), so
    /// a newcomer may share the bandwidth with the job it preempts for up to that long. Outside online mode
    /// the rate is 0 when a pattern exists (the job follows its intervals).
    ///
    /// **decision**: a job that wants to transfer but has not asked for a rate for longer than the lease
    /// counts as done: a transferring job asks at least every 100 ms and a waiting one every 20 ms, so it
    /// lost its end message (or stopped mid-transfer) — without this, a job of higher priority that still
    /// polls would hold the bandwidth from the others for ever.
    ///
    /// **decision**: what is left of B after the jobs served first may be a sliver (persched-live's
    /// B = 217527955 B/s beside a 2-node job's 2 b = 217527954 B/s leaves 1 B/s); a job given it would pace
    /// a 1 MiB write over days and keep that pace after the others finish. A rate below
    /// [`MIN_RATE_SHARE`] of the job's peak is 0: it waits and asks again.
    pub fn io(&mut self, job: &str, want: bool, done: u64, now_ms: u64) -> Option<u64> {
        let e = self.jobs.get_mut(job)?;
        e.last_seen_ms = now_ms;
        e.done = done;
        e.io_since_ms = if want { Some(e.io_since_ms.unwrap_or(now_ms)) } else { None };
        e.io_asked_ms = now_ms;
        let Some(policy) = self.cfg.online else { return Some(0) };
        if !want {
            return Some(0);
        }
        let lease = self.cfg.lease_ms;
        let names: Vec<&String> = self.jobs.keys().collect();
        let apps: Vec<App> = self.jobs.values().map(|e| e.profile.app()).collect();
        let since: Vec<Option<f64>> = self
            .jobs
            .values()
            .map(|e| e.io_since_ms.filter(|_| now_ms.saturating_sub(e.io_asked_ms) <= lease).map(|t| t as f64 / 1e3))
            .collect();
        let done: Vec<u64> = self.jobs.values().map(|e| e.done).collect();
        let elapsed: Vec<f64> =
            self.jobs.values().map(|e| now_ms.saturating_sub(e.registered_ms) as f64 / 1e3).collect();
        let platform = self.platform();
        let rates = online::rates(&platform, &apps, policy, &since, &done, &elapsed);
        let k = names.iter().position(|n| n.as_str() == job)?;
        let peak = platform.peak(&apps[k]);
        Some(if rates[k] >= peak * MIN_RATE_SHARE { rates[k].ceil() as u64 } else { 0 })
    }

    pub fn status(&self, now_ms: u64) -> Status {
        let p = self.platform();
        let apps: Vec<App> = self.jobs.values().map(|e| e.profile.app()).collect();
        let mut jobs = Vec::new();
        let mut eff = Vec::new();
        for ((name, e), a) in self.jobs.iter().zip(&apps) {
            let planned = self.planned.get(name).copied().unwrap_or(0.0);
            let age = now_ms.saturating_sub(e.registered_ms) as f64 / 1e3;
            let measured = (e.done > 0 && age > 0.0).then(|| (e.done as f64 * a.w / age).min(1.0));
            let r = measured.unwrap_or(planned);
            eff.push(r);
            jobs.push(JobStatus {
                job: name.clone(),
                profile: e.profile,
                planned_rho: planned,
                measured_rho: measured,
                dilation: if r > 0.0 { p.rho(a) / r } else { f64::INFINITY },
                source: e.source,
            });
        }
        Status { jobs, period_ms: self.period_ms, syseff: p.syseff(&apps, &eff), upper_bound: p.upper_bound(&apps) }
    }
}

/// The planner's input: the jobs in name order and the platform, taken from the registry.
#[derive(Clone, Debug)]
pub struct PlanInput {
    changes: u64,
    names: Vec<String>,
    apps: Vec<App>,
    platform: Platform,
    params: Params,
    headroom: f64,
    online: bool,
}

/// A pattern to install: per job its intervals (start ms, end ms, bytes/s) modulo `period_ms` and its ρ̃.
#[derive(Clone, Debug)]
pub struct Plan {
    changes: u64,
    period_ms: u64,
    grants: BTreeMap<String, Vec<(u64, u64, u64)>>,
    planned: BTreeMap<String, f64>,
}

impl PlanInput {
    /// Runs PERSCHED ([`super::persched`]); online, there is no pattern.
    ///
    /// **decision**: intervals are rounded outwards to whole milliseconds and their bandwidth up to whole
    /// bytes per second — sub-millisecond precision is beyond what the client's pacing can keep.
    ///
    /// **decision** (the paper's jobs follow their pattern exactly): a grant's bandwidth is the pattern's
    /// times (1 + `headroom`). Loop 2 shrinks the period until the instances just fit (the live mix's
    /// longest job computes and transfers in exactly T), so a job paced to its planned rate has no slack:
    /// a transfer a little slower than planned makes its next compute end after its next interval began,
    /// the delay accumulates, and once it passes the interval the job waits a whole period. With headroom a
    /// job served as planned finishes early and waits for its interval instead.
    pub fn solve(self) -> Plan {
        let mut plan = Plan { changes: self.changes, period_ms: 0, grants: BTreeMap::new(), planned: BTreeMap::new() };
        if self.online {
            return plan;
        }
        let Some(p) = persched(&self.platform, &self.apps, self.params) else { return plan };
        let pat = &p.pattern;
        plan.period_ms = (pat.period() * 1e3).ceil() as u64;
        for (k, name) in self.names.iter().enumerate() {
            let mut iv: Vec<(u64, u64, u64)> = pat
                .instances(k)
                .iter()
                .flat_map(|i| &i.pieces)
                .map(|pc| {
                    let bw = (pc.bw * (1.0 + self.headroom)).ceil() as u64;
                    ((pc.start * 1e3).floor() as u64, (pc.end * 1e3).ceil() as u64, bw)
                })
                .collect();
            iv.sort_unstable();
            plan.grants.insert(name.clone(), iv);
            plan.planned.insert(name.clone(), pat.rho_tilde(k));
        }
        plan
    }
}

impl LiveConfig {
    pub fn from_options(o: &PerschedOptions) -> LiveConfig {
        LiveConfig {
            nodes: o.nodes.max(1),
            node_bw: o.node_bandwidth.max(1) as f64,
            total_bw: o.total_bandwidth.max(1) as f64,
            lease_ms: o.lease_ms.max(100),
            k_prime: o.k_prime,
            headroom: if o.rate_headroom.is_finite() { o.rate_headroom.clamp(0.0, 1.0) } else { 0.0 },
            online: match o.scheduler {
                PerschedScheduler::Persched => None,
                PerschedScheduler::OnlineSyseff => Some(Policy::MaxSysEff),
                PerschedScheduler::OnlineDilation => Some(Policy::MinDilation),
            },
        }
    }
}

impl From<PeriodicProfile> for Profile {
    fn from(p: PeriodicProfile) -> Profile {
        Profile { nodes: p.nodes, compute_ms: p.compute_ms, volume: p.volume }
    }
}

impl From<Grant> for PeriodicGrant {
    fn from(g: Grant) -> PeriodicGrant {
        PeriodicGrant {
            epoch: g.epoch,
            origin_ms: g.origin_ms,
            period_ms: g.period_ms,
            intervals: g
                .intervals
                .into_iter()
                .map(|(s, e, bw)| PeriodicInterval { start_ms: s, end_ms: e, bytes_per_sec: bw })
                .collect(),
            lease_ms: g.lease_ms,
            online: g.online,
            volume: g.volume,
        }
    }
}

impl From<Status> for PeriodicReport {
    fn from(s: Status) -> PeriodicReport {
        PeriodicReport {
            jobs: s
                .jobs
                .into_iter()
                .map(|j| PeriodicJob {
                    job: j.job,
                    profile: PeriodicProfile {
                        nodes: j.profile.nodes,
                        compute_ms: j.profile.compute_ms,
                        volume: j.profile.volume,
                    },
                    planned_rho: j.planned_rho,
                    measured_rho: j.measured_rho,
                    dilation: j.dilation,
                    source: j.source,
                })
                .collect(),
            period_ms: s.period_ms,
            syseff: s.syseff,
            upper_bound: s.upper_bound,
        }
    }
}

impl LiveConfig {
    /// A small cluster for tests (here and the MDS's): 8 nodes of 10 MB/s, 30 MB/s in all, 5 s leases,
    /// no headroom, K' = 10.
    pub fn test_cluster() -> LiveConfig {
        LiveConfig {
            nodes: 8,
            node_bw: 10e6,
            total_bw: 30e6,
            lease_ms: 5_000,
            k_prime: 10.0,
            headroom: 0.0,
            online: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> LiveConfig {
        LiveConfig::test_cluster()
    }

    fn prof(nodes: u32, compute_ms: u64, volume: u64) -> Profile {
        Profile { nodes, compute_ms, volume }
    }

    /// Registers `job`, plans, and returns its grant (what the MDS answers a registration with).
    fn reg(r: &mut Registry, job: &str, p: Profile, now_ms: u64) -> Result<Grant, Refused> {
        r.register(job, p, now_ms)?;
        r.replan(now_ms);
        Ok(r.grant(job).expect("registered"))
    }

    #[test]
    fn arrival_and_departure_recompute_the_pattern() {
        let mut r = Registry::new(cfg());
        let g1 = reg(&mut r, "a", prof(4, 2_000, 60_000_000), 1_000).unwrap();
        assert_eq!(g1.epoch, 1);
        assert!(!g1.intervals.is_empty());
        // Alone: 4 nodes × 10 MB/s = 40 > B = 30 MB/s: 2 s of transfer at 30 MB/s.
        assert_eq!(g1.period_ms, 4_000);
        assert_eq!(g1.intervals.iter().map(|i| i.2).max(), Some(30_000_000));
        let g2 = reg(&mut r, "b", prof(4, 2_000, 60_000_000), 2_000).unwrap();
        assert_eq!(g2.epoch, 2);
        assert_eq!(r.poll("a", 0, 2_100).unwrap().epoch, 2);
        // Re-registering the same profile changes nothing.
        assert_eq!(reg(&mut r, "b", prof(4, 2_000, 60_000_000), 2_200).unwrap().epoch, 2);
        assert!(r.leave("b"));
        assert_eq!(r.poll("a", 0, 3_100).unwrap().epoch, 2, "the old pattern until the new one is planned");
        r.replan(3_000);
        assert_eq!(r.poll("a", 0, 3_100).unwrap().epoch, 3);
        assert!(r.poll("b", 0, 3_100).is_none());
    }

    #[test]
    fn a_plan_for_jobs_that_changed_meanwhile_is_not_installed() {
        let mut r = Registry::new(cfg());
        let a = prof(4, 2_000, 60_000_000);
        r.register("a", a, 0).unwrap();
        let input = r.plan_input().expect("stale");
        // b arrives while a's pattern is being planned (outside the MDS's lock).
        r.register("b", prof(4, 2_000, 60_000_000), 5).unwrap();
        assert!(!r.install(input.solve(), 10));
        assert_eq!(r.grant("a").unwrap().period_ms, 0, "nothing installed: a is not delayed meanwhile");
        assert!(r.install(r.plan_input().expect("still stale").solve(), 20));
        assert!(r.plan_input().is_none(), "planned");
        let (ga, gb) = (r.grant("a").unwrap(), r.grant("b").unwrap());
        assert!(!ga.intervals.is_empty() && !gb.intervals.is_empty());
        assert_eq!((ga.epoch, ga.origin_ms, gb.epoch), (1, 20, 1), "one pattern for both, from its installation");
        // The same profile again, or a poll, changes nothing.
        r.register("a", a, 30).unwrap();
        r.poll("b", 1, 40);
        assert!(r.plan_input().is_none());
        // A profile change or a departure makes it stale again; the old pattern holds until then.
        r.register("a", prof(2, 2_000, 60_000_000), 50).unwrap();
        assert!(r.plan_input().is_some());
        assert_eq!(r.grant("a").unwrap(), ga);
    }

    #[test]
    fn grants_pace_at_the_patterns_rate_plus_the_headroom() {
        // Alone at B = 30 MB/s (2 s of transfer): granted 33 MB/s with 10% headroom, over the same interval.
        let plain = reg(&mut Registry::new(cfg()), "a", prof(4, 2_000, 60_000_000), 0).unwrap();
        let mut r = Registry::new(LiveConfig { headroom: 0.1, ..cfg() });
        let g = reg(&mut r, "a", prof(4, 2_000, 60_000_000), 0).unwrap();
        assert_eq!(g.period_ms, plain.period_ms);
        assert_eq!(g.intervals.len(), plain.intervals.len());
        for (h, p) in g.intervals.iter().zip(&plain.intervals) {
            assert_eq!((h.0, h.1), (p.0, p.1), "the same interval");
            assert_eq!(h.2, (p.2 as f64 * 1.1).ceil() as u64);
        }
        let top = g.intervals.iter().map(|i| i.2).max().unwrap();
        assert!((33_000_000..=33_000_001).contains(&top), "{top}");
    }

    #[test]
    fn online_arbiter_grants_by_priority_and_never_more_than_b() {
        // B = 30 MB/s, b = 10 MB/s. a: 2 nodes (peak 20 MB/s), β w / vol small; b: 3 nodes (peak 30),
        // β w / vol large, so online-syseff serves b first.
        let mut r = Registry::new(LiveConfig { online: Some(Policy::MaxSysEff), ..cfg() });
        let ga = reg(&mut r, "a", prof(2, 1_000, 100_000_000), 0).unwrap();
        assert!(ga.online && ga.intervals.is_empty() && ga.period_ms == 0, "no pattern online: {ga:?}");
        reg(&mut r, "b", prof(3, 10_000, 10_000_000), 0).unwrap();
        assert_eq!(r.io("a", true, 0, 100), Some(20_000_000), "alone: its peak");
        assert_eq!(r.io("b", true, 0, 200), Some(30_000_000), "b first: all of B");
        assert_eq!(r.io("a", true, 0, 300), Some(0), "a is preempted while b transfers");
        assert_eq!(r.io("b", false, 1, 400), Some(0));
        assert_eq!(r.io("a", true, 0, 500), Some(20_000_000), "b done: a gets its peak again");
        assert_eq!(r.io("nobody", true, 0, 500), None);
        // online-dilation: the job with no finished instance (infinite dilation) goes first.
        let mut d = Registry::new(LiveConfig { online: Some(Policy::MinDilation), ..cfg() });
        reg(&mut d, "a", prof(2, 1_000, 100_000_000), 0).unwrap();
        reg(&mut d, "b", prof(3, 10_000, 10_000_000), 0).unwrap();
        d.io("a", true, 5, 10_000);
        assert_eq!(d.io("b", true, 0, 10_100), Some(30_000_000));
        assert_eq!(d.io("a", true, 5, 10_200), Some(0));
        // What B leaves beside the first job's peak may be a sliver (100 B/s here): not handed out.
        let mut v = Registry::new(LiveConfig { online: Some(Policy::MaxSysEff), total_bw: 20_000_100.0, ..cfg() });
        reg(&mut v, "a", prof(2, 10_000, 10_000_000), 0).unwrap();
        reg(&mut v, "b", prof(1, 1_000, 100_000_000), 0).unwrap();
        assert_eq!(v.io("a", true, 0, 100), Some(20_000_000));
        assert_eq!(v.io("b", true, 0, 200), Some(0), "100 B/s left: b waits");
        assert_eq!(v.io("a", false, 1, 300), Some(0));
        assert_eq!(v.io("b", true, 0, 400), Some(10_000_000));
        // A job that wants but stopped asking (its end message lost) holds B only for the lease (5 s here),
        // though it still polls: then the others are served.
        let mut s = Registry::new(LiveConfig { online: Some(Policy::MaxSysEff), ..cfg() });
        reg(&mut s, "a", prof(2, 1_000, 100_000_000), 0).unwrap();
        reg(&mut s, "b", prof(3, 10_000, 10_000_000), 0).unwrap();
        assert_eq!(s.io("b", true, 0, 1_000), Some(30_000_000));
        assert_eq!(s.io("a", true, 0, 1_100), Some(0));
        s.poll("b", 0, 4_000);
        assert_eq!(s.io("a", true, 0, 6_000), Some(0), "b asked 5 s ago: still transferring");
        s.poll("b", 0, 6_000);
        assert_eq!(s.io("a", true, 0, 6_001), Some(20_000_000), "b has not asked for longer than the lease");
        assert_eq!(s.io("b", true, 0, 6_100), Some(30_000_000), "asking again, b is served first again");
        // In pattern mode the arbiter grants nothing: jobs follow their intervals.
        let mut p = Registry::new(cfg());
        reg(&mut p, "a", prof(2, 1_000, 100_000_000), 0).unwrap();
        assert_eq!(p.io("a", true, 0, 100), Some(0));
    }

    #[test]
    fn k_prime_bounds_the_period() {
        // Cycles of 4 s and 3 s (T_min = 4 s): with K' = 10 the sweep may pick up to 40 s, with K' = 1.5 at
        // most 6 s.
        let jobs = [("a", prof(4, 2_000, 60_000_000)), ("b", prof(2, 1_000, 60_000_000))];
        let mut periods = Vec::new();
        for k in [10.0, 1.5] {
            let mut r = Registry::new(LiveConfig { k_prime: k, ..cfg() });
            for (j, p) in jobs {
                reg(&mut r, j, p, 0).unwrap();
            }
            periods.push(r.grant("a").unwrap().period_ms);
        }
        assert!(periods[1] <= 6_001, "{periods:?}");
        assert!(periods[0] > periods[1], "K' = 10 found a longer, fuller pattern here: {periods:?}");
    }

    #[test]
    fn intervals_never_exceed_the_total_bandwidth() {
        let mut r = Registry::new(cfg());
        for (j, n) in [("a", 2), ("b", 3), ("c", 3)] {
            reg(&mut r, j, prof(n, 1_500, 20_000_000), 0).unwrap();
        }
        let gs: Vec<Grant> = ["a", "b", "c"].iter().map(|j| r.grant(j).unwrap()).collect();
        let t = gs[0].period_ms;
        let bounds: Vec<u64> = gs.iter().flat_map(|g| g.intervals.iter()).flat_map(|&(s, e, _)| [s, e]).collect();
        let mut checked = 0;
        for ms in 0..t {
            // Rounding outwards to whole ms may overlap neighbours within 1 ms of a boundary.
            if bounds.iter().any(|&b| b.abs_diff(ms) <= 1) {
                continue;
            }
            checked += 1;
            let used: u64 = gs
                .iter()
                .flat_map(|g| g.intervals.iter())
                .filter(|&&(s, e, _)| s <= ms && ms < e)
                .map(|&(_, _, bw)| bw)
                .sum();
            // Each bandwidth is rounded up by less than a byte/s.
            assert!(used <= 30_000_000 + 3, "{used} B/s at {ms} ms");
        }
        assert!(checked > 0);
    }

    #[test]
    fn a_silent_job_loses_its_reservation() {
        let mut r = Registry::new(cfg());
        reg(&mut r, "a", prof(4, 2_000, 60_000_000), 0).unwrap();
        reg(&mut r, "b", prof(4, 2_000, 60_000_000), 0).unwrap();
        r.poll("a", 1, 4_000);
        assert!(r.expire(5_000).is_empty());
        assert_eq!(r.expire(5_001), vec!["b".to_string()]);
        assert!(r.grant("b").is_none());
        r.replan(5_001);
        assert_eq!(r.grant("a").unwrap().epoch, 3);
    }

    #[test]
    fn bad_profiles_are_refused_and_the_registry_is_bounded() {
        let mut r = Registry::new(cfg());
        assert!(reg(&mut r, "a", prof(0, 1, 1), 0).is_err());
        assert!(reg(&mut r, "a", prof(9, 1, 1), 0).is_err());
        assert!(reg(&mut r, "a", prof(1, 0, 1), 0).is_err());
        assert!(reg(&mut r, "a", prof(1, MAX_COMPUTE_MS + 1, 1), 0).is_err());
        assert!(reg(&mut r, "a", prof(1, 1, 0), 0).is_err());
        // Periods too far apart for one pattern: refused, the registry unchanged.
        reg(&mut r, "slow", prof(1, MAX_COMPUTE_MS, 1_000), 0).unwrap();
        let e = reg(&mut r, "fast", prof(1, 1, 1_000), 0).unwrap_err();
        assert!(e.to_string().contains("differ too much"), "{e}");
        assert!(r.leave("slow"));
        for i in 0..MAX_JOBS {
            reg(&mut r, &format!("j{i}"), prof(1, 1_000, 1_000), 0).unwrap();
        }
        assert!(reg(&mut r, "one-more", prof(1, 1_000, 1_000), 0).is_err());
    }

    #[test]
    fn status_reports_planned_and_measured_efficiency() {
        let mut r = Registry::new(cfg());
        reg(&mut r, "a", prof(4, 2_000, 60_000_000), 0).unwrap();
        let s = r.status(0);
        assert!((s.jobs[0].planned_rho - 0.5).abs() < 1e-9);
        assert_eq!(s.jobs[0].measured_rho, None);
        assert!((s.syseff / s.upper_bound - 1.0).abs() < 1e-9);
        r.poll("a", 4, 20_000);
        let s = r.status(20_000);
        // 4 instances × 2 s in 20 s: 0.4; ρ = 0.5: dilation 1.25.
        assert!((s.jobs[0].measured_rho.unwrap() - 0.4).abs() < 1e-9);
        assert!((s.jobs[0].dilation - 1.25).abs() < 1e-9);
    }

    /// Bursts of `vol` bytes every `period` windows of 1 s, `n` of them, ending `idle` windows ago.
    fn bursts(job: &str, n: usize, period: usize, vol: u64, idle: usize, end_ms: u64) -> detect::JobSeries {
        let mut bytes = Vec::new();
        for _ in 0..n {
            bytes.push(vol);
            bytes.extend(std::iter::repeat_n(0, period - 1));
        }
        bytes.truncate(bytes.len() - (period - 1));
        bytes.extend(std::iter::repeat_n(0, idle));
        let last_io_ms = end_ms - idle as u64 * 1000;
        detect::JobSeries { job: job.into(), nodes: 2, dt_ms: 1000, bytes, last_io_ms }
    }

    #[test]
    fn a_periodic_job_is_detected_and_leaves_after_idle_periods() {
        let mut r = Registry::new(cfg());
        let p = detect::Params::default();
        let noise =
            detect::JobSeries { job: "noise".into(), nodes: 1, dt_ms: 1000, bytes: vec![5_000_000; 30], last_io_ms: 0 };
        let new = r.observe(&[bursts("d", 4, 5, 20_000_000, 1, 100_000), noise], &p, 100_000);
        assert_eq!(new, vec!["d".to_string()], "the steady job is not periodic");
        let st = r.status(100_000);
        assert_eq!(st.jobs.len(), 1);
        let j = &st.jobs[0];
        assert_eq!((j.source, j.profile), (PeriodicSource::Detected, prof(2, 4_000, 20_000_000)));
        assert!(r.grant("d").is_some_and(|g| g.period_ms == 0), "not planned yet: not delayed");
        r.replan(100_000);
        assert!(r.grant("d").is_some_and(|g| g.period_ms > 0));
        // Polls of clients that follow it do not keep it; its I/O does. Idle for 3 periods (15 s): gone.
        r.poll("d", 0, 114_000);
        assert!(r.expire(115_000).is_empty());
        assert_eq!(r.expire(115_001), vec!["d".to_string()]);
        // Seen doing I/O again at 112 s: kept until 127 s.
        r.observe(&[bursts("d", 4, 5, 20_000_000, 1, 100_000)], &p, 100_000);
        assert!(r.observe(&[bursts("d", 5, 5, 20_000_000, 0, 112_000)], &p, 112_000).is_empty(), "already known");
        assert!(r.expire(127_000).is_empty());
        assert_eq!(r.expire(127_001), vec!["d".to_string()]);
    }

    #[test]
    fn registration_wins_over_detection_and_leaving_opts_out() {
        let mut r = Registry::new(cfg());
        let p = detect::Params::default();
        reg(&mut r, "a", prof(1, 9_000, 1_000_000), 0).unwrap();
        assert!(r.observe(&[bursts("a", 4, 5, 20_000_000, 1, 1_000)], &p, 1_000).is_empty());
        assert_eq!(r.status(1_000).jobs[0].profile, prof(1, 9_000, 1_000_000), "the registered profile stays");
        assert_eq!(r.status(1_000).jobs[0].source, PeriodicSource::Registered);
        assert!(r.leave("a"));
        assert!(r.observe(&[bursts("a", 4, 5, 20_000_000, 1, 2_000)], &p, 2_000).is_empty(), "it left");
        // A detected job that registers becomes registered.
        r.observe(&[bursts("b", 4, 5, 20_000_000, 1, 2_000)], &p, 2_000);
        reg(&mut r, "b", prof(2, 4_000, 20_000_000), 3_000).unwrap();
        assert_eq!(r.status(3_000).jobs[0].source, PeriodicSource::Registered);
        // Registering again after leaving: detection may find it again once it leaves by expiry.
        reg(&mut r, "a", prof(1, 9_000, 1_000_000), 3_000).unwrap();
        assert!(!r.left.contains("a"));
    }
}
