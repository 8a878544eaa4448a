//! Every metadata operation with POSIX/Linux semantics: lookups, creation, removal, rename, readdir,
//! attributes, open/close bookkeeping, xattrs, layouts and statfs.
//!
//! Mutations run under one short mutex (never held across I/O or the flush): they read through a
//! [`Txn`] overlay, commit as one sled transaction plus its journal record, release the lock, and
//! (in `fsync` commit mode only) wait for durability, concurrent flushes sharing one fsync. The
//! mutex also keeps the journal in the order the changes were applied. Reads take no lock.
//!
//! This module holds the [`Namespace`], its construction, the shared helpers (lock, commit, durable),
//! sessions. Requests enter through the one dispatch (`crate::dispatch`, also `Namespace::handle`), which
//! calls the operations; each family of operations is an `impl Namespace` block of its own:
//!
//! - `lookup`: lookups and path resolution.
//! - `create`: creating files, special files, directories, symlinks and hard links.
//! - `remove`: unlink and rmdir.
//! - `rename`: rename with its flags.
//! - `attr`: setattr (chown, chmod, truncate, times) and statfs.
//! - `open`: open, close and write reports.
//! - `dir`: readdir.
//! - `xattr`: extended attributes and layouts.
//! - `composite`: composite (progressive) layouts: setting them, instantiating their extents.
//! - `lease`: directory leases and their batches of creates.
//! - `locks`: file locks (the lock manager, `crate::locks`, with its marker in the store).
//! - `entries`: entry helpers the mutations share.
//!
//! `tessera fsck`'s scan, confirmation and repair are an `impl Namespace` block too, in
//! [`crate::fsck::online`] (next to its decisions).

mod acl;
mod attr;
mod composite;
mod create;
mod dir;
mod entries;
mod lease;
mod locks;
mod lookup;
pub(crate) mod mirror;
mod open;
mod remove;
mod rename;
mod replies;
mod usage;
mod xattr;

#[cfg(test)]
pub(crate) mod tests;

use crate::dsclient::DataServers;
use crate::lease::{Holder, Leases};
use crate::placement::placer::Placer;
use crate::session::Sessions;
use crate::stats::StatsView;
use crate::store::{Inode, Store, Txn};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::config::Defaults;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::LayoutSpec;
use tessera_proto::msg::*;
use tessera_proto::*;
use tokio::sync::Notify;
use tracing::{info, warn};

/// Default of `[mds] eviction_timeout_s`.
pub const EVICTION_TIMEOUT: Duration = Duration::from_secs(30);

fn err(code: ErrorCode, detail: impl Into<String>) -> FsError {
    FsError::new(code, detail)
}

/// A component name: not empty, `.`, `..`, no `/` or NUL, at most 255 bytes.
pub fn validate_name(name: &str) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(err(ErrorCode::NameTooLong, format!("name of {} bytes (max {NAME_MAX})", name.len())));
    }
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(FsError::invalid(format!("invalid name '{}'", name.escape_debug())));
    }
    Ok(())
}

fn entry(i: Inode) -> MdsReply {
    MdsReply::Entry { attr: i.attr, layout: i.layout }
}

/// The grace period after a start (see [`Namespace::end_recovery`]).
struct Recovery {
    /// Unlinked files that were open when the service last stopped.
    orphans: Vec<Ino>,
    /// When the grace period ends.
    until: Instant,
}

