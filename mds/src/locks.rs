//! The lock manager (issue 42): POSIX byte-range and `flock` locks that hold across client nodes, with
//! the MDS deciding, as Lustre's LDLM (`flock` locks) and Ceph's MDS do. The rules of a lock table are
//! [`tessera_proto::locks`]; this module adds what needs a server:
//!
//! - **Waiting** (`F_SETLKW`, `flock` without `LOCK_NB`): a blocked request is held here, woken whenever a
//!   lock is released, for at most [`LOCK_WAIT_SLICE_MS`] (the client then asks again): no polling.
//! - **Deadlock detection** as Linux's `posix_locks_deadlock`: a POSIX request that would wait for
//!   owners who wait, directly or through others, for the requester is refused with EDEADLK (`flock`
//!   requests are not checked, as on Linux).
//! - **Interrupts**: `CancelLock` names a wait; the request answers EINTR unless it was granted first.
//! - **Eviction**: a client the MDS evicts loses its locks, and waiters wake.
//! - **Grace after a start** (NFS's and Lustre's lock recovery): the table lives in memory, so after a
//!   restart or a failover it is empty; if the service had locks when it stopped (a marker in the
//!   store, see [`crate::namespace`]'s `locks_held`), new locks wait until the grace period ends while
//!   clients reassert theirs (`reclaim`), so no lock is granted twice.
//!
//! Decisions are pure ([`LockTable`], [`deadlock`]); the waiting is the only I/O here (tokio's `Notify`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::error::ErrorCode;
use tessera_proto::locks::{HeldLock, LockKind, LockOwner, LockSpec, LockTable, LockType};
use tessera_proto::msg::LOCK_WAIT_SLICE_MS;
use tessera_proto::{FsError, FsResult, Ino};
use tokio::sync::Notify;

/// Cancels remembered for waits not (or no longer) known here: a `CancelLock` may overtake its `Lock`.
const EARLY_CANCELS: usize = 1024;
/// Most owners a deadlock search visits (a longer chain is not followed: no deadlock reported).
const DEADLOCK_SEARCH_MAX: usize = 4096;
/// Most locks one client may hold (ENOLCK beyond): what a client can make the server keep is bounded.
pub const MAX_LOCKS_PER_CLIENT: usize = 1 << 16;

/// A blocked request: what it waits to place.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    ino: Ino,
    spec: LockSpec,
}

#[derive(Default)]
struct State {
    table: LockTable,
    /// Requests blocked now (by owner and wait: one owner, e.g. two threads of a process, may wait twice),
    /// and on what.
    waiting: HashMap<(LockOwner, u64), Waiting>,
    /// Waits given up (`CancelLock`), newest last.
    cancelled: VecDeque<(LockOwner, u64)>,
    /// Until then, only reclaims are granted (after a start of the service that had locks).
    grace_until: Option<Instant>,
    /// Locks held per client.
    per_client: HashMap<u64, usize>,
}

impl State {
    /// Applies `owner`'s `spec` on `ino` to the table and keeps the per-client count; a request that may
    /// add locks is refused with ENOLCK when the client is at `cap` (`None`: no cap, for a reclaim, which
    /// only adds back what was held). Returns the table's answer, and whether a refused `flock`
    /// conversion dropped the owner's old lock.
    fn apply(&mut self, ino: Ino, owner: LockOwner, spec: &LockSpec, cap: Option<usize>) -> FsResult<(Applied, bool)> {
        let mine = |t: &LockTable| t.on(ino).iter().filter(|l| l.owner.client == owner.client).count();
        let held = self.per_client.get(&owner.client).copied().unwrap_or(0);
        // A request adds at most 2 locks (one split in three): refused at the cap.
        if spec.typ != LockType::Unlock && cap.is_some_and(|c| held + 2 > c) {
            return Err(err(
                ErrorCode::NoLocks,
                format!("this client holds {held} locks, the most one client may hold"),
            ));
        }
        let before = mine(&self.table);
        let converting = spec.kind == LockKind::Flock && self.table.holds(ino, owner, LockKind::Flock);
        let applied = self.table.apply(ino, owner, spec);
        match (held + mine(&self.table)).saturating_sub(before) {
            0 => self.per_client.remove(&owner.client),
            n => self.per_client.insert(owner.client, n),
        };
        let dropped = converting && applied.is_err();
        Ok((applied, dropped))
    }
}

