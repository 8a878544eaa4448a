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
    /// the service answered. Returns the handles to reassert (`Reopen`) when that start is not the one
    /// that granted them (the MDS restarted, or another replica leads): empty otherwise.
    pub(crate) fn renewed(&self, timeout: Duration, evicted: bool, boot: u64) -> Vec<HeldHandle> {
        if evicted {
            self.evicted();
        }
        self.timeout_ms.store(timeout.as_millis().clamp(1, u64::MAX as u128) as u64, Ordering::Release);
        let before = self.boot.swap(boot, Ordering::AcqRel);
        if before == 0 || before == boot || evicted {
            return Vec::new();
        }
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.iter().map(|(&handle, &ino)| HeldHandle { ino, handle }).collect()
    }

    /// The MDS said it evicted this client (and closed its handles).
    pub(crate) fn evicted(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
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

/// The keep-alive period for an eviction timeout.
pub fn period(timeout: Duration) -> Duration {
    (timeout / 3).max(MIN_PERIOD)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held handles are reasserted when another start of the service answers a keep-alive, not at the
    /// first one, not while the same start answers, and not after an eviction (which closed them).
    #[test]
    fn a_new_start_of_the_service_gets_the_held_handles() {
        let s = Session::default();
        let t = Duration::from_secs(30);
        s.hold(11, 100);
        s.hold(12, 200);
        assert!(s.renewed(t, false, 5).is_empty(), "the first keep-alive");
        assert!(s.renewed(t, false, 5).is_empty(), "the same start");
        s.release(12);
        assert_eq!(s.renewed(t, false, 6), vec![HeldHandle { ino: 100, handle: 11 }], "a new start");
        assert!(s.renewed(t, false, 6).is_empty());
        s.evicted();
        assert_eq!(s.held_count(), 0, "an eviction closed them");
        s.hold(13, 300);
        assert!(s.renewed(t, true, 7).is_empty(), "evicted: nothing of before to reassert");
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