pub struct Namespace {
    pub(crate) store: Arc<Store>,
    /// When this start of the service began.
    started: Instant,
    /// Serialises mutations (reads never take it).
    mutate: Mutex<()>,
    /// Open handles per inode (in memory: they do not survive a restart).
    opens: Mutex<HashMap<Ino, HashSet<u64>>>,
    /// Files whose objects a setattr is truncating (before it commits the size): fsck leaves their
    /// sizes alone meanwhile.
    truncating: Mutex<HashMap<Ino, usize>>,
    /// Files unlinked while open that an earlier start of the service left, kept until the grace
    /// period ends ([`Namespace::end_recovery`]) for their holders to reassert (`Reopen`).
    recovery: Mutex<Recovery>,
    /// Which client holds which handle, and when each was last heard from (eviction).
    sessions: Mutex<Sessions>,
    placer: Arc<Placer>,
    pub(crate) stats: Arc<StatsView>,
    defaults: LayoutSpec,
    pub(crate) data: Arc<dyn DataServers>,
    destroy_wake: Arc<Notify>,
    destroy_pending: AtomicBool,
    leases: Leases,
    /// What each data server knows of its replicas not in sync (mirrored files).
    pub(crate) fences: Arc<mirror::FenceTable>,
    /// Resync progress since start.
    pub(crate) resync: mirror::ResyncCounters,
    /// The first inode number of this run: lower ones were handed out before (ids only grow, across
    /// restarts too), so a batch may use one a lease reserved before an MDS restart.
    boot_ino: Ino,
    /// The reply cache's state in memory ([`Namespace::serve_once`]).
    replies: replies::Replies,
    /// File locks (issue 42).
    locks: locks::NsLocks,
    /// Files whose space on the data servers is to be measured (`usage.rs`).
    usage: usage::UsageQueue,
    /// Which client caches which names and attributes, and their recalls (issue 38).
    caches: crate::caches::Caches,
    /// When a client's `Watch` last marked the cache leases active in the store (for the grace after a
    /// restart).
    cache_activity: Mutex<Option<Instant>>,
}

impl Namespace {
    /// Creates the root on first start and destroys orphans a previous run left.
    pub fn new(
        store: Arc<Store>,
        defaults: &Defaults,
        stats: Arc<StatsView>,
        data: Arc<dyn DataServers>,
    ) -> FsResult<Namespace> {
        let placer = Arc::new(Placer::new(stats.clone(), defaults.placement.as_str(), Duration::from_secs(1))?);
        let spec = LayoutSpec {
            stripe_size: Some(defaults.stripe_size),
            stripe_count: Some(defaults.stripe_count),
            mirrors: Some(defaults.mirrors),
        };
        spec.validate()?;
        let boot_ino = store.new_ino()?;
        let leases = Leases::with_grace(lease::lease_grace(&store)?);
        let locks = locks::NsLocks::new(&store)?;
        let ns = Namespace {
            store,
            started: Instant::now(),
            mutate: Mutex::new(()),
            opens: Mutex::new(HashMap::new()),
            truncating: Mutex::new(HashMap::new()),
            recovery: Mutex::new(Recovery { orphans: Vec::new(), until: Instant::now() + EVICTION_TIMEOUT }),
            sessions: Mutex::new(Sessions::new(EVICTION_TIMEOUT)),
            placer,
            stats,
            defaults: spec,
            data,
            destroy_wake: Arc::new(Notify::new()),
            destroy_pending: AtomicBool::new(false),
            leases,
            boot_ino,
            fences: Arc::default(),
            resync: mirror::ResyncCounters::default(),
            replies: Default::default(),
            locks,
            usage: Default::default(),
            caches: Default::default(),
            cache_activity: Mutex::new(None),
        };
        ns.init()?;
        ns.start_lock_grace(EVICTION_TIMEOUT);
        Ok(ns)
    }

