//! `balanced`: Tarazu's placement — a min-cost max-flow over the pending creates.
//!
//! Spec: `../shared/specs/placement.md`, "`balanced` (**decision** on the graph the paper leaves open)"; paper
//! §5.7 (Fig. 13). The graph: source → file (capacity = stripe count, cost 0); file → target (capacity 1, cost 0;
//! absent when the target is excluded for the file or unusable); target → sink as unit arcs `k = 1..cap(t)` of
//! convex cost `(used(t) + k * maxStripe) / total(t)` (scaled to integers) plus `load_weight * server_load`,
//! where `maxStripe` is the batch's largest per-stripe share (`expected_size / stripe_count`, at least
//! `stripe_size`) and `cap(t) = floor(free(t) / maxStripe)`. Successive shortest paths; when the flow cannot
//! meet the demand the batch goes to the fallback, [`Lustre`], and the solve says so.
//!
//! ## How the shortest paths are found (exactly, and fast)
//! Every arc except target → sink costs 0, so a path from a file to the sink costs exactly the marginal cost
//! of the last target it enters: the shortest path from file `f` is the cheapest next unit among the targets
//! reachable from `f` in the residual graph. Reachability is a plain BFS over *targets*: `f` reaches the
//! targets it may use and does not yet use; target `u` reaches target `v` when some file holding a stripe on
//! `u` may use `v` and does not (re-assigning that stripe from `u` to `v`). The solver keeps, for every pair
//! `(u, v)`, the number of such files, so one BFS costs O(targets²) whatever the batch size, and it stops as
//! soon as it reaches the cheapest target overall. The marginal cost of a target depends only on its own
//! count of units, and is non-decreasing in it (convex), so the residual reverse unit arcs never make a
//! cheaper path. Routing a file's units one at a time from that file is successive shortest paths for a
//! transshipment with supplies at the files (the order of the excess nodes is free), so the result is a
//! minimum-cost flow; the tests check it against an independent Bellman-Ford SSP on the explicit graph and
//! against brute force. Cost: O(stripes × (targets + BFS when the cheapest target is not directly usable)).
//!
//! No crate was used: the general min-cost-flow crates on crates.io (e.g. `mcmf`, `network-simplex` style
//! solvers) need every unit arc materialised (cap(t) arcs per target, tens of thousands here) and have no
//! notion of the zero-cost bipartite structure, which is what makes this exact solve take a millisecond.

use super::{check_choice, resolve, rr_order, CreateRequest, Lustre, Placement, SolveStats, TargetInfo};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_proto::FsResult;

/// Integer scale of the utilisation costs (1.0 = this many units).
pub const COST_SCALE: f64 = 1e9;

pub struct Balanced {
    fallback: Lustre,
    /// Weight of the server load (0..=1) against utilisation (0..=1) in a unit's cost.
    load_weight: f64,
    last: Mutex<Option<SolveStats>>,
    /// Rotates the tie-break among equal costs by the stripes placed so far, so that creates of unknown size
    /// on equally filled targets spread as round-robin does instead of all taking the first targets.
    rotation: AtomicUsize,
}

impl Default for Balanced {
    fn default() -> Self {
        Balanced::new(Lustre::default(), 1.0)
    }
}

impl Balanced {
    pub fn new(fallback: Lustre, load_weight: f64) -> Balanced {
        Balanced { fallback, load_weight: load_weight.max(0.0), last: Mutex::new(None), rotation: AtomicUsize::new(0) }
    }

    fn record(&self, s: SolveStats) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }
}

impl Placement for Balanced {
    fn name(&self) -> &'static str {
        "balanced"
    }

    fn place_batch(&self, targets: &[TargetInfo], batch: &[CreateRequest]) -> FsResult<Vec<Vec<usize>>> {
        let started = Instant::now();
        let rotation = self.rotation.load(Ordering::Relaxed);
        let (problem, resolved) = Problem::build(targets, batch, self.load_weight, rotation)?;
        let stripes: usize = problem.counts.iter().sum();
        self.rotation.store(rotation.wrapping_add(stripes), Ordering::Relaxed);
        let (out, fallback) = match solve(&problem) {
            Some(sol) => {
                for (req, (chosen, &(count, share))) in batch.iter().zip(sol.assign.iter().zip(&resolved)) {
                    check_choice(targets, req, share, count, chosen)?;
                }
                (Ok(sol.assign), false)
            }
            None => {
                tracing::warn!(
                    batch = batch.len(),
                    stripes,
                    "balanced placement: the flow cannot meet the demand; falling back to lustre"
                );
                (self.fallback.place_batch(targets, batch), true)
            }
        };
        self.record(SolveStats { batch: batch.len(), stripes, elapsed: started.elapsed(), fallback });
        out
    }

    fn last_solve(&self) -> Option<SolveStats> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_now(&self, now: Duration) {
        self.fallback.set_now(now);
    }
}

