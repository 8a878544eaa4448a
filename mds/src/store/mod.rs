//! The sled database: its trees, record types, key layouts, and a write overlay ([`Txn`]) whose
//! changes commit atomically. In `fsync` commit mode a commit is ONE sled transaction over the trees
//! it touches. In `journal` mode it is a redo-journal record (crash-safe at once) plus an entry in the
//! store's pending overlay, which every read consults first; the group-commit thread applies the whole
//! overlay to sled as one transaction and flushes it every [`COMMIT_INTERVAL`]. Why: each sled
//! transaction seals and writes sled's log buffer twice (`pin_log`), so one per metadata operation
//! cost the MDS more CPU (sled's I/O threads, sync_file_range) than the operation itself.
//!
//! This module holds the [`Store`] and its [`Txn`]; the rest is one module per job:
//!
//! - `records`: the trees, record types, key layouts and their encoding.
//! - `overlay`: journal mode's pending overlay, applying it to sled, and reads merged with it ([`Scan`]).
//! - `commit`: the group-commit thread (periodic and on-demand flushes, journal segments retired).
//! - `replay`: start-up after a crash: the journal replayed ([`JournalRecovery`]).
//! - `migrate`: the database format, and migrating older formats on open.

mod commit;
mod error;
mod migrate;
mod overlay;
mod records;
mod replay;

pub use commit::COMMIT_INTERVAL;
pub use error::{StoreError, StoreResult};
pub use overlay::Scan;
pub use records::{dentry_key, dirseq_key, ino_key, key_ino, xattr_key, xattr_prefix, Dentry, DestroyEntry, Inode, T};
pub use replay::JournalRecovery;

use crate::journal::{Journal, WriteSet};
use commit::GroupCommit;
use overlay::{apply_pending, apply_writes, Overlay, PendingEntry};
use records::{
    composite_key, dec, enc, orphan_key, prefixed_key, DEGRADED_PREFIX, MIRROR_OBJECT_PREFIX, ORPHAN_PREFIX,
    REMOVED_PREFIX, STORE_ID_PREFIX, TREE_NAMES,
};
use sled::{Db, Tree};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_proto::config::MetadataCommit;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{ExtentSpec, Layout, LayoutSpec};
use tessera_proto::{DsId, FileKind, FsError, FsResult, Ino, ObjectId};
use tracing::warn;

pub struct Store {
    db: Db,
    trees: Vec<Tree>,
    inode_count: AtomicI64,
    /// Set in [`MetadataCommit::Journal`] mode.
    journal: Option<Arc<Mutex<Journal>>>,
    /// Journaled changes not yet applied to sled (journal mode).
    overlay: Arc<Overlay>,
    flusher: GroupCommit,
    /// The overlay's commits up to this number may go into sled (`u64::MAX`: all, as with the local
    /// journal; a replicated log's leader holds back those a majority does not have yet).
    watermark: Arc<std::sync::atomic::AtomicU64>,
    /// The next id to hand out, and the end of the range reserved for it (see [`Store::new_id`]).
    ids: Mutex<(u64, u64)>,
    /// Opened as a replica of the replicated metadata (issue 37): no journal of its own.
    replicated: bool,
    /// Set while this replica leads: every commit is proposed to the replicated log.
    replicate: std::sync::OnceLock<Replicator>,
}

/// How a leading replica's commits reach the replicated log (`crate::raft`).
pub struct Replicator {
    /// Proposes overlay commit `seq`'s writes (called in commit order, under the commit's lock; must not
    /// block).
    pub propose: Box<dyn Fn(u64, WriteSet) -> Result<(), String> + Send + Sync>,
    /// The overlay commit up to which a majority has the changes (and they are applied here).
    pub committed: tokio::sync::watch::Receiver<u64>,
    /// The last overlay commit proposed that answers wait for (and the lock that keeps proposals in
    /// commit order).
    proposed: Mutex<u64>,
    /// Reply-cache answers not proposed yet: they go with the next commit's entry (or
    /// [`Store::flush_deferred`]'s), not an entry each — only a resend reads them, and a resend whose
    /// answer a failover lost has it rebuilt from the change's mark.
    deferred: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl Replicator {
    pub fn new(
        propose: Box<dyn Fn(u64, WriteSet) -> Result<(), String> + Send + Sync>,
        committed: tokio::sync::watch::Receiver<u64>,
    ) -> Replicator {
        Replicator { propose, committed, proposed: Mutex::new(0), deferred: Mutex::new(Vec::new()) }
    }
}

/// `Meta` key: the end of the last range of ids reserved (u64 BE).
const IDS_KEY: &[u8] = b"ids";
/// Ids reserved per committed write.
const ID_RANGE: u64 = 1 << 16;

impl Store {
    /// Opens (or creates) the database in `dir`, replaying what the journal holds beyond it.
    pub fn open(dir: &Path, commit: MetadataCommit) -> StoreResult<Store> {
        Store::open_with(dir, commit, COMMIT_INTERVAL, JournalRecovery::Refuse)
    }

