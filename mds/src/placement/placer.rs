//! The placement subsystem around the policies of [`crate::placement`]: the storage targets as placement
//! sees them (each data server's latest report plus the space the MDS allocated since and has not seen
//! reported), the policy a create uses (the file's or directory's own, else the cluster's), declared creates
//! (solved together as one batch, kept until the create arrives), and what `tessera df --policy` shows.
//!
//! Declared composite (PFL) files: every extent a declared file's expected size reaches is placed in the
//! declaration's batch, not one file at a time when the file reaches it ([`Placer::declare`]); the plan
//! follows the file from its create ([`Placer::keep_planned`]) to the instantiation of each extent
//! ([`Placer::place_extent`]), which falls back to placing the extent then when it has no plan or a
//! planned target became full.
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
    /// The later extents of a composite layout the expected size reaches, placed with the first.
    later: Vec<Planned>,
    at: Instant,
}

/// One later extent of a composite layout (index ≥ 1 in the file's layout) a declared file is expected
/// to reach: what to place ([`PlannedExtent`]) and, once placed, where ([`Planned`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedExtent {
    pub index: usize,
    pub start: u64,
    pub end: u64,
    /// Its stripe count and size, and the bytes the file is expected to put in it.
    pub req: CreateRequest,
}

/// Where a declared file's later extent goes, decided with the declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    pub index: usize,
    pub start: u64,
    pub end: u64,
    pub slots: Vec<Slot>,
    /// Bytes each of its stripes is expected to hold (checked against the targets' room when used).
    pub share: u64,
}

/// A declared create: its first extent (a plain layout's only one) and the later extents of its
/// composite layout that its expected size reaches (none for a plain layout).
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredCreate {
    pub parent: Ino,
    pub name: String,
    pub first: CreateRequest,
    pub later: Vec<PlannedExtent>,
}

impl DeclaredCreate {
    /// A plain declared create.
    pub fn plain(parent: Ino, name: String, req: CreateRequest) -> DeclaredCreate {
        DeclaredCreate { parent, name, first: req, later: Vec::new() }
    }
}

/// A declaration taken by its create.
#[derive(Clone, Debug, PartialEq)]
pub struct Taken {
    /// The first extent's targets.
    pub slots: Vec<Slot>,
    pub expected: u64,
    /// The later extents' ([`Placer::keep_planned`] under the new file's inode).
    pub later: Vec<Planned>,
}