/// One batch as a flow problem.
#[derive(Clone, Debug)]
pub(crate) struct Problem {
    /// Units (stripes) per file.
    pub counts: Vec<usize>,
    /// `allowed[f * targets + t]`: file `f` may put a stripe on target `t`.
    pub allowed: Vec<bool>,
    /// Units each target can take.
    pub cap: Vec<u64>,
    /// Unit `k` (1-based) on target `t` costs `round((base[t] + k * step[t]) * COST_SCALE) + load[t]`.
    pub base: Vec<f64>,
    pub step: Vec<f64>,
    pub load: Vec<i64>,
    /// Tie-break among equal costs: position in the server-interleaved round-robin list, rotated.
    pub rank: Vec<usize>,
}

impl Problem {
    /// The graph of the spec's decision; also each request's clamped count and share.
    pub(crate) fn build(
        targets: &[TargetInfo],
        batch: &[CreateRequest],
        load_weight: f64,
        rotation: usize,
    ) -> FsResult<(Problem, Vec<(usize, u64)>)> {
        let nt = targets.len();
        let resolved = batch.iter().map(|r| resolve(targets, r)).collect::<FsResult<Vec<_>>>()?;
        let max_stripe =
            batch.iter().zip(&resolved).map(|(r, &(_, share))| share.max(r.stripe_size)).max().unwrap_or(1).max(1);
        let cap: Vec<u64> = targets.iter().map(|t| if t.usable { t.free() / max_stripe } else { 0 }).collect();
        let mut allowed = vec![false; batch.len() * nt];
        for (f, r) in batch.iter().enumerate() {
            for t in 0..nt {
                allowed[f * nt + t] = cap[t] > 0 && !r.exclude.contains(&t);
            }
        }
        let total = |t: &TargetInfo| t.capacity.max(1) as f64;
        let mut rank = vec![0; nt];
        for (pos, t) in rr_order(targets).into_iter().enumerate() {
            rank[t] = (pos + nt - rotation % nt.max(1)) % nt;
        }
        let p = Problem {
            counts: resolved.iter().map(|&(c, _)| c).collect(),
            allowed,
            cap,
            base: targets.iter().map(|t| t.used as f64 / total(t)).collect(),
            step: targets.iter().map(|t| max_stripe as f64 / total(t)).collect(),
            load: targets
                .iter()
                .map(|t| (load_weight * t.server_load.clamp(0.0, 1.0) * COST_SCALE).round() as i64)
                .collect(),
            rank,
        };
        Ok((p, resolved))
    }

    /// Cost of the `k`-th unit (1-based) on target `t`; non-decreasing in `k`.
    pub(crate) fn unit_cost(&self, t: usize, k: u64) -> i64 {
        ((self.base[t] + k as f64 * self.step[t]) * COST_SCALE).round() as i64 + self.load[t]
    }

    /// Total cost of a load vector (the flow's cost: file arcs are free).
    #[cfg(test)]
    pub(crate) fn cost_of(&self, load: &[u64]) -> i64 {
        load.iter().enumerate().map(|(t, &n)| (1..=n).map(|k| self.unit_cost(t, k)).sum::<i64>()).sum()
    }
}

/// A minimum-cost flow meeting every file's demand.
#[derive(Clone, Debug)]
pub(crate) struct Solution {
    /// Per file, its targets in round-robin-list order.
    pub assign: Vec<Vec<usize>>,
    /// Units per target.
    #[cfg_attr(not(test), allow(dead_code))]
    pub load: Vec<u64>,
}

const NONE: usize = usize::MAX;

struct Flow<'a> {
    p: &'a Problem,
    nt: usize,
    has: Vec<bool>,
    list: Vec<Vec<usize>>,
    users: Vec<Vec<usize>>,
    /// `cnt[u * nt + v]`: files with a stripe on `u` that may move it to `v`.
    cnt: Vec<u32>,
}