    /// [`Store::open`] with another periodic commit interval (tests) and what to do with a corrupt journal.
    pub fn open_with(
        dir: &Path,
        commit: MetadataCommit,
        interval: Duration,
        recovery: JournalRecovery,
    ) -> StoreResult<Store> {
        Store::open_inner(dir, commit, interval, recovery, false)
    }

    /// Opens (or creates) a replica's database in `dir`: no journal of its own (the replicated log is
    /// its redo log), what is applied goes into sled every `interval`, and nothing is committed by this
    /// replica until it leads ([`Store::lead`]).
    pub fn open_replicated(dir: &Path, interval: Duration) -> StoreResult<Store> {
        Store::open_inner(dir, MetadataCommit::Fsync, interval, JournalRecovery::Refuse, true)
    }

    fn open_inner(
        dir: &Path,
        commit: MetadataCommit,
        interval: Duration,
        recovery: JournalRecovery,
        replicated: bool,
    ) -> StoreResult<Store> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir { path: dir.to_path_buf(), source })?;
        let config = sled::Config::new().path(dir).cache_capacity(256 << 20).flush_every_ms(Some(500));
        // sled's background threads let go of a database dropped in this process a moment after the drop:
        // a reopen right then finds the file lock still held. Tried again for up to 5 s (a lock another
        // live process holds is reported then).
        let started = std::time::Instant::now();
        let db = loop {
            match config.open() {
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && started.elapsed() < Duration::from_secs(5) =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => break r.map_err(|source| StoreError::Open { path: dir.to_path_buf(), source })?,
            }
        };
        let trees = TREE_NAMES.iter().map(|n| db.open_tree(n)).collect::<Result<Vec<_>, _>>()?;
        let jdir = dir.join("journal");
        let next_segment = replay::replay_journal(&db, &trees, &jdir, recovery)?;
        let journal = match commit {
            MetadataCommit::Journal => Some(Arc::new(Mutex::new(
                Journal::create(&jdir, next_segment)
                    .map_err(|source| StoreError::Journal { path: jdir.clone(), source })?,
            ))),
            MetadataCommit::Fsync => None,
        };
        let overlay = Arc::new(Overlay::default());
        let watermark = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
        let flusher = GroupCommit::start(
            db.clone(),
            trees.clone(),
            overlay.clone(),
            journal.clone(),
            interval,
            watermark.clone(),
            journal.is_some() || replicated,
        )?;
        let ids = Mutex::new((0, 0));
        let store = Store {
            db,
            trees,
            inode_count: AtomicI64::new(0),
            journal,
            overlay,
            flusher,
            watermark,
            ids,
            replicated,
            replicate: Default::default(),
        };
        migrate::check_format(&store, dir)?;
        // The journal is replayed into the trees by now.
        store.load_ids()?;
        Ok(store)
    }

    /// Reads where the id ranges are (and counts the inodes) from the committed state.
    fn load_ids(&self) -> StoreResult<()> {
        let first = match self.read(T::Meta, IDS_KEY)? {
            Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| StoreError::BadIds(v.len()))?),
            // A database from before the ranges: past every id sled's counter gave out.
            None => self.db.generate_id()? + 2,
        };
        *self.ids.lock().unwrap_or_else(|e| e.into_inner()) = (first.max(2), first.max(2));
        self.inode_count.store(self.tree(T::Inodes).len() as i64, Ordering::Relaxed);
        Ok(())
    }

    /// This replica leads from now on: it has applied every committed entry, so its database is the
    /// service's; ids continue after the last range any leader reserved, and every commit is proposed
    /// through `r`. Once only: a replica that stops leading ends (its process is restarted as a follower).
    pub fn lead(&self, r: Replicator) -> StoreResult<()> {
        self.flush_sync()?;
        self.load_ids()?;
        self.replicate.set(r).map_err(|_| StoreError::NotReplicated("this replica led before".into()))
    }

    /// Waits until every change this replica proposed is committed (a majority has it) and applied;
    /// at once without replication.
    pub async fn settle(&self) -> StoreResult<()> {
        let Some(r) = self.replicate.get() else { return Ok(()) };
        let target = *r.proposed.lock().unwrap_or_else(|e| e.into_inner());
        let mut rx = r.committed.clone();
        rx.wait_for(|c| *c >= target)
            .await
            .map_err(|_| StoreError::NotReplicated("the replicated log stopped".into()))?;
        Ok(())
    }

    pub fn tree(&self, t: T) -> &Tree {
        &self.trees[t as usize]
    }

    /// A fresh id (inode numbers, objects, sequence numbers: never 0 nor the root's 1). Ids come from
    /// ranges reserved by a committed write of the range's end (`Meta` [`IDS_KEY`]): journaled like
    /// every change, so a database replayed after a crash — or a replica that applied the same writes —
    /// never hands out an id twice (sled's own counter is outside the writes and would).
    pub fn new_id(&self) -> FsResult<u64> {
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        if ids.0 >= ids.1 {
            let end = ids.0 + ID_RANGE;
            let mut tx = self.begin();
            tx.put(T::Meta, IDS_KEY, end.to_be_bytes().to_vec());
            tx.commit()?;
            ids.1 = end;
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// A fresh inode number (never the root's).
    pub fn new_ino(&self) -> FsResult<Ino> {
        self.new_id()
    }

    pub fn inode_count(&self) -> u64 {
        self.inode_count.load(Ordering::Relaxed).max(0) as u64
    }

    /// Whether every change must be fsync'ed before it is acknowledged ([`MetadataCommit::Fsync`]; a
    /// replica's changes are durable in the replicated log instead, see [`Store::settle`]).
    pub fn sync_commits(&self) -> bool {
        self.journal.is_none() && !self.replicated
    }

    /// Makes every committed change durable. Concurrent callers share one fsync (group commit).
    pub async fn flush(&self) -> StoreResult<()> {
        self.flusher.flush().await
    }

    pub fn flush_sync(&self) -> StoreResult<()> {
        apply_pending(&self.trees, &self.overlay, self.watermark.load(Ordering::SeqCst))?;
        self.db.flush()?;
        Ok(())
    }

    /// Sets how far the overlay's commits may go into sled (see the field; [`Overlay`] numbers them).
    pub fn set_watermark(&self, upto: u64) {
        self.watermark.store(upto, Ordering::SeqCst);
    }

    /// Adds a write set another replica committed (a Raft entry applied here) to what every read sees,
    /// as a local commit's would be; the group commit moves it into sled. Returns its overlay commit.
    pub fn apply_replicated(&self, writes: &WriteSet) -> StoreResult<u64> {
        let mut map = BTreeMap::new();
        for (t, k, v) in writes {
            let t = T::from_number(*t).ok_or(StoreError::UnknownTree(*t))?;
            map.insert((t, k.clone()), v.clone());
        }
        Ok(self.overlay.add(map))
    }

    /// Every record of every tree, after moving what is pending into sled: a snapshot of the database
    /// (a Raft snapshot's data). Held in memory.
    pub fn export(&self) -> StoreResult<Vec<u8>> {
        self.flush_sync()?;
        let mut all: Vec<(u8, Vec<u8>, Vec<u8>)> = Vec::new();
        for t in T::ALL {
            for kv in self.tree(t).iter() {
                let (k, v) = kv?;
                all.push((t as u8, k.to_vec(), v.to_vec()));
            }
        }
        enc(&all)
    }

    /// Replaces the whole database with a snapshot [`Store::export`] made (what was pending is dropped),
    /// and makes it durable.
    pub fn import(&self, snapshot: &[u8]) -> StoreResult<()> {
        let all: Vec<(u8, Vec<u8>, Vec<u8>)> = dec(snapshot)?;
        self.overlay.clear();
        for t in T::ALL {
            self.tree(t).clear()?;
        }
        for (t, k, v) in all {
            let t = T::from_number(t).ok_or(StoreError::UnknownTree(t))?;
            self.tree(t).insert(k, v)?;
        }
        self.db.flush()?;
        self.inode_count.store(self.tree(T::Inodes).len() as i64, Ordering::Relaxed);
        Ok(())
    }

    /// The committed value of a key (pending overlay first, then sled).
    pub fn read(&self, t: T, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        if let Some(v) = self.overlay.get(t, key) {
            return Ok(v);
        }
        Ok(self.tree(t).get(key)?.map(|v| v.to_vec()))
    }

    /// Committed keys from `start` on that begin with `prefix` (see [`Scan`]).
    pub fn scan_from(&self, t: T, start: &[u8], prefix: &[u8]) -> Scan {
        let pending: Vec<PendingEntry> = self.overlay.range(t, start, prefix);
        Scan::new(self.tree(t).range(start.to_vec()..), prefix, pending)
    }

    /// A read view / write overlay. Reads see the overlay's own writes first.
    pub fn begin(&self) -> Txn<'_> {
        Txn { store: self, writes: BTreeMap::new(), inode_delta: 0, destroys: 0, unawaited: false }
    }

    /// Inodes marked as orphans (unlinked while open).
    pub fn orphans(&self) -> FsResult<Vec<Ino>> {
        self.ids_under(ORPHAN_PREFIX)
    }

    /// The ids (big-endian u64) that follow `prefix` in the meta tree's keys.
    fn ids_under(&self, prefix: &[u8]) -> FsResult<Vec<u64>> {
        let mut out = Vec::new();
        for kv in self.scan_from(T::Meta, prefix, prefix) {
            let (k, _) = kv?;
            if let Ok(b) = <[u8; 8]>::try_from(&k[prefix.len()..]) {
                out.push(u64::from_be_bytes(b));
            }
        }
        Ok(out)
    }

    /// Mirrored files with a replica not in sync.
    pub fn degraded_files(&self) -> FsResult<Vec<Ino>> {
        self.ids_under(DEGRADED_PREFIX)
    }

    /// Data servers taken out of placement (`tessera ds remove`).
    pub fn removed_servers(&self) -> FsResult<Vec<DsId>> {
        Ok(self.ids_under(REMOVED_PREFIX)?.into_iter().map(|d| d as DsId).collect())
    }

    /// Every mirrored file (its inode numbers, each once, in no particular order).
    pub fn mirrored_files(&self) -> FsResult<Vec<Ino>> {
        let mut out = std::collections::BTreeSet::new();
        for kv in self.scan_from(T::Meta, MIRROR_OBJECT_PREFIX, MIRROR_OBJECT_PREFIX) {
            let (_, v) = kv?;
            if let Ok(b) = <[u8; 8]>::try_from(&v[..]) {
                out.insert(u64::from_be_bytes(b));
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Every pending destroy-log entry with its key.
    pub fn destroy_entries(&self) -> FsResult<Vec<(Vec<u8>, DestroyEntry)>> {
        let mut out = Vec::new();
        for kv in self.scan_from(T::Destroy, &[], &[]) {
            let (k, v) = kv?;
            out.push((k, dec(&v)?));
        }
        Ok(out)
    }

    /// Drops destroy-log entries (one commit of their own, so it orders with the pending overlay).
    pub fn remove_destroy_entries<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> FsResult<()> {
        let mut tx = self.begin();
        for key in keys {
            tx.del(T::Destroy, key);
        }
        tx.commit()
    }
}

/// Pending writes over the store; [`Txn::commit`] applies them as one sled transaction.
pub struct Txn<'a> {
    store: &'a Store,
    writes: BTreeMap<(T, Vec<u8>), Option<Vec<u8>>>,
    inode_delta: i64,
    destroys: usize,
    /// Replicated: [`Store::settle`] does not wait for this commit (deferred reply-cache answers only).
    unawaited: bool,
}

impl<'a> Txn<'a> {
    pub fn store(&self) -> &'a Store {
        self.store
    }

    pub fn get(&self, t: T, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(&(t, key.to_vec())) {
            return Ok(v.clone());
        }
        Ok(self.store.read(t, key)?)
    }

    pub fn put(&mut self, t: T, key: &[u8], value: Vec<u8>) {
        self.writes.insert((t, key.to_vec()), Some(value));
    }

    pub fn del(&mut self, t: T, key: &[u8]) {
        self.writes.insert((t, key.to_vec()), None);
    }

    /// Keys (and values) under `prefix`, merged with this overlay's writes.
    pub fn scan(&self, t: T, prefix: &[u8]) -> FsResult<BTreeMap<Vec<u8>, Vec<u8>>> {
        let mut out = BTreeMap::new();
        for kv in self.store.scan_from(t, prefix, prefix) {
            let (k, v) = kv?;
            out.insert(k, v);
        }
        for ((wt, k), v) in &self.writes {
            if *wt == t && k.starts_with(prefix) {
                match v {
                    Some(v) => out.insert(k.clone(), v.clone()),
                    None => out.remove(k),
                };
            }
        }
        Ok(out)
    }

    pub fn get_inode(&self, ino: Ino) -> FsResult<Option<Inode>> {
        Ok(self.get(T::Inodes, &ino_key(ino))?.map(|b| dec(&b)).transpose()?)
    }

    /// The inode, or ENOENT.
    pub fn inode(&self, ino: Ino) -> FsResult<Inode> {
        self.get_inode(ino)?.ok_or_else(|| FsError::not_found(format!("inode {ino}")))
    }

    /// The inode, which must be a directory (ENOENT / ENOTDIR).
    pub fn dir(&self, ino: Ino) -> FsResult<Inode> {
        let i = self.inode(ino)?;
        if i.attr.kind != FileKind::Dir {
            return Err(FsError::new(ErrorCode::NotDir, format!("inode {ino} is not a directory")));
        }
        Ok(i)
    }

    /// Writes an inode that already exists. A mirrored file's objects are indexed (which file a replica
    /// belongs to) and the file is listed as degraded while a replica is not in sync.
    pub fn put_inode(&mut self, i: &Inode) -> FsResult<()> {
        let v = enc(i)?;
        self.put(T::Inodes, &ino_key(i.attr.ino), v);
        if let Some(l) = i.layout.as_ref().filter(|l| l.is_mirrored()) {
            let ino = i.attr.ino.to_be_bytes().to_vec();
            for t in l.all_objects() {
                self.put(T::Meta, &prefixed_key(MIRROR_OBJECT_PREFIX, t.object), ino.clone());
            }
            self.set_degraded(i.attr.ino, !l.degraded().is_empty());
        }
        Ok(())
    }

    /// The mirrored file object `object` belongs to (any replica's).
    pub fn mirrored_file_of(&self, object: ObjectId) -> FsResult<Option<Ino>> {
        Ok(self
            .get(T::Meta, &prefixed_key(MIRROR_OBJECT_PREFIX, object))?
            .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
            .map(u64::from_be_bytes))
    }

    /// Drops object `object` from the mirrored files' index (a replica replaced by another).
    pub fn unindex_object(&mut self, object: ObjectId) {
        self.del(T::Meta, &prefixed_key(MIRROR_OBJECT_PREFIX, object));
    }

    /// Data server `ds`'s object store identity as last seen.
    pub fn server_store(&self, ds: DsId) -> FsResult<Option<u64>> {
        Ok(self
            .get(T::Meta, &prefixed_key(STORE_ID_PREFIX, u64::from(ds)))?
            .and_then(|v| <[u8; 8]>::try_from(&v[..]).ok())
            .map(u64::from_be_bytes))
    }

    pub fn set_server_store(&mut self, ds: DsId, id: u64) {
        self.put(T::Meta, &prefixed_key(STORE_ID_PREFIX, u64::from(ds)), id.to_be_bytes().to_vec());
    }

    /// Takes data server `ds` out of placement for good (or back in).
    pub fn set_removed(&mut self, ds: DsId, removed: bool) {
        let k = prefixed_key(REMOVED_PREFIX, u64::from(ds));
        if removed {
            self.put(T::Meta, &k, Vec::new());
        } else {
            self.del(T::Meta, &k);
        }
    }

    fn set_degraded(&mut self, ino: Ino, degraded: bool) {
        let k = prefixed_key(DEGRADED_PREFIX, ino);
        if degraded {
            self.put(T::Meta, &k, Vec::new());
        } else {
            self.del(T::Meta, &k);
        }
    }

    /// Writes a new inode (counted for statfs).
    pub fn add_inode(&mut self, i: &Inode) -> FsResult<()> {
        self.put_inode(i)?;
        self.inode_delta += 1;
        Ok(())
    }

    /// Reads, changes and writes back one inode.
    pub fn update_inode(&mut self, ino: Ino, f: impl FnOnce(&mut Inode)) -> FsResult<Inode> {
        let mut i = self.inode(ino)?;
        f(&mut i);
        self.put_inode(&i)?;
        Ok(i)
    }

    /// Removes an inode record with its xattrs, default layout and orphan marker; queues its objects.
    pub fn remove_inode(&mut self, i: &Inode) -> FsResult<()> {
        let ino = i.attr.ino;
        self.del(T::Inodes, &ino_key(ino));
        self.inode_delta -= 1;
        for k in self.scan(T::Xattrs, &xattr_prefix(ino))?.into_keys() {
            self.del(T::Xattrs, &k);
        }
        if i.attr.kind == FileKind::Dir {
            self.del(T::DirLayouts, &ino_key(ino));
            self.del(T::DirLayouts, &composite_key(ino));
        }
        self.set_orphan(ino, false);
        if let Some(l) = &i.layout {
            if l.is_mirrored() {
                for t in l.all_objects() {
                    self.unindex_object(t.object);
                }
                self.set_degraded(ino, false);
            }
            self.queue_destroy(l)?;
        }
        Ok(())
    }

    /// Puts a layout's objects (every replica) into the destroy log, one entry per data server.
    pub fn queue_destroy(&mut self, l: &Layout) -> FsResult<()> {
        let mut per: BTreeMap<DsId, Vec<ObjectId>> = BTreeMap::new();
        for t in l.all_objects() {
            per.entry(t.ds).or_default().push(t.object);
        }
        for (ds, objects) in per {
            self.destroy_objects(ds, objects)?;
        }
        Ok(())
    }

    /// Puts objects of one data server into the destroy log (one entry).
    pub fn destroy_objects(&mut self, ds: DsId, objects: Vec<ObjectId>) -> FsResult<()> {
        let id = self.store.new_id()?;
        let v = enc(&DestroyEntry { ds, objects })?;
        self.put(T::Destroy, &id.to_be_bytes(), v);
        self.destroys += 1;
        Ok(())
    }

    /// Whether the inode is marked unlinked-while-open.
    pub fn is_orphan(&self, ino: Ino) -> FsResult<bool> {
        Ok(self.get(T::Meta, &orphan_key(ino))?.is_some())
    }

    pub fn set_orphan(&mut self, ino: Ino, orphan: bool) {
        if orphan {
            self.put(T::Meta, &orphan_key(ino), Vec::new());
        } else {
            self.del(T::Meta, &orphan_key(ino));
        }
    }

    pub fn dentry(&self, parent: Ino, name: &str) -> FsResult<Option<Dentry>> {
        Ok(self.get(T::Dentries, &dentry_key(parent, name))?.map(|b| dec(&b)).transpose()?)
    }

    /// Adds (or overwrites) an entry and its readdir position.
    pub fn put_dentry(&mut self, parent: Ino, name: &str, d: Dentry) -> FsResult<()> {
        let v = enc(&d)?;
        self.put(T::Dentries, &dentry_key(parent, name), v);
        self.put(T::Dirseq, &dirseq_key(parent, d.seq), name.as_bytes().to_vec());
        Ok(())
    }

    pub fn del_dentry(&mut self, parent: Ino, name: &str, d: &Dentry) {
        self.del(T::Dentries, &dentry_key(parent, name));
        self.del(T::Dirseq, &dirseq_key(parent, d.seq));
    }

    /// A directory's entries (name and kind), or `None` once there are more than `max` or their names
    /// pass `max_bytes` (directories can be huge: the scan stops there).
    pub fn dir_entries_bounded(
        &self,
        ino: Ino,
        max: usize,
        max_bytes: usize,
    ) -> FsResult<Option<Vec<(String, FileKind)>>> {
        let prefix = ino_key(ino);
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let own = self.writes.iter().filter(|((t, k), _)| *t == T::Dentries && k.starts_with(&prefix));
        let own = own.filter_map(|((_, k), v)| v.as_ref().map(|v| Ok((k.clone(), v.clone()))));
        let stored = self.store.scan_from(T::Dentries, &prefix, &prefix).filter(|kv| match kv {
            Ok((k, _)) => !self.writes.contains_key(&(T::Dentries, k.clone())),
            Err(_) => true,
        });
        for kv in stored.chain(own) {
            let (k, v) = kv?;
            let d: Dentry = dec(&v)?;
            let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            bytes += name.len();
            if out.len() >= max || bytes > max_bytes {
                return Ok(None);
            }
            out.push((name, d.kind));
        }
        Ok(Some(out))
    }

    /// Whether a directory has any entry.
    pub fn dir_has_entries(&self, ino: Ino) -> FsResult<bool> {
        let prefix = ino_key(ino);
        for ((t, k), v) in &self.writes {
            if *t == T::Dentries && v.is_some() && k.starts_with(&prefix) {
                return Ok(true);
            }
        }
        // Stop at the first entry this overlay has not deleted (directories can be huge).
        for kv in self.store.scan_from(T::Dentries, &prefix, &prefix) {
            let (k, _) = kv?;
            if !matches!(self.writes.get(&(T::Dentries, k)), Some(None)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub fn dir_layout(&self, ino: Ino) -> FsResult<Option<LayoutSpec>> {
        Ok(self.get(T::DirLayouts, &ino_key(ino))?.map(|b| dec(&b)).transpose()?)
    }

    pub fn set_dir_layout(&mut self, ino: Ino, spec: Option<LayoutSpec>) -> FsResult<()> {
        match spec {
            Some(s) => {
                let v = enc(&s)?;
                self.put(T::DirLayouts, &ino_key(ino), v)
            }
            None => self.del(T::DirLayouts, &ino_key(ino)),
        }
        Ok(())
    }

    /// A directory's composite default layout (`setstripe -E ...`), if it has one.
    pub fn dir_composite(&self, ino: Ino) -> FsResult<Option<Vec<ExtentSpec>>> {
        Ok(self.get(T::DirLayouts, &composite_key(ino))?.map(|b| dec(&b)).transpose()?)
    }

    /// Sets (or with `None` removes) a directory's composite default.
    pub fn set_dir_composite(&mut self, ino: Ino, specs: Option<&[ExtentSpec]>) -> FsResult<()> {
        match specs {
            Some(s) => {
                let v = enc(&s)?;
                self.put(T::DirLayouts, &composite_key(ino), v)
            }
            None => self.del(T::DirLayouts, &composite_key(ino)),
        }
        Ok(())
    }

    /// Whether this overlay queued objects for destruction.
    pub fn has_destroys(&self) -> bool {
        self.destroys > 0
    }

    /// What the writes change that clients may cache: inodes written (their attributes) and directory
    /// entries written or removed (directory, name).
    pub fn changed(&self) -> (Vec<Ino>, Vec<(Ino, String)>) {
        let (mut inos, mut names) = (Vec::new(), Vec::new());
        for (t, k) in self.writes.keys() {
            let Some(ino) = k.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_be_bytes) else {
                continue;
            };
            match t {
                T::Inodes if k.len() == 8 => inos.push(ino),
                T::Dentries => names.push((ino, String::from_utf8_lossy(&k[8..]).into_owned())),
                _ => {}
            }
        }
        (inos, names)
    }

    /// The writes as a journal record or replicated log entry carries them.
    fn write_set(&self) -> WriteSet {
        self.writes.iter().map(|((t, k), v)| (*t as u8, k.clone(), v.clone())).collect()
    }

    /// Commits every write atomically: one sled transaction (fsync mode), or a journal record plus
    /// the pending overlay (journal mode; see the module docs).
    pub fn commit(mut self) -> FsResult<()> {
        let store = self.store;
        if let Some(r) = store.replicate.get() {
            // Under the lock: proposals in the order of the overlay's commits.
            let mut proposed = r.proposed.lock().unwrap_or_else(|e| e.into_inner());
            // Deferred reply-cache answers ride along (a write of this commit to the same slot — a
            // newer request's mark — wins).
            for (k, v) in std::mem::take(&mut *r.deferred.lock().unwrap_or_else(|e| e.into_inner())) {
                self.writes.entry((T::Meta, k)).or_insert(Some(v));
            }
            if self.writes.is_empty() {
                return Ok(());
            }
            let ws = self.write_set();
            let c = store.overlay.add(self.writes);
            if !self.unawaited {
                *proposed = c;
            }
            (r.propose)(c, ws).map_err(StoreError::NotReplicated)?;
            drop(proposed);
            store.inode_count.fetch_add(self.inode_delta, Ordering::Relaxed);
            return Ok(());
        }
        if self.writes.is_empty() {
            return Ok(());
        }
        let Some(j) = &store.journal else {
            apply_writes(&store.trees, self.writes.iter())?;
            store.inode_count.fetch_add(self.inode_delta, Ordering::Relaxed);
            return Ok(());
        };
        let ws = self.write_set();
        let mut journal = j.lock().unwrap_or_else(|e| e.into_inner());
        let appended = journal.append(ws);
        // Under the journal's lock: a rotation sees every record it closes in the overlay.
        store.overlay.add(self.writes);
        drop(journal);
        store.inode_count.fetch_add(self.inode_delta, Ordering::Relaxed);
        if let Err(e) = appended {
            // Not journaled (a full disk, say): make it durable the slow way before acknowledging it,
            // or report the failure.
            warn!("metadata journal append failed ({e}); committing the database synchronously");
            store.flush_sync()?;
        }
        Ok(())
    }
}

/// `Meta` prefix of the reply cache: client BE ++ slot BE (the request number modulo
/// [`REPLY_WINDOW`]) → [`Kept`]. A slot is overwritten by the number `REPLY_WINDOW` later: a
/// client's window is kept without a deletion per request.
const REPLY_PREFIX: &[u8] = b"reply";

/// How many of a client's numbered requests the reply cache keeps (older ones are dropped as newer come).
pub const REPLY_WINDOW: u64 = 1024;

/// The reply cache's key of client `client`'s request number `seq` (`MdsCall::seq`): its slot.
fn reply_key(client: u64, seq: u64) -> Vec<u8> {
    let slot = (seq % REPLY_WINDOW) as u16;
    [reply_prefix(client), slot.to_be_bytes().to_vec()].concat()
}

/// The prefix of every reply-cache slot of client `client`.
fn reply_prefix(client: u64) -> Vec<u8> {
    [REPLY_PREFIX, &client.to_be_bytes()[..]].concat()
}

/// What the reply cache holds for a numbered request.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
pub enum Replied {
    /// Its change was committed (written in the change's own transaction); its reply not yet.
    Applied,
    /// Its answer.
    Answer(Box<FsResult<tessera_proto::msg::MdsReply>>),
}

/// A reply-cache slot: the request number it holds and what is kept of it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    seq: u64,
    replied: Replied,
}

fn kept(seq: u64, replied: Replied) -> FsResult<Vec<u8>> {
    Ok(enc(&Kept { seq, replied })?)
}

impl Txn<'_> {
    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Records, in this transaction, that client `client`'s request number `seq` changed the namespace.
    pub fn mark_applied(&mut self, client: u64, seq: u64) -> FsResult<()> {
        self.put(T::Meta, &reply_key(client, seq), kept(seq, Replied::Applied)?);
        Ok(())
    }
}

impl Store {
    /// What the reply cache holds for client `client`'s request number `seq`.
    pub fn replied(&self, client: u64, seq: u64) -> FsResult<Option<Replied>> {
        let key = reply_key(client, seq);
        let deferred = self.replicate.get().and_then(|r| {
            let d = r.deferred.lock().unwrap_or_else(|e| e.into_inner());
            d.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v.clone())
        });
        let Some(v) = deferred.map_or_else(|| self.begin().get(T::Meta, &key), |v| Ok(Some(v)))? else {
            return Ok(None);
        };
        let k: Kept = dec(&v)?;
        Ok((k.seq == seq).then_some(k.replied))
    }

    /// The highest request number of `client` the reply cache holds (0: none).
    pub fn newest_reply(&self, client: u64) -> FsResult<u64> {
        let mut newest = 0;
        for v in self.begin().scan(T::Meta, &reply_prefix(client))?.values() {
            // (A record this cannot read is not a kept reply: ignored.)
            if let Ok(k) = dec::<Kept>(v) {
                newest = newest.max(k.seq);
            }
        }
        Ok(newest)
    }

    /// Keeps the answer `r` of client `client`'s request number `seq`, in the slot of its number
    /// `seq - REPLY_WINDOW`. Replicated, it waits for the next commit ([`Replicator`]'s `deferred`).
    pub fn record_reply(&self, client: u64, seq: u64, r: &FsResult<tessera_proto::msg::MdsReply>) -> FsResult<()> {
        let (key, value) = (reply_key(client, seq), kept(seq, Replied::Answer(Box::new(r.clone())))?);
        if let Some(r) = self.replicate.get() {
            r.deferred.lock().unwrap_or_else(|e| e.into_inner()).push((key, value));
            return Ok(());
        }
        let mut tx = self.begin();
        tx.put(T::Meta, &key, value);
        tx.commit()
    }

    /// Proposes the reply-cache answers no commit took along yet (a leading replica's periodic task:
    /// while changes come, each takes the answers before it along).
    pub fn flush_deferred(&self) -> FsResult<()> {
        let mut tx = self.begin();
        // No answer waits for them.
        tx.unawaited = true;
        tx.commit()
    }

    /// Drops every reply kept for `client` (its session ended).
    pub fn forget_replies(&self, client: u64) -> FsResult<()> {
        if let Some(r) = self.replicate.get() {
            let prefix = reply_prefix(client);
            r.deferred.lock().unwrap_or_else(|e| e.into_inner()).retain(|(k, _)| !k.starts_with(&prefix));
        }
        let mut tx = self.begin();
        for k in tx.scan(T::Meta, &reply_prefix(client))?.into_keys() {
            tx.del(T::Meta, &k);
        }
        tx.commit()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn overlay_reads_own_writes_and_commits_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
        let mut tx = s.begin();
        tx.put(T::Xattrs, &xattr_key(5, "user.a"), b"1".to_vec());
        tx.put(T::Xattrs, &xattr_key(5, "user.b"), b"2".to_vec());
        tx.put(T::Meta, b"x", b"y".to_vec());
        assert_eq!(tx.get(T::Xattrs, &xattr_key(5, "user.a")).unwrap(), Some(b"1".to_vec()));
        tx.del(T::Xattrs, &xattr_key(5, "user.a"));
        assert_eq!(tx.scan(T::Xattrs, &xattr_prefix(5)).unwrap().len(), 1);
        assert!(s.tree(T::Meta).get(b"x").unwrap().is_none());
        tx.commit().unwrap();
        assert_eq!(s.tree(T::Meta).get(b"x").unwrap().unwrap().as_ref(), b"y");
        assert_eq!(s.tree(T::Xattrs).len(), 1);
        let a = s.new_id().unwrap();
        let b = s.new_id().unwrap();
        assert!(b > a && a > 0);
        assert!(s.new_ino().unwrap() > 1);
    }

    /// Ids come from ranges whose end is a committed write: a database that never saw the commits
    /// (the MDS killed before its flush), replaying the journal — as a replica applying the same
    /// writes would — hands out none twice. With sled's own counter (outside the writes) it did.
    #[test]
    fn ids_are_never_handed_out_twice_across_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let crashed = tempfile::tempdir().unwrap();
        let given: Vec<u64> = {
            let s = journaled(dir.path());
            let v = (0..10).map(|_| s.new_id().unwrap()).collect();
            copy_dir(&dir.path().join("journal"), &crashed.path().join("journal"));
            v
        };
        let crashed = crashed.path();
        let s = journaled(crashed);
        let next = s.new_id().unwrap();
        assert!(given.iter().all(|&g| g < next), "{next} after {given:?}");
        assert!(given.windows(2).all(|w| w[0] < w[1]) && given[0] >= 2);
        // The range's end went through the journal like any change.
        let mut tx = s.begin();
        let end = u64::from_be_bytes(tx.get(T::Meta, IDS_KEY).unwrap().unwrap().try_into().unwrap());
        assert!(end > next);
        tx.del(T::Meta, IDS_KEY);
        tx.commit().unwrap();
        drop(s);
        // No range recorded (a database from before the ranges) still opens and hands out ids.
        let s = journaled(crashed);
        assert!(s.new_id().unwrap() >= 2);
    }

    /// A journaling store whose periodic commit never comes during a test.
    pub(crate) fn journaled(dir: &Path) -> Store {
        Store::open_with(dir, MetadataCommit::Journal, Duration::from_secs(3600), JournalRecovery::Refuse).unwrap()
    }

    pub(crate) fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }

    pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    /// A leading replica proposes reply-cache answers with the next change's entry, not one each: a
    /// resend still finds the answer meanwhile, an idle leader proposes them by themselves, and a
    /// forgotten client's go.
    #[test]
    fn a_leaders_reply_answers_ride_with_the_next_change() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open_replicated(dir.path(), COMMIT_INTERVAL).unwrap();
        let proposals: Arc<Mutex<Vec<WriteSet>>> = Arc::default();
        let p = proposals.clone();
        let (_tx, committed) = tokio::sync::watch::channel(0);
        let propose = Box::new(move |_seq: u64, ws: WriteSet| {
            p.lock().unwrap().push(ws);
            Ok(())
        });
        s.lead(Replicator::new(propose, committed)).unwrap();
        let taken = || std::mem::take(&mut *proposals.lock().unwrap());
        let answer: FsResult<tessera_proto::msg::MdsReply> = Ok(tessera_proto::msg::MdsReply::Ok);
        s.record_reply(7, 1, &answer).unwrap();
        assert!(taken().is_empty(), "an answer alone is not proposed");
        assert!(matches!(s.replied(7, 1).unwrap(), Some(Replied::Answer(ref r)) if **r == answer));
        let mut tx = s.begin();
        tx.put(T::Xattrs, &xattr_key(5, "user.a"), b"1".to_vec());
        tx.commit().unwrap();
        let p = taken();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].len(), 2, "the change's entry carries the answer: {:?}", p[0]);
        assert!(matches!(s.replied(7, 1).unwrap(), Some(Replied::Answer(ref r)) if **r == answer), "in the store now");
        s.flush_deferred().unwrap();
        assert!(taken().is_empty(), "nothing deferred: nothing proposed");
        s.record_reply(7, 2, &answer).unwrap();
        s.flush_deferred().unwrap();
        let p = taken();
        assert_eq!((p.len(), p[0].len()), (1, 1), "an idle leader proposes it by itself");
        s.record_reply(8, 1, &answer).unwrap();
        s.forget_replies(8).unwrap();
        assert!(s.replied(8, 1).unwrap().is_none());
        s.flush_deferred().unwrap();
        assert!(taken().iter().all(|ws| ws.iter().all(|(_, k, v)| v.is_none() || !k.starts_with(&reply_prefix(8)))));
    }
}
