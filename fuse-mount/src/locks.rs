//! File locks through the mount (issue 42). The kernel sends `fcntl` byte-range locks (`getlk`, `setlk`)
//! and `flock` locks here once the mount asks for them at init (`FUSE_POSIX_LOCKS`, `FUSE_FLOCK_LOCKS`;
//! not with `-o local_locks`, which keeps the kernel's own locks, local to this node). Each goes to the
//! MDS's lock manager through the file's handle ([`tessera_client::cache::Handle::lock`]), so locks hold
//! between mounts. A process's POSIX locks on a file go at any close of it (`flush` names the owner),
//! an open file description's `flock` lock at its last close (`release`).
//!
//! A blocked `F_SETLKW` or `flock` waits at the MDS; a signal to the waiting process makes the kernel
//! send an interrupt naming the request, which cancels the wait there (EINTR, unless the lock was
//! granted first). The interrupt may be read by another thread before the request it names is seen
//! here: it is remembered a while ([`EARLY_INTERRUPTS`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tessera_client::mds_client::LockWait;
use tessera_client::proto::locks::{LockKind, LockSpec, LockType};
use tessera_client::{ErrorCode, FsError, FsResult, MdsClient};

/// Interrupts of requests not (yet) waiting here that are remembered (request ids only grow).
const EARLY_INTERRUPTS: usize = 256;

/// A wait in progress: what ends it.
struct Wait {
    wait: Arc<LockWait>,
    owner: u64,
    mds: MdsClient,
}

#[derive(Default)]
struct Waits {
    waiting: HashMap<u64, Wait>,
    /// Interrupts of requests not waiting here (yet), oldest first.
    early: VecDeque<u64>,
}

/// The lock waits of this mount, by kernel request id. One mutex over both tables: an interrupt and the
/// start of the wait it names cannot pass each other.
#[derive(Default)]
pub(crate) struct LockWaits(Mutex<Waits>);

impl LockWaits {
    fn waits(&self) -> MutexGuard<'_, Waits> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Request `unique` of `owner` begins to wait (already cancelled if its interrupt came first).
    pub(crate) fn begin(&self, unique: u64, owner: u64, mds: &MdsClient) -> Arc<LockWait> {
        let wait = Arc::new(LockWait::new());
        let mut w = self.waits();
        if w.early.contains(&unique) {
            wait.cancel();
        }
        w.waiting.insert(unique, Wait { wait: wait.clone(), owner, mds: mds.clone() });
        wait
    }

    /// Request `unique` is answered.
    pub(crate) fn end(&self, unique: u64) {
        self.waits().waiting.remove(&unique);
    }

    /// The kernel interrupts request `unique`: a lock wait is cancelled at the MDS; any other request
    /// finishes as it would have (the id is remembered, in case its lock request is not seen yet).
    pub(crate) fn interrupt(&self, unique: u64, rt: &tokio::runtime::Handle) {
        let found = {
            let mut w = self.waits();
            let found = w.waiting.get(&unique).map(|w| (w.wait.clone(), w.owner, w.mds.clone()));
            if found.is_none() {
                if w.early.len() >= EARLY_INTERRUPTS {
                    w.early.pop_front();
                }
                w.early.push_back(unique);
            }
            found
        };
        if let Some((wait, owner, mds)) = found {
            // Cancelled here at once: a wait slice that ends meanwhile is not asked again.
            wait.cancel();
            rt.spawn(async move {
                if let Err(e) = mds.cancel_lock(owner, &wait).await {
                    tracing::warn!("cancelling an interrupted lock wait: {e}");
                }
            });
        }
    }
}

/// A POSIX lock request from the kernel's `getlk`/`setlk` arguments.
pub(crate) fn posix_spec(start: u64, end: u64, typ: i32, pid: u32) -> FsResult<LockSpec> {
    let typ = lock_type(typ)?;
    let spec = LockSpec { kind: LockKind::Posix, typ, start, end, pid };
    if !spec.is_valid() {
        return Err(FsError::new(ErrorCode::Invalid, "lock range ends before it starts"));
    }
    Ok(spec)
}

/// A `flock` request from the kernel's arguments.
pub(crate) fn flock_spec(typ: i32) -> FsResult<LockSpec> {
    Ok(LockSpec::flock(lock_type(typ)?))
}

fn lock_type(typ: i32) -> FsResult<LockType> {
    LockType::from_fcntl(typ).ok_or_else(|| FsError::new(ErrorCode::Invalid, format!("lock type {typ}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lock_arguments_become_requests_or_einval() {
        let s = posix_spec(10, 19, libc::F_WRLCK, 42).unwrap();
        assert_eq!((s.kind, s.typ, s.start, s.end, s.pid), (LockKind::Posix, LockType::Write, 10, 19, 42));
        assert_eq!(posix_spec(10, 9, libc::F_RDLCK, 1).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(posix_spec(0, 9, 99, 1).unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(flock_spec(libc::F_UNLCK).unwrap(), LockSpec::flock(LockType::Unlock));
    }
}