impl Flow<'_> {
    fn allowed(&self, f: usize, t: usize) -> bool {
        self.p.allowed[f * self.nt + t]
    }

    fn open(&self, f: usize, t: usize) -> bool {
        self.allowed(f, t) && !self.has[f * self.nt + t]
    }

    fn assign(&mut self, f: usize, t: usize) {
        let nt = self.nt;
        for &u in &self.list[f] {
            self.cnt[u * nt + t] -= 1;
        }
        for v in 0..nt {
            if v != t && self.open(f, v) {
                self.cnt[t * nt + v] += 1;
            }
        }
        self.has[f * nt + t] = true;
        self.list[f].push(t);
        self.users[t].push(f);
    }

    fn unassign(&mut self, f: usize, t: usize) {
        let nt = self.nt;
        self.has[f * nt + t] = false;
        self.list[f].retain(|&x| x != t);
        self.users[t].retain(|&x| x != f);
        for v in 0..nt {
            if v != t && self.open(f, v) {
                self.cnt[t * nt + v] -= 1;
            }
        }
        for &u in &self.list[f] {
            self.cnt[u * nt + t] += 1;
        }
    }
}

/// Successive shortest paths (see the module doc). `None` when the demand cannot be met.
pub(crate) fn solve(p: &Problem) -> Option<Solution> {
    let nt = p.cap.len();
    let nf = p.counts.len();
    let mut fl = Flow {
        p,
        nt,
        has: vec![false; nf * nt],
        list: vec![Vec::new(); nf],
        users: vec![Vec::new(); nt],
        cnt: vec![0; nt * nt],
    };
    let mut load = vec![0u64; nt];
    // Marginal cost of each target's next unit (None: full), with its tie-break.
    let next = |t: usize, n: u64| (n < p.cap[t]).then(|| (p.unit_cost(t, n + 1), p.rank[t]));
    let mut key: Vec<Option<(i64, usize)>> = (0..nt).map(|t| next(t, 0)).collect();
    let (mut seen, mut parent, mut queue) = (vec![false; nt], vec![NONE; nt], Vec::with_capacity(nt));
    let best_of = |key: &[Option<(i64, usize)>], pick: &dyn Fn(usize) -> bool| {
        (0..nt).filter(|&t| pick(t)).filter_map(|t| key[t].map(|k| (k, t))).min().map(|(_, t)| t)
    };
    for f in 0..nf {
        if p.counts[f] > nt {
            return None;
        }
        for _ in 0..p.counts[f] {
            let best_all = best_of(&key, &|_| true)?;
            let end = if fl.open(f, best_all) {
                fl.assign(f, best_all);
                best_all
            } else {
                seen.fill(false);
                queue.clear();
                for t in 0..nt {
                    if fl.open(f, t) {
                        seen[t] = true;
                        parent[t] = NONE;
                        queue.push(t);
                    }
                }
                let mut head = 0;
                while head < queue.len() && !seen[best_all] {
                    let u = queue[head];
                    head += 1;
                    for v in 0..nt {
                        if !seen[v] && fl.cnt[u * nt + v] > 0 {
                            seen[v] = true;
                            parent[v] = u;
                            queue.push(v);
                        }
                    }
                }
                let end = best_of(&key, &|t| seen[t])?;
                // Shift one stripe along each hop, from the end back to the first target.
                let mut v = end;
                while parent[v] != NONE {
                    let u = parent[v];
                    let j = *fl.users[u].iter().find(|&&j| j != f && fl.open(j, v))?;
                    fl.unassign(j, u);
                    fl.assign(j, v);
                    v = u;
                }
                fl.assign(f, v);
                end
            };
            load[end] += 1;
            key[end] = next(end, load[end]);
        }
    }
    let mut assign = fl.list;
    for a in &mut assign {
        a.sort_by_key(|&t| p.rank[t]);
    }
    Some(Solution { assign, load })
}

/// One object (stripe) of a declared batch for [`refine`]: its file, the bytes it is expected to hold
/// and the target (an index into the targets slice) it is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchObject {
    pub file: usize,
    pub bytes: u64,
    pub target: usize,
}

