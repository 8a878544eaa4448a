//! File locks through the namespace: the lock manager ([`crate::locks`]) with what needs the store —
//! the marker that this start of the service may have granted locks (so the next start holds a grace
//! period for their reassertion), and eviction.

use super::{err, Namespace};
use crate::locks::{LockManager, Outcome};
use crate::store::{Store, T};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;
use tessera_proto::error::ErrorCode;
use tessera_proto::locks::{LockOwner, LockSpec, LockType};
use tessera_proto::msg::MdsReply;
use tessera_proto::{FsResult, Ino};
use tracing::{info, warn};

/// Meta key, present while locks may be held: a start of the service that finds it holds a grace period
/// for clients to reassert their locks before granting new ones.
const LOCKS_HELD_KEY: &[u8] = b"locks-held";

/// The namespace's part of locking.
pub(super) struct NsLocks {
    manager: LockManager,
    /// The marker is in the store.
    marked: AtomicBool,
    /// Lock requests being served (the marker is not cleared meanwhile).
    inflight: AtomicUsize,
    /// The start before this one may have had locks granted.
    were_held: bool,
    /// Held while the marker is checked and set or cleared, and while a request joins `inflight`: a
    /// request cannot slip in between the evictor's "nothing held" and its clearing of the marker. It
    /// holds since when no lock is held (the marker is cleared after [`MARKER_IDLE`] of that).
    marker: tokio::sync::Mutex<Option<Instant>>,
}

/// How long no lock must be held before the marker is cleared: programs that lock and unlock all the
/// time (SQLite) would otherwise pay a durable write for their first lock after every tick.
const MARKER_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

impl NsLocks {
    pub(super) fn new(store: &Store) -> FsResult<NsLocks> {
        let were_held = store.read(T::Meta, LOCKS_HELD_KEY)?.is_some();
        Ok(NsLocks {
            manager: LockManager::default(),
            marked: AtomicBool::new(were_held),
            inflight: AtomicUsize::new(0),
            were_held,
            marker: tokio::sync::Mutex::new(None),
        })
    }
}

impl Namespace {
    pub fn locks(&self) -> &LockManager {
        &self.locks.manager
    }

    /// `Lock` from `client` (see `MdsRequest::Lock`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn lock_file(
        &self,
        client: u64,
        ino: Ino,
        owner: u64,
        spec: LockSpec,
        wait_ms: u32,
        wait_id: u64,
        reclaim: bool,
    ) -> FsResult<MdsReply> {
        let wait = (wait_ms > 0).then(|| std::time::Duration::from_millis(wait_ms.into()));
        if spec.typ != LockType::Unlock {
            self.store.begin().get_inode(ino)?.ok_or_else(|| err(ErrorCode::NotFound, format!("no inode {ino}")))?;
        }
        let marked = {
            let _m = self.locks.marker.lock().await;
            self.locks.inflight.fetch_add(1, Ordering::AcqRel);
            if spec.typ != LockType::Unlock && !self.locks.marked.load(Ordering::Acquire) {
                self.mark_locks_held(true).await
            } else {
                Ok(())
            }
        };
        let r = match marked {
            Ok(()) => self.locks.manager.lock(ino, LockOwner { client, owner }, spec, wait, wait_id, reclaim).await,
            Err(e) => Err(e),
        };
        self.locks.inflight.fetch_sub(1, Ordering::AcqRel);
        Ok(MdsReply::Lock { granted: r? == Outcome::Granted })
    }

    /// `TestLock` (`F_GETLK`).
    pub(crate) fn test_lock(&self, client: u64, ino: Ino, owner: u64, spec: LockSpec) -> FsResult<MdsReply> {
        self.locks.manager.test(ino, LockOwner { client, owner }, &spec).map(MdsReply::LockTest)
    }

    /// `CancelLock`.
    pub(crate) fn cancel_lock(&self, client: u64, owner: u64, wait_id: u64) -> MdsReply {
        self.locks.manager.cancel(LockOwner { client, owner }, wait_id);
        MdsReply::Ok
    }

    /// Sets (or clears) the marker that locks may be held, durably, before a lock is granted.
    async fn mark_locks_held(&self, held: bool) -> FsResult<()> {
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            if held {
                tx.put(T::Meta, LOCKS_HELD_KEY, vec![1]);
            } else {
                tx.del(T::Meta, LOCKS_HELD_KEY);
            }
            self.commit(tx)
        };
        self.durable(r).await?;
        self.locks.marked.store(held, Ordering::Release);
        Ok(())
    }

    /// Drops the locks of clients without a session (evicted, or gone quietly), and clears the marker once
    /// no lock is held and none is being asked for (the evictor's tick).
    pub(crate) async fn tidy_locks(&self) {
        let holders = self.locks.manager.clients();
        if !holders.is_empty() {
            let gone: Vec<u64> = {
                let s = self.sessions();
                holders.into_iter().filter(|&c| !s.has(c)).collect()
            };
            for c in gone {
                let n = self.locks.manager.drop_client(c);
                warn!(client = format_args!("{c:016x}"), locks = n, "locks of a client without a session released");
            }
        }
        let mut empty_since = self.locks.marker.lock().await;
        let idle = self.locks.manager.is_empty() && self.locks.inflight.load(Ordering::Acquire) == 0;
        let idle_long = if idle {
            empty_since.get_or_insert_with(Instant::now).elapsed() >= MARKER_IDLE
        } else {
            *empty_since = None;
            false
        };
        if self.locks.marked.load(Ordering::Acquire) && idle_long && !self.locks.manager.in_grace() {
            if let Err(e) = self.mark_locks_held(false).await {
                warn!("clearing the locks-held marker: {e}");
            }
        }
    }

    /// At a start after one that had locks: new locks wait `grace` for the old ones to be reasserted.
    pub(super) fn start_lock_grace(&self, grace: std::time::Duration) {
        if self.locks.were_held {
            self.locks.manager.set_grace(Instant::now() + grace);
            info!(
                grace_s = grace.as_secs_f64(),
                "locks were held before this start: new locks wait for their reassertion"
            );
        }
    }
}
