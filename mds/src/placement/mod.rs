//! Placement: which storage targets hold the stripes of a new file (or of one composite-layout extent).
//!
//! Spec: `../shared/specs/placement.md` (paper: `../shared/papers/tarazu2024-load-balanced-placement.txt`).
//! One module per policy, each citing its spec: [`round_robin`] (PVFS2 simple stripe), [`lustre`] (Lustre's
//! allocator, LSA), [`balanced`] (Tarazu's min-cost max-flow). `[defaults] placement` names one.
//!
//! Policies are pure: they see the targets as the caller describes them ([`TargetInfo`]), do no I/O and read
//! no clock (time-dependent state, Lustre's penalty decay, follows [`Placement::set_now`]). [`placer`] is the
//! subsystem around them in the MDS: the targets as placement sees them, declared creates, status.
//!
//! Rules common to every policy (see [`resolve`]):
//! - a target is a candidate for a request when it is `usable`, not in the request's `exclude` list and has
//!   room for the request's share of `expected_size` (its free space is at least the share, and not zero);
//! - the stripe count is clamped to the number of usable, non-excluded targets (as a file today gets fewer
//!   stripes than asked when fewer servers are up); `0` means all of them that have room;
//! - a request whose clamped count cannot be met by candidates fails with `NoSpace`; a batch fails as a
//!   whole (nothing is placed) when one of its requests fails;
//! - within one batch, requests are placed as if one after the other: each one's shares count as used for the
//!   ones after it (the caller's `used` already holds what it allocated before and has not seen reported).
//!
//! Mirrored files (issue 36; `../shared/DESIGN.md`, "Redundancy"): a request's mirror count M asks for M
//! replicas of each stripe object. The answer is replica-major, `count * M` target indices: entries
//! `[r * count, (r + 1) * count)` are replica `r` of stripes `0..count`, so with M = 1 it is the plain list.
//! - the replicas of one stripe are on M distinct servers and M distinct failure domains
//!   ([`TargetInfo::domain`]): one server, rack or power feed lost leaves every stripe a live copy;
//! - replica 0 of the stripes are distinct targets, as a plain file's stripes are; later replicas may share
//!   a target with another stripe's replica (4 servers hold the 8 objects of a 4-stripe, 2-mirror file);
//! - each replica is a whole object: it takes the request's per-stripe share on its target, and a target
//!   holding several of a request's objects must have room for all of them; `exclude` applies to every
//!   replica;
//! - the stripe count is clamped as for plain files and M is never reduced: a request with fewer than M
//!   failure domains that have room for a stripe fails with `NoSpace`, saying so.

pub mod balanced;
pub mod lustre;
pub mod placer;
pub mod round_robin;

pub use balanced::Balanced;
pub use lustre::Lustre;
pub use round_robin::RoundRobin;

use std::collections::HashMap;
use std::time::Duration;
use tessera_proto::error::ErrorCode;
use tessera_proto::{DsId, FsError, FsResult};

/// One storage target as placement sees it (a data server may serve several).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetInfo {
    pub server: DsId,     // data server
    pub target: u16,      // index of the target on its server
    pub capacity: u64,    // bytes
    pub used: u64,        // bytes: last report plus space allocated since and not yet reported
    pub server_load: f64, // 0.0..=1.0, the server's recent load (queue depth / CPU) normalised
    pub usable: bool,     // false: silent, revoked or read-only — never chosen
    /// Failure domain (`[[ds]] domain`, numbered by the placer): every target of a server has the
    /// server's; servers that name no domain each have a number of their own.
    pub domain: u32,
}

impl TargetInfo {
    /// Bytes still free (0 when over-full).
    pub fn free(&self) -> u64 {
        self.capacity.saturating_sub(self.used)
    }
}

/// One file (or one composite-layout extent) to place.
#[derive(Clone, Debug, PartialEq)]
pub struct CreateRequest {
    pub stripe_count: usize, // 0 = all usable targets
    pub stripe_size: u64,
    pub expected_size: u64,  // bytes this file/extent is expected to hold; 0 = unknown
    pub exclude: Vec<usize>, // indices into the targets slice already used by this file's other extents
    pub mirrors: usize,      // mirror count M, replicas of each stripe (1..=MAX_MIRRORS; 0 counts as 1)
}

