//! `lustre`: Lustre's standard allocator (LSA) as its code does it (`lustre/lod/lod_qos.c`:
//! `lod_qos_calc_ppo`, `lod_qos_calc_weight`, `lod_qos_used`, `lod_qos_calc_rr`, `lod_alloc_rr`,
//! `lod_alloc_qos`; the same rules live on in `lu_tgt_descs.c`'s `ltd_qos_penalties_calc` in later releases).
//!
//! Spec: `../shared/specs/placement.md`, table "Allocation policies", row `lustre`. The rules:
//! - **Round-robin while balanced**: when `max_free * (256 - threshold_rr) / 256 < min_free` over the targets
//!   with free space (`qos_threshold_rr` 17%, kept in 1/256 units as Lustre does), the round-robin allocator is
//!   used: a list interleaving the servers' targets ([`super::rr_order`]), a start index re-seeded at random every
//!   `(2000 / n + 30) * n` files, advanced by every target looked at, and an offset that precesses by one each
//!   time the start wraps (unless `n % stripe_count == 1`, where the wrap already precesses).
//! - **Weighted random otherwise**: each candidate's weight is `free − target penalty − server penalty`
//!   (floored at 0); a uniform draw in `[0, total weight)` walks the candidates in index order and takes the
//!   first whose cumulative weight reaches it.
//! - **Penalties** (`qos_prio_free` 90% → `prio_wide = 256 − 230`): per object, a target's is
//!   `prio_wide * (free / 2) / (active targets − 1) / 256` and a server's `prio_wide * (server free / 2) /
//!   (its targets * (active servers − 1)) / 256` (with one server, the target penalty doubles instead). Taking a
//!   target halves its and its server's penalty, then adds `per-object * target count` (resp. `per-object *
//!   active servers`); then every penalty in the cluster drops by its per-object amount.
//! - **Decay**: when the free space changed since the last computation, a penalty idle for `age = idle_s / 8 >
//!   maxage` (5 s) is halved `age / maxage` times, and cleared when `age > 32 * maxage` or after a round-robin
//!   period (`lq_reset`).
//!
//! Mirrored files: replica 0 of the stripes is placed as above (the file's placement with M = 1, unchanged),
//! then the later replicas row by row, stripe by stripe, in the same allocator: replica `r ≥ 1` of stripe
//! `k` is the allocator's next choice among the targets whose server and failure domain differ from those of
//! stripe `k`'s earlier replicas and that have room for one more of the file's objects — a weighted draw
//! (with the penalties updated after each, so a replica's target and server are penalised as a stripe's
//! are) when the weighted allocator placed replica 0, else the next such entry of the round-robin list after
//! the last one looked at (the start advancing with every entry looked at, as for stripes). Lustre's FLR
//! does the like for a file's mirrors, avoiding the targets and servers its other mirrors use
//! (`lod_should_avoid_ost`), but as a preference; here the rule is strict, and a replica that has no such
//! target fails the create with `NoSpace`.
//!
//! Differences, on purpose: only free bytes are weighed (later Lustre also multiplies in free inodes); a target
//! must have room for the file's share (Lustre only skips targets nearly full); Lustre's "slow OSC" passes and
//! reduced stripe counts for default striping are not modelled — a request that cannot be met is `NoSpace`.

use super::{add_replicas, has_room, no_space, rr_order, sequential, CreateRequest, Placement, TargetInfo};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tessera_proto::{DsId, FsResult};

/// `qos_threshold_rr`, percent (Lustre's default).
pub const QOS_THRESHOLD_RR_PCT: u64 = 17;
/// `qos_prio_free`, percent (Lustre's default).
pub const QOS_PRIO_FREE_PCT: u64 = 90;
/// `qos_maxage`, seconds (Lustre's default `LOV_DESC_QOS_MAXAGE_DEFAULT`).
pub const QOS_MAXAGE_S: u64 = 5;
/// `LOV_CREATE_RESEED_MIN` and `LOV_CREATE_RESEED_MULT`.
const RESEED_MIN: usize = 2000;
const RESEED_MULT: usize = 30;
/// The default seed of the random draws (tests and simulations are reproducible).
pub const DEFAULT_SEED: u64 = 0x1a57_2e5e;

