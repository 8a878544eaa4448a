//! A mirrored layout's replica states and how they change (issue 36, degraded mode and resync). Pure
//! decisions on a [`Layout`]: the MDS applies them under its mutation lock and makes the result durable
//! before it answers; the data servers and clients only ever see the outcome.
//!
//! The rules:
//! 1. **The primary is always in sync.** A stripe's replica 0 (`targets[k]`) is where its writes are
//!    ordered. When the primary misses a write, the first in-sync other replica (the one reporting, if
//!    it is one) takes its place and the old primary becomes a stale replica.
//! 2. **Only an in-sync replica may report another missing** ([`Layout::mark_stale`]): a replica that
//!    is itself stale may have missed the very writes it would vouch for.
//! 3. **The last in-sync replica is never marked stale**: a write that reached none but a stale one
//!    fails instead (the application sees the error; nothing acknowledged is lost).
//! 4. **Resync**: stale → resyncing (written with the others from now on, still not read) → in sync, the
//!    last step only from resyncing ([`Layout::resync_started`], [`Layout::resync_done`]); a resyncing
//!    replica that misses a write is stale again.
//! 5. Every change bumps [`Layout::mirror_gen`].

use super::{Layout, ReplicaState, StripeTarget};
use crate::error::{ErrorCode, FsError, FsResult};

impl Layout {
    /// The global stripe holding replica `t` (any of its replicas), if any.
    pub fn stripe_of(&self, t: StripeTarget) -> Option<usize> {
        self.stripe_objects().find(|&(_, x)| x == t).map(|(k, _)| k)
    }

    /// The state of replica `t` of stripe `stripe` (the primary is in sync).
    pub fn replica_state(&self, stripe: usize, t: StripeTarget) -> Option<ReplicaState> {
        self.replicas(stripe).into_iter().find(|r| r.target == t).map(|r| r.state)
    }

    /// Records that the replicas `missed` of the stripe whose replica `from` reports them missed a write
    /// (rules 1–3 and 5 of the module doc). Replicas already stale are left alone. Returns whether the
    /// layout changed.
    pub fn mark_stale(&mut self, from: StripeTarget, missed: &[StripeTarget]) -> FsResult<bool> {
        let stripe = self
            .stripe_of(from)
            .ok_or_else(|| FsError::new(ErrorCode::NotFound, format!("object {} is not in the layout", from.object)))?;
        if self.replica_state(stripe, from) != Some(ReplicaState::InSync) {
            return Err(FsError::new(
                ErrorCode::Stale,
                format!("replica {}:{} is not in sync: it cannot report others missing", from.ds, from.object),
            ));
        }
        let mut changed = false;
        for &m in missed {
            if m == from {
                return Err(FsError::invalid("a replica reports itself missing"));
            }
            match self.replica_state(stripe, m) {
                None => {
                    return Err(FsError::invalid(format!(
                        "{}:{} is not a replica of stripe {stripe} (that of {}:{})",
                        m.ds, m.object, from.ds, from.object
                    )))
                }
                Some(ReplicaState::Stale) => {}
                Some(_) => {
                    let in_sync = self.replicas(stripe).iter().filter(|r| r.state == ReplicaState::InSync).count();
                    let m_in_sync = self.replica_state(stripe, m) == Some(ReplicaState::InSync);
                    if m_in_sync && in_sync <= 1 {
                        return Err(FsError::unavailable(format!(
                            "replica {}:{} is stripe {stripe}'s last in sync",
                            m.ds, m.object
                        )));
                    }
                    self.set_state(stripe, m, ReplicaState::Stale, Some(from))?;
                    changed = true;
                }
            }
        }
        if changed {
            self.mirror_gen += 1;
        }
        Ok(changed)
    }