/// The largest mirror count a layout may ask for (issue 36: 1 to 3 copies).
pub const MAX_MIRRORS: usize = 3;

impl CreateRequest {
    /// A file's (or extent's) request with nothing known of its size and no targets to avoid.
    pub fn fresh(stripe_count: usize, stripe_size: u64, mirrors: u8) -> CreateRequest {
        CreateRequest { stripe_count, stripe_size, expected_size: 0, exclude: Vec::new(), mirrors: mirrors.into() }
    }

    /// M: replicas per stripe (`mirrors`, 0 counting as 1).
    pub fn mirror_count(&self) -> usize {
        self.mirrors.max(1)
    }
}

/// What the last batch solve of a policy cost (`tessera df --policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolveStats {
    /// Requests in the batch.
    pub batch: usize,
    /// Stripe objects asked for: each request's clamped count times its mirror count.
    pub stripes: usize,
    /// Wall time of the solve (including a fallback, if any).
    pub elapsed: Duration,
    /// The solver could not meet the demand and the fallback policy placed the batch.
    pub fallback: bool,
}

/// A placement policy.
pub trait Placement: Send + Sync {
    fn name(&self) -> &'static str;
    /// For each request, `count * M` target indices (into `targets`), replica-major (see the module doc):
    /// replica 0 of the stripes on distinct targets, each stripe's replicas on distinct servers and
    /// failure domains, none excluded, none unusable, none without room for its objects' shares of
    /// expected_size. Err(NoSpace) when a request cannot be met.
    fn place_batch(&self, targets: &[TargetInfo], batch: &[CreateRequest]) -> FsResult<Vec<Vec<usize>>>;
    /// Convenience for one request.
    fn place(&self, targets: &[TargetInfo], req: &CreateRequest) -> FsResult<Vec<usize>> {
        self.place_batch(targets, std::slice::from_ref(req))?
            .pop()
            .ok_or_else(|| FsError::new(ErrorCode::Io, "placement returned no layout for the request"))
    }
    /// The last batch solve, for policies that solve batches (`balanced`).
    fn last_solve(&self) -> Option<SolveStats> {
        None
    }
    /// The caller's clock (any fixed origin, e.g. the MDS start); policies with time-dependent state read
    /// it from here, never from the system clock.
    fn set_now(&self, _now: Duration) {}
}

/// The policy called `name`: "round-robin", "lustre" or "balanced" (or an alias of one,
/// [`tessera_proto::config::Placement`]).
pub fn by_name(name: &str) -> FsResult<Box<dyn Placement>> {
    use tessera_proto::config::{Placement as Name, UnknownName};
    Ok(match name.parse().map_err(|e: UnknownName| FsError::invalid(e.to_string()))? {
        Name::RoundRobin => Box::new(RoundRobin::default()),
        Name::Lustre => Box::new(Lustre::default()),
        Name::Balanced => Box::new(Balanced::default()),
    })
}

/// `OST cost = max utilisation / mean utilisation` (the one the CLI prints too).
pub use tessera_proto::msg::ost_cost;

pub(crate) fn no_space(detail: impl Into<String>) -> FsError {
    FsError::new(ErrorCode::NoSpace, detail)
}

/// Bytes each stripe of a `count`-stripe request holds (0 when the size is unknown).
pub(crate) fn share(expected_size: u64, count: usize) -> u64 {
    if count == 0 {
        return 0;
    }
    expected_size.div_ceil(count as u64)
}

/// Whether `t` has room for a stripe of `share` bytes.
pub(crate) fn has_room(t: &TargetInfo, share: u64) -> bool {
    t.usable && t.free() >= share.max(1)
}

/// Whether `t` has room for `n` stripe objects of `share` bytes each (one request's objects on it).
pub(crate) fn has_room_for(t: &TargetInfo, share: u64, n: usize) -> bool {
    t.usable && t.free() >= share.saturating_mul(n as u64).max(1)
}