#[derive(Default)]
struct State {
    /// Bytes allocated per target and when, until the reports can have seen them.
    pending: HashMap<Slot, VecDeque<(Instant, u64)>>,
    declared: HashMap<(Ino, String), Declared>,
    /// Created files' planned later extents (from their declarations), until each is instantiated.
    planned: HashMap<Ino, (Instant, Vec<Planned>)>,
    /// The predictor: the size of the last file removed from each path, for the next run that creates it.
    previous: HashMap<(Ino, String), u64>,
    solves: u64,
    fallbacks: u64,
    files: u64,
    declared_used: u64,
    deferred: u64,
    /// Planned extents used, and dropped (a target full or down) for placement on reach.
    planned_used: u64,
    planned_dropped: u64,
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
    probe: Mutex<tessera_ops::daemon::LoadProbe>,
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
            probe: Mutex::new(tessera_ops::daemon::LoadProbe::default()),
        })
    }

    /// Placement measuring load with `probe` instead of this process's own (tests).
    pub fn with_probe(self, probe: tessera_ops::daemon::LoadProbe) -> Placer {
        Placer { probe: Mutex::new(probe), ..self }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn default_policy(&self) -> &'static str {
        self.default
    }

    /// The canonical name of policy `name`, the cluster's when `None`.
    fn policy_name(&self, name: Option<&str>) -> FsResult<&'static str> {
        name.map_or(Ok(self.default), canonical)
    }

    fn policy(&self, name: &str) -> &dyn Placement {
        let i = POLICIES.iter().position(|n| *n == name).unwrap_or(0);
        self.policies[i].as_ref()
    }

    /// Every configured target as placement sees it, and its slot. Targets of servers presumed down
    /// are unusable while some server is up; capacities not reported yet count as the largest reported
    /// one (1 TiB when none is), so a cluster places files before its first reports. Failure domains:
    /// the names of `[[ds]] domain` numbered in the order the servers first name them, then each server
    /// that names none a number of its own after those.
    pub fn view(&self) -> (Vec<TargetInfo>, Vec<Slot>) {
        let servers = self.stats.snapshot();
        let mut named: HashMap<&str, u32> = HashMap::new();
        for s in &servers {
            if let Some(name) = self.stats.domain(s.id) {
                let next = named.len() as u32;
                named.entry(name).or_insert(next);
            }
        }
        let unnamed = named.len() as u32;
        let domain_of = |pos: usize, ds: DsId| self.stats.domain(ds).map_or(unnamed + pos as u32, |n| named[n]);
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
        for (pos, s) in servers.iter().enumerate() {
            let domain = domain_of(pos, s.id);
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
                    domain,
                });
                slots.push((s.id, t));
            }
        }
        (infos, slots)
    }

    /// Places `batch` with policy `name` (`None`: the cluster's), as one batch; counts the expected
    /// bytes of each stripe object, every replica's (one stripe's worth when unknown), as allocated. Each
    /// file's slots are replica-major, as [`Placement::place_batch`] answers: `count * M` of them, replica
    /// `r` of stripe `k` at `r * count + k`.
    pub fn place(&self, name: Option<&str>, batch: &[CreateRequest]) -> FsResult<Vec<Vec<Slot>>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let name = self.unless_loaded(self.policy_name(name)?, batch.len());
        self.place_as(name, batch)
    }

    /// Expensive solves are put off while the MDS is loaded: `balanced` runs as `lustre` then (counted as
    /// deferred); other policies run as they are.
    fn unless_loaded(&self, name: &'static str, files: usize) -> &'static str {
        if name != "balanced" {
            return name;
        }
        let (cpu, memory) = self.probe.lock().unwrap_or_else(|p| p.into_inner()).sample(Instant::now());
        if !is_loaded(cpu, memory) {
            return name;
        }
        tracing::debug!(cpu, memory, "MDS loaded: a balanced solve of {files} files runs as lustre");
        self.state().deferred += 1;
        "lustre"
    }

    /// [`Placer::place`] with the policy `name` as it is (the load already looked at).
    fn place_as(&self, name: &'static str, batch: &[CreateRequest]) -> FsResult<Vec<Vec<Slot>>> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (targets, slots) = self.view();
        if targets.is_empty() {
            return Err(FsError::new(ErrorCode::NoSpace, "no data servers configured"));
        }
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
        // What each target holds as this batch is placed (the view's `used` plus this batch's objects).
        let mut load: Vec<u64> = targets.iter().map(|t| t.used).collect();
        let utilisation = |load: &[u64], i: usize| load[i] as f64 / targets[i].capacity.max(1) as f64;
        for (req, chosen) in batch.iter().zip(placed) {
            let m = req.mirror_count();
            if !chosen.len().is_multiple_of(m) {
                return Err(FsError::io(format!("placement chose {} objects for a {m}-mirror file", chosen.len())));
            }
            let n = chosen.len() / m;
            // Object j of each replica row holds stripes j, j + n, ...: a file (extent) that is not a whole
            // number of stripe rows has its larger objects first; what each object is expected to hold.
            let bytes = |j: usize| object_bytes(req, n, j);
            // The stripe objects as columns: stripe k's replicas, replica 0 first.
            let mut stripes: Vec<Vec<usize>> =
                (0..n).map(|k| chosen.iter().skip(k).step_by(n).copied().collect()).collect();
            if name == "balanced" && n > 0 {
                // The flow gives each file a set of targets; which of them holds stripe 0 rotates from file
                // to file, or the lowest-ranked target would hold every file's first stripe...
                let k = st.rotation % n;
                stripes.rotate_left(k);
                st.rotation = st.rotation.wrapping_add(1);
                // ...and when the objects differ in size, the larger go to the stripes whose fullest target
                // is least used now (a stable sort: ties keep the rotation). Without it, IOR files of 4.5
                // stripes per object on Config 1 left a target with four 5-stripe objects: OST cost 1.185,
                // not 1.094. Whole stripes move, so each stripe's replicas stay apart.
                if bytes(0) != bytes(n - 1) {
                    let fullest = |s: &[usize]| s.iter().map(|&i| utilisation(&load, i)).fold(0.0, f64::max);
                    stripes.sort_by(|a, b| fullest(a).total_cmp(&fullest(b)));
                }
            }
            let mut file = Vec::with_capacity(chosen.len());
            for r in 0..m {
                for (j, stripe) in stripes.iter().enumerate() {
                    let i = stripe[r];
                    let slot = *slots
                        .get(i)
                        .ok_or_else(|| FsError::io(format!("placement chose target {i} of {}", slots.len())))?;
                    let b = bytes(j);
                    load[i] = load[i].saturating_add(b);
                    st.pending.entry(slot).or_default().push_back((now, b));
                    file.push(slot);
                }
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
    /// set (its count capped at all targets, as a plain layout's). A mirrored extent reuses the full set as
    /// soon as the targets left are in fewer failure domains than its mirror count.
    pub fn place_avoiding(&self, name: Option<&str>, mut req: CreateRequest, avoid: &[Slot]) -> FsResult<Vec<Slot>> {
        let (targets, slots) = self.view();
        req.exclude = exclusions(&targets, &slots, avoid, req.mirror_count());
        self.place(name, &[req])?.pop().ok_or_else(|| FsError::io("placement returned no layout"))
    }

    /// Places extent `index` (`start..end`) of file `ino`: on the targets planned for it with the file's
    /// declaration if there is such a plan for this very extent and it still holds (no planned target
    /// full, down or — while the file has targets left unused — already used by the file; the replica rules
    /// for `req`'s mirror count), else now, as [`Placer::place_avoiding`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn place_extent(
        &self,
        name: Option<&str>,
        ino: Ino,
        index: usize,
        start: u64,
        end: u64,
        req: CreateRequest,
        avoid: &[Slot],
    ) -> FsResult<Vec<Slot>> {
        if let Some(p) = self.take_planned(ino, index, start, end) {
            let (targets, slots) = self.view();
            let excluded = exclusions(&targets, &slots, avoid, req.mirror_count());
            let at: Option<Vec<usize>> = p.slots.iter().map(|slot| slots.iter().position(|s| s == slot)).collect();
            let m = req.mirror_count();
            let holds = at.is_some_and(|at| {
                let fits = |&i: &usize| {
                    let objects = at.iter().filter(|&&j| j == i).count();
                    placement::has_room_for(&targets[i], p.share, objects) && !excluded.contains(&i)
                };
                !at.is_empty()
                    && at.len().is_multiple_of(m)
                    && placement::replicas_apart(&targets, at.len() / m, &at).is_none()
                    && at.iter().all(fits)
            });
            if holds {
                self.state().planned_used += 1;
                return Ok(p.slots);
            }
            tracing::debug!(ino, index, "the planned targets of an extent no longer fit: placing it now");
            self.state().planned_dropped += 1;
        }
        self.place_avoiding(name, req, avoid)
    }

    /// Declares files a job will create: solved together as one batch now, kept until each create
    /// arrives (or [`DECLARED_TTL`]). Returns how many were declared.
    ///
    /// A composite file's later extents that its expected size reaches are placed here too, in the same
    /// batch (**decision**, the spec's "distinct targets per file, also across a composite layout's
    /// extents"): one solve for every file's first extent together, then one per later extent position
    /// and per share (files of different sizes have different shares in the same extent), each file's
    /// other planned extents' targets excluded for it (with Lustre's rule that a file which already uses
    /// every target reuses them all), each solve seeing what the ones before it allocated. Under
    /// `balanced` the solves run the largest share first, the smaller filling in around them (the LPT
    /// rule: solved small-first, the largest objects came last, on targets already holding small ones),
    /// then [`Placer::refine`] exchanges objects off the fullest targets; the other policies solve in
    /// extent order, as files reach their extents. Not one flow over all extents at once: the flow's units
    /// are equal-sized stripes, and a file's extents have different per-stripe shares (Config 1 on a 2 GB
    /// file: 128 MB, 128 MB, 192 MB), while one extent position across files of one size has one share,
    /// so each solve's costs are exact. A later extent whose solve fails (say, it does not fit) is left
    /// unplanned and placed when the file reaches it, as undeclared files' extents are; first extents
    /// that cannot be placed apart from their files' later ones are placed without them (those plans then
    /// give way when reached), and fail the declaration only when they cannot be placed at all.
    pub fn declare(&self, name: Option<&str>, files: Vec<DeclaredCreate>) -> FsResult<usize> {
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
        let n = files.len();
        let req_at = |f: usize, pos: usize| match pos {
            0 => &files[f].first,
            p => &files[f].later[p - 1].req,
        };
        let share_at =
            |f: usize, pos: usize| placement::share(req_at(f, pos).expected_size, req_at(f, pos).stripe_count.max(1));
        // The solves: every file's first extent together (a plain declaration's one batch), then each later
        // extent position split by share (the flow's units are equal, so each share is its own solve).
        let mut groups: Vec<(u64, usize, Vec<usize>)> =
            vec![((0..n).map(|f| share_at(f, 0)).max().unwrap_or(0), 0, (0..n).collect())];
        for (f, file) in files.iter().enumerate() {
            for pos in 1..=file.later.len() {
                let share = share_at(f, pos);
                match groups.iter_mut().find(|(s, p, _)| *s == share && *p == pos) {
                    Some((_, _, g)) => g.push(f),
                    None => groups.push((share, pos, vec![f])),
                }
            }
        }
        // balanced: the largest objects first, the smaller fill in around them (LPT's rule for the most
        // loaded target). The other policies place the extents in the order files reach them, as Lustre
        // does (within a position, the larger shares first). While the MDS is loaded, the whole
        // declaration runs as lustre (its solves and the exchanges after them).
        let policy = self.unless_loaded(self.policy_name(name)?, n);
        match policy {
            "balanced" => groups.sort_by_key(|(s, pos, _)| (std::cmp::Reverse(*s), *pos)),
            _ => groups.sort_by_key(|(s, pos, _)| (*pos, std::cmp::Reverse(*s))),
        }
        let mut used: Vec<Vec<Slot>> = vec![Vec::new(); n];
        let mut placed: Vec<Vec<Slot>> = vec![Vec::new(); n];
        let mut later: Vec<Vec<Planned>> = vec![Vec::new(); n];
        for (_, pos, who) in groups {
            let (targets, slots) = self.view();
            let batch: Vec<CreateRequest> = who
                .iter()
                .map(|&f| {
                    let r = req_at(f, pos);
                    let mut exclude = exclusions(&targets, &slots, &used[f], r.mirror_count());
                    for &i in &r.exclude {
                        if !exclude.contains(&i) {
                            exclude.push(i);
                        }
                    }
                    CreateRequest { exclude, ..r.clone() }
                })
                .collect();
            let chosen = match self.place_as(policy, &batch) {
                Ok(p) => p,
                Err(e) if pos > 0 => {
                    tracing::debug!("declared composite files: extent {pos} left to placement on reach: {e}");
                    continue;
                }
                // The first extents must be placed: without the targets of the later ones (whose plans
                // then give way when the file reaches them), or the declaration fails.
                Err(e) if used.iter().any(|u| !u.is_empty()) => {
                    tracing::debug!("declared files: first extents placed apart from their later ones: {e}");
                    self.place_as(policy, &who.iter().map(|&f| files[f].first.clone()).collect::<Vec<_>>())?
                }
                Err(e) => return Err(e),
            };
            for (&f, chosen) in who.iter().zip(chosen) {
                used[f].extend(&chosen);
                if pos == 0 {
                    placed[f] = chosen;
                    continue;
                }
                let e = &files[f].later[pos - 1];
                let share = placement::share(e.req.expected_size, chosen.len() / e.req.mirror_count());
                later[f].push(Planned { index: e.index, start: e.start, end: e.end, slots: chosen, share });
            }
        }
        for l in &mut later {
            l.sort_by_key(|p| p.index);
        }
        // The exchanges know the plain rule only (a file's objects on distinct targets), not the replica
        // rules: a declaration with mirrored files keeps what the solves gave.
        let mirrored =
            files.iter().any(|f| f.first.mirror_count() > 1 || f.later.iter().any(|e| e.req.mirror_count() > 1));
        if policy == "balanced" && !mirrored {
            let exchanges = self.refine(&files, &mut placed, &mut later);
            tracing::debug!(exchanges, "declared files: objects exchanged off the fullest targets after the solves");
        }
        let mut st = self.state();
        let now = Instant::now();
        for ((f, slots), later) in files.into_iter().zip(placed).zip(later) {
            let expected = f.first.expected_size + f.later.iter().map(|e| e.req.expected_size).sum::<u64>();
            st.declared.insert((f.parent, f.name), Declared { slots, expected, later, at: now });
        }
        Ok(n)
    }

    /// `balanced`'s last step over a declaration's solves ([`placement::balanced::refine`]): exchanges
    /// this declaration's objects off the fullest targets, keeping each file's targets distinct; the
    /// pending allocations follow the objects. Returns how many exchanges it made.
    fn refine(&self, files: &[DeclaredCreate], first: &mut [Vec<Slot>], later: &mut [Vec<Planned>]) -> usize {
        let (targets, slots) = self.view();
        // Every object of the declaration and where it is: (file, extent: 0 the first, k the k-th planned,
        // object).
        let mut at: Vec<(usize, usize, usize)> = Vec::new();
        let mut objects: Vec<placement::balanced::BatchObject> = Vec::new();
        for (f, file) in files.iter().enumerate() {
            // k: 0 the first extent, k the k-th planned one, from `later[f]`'s own order (a plan without its
            // request is skipped without shifting the others).
            let planned = later[f]
                .iter()
                .enumerate()
                .filter_map(|(k, p)| file.later.iter().find(|e| e.index == p.index).map(|e| (k + 1, &e.req, &p.slots)));
            for (k, req, on) in std::iter::once((0, &file.first, &first[f])).chain(planned) {
                for (j, slot) in on.iter().enumerate() {
                    let Some(target) = slots.iter().position(|s| s == slot) else { continue };
                    at.push((f, k, j));
                    objects.push(placement::balanced::BatchObject {
                        file: f,
                        bytes: object_bytes(req, on.len(), j),
                        target,
                    });
                }
            }
        }
        let exchanges = placement::balanced::refine(&targets, &mut objects);
        if exchanges == 0 {
            return 0;
        }
        let mut st = self.state();
        for (&(f, k, j), o) in at.iter().zip(&objects) {
            let to = slots[o.target];
            let from = match k {
                0 => std::mem::replace(&mut first[f][j], to),
                k => std::mem::replace(&mut later[f][k - 1].slots[j], to),
            };
            if from == to {
                continue;
            }
            if let Some(at) = st.pending.get_mut(&from).and_then(|q| {
                let i = q.iter().rposition(|(_, b)| *b == o.bytes)?;
                q.remove(i).map(|(at, _)| at)
            }) {
                st.pending.entry(to).or_default().push_back((at, o.bytes));
            }
        }
        exchanges
    }

    /// The declared placement of `parent/name`, if any (used once).
    pub fn take_declared(&self, parent: Ino, name: &str) -> Option<Taken> {
        let mut st = self.state();
        let d = st.declared.remove(&(parent, name.to_string()))?;
        if d.at.elapsed() >= DECLARED_TTL {
            return None;
        }
        st.declared_used += 1;
        Some(Taken { slots: d.slots, expected: d.expected, later: d.later })
    }

    /// Keeps the planned later extents of the new file `ino` (from its declaration) until each is
    /// instantiated ([`Placer::place_extent`]) or [`DECLARED_TTL`] passes.
    pub fn keep_planned(&self, ino: Ino, later: Vec<Planned>) {
        if later.is_empty() {
            return;
        }
        let mut st = self.state();
        let now = Instant::now();
        if st.planned.len() >= MAX_DECLARED {
            st.planned.retain(|_, (at, _)| now.duration_since(*at) < DECLARED_TTL);
            if st.planned.len() >= MAX_DECLARED {
                return;
            }
        }
        st.planned.insert(ino, (now, later));
    }

    /// The plan for extent `index` (`start..end`) of `ino`, if any and still the same extent (used once).
    fn take_planned(&self, ino: Ino, index: usize, start: u64, end: u64) -> Option<Planned> {
        let mut st = self.state();
        let (at, list) = st.planned.get_mut(&ino)?;
        let fresh = at.elapsed() < DECLARED_TTL;
        let k = list.iter().position(|p| p.index == index)?;
        let p = list.remove(k);
        if list.is_empty() || !fresh {
            st.planned.remove(&ino);
        }
        (fresh && p.start == start && p.end == end).then_some(p)
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

    /// Planned extents used by their instantiation, and dropped for placement then (a target full or down).
    pub fn planned_counts(&self) -> (u64, u64) {
        let st = self.state();
        (st.planned_used, st.planned_dropped)
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

/// Bytes object `j` of a request placed on `n` targets is expected to hold (object j holds stripes j,
/// j + n, ...: a file that is not a whole number of stripe rows has its larger objects first); one
/// stripe's worth when the size is unknown.
fn object_bytes(req: &CreateRequest, n: usize, j: usize) -> u64 {
    match req.expected_size {
        0 => req.stripe_size,
        e => tessera_proto::layout::raid0_object_size(req.stripe_size, n as u64, j as u64, e),
    }
}

/// The indices (into `targets`/`slots`, one view) a file's extent with `mirrors` replicas per stripe must
/// not use: the targets in `avoid` (its other extents'), unless the usable targets left are in fewer than
/// `mirrors` failure domains — none left, for a plain extent — (the file then reuses them all).
fn exclusions(targets: &[TargetInfo], slots: &[Slot], avoid: &[Slot], mirrors: usize) -> Vec<usize> {
    let exclude: Vec<usize> = slots.iter().enumerate().filter(|(_, s)| avoid.contains(s)).map(|(i, _)| i).collect();
    let mut domains: Vec<u32> =
        targets.iter().enumerate().filter(|(i, t)| t.usable && !exclude.contains(i)).map(|(_, t)| t.domain).collect();
    domains.sort_unstable();
    domains.dedup();
    if domains.len() < mirrors.max(1) {
        Vec::new()
    } else {
        exclude
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::tests::req;
    use tessera_ops::daemon::memory_share;
    use tessera_proto::msg::{DsReport, TargetReport};

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
        let files = (0..35).map(|k| DeclaredCreate::plain(1, format!("f{k}"), req(1, 10 << 20))).collect();
        assert_eq!(p.declare(None, files).unwrap(), 35);
        let mut used = std::collections::HashSet::new();
        for k in 0..35 {
            let t = p.take_declared(1, &format!("f{k}")).unwrap();
            assert_eq!(t.expected, 10 << 20);
            used.insert(t.slots[0]);
        }
        assert_eq!(used.len(), 35, "one batch of 35 equal files on 35 empty targets: one each");
        assert!(p.take_declared(1, "f0").is_none(), "used once");
        let s = p.status();
        assert_eq!((s.solves, s.files, s.declared_used, s.declared_pending), (1, 35, 35, 0));
        let too_many = (0..MAX_DECLARE_BATCH + 1).map(|k| DeclaredCreate::plain(1, k.to_string(), req(1, 1))).collect();
        assert!(p.declare(None, too_many).is_err());
    }

    #[test]
    fn solves_are_put_off_at_the_papers_thresholds_and_the_probe_reads_this_process() {
        assert!(!is_loaded(0.69, 0.49));
        assert!(is_loaded(0.70, 0.0), "CPU at 70%");
        assert!(is_loaded(0.0, 0.50), "memory at 50%");
        assert!(memory_share().is_some_and(|m| m > 0.0 && m < LOADED_MEMORY));
        let mut p = tessera_ops::daemon::LoadProbe::default();
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
    /// Paper Config 1 scaled as placement-tarazu scales it for 32 MiB targets: `[0,256K):1 [256K,1.5M):3
    /// [1.5M,6.25M):8 [6.25M,EOF):16` (start, end, count); 64 KiB stripes, so that what a target holds is
    /// not dominated by whole stripes.
    const CONFIG1: [(u64, u64, usize); 4] =
        [(0, 256 << 10, 1), (256 << 10, 1536 << 10, 3), (1536 << 10, 6400 << 10, 8), (6400 << 10, u64::MAX, 16)];
    const STRIPE: u64 = 64 << 10;

    /// A composite layout as (start, end, count) per extent, and its stripe size.
    type Pfl<'a> = (&'a [(u64, u64, usize)], u64);
    const TEST_PFL: Pfl<'static> = (&CONFIG1, STRIPE);

    fn extent_req(k: usize, expected: u64) -> CreateRequest {
        extent_req_in(TEST_PFL, k, expected)
    }

    fn extent_req_in((config, stripe): Pfl, k: usize, expected: u64) -> CreateRequest {
        CreateRequest {
            stripe_count: config[k].2,
            stripe_size: stripe,
            expected_size: expected,
            exclude: vec![],
            mirrors: 1,
        }
    }

    /// The declaration of a file of `size` bytes under Config 1 (as the namespace builds it).
    fn declared(k: usize, size: u64) -> DeclaredCreate {
        declared_in(TEST_PFL, k, size)
    }

    fn declared_in(pfl: Pfl, k: usize, size: u64) -> DeclaredCreate {
        let later = pfl.0[1..]
            .iter()
            .enumerate()
            .filter(|(_, e)| size > e.0)
            .map(|(i, &(start, end, _))| PlannedExtent {
                index: i + 1,
                start,
                end,
                req: extent_req_in(pfl, i + 1, size.min(end) - start),
            })
            .collect();
        DeclaredCreate { parent: 1, name: format!("f{k}"), first: extent_req_in(pfl, 0, size.min(pfl.0[0].1)), later }
    }

    /// Adds the bytes a file of `size` bytes puts on each target (stripe by stripe) to `bytes`.
    fn fill(bytes: &mut HashMap<Slot, u64>, extents: &[Vec<Slot>], size: u64) {
        fill_in(TEST_PFL, bytes, extents, size)
    }

    fn fill_in((config, stripe): Pfl, bytes: &mut HashMap<Slot, u64>, extents: &[Vec<Slot>], size: u64) {
        for (k, slots) in extents.iter().enumerate() {
            let (start, end, _) = config[k];
            let mut off = start;
            let mut j = 0;
            while off < size.min(end) {
                let n = stripe.min(size.min(end) - off);
                *bytes.entry(slots[j % slots.len()]).or_default() += n;
                off += n;
                j += 1;
            }
        }
    }

    fn cost(bytes: &HashMap<Slot, u64>, cluster: &[Slot]) -> f64 {
        let u: Vec<f64> = cluster.iter().map(|s| bytes.get(s).copied().unwrap_or(0) as f64).collect();
        placement::ost_cost(&u)
    }

    fn pfl_placer() -> Placer {
        let stats = view(7, 5);
        for ds in 0..7 {
            stats.record(report(ds, &[0; 5], 32 << 20));
        }
        Placer::new(stats, "balanced", Duration::from_secs(1)).unwrap()
    }

    /// 16 declared Config 1 files, of 6 and 2 MiB, on 7 × 5 empty targets (placement-tarazu's
    /// ior-fpp-32g-pfl1 with mixed sizes): every reached extent is planned with the declaration, the
    /// instantiations use the plan, each file's stripes are on distinct targets, and the targets fill more
    /// evenly than when each extent is placed alone as the files reach it (the path without a plan: the
    /// first extent declared, the others placed one file at a time knowing only the extent's nominal size).
    #[test]
    fn declared_composite_files_get_all_their_extents_in_one_batch() {
        let size = |k: usize| if k.is_multiple_of(2) { 6 << 20 } else { 2 << 20 };
        let reached = |k: usize| CONFIG1.iter().take_while(|e| size(k) > e.0).count();
        let p = pfl_placer();
        let (_, cluster) = p.view();
        assert_eq!(p.declare(None, (0..16).map(|k| declared(k, size(k))).collect()).unwrap(), 16);
        // The first and second extents: one solve each over the 16 files; the third: one per file size.
        assert_eq!(p.status().solves, 4);
        let mut batched = HashMap::new();
        for k in 0..16 {
            let ino = 100 + k as Ino;
            let t = p.take_declared(1, &format!("f{k}")).unwrap();
            assert_eq!((t.expected, t.later.len()), (size(k), reached(k) - 1), "the EOF extent is not reached");
            let planned: Vec<Vec<Slot>> = t.later.iter().map(|e| e.slots.clone()).collect();
            p.keep_planned(ino, t.later);
            let mut extents = vec![t.slots];
            for (i, &(start, end, _)) in CONFIG1.iter().enumerate().take(reached(k)).skip(1) {
                let avoid: Vec<Slot> = extents.concat();
                let got = p.place_extent(None, ino, i, start, end, extent_req(i, end - start), &avoid).unwrap();
                assert_eq!(got, planned[i - 1], "file {k} extent {i}: the planned targets");
                extents.push(got);
            }
            let all = extents.concat();
            assert!(all.iter().enumerate().all(|(i, s)| !all[..i].contains(s)), "file {k}: distinct targets {all:?}");
            fill(&mut batched, &extents, size(k));
        }
        assert_eq!(p.planned_counts(), (32, 0));

        // The same files without plans, each extent placed when reached (files progress together).
        let q = pfl_placer();
        let firsts: Vec<DeclaredCreate> = (0..16)
            .map(|k| DeclaredCreate::plain(1, format!("f{k}"), extent_req(0, size(k).min(CONFIG1[0].1))))
            .collect();
        q.declare(None, firsts).unwrap();
        let mut files: Vec<Vec<Vec<Slot>>> =
            (0..16).map(|k| vec![q.take_declared(1, &format!("f{k}")).unwrap().slots]).collect();
        for (i, &(start, end, _)) in CONFIG1.iter().enumerate().take(3).skip(1) {
            for (k, extents) in files.iter_mut().enumerate().filter(|(k, _)| reached(*k) > i) {
                let avoid: Vec<Slot> = extents.concat();
                let req = extent_req(i, end - start);
                extents.push(q.place_extent(None, 100 + k as Ino, i, start, end, req, &avoid).unwrap());
            }
        }
        let mut alone = HashMap::new();
        for (k, extents) in files.iter().enumerate() {
            fill(&mut alone, extents, size(k));
        }
        let (batched, alone) = (cost(&batched, &cluster), cost(&alone, &cluster));
        assert!(batched < alone, "OST cost batched {batched:.3}, extents placed alone {alone:.3}");
        // Deterministic (no policy here draws at random): 1.094 batched, 1.401 alone when written.
        assert!(batched <= 1.12, "OST cost batched {batched:.3}");
    }

    /// placement-tarazu's composite Config 1 workloads at `--file-size 64m` (7 × 5 targets of 64 MiB,
    /// 256 KiB stripes, the boundaries scaled to 768 KiB, 3 MiB and 12.75 MiB), declared and instantiated
    /// as the experiment does: IOR file per process (16 files of 12 MiB; the third extent holds 4.5
    /// stripes per object, so half its objects are a stripe larger) and IOR shared (4 files of 50 MiB).
    /// `balanced` fills the targets within the issue's OST cost of 1.10: 1.003 and 1.050 when written
    /// (1.185 and 1.181 in the experiment when objects counted as equal and the smallest extents were
    /// solved first; 1.094 and 1.137 with exact objects and the largest first, before the exchanges).
    #[test]
    fn the_experiments_config1_workloads_are_placed_within_ten_percent() {
        const K: u64 = 1 << 10;
        let config = [(0, 768 * K, 1), (768 * K, 3072 * K, 3), (3072 * K, 13056 * K, 8), (13056 * K, u64::MAX, 16)];
        let pfl: Pfl = (&config, 256 * K);
        for (files, size) in [(16, 12u64 << 20), (4, 50 << 20)] {
            let stats = view(7, 5);
            for ds in 0..7 {
                stats.record(report(ds, &[0; 5], 64 << 20));
            }
            let p = Placer::new(stats, "balanced", Duration::from_secs(1)).unwrap();
            let (_, cluster) = p.view();
            p.declare(None, (0..files).map(|k| declared_in(pfl, k, size)).collect()).unwrap();
            let reached = config.iter().take_while(|e| size > e.0).count();
            let mut bytes = HashMap::new();
            for k in 0..files {
                let ino = 100 + k as Ino;
                let t = p.take_declared(1, &format!("f{k}")).unwrap();
                p.keep_planned(ino, t.later);
                let mut extents = vec![t.slots];
                for (i, &(start, end, _)) in config.iter().enumerate().take(reached).skip(1) {
                    let avoid: Vec<Slot> = extents.concat();
                    let req = extent_req_in(pfl, i, size.min(end) - start);
                    extents.push(p.place_extent(None, ino, i, start, end, req, &avoid).unwrap());
                }
                let all = extents.concat();
                assert!(all.iter().enumerate().all(|(i, s)| !all[..i].contains(s)), "distinct targets {all:?}");
                fill_in(pfl, &mut bytes, &extents, size);
            }
            assert_eq!(p.planned_counts(), ((reached as u64 - 1) * files as u64, 0), "every plan used");
            let c = cost(&bytes, &cluster);
            assert!(c <= 1.10, "{files} files of {size} bytes: OST cost {c:.3}");
        }
    }

    /// While the MDS is loaded, a declaration under `balanced` is solved as `lustre` would solve it, the
    /// exchanges after the solves included (they are skipped), and counts as one deferral.
    #[test]
    fn a_declaration_while_the_mds_is_loaded_runs_as_lustre_without_exchanges() {
        use tessera_ops::daemon::LoadProbe;
        let declare = |policy: &str, probe: LoadProbe| {
            let stats = view(7, 5);
            for ds in 0..7 {
                stats.record(report(ds, &[0; 5], 64 << 20));
            }
            let p = Placer::new(stats, policy, Duration::from_secs(1)).unwrap().with_probe(probe);
            p.declare(None, (0..16).map(|k| declared(k, 12 << 20)).collect()).unwrap();
            let placed: Vec<Vec<Vec<Slot>>> = (0..16)
                .map(|k| {
                    let t = p.take_declared(1, &format!("f{k}")).unwrap();
                    std::iter::once(t.slots).chain(t.later.into_iter().map(|l| l.slots)).collect()
                })
                .collect();
            (placed, p.status())
        };
        let (loaded, st) = declare("balanced", LoadProbe::fixed(0.9, 0.1));
        let (lustre, _) = declare("lustre", LoadProbe::fixed(0.0, 0.0));
        let (balanced, quiet) = declare("balanced", LoadProbe::fixed(0.0, 0.0));
        assert_eq!(loaded, lustre);
        assert_ne!(loaded, balanced, "balanced places this declaration differently");
        assert_eq!((st.deferred, quiet.deferred), (1, 0));
    }

    /// A planned extent whose target filled up (or that the file's own earlier extents now use) is
    /// placed when reached instead; a plan is for its own extent and inode only, and used once.
    #[test]
    fn a_planned_extent_on_a_full_target_is_placed_when_reached() {
        let stats = view(7, 5);
        for ds in 0..7 {
            stats.record(report(ds, &[0; 5], 32 << 20));
        }
        let p = Placer::new(stats.clone(), "balanced", Duration::from_secs(1)).unwrap();
        p.declare(None, vec![declared(0, 6 << 20)]).unwrap();
        let t = p.take_declared(1, "f0").unwrap();
        let plan = t.later.clone();
        p.keep_planned(7, t.later);
        let (start, end, _) = CONFIG1[1];
        // Another inode does not take the plan.
        let other = p.place_extent(None, 8, 1, start, end, extent_req(1, end - start), &t.slots).unwrap();
        assert_eq!(p.planned_counts(), (0, 0), "{other:?}");
        // One of extent 1's planned targets is now full.
        let (full_ds, full_t) = plan[0].slots[0];
        let mut used = [0u64; 5];
        used[usize::from(full_t)] = 32 << 20;
        stats.record(report(full_ds, &used, 32 << 20));
        let got = p.place_extent(None, 7, 1, start, end, extent_req(1, end - start), &t.slots).unwrap();
        assert_eq!(p.planned_counts(), (0, 1), "dropped");
        assert_eq!(got.len(), 3);
        assert!(!got.contains(&(full_ds, full_t)) && !got.iter().any(|s| t.slots.contains(s)), "{got:?}");
        // The plan is used once: placing extent 1 again places it now; extent 2's plan is still kept.
        p.place_extent(None, 7, 1, start, end, extent_req(1, end - start), &t.slots).unwrap();
        assert_eq!(p.planned_counts(), (0, 1));
        assert_eq!(p.state().planned.get(&7).map(|(_, l)| l.len()), Some(1));
    }

    /// The failure domains come from the configuration (`[[ds]] domain`, through the stats view): named
    /// domains shared by their servers, a server without one its own; a mirrored request's replicas go
    /// to distinct domains and every replica's bytes count as allocated.
    #[test]
    fn failure_domains_come_from_the_configuration() {
        let names = [(0, "rackA"), (1, "rackB"), (2, "rackA")].map(|(ds, n)| (ds, n.to_string()));
        let stats = StatsView::new((0..4).map(|i| (i, String::new())).collect())
            .with_target_counts((0..4).map(|i| (i, 2)).collect())
            .with_domains(names.into_iter().collect());
        let stats = Arc::new(stats);
        for ds in 0..4 {
            stats.record(report(ds, &[0, 0], 1 << 30));
        }
        let p = Placer::new(stats, "round-robin", Duration::from_secs(1)).unwrap();
        let (t, _) = p.view();
        let domains: Vec<u32> = t.iter().map(|x| x.domain).collect();
        assert_eq!(domains, vec![0, 0, 1, 1, 0, 0, 5, 5], "rackA, rackB, rackA, then server 3's own");
        for policy in POLICIES {
            let placed = p.place(Some(policy), &[CreateRequest { mirrors: 3, ..req(2, 6 << 20) }]).unwrap();
            let slots = &placed[0];
            assert_eq!(slots.len(), 6, "{policy}");
            for k in 0..2 {
                // Each replica's domain, by its server: 0 and 2 share rackA.
                let mut d: Vec<u32> = [slots[k], slots[2 + k], slots[4 + k]]
                    .iter()
                    .map(|&(ds, _)| if ds == 2 { 0 } else { ds })
                    .collect();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), 3, "{policy}: stripe {k} {slots:?}");
            }
            let err = p.place(Some(policy), &[CreateRequest { mirrors: 3, stripe_count: 1, ..req(1, 0) }]);
            assert!(err.is_ok(), "{policy}: three domains");
        }
        // Every replica's bytes count: 3 policies x 3 replicas x 6 MiB.
        let (t, _) = p.view();
        assert_eq!(t.iter().map(|x| x.used).sum::<u64>(), 3 * (3 * (6 << 20) + 3 * (1 << 20)));
        // Two servers naming one domain are one domain: two mirrors cannot be placed.
        let stats = StatsView::new((0..2).map(|i| (i, String::new())).collect())
            .with_domains([(0, "r".to_string()), (1, "r".to_string())].into_iter().collect());
        let p = Placer::new(Arc::new(stats), "lustre", Duration::from_secs(1)).unwrap();
        let e = p.place(None, &[CreateRequest { mirrors: 2, ..req(1, 0) }]).unwrap_err();
        assert!(e.detail.contains("needs 2 failure domains with room for a stripe, 1 have"), "{e}");
    }

    /// A mirrored extent avoids the targets of the file's earlier extents while the targets left are in at
    /// least M failure domains, and reuses them all otherwise (rather than failing for want of domains).
    #[test]
    fn mirrored_extents_avoid_earlier_targets_while_enough_domains_are_left() {
        let mirrored = |count, m| CreateRequest { mirrors: m, ..req(count, 0) };
        for policy in POLICIES {
            let p = Placer::new(view(2, 2), "round-robin", Duration::from_secs(1)).unwrap();
            let first = p.place_avoiding(Some(policy), mirrored(1, 2), &[]).unwrap();
            let second = p.place_avoiding(Some(policy), mirrored(1, 2), &first).unwrap();
            assert!(second.iter().all(|s| !first.contains(s)), "{policy}: {first:?} then {second:?}");
            let used: Vec<Slot> = first.iter().chain(&second).copied().collect();
            assert_eq!(p.place_avoiding(Some(policy), mirrored(2, 2), &used).unwrap().len(), 4, "{policy}");
            // Three servers, two used by the first extent: one domain left, so a 2-mirror extent reuses all.
            let p = Placer::new(view(3, 1), "round-robin", Duration::from_secs(1)).unwrap();
            let first = p.place_avoiding(Some(policy), req(2, 0), &[]).unwrap();
            let second = p.place_avoiding(Some(policy), mirrored(1, 2), &first).unwrap();
            assert_eq!(second.len(), 2, "{policy}");
        }
    }
}