    /// A stale replica `t` of `stripe` starts resyncing (rule 4). Returns whether the layout changed (not
    /// when it is resyncing already).
    pub fn resync_started(&mut self, stripe: usize, t: StripeTarget) -> FsResult<bool> {
        match self.replica_state(stripe, t) {
            Some(ReplicaState::Stale) => {
                self.set_state(stripe, t, ReplicaState::Resyncing, None)?;
                self.mirror_gen += 1;
                Ok(true)
            }
            Some(ReplicaState::Resyncing) => Ok(false),
            Some(ReplicaState::InSync) => Err(FsError::invalid(format!("replica {}:{} is in sync", t.ds, t.object))),
            None => Err(FsError::new(
                ErrorCode::NotFound,
                format!("{}:{} is not a replica of stripe {stripe}", t.ds, t.object),
            )),
        }
    }

    /// A resyncing replica `t` of `stripe` holds everything now (rule 4): in sync. An error when it is
    /// not resyncing (it missed a write meanwhile, or another resync finished first).
    pub fn resync_done(&mut self, stripe: usize, t: StripeTarget) -> FsResult<()> {
        match self.replica_state(stripe, t) {
            Some(ReplicaState::Resyncing) => {
                self.set_state(stripe, t, ReplicaState::InSync, None)?;
                self.mirror_gen += 1;
                Ok(())
            }
            s => Err(FsError::new(
                ErrorCode::Stale,
                format!(
                    "replica {}:{} of stripe {stripe} is {} (not resyncing)",
                    t.ds,
                    t.object,
                    s.map_or("gone", |s| s.word())
                ),
            )),
        }
    }

    /// Replica `old` of `stripe` (not its primary) replaced by the fresh, empty object `new` (a rebuild
    /// elsewhere): stale until resynced.
    pub fn replace_replica(&mut self, stripe: usize, old: StripeTarget, new: StripeTarget) -> FsResult<()> {
        let reps =
            self.mirrors_of_mut(stripe).ok_or_else(|| FsError::invalid(format!("stripe {stripe} has no mirrors")))?;
        let r = reps.iter_mut().find(|r| r.target == old).ok_or_else(|| {
            FsError::invalid(format!("{}:{} is not a replica of stripe {stripe} after its primary", old.ds, old.object))
        })?;
        r.target = new;
        r.state = ReplicaState::Stale;
        self.mirror_gen += 1;
        Ok(())
    }

    /// The stripe's only in-sync copy is lost (its store wiped): replica `keep`, not in sync, becomes the
    /// primary and in sync — the best copy left, missing only the writes it missed — and every other
    /// replica stale (resynced from it). The writes `keep` missed are lost; without this the empty object
    /// would be copied over every replica.
    pub fn promote_after_loss(&mut self, stripe: usize, keep: StripeTarget) -> FsResult<()> {
        let reps = self.replicas(stripe);
        if reps.iter().any(|r| r.state == ReplicaState::InSync && r.target != reps[0].target) {
            return Err(FsError::invalid(format!("stripe {stripe} has another replica in sync")));
        }
        let primary = reps[0].target;
        if keep == primary || !reps.iter().any(|r| r.target == keep) {
            return Err(FsError::invalid(format!(
                "{}:{} is not another replica of stripe {stripe}",
                keep.ds, keep.object
            )));
        }
        let others = self.mirrors_of_mut(stripe).ok_or_else(|| FsError::invalid("no mirrors"))?;
        for r in others.iter_mut() {
            if r.target == keep {
                r.target = primary;
            }
            r.state = ReplicaState::Stale;
        }
        if let Some(p) = self.target_mut(stripe) {
            *p = keep;
        }
        self.mirror_gen += 1;
        Ok(())
    }

    /// The stripes and replicas not in sync: (global stripe, replica, state).
    pub fn degraded(&self) -> Vec<(usize, StripeTarget, ReplicaState)> {
        (0..self.stripe_count())
            .flat_map(|k| self.mirrors_of(k).iter().map(move |r| (k, r.target, r.state)))
            .filter(|&(_, _, s)| s != ReplicaState::InSync)
            .collect()
    }

