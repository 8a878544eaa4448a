//! `round-robin`: PVFS2's "simple stripe" on storage targets.
//!
//! Spec: `../shared/specs/placement.md`, table "Allocation policies", row `round-robin`: consecutive targets,
//! the starting target rotating per file so stripe 0 spreads evenly. "Consecutive" is taken in Lustre's
//! round-robin list ([`super::rr_order`]), so that with several targets per server consecutive stripes
//! alternate servers before reusing one. Targets that are not candidates (unusable, excluded, without room)
//! are skipped; the start still advances by one per file.
//!
//! Mirrored files: a file takes its objects as consecutive candidates of the list, replica-major. Replica 0
//! of the stripes are the entries above (the file's placement with M = 1, unchanged); then, row by row,
//! replica `r ≥ 1` of stripe `k` is the next candidate after the entry the previous object took whose
//! server and failure domain differ from those of stripe `k`'s earlier replicas (and which has room for
//! one more of the file's objects), wrapping round the list. With one target per server in its own domain
//! and a full stripe count, replica 1 of stripe `k` is thus stripe `k + 1`'s target.

use super::{add_replicas, no_space, rr_order, sequential, CreateRequest, Placement, TargetInfo};
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_proto::FsResult;

#[derive(Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl Placement for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn place_batch(&self, targets: &[TargetInfo], batch: &[CreateRequest]) -> FsResult<Vec<Vec<usize>>> {
        let order = rr_order(targets);
        sequential(targets, batch, |now, req, count, share| {
            let n = order.len();
            let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
            let mut chosen = Vec::with_capacity(count * req.mirror_count());
            // The entry after the last one taken.
            let mut cursor = None;
            for k in 0..n {
                let t = order[(start + k) % n];
                if super::has_room(&now[t], share) && !req.exclude.contains(&t) {
                    chosen.push(t);
                    if chosen.len() == count {
                        cursor = Some((start + k + 1) % n);
                        break;
                    }
                }
            }
            let Some(mut cursor) = cursor else { return Err(no_space("not enough storage targets with room")) };
            add_replicas(now, req, share, count, &mut chosen, |ok| {
                let pos = (0..n).map(|j| (cursor + j) % n).find(|&p| ok(order[p]))?;
                cursor = (pos + 1) % n;
                Some(order[pos])
            })?;
            Ok(chosen)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cluster, in_domains, mirrored, req};
    use super::*;

    #[test]
    fn rotates_start_and_stays_distinct() {
        let p = RoundRobin::default();
        let t = cluster(4, 1, 1000);
        assert_eq!(p.place(&t, &req(2, 0)).unwrap(), vec![0, 1]);
        assert_eq!(p.place(&t, &req(2, 0)).unwrap(), vec![1, 2]);
        assert_eq!(p.place(&t, &req(2, 0)).unwrap(), vec![2, 3]);
        assert_eq!(p.place(&t, &req(2, 0)).unwrap(), vec![3, 0]);
        let mut all = p.place(&t, &req(9, 0)).unwrap();
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3]);
        assert!(p.place(&[], &req(1, 0)).is_err());
    }

    #[test]
    fn consecutive_stripes_alternate_servers() {
        let p = RoundRobin::default();
        let t = cluster(3, 4, 1000);
        for _ in 0..5 {
            let o = p.place(&t, &req(6, 0)).unwrap();
            for w in o.windows(3) {
                assert!(t[w[0]].server != t[w[1]].server && t[w[1]].server != t[w[2]].server);
                assert!(t[w[0]].server != t[w[2]].server, "{o:?}");
            }
        }
    }

    #[test]
    fn skips_unusable_full_and_excluded() {
        let p = RoundRobin::default();
        let mut t = cluster(4, 1, 1000);
        t[1].usable = false;
        t[2].used = 1000;
        let r = CreateRequest { exclude: vec![3], ..req(1, 0) };
        for _ in 0..4 {
            assert_eq!(p.place(&t, &r).unwrap(), vec![0]);
        }
        // A batch counts its own shares: target 0 holds two 400-byte stripes, not three.
        let b = vec![req(1, 400); 3];
        let t = cluster(1, 1, 1000);
        assert!(p.place_batch(&t, &b[..2]).is_ok());
        assert!(p.place_batch(&t, &b).is_err());
    }

    /// Rule: a mirrored file takes consecutive candidates of the list, replica-major; a replica skips the
    /// entries on its stripe's other servers and domains.
    #[test]
    fn replicas_take_the_next_candidates_of_the_list() {
        let p = RoundRobin::default();
        let t = cluster(4, 1, 1000);
        assert_eq!(p.place(&t, &mirrored(4, 0, 2)).unwrap(), vec![0, 1, 2, 3, 1, 2, 3, 0]);
        assert_eq!(p.place(&t, &mirrored(2, 0, 2)).unwrap(), vec![1, 2, 3, 0]);
        assert_eq!(p.place(&t, &mirrored(1, 0, 3)).unwrap(), vec![2, 3, 0]);
        // Servers 0 and 1 in one domain, 2 and 3 in another: stripe 0 on 2 skips 3 for 0.
        let p = RoundRobin::default();
        let t = in_domains(4, 1, 1000, &[0, 0, 1, 1]);
        assert_eq!(p.place(&t, &mirrored(2, 0, 2)).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(p.place(&t, &mirrored(1, 0, 2)).unwrap(), vec![1, 2]);
        assert_eq!(p.place(&t, &mirrored(1, 0, 2)).unwrap(), vec![2, 0]);
    }
}