/// A request's clamped stripe count and per-stripe share, given the targets as they are now.
/// `Err(NoSpace)` when no count ≥ 1 can be met, or, for a mirrored request, when fewer than M failure
/// domains have room for a stripe or the domains have no room for all `count * M` objects (the count is
/// not lowered for mirrors); `Err(Invalid)` for a mirror count above [`MAX_MIRRORS`].
pub(crate) fn resolve(targets: &[TargetInfo], req: &CreateRequest) -> FsResult<(usize, u64)> {
    let m = req.mirror_count();
    if m > MAX_MIRRORS {
        return Err(FsError::invalid(format!("mirror count {m}: at most {MAX_MIRRORS}")));
    }
    let excluded = |i: usize| req.exclude.contains(&i);
    let open: Vec<usize> = (0..targets.len()).filter(|&i| targets[i].usable && !excluded(i)).collect();
    if open.is_empty() {
        return Err(no_space("no usable storage target left for this file"));
    }
    let mut count = if req.stripe_count == 0 { open.len() } else { req.stripe_count.min(open.len()) };
    if req.stripe_count == 0 {
        // "All targets": all that have room for the share; fewer targets means bigger shares.
        loop {
            let s = share(req.expected_size, count);
            let fit = open.iter().filter(|&&i| has_room(&targets[i], s)).count();
            if fit >= count || fit == 0 {
                break;
            }
            count = fit;
        }
    }
    let s = share(req.expected_size, count);
    let fit = open.iter().filter(|&&i| has_room(&targets[i], s)).count();
    if fit < count || count == 0 {
        return Err(no_space(format!("{fit} storage targets have room for a stripe of {s} bytes, {count} needed")));
    }
    if m > 1 {
        // Each domain holds at most one replica of a stripe, so at most `count` of the request's objects,
        // and each target at most as many objects as it has room for (one per stripe at most).
        let mut room: HashMap<u32, usize> = HashMap::new();
        for &i in open.iter().filter(|&&i| has_room(&targets[i], s)) {
            let objects = targets[i].free().checked_div(s).map_or(count, |n| n.min(count as u64) as usize);
            let r = room.entry(targets[i].domain).or_default();
            *r = (*r + objects).min(count);
        }
        if room.len() < m {
            return Err(no_space(format!(
                "mirror count {m} needs {m} failure domains with room for a stripe, {} have",
                room.len()
            )));
        }
        let total: usize = room.values().sum();
        if total < count * m {
            return Err(no_space(format!(
                "mirror count {m}: the failure domains have room for {total} of the {count} x {m} stripe objects of {s} bytes"
            )));
        }
    }
    Ok((count, s))
}

/// Places `batch` one request after the other with `pick(targets_now, request, count, share)`, counting
/// each placed request's shares (one per object, replicas included) as used for the next. Checks what
/// `pick` returns ([`check_choice`]).
pub(crate) fn sequential(
    targets: &[TargetInfo],
    batch: &[CreateRequest],
    mut pick: impl FnMut(&[TargetInfo], &CreateRequest, usize, u64) -> FsResult<Vec<usize>>,
) -> FsResult<Vec<Vec<usize>>> {
    let mut now = targets.to_vec();
    let mut out = Vec::with_capacity(batch.len());
    for req in batch {
        let (count, s) = resolve(&now, req)?;
        let chosen = pick(&now, req, count, s)?;
        check_choice(&now, req, s, count, &chosen)?;
        for &t in &chosen {
            now[t].used = now[t].used.saturating_add(s);
        }
        out.push(chosen);
    }
    Ok(out)
}

/// The invariants of [`Placement::place_batch`] for one request's choice (replica-major, `count * M`
/// entries): every object on a candidate with room for all of the request's objects on it, and
/// [`replicas_apart`].
pub(crate) fn check_choice(
    targets: &[TargetInfo],
    req: &CreateRequest,
    share: u64,
    count: usize,
    chosen: &[usize],
) -> FsResult<()> {
    let bad = |why: &str| Err(FsError::new(ErrorCode::Io, format!("placement chose {chosen:?}: {why}")));
    if chosen.len() != count * req.mirror_count() {
        return bad("wrong number of stripe objects");
    }
    let mut on: HashMap<usize, usize> = HashMap::new();
    for &t in chosen {
        if t >= targets.len() || req.exclude.contains(&t) {
            return bad("not a candidate");
        }
        let n = on.entry(t).or_default();
        *n += 1;
        if !has_room_for(&targets[t], share, *n) {
            return bad("not a candidate: no room for its objects");
        }
    }
    match replicas_apart(targets, count, chosen) {
        Some(why) => bad(why),
        None => Ok(()),
    }
}