/// The last step over a declared batch that was solved in several flows (**decision**, not the paper's:
/// the placer solves a composite layout's extents one position and share at a time, see
/// `Placer::declare`, so the last flows have few targets left — a shared Config 1 file's first extent may
/// go only on the 8 of 35 targets its other 27 stripes do not use — and none sees the others' objects).
/// Repeatedly takes the fullest usable target and makes the exchange that lowers it most: one of its
/// objects goes to another target, and optionally a smaller object of that target comes back, provided
/// no file gets two objects on one target and the receiving target has room. An exchange is made only
/// when it lowers the larger utilisation of the two targets, so the sorted utilisations fall strictly
/// and this ends; it stops when the fullest target cannot be lowered, or after one exchange per object.
/// `targets[i].used` must already count the objects on it. Returns the number of exchanges.
///
/// Cost per exchange: O(objects on the fullest target × objects on the targets below it), bounded in all
/// by [`REFINE_WORK`] candidates.
pub fn refine(targets: &[TargetInfo], objects: &mut [BatchObject]) -> usize {
    let n = targets.len();
    let files = objects.iter().map(|o| o.file + 1).max().unwrap_or(0);
    if n == 0 || files == 0 || objects.iter().any(|o| o.target >= n) {
        return 0;
    }
    let mut load: Vec<u64> = targets.iter().map(|t| t.used).collect();
    let cap = |i: usize| targets[i].capacity.max(1) as f64;
    // Which files have an object on each target, and the objects on each target.
    // (files × targets counts: at most 10,000 declared files, so 20 MB for a thousand targets.)
    let mut on = vec![0u16; files * n];
    for o in objects.iter() {
        on[o.file * n + o.target] = on[o.file * n + o.target].saturating_add(1);
    }
    let has = |on: &[u16], f: usize, t: usize| on[f * n + t] > 0;
    let mut by_target: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, o) in objects.iter().enumerate() {
        by_target[o.target].push(k);
    }
    let mut work: u64 = 0;
    let mut exchanges = 0;
    for _ in 0..objects.len() {
        let full = match (0..n)
            .filter(|&i| targets[i].usable)
            .max_by(|&a, &b| (load[a] as f64 / cap(a)).total_cmp(&(load[b] as f64 / cap(b))))
        {
            Some(f) => f,
            None => break,
        };
        let top = load[full] as f64 / cap(full);
        // Only a target below the fullest can take anything from it.
        let below: Vec<usize> =
            (0..n).filter(|&t| t != full && targets[t].usable && (load[t] as f64 / cap(t)) < top).collect();
        // (object leaving `full`, target it goes to, object coming back, the pair's larger utilisation after)
        let mut best: Option<(usize, usize, Option<usize>, f64)> = None;
        'scan: for &o in &by_target[full] {
            let x = objects[o];
            if x.bytes == 0 {
                continue;
            }
            for &t in &below {
                let back = by_target[t].iter().copied().filter(|&c| objects[c].bytes < x.bytes).map(Some);
                for c in std::iter::once(None).chain(back) {
                    work += 1;
                    if work > REFINE_WORK {
                        break 'scan;
                    }
                    let (allowed, delta) = match c {
                        None => (!has(&on, x.file, t), x.bytes),
                        Some(c) => {
                            let g = objects[c].file;
                            let apart = !has(&on, x.file, t) && !has(&on, g, full);
                            (g == x.file || apart, x.bytes - objects[c].bytes)
                        }
                    };
                    if !allowed || load[t].saturating_add(delta) > targets[t].capacity {
                        continue;
                    }
                    let pair = ((load[t] + delta) as f64 / cap(t))
                        .max((load[full] - delta.min(load[full])) as f64 / cap(full));
                    if pair < top - 1e-12 && best.is_none_or(|(_, _, _, p)| pair < p) {
                        best = Some((o, t, c, pair));
                    }
                }
            }
        }
        let Some((o, t, c, _)) = best else { break };
        let mut shift = |k: usize, to: usize| {
            let x = objects[k];
            if let Some(i) = by_target[x.target].iter().position(|&j| j == k) {
                by_target[x.target].swap_remove(i);
            }
            by_target[to].push(k);
            on[x.file * n + x.target] = on[x.file * n + x.target].saturating_sub(1);
            on[x.file * n + to] = on[x.file * n + to].saturating_add(1);
            load[x.target] -= x.bytes.min(load[x.target]);
            load[to] += x.bytes;
            objects[k].target = to;
        };
        shift(o, t);
        if let Some(c) = c {
            shift(c, full);
        }
        exchanges += 1;
        if work > REFINE_WORK {
            break;
        }
    }
    exchanges
}

