//! This client's session with the MDS (see the MDS's `session` module): a keep-alive every third of
//! the eviction timeout, and what an eviction means here. Handles opened before an eviction belong to
//! a session the MDS has ended (it closed them, and destroyed the files they kept alive after an
//! unlink), so their reads, writes and fsyncs fail with EIO; new opens work as before. A keep-alive
//! answered by a new start of the service (a restart, another replica leading) has the handles this
//! client holds reasserted (`Reopen`), within the service's grace period.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::locks::{HeldLock, LockKind, LockOwner, LockSpec, LockTable};
use tessera_proto::msg::HeldHandle;
use tessera_proto::Ino;

/// Keep-alive period before the MDS has said its eviction timeout.
pub(crate) const FIRST_PERIOD: Duration = Duration::from_secs(10);
/// Shortest keep-alive period, however short the timeout.
const MIN_PERIOD: Duration = Duration::from_millis(500);

/// Shared by every clone of one client's [`MdsClient`].
#[derive(Debug)]
pub struct Session {
    /// How many evictions this client has been told of.
    epoch: AtomicU64,
    base: Instant,
    /// When the MDS last answered (milliseconds since `base`).
    heard_ms: AtomicU64,
    /// The MDS's eviction timeout in milliseconds (0 until a keep-alive said it).
    timeout_ms: AtomicU64,
    /// The last number given to a request whose reply the MDS caches (`MdsCall::seq`).
    seq: AtomicU64,
    /// Which start of the metadata service the last keep-alive reached (0: none yet).
    boot: AtomicU64,
    /// The handles the MDS granted this client and it has not closed: handle → inode (reasserted to a
    /// new start of the service, see [`Session::renewed`]).
    held: Mutex<HashMap<u64, Ino>>,
    /// The file locks the MDS granted this client (owners with client 0): released at close, reasserted
    /// to a new start of the service.
    locks: Mutex<LockTable>,
}

/// What a new start of the metadata service must be told again (see [`Session::renewed`]).
#[derive(Debug, Default)]
pub(crate) struct Reassert {
    pub handles: Vec<HeldHandle>,
    pub locks: Vec<(Ino, HeldLock)>,
    /// The start of the service they were granted by (see [`Session::reassert_again`]).
    pub before: u64,
}

impl Default for Session {
    fn default() -> Session {
        Session {
            epoch: AtomicU64::new(0),
            base: Instant::now(),
            heard_ms: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            timeout_ms: AtomicU64::new(0),
            boot: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            locks: Mutex::new(LockTable::default()),
        }
    }
}

impl Session {
    /// The next request number of this client (every clone shares it: one client id, one sequence).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The session handles opened now belong to.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Fails (EIO) when a handle opened in session `opened_in` was closed by an eviction since, or may
    /// have been: the MDS has not answered for longer than its eviction timeout (a client stopped or
    /// cut off that long is evicted; handles work again if the next keep-alive says it was not).
    pub fn check(&self, opened_in: u64) -> FsResult<()> {
        if self.epoch() != opened_in {
            return Err(FsError::new(
                ErrorCode::Io,
                "the metadata server evicted this client (silent for longer than its eviction timeout) and \
                 closed this handle: open the file again",
            ));
        }
        let timeout = self.timeout_ms.load(Ordering::Acquire);
        let silent = self.now_ms().saturating_sub(self.heard_ms.load(Ordering::Acquire));
        if timeout > 0 && silent > timeout {
            return Err(FsError::new(
                ErrorCode::Io,
                format!(
                    "no answer from the metadata server for {:.1} s, longer than its eviction timeout ({:.1} s): \
                     this handle may have been closed",
                    silent as f64 / 1e3,
                    timeout as f64 / 1e3
                ),
            ));
        }
        Ok(())
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis().min(u64::MAX as u128) as u64
    }

    /// The MDS answered a request.
    pub(crate) fn heard(&self) {
        self.heard_ms.fetch_max(self.now_ms(), Ordering::AcqRel);
    }

    /// A keep-alive's answer: the eviction timeout, whether this client was evicted, and which start of
    /// the service answered. Returns the handles (`Reopen`) and locks (`Lock` with `reclaim`) to reassert
    /// when that start is not the one that granted them (the MDS restarted, or another replica leads):
    /// empty otherwise.
    pub(crate) fn renewed(&self, timeout: Duration, evicted: bool, boot: u64) -> Reassert {
        if evicted {
            self.evicted();
        }
        self.timeout_ms.store(timeout.as_millis().clamp(1, u64::MAX as u128) as u64, Ordering::Release);
        let before = self.boot.swap(boot, Ordering::AcqRel);
        if before == 0 || before == boot || evicted {
            return Reassert::default();
        }
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        Reassert {
            handles: held.iter().map(|(&handle, &ino)| HeldHandle { ino, handle }).collect(),
            locks: self.locks().all(),
            before,
        }
    }

    /// Reasserting to the new start failed (it did not answer, another election...): the next keep-alive
    /// tries again, as if it were the first to reach that start.
    pub(crate) fn reassert_again(&self, before: u64) {
        self.boot.store(before, Ordering::Release);
    }

    fn locks(&self) -> std::sync::MutexGuard<'_, LockTable> {
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The MDS granted (or removed) `owner`'s lock `spec` on `ino`.
    pub(crate) fn record_lock(&self, ino: Ino, owner: u64, spec: &LockSpec) {
        self.locks().place(ino, LockOwner { client: 0, owner }, spec);
    }