/// What breaks the replica rules in `chosen` (replica-major, rows of `count`; indices into `targets`):
/// replica 0 of two stripes on one target, or two replicas of one stripe on one server or in one
/// failure domain. `None` when the rules hold.
pub(crate) fn replicas_apart(targets: &[TargetInfo], count: usize, chosen: &[usize]) -> Option<&'static str> {
    if count == 0 || !chosen.len().is_multiple_of(count) || chosen.iter().any(|&t| t >= targets.len()) {
        return Some("not whole rows of stripes");
    }
    let first = &chosen[..count];
    if (0..count).any(|k| first[..k].contains(&first[k])) {
        return Some("a target twice");
    }
    for k in 0..count {
        let stripe: Vec<&TargetInfo> = chosen.iter().skip(k).step_by(count).map(|&t| &targets[t]).collect();
        for (r, a) in stripe.iter().enumerate() {
            for b in &stripe[..r] {
                if a.server == b.server {
                    return Some("two replicas of a stripe on one server");
                }
                if a.domain == b.domain {
                    return Some("two replicas of a stripe in one failure domain");
                }
            }
        }
    }
    None
}

/// Whether target `t` may take the next replica of stripe `k` of a request whose objects so far are
/// `chosen` (replica-major, rows of `count`): not excluded, room for one more of the request's objects,
/// and on another server and in another failure domain than the stripe's earlier replicas.
pub(crate) fn may_take_replica(
    targets: &[TargetInfo],
    req: &CreateRequest,
    share: u64,
    count: usize,
    chosen: &[usize],
    k: usize,
    t: usize,
) -> bool {
    let on = chosen.iter().filter(|&&u| u == t).count();
    !req.exclude.contains(&t)
        && has_room_for(&targets[t], share, on + 1)
        && chosen
            .iter()
            .skip(k)
            .step_by(count)
            .all(|&u| targets[u].server != targets[t].server && targets[u].domain != targets[t].domain)
}

/// Adds replicas 1..M to `chosen`, which holds replica 0 of a request's `count` stripes: row by row,
/// stripe by stripe, `next(ok)` is the policy's next target in its own order for which `ok` holds
/// ([`may_take_replica`]), `None` when it has none. `NoSpace` when a replica finds no target.
pub(crate) fn add_replicas(
    targets: &[TargetInfo],
    req: &CreateRequest,
    share: u64,
    count: usize,
    chosen: &mut Vec<usize>,
    mut next: impl FnMut(&dyn Fn(usize) -> bool) -> Option<usize>,
) -> FsResult<()> {
    for r in 1..req.mirror_count() {
        for k in 0..count {
            let t = {
                let now: &[usize] = chosen;
                next(&|t| may_take_replica(targets, req, share, count, now, k, t))
            };
            let t = t.ok_or_else(|| {
                no_space(format!(
                    "no storage target with room for replica {r} of stripe {k} on another server and failure \
                     domain than its other replicas"
                ))
            })?;
            chosen.push(t);
        }
    }
    Ok(())
}