/// Candidate exchanges [`refine`] looks at in all before it stops: about 0.1 s of one core at worst (a
/// declaration of 10,000 files of 8 stripes: 2,300 objects on each of 35 targets; 20 million took 1.2 s).
pub const REFINE_WORK: u64 = 2_000_000;

#[cfg(test)]
mod tests {
    use super::super::tests::{cluster, req};
    use super::super::{ost_cost, ErrorCode};
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn objects(list: &[(usize, u64, usize)]) -> Vec<BatchObject> {
        list.iter().map(|&(file, bytes, target)| BatchObject { file, bytes, target }).collect()
    }

    fn loaded(n: usize, objs: &[BatchObject]) -> Vec<TargetInfo> {
        let mut t = cluster(1, n as u16, 100);
        for o in objs {
            t[o.target].used += o.bytes;
        }
        t
    }

    #[test]
    fn refine_moves_an_object_off_the_fullest_target() {
        // Target 0 holds 30 + 10, target 1 10, target 2 nothing: the best it can do is the 30 alone.
        let mut objs = objects(&[(0, 30, 0), (1, 10, 0), (2, 10, 1)]);
        assert_eq!(refine(&loaded(3, &objs), &mut objs), 1);
        let t = loaded(3, &objs);
        assert_eq!(t.iter().map(|x| x.used).max(), Some(30), "{objs:?}");
        assert_eq!(refine(&t, &mut objs), 0, "balanced as far as whole objects go");
    }

    /// Random batches (files of 1–6 objects of mixed sizes on distinct targets of 8): refine keeps each
    /// file's objects on distinct targets, every byte, every capacity, and never raises the fullest target.
    #[test]
    fn refine_keeps_files_apart_and_never_raises_the_fullest_target() {
        let mut rng = StdRng::seed_from_u64(15);
        let mut lowered = 0;
        for _ in 0..300 {
            let mut objs = Vec::new();
            for f in 0..rng.gen_range(1..12) {
                let mut ts: Vec<usize> = (0..8).collect();
                for k in 0..rng.gen_range(1..=6) {
                    let t = ts.swap_remove(rng.gen_range(0..ts.len()));
                    objs.push(BatchObject { file: f, bytes: rng.gen_range(1..40) * (1 + k as u64 % 2), target: t });
                }
            }
            let mut t = loaded(8, &objs);
            for x in t.iter_mut() {
                x.capacity = x.used + rng.gen_range(0..60);
            }
            t[rng.gen_range(0..8)].usable = false;
            let max = |t: &[TargetInfo]| {
                t.iter().filter(|x| x.usable).map(|x| x.used as f64 / x.capacity as f64).fold(0.0, f64::max)
            };
            let before = max(&t);
            let total: u64 = objs.iter().map(|o| o.bytes).sum();
            let mut after_objs = objs.clone();
            let moved = refine(&t, &mut after_objs);
            let mut u = t.clone();
            for x in u.iter_mut() {
                x.used = 0;
            }
            for o in &after_objs {
                u[o.target].used += o.bytes;
            }
            for (i, x) in u.iter_mut().enumerate() {
                x.used += t[i].used - objs.iter().filter(|o| o.target == i).map(|o| o.bytes).sum::<u64>();
                assert!(x.used <= x.capacity.max(t[i].used), "target {i} overfilled");
                if !x.usable {
                    assert!(x.used <= t[i].used, "an object went to an unusable target");
                }
            }
            assert_eq!(after_objs.iter().map(|o| o.bytes).sum::<u64>(), total);
            for f in 0..12 {
                let mut ts: Vec<usize> = after_objs.iter().filter(|o| o.file == f).map(|o| o.target).collect();
                let n = ts.len();
                ts.sort();
                ts.dedup();
                assert_eq!(ts.len(), n, "file {f}: two objects on one target");
            }
            assert!(max(&u) <= before + 1e-12, "{before} -> {}", max(&u));
            lowered += usize::from(moved > 0 && max(&u) < before);
        }
        assert!(lowered > 30, "refine lowered the fullest target in only {lowered} of 300 batches");
    }