    fn init(&self) -> FsResult<()> {
        let mut tx = self.store.begin();
        if tx.get_inode(ROOT_INO)?.is_none() {
            let c = Caller::current_process();
            let attr = Attr::new(ROOT_INO, FileKind::Dir, 0o755, c.uid, c.gid, Timestamp::now());
            tx.add_inode(&Inode { attr, layout: None, target: None, parent: ROOT_INO })?;
            info!(uid = c.uid, gid = c.gid, "created the root directory");
        }
        for ds in self.store.removed_servers()? {
            self.stats.remove_server(ds);
        }
        let mut orphans = Vec::new();
        for ino in self.store.orphans()? {
            match tx.get_inode(ino)? {
                Some(i) if i.attr.nlink == 0 => orphans.push(ino),
                _ => tx.set_orphan(ino, false),
            }
        }
        if !orphans.is_empty() {
            info!(
                orphans = orphans.len(),
                "files unlinked while open before this start kept for the grace period (their holders reassert them)"
            );
        }
        self.recovery().orphans = orphans;
        tx.commit()?;
        Ok(self.store.flush_sync()?)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn stats(&self) -> &Arc<StatsView> {
        &self.stats
    }

    pub fn placer(&self) -> &Arc<Placer> {
        &self.placer
    }

    /// Notified whenever destroy-log entries were made durable.
    pub fn destroy_wake(&self) -> Arc<Notify> {
        self.destroy_wake.clone()
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    pub fn caches(&self) -> &crate::caches::Caches {
        &self.caches
    }

    /// `Watch`: see [`crate::caches::Caches::watch`]. While clients watch, the store notes so (at most
    /// once a second), so a restart waits until the leases of the run before have ended.
    pub(crate) async fn watch(&self, holder: Holder, acked: u64, wait_ms: u32, leave: bool) -> FsResult<MdsReply> {
        let due = {
            let mut last = self.cache_activity.lock().unwrap_or_else(|p| p.into_inner());
            let due = !leave && last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            let mut tx = self.store.begin();
            lease::note_cache_activity(&mut tx);
            self.durable(tx.commit()).await?;
        }
        Ok(MdsReply::Recalls(self.caches.watch(holder, acked, wait_ms, leave, self.boot_ino).await))
    }

    pub fn data_servers(&self) -> Arc<dyn DataServers> {
        self.data.clone()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.mutate.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn opens(&self) -> MutexGuard<'_, HashMap<Ino, HashSet<u64>>> {
        self.opens.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Clients silent for this long are evicted (`[mds] eviction_timeout_s`); also the grace period in
    /// which clients reassert the handles an earlier start granted (they do at their next keep-alive,
    /// every third of it).
    pub fn set_eviction_timeout(&self, timeout: Duration) {
        let mut s = self.sessions();
        *s = Sessions::new(timeout);
        self.recovery().until = self.started + timeout;
        self.start_lock_grace(timeout.saturating_sub(self.started.elapsed()));
    }

    fn recovery(&self) -> MutexGuard<'_, Recovery> {
        self.recovery.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Once the grace period is over, destroys the files unlinked while open that an earlier start left
    /// and that no handle holds again. Returns how many.
    pub async fn end_recovery(&self) -> usize {
        let orphans = {
            let mut r = self.recovery();
            if r.orphans.is_empty() || Instant::now() < r.until {
                return 0;
            }
            std::mem::take(&mut r.orphans)
        };
        let mut destroyed = 0;
        for ino in orphans {
            let r = crate::offload::offload(|| self.release_orphan(ino));
            match self.durable(r).await {
                Ok(true) => destroyed += 1,
                Ok(false) => {}
                Err(e) => warn!(ino, "destroying a file unlinked while open: {e}"),
            }
        }
        info!(destroyed, "grace period over: files unlinked while open and not reasserted destroyed");
        destroyed
    }

    /// Destroys `ino` if it is unlinked and no handle holds it (says whether it did).
    fn release_orphan(&self, ino: Ino) -> FsResult<bool> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        match tx.get_inode(ino)? {
            Some(i) if i.attr.nlink == 0 && !self.is_open(ino) => {
                tx.remove_inode(&i)?;
                self.commit(tx)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Clients holding a session now.
    pub fn session_count(&self) -> usize {
        self.sessions().len()
    }

    /// Evicts the clients silent for longer than the eviction timeout: closes their handles (destroying
    /// the files they had unlinked while open). Returns the number of clients evicted.
    pub async fn evict_silent(&self) -> usize {
        let evictions = self.sessions().expire(Instant::now());
        for ev in &evictions {
            self.replies.forget(ev.client);
            if let Err(e) = self.store.forget_replies(ev.client) {
                warn!(client = format_args!("{:016x}", ev.client), "dropping an evicted client's replies: {e}");
            }
            warn!(
                client = format_args!("{:016x}", ev.client),
                silent_s = ev.silent.as_secs(),
                handles = ev.handles.len(),
                "evicted a silent client: its open handles are closed"
            );
            let locks = self.locks().drop_client(ev.client);
            if locks > 0 {
                warn!(client = format_args!("{:016x}", ev.client), locks, "an evicted client's locks are released");
            }
            for &(handle, ino) in &ev.handles {
                let r =
                    crate::offload::offload(|| self.close_handle(ino, handle, None, false)).map(|(_, changed)| changed);
                if let Err(e) = self.durable(r).await {
                    warn!(ino, "closing an evicted handle: {e}");
                }
            }
        }
        evictions.len()
    }

    fn truncating(&self) -> MutexGuard<'_, HashMap<Ino, usize>> {
        self.truncating.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a setattr is changing the file's objects' sizes right now.
    pub(crate) fn is_truncating(&self, ino: Ino) -> bool {
        self.truncating().contains_key(&ino)
    }

    pub(crate) fn is_open(&self, ino: Ino) -> bool {
        self.opens().get(&ino).is_some_and(|h| !h.is_empty())
    }

    pub(crate) fn commit(&self, mut tx: Txn<'_>) -> FsResult<()> {
        // A numbered request's change carries the mark that it was applied (see `serve_once`).
        if !tx.is_empty() {
            if let Some((client, seq)) = replies::current() {
                tx.mark_applied(client, seq)?;
            }
        }
        let destroys = tx.has_destroys();
        let changed = self.caches.active().then(|| tx.changed());
        tx.commit()?;
        if let Some((attrs, names)) = changed {
            self.caches.committed(&crate::caches::Changes { attrs, names });
        }
        if destroys {
            self.destroy_pending.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Waits until a mutation's result is durable (journaled already, fsync'ed in `fsync` commit mode,
    /// or on a majority of the metadata replicas), then wakes the destroyer if it has work.
    pub(crate) async fn durable<V>(&self, r: FsResult<V>) -> FsResult<V> {
        let v = r?;
        if self.store.sync_commits() {
            self.store.flush().await?;
        }
        // Replicated: acknowledged once a majority has it.
        self.store.settle().await?;
        if self.destroy_pending.swap(false, Ordering::SeqCst) {
            self.destroy_wake.notify_one();
        }
        Ok(v)
    }

    /// Every request of a client but its keep-alive renews its session; one evicted meanwhile is told so
    /// (once), and its request is not applied.
    pub(crate) fn renew_session(&self, client: u64) -> FsResult<()> {
        let mut s = self.sessions();
        s.touch(client, Instant::now());
        if s.tell_evicted(client) {
            return Err(err(
                ErrorCode::Evicted,
                "this client was evicted (silent for longer than the eviction timeout): its open files were \
                 closed and this request was not applied",
            ));
        }
        Ok(())
    }

    /// `KeepAlive`: renews `client`'s session, and says whether it was evicted, the timeout and which
    /// start of the service this is.
    pub(crate) fn keep_alive(&self, client: u64) -> MdsReply {
        let mut s = self.sessions();
        let evicted = s.keep_alive(client, Instant::now());
        let timeout_ms = s.timeout().as_millis().min(u64::MAX as u128) as u64;
        MdsReply::Session { evicted, timeout_ms, boot: self.boot_ino }
    }

    /// `Sync`: every committed change durable.
    pub(crate) async fn sync(&self) -> FsResult<MdsReply> {
        self.store.settle().await?;
        self.store.flush().await?;
        Ok(MdsReply::Ok)
    }
}
