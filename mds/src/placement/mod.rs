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
    pub mirrors: usize,      // mirror count M: replicas per stripe (1 = unmirrored)
}

/// What the last batch solve of a policy cost (`tessera df --policy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SolveStats {
    /// Requests in the batch.
    pub batch: usize,
    /// Stripes asked for (after clamping each request's count).
    pub stripes: usize,
    /// Wall time of the solve (including a fallback, if any).
    pub elapsed: Duration,
    /// The solver could not meet the demand and the fallback policy placed the batch.
    pub fallback: bool,
}

/// A placement policy.
pub trait Placement: Send + Sync {
    fn name(&self) -> &'static str;
    /// For each request, distinct target indices (into `targets`), none excluded, none unusable,
    /// none without room for its share of expected_size. Err(NoSpace) when a request cannot be met.
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

/// A request's clamped stripe count and per-stripe share, given the targets as they are now.
/// `Err(NoSpace)` when no count ≥ 1 can be met.
pub(crate) fn resolve(targets: &[TargetInfo], req: &CreateRequest) -> FsResult<(usize, u64)> {
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
    Ok((count, s))
}

/// Places `batch` one request after the other with `pick(targets_now, request, count, share)`, counting
/// each placed request's shares as used for the next. Checks what `pick` returns (distinct, candidates).
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

/// The invariants of [`Placement::place_batch`] for one request's choice.
pub(crate) fn check_choice(
    targets: &[TargetInfo],
    req: &CreateRequest,
    share: u64,
    count: usize,
    chosen: &[usize],
) -> FsResult<()> {
    let bad = |why: &str| Err(FsError::new(ErrorCode::Io, format!("placement chose {chosen:?}: {why}")));
    if chosen.len() != count {
        return bad("wrong stripe count");
    }
    for (k, &t) in chosen.iter().enumerate() {
        if t >= targets.len() || !has_room(&targets[t], share) || req.exclude.contains(&t) {
            return bad("not a candidate");
        }
        if chosen[..k].contains(&t) {
            return bad("a target twice");
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
        t.extend(cluster(1, 3, 100).into_iter().map(|x| TargetInfo { server: 9, ..x }));
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
}