    #[test]
    fn refine_swaps_a_large_object_for_a_smaller_one() {
        // Two targets, two files each on both: no move is allowed (each file is on every target); swapping
        // file 0's 20 on target 0 with file 0's 5 on target 1 evens them out: 20 + 20 / 5 + 5 → 5 + 20 / 20 + 5.
        let mut objs = objects(&[(0, 20, 0), (1, 20, 0), (0, 5, 1), (1, 5, 1)]);
        assert_eq!(refine(&loaded(2, &objs), &mut objs), 1);
        let t = loaded(2, &objs);
        assert_eq!((t[0].used, t[1].used), (25, 25), "{objs:?}");
    }

    #[test]
    fn refine_never_overfills_nor_uses_an_unusable_target() {
        let mut objs = objects(&[(0, 60, 0), (1, 30, 0)]);
        let mut t = loaded(3, &objs);
        t[1].usable = false;
        t[2].used = 80; // room for 20 only
        assert_eq!(refine(&t, &mut objs), 0, "{objs:?}");
    }

    /// Independent reference: plain SSP with Bellman-Ford on the explicit graph (every unit arc materialised).
    fn reference(p: &Problem) -> Option<i64> {
        let (nf, nt) = (p.counts.len(), p.cap.len());
        let demand: usize = p.counts.iter().sum();
        let (src, sink) = (0, nf + nt + 1);
        let n = nf + nt + 2;
        // (to, cap, cost); edge i's reverse is i ^ 1.
        let mut edges: Vec<(usize, i64, i64)> = Vec::new();
        let mut adj = vec![Vec::new(); n];
        let mut add = |a: usize, b: usize, cap: i64, cost: i64, edges: &mut Vec<(usize, i64, i64)>| {
            adj[a].push(edges.len());
            edges.push((b, cap, cost));
            adj[b].push(edges.len());
            edges.push((a, 0, -cost));
        };
        for f in 0..nf {
            add(src, 1 + f, p.counts[f] as i64, 0, &mut edges);
            for t in 0..nt {
                if p.allowed[f * nt + t] {
                    add(1 + f, 1 + nf + t, 1, 0, &mut edges);
                }
            }
        }
        for t in 0..nt {
            for k in 1..=p.cap[t].min(demand as u64) {
                add(1 + nf + t, sink, 1, p.unit_cost(t, k), &mut edges);
            }
        }
        let (mut flow, mut cost) = (0usize, 0i64);
        loop {
            let mut dist = vec![i64::MAX; n];
            let mut via = vec![usize::MAX; n];
            dist[src] = 0;
            for _ in 0..n {
                let mut changed = false;
                for a in 0..n {
                    if dist[a] == i64::MAX {
                        continue;
                    }
                    for &e in &adj[a] {
                        let (b, c, w) = edges[e];
                        if c > 0 && dist[a] + w < dist[b] {
                            dist[b] = dist[a] + w;
                            via[b] = e;
                            changed = true;
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
            if dist[sink] == i64::MAX {
                break;
            }
            let mut v = sink;
            while v != src {
                let e = via[v];
                edges[e].1 -= 1;
                edges[e ^ 1].1 += 1;
                v = edges[e ^ 1].0;
            }
            flow += 1;
            cost += dist[sink];
        }
        (flow == demand).then_some(cost)
    }

    /// Brute force over every choice of distinct targets per file.
    fn brute(p: &Problem) -> Option<i64> {
        fn rec(p: &Problem, f: usize, load: &mut Vec<u64>, best: &mut Option<i64>) {
            let nt = p.cap.len();
            if f == p.counts.len() {
                let c = p.cost_of(load);
                if best.is_none_or(|b| c < b) {
                    *best = Some(c);
                }
                return;
            }
            let opts: Vec<usize> = (0..nt).filter(|&t| p.allowed[f * nt + t]).collect();
            let k = p.counts[f];
            let mut pick = Vec::new();
            fn subsets(o: &[usize], k: usize, s: usize, pick: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
                if pick.len() == k {
                    out.push(pick.clone());
                    return;
                }
                for i in s..o.len() {
                    pick.push(o[i]);
                    subsets(o, k, i + 1, pick, out);
                    pick.pop();
                }
            }
            let mut all = Vec::new();
            subsets(&opts, k, 0, &mut pick, &mut all);
            for s in all {
                if s.iter().all(|&t| load[t] < p.cap[t]) {
                    s.iter().for_each(|&t| load[t] += 1);
                    rec(p, f + 1, load, best);
                    s.iter().for_each(|&t| load[t] -= 1);
                }
            }
        }
        let mut best = None;
        rec(p, 0, &mut vec![0; p.cap.len()], &mut best);
        best
    }

    fn random_instance(rng: &mut StdRng, max_t: u32, max_f: usize) -> (Vec<TargetInfo>, Vec<CreateRequest>) {
        let servers = rng.gen_range(1..=max_t);
        let per = rng.gen_range(1..=2u16);
        let mut t = cluster(servers, per, 0);
        for x in &mut t {
            x.capacity = rng.gen_range(4..40) * 100;
            x.used = rng.gen_range(0..=x.capacity);
            x.server_load = if rng.gen_bool(0.3) { rng.gen_range(0.0..0.01) } else { 0.0 };
            x.usable = rng.gen_bool(0.9);
        }
        let nt = t.len();
        let batch = (0..rng.gen_range(1..=max_f))
            .map(|_| CreateRequest {
                stripe_count: rng.gen_range(1..=nt.min(4)),
                stripe_size: 100,
                expected_size: rng.gen_range(0..4) * 100,
                exclude: (0..nt).filter(|_| rng.gen_bool(0.15)).collect(),
                mirrors: 1,
            })
            .collect();
        (t, batch)
    }

    fn check_solution(p: &Problem, s: &Solution) {
        let nt = p.cap.len();
        let mut load = vec![0u64; nt];
        for (f, a) in s.assign.iter().enumerate() {
            assert_eq!(a.len(), p.counts[f]);
            for (k, &t) in a.iter().enumerate() {
                assert!(p.allowed[f * nt + t] && !a[..k].contains(&t));
                load[t] += 1;
            }
        }
        assert_eq!(load, s.load);
        assert!((0..nt).all(|t| load[t] <= p.cap[t]), "capacity exceeded");
    }

    #[test]
    fn optimal_against_independent_ssp() {
        let mut rng = StdRng::seed_from_u64(15);
        let (mut solved, mut infeasible) = (0, 0);
        for _ in 0..400 {
            let (t, batch) = random_instance(&mut rng, 6, 8);
            let Ok((p, _)) = Problem::build(&t, &batch, 1.0, 0) else { continue };
            let mine = solve(&p);
            match (&mine, reference(&p)) {
                (Some(s), Some(c)) => {
                    check_solution(&p, s);
                    assert_eq!(p.cost_of(&s.load), c, "{p:?}");
                    solved += 1;
                }
                (None, None) => infeasible += 1,
                (m, r) => panic!("feasibility differs: mine {m:?}, reference {r:?} for {p:?}"),
            }
        }
        assert!(solved > 100 && infeasible > 5, "{solved} solved, {infeasible} infeasible");
    }

    #[test]
    fn optimal_against_brute_force() {
        let mut rng = StdRng::seed_from_u64(16);
        let mut solved = 0;
        for _ in 0..200 {
            let (t, batch) = random_instance(&mut rng, 3, 3);
            let Ok((p, _)) = Problem::build(&t, &batch, 1.0, 0) else { continue };
            let mine = solve(&p);
            assert_eq!(mine.as_ref().map(|s| p.cost_of(&s.load)), brute(&p), "{p:?}");
            solved += mine.is_some() as usize;
        }
        assert!(solved > 50);
    }

    /// Convex costs spread a batch instead of piling it on the cheapest target, and the server load counts.
    #[test]
    fn convexity_spreads_a_batch() {
        let mut t = cluster(4, 2, 1 << 30);
        t[0].used = 1 << 28;
        let b = Balanced::default();
        let batch = vec![req(2, 64 << 20); 16];
        let out = b.place_batch(&t, &batch).unwrap();
        let mut n = vec![0; 8];
        out.iter().flatten().for_each(|&i| n[i] += 1);
        // 32 stripes of 32 MiB: the fuller target gets fewer, the others within one stripe of each other,
        // and no target ends fuller than the fullest was.
        let (lo, hi) = (n[1..].iter().min().unwrap(), n[1..].iter().max().unwrap());
        assert!(hi - lo <= 1 && n[0] < *lo, "{n:?}");
        let util: Vec<f64> = (0..8).map(|i| (t[i].used + n[i] * (32 << 20)) as f64 / (1u64 << 30) as f64).collect();
        assert!(util.iter().all(|&u| u <= 0.25), "{util:?}");
        let work: Vec<f64> = n[1..].iter().map(|&k| k as f64).collect();
        assert!(ost_cost(&work) < 1.3, "{work:?}");
        // A loaded server is avoided while others are cheaper.
        let mut t = cluster(4, 1, 1 << 30);
        t[2].server_load = 0.5;
        let out = b.place_batch(&t, &vec![req(2, 0); 4]).unwrap();
        assert!(out.iter().flatten().all(|&i| i != 2), "{out:?}");
        // Stripes of one file alternate servers (ties broken in round-robin-list order).
        let t = cluster(3, 3, 1 << 30);
        let o = b.place(&t, &req(3, 0)).unwrap();
        let mut s: Vec<u32> = o.iter().map(|&i| t[i].server).collect();
        s.dedup();
        assert_eq!(s.len(), 3, "{o:?}");
    }

    /// Creates of unknown size on equally filled targets spread like round-robin (rotating tie-break).
    #[test]
    fn unknown_size_creates_rotate() {
        let t = cluster(7, 5, 10 << 30);
        let b = Balanced::default();
        let mut n = [0u32; 35];
        for _ in 0..35 {
            for i in b.place(&t, &req(8, 0)).unwrap() {
                n[i] += 1;
            }
        }
        assert!(n.iter().all(|&k| k == 8), "{n:?}");
    }

    #[test]
    fn exclusions_and_capacity_are_respected() {
        let mut t = cluster(3, 2, 1000);
        t[4].usable = false;
        t[5].used = 950;
        let batch: Vec<CreateRequest> =
            (0..6).map(|i| CreateRequest { stripe_size: 100, exclude: vec![i % 4], ..req(3, 300) }).collect();
        let b = Balanced::default();
        let out = b.place_batch(&t, &batch).unwrap();
        let mut n = vec![0u64; 6];
        for (r, o) in batch.iter().zip(&out) {
            for &i in o {
                assert!(!r.exclude.contains(&i) && i != 4 && i != 5, "{out:?}");
                n[i] += 100;
            }
        }
        assert!((0..6).all(|i| t[i].used + n[i] <= t[i].capacity), "{n:?}");
        assert!(!b.last_solve().unwrap().fallback);
    }

    #[test]
    fn falls_back_to_lustre_when_demand_exceeds_capacity() {
        // maxStripe = 500 (one big file): every target has room for one unit; 4 targets, 5 stripes wanted.
        // The flow fails, Lustre (per-request shares) still places all.
        let t = cluster(4, 1, 600);
        let small = |count, expected| CreateRequest { stripe_size: 100, ..req(count, expected) };
        let batch = vec![small(1, 500), small(2, 100), small(2, 100)];
        let b = Balanced::default();
        let out = b.place_batch(&t, &batch).unwrap();
        assert_eq!(out.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 2, 2]);
        let s = b.last_solve().unwrap();
        assert!(s.fallback && s.batch == 3 && s.stripes == 5, "{s:?}");
        // When nothing can place it, NoSpace.
        let err = b.place_batch(&t, &[req(4, 4000)]).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoSpace);
    }

    #[test]
    fn big_batch_solves() {
        let mut t = cluster(7, 5, 10 << 30);
        for (i, x) in t.iter_mut().enumerate() {
            x.used = (i as u64 * 7 % 11) << 29;
        }
        let (p, _) = Problem::build(&t, &vec![req(8, 128 << 20); 1000], 1.0, 0).unwrap();
        let s = solve(&p).unwrap();
        check_solution(&p, &s);
        // Per target utilisation after the batch is level where the fill allows.
        let util: Vec<f64> =
            (0..35).map(|i| (t[i].used + s.load[i] * (1 << 24)) as f64 / (10u64 << 30) as f64).collect();
        let (lo, hi) = util.iter().fold((f64::MAX, 0f64), |(a, b), &u| (a.min(u), b.max(u)));
        assert!(hi - lo < 0.02, "{util:?}");
    }
}