/// A lock table's answer: placed, or the owners in the way.
type Applied = Result<(), Vec<LockOwner>>;

/// Whether `owner`, about to wait for `blockers`, would wait for itself: a POSIX owner in the way that
/// waits (for a POSIX lock) for owners in the way of its own request, and so on, reaching `owner`.
fn deadlock(
    table: &LockTable,
    waiting: &HashMap<(LockOwner, u64), Waiting>,
    owner: LockOwner,
    blockers: &[LockOwner],
) -> bool {
    let mut seen: HashSet<LockOwner> = HashSet::new();
    let mut todo: Vec<LockOwner> = blockers.to_vec();
    while let Some(b) = todo.pop() {
        if b == owner {
            return true;
        }
        if !seen.insert(b) || seen.len() > DEADLOCK_SEARCH_MAX {
            continue;
        }
        for w in waiting.iter().filter(|((o, _), w)| *o == b && w.spec.kind == LockKind::Posix).map(|(_, w)| w) {
            todo.extend(table.conflicts(w.ino, b, &w.spec).map(|l| l.owner));
        }
    }
    false
}

/// What a lock request came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted,
    /// Still blocked at the end of the wait slice: the client asks again.
    NotYet,
}

pub struct LockManager {
    state: Mutex<State>,
    /// Woken whenever a lock may have been released (or a wait cancelled).
    changed: Notify,
    /// How long a blocked request is held before it answers "not yet".
    slice: Duration,
    /// Most locks one client may hold ([`MAX_LOCKS_PER_CLIENT`]).
    max_per_client: usize,
}

impl Default for LockManager {
    fn default() -> Self {
        LockManager::with_slice(Duration::from_millis(LOCK_WAIT_SLICE_MS))
    }
}

fn err(code: ErrorCode, msg: impl Into<String>) -> FsError {
    FsError::new(code, msg)
}

impl LockManager {
    /// A lock manager whose blocked requests wait at most `slice` per request.
    pub fn with_slice(slice: Duration) -> LockManager {
        LockManager { state: Mutex::default(), changed: Notify::new(), slice, max_per_client: MAX_LOCKS_PER_CLIENT }
    }