    /// Sets replica `t`'s state; marking the primary stale swaps it with an in-sync replica (`prefer`
    /// if it is one, else the first), which becomes the primary (rule 1).
    fn set_state(
        &mut self,
        stripe: usize,
        t: StripeTarget,
        state: ReplicaState,
        prefer: Option<StripeTarget>,
    ) -> FsResult<()> {
        let primary =
            self.target(stripe).ok_or_else(|| FsError::invalid(format!("stripe {stripe} outside the layout")))?;
        if t != primary {
            let reps = self.mirrors_of_mut(stripe).ok_or_else(|| FsError::invalid("no mirrors"))?;
            if let Some(r) = reps.iter_mut().find(|r| r.target == t) {
                r.state = state;
            }
            return Ok(());
        }
        if state == ReplicaState::InSync {
            return Ok(());
        }
        let reps = self.mirrors_of_mut(stripe).ok_or_else(|| FsError::invalid("no mirrors"))?;
        let pick = reps
            .iter()
            .position(|r| r.state == ReplicaState::InSync && Some(r.target) == prefer)
            .or_else(|| reps.iter().position(|r| r.state == ReplicaState::InSync))
            .ok_or_else(|| FsError::unavailable(format!("stripe {stripe} has no other replica in sync")))?;
        let new_primary = reps[pick].target;
        reps[pick].target = primary;
        reps[pick].state = state;
        if let Some(p) = self.target_mut(stripe) {
            *p = new_primary;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ds: u32, object: u64) -> StripeTarget {
        StripeTarget { ds, object }
    }

    /// Two stripes, three replicas each: stripe 0 on 0,1,2 and stripe 1 on 1,2,0.
    fn three() -> Layout {
        Layout::mirrored(1 << 20, vec![vec![t(0, 10), t(1, 11), t(2, 12)], vec![t(1, 20), t(2, 21), t(0, 22)]])
    }

    #[test]
    fn a_missed_replica_is_marked_stale_once_and_the_generation_moves() {
        let mut l = three();
        assert!(l.mark_stale(t(0, 10), &[t(2, 12)]).unwrap());
        assert_eq!(l.replica_state(0, t(2, 12)), Some(ReplicaState::Stale));
        assert_eq!(l.mirror_gen, 1);
        assert!(!l.mark_stale(t(0, 10), &[t(2, 12)]).unwrap(), "already stale: nothing changes");
        assert_eq!(l.mirror_gen, 1);
        assert_eq!(l.degraded(), vec![(0, t(2, 12), ReplicaState::Stale)]);
        l.validate().unwrap();
    }

    #[test]
    fn rule_1_a_missed_primary_gives_its_place_to_the_reporter() {
        let mut l = three();
        assert!(l.mark_stale(t(2, 12), &[t(0, 10)]).unwrap());
        assert_eq!(l.target(0), Some(t(2, 12)), "the reporting replica is the primary now");
        assert_eq!(l.replica_state(0, t(0, 10)), Some(ReplicaState::Stale));
        assert_eq!(l.replica_state(0, t(1, 11)), Some(ReplicaState::InSync));
        assert_eq!(l.target(1), Some(t(1, 20)), "the other stripe keeps its primary");
        l.validate().unwrap();
    }

    #[test]
    fn rule_2_a_stale_replica_cannot_report_others() {
        let mut l = three();
        l.mark_stale(t(0, 10), &[t(1, 11)]).unwrap();
        let e = l.mark_stale(t(1, 11), &[t(0, 10)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Stale, "{e}");
        assert_eq!(l.target(0), Some(t(0, 10)));
    }

    #[test]
    fn rule_3_the_last_in_sync_replica_stays() {
        let mut l = three();
        l.mark_stale(t(0, 10), &[t(1, 11), t(2, 12)]).unwrap();
        let before = l.clone();
        // The primary is the only one in sync: a reporter... none is left to report it, and the primary
        // cannot report itself.
        assert!(l.mark_stale(t(0, 10), &[t(0, 10)]).is_err());
        let mut two = Layout::mirrored(1 << 20, vec![vec![t(0, 1), t(1, 2)]]);
        two.mark_stale(t(1, 2), &[t(0, 1)]).unwrap();
        let e = two.mark_stale(t(1, 2), &[t(0, 1)]);
        assert!(!e.unwrap(), "already stale");
        assert_eq!(l, before);
        // A resyncing replica reporting the last in-sync one: refused (it is not in sync itself).
        let mut r = Layout::mirrored(1 << 20, vec![vec![t(0, 1), t(1, 2)]]);
        r.mark_stale(t(0, 1), &[t(1, 2)]).unwrap();
        r.resync_started(0, t(1, 2)).unwrap();
        assert_eq!(r.mark_stale(t(1, 2), &[t(0, 1)]).unwrap_err().code, ErrorCode::Stale);
    }

    #[test]
    fn rule_4_resync_goes_stale_resyncing_in_sync_and_a_miss_sends_it_back() {
        let mut l = three();
        l.mark_stale(t(0, 10), &[t(1, 11)]).unwrap();
        assert!(l.resync_done(0, t(1, 11)).is_err(), "in sync only from resyncing");
        assert!(l.resync_started(0, t(1, 11)).unwrap());
        assert!(!l.resync_started(0, t(1, 11)).unwrap());
        assert!(l.replica_state(0, t(1, 11)).unwrap().written());
        // Missing a write while resyncing: stale again, and the resync cannot finish.
        assert!(l.mark_stale(t(0, 10), &[t(1, 11)]).unwrap());
        assert_eq!(l.resync_done(0, t(1, 11)).unwrap_err().code, ErrorCode::Stale);
        l.resync_started(0, t(1, 11)).unwrap();
        let gen = l.mirror_gen;
        l.resync_done(0, t(1, 11)).unwrap();
        assert_eq!(l.mirror_gen, gen + 1, "rule 5");
        assert!(l.degraded().is_empty());
        assert!(l.resync_started(0, t(1, 11)).is_err());
    }

    #[test]
    fn when_the_only_in_sync_copy_is_lost_the_best_stale_one_becomes_the_primary() {
        let mut l = three();
        l.mark_stale(t(0, 10), &[t(1, 11), t(2, 12)]).unwrap();
        l.resync_started(0, t(2, 12)).unwrap();
        // Server 0's store is lost: 2 (resyncing) is kept, the lost primary and 1 are stale.
        l.promote_after_loss(0, t(2, 12)).unwrap();
        assert_eq!(l.target(0), Some(t(2, 12)));
        assert_eq!(l.replica_state(0, t(0, 10)), Some(ReplicaState::Stale));
        assert_eq!(l.replica_state(0, t(1, 11)), Some(ReplicaState::Stale));
        l.validate().unwrap();
        // Not while another copy is in sync, nor for the primary itself.
        let mut fresh = three();
        assert!(fresh.promote_after_loss(0, t(1, 11)).is_err());
        assert!(l.promote_after_loss(0, t(2, 12)).is_err());
    }

    #[test]
    fn a_replica_rebuilt_elsewhere_starts_stale() {
        let mut l = three();
        l.replace_replica(1, t(0, 22), t(3, 30)).unwrap();
        assert_eq!(l.replica_state(1, t(3, 30)), Some(ReplicaState::Stale));
        assert!(l.replace_replica(1, t(1, 20), t(3, 31)).is_err(), "not the primary");
        assert!(l.mark_stale(t(9, 9), &[]).is_err(), "an object outside the layout");
        assert!(l.mark_stale(t(0, 10), &[t(1, 20)]).is_err(), "a replica of another stripe");
    }
}
