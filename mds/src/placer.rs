//! The placement subsystem around the policies of [`crate::placement`]: the storage targets as placement
//! sees them (each data server's latest report plus the space the MDS allocated since and has not seen
//! reported), the policy a create uses (the file's or directory's own, else the cluster's), declared creates
//! (solved together as one batch, kept until the create arrives), and what `tessera df --policy` shows.
//!
//! Spec: `../shared/specs/placement.md`. Placement runs outside the namespace lock: the callers place first,
//! then take the lock, allocate the object ids and create; a placement whose create then fails only leaves
//! its expected bytes counted as allocated until the pending window passes.

use crate::placement::{self, CreateRequest, Placement, TargetInfo};
use crate::stats::StatsView;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{PlacementStatus, SolveInfo};
use tessera_proto::{DsId, FsError, FsResult, Ino, TargetIdx};

/// The policies, in the order `by_name` knows them; one instance each (round-robin and lustre keep state).
pub const POLICIES: [&str; 3] = ["round-robin", "lustre", "balanced"];

/// Declarations not used within this long are dropped (the job did not create the file).
pub const DECLARED_TTL: Duration = Duration::from_secs(600);
/// Most declarations kept at once (a declaration beyond it is refused).
pub const MAX_DECLARED: usize = 100_000;
/// Paths the predictor remembers (all forgotten at once beyond it).
pub const MAX_REMEMBERED: usize = 100_000;
/// Most files one declaration may name.
pub const MAX_DECLARE_BATCH: usize = 10_000;

/// The metadata server counts as loaded, and runs `balanced` solves as `lustre` ones, at this share of
/// the machine's CPU time (over the last second) or of its memory (Tarazu: CPU ≥ 70% or memory ≥ 50%).
pub const LOADED_CPU: f64 = 0.70;
pub const LOADED_MEMORY: f64 = 0.50;

/// Whether a metadata server using `cpu` of the machine's CPU time and `memory` of its memory (both
/// 0..=1) should put off expensive solves.
pub fn is_loaded(cpu: f64, memory: f64) -> bool {
    cpu >= LOADED_CPU || memory >= LOADED_MEMORY
}

/// Where one stripe goes: a data server and one of its targets.
pub type Slot = (DsId, TargetIdx);

/// The canonical name of a policy (aliases accepted), or an error naming the known ones.
pub fn canonical(name: &str) -> FsResult<&'static str> {
    let p = placement::by_name(name)?;
    POLICIES.iter().copied().find(|n| *n == p.name()).ok_or_else(|| FsError::invalid(format!("policy '{name}'")))
}

struct Declared {
    slots: Vec<Slot>,
    expected: u64,
    at: Instant,
}

#[derive(Default)]
struct State {
    /// Bytes allocated per target and when, until the reports can have seen them.
    pending: HashMap<Slot, VecDeque<(Instant, u64)>>,
    declared: HashMap<(Ino, String), Declared>,
    /// The predictor: the size of the last file removed from each path, for the next run that creates it.
    previous: HashMap<(Ino, String), u64>,
    solves: u64,
    fallbacks: u64,
    files: u64,
    declared_used: u64,
    deferred: u64,
    last: Option<(SolveInfo, Instant)>,
    /// Which of a file's targets holds its first stripe (balanced).
    rotation: usize,
}

pub struct Placer {
    stats: Arc<StatsView>,
    /// The cluster's policy.
    default: &'static str,
    policies: Vec<Box<dyn Placement>>,
    started: Instant,
    /// How long allocated space counts before the reports are trusted to hold it.
    pending_ttl: Duration,
    state: Mutex<State>,
    probe: Mutex<tessera_proto::process::LoadProbe>,
}