    /// The owners holding locks on `ino` here, with the kind.
    pub fn lock_owners_on(&self, ino: Ino) -> Vec<(u64, LockKind)> {
        let mut v: Vec<(u64, LockKind)> = self.locks().on(ino).iter().map(|l| (l.owner.owner, l.kind)).collect();
        v.sort_by_key(|(o, k)| (*o, *k == LockKind::Flock));
        v.dedup();
        v
    }

    /// Whether this client holds a lock of `kind` of `owner` on `ino`.
    pub fn holds_lock(&self, ino: Ino, owner: u64, kind: LockKind) -> bool {
        self.locks().holds(ino, LockOwner { client: 0, owner }, kind)
    }

    /// How many locks this client holds.
    pub fn lock_count(&self) -> usize {
        self.locks().len()
    }

    /// The MDS said it evicted this client (and closed its handles, and released its locks).
    pub(crate) fn evicted(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let lost = std::mem::take(&mut *self.locks()).len();
        if lost > 0 {
            tracing::warn!(locks = lost, "the metadata server evicted this client: its file locks are lost");
        }
        self.held.lock().unwrap_or_else(|p| p.into_inner()).clear();
        tracing::warn!("the metadata server evicted this client: files opened before fail with EIO");
    }

    /// The MDS granted `handle` on `ino`.
    pub(crate) fn hold(&self, handle: u64, ino: Ino) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).insert(handle, ino);
    }

    /// `handle` is closed (or given back).
    pub(crate) fn release(&self, handle: u64) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(&handle);
    }

    /// How many handles this client holds.
    pub fn held_count(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// One wait for a lock ([`crate::MdsClient::lock`]), which an interrupt may end.
#[derive(Debug)]
pub struct LockWait {
    /// Names the wait at the MDS (unique per client).
    pub id: u64,
    cancelled: std::sync::atomic::AtomicBool,
}

impl LockWait {
    pub fn new() -> LockWait {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        LockWait { id: NEXT.fetch_add(1, Ordering::Relaxed), cancelled: Default::default() }
    }

    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

impl Default for LockWait {
    fn default() -> Self {
        LockWait::new()
    }
}

/// The keep-alive period for an eviction timeout.
pub fn period(timeout: Duration) -> Duration {
    (timeout / 3).max(MIN_PERIOD)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held handles and locks are reasserted when another start of the service answers a keep-alive, not at
    /// the first one, not while the same start answers, and not after an eviction (which closed the handles
    /// and released the locks).
    #[test]
    fn a_new_start_of_the_service_gets_the_held_handles_and_locks() {
        let s = Session::default();
        let t = Duration::from_secs(30);
        let none = |r: Reassert| r.handles.is_empty() && r.locks.is_empty();
        s.hold(11, 100);
        s.hold(12, 200);
        let wr =
            LockSpec { kind: LockKind::Posix, typ: tessera_proto::locks::LockType::Write, start: 0, end: 9, pid: 1 };
        s.record_lock(100, 77, &wr);
        assert!(none(s.renewed(t, false, 5)), "the first keep-alive");
        assert!(none(s.renewed(t, false, 5)), "the same start");
        s.release(12);
        let again = s.renewed(t, false, 6);
        assert_eq!(again.handles, vec![HeldHandle { ino: 100, handle: 11 }], "a new start");
        assert_eq!(again.locks.len(), 1);
        assert_eq!((again.locks[0].0, again.locks[0].1.owner.owner, again.locks[0].1.end), (100, 77, 9));
        assert!(none(s.renewed(t, false, 6)));
        s.evicted();
        assert_eq!(s.held_count(), 0, "an eviction closed them");
        assert_eq!(s.lock_count(), 0, "and released the locks");
        assert!(!s.holds_lock(100, 77, LockKind::Posix));
        s.hold(13, 300);
        assert!(none(s.renewed(t, true, 7)), "evicted: nothing of before to reassert");
    }

    #[test]
    fn handles_of_an_earlier_session_fail_with_eio() {
        let s = Session::default();
        let opened = s.epoch();
        assert!(s.check(opened).is_ok());
        s.evicted();
        let e = s.check(opened).unwrap_err();
        assert_eq!(e.code, ErrorCode::Io);
        assert!(e.detail.contains("evicted"), "{e}");
        assert!(s.check(s.epoch()).is_ok(), "opens after the eviction work");
    }

    #[test]
    fn handles_fail_while_the_mds_has_been_silent_longer_than_the_eviction_timeout() {
        let s = Session::default();
        s.heard();
        assert!(s.check(0).is_ok(), "the timeout is not known yet");
        s.renewed(Duration::from_millis(30), false, 1);
        s.heard();
        assert!(s.check(0).is_ok());
        std::thread::sleep(Duration::from_millis(60));
        let e = s.check(0).unwrap_err();
        assert!(e.detail.contains("no answer from the metadata server"), "{e}");
        s.heard();
        assert!(s.check(0).is_ok(), "a keep-alive that says the session lives restores the handles");
    }

    #[test]
    fn keep_alives_come_three_times_per_timeout() {
        assert_eq!(period(Duration::from_secs(30)), Duration::from_secs(10));
        assert_eq!(period(Duration::from_secs(1)), MIN_PERIOD);
    }
}