/// Percent to Lustre's 1/256 units (`(val << 8) / 100`).
fn to_256(pct: u64) -> u64 {
    (pct.min(100) << 8) / 100
}

pub struct Lustre {
    threshold_rr: u64,
    prio_free: u64,
    maxage_s: u64,
    state: Mutex<State>,
}

impl Default for Lustre {
    fn default() -> Self {
        Lustre::with_seed(DEFAULT_SEED)
    }
}

impl Lustre {
    pub fn with_seed(seed: u64) -> Lustre {
        Lustre::with_params(seed, QOS_THRESHOLD_RR_PCT, QOS_PRIO_FREE_PCT, QOS_MAXAGE_S)
    }

    /// Lustre's tunables: `qos_threshold_rr` and `qos_prio_free` in percent, `qos_maxage` in seconds.
    pub fn with_params(seed: u64, threshold_rr_pct: u64, prio_free_pct: u64, maxage_s: u64) -> Lustre {
        Lustre {
            threshold_rr: to_256(threshold_rr_pct),
            prio_free: to_256(prio_free_pct),
            maxage_s: maxage_s.max(1),
            state: Mutex::new(State::new(seed)),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Placement for Lustre {
    fn name(&self) -> &'static str {
        "lustre"
    }

    fn place_batch(&self, targets: &[TargetInfo], batch: &[CreateRequest]) -> FsResult<Vec<Vec<usize>>> {
        let mut st = self.state();
        let order = rr_order(targets);
        sequential(targets, batch, |now, req, count, share| {
            if let Some(mut chosen) = st.alloc_qos(self, now, req, count, share) {
                add_replicas(now, req, share, count, &mut chosen, |ok| st.draw(now, ok))?;
                return Ok(chosen);
            }
            st.alloc_rr(&order, now, req, count, share)
        })
    }

    fn set_now(&self, now: Duration) {
        self.state().now = now.as_secs();
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Qos {
    penalty: u64,
    penalty_per_obj: u64,
    /// When last chosen (seconds of the caller's clock).
    used_at: u64,
}

#[derive(Debug, Default)]
struct Rr {
    start_idx: usize,
    start_count: i64,
    offset_idx: usize,
}

struct State {
    rng: StdRng,
    now: u64,
    tgt: HashMap<(DsId, u16), Qos>,
    svr: HashMap<DsId, Qos>,
    /// Free bytes per target at the last penalty computation (`lq_dirty` when it changes).
    last_free: Option<Vec<((DsId, u16), u64)>>,
    reset: bool,
    same_space: bool,
    active_svr_count: u64,
    rr: Rr,
}

/// Why the weighted allocator declined (Lustre's `-EAGAIN`): round-robin places the file instead.
struct Again;

impl State {
    fn new(seed: u64) -> State {
        State {
            rng: StdRng::seed_from_u64(seed),
            now: 0,
            tgt: HashMap::new(),
            svr: HashMap::new(),
            last_free: None,
            reset: false,
            same_space: false,
            active_svr_count: 0,
            rr: Rr::default(),
        }
    }

    fn decay(q: &mut Qos, now: u64, maxage: u64, reset: bool) {
        let age = now.saturating_sub(q.used_at) >> 3;
        if reset || age > 32 * maxage {
            q.penalty = 0;
        } else if age > maxage {
            let shift = age / maxage;
            q.penalty = if shift >= 64 { 0 } else { q.penalty >> shift };
        }
    }

    /// `lod_qos_calc_ppo`: per-object penalties, decay, and whether free space is balanced (`Err(Again)`:
    /// use round-robin).
    fn calc_ppo(&mut self, p: &Lustre, targets: &[TargetInfo]) -> Result<(), Again> {
        let snapshot: Vec<((DsId, u16), u64)> =
            targets.iter().map(|t| ((t.server, t.target), if t.usable { t.free() } else { 0 })).collect();
        if self.last_free.as_ref() == Some(&snapshot) {
            return if self.same_space { Err(Again) } else { Ok(()) };
        }
        let active = targets.iter().filter(|t| t.usable).count() as u64;
        if active < 2 {
            return Err(Again);
        }
        let num_active = active - 1;
        let prio_wide = 256 - p.prio_free;
        let mut svr_free: HashMap<DsId, u64> = HashMap::new();
        let mut svr_targets: HashMap<DsId, u64> = HashMap::new();
        for t in targets {
            *svr_targets.entry(t.server).or_default() += 1;
        }
        self.active_svr_count = 0;
        let (mut ba_min, mut ba_max) = (u64::MAX, 0u64);
        for t in targets.iter().filter(|t| t.usable) {
            let ba = t.free();
            if ba == 0 {
                continue;
            }
            ba_min = ba_min.min(ba);
            ba_max = ba_max.max(ba);
            let f = svr_free.entry(t.server).or_default();
            if *f == 0 {
                self.active_svr_count += 1;
            }
            *f = f.saturating_add(ba);
            let q = self.tgt.entry((t.server, t.target)).or_default();
            q.penalty_per_obj = mul_256((ba >> 1) / num_active, prio_wide);
            Self::decay(q, self.now, p.maxage_s, self.reset);
        }
        let mut num_svr = self.active_svr_count.saturating_sub(1);
        if num_svr < 1 {
            // One server: it cannot be penalised against others, so targets pay double.
            num_svr = 1;
            for t in targets {
                if let Some(q) = self.tgt.get_mut(&(t.server, t.target)) {
                    q.penalty_per_obj = q.penalty_per_obj.saturating_mul(2);
                }
            }
        }
        for (&s, &n) in &svr_targets {
            let free = svr_free.get(&s).copied().unwrap_or(0);
            let q = self.svr.entry(s).or_default();
            q.penalty_per_obj = mul_256((free >> 1) / (n * num_svr), prio_wide);
            Self::decay(q, self.now, p.maxage_s, self.reset);
        }
        self.last_free = Some(snapshot);
        self.reset = false;
        self.same_space = mul_256(ba_max, 256 - p.threshold_rr) < ba_min;
        if self.same_space {
            // Weights start afresh the next time the weighted allocator is used.
            self.reset = true;
            return Err(Again);
        }
        Ok(())
    }

    /// `lod_qos_calc_weight`: free space minus the target's and its server's penalties.
    fn weight(&self, t: &TargetInfo) -> u64 {
        let tp = self.tgt.get(&(t.server, t.target)).map_or(0, |q| q.penalty);
        let sp = self.svr.get(&t.server).map_or(0, |q| q.penalty);
        t.free().saturating_sub(tp.saturating_add(sp))
    }

    /// `lod_qos_used`: target `i` just got a stripe.
    fn used(&mut self, targets: &[TargetInfo], i: usize) {
        let (now, ostnr, active_svr) = (self.now, targets.len() as u64, self.active_svr_count);
        let t = &targets[i];
        let q = self.tgt.entry((t.server, t.target)).or_default();
        q.penalty >>= 1;
        q.used_at = now;
        q.penalty = q.penalty.saturating_add(q.penalty_per_obj.saturating_mul(ostnr));
        let s = self.svr.entry(t.server).or_default();
        s.penalty >>= 1;
        s.used_at = now;
        s.penalty = s.penalty.saturating_add(s.penalty_per_obj.saturating_mul(active_svr));
        for q in self.svr.values_mut() {
            q.penalty = q.penalty.saturating_sub(q.penalty_per_obj);
        }
        for t in targets {
            if let Some(q) = self.tgt.get_mut(&(t.server, t.target)) {
                q.penalty = q.penalty.saturating_sub(q.penalty_per_obj);
            }
        }
    }

    /// `lod_alloc_qos`: weighted random choice; `None` (`-EAGAIN`) hands the file to round-robin.
    fn alloc_qos(
        &mut self,
        p: &Lustre,
        targets: &[TargetInfo],
        req: &CreateRequest,
        count: usize,
        share: u64,
    ) -> Option<Vec<usize>> {
        self.calc_ppo(p, targets).ok()?;
        let good: Vec<usize> =
            (0..targets.len()).filter(|&i| has_room(&targets[i], share) && !req.exclude.contains(&i)).collect();
        if good.len() < count {
            return None;
        }
        let mut open = vec![true; good.len()];
        let mut chosen = Vec::with_capacity(count);
        while chosen.len() < count {
            let weights: Vec<u64> = good.iter().map(|&i| self.weight(&targets[i])).collect();
            let total: u128 = (0..good.len()).filter(|&k| open[k]).map(|k| weights[k] as u128).sum();
            let rand = if total > 0 { self.rng.gen_range(0..total) } else { 0 };
            let mut cur: u128 = 0;
            let mut picked = None;
            for (k, &w) in weights.iter().enumerate() {
                if !open[k] {
                    continue;
                }
                cur += w as u128;
                if cur < rand {
                    continue;
                }
                picked = Some(k);
                break;
            }
            let Some(k) = picked else { break };
            open[k] = false;
            chosen.push(good[k]);
            self.used(targets, good[k]);
        }
        if chosen.len() != count {
            // Makes sense to rebalance next time.
            self.last_free = None;
            self.same_space = false;
            return None;
        }
        Some(chosen)
    }

    /// One weighted draw (as [`State::alloc_qos`] draws) among the targets for which `ok` holds, the
    /// chosen one penalised; `None` when none is.
    fn draw(&mut self, targets: &[TargetInfo], ok: &dyn Fn(usize) -> bool) -> Option<usize> {
        let good: Vec<usize> = (0..targets.len()).filter(|&i| ok(i)).collect();
        if good.is_empty() {
            return None;
        }
        let weights: Vec<u64> = good.iter().map(|&i| self.weight(&targets[i])).collect();
        let total: u128 = weights.iter().map(|&w| w as u128).sum();
        let rand = if total > 0 { self.rng.gen_range(0..total) } else { 0 };
        let mut cur: u128 = 0;
        let k = weights.iter().position(|&w| {
            cur += w as u128;
            cur >= rand
        })?;
        self.used(targets, good[k]);
        Some(good[k])
    }

    /// `lod_alloc_rr`: consecutive entries of the round-robin list from a start that advances with every
    /// entry looked at; a mirrored file's later replicas continue along the list (module doc).
    fn alloc_rr(
        &mut self,
        order: &[usize],
        targets: &[TargetInfo],
        req: &CreateRequest,
        count: usize,
        share: u64,
    ) -> FsResult<Vec<usize>> {
        let n = order.len();
        if n == 0 {
            return Err(no_space("no storage targets"));
        }
        let rr = &mut self.rr;
        rr.start_count -= 1;
        if rr.start_count <= 0 {
            rr.start_idx = self.rng.gen_range(0..n);
            rr.start_count = ((RESEED_MIN / n + RESEED_MULT) * n) as i64;
        } else if count >= n || rr.start_idx > n {
            // Having gone round the list, precess the start slowly unless the count already does.
            rr.start_idx %= n;
            if count > 1 && n % count != 1 {
                rr.offset_idx = (rr.offset_idx + 1) % n;
            }
        }
        let mut array_idx = (rr.start_idx + rr.offset_idx) % n;
        let mut chosen = Vec::with_capacity(count * req.mirror_count());
        for _ in 0..n {
            rr.start_idx += 1;
            let t = order[array_idx];
            array_idx = (array_idx + 1) % n;
            if !has_room(&targets[t], share) || req.exclude.contains(&t) {
                continue;
            }
            chosen.push(t);
            if chosen.len() == count {
                break;
            }
        }
        if chosen.len() < count {
            return Err(no_space("not enough storage targets with room"));
        }
        add_replicas(targets, req, share, count, &mut chosen, |ok| {
            for _ in 0..n {
                rr.start_idx += 1;
                let t = order[array_idx];
                array_idx = (array_idx + 1) % n;
                if ok(t) {
                    return Some(t);
                }
            }
            None
        })?;
        Ok(chosen)
    }
}

/// `(a * b) >> 8` without overflow.
fn mul_256(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 8).min(u64::MAX as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cluster, mirrored, req};
    use super::*;

    fn with_free(free: &[u64]) -> Vec<TargetInfo> {
        let mut t = cluster(free.len() as u32, 1, 1000);
        for (x, &f) in t.iter_mut().zip(free) {
            x.used = 1000 - f;
        }
        t
    }

    /// Rule: round-robin while free space is balanced; consecutive files take consecutive entries.
    #[test]
    fn round_robin_while_balanced() {
        let p = Lustre::default();
        let t = cluster(5, 2, 1000);
        let order = rr_order(&t);
        let a = p.place(&t, &req(3, 0)).unwrap();
        let b = p.place(&t, &req(3, 0)).unwrap();
        let pos = |i: usize| order.iter().position(|&x| x == i).unwrap();
        for w in a.iter().chain(&b).collect::<Vec<_>>().windows(2) {
            assert_eq!(pos(*w[1]), (pos(*w[0]) + 1) % order.len(), "{a:?} {b:?}");
        }
    }

    /// Rule: round-robin alternates servers before reusing one.
    #[test]
    fn round_robin_alternates_servers() {
        let p = Lustre::default();
        let t = cluster(4, 3, 1000);
        for _ in 0..20 {
            let o = p.place(&t, &req(4, 0)).unwrap();
            let mut s: Vec<DsId> = o.iter().map(|&i| t[i].server).collect();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 4, "{o:?}");
        }
    }

    /// Rule: the threshold is `qos_threshold_rr` = 17% (43/256) of the most free space.
    #[test]
    fn threshold_rr_is_17_percent() {
        let p = Lustre::default();
        assert_eq!(p.threshold_rr, 43);
        // 1000 * 213 / 256 = 832.03: a target with 833 free is balanced, one with 832 is not.
        let mut st = State::new(1);
        assert!(st.calc_ppo(&p, &with_free(&[1000, 833, 900])).is_err());
        assert!(st.same_space);
        let mut st = State::new(1);
        assert!(st.calc_ppo(&p, &with_free(&[1000, 832, 900])).is_ok());
        assert!(!st.same_space);
    }

    /// Six targets of 1 TiB: three with 1000 MiB free, three with 100 MiB (unbalanced).
    fn three_empty_three_full() -> Vec<TargetInfo> {
        let mut t = with_free(&[1000, 1000, 1000, 100, 100, 100]);
        for x in &mut t {
            let f = x.free();
            x.capacity = 1 << 40;
            x.used = (1 << 40) - f * (1 << 20);
        }
        t
    }

    /// Rule: when unbalanced, weighted random by free space: emptier targets are chosen more often.
    #[test]
    fn weighted_random_by_free_space() {
        let p = Lustre::default();
        let t = three_empty_three_full();
        let mut hits = [0u32; 6];
        for _ in 0..3000 {
            for i in p.place(&t, &req(1, 0)).unwrap() {
                hits[i] += 1;
            }
        }
        let full: u32 = hits[3..].iter().sum();
        let empty: u32 = hits[..3].iter().sum();
        assert!(full > 0 && empty > 5 * full, "{hits:?}");
    }

    /// Rule: `qos_prio_free` 90% sets the per-object penalties: target `prio_wide * free/2 / (active-1)`,
    /// server `prio_wide * server free/2 / (its targets * (servers-1))`, both / 256.
    #[test]
    fn prio_free_sets_per_object_penalties() {
        let p = Lustre::default();
        assert_eq!(256 - p.prio_free, 26);
        let mut t = cluster(3, 2, 1 << 30);
        t[0].used = 1 << 29; // unbalanced
        let mut st = State::new(1);
        st.calc_ppo(&p, &t).ok().unwrap();
        let free1 = 1u64 << 30;
        assert_eq!(st.tgt[&(1, 0)].penalty_per_obj, ((free1 >> 1) / 5 * 26) >> 8);
        assert_eq!(st.svr[&1].penalty_per_obj, (((2 * free1) >> 1) / (2 * 2) * 26) >> 8);
        let free0 = (1u64 << 29) + (1 << 30);
        assert_eq!(st.svr[&0].penalty_per_obj, ((free0 >> 1) / (2 * 2) * 26) >> 8);
    }

    /// Rule: one server only: the target penalty doubles instead of a server penalty.
    #[test]
    fn single_server_doubles_target_penalty() {
        let p = Lustre::default();
        let mut t = cluster(1, 3, 1 << 30);
        t[0].used = 1 << 29;
        let mut st = State::new(1);
        st.calc_ppo(&p, &t).ok().unwrap();
        assert_eq!(st.tgt[&(0, 1)].penalty_per_obj, (((1u64 << 29) / 2 * 26) >> 8) * 2);
    }

    /// Rule: taking a target halves its and its server's penalty, adds per-object × target count (server:
    /// × active servers), then every penalty drops by its per-object amount.
    #[test]
    fn used_target_and_server_are_penalised() {
        let p = Lustre::default();
        let mut t = cluster(3, 2, 1 << 30);
        t[0].used = 1 << 29;
        let mut st = State::new(1);
        st.calc_ppo(&p, &t).ok().unwrap();
        let (tp, sp) = (st.tgt[&(1, 0)].penalty_per_obj, st.svr[&1].penalty_per_obj);
        let w_before = st.weight(&t[2]);
        st.used(&t, 2);
        assert_eq!(st.tgt[&(1, 0)].penalty, tp * 6 - tp);
        assert_eq!(st.svr[&1].penalty, sp * 3 - sp);
        assert_eq!(st.weight(&t[2]), w_before - (tp * 5 + sp * 2));
        // The other target of the same server pays the server penalty only.
        assert_eq!(st.weight(&t[3]), t[3].free() - sp * 2);
        // Reuse: the old penalty is halved before the new one is added.
        st.used(&t, 2);
        assert_eq!(st.tgt[&(1, 0)].penalty, ((tp * 5) >> 1) + tp * 6 - tp);
    }

    /// Rule: penalties decay with idle time: halved `age / maxage` times where `age = idle / 8`, cleared
    /// after `32 * maxage`, and cleared after a balanced (round-robin) period.
    #[test]
    fn penalties_decay_with_idle_time() {
        let mut q = Qos { penalty: 1 << 20, penalty_per_obj: 0, used_at: 100 };
        State::decay(&mut q, 100 + 8 * 5, 5, false); // age 5: not yet
        assert_eq!(q.penalty, 1 << 20);
        State::decay(&mut q, 100 + 8 * 10, 5, false); // age 10: two halvings
        assert_eq!(q.penalty, 1 << 18);
        State::decay(&mut q, 100 + 8 * 161, 5, false); // age > 160
        assert_eq!(q.penalty, 0);
        let mut q = Qos { penalty: 1 << 20, penalty_per_obj: 0, used_at: 100 };
        State::decay(&mut q, 100, 5, true);
        assert_eq!(q.penalty, 0);
        // Through the policy: the clock comes from set_now.
        let p = Lustre::default();
        let mut t = cluster(3, 2, 1 << 30);
        t[0].used = 1 << 29;
        p.set_now(Duration::from_secs(1000));
        p.place(&t, &req(1, 0)).unwrap();
        let chosen = p.state().tgt.values().map(|q| q.penalty).max().unwrap();
        assert!(chosen > 0);
        p.set_now(Duration::from_secs(1000 + 8 * 161));
        t[1].used += 1; // new statfs: recompute
        let mut st = p.state();
        st.calc_ppo(&p, &t).ok().unwrap();
        assert!(st.tgt.values().all(|q| q.penalty == 0));
    }

    /// Rule: the round-robin start is re-seeded at random every `(2000/n + 30) * n` files and precesses by
    /// one each time it wraps (unless `n % count == 1`).
    #[test]
    fn round_robin_reseeds_and_precesses() {
        let t7 = cluster(7, 1, 1000);
        let o7 = rr_order(&t7);
        let mut st = State::new(3);
        st.alloc_rr(&o7, &t7, &req(3, 0), 3, 0).unwrap();
        assert_eq!(st.rr.start_count, ((2000 / 7 + 30) * 7) as i64);
        st.rr.start_idx = 0;
        let off = st.rr.offset_idx;
        let mut firsts = vec![];
        for _ in 0..4 {
            firsts.push(st.alloc_rr(&o7, &t7, &req(3, 0), 3, 0).unwrap()[0]);
        }
        // Start 0, 3, 6, then 9 wraps to 2: 7 % 3 = 1, the wrap itself precesses.
        assert_eq!(st.rr.offset_idx, off);
        assert_eq!(firsts, [0, 3, 6, 2].map(|k| o7[(k + off) % 7]));
        let t8 = cluster(8, 1, 1000);
        let o8 = rr_order(&t8);
        let mut st = State::new(3);
        st.alloc_rr(&o8, &t8, &req(3, 0), 3, 0).unwrap();
        st.rr.start_idx = 0;
        let off = st.rr.offset_idx;
        for _ in 0..4 {
            st.alloc_rr(&o8, &t8, &req(3, 0), 3, 0).unwrap();
        }
        assert_eq!(st.rr.offset_idx, off + 1);
        st.rr.start_count = 1;
        st.alloc_rr(&o8, &t8, &req(3, 0), 3, 0).unwrap();
        assert_eq!(st.rr.start_count, ((2000 / 8 + 30) * 8) as i64);
    }

    /// Rule: randomness comes from the seeded generator held by the policy.
    #[test]
    fn deterministic_for_a_seed() {
        let mut t = with_free(&[1000, 900, 500, 300, 200, 100]);
        t[0].capacity = 2000;
        let run = |seed| {
            let p = Lustre::with_seed(seed);
            (0..50).map(|_| p.place(&t, &req(2, 0)).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    /// Rule: while balanced, a mirrored file's replicas continue along the round-robin list: its objects
    /// are consecutive entries (servers alternate, so none is skipped here), replica-major.
    #[test]
    fn replicas_continue_along_the_round_robin_list() {
        let p = Lustre::default();
        let t = cluster(5, 2, 1000);
        let order = rr_order(&t);
        let pos = |i: usize| order.iter().position(|&x| x == i).unwrap();
        for _ in 0..10 {
            let o = p.place(&t, &mirrored(3, 0, 2)).unwrap();
            for w in o.windows(2) {
                assert_eq!(pos(w[1]), (pos(w[0]) + 1) % order.len(), "{o:?}");
            }
        }
    }

    /// Rule: when unbalanced, a replica is a weighted draw among the targets apart from its stripe's
    /// other replicas: emptier targets take more replicas too.
    #[test]
    fn replicas_are_weighted_by_free_space() {
        let p = Lustre::default();
        let t = three_empty_three_full();
        let mut hits = [0u32; 6];
        for _ in 0..3000 {
            let o = p.place(&t, &mirrored(1, 0, 2)).unwrap();
            assert_ne!(t[o[0]].server, t[o[1]].server);
            hits[o[1]] += 1;
        }
        let full: u32 = hits[3..].iter().sum();
        let empty: u32 = hits[..3].iter().sum();
        assert!(full > 0 && empty > 3 * full, "replica 1: {hits:?}");
    }
}