impl Placer {
    pub fn new(stats: Arc<StatsView>, default: &str, report_interval: Duration) -> FsResult<Placer> {
        let default = canonical(default)?;
        let policies = POLICIES.iter().map(|n| placement::by_name(n)).collect::<FsResult<Vec<_>>>()?;
        Ok(Placer {
            stats,
            default,
            policies,
            started: Instant::now(),
            pending_ttl: (report_interval * 3).max(Duration::from_secs(3)),
            state: Mutex::new(State::default()),
            probe: Mutex::new(tessera_proto::process::LoadProbe::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn default_policy(&self) -> &'static str {
        self.default
    }

    fn policy(&self, name: &str) -> &dyn Placement {
        let i = POLICIES.iter().position(|n| *n == name).unwrap_or(0);
        self.policies[i].as_ref()
    }

    /// Every configured target as placement sees it, and its slot. Targets of servers presumed down
    /// are unusable while some server is up; capacities not reported yet count as the largest reported
    /// one (1 TiB when none is), so a cluster places files before its first reports.
    pub fn view(&self) -> (Vec<TargetInfo>, Vec<Slot>) {
        let servers = self.stats.snapshot();
        let any_up = servers.iter().any(|s| !s.silent);
        let known_cap = servers
            .iter()
            .filter_map(|s| s.report.as_ref())
            .flat_map(|r| r.targets.iter().map(|t| t.capacity).chain(r.targets.is_empty().then_some(r.capacity)))
            .max()
            .unwrap_or(1 << 40);
        let now = Instant::now();
        let mut st = self.state();
        let ttl = self.pending_ttl;
        let (mut infos, mut slots) = (Vec::new(), Vec::new());
        for s in &servers {
            // A server's load: its queue (32 requests waiting count as full) or its CPU, whichever is higher.
            let load =
                s.report.as_ref().map(|r| (f64::from(r.queue_depth) / 32.0).max(r.cpu).clamp(0.0, 1.0)).unwrap_or(0.0);
            for t in 0..self.stats.target_count(s.id) {
                let reported = s.report.as_ref().and_then(|r| match r.targets.get(usize::from(t)) {
                    Some(tr) => Some((tr.capacity, tr.used)),
                    None if t == 0 && r.targets.is_empty() => Some((r.capacity, r.used)),
                    None => None,
                });
                let (capacity, used) = reported.unwrap_or((known_cap, 0));
                let pending = match st.pending.get_mut(&(s.id, t)) {
                    Some(q) => {
                        while q.front().is_some_and(|(at, _)| now.duration_since(*at) > ttl) {
                            q.pop_front();
                        }
                        q.iter().map(|(_, b)| *b).sum::<u64>()
                    }
                    None => 0,
                };
                infos.push(TargetInfo {
                    server: s.id,
                    target: t,
                    capacity,
                    used: used.saturating_add(pending),
                    server_load: load,
                    usable: !(s.silent && any_up),
                });
                slots.push((s.id, t));
            }
        }
        (infos, slots)
    }

    /// Places `batch` with policy `name` (`None`: the cluster's), as one batch; counts the expected
    /// bytes of each stripe (one stripe's worth when unknown) as allocated.
    pub fn place(&self, name: Option<&str>, batch: &[CreateRequest]) -> FsResult<Vec<Vec<Slot>>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let name = match name {
            Some(n) => canonical(n)?,
            None => self.default,
        };
        let (targets, slots) = self.view();
        if targets.is_empty() {
            return Err(FsError::new(ErrorCode::NoSpace, "no data servers configured"));
        }
        // Expensive solves are put off while the MDS is loaded: the batch is placed the cheap way.
        let (cpu, memory) = self.probe.lock().unwrap_or_else(|p| p.into_inner()).sample(Instant::now());
        let name = if name == "balanced" && is_loaded(cpu, memory) {
            tracing::debug!(cpu, memory, "MDS loaded: a balanced solve of {} files runs as lustre", batch.len());
            self.state().deferred += 1;
            "lustre"
        } else {
            name
        };
        let policy = self.policy(name);
        policy.set_now(self.started.elapsed());
        let t0 = Instant::now();
        let placed = policy.place_batch(&targets, batch)?;
        let elapsed = t0.elapsed();
        let solve = policy.last_solve();
        let now = Instant::now();
        let mut st = self.state();
        st.solves += 1;
        st.files += batch.len() as u64;
        let fallback = solve.as_ref().is_some_and(|s| s.fallback);
        st.fallbacks += u64::from(fallback);
        let info = SolveInfo {
            policy: name.to_string(),
            batch: batch.len() as u32,
            stripes: placed.iter().map(Vec::len).sum::<usize>() as u32,
            micros: solve.map(|s| s.elapsed).unwrap_or(elapsed).as_micros() as u64,
            fallback,
            age_ms: 0,
        };
        st.last = Some((info, now));
        let mut out = Vec::with_capacity(placed.len());
        for (req, mut chosen) in batch.iter().zip(placed) {
            if name == "balanced" && !chosen.is_empty() {
                // The flow gives each file a set of targets; which of them holds stripe 0 (the largest
                // object of a file that is not a whole number of stripe rows) rotates from file to file,
                // or the lowest-ranked target would hold every file's first stripe.
                let k = st.rotation % chosen.len();
                chosen.rotate_left(k);
                st.rotation = st.rotation.wrapping_add(1);
            }
            let share = match req.expected_size {
                0 => req.stripe_size,
                e => e.div_ceil(chosen.len().max(1) as u64),
            };
            let mut file = Vec::with_capacity(chosen.len());
            for i in chosen {
                let slot = *slots
                    .get(i)
                    .ok_or_else(|| FsError::io(format!("placement chose target {i} of {}", slots.len())))?;
                st.pending.entry(slot).or_default().push_back((now, share));
                file.push(slot);
            }
            out.push(file);
        }
        Ok(out)
    }

    /// Places one extent of a composite layout (`req`, its `exclude` ignored) with policy `name`, avoiding
    /// the targets `avoid` the file's earlier extents use: distinct targets across a file's extents where
    /// possible. Lustre's rules (the count is capped at the targets available, `-c -1`/0 takes them all):
    /// the count is capped to the usable targets the file does not use yet — the file stops growing once it
    /// has a stripe on every target — and an extent placed when no target is left unused reuses the full
    /// set (its count capped at all targets, as a plain layout's).
    pub fn place_avoiding(&self, name: Option<&str>, mut req: CreateRequest, avoid: &[Slot]) -> FsResult<Vec<Slot>> {
        let (targets, slots) = self.view();
        let exclude: Vec<usize> = slots.iter().enumerate().filter(|(_, s)| avoid.contains(s)).map(|(i, _)| i).collect();
        let unused = targets.iter().enumerate().filter(|(i, t)| t.usable && !exclude.contains(i)).count();
        req.exclude = if unused == 0 { Vec::new() } else { exclude };
        self.place(name, &[req])?.pop().ok_or_else(|| FsError::io("placement returned no layout"))
    }

    /// Declares files a job will create: solved together as one batch now, kept until each create
    /// arrives (or [`DECLARED_TTL`]). Returns how many were declared.
    pub fn declare(&self, name: Option<&str>, files: Vec<(Ino, String, CreateRequest)>) -> FsResult<usize> {
        if files.len() > MAX_DECLARE_BATCH {
            return Err(FsError::invalid(format!(
                "{} files in one declaration (at most {MAX_DECLARE_BATCH})",
                files.len()
            )));
        }
        {
            let mut st = self.state();
            let now = Instant::now();
            st.declared.retain(|_, d| now.duration_since(d.at) < DECLARED_TTL);
            if st.declared.len() + files.len() > MAX_DECLARED {
                return Err(FsError::new(ErrorCode::NoSpace, format!("over {MAX_DECLARED} declared creates pending")));
            }
        }
        let reqs: Vec<CreateRequest> = files.iter().map(|f| f.2.clone()).collect();
        let placed = self.place(name, &reqs)?;
        let mut st = self.state();
        let now = Instant::now();
        let n = files.len();
        for ((parent, fname, req), slots) in files.into_iter().zip(placed) {
            st.declared.insert((parent, fname), Declared { slots, expected: req.expected_size, at: now });
        }
        Ok(n)
    }

    /// The declared placement of `parent/name`, if any (used once), and its expected size.
    pub fn take_declared(&self, parent: Ino, name: &str) -> Option<(Vec<Slot>, u64)> {
        let mut st = self.state();
        let d = st.declared.remove(&(parent, name.to_string()))?;
        if d.at.elapsed() >= DECLARED_TTL {
            return None;
        }
        st.declared_used += 1;
        Some((d.slots, d.expected))
    }

    /// The predictor's guess of a new file's size: the size of the file the same path held last (a job's
    /// previous run writes the same files), 0 if unknown.
    pub fn predict(&self, parent: Ino, name: &str) -> u64 {
        self.state().previous.get(&(parent, name.to_string())).copied().unwrap_or(0)
    }

    /// Notes the size a removed file reached, for the next file created at its path.
    pub fn remember(&self, parent: Ino, name: &str, size: u64) {
        let mut st = self.state();
        if st.previous.len() >= MAX_REMEMBERED {
            st.previous.clear();
        }
        st.previous.insert((parent, name.to_string()), size);
    }

    pub fn status(&self) -> PlacementStatus {
        let st = self.state();
        PlacementStatus {
            policy: self.default.to_string(),
            solves: st.solves,
            fallbacks: st.fallbacks,
            files: st.files,
            declared_used: st.declared_used,
            declared_pending: st.declared.len() as u64,
            deferred: st.deferred,
            last: st.last.as_ref().map(|(i, at)| SolveInfo { age_ms: at.elapsed().as_millis() as u64, ..i.clone() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::msg::{DsReport, TargetReport};
    use tessera_proto::process::memory_share;

    fn view(servers: u32, targets: TargetIdx) -> Arc<StatsView> {
        let v = StatsView::new((0..servers).map(|i| (i, String::new())).collect())
            .with_target_counts((0..servers).map(|i| (i, targets)).collect());
        Arc::new(v)
    }

    fn report(ds: DsId, used: &[u64], cap: u64) -> DsReport {
        let targets = used
            .iter()
            .enumerate()
            .map(|(k, &u)| TargetReport {
                target: k as TargetIdx,
                capacity: cap,
                used: u,
                free: cap - u,
                enforced: true,
                ..Default::default()
            })
            .collect();
        DsReport { ds, targets, ..Default::default() }
    }

    fn req(count: usize, expected: u64) -> CreateRequest {
        CreateRequest { stripe_count: count, stripe_size: 1 << 20, expected_size: expected, exclude: vec![] }
    }

    #[test]
    fn the_view_lists_every_target_with_reports_and_pending_allocations() {
        let stats = view(2, 3);
        stats.record(report(0, &[10, 20, 30], 1000));
        let p = Placer::new(stats.clone(), "round-robin", Duration::from_secs(1)).unwrap();
        let (t, slots) = p.view();
        assert_eq!(slots, vec![(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(t[1].used, 20);
        assert_eq!(t[4].capacity, 1000, "a server not reported yet counts as the largest reported");
        // A placement's expected bytes count at once, spread over its stripes.
        let placed = p.place(Some("balanced"), &[req(2, 200)]).unwrap();
        let (t, _) = p.view();
        let total: u64 = t.iter().map(|t| t.used).sum();
        assert_eq!(total, 60 + 200);
        assert_eq!(placed[0].len(), 2);
        assert_eq!(p.status().last.unwrap().policy, "balanced");
    }

    #[test]
    fn declarations_are_solved_as_one_batch_and_used_once() {
        let stats = view(7, 5);
        for ds in 0..7 {
            stats.record(report(ds, &[0; 5], 1 << 30));
        }
        let p = Placer::new(stats, "balanced", Duration::from_secs(1)).unwrap();
        let files = (0..35).map(|k| (1, format!("f{k}"), req(1, 10 << 20))).collect();
        assert_eq!(p.declare(None, files).unwrap(), 35);
        let mut used = std::collections::HashSet::new();
        for k in 0..35 {
            let (slots, expected) = p.take_declared(1, &format!("f{k}")).unwrap();
            assert_eq!(expected, 10 << 20);
            used.insert(slots[0]);
        }
        assert_eq!(used.len(), 35, "one batch of 35 equal files on 35 empty targets: one each");
        assert!(p.take_declared(1, "f0").is_none(), "used once");
        let s = p.status();
        assert_eq!((s.solves, s.files, s.declared_used, s.declared_pending), (1, 35, 35, 0));
        assert!(p.declare(None, (0..MAX_DECLARE_BATCH + 1).map(|k| (1, k.to_string(), req(1, 1))).collect()).is_err());
    }

    #[test]
    fn solves_are_put_off_at_the_papers_thresholds_and_the_probe_reads_this_process() {
        assert!(!is_loaded(0.69, 0.49));
        assert!(is_loaded(0.70, 0.0), "CPU at 70%");
        assert!(is_loaded(0.0, 0.50), "memory at 50%");
        assert!(memory_share().is_some_and(|m| m > 0.0 && m < LOADED_MEMORY));
        let mut p = tessera_proto::process::LoadProbe::default();
        let t0 = Instant::now();
        let first = p.sample(t0);
        assert_eq!(first.0, 0.0, "one sample gives no CPU share yet");
        // Burn CPU for a second and a bit: this process's share of the machine is then above zero.
        let end = t0 + Duration::from_millis(1100);
        let mut x = 0u64;
        while Instant::now() < end {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        assert!(x != 1);
        let (cpu, _) = p.sample(Instant::now());
        assert!(cpu > 0.05 && cpu <= 1.0, "cpu share {cpu}");
    }

    #[test]
    fn the_predictor_gives_a_path_the_size_its_last_file_reached() {
        let p = Placer::new(view(1, 1), "balanced", Duration::from_secs(1)).unwrap();
        assert_eq!(p.predict(1, "out.0"), 0);
        p.remember(1, "out.0", 5 << 20);
        assert_eq!(p.predict(1, "out.0"), 5 << 20);
        assert_eq!(p.predict(2, "out.0"), 0, "another directory");
    }

    #[test]
    fn policy_names_are_canonical() {
        assert_eq!(canonical("tarazu").unwrap(), "balanced");
        assert_eq!(canonical("rr").unwrap(), "round-robin");
        assert!(canonical("nope").is_err());
    }

    #[test]
    fn extents_avoid_the_targets_of_earlier_ones_until_every_target_is_used() {
        let stats = view(2, 2);
        let p = Placer::new(stats, "round-robin", Duration::from_secs(1)).unwrap();
        for policy in POLICIES {
            let first = p.place_avoiding(Some(policy), req(1, 0), &[]).unwrap();
            let second = p.place_avoiding(Some(policy), req(2, 0), &first).unwrap();
            assert_eq!(second.len(), 2);
            assert!(second.iter().all(|s| !first.contains(s)), "{policy}: {first:?} then {second:?}");
            let used: Vec<Slot> = first.iter().chain(&second).copied().collect();
            // 3 of 4 targets used: an extent asking for 8 gets the one left (the file stops growing)...
            let third = p.place_avoiding(Some(policy), req(8, 0), &used).unwrap();
            assert_eq!(third.len(), 1, "{policy}");
            assert!(!used.contains(&third[0]));
            // ...and once all are used, the next reuses the full set.
            let all: Vec<Slot> = used.iter().chain(&third).copied().collect();
            assert_eq!(p.place_avoiding(Some(policy), req(0, 0), &all).unwrap().len(), 4, "{policy}");
        }
    }
}