    /// The same with another cap on the locks one client may hold.
    pub fn with_cap(self, max_per_client: usize) -> LockManager {
        LockManager { max_per_client, ..self }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// New locks wait until `until` (reclaims do not): a start of the service after one that had locks.
    pub fn set_grace(&self, until: Instant) {
        self.state().grace_until = Some(until);
        self.changed.notify_waiters();
    }

    /// Whether the grace period is on now.
    pub fn in_grace(&self) -> bool {
        self.state().grace_until.is_some_and(|t| Instant::now() < t)
    }

    /// Locks held now.
    pub fn len(&self) -> usize {
        self.state().table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.state().table.is_empty()
    }

    /// Owners blocked now.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// Clients that hold locks.
    pub fn clients(&self) -> Vec<u64> {
        self.state().table.clients()
    }

    /// `F_GETLK`.
    pub fn test(&self, ino: Ino, owner: LockOwner, spec: &LockSpec) -> FsResult<Option<HeldLock>> {
        check(spec)?;
        Ok(self.state().table.test(ino, owner, spec))
    }

    /// `F_SETLK` / `F_SETLKW` / `flock`: see `MdsRequest::Lock` (`wait`: how long a blocked request may
    /// wait here, at most the slice).
    pub async fn lock(
        &self,
        ino: Ino,
        owner: LockOwner,
        spec: LockSpec,
        wait: Option<Duration>,
        wait_id: u64,
        reclaim: bool,
    ) -> FsResult<Outcome> {
        check(&spec)?;
        let deadline = tokio::time::Instant::now() + wait.unwrap_or_default().min(self.slice);
        let wait = wait.is_some();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let grace_until = {
                let mut s = self.state();
                if wait && s.cancelled.contains(&(owner, wait_id)) {
                    s.cancelled.retain(|c| *c != (owner, wait_id));
                    s.waiting.remove(&(owner, wait_id));
                    return Err(err(ErrorCode::Interrupted, "the lock's wait was interrupted"));
                }
                let grace = s.grace_until.filter(|t| Instant::now() < *t);
                if grace.is_none() || reclaim || spec.typ == LockType::Unlock {
                    let (applied, dropped) = s.apply(ino, owner, &spec, (!reclaim).then_some(self.max_per_client))?;
                    let State { table, waiting, .. } = &mut *s;
                    match applied {
                        Ok(()) => {
                            waiting.remove(&(owner, wait_id));
                            // Any change of an owner's locks may free a range (an unlock, a downgrade,
                            // a flock conversion): those waiting look again.
                            let others_wait = !waiting.is_empty();
                            drop(s);
                            if others_wait {
                                self.changed.notify_waiters();
                            }
                            return Ok(Outcome::Granted);
                        }
                        Err(blockers) => {
                            if dropped {
                                // A failed conversion dropped the old lock (flock(2)): others may go on.
                                // (Only then: waiters waking each other for nothing would spin.)
                                self.changed.notify_waiters();
                            }
                            if reclaim {
                                return Err(err(
                                    ErrorCode::WouldBlock,
                                    "a reasserted lock conflicts with one granted since: it is lost",
                                ));
                            }
                            if !wait {
                                return Err(err(ErrorCode::WouldBlock, "another owner holds a conflicting lock"));
                            }
                            if spec.kind == LockKind::Posix && deadlock(table, waiting, owner, &blockers) {
                                waiting.remove(&(owner, wait_id));
                                return Err(err(
                                    ErrorCode::Deadlock,
                                    "waiting would deadlock: the lock's holder waits for this owner",
                                ));
                            }
                            waiting.insert((owner, wait_id), Waiting { ino, spec });
                        }
                    }
                    None
                } else if !wait {
                    return Err(err(
                        ErrorCode::WouldBlock,
                        "the metadata service started recently: locks held before are being reasserted",
                    ));
                } else {
                    grace
                }
            };
            let wake = match grace_until {
                Some(t) => deadline.min(tokio::time::Instant::from_std(t)),
                None => deadline,
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {
                    if tokio::time::Instant::now() >= deadline {
                        self.state().waiting.remove(&(owner, wait_id));
                        return Ok(Outcome::NotYet);
                    }
                }
            }
        }
    }

    /// `CancelLock`: `owner`'s wait `wait_id` answers EINTR (remembered a while if it has not arrived).
    pub fn cancel(&self, owner: LockOwner, wait_id: u64) {
        let mut s = self.state();
        if s.cancelled.len() >= EARLY_CANCELS {
            s.cancelled.pop_front();
        }
        s.cancelled.push_back((owner, wait_id));
        drop(s);
        self.changed.notify_waiters();
    }

    /// Drops every lock of `client` (evicted); returns how many it held.
    pub fn drop_client(&self, client: u64) -> usize {
        let mut s = self.state();
        let n = s.table.release_client(client);
        s.per_client.remove(&client);
        s.waiting.retain(|(o, _), _| o.client != client);
        drop(s);
        if n > 0 {
            self.changed.notify_waiters();
        }
        n
    }
}