/// Lustre's round-robin list (`lod_qos_calc_rr`): servers with the most targets first, each server's targets
/// spread evenly over the list, so consecutive entries alternate servers before one is reused.
/// Returns indices into `targets` (all of them, usable or not).
pub(crate) fn rr_order(targets: &[TargetInfo]) -> Vec<usize> {
    let n = targets.len();
    // Servers in order of first appearance, then stably by target count, descending.
    let mut servers: Vec<(DsId, Vec<usize>)> = Vec::new();
    let mut pos: HashMap<DsId, usize> = HashMap::new();
    for (i, t) in targets.iter().enumerate() {
        let p = *pos.entry(t.server).or_insert_with(|| {
            servers.push((t.server, Vec::new()));
            servers.len() - 1
        });
        servers[p].1.push(i);
    }
    servers.sort_by_key(|(_, ts)| std::cmp::Reverse(ts.len()));
    let mut slots: Vec<Option<usize>> = vec![None; n];
    for (_, ts) in &servers {
        for (j, &i) in ts.iter().enumerate() {
            let mut next = j * n / ts.len();
            while slots[next].is_some() {
                next = (next + 1) % n;
            }
            slots[next] = Some(i);
        }
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `servers` × `per` targets of `cap` bytes, server-major, empty, idle.
    pub(crate) fn cluster(servers: u32, per: u16, cap: u64) -> Vec<TargetInfo> {
        (0..servers)
            .flat_map(|s| {
                (0..per).map(move |t| TargetInfo {
                    server: s,
                    target: t,
                    capacity: cap,
                    used: 0,
                    server_load: 0.0,
                    usable: true,
                    domain: s,
                })
            })
            .collect()
    }

    pub(crate) fn req(count: usize, expected: u64) -> CreateRequest {
        CreateRequest {
            stripe_count: count,
            stripe_size: 1 << 20,
            expected_size: expected,
            exclude: vec![],
            mirrors: 1,
        }
    }

    pub(crate) fn mirrored(count: usize, expected: u64, mirrors: usize) -> CreateRequest {
        CreateRequest { mirrors, ..req(count, expected) }
    }

    #[test]
    fn ost_cost_is_max_over_mean() {
        assert_eq!(ost_cost(&[]), 1.0);
        assert_eq!(ost_cost(&[0.0, 0.0]), 1.0);
        assert_eq!(ost_cost(&[0.5, 0.5]), 1.0);
        assert!((ost_cost(&[0.1, 0.3]) - 1.5).abs() < 1e-12);
    }

    #[test]
    fn rr_order_alternates_servers() {
        let t = cluster(3, 2, 100);
        let o = rr_order(&t);
        assert_eq!(o.len(), 6);
        let servers: Vec<DsId> = o.iter().map(|&i| t[i].server).collect();
        assert_eq!(servers, vec![0, 1, 2, 0, 1, 2]);
        // Uneven: the server with most targets is spread over the whole list (j * n / its count: 0, 1, 3),
        // the others fill the gaps, as in lod_qos_calc_rr.
        let mut t = cluster(2, 1, 100);
        t.extend(cluster(1, 3, 100).into_iter().map(|x| TargetInfo { server: 9, domain: 9, ..x }));
        let o = rr_order(&t);
        let servers: Vec<DsId> = o.iter().map(|&i| t[i].server).collect();
        assert_eq!(servers, vec![9, 9, 0, 9, 1]);
    }

    #[test]
    fn resolve_clamps_and_refuses() {
        let mut t = cluster(2, 2, 100);
        assert_eq!(resolve(&t, &req(8, 0)).unwrap(), (4, 0));
        assert_eq!(resolve(&t, &req(0, 400)).unwrap(), (4, 100));
        t[0].used = 80;
        // All-targets: one cannot take a quarter, so three take a third each.
        assert_eq!(resolve(&t, &req(0, 120)).unwrap(), (3, 40));
        assert_eq!(resolve(&t, &req(4, 400)).unwrap_err().code, ErrorCode::NoSpace);
        t[1].usable = false;
        let r = CreateRequest { exclude: vec![2, 3], ..req(2, 0) };
        assert_eq!(resolve(&t, &r).unwrap(), (1, 0));
        t[0].used = 100;
        assert_eq!(resolve(&t, &r).unwrap_err().code, ErrorCode::NoSpace);
    }

    #[test]
    fn by_name_knows_the_three_policies() {
        for n in ["round-robin", "lustre", "balanced"] {
            assert_eq!(by_name(n).unwrap().name(), n);
        }
        assert!(by_name("tarazu-nope").is_err());
    }

    /// Every policy: distinct, usable, non-excluded targets with room; NoSpace when impossible; a batch
    /// never overfills a target.
    #[test]
    fn every_policy_keeps_the_contract() {
        for name in ["round-robin", "lustre", "balanced"] {
            let p = by_name(name).unwrap();
            let mut t = cluster(4, 3, 1000);
            t[0].usable = false;
            t[5].used = 999;
            for (i, x) in t.iter_mut().enumerate() {
                x.used = x.used.max(i as u64 * 40);
            }
            let batch: Vec<CreateRequest> =
                (0..10).map(|i| CreateRequest { exclude: vec![1, 2 + i % 5], ..req(4, 400) }).collect();
            let out = p.place_batch(&t, &batch).unwrap();
            let mut added = vec![0u64; t.len()];
            for (r, o) in batch.iter().zip(&out) {
                assert_eq!(o.len(), 4, "{name}");
                for (k, &i) in o.iter().enumerate() {
                    assert!(t[i].usable && i != 5 && !r.exclude.contains(&i), "{name}: {o:?}");
                    assert!(!o[..k].contains(&i), "{name}: {o:?}");
                    added[i] += 100;
                }
            }
            for (i, x) in t.iter().enumerate() {
                assert!(x.used + added[i] <= x.capacity, "{name}: target {i} overfilled");
            }
            // More than the cluster can hold.
            let err = p.place_batch(&t, &[req(4, 4000)]).unwrap_err();
            assert_eq!(err.code, ErrorCode::NoSpace, "{name}");
            let err = p.place(&t, &CreateRequest { exclude: (0..12).collect(), ..req(1, 0) }).unwrap_err();
            assert_eq!(err.code, ErrorCode::NoSpace, "{name}");
        }
    }
    /// Every policy's answers to a fixed run of plain requests, as text: uneven fill and load (lustre's
    /// weighted allocator, balanced's costs), exclusions, all-target and unknown-size requests, NoSpace,
    /// then an even cluster (lustre's round-robin) and one large batch.
    fn plain_answers(name: &str, mirrors: usize) -> String {
        let p = by_name(name).unwrap();
        let mut out = String::new();
        let mut t = cluster(5, 3, 1 << 30);
        for (i, x) in t.iter_mut().enumerate() {
            x.used = ((i as u64 * 7919) % 13) << 26;
            x.server_load = (i % 4) as f64 * 0.05;
        }
        t[4].usable = false;
        for step in 0..40usize {
            let batch: Vec<CreateRequest> = (0..1 + step % 4)
                .map(|k| {
                    let exclude = if k % 3 == 1 { vec![(step + k) % 15] } else { vec![] };
                    let count = (step + k) % 7;
                    CreateRequest { exclude, mirrors, ..req(count, (((step * 37 + k * 11) % 9) as u64) << 24) }
                })
                .collect();
            match p.place_batch(&t, &batch) {
                Ok(o) => {
                    for (r, c) in batch.iter().zip(&o) {
                        for &i in c {
                            t[i].used += share(r.expected_size, c.len());
                        }
                    }
                    out += &format!("{o:?};");
                }
                Err(e) => out += &format!("E{:?};", e.code),
            }
        }
        out += &format!("{:?};", p.place(&t, &CreateRequest { mirrors, ..req(3, 8 << 30) }).map_err(|e| e.code));
        let even = cluster(4, 2, 1 << 30);
        for step in 0..12 {
            out += &format!(
                "{:?};",
                p.place(&even, &CreateRequest { mirrors, ..req(1 + step % 8, 0) }).map_err(|e| e.code)
            );
        }
        let mut big = cluster(7, 5, 10 << 30);
        for (i, x) in big.iter_mut().enumerate() {
            x.used = (i as u64 * 7 % 11) << 29;
        }
        out += &format!(
            "{:?}",
            p.place_batch(&big, &vec![CreateRequest { mirrors, ..req(8, 128 << 20) }; 200]).map_err(|e| e.code)
        );
        out
    }

    fn fnv(s: &str) -> u64 {
        s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    }

    /// M = 1 (and M = 0, which counts as 1) places exactly as before mirrors existed: the answers of every
    /// policy to a fixed run of plain requests, recorded with the code before issue 36 (at f897ec0).
    #[test]
    fn plain_files_are_placed_as_before_mirrors() {
        for (name, len, hash) in [
            ("round-robin", 8433, 0xad7c_760d_1d38_e59e_u64),
            ("lustre", 8442, 0x7e1e_0e6b_a893_bab0),
            ("balanced", 8447, 0x13b7_c3d2_45e8_bcd4),
        ] {
            for mirrors in [1, 0] {
                let a = plain_answers(name, mirrors);
                assert_eq!((a.len(), fnv(&a)), (len, hash), "{name}, mirrors {mirrors}: {a}");
            }
        }
    }

    /// Targets of `servers` × `per`, server `s` in failure domain `domain_of[s]`.
    pub(crate) fn in_domains(servers: u32, per: u16, cap: u64, domain_of: &[u32]) -> Vec<TargetInfo> {
        cluster(servers, per, cap)
            .into_iter()
            .map(|t| TargetInfo { domain: domain_of[t.server as usize], ..t })
            .collect()
    }

    /// The rules of a mirrored answer, checked here without `check_choice`: `count * M` objects, replica 0
    /// of the stripes on distinct targets, each stripe's replicas on distinct servers and domains, none
    /// excluded or unusable, every target with room for all the request's objects on it.
    fn assert_mirrored(t: &[TargetInfo], r: &CreateRequest, o: &[usize], what: &str) {
        let m = r.mirror_count();
        assert_eq!(o.len() % m, 0, "{what}: {o:?}");
        let count = o.len() / m;
        let first = &o[..count];
        assert!((0..count).all(|k| !first[..k].contains(&first[k])), "{what}: replica 0 twice {o:?}");
        for k in 0..count {
            let stripe: Vec<usize> = o.iter().skip(k).step_by(count).copied().collect();
            let mut servers: Vec<DsId> = stripe.iter().map(|&i| t[i].server).collect();
            let mut domains: Vec<u32> = stripe.iter().map(|&i| t[i].domain).collect();
            servers.sort_unstable();
            servers.dedup();
            domains.sort_unstable();
            domains.dedup();
            assert_eq!((servers.len(), domains.len()), (m, m), "{what}: stripe {k} {stripe:?} of {o:?}");
        }
        let s = share(r.expected_size, count);
        for &i in o {
            let n = o.iter().filter(|&&j| j == i).count() as u64;
            assert!(t[i].usable && !r.exclude.contains(&i), "{what}: {o:?}");
            assert!(t[i].used + n * s <= t[i].capacity, "{what}: target {i} overfilled by {o:?}");
        }
    }

    /// Every policy, several cluster shapes, M = 2 and 3, every stripe count (0 = all): each stripe's
    /// replicas on distinct servers and failure domains, replica 0 distinct; with two named domains,
    /// M = 3 fails with NoSpace and says why.
    #[test]
    fn replicas_of_a_stripe_are_on_distinct_servers_and_domains() {
        let shapes: Vec<(&str, Vec<TargetInfo>)> = vec![
            ("4 servers x 1 target", cluster(4, 1, 1 << 30)),
            ("3 servers x 2 targets", cluster(3, 2, 1 << 30)),
            ("2 domains x 2 servers", in_domains(4, 1, 1 << 30, &[7, 7, 3, 3])),
            ("2 domains x 2 servers x 2 targets", in_domains(4, 2, 1 << 30, &[0, 1, 0, 1])),
            ("3 domains of 1, 2 and 3 servers", in_domains(6, 1, 1 << 30, &[0, 1, 1, 2, 2, 2])),
        ];
        for name in ["round-robin", "lustre", "balanced"] {
            let p = by_name(name).unwrap();
            for (shape, mut t) in shapes.clone() {
                let domains = {
                    let mut d: Vec<u32> = t.iter().map(|x| x.domain).collect();
                    d.sort_unstable();
                    d.dedup();
                    d.len()
                };
                for round in 0..2 {
                    if round == 1 {
                        // Uneven fill: lustre's weighted allocator, balanced's costs.
                        for (i, x) in t.iter_mut().enumerate() {
                            x.used = (i as u64 * 5 % 7) << 26;
                        }
                    }
                    for m in 2..=3 {
                        for count in 0..=t.len() {
                            for expected in [0, 6 << 20] {
                                let r = mirrored(count, expected, m);
                                let what = format!("{name}, {shape}, M = {m}, count {count}, {expected} bytes");
                                match p.place(&t, &r) {
                                    Ok(o) => assert_mirrored(&t, &r, &o, &what),
                                    Err(e) => {
                                        assert!(domains < m, "{what}: {e}");
                                        assert_eq!(e.code, ErrorCode::NoSpace, "{what}");
                                        let says = format!("mirror count {m} needs {m} failure domains with room for a stripe, {domains} have");
                                        assert!(e.detail.contains(&says), "{what}: {e}");
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each replica takes the per-stripe share on its target: a batch of mirrored files never overfills a
    /// target, a file whose replicas need more room than its targets have fails with NoSpace, and a domain
    /// whose targets are full does not count among the domains with room.
    #[test]
    fn every_replica_takes_its_share() {
        for name in ["round-robin", "lustre", "balanced"] {
            let p = by_name(name).unwrap();
            let mut t = cluster(4, 2, 1000);
            for (i, x) in t.iter_mut().enumerate() {
                x.used = i as u64 * 50;
            }
            let batch: Vec<CreateRequest> =
                (0..8).map(|i| CreateRequest { exclude: vec![i % 8], ..mirrored(2, 200, 1 + i % 3) }).collect();
            let out = p.place_batch(&t, &batch).unwrap();
            let mut added = vec![0u64; t.len()];
            for (r, o) in batch.iter().zip(&out) {
                assert_mirrored(&t, r, o, name);
                for &i in o {
                    added[i] += 100;
                }
            }
            assert_eq!(added.iter().sum::<u64>(), batch.iter().map(|r| 200 * r.mirror_count() as u64).sum::<u64>());
            for (i, x) in t.iter().enumerate() {
                assert!(x.used + added[i] <= x.capacity, "{name}: target {i} overfilled");
            }
            // Two targets of 1000 bytes: a 2-stripe, 2-mirror file puts two objects on each.
            let two = cluster(2, 1, 1000);
            assert_eq!(p.place(&two, &mirrored(2, 1000, 2)).unwrap().len(), 4, "{name}");
            let e = p.place(&two, &mirrored(2, 2000, 2)).unwrap_err();
            assert_eq!(e.code, ErrorCode::NoSpace, "{name}");
            assert!(p.place_batch(&two, &[mirrored(2, 1000, 2), mirrored(1, 2, 1)]).is_err(), "{name}: full");
            // Three domains, one of them full: two have room.
            let mut three = cluster(3, 1, 1000);
            three[1].used = 1000;
            let e = p.place(&three, &mirrored(1, 0, 3)).unwrap_err();
            assert!(e.detail.contains("mirror count 3 needs 3 failure domains with room for a stripe, 2 have"), "{e}");
        }
    }

    /// `exclude` applies to every replica; the stripe count is clamped to the usable targets as for plain
    /// files, and M is never reduced; a mirror count above MAX_MIRRORS is refused.
    #[test]
    fn exclusions_clamping_and_mirror_limits() {
        for name in ["round-robin", "lustre", "balanced"] {
            let p = by_name(name).unwrap();
            let t = cluster(5, 1, 1 << 30);
            for _ in 0..10 {
                let r = CreateRequest { exclude: vec![0, 3], ..mirrored(2, 0, 3) };
                let o = p.place(&t, &r).unwrap();
                assert_mirrored(&t, &r, &o, name);
                assert!(o.iter().all(|&i| i != 0 && i != 3), "{name}: {o:?}");
                // Clamped to the 3 targets left, 3 replicas each.
                let r = CreateRequest { exclude: vec![0, 3], ..mirrored(8, 0, 3) };
                assert_eq!(p.place(&t, &r).unwrap().len(), 9, "{name}");
            }
            let e = p.place(&t, &mirrored(1, 0, MAX_MIRRORS + 1)).unwrap_err();
            assert_eq!(e.code, ErrorCode::Invalid, "{name}");
        }
    }

    /// `check_choice` catches an answer that breaks a replica rule (a policy bug is an error, not a
    /// layout).
    #[test]
    fn check_choice_catches_broken_replica_rules() {
        let t = in_domains(4, 2, 1000, &[0, 0, 1, 2]);
        let r = mirrored(2, 200, 2);
        let ok = |o: &[usize]| check_choice(&t, &r, 100, 2, o);
        assert!(ok(&[0, 4, 4, 6]).is_ok());
        assert!(ok(&[0, 4, 6]).is_err(), "one object missing");
        assert!(ok(&[0, 0, 4, 6]).is_err(), "replica 0 twice on a target");
        assert!(ok(&[0, 4, 1, 6]).is_err(), "stripe 0's replicas on one server");
        assert!(ok(&[0, 4, 2, 6]).is_err(), "stripe 0's replicas in one domain (servers 0 and 1)");
        let mut full = t.clone();
        full[4].used = 850;
        assert!(check_choice(&full, &r, 100, 2, &[0, 4, 4, 6]).is_err(), "no room for two objects");
        assert!(check_choice(&full, &r, 100, 2, &[0, 4, 6, 2]).is_ok());
        let ex = CreateRequest { exclude: vec![6], ..r.clone() };
        assert!(check_choice(&t, &ex, 100, 2, &[0, 4, 4, 6]).is_err(), "a replica excluded");
    }
}