fn check(spec: &LockSpec) -> FsResult<()> {
    if spec.is_valid() {
        Ok(())
    } else {
        Err(err(ErrorCode::Invalid, format!("lock range {}..={} ends before it starts", spec.start, spec.end)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const A: LockOwner = LockOwner { client: 1, owner: 1 };
    const B: LockOwner = LockOwner { client: 2, owner: 1 };
    const C: LockOwner = LockOwner { client: 3, owner: 1 };

    fn wr(s: u64, e: u64) -> LockSpec {
        LockSpec { kind: LockKind::Posix, typ: LockType::Write, start: s, end: e, pid: 1 }
    }
    const W: Option<Duration> = Some(Duration::from_secs(60));

    fn un() -> LockSpec {
        LockSpec::unlock_all(LockKind::Posix)
    }

    /// Lets spawned waiters reach their wait.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_conflicting_request_without_wait_is_refused_with_eagain() {
        let m = LockManager::default();
        assert_eq!(m.lock(1, A, wr(0, 9), None, 0, false).await.unwrap(), Outcome::Granted);
        let e = m.lock(1, B, wr(5, 5), None, 0, false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::WouldBlock);
        assert_eq!(m.test(1, B, &wr(0, 100)).unwrap().map(|l| l.owner), Some(A));
        assert_eq!(m.lock(1, B, wr(10, 19), None, 0, false).await.unwrap(), Outcome::Granted);
    }

    #[tokio::test]
    async fn a_waiter_is_granted_when_the_holder_unlocks() {
        let m = Arc::new(LockManager::default());
        m.lock(1, A, wr(0, 9), None, 0, false).await.unwrap();
        let m2 = m.clone();
        let w = tokio::spawn(async move { m2.lock(1, B, wr(0, 9), W, 7, false).await });
        settle().await;
        assert_eq!(m.waiting(), 1);
        assert!(!w.is_finished());
        m.lock(1, A, un(), None, 0, false).await.unwrap();
        assert_eq!(w.await.unwrap().unwrap(), Outcome::Granted);
        assert_eq!(m.waiting(), 0);
        assert_eq!(m.test(1, A, &wr(0, 0)).unwrap().map(|l| l.owner), Some(B));
    }

    #[tokio::test]
    async fn a_wait_ends_after_the_slice_with_not_yet() {
        let m = LockManager::with_slice(Duration::from_millis(50));
        m.lock(1, A, wr(0, 9), None, 0, false).await.unwrap();
        let r = m.lock(1, B, wr(0, 9), W, 7, false).await.unwrap();
        assert_eq!(r, Outcome::NotYet);
        assert_eq!(m.waiting(), 0, "a waiter that is not asking any more is forgotten");
    }

    #[tokio::test]
    async fn two_owners_waiting_for_each_other_get_edeadlk() {
        let m = Arc::new(LockManager::default());
        m.lock(1, A, wr(0, 0), None, 0, false).await.unwrap();
        m.lock(1, B, wr(1, 1), None, 0, false).await.unwrap();
        let m2 = m.clone();
        let a = tokio::spawn(async move { m2.lock(1, A, wr(1, 1), W, 1, false).await });
        settle().await;
        let e = m.lock(1, B, wr(0, 0), W, 2, false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Deadlock);
        // B gives up its lock: A goes on.
        m.lock(1, B, un(), None, 0, false).await.unwrap();
        assert_eq!(a.await.unwrap().unwrap(), Outcome::Granted);
    }

    #[tokio::test]
    async fn a_cycle_through_a_third_owner_and_another_file_is_found() {
        let m = Arc::new(LockManager::default());
        m.lock(1, A, wr(0, 0), None, 0, false).await.unwrap();
        m.lock(2, B, wr(0, 0), None, 0, false).await.unwrap();
        m.lock(3, C, wr(0, 0), None, 0, false).await.unwrap();
        let (m2, m3) = (m.clone(), m.clone());
        let _a = tokio::spawn(async move { m2.lock(2, A, wr(0, 0), W, 1, false).await }); // A waits for B
        let _b = tokio::spawn(async move { m3.lock(3, B, wr(0, 0), W, 1, false).await }); // B waits for C
        settle().await;
        let e = m.lock(1, C, wr(0, 0), W, 1, false).await.unwrap_err(); // C would wait for A
        assert_eq!(e.code, ErrorCode::Deadlock);
        assert!(m.lock(1, C, wr(0, 0), None, 1, false).await.is_err(), "C was not granted A's lock");
    }

    #[tokio::test]
    async fn flock_waits_are_not_checked_for_deadlock() {
        let m = Arc::new(LockManager::default());
        let ex = LockSpec::flock(LockType::Write);
        m.lock(1, A, ex, None, 0, false).await.unwrap();
        m.lock(2, B, ex, None, 0, false).await.unwrap();
        let m2 = m.clone();
        let _a = tokio::spawn(async move { m2.lock(2, A, ex, W, 1, false).await });
        settle().await;
        let m3 = m.clone();
        let b = tokio::spawn(async move { m3.lock(1, B, ex, W, 1, false).await });
        settle().await;
        assert!(!b.is_finished(), "B waits (Linux does not detect flock deadlocks)");
        m.cancel(B, 1);
        assert_eq!(b.await.unwrap().unwrap_err().code, ErrorCode::Interrupted);
    }

    #[tokio::test]
    async fn a_cancelled_wait_answers_eintr_even_if_the_cancel_came_first() {
        let m = Arc::new(LockManager::default());
        m.lock(1, A, wr(0, 9), None, 0, false).await.unwrap();
        m.cancel(B, 5);
        let e = m.lock(1, B, wr(0, 9), W, 5, false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Interrupted);
        assert_eq!(m.waiting(), 0);
        let m2 = m.clone();
        let w = tokio::spawn(async move { m2.lock(1, B, wr(0, 9), W, 6, false).await });
        settle().await;
        m.cancel(B, 5);
        settle().await;
        assert!(!w.is_finished(), "another wait's cancel does not end this one");
        m.cancel(B, 6);
        assert_eq!(w.await.unwrap().unwrap_err().code, ErrorCode::Interrupted);
        assert!(m.test(1, B, &wr(0, 0)).unwrap().is_some(), "B got nothing");
    }

    #[tokio::test]
    async fn an_evicted_clients_locks_go_and_its_waiters_with_them() {
        let m = Arc::new(LockManager::default());
        m.lock(1, A, wr(0, 9), None, 0, false).await.unwrap();
        m.lock(2, A, LockSpec::flock(LockType::Write), None, 0, false).await.unwrap();
        let m2 = m.clone();
        let w = tokio::spawn(async move { m2.lock(1, B, wr(0, 9), W, 1, false).await });
        settle().await;
        assert_eq!(m.drop_client(1), 2);
        assert_eq!(w.await.unwrap().unwrap(), Outcome::Granted);
        assert_eq!(m.clients(), vec![2]);
    }

    #[tokio::test]
    async fn in_the_grace_period_only_reclaims_are_granted() {
        let m = Arc::new(LockManager::default());
        m.set_grace(Instant::now() + Duration::from_millis(300));
        assert_eq!(m.lock(1, B, wr(0, 9), None, 0, false).await.unwrap_err().code, ErrorCode::WouldBlock);
        assert_eq!(m.lock(1, A, wr(0, 9), None, 0, true).await.unwrap(), Outcome::Granted, "a reclaim");
        let e = m.lock(1, B, wr(5, 5), None, 0, true).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::WouldBlock, "a reclaim that conflicts is refused, not granted twice");
        let t0 = Instant::now();
        let m2 = m.clone();
        let w = tokio::spawn(async move { m2.lock(1, B, wr(100, 109), W, 1, false).await });
        assert_eq!(w.await.unwrap().unwrap(), Outcome::Granted);
        assert!(t0.elapsed() >= Duration::from_millis(250), "a new lock waited for the grace period to end");
        assert!(!m.in_grace());
    }

    #[tokio::test]
    async fn a_client_holds_at_most_the_cap_of_locks() {
        let m = LockManager::default().with_cap(10);
        for i in 0..8 {
            // Every other byte: no two merge.
            m.lock(1, A, wr(2 * i, 2 * i), None, 0, false).await.unwrap();
        }
        m.lock(2, A, wr(0, 0), None, 0, false).await.unwrap();
        let e = m.lock(2, A, wr(10, 10), None, 0, false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoLocks);
        m.lock(1, B, wr(1, 1), None, 0, false).await.expect("another client is not held back");
        m.lock(1, A, un(), None, 0, false).await.unwrap();
        m.lock(2, A, wr(10, 10), None, 0, false).await.expect("after an unlock there is room again");
        assert_eq!(m.drop_client(1), 2);
        m.lock(3, A, wr(0, 0), None, 0, false).await.unwrap();
    }

    #[test]
    fn a_range_that_ends_before_it_starts_is_einval() {
        let m = LockManager::default();
        let e = m.test(1, A, &wr(9, 0)).unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid);
    }
}
