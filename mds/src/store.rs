//! The sled database: its trees, record types, key layouts, and a write overlay ([`Txn`]) whose
//! changes commit atomically. In `fsync` commit mode a commit is ONE sled transaction over the trees
//! it touches. In `journal` mode it is a redo-journal record (crash-safe at once) plus an entry in the
//! store's pending overlay, which every read consults first; the group-commit thread applies the whole
//! overlay to sled as one transaction and flushes it every [`COMMIT_INTERVAL`]. Why: each sled
//! transaction seals and writes sled's log buffer twice (`pin_log`), so one per metadata operation
//! cost the MDS more CPU (sled's I/O threads, sync_file_range) than the operation itself.

use crate::journal::{self, Journal, WriteSet};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sled::transaction::TransactionError;
use sled::{Db, Transactional, Tree};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;
use tessera_proto::config::MetadataCommit;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{ExtentSpec, Layout, LayoutSpec, StripeTarget};
use tessera_proto::{wire, Attr, DsId, FileKind, FsError, FsResult, Ino, ObjectId};
use tokio::sync::watch;
use tracing::{info, warn};

/// How often journaled changes are committed to the database on disk (and so survive a power loss).
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// The trees of the MDS database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum T {
    /// ino BE → [`Inode`].
    Inodes = 0,
    /// parent ino BE ++ name → [`Dentry`].
    Dentries = 1,
    /// parent ino BE ++ seq BE → name (readdir order and stable cookies).
    Dirseq = 2,
    /// dir ino BE → [`LayoutSpec`] (default layout of files created in it); dir ino BE ++ `E` →
    /// `Vec<ExtentSpec>` (a composite default, which then replaces the plain one).
    DirLayouts = 3,
    /// ino BE ++ 0 ++ name → value.
    Xattrs = 4,
    /// Job registry (reserved).
    Jobs = 5,
    /// id BE → [`DestroyEntry`]: objects still to remove from a data server.
    Destroy = 6,
    /// Format version, orphan markers (`orphan` ++ ino BE).
    Meta = 7,
}

const TREE_NAMES: [&str; 8] = ["inodes", "dentries", "dirseq", "dir_layouts", "xattrs", "jobs", "destroy_log", "meta"];
const ORPHAN_PREFIX: &[u8] = b"orphan";
const FORMAT_KEY: &[u8] = b"format";
/// 2: layouts carry composite extents ([`Layout::extents`]); v1 databases are migrated in place on open
/// ([`migrate_v1`]).
const FORMAT_VERSION: u32 = 2;
/// Suffix of a directory's composite default in [`T::DirLayouts`].
const COMPOSITE_SUFFIX: u8 = b'E';

/// One inode: its attributes plus what only some kinds have.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Inode {
    pub attr: Attr,
    /// Regular files: where the data lives.
    pub layout: Option<Layout>,
    /// Symlinks: the target.
    pub target: Option<String>,
    /// Directories: the parent directory (`..`); the root is its own parent. Unused for other kinds.
    pub parent: Ino,
}

/// A directory entry's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dentry {
    pub ino: Ino,
    pub kind: FileKind,
    /// Position in the directory's `dirseq` (the readdir cookie).
    pub seq: u64,
}

/// Objects of one data server waiting to be removed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DestroyEntry {
    pub ds: DsId,
    pub objects: Vec<ObjectId>,
}

pub fn ino_key(ino: Ino) -> [u8; 8] {
    ino.to_be_bytes()
}

pub fn dentry_key(parent: Ino, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn dirseq_key(parent: Ino, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&parent.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn xattr_prefix(ino: Ino) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.extend_from_slice(&ino.to_be_bytes());
    k.push(0);
    k
}

pub fn xattr_key(ino: Ino, name: &str) -> Vec<u8> {
    let mut k = xattr_prefix(ino);
    k.extend_from_slice(name.as_bytes());
    k
}

fn orphan_key(ino: Ino) -> Vec<u8> {
    let mut k = ORPHAN_PREFIX.to_vec();
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

/// The inode a record of `t` belongs to (the first 8 bytes of its key), for the trees keyed by inode.
pub fn key_ino(key: &[u8]) -> Option<Ino> {
    key.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

fn composite_key(ino: Ino) -> [u8; 9] {
    let mut k = [COMPOSITE_SUFFIX; 9];
    k[..8].copy_from_slice(&ino.to_be_bytes());
    k
}

/// Format 1's inode record: layouts without extents.
#[derive(Serialize, Deserialize)]
struct InodeV1 {
    attr: Attr,
    layout: Option<LayoutV1>,
    target: Option<String>,
    parent: Ino,
}

#[derive(Serialize, Deserialize)]
struct LayoutV1 {
    stripe_size: u64,
    targets: Vec<StripeTarget>,
}

/// Rewrites every format-1 inode record of `inodes` in the current format (a v1 layout is a plain
/// layout: one extent to EOF), as one atomic batch. A record that already decodes only as the current
/// format (a migration interrupted after its batch, before the format key) is left as it is; v1 and v2
/// records differ only for files, and a v2 file record read as v1 always leaves trailing bytes.
/// Returns how many records held a layout.
fn migrate_v1(inodes: &Tree) -> FsResult<usize> {
    let mut batch = sled::Batch::default();
    let mut layouts = 0;
    for kv in inodes.iter() {
        let (k, v) = kv.map_err(db_err)?;
        let new = match wire::decode::<InodeV1>(&v) {
            Ok(old) => Inode {
                attr: old.attr,
                layout: old.layout.map(|l| Layout::plain(l.stripe_size, l.targets)),
                target: old.target,
                parent: old.parent,
            },
            Err(_) => dec::<Inode>(&v)?,
        };
        layouts += usize::from(new.layout.is_some());
        batch.insert(k, enc(&new)?);
    }
    inodes.apply_batch(batch).map_err(db_err)?;
    Ok(layouts)
}

pub fn db_err(e: impl std::fmt::Display) -> FsError {
    FsError::io(format!("metadata database: {e}"))
}

fn enc<V: Serialize>(v: &V) -> FsResult<Vec<u8>> {
    wire::encode(v).map_err(db_err)
}

fn dec<V: DeserializeOwned>(b: &[u8]) -> FsResult<V> {
    wire::decode(b).map_err(|e| db_err(format!("corrupt record: {e}")))
}

pub struct Store {
    db: Db,
    trees: Vec<Tree>,
    inode_count: AtomicI64,
    /// Set in [`MetadataCommit::Journal`] mode.
    journal: Option<Arc<Mutex<Journal>>>,
    /// Journaled changes not yet applied to sled (journal mode).
    overlay: Arc<Overlay>,
    flusher: GroupCommit,
}

type Key = (T, Vec<u8>);
/// A pending value (None: deleted) with the commit that wrote it.
type Versioned = (u64, Option<Vec<u8>>);
/// A key with its pending value (None: deleted).
type PendingEntry = (Vec<u8>, Option<Vec<u8>>);

/// The latest journaled value of each key sled does not have yet, with the commit that wrote it.
#[derive(Default)]
struct Pending {
    map: BTreeMap<Key, Versioned>,
    commits: u64,
}

/// The pending overlay, and the lock that lets one apply run at a time: two overlapping applies could
/// write an older snapshot's value after a newer one was applied and dropped from the overlay.
#[derive(Default)]
struct Overlay {
    pending: RwLock<Pending>,
    applying: Mutex<()>,
}

fn read_pending(p: &RwLock<Pending>) -> std::sync::RwLockReadGuard<'_, Pending> {
    p.read().unwrap_or_else(|e| e.into_inner())
}

fn write_pending(p: &RwLock<Pending>) -> std::sync::RwLockWriteGuard<'_, Pending> {
    p.write().unwrap_or_else(|e| e.into_inner())
}

/// Applies `writes` to sled as one transaction over the trees they touch.
fn apply_writes<'w>(
    trees: &[Tree],
    writes: impl Iterator<Item = (&'w Key, &'w Option<Vec<u8>>)> + Clone,
) -> FsResult<()> {
    let mut involved: Vec<T> = writes.clone().map(|((t, _), _)| *t).collect();
    involved.sort();
    involved.dedup();
    if involved.is_empty() {
        return Ok(());
    }
    let view_trees: Vec<Tree> = involved.iter().map(|t| trees[*t as usize].clone()).collect();
    let res: Result<(), TransactionError<()>> = view_trees.as_slice().transaction(|view| {
        for ((t, k), v) in writes.clone() {
            let idx = involved.iter().position(|x| x == t).unwrap_or(0);
            match v {
                Some(v) => {
                    view[idx].insert(k.as_slice(), v.as_slice())?;
                }
                None => {
                    view[idx].remove(k.as_slice())?;
                }
            }
        }
        Ok(())
    });
    res.map_err(|e| db_err(format!("commit: {e:?}")))
}

/// Moves everything pending into sled (one transaction); entries rewritten meanwhile stay pending.
fn apply_pending(trees: &[Tree], overlay: &Overlay) -> FsResult<()> {
    let _one_at_a_time = overlay.applying.lock().unwrap_or_else(|e| e.into_inner());
    let pending = &overlay.pending;
    let snapshot: Vec<(Key, Versioned)> =
        read_pending(pending).map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if snapshot.is_empty() {
        return Ok(());
    }
    apply_writes(trees, snapshot.iter().map(|(k, (_, v))| (k, v)))?;
    let mut p = write_pending(pending);
    for (k, (commit, _)) in &snapshot {
        if p.map.get(k).is_some_and(|(c, _)| c == commit) {
            p.map.remove(k);
        }
    }
    Ok(())
}

/// Keys from `start` on that begin with `prefix`, with values: sled merged with a snapshot of the
/// pending overlay (which wins; its deletions hide sled's keys).
pub struct Scan {
    sled: sled::Iter,
    prefix: Vec<u8>,
    sled_head: Option<(Vec<u8>, Vec<u8>)>,
    sled_done: bool,
    pending: std::iter::Peekable<std::vec::IntoIter<PendingEntry>>,
}

impl Iterator for Scan {
    type Item = FsResult<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.sled_head.is_none() && !self.sled_done {
                match self.sled.next() {
                    Some(Ok((k, v))) if k.starts_with(&self.prefix) => self.sled_head = Some((k.to_vec(), v.to_vec())),
                    Some(Err(e)) => return Some(Err(db_err(e))),
                    _ => self.sled_done = true,
                }
            }
            let pending_first = match (self.pending.peek(), &self.sled_head) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((pk, _)), Some((sk, _))) => pk <= sk,
            };
            if !pending_first {
                return self.sled_head.take().map(Ok);
            }
            let (k, v) = self.pending.next()?;
            if self.sled_head.as_ref().is_some_and(|(sk, _)| *sk == k) {
                self.sled_head = None;
            }
            if let Some(v) = v {
                return Some(Ok((k, v)));
            }
        }
    }
}

/// Group commit on a dedicated thread: on request, and every [`COMMIT_INTERVAL`] while the journal
/// holds changes. (sled 0.34's `flush_async` deadlocks under concurrent callers — sled issue
/// #1308 — so we batch waiters onto synchronous `flush` calls ourselves.)
struct GroupCommit {
    /// Tickets handed out; a flush that starts after ticket t was taken covers t.
    next: Arc<AtomicU64>,
    pending: Arc<(Mutex<FlushCtl>, Condvar)>,
    done: watch::Receiver<FlushState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct FlushCtl {
    wanted: bool,
    shutdown: bool,
}

#[derive(Clone, Default)]
struct FlushState {
    /// Highest ticket known durable (or failed, with `error`).
    done: u64,
    error: Option<Arc<str>>,
}

impl GroupCommit {
    fn start(
        db: Db,
        trees: Vec<Tree>,
        overlay: Arc<Overlay>,
        journal: Option<Arc<Mutex<Journal>>>,
        interval: Duration,
    ) -> FsResult<GroupCommit> {
        let next = Arc::new(AtomicU64::new(0));
        let pending = Arc::new((Mutex::new(FlushCtl::default()), Condvar::new()));
        let (tx, done) = watch::channel(FlushState::default());
        let (n, p) = (next.clone(), pending.clone());
        let jdir = journal.as_ref().map(|j| j.lock().unwrap_or_else(|e| e.into_inner()).dir().to_path_buf());
        let thread = std::thread::Builder::new()
            .name("mds-flush".into())
            .spawn(move || loop {
                let (requested, last) = {
                    let (m, cv) = &*p;
                    let mut ctl = m.lock().unwrap_or_else(|e| e.into_inner());
                    if !ctl.wanted && !ctl.shutdown {
                        ctl = match &journal {
                            Some(_) => cv.wait_timeout(ctl, interval).unwrap_or_else(|e| e.into_inner()).0,
                            None => cv.wait(ctl).unwrap_or_else(|e| e.into_inner()),
                        };
                    }
                    // Shutting down: one last commit empties the journal.
                    (std::mem::take(&mut ctl.wanted) || ctl.shutdown, ctl.shutdown)
                };
                let target = n.load(Ordering::SeqCst);
                // Segments up to `retire` hold only changes the flush below makes durable.
                let retire = match &journal {
                    Some(j) => match j.lock().unwrap_or_else(|e| e.into_inner()).rotate() {
                        Ok(r) => r,
                        Err(e) => {
                            warn!("metadata journal: cannot start a new segment: {e}");
                            None
                        }
                    },
                    None => None,
                };
                if !requested && retire.is_none() && read_pending(&overlay.pending).map.is_empty() {
                    continue; // periodic wake-up with nothing journaled
                }
                // The rotation took the journal's lock, so every change journaled before it is pending
                // (or applied) now: the flush below covers the segments up to `retire`.
                let applied = apply_pending(&trees, &overlay);
                let error = applied.and_then(|()| db.flush().map(|_| ()).map_err(db_err)).err();
                let error = error.map(|e| Arc::from(e.to_string()));
                if let (None, Some(upto), Some(dir)) = (&error, retire, &jdir) {
                    if let Err(e) = journal::retire(dir, upto) {
                        warn!("metadata journal: cannot delete committed segments: {e}");
                    }
                }
                tx.send_replace(FlushState { done: target, error });
                if last {
                    return;
                }
            })
            .map_err(|e| FsError::io(format!("flush thread: {e}")))?;
        Ok(GroupCommit { next, pending, done, thread: Some(thread) })
    }

    async fn flush(&self) -> FsResult<()> {
        let ticket = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let (m, cv) = &*self.pending;
            m.lock().unwrap_or_else(|e| e.into_inner()).wanted = true;
            cv.notify_one();
        }
        let mut rx = self.done.clone();
        let state =
            rx.wait_for(|s| s.done >= ticket).await.map_err(|_| FsError::io("metadata flush thread stopped"))?.clone();
        match state.error {
            Some(e) => Err(db_err(format!("flush: {e}"))),
            None => Ok(()),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.pending;
            m.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Store {
    /// Opens (or creates) the database in `dir`, replaying what the journal holds beyond it.
    pub fn open(dir: &Path, commit: MetadataCommit) -> FsResult<Store> {
        Store::open_with(dir, commit, COMMIT_INTERVAL, JournalRecovery::Refuse)
    }

    /// [`Store::open`] with another periodic commit interval (tests) and what to do with a corrupt journal.
    pub fn open_with(
        dir: &Path,
        commit: MetadataCommit,
        interval: Duration,
        recovery: JournalRecovery,
    ) -> FsResult<Store> {
        std::fs::create_dir_all(dir).map_err(|e| FsError::io(format!("{}: {e}", dir.display())))?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(256 << 20)
            .flush_every_ms(Some(500))
            .open()
            .map_err(|e| FsError::io(format!("open metadata database {}: {e}", dir.display())))?;
        let trees = TREE_NAMES.iter().map(|n| db.open_tree(n)).collect::<Result<Vec<_>, _>>().map_err(db_err)?;
        let jdir = dir.join("journal");
        let next_segment = replay_journal(&db, &trees, &jdir, recovery)?;
        let journal = match commit {
            MetadataCommit::Journal => Some(Arc::new(Mutex::new(
                Journal::create(&jdir, next_segment)
                    .map_err(|e| FsError::io(format!("metadata journal {}: {e}", jdir.display())))?,
            ))),
            MetadataCommit::Fsync => None,
        };
        let overlay = Arc::new(Overlay::default());
        let flusher = GroupCommit::start(db.clone(), trees.clone(), overlay.clone(), journal.clone(), interval)?;
        let store = Store { db, trees, inode_count: AtomicI64::new(0), journal, overlay, flusher };
        let meta = store.tree(T::Meta);
        match meta.get(FORMAT_KEY).map_err(db_err)? {
            None => {
                meta.insert(FORMAT_KEY, enc(&FORMAT_VERSION)?).map_err(db_err)?;
            }
            Some(v) => {
                let ver: u32 = dec(&v)?;
                if ver == 1 {
                    let n = migrate_v1(store.tree(T::Inodes))?;
                    meta.insert(FORMAT_KEY, enc(&FORMAT_VERSION)?).map_err(db_err)?;
                    store.db.flush().map_err(db_err)?;
                    info!(
                        "metadata database {} migrated from format 1 to {FORMAT_VERSION} ({n} layouts)",
                        dir.display()
                    );
                } else if ver != FORMAT_VERSION {
                    return Err(FsError::invalid(format!(
                        "metadata database {} has format {ver}, this server understands {FORMAT_VERSION}",
                        dir.display()
                    )));
                }
            }
        }
        store.inode_count.store(store.tree(T::Inodes).len() as i64, Ordering::Relaxed);
        Ok(store)
    }

    pub fn tree(&self, t: T) -> &Tree {
        &self.trees[t as usize]
    }

    /// A fresh id from sled's persistent monotonic counter (never 0).
    pub fn new_id(&self) -> FsResult<u64> {
        Ok(self.db.generate_id().map_err(db_err)? + 1)
    }

    /// A fresh inode number (never the root's).
    pub fn new_ino(&self) -> FsResult<Ino> {
        Ok(self.db.generate_id().map_err(db_err)? + 2)
    }

    pub fn inode_count(&self) -> u64 {
        self.inode_count.load(Ordering::Relaxed).max(0) as u64
    }

    /// Whether every change must be fsync'ed before it is acknowledged ([`MetadataCommit::Fsync`]).
    pub fn sync_commits(&self) -> bool {
        self.journal.is_none()
    }

    /// Makes every committed change durable. Concurrent callers share one fsync (group commit).
    pub async fn flush(&self) -> FsResult<()> {
        self.flusher.flush().await
    }

    pub fn flush_sync(&self) -> FsResult<()> {
        apply_pending(&self.trees, &self.overlay)?;
        self.db.flush().map(|_| ()).map_err(db_err)
    }

    /// The committed value of a key (pending overlay first, then sled).
    pub fn read(&self, t: T, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        // Usually empty (always in fsync mode): then no key copy for the lookup.
        let pending = read_pending(&self.overlay.pending);
        if !pending.map.is_empty() {
            if let Some((_, v)) = pending.map.get(&(t, key.to_vec())) {
                return Ok(v.clone());
            }
        }
        drop(pending);
        Ok(self.tree(t).get(key).map_err(db_err)?.map(|v| v.to_vec()))
    }

    /// Committed keys from `start` on that begin with `prefix` (see [`Scan`]).
    pub fn scan_from(&self, t: T, start: &[u8], prefix: &[u8]) -> Scan {
        let pending: Vec<PendingEntry> = read_pending(&self.overlay.pending)
            .map
            .range((t, start.to_vec())..)
            .take_while(|((pt, k), _)| *pt == t && k.starts_with(prefix))
            .map(|((_, k), (_, v))| (k.clone(), v.clone()))
            .collect();
        Scan {
            sled: self.tree(t).range(start.to_vec()..),
            prefix: prefix.to_vec(),
            sled_head: None,
            sled_done: false,
            pending: pending.into_iter().peekable(),
        }
    }

    /// A read view / write overlay. Reads see the overlay's own writes first.
    pub fn begin(&self) -> Txn<'_> {
        Txn { store: self, writes: BTreeMap::new(), inode_delta: 0, destroys: 0 }
    }

    /// Inodes marked as orphans (unlinked while open).
    pub fn orphans(&self) -> FsResult<Vec<Ino>> {
        let mut out = Vec::new();
        for kv in self.scan_from(T::Meta, ORPHAN_PREFIX, ORPHAN_PREFIX) {
            let (k, _) = kv?;
            if let Ok(b) = <[u8; 8]>::try_from(&k[ORPHAN_PREFIX.len()..]) {
                out.push(u64::from_be_bytes(b));
            }
        }
        Ok(out)
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
}

impl<'a> Txn<'a> {
    pub fn store(&self) -> &'a Store {
        self.store
    }

    pub fn get(&self, t: T, key: &[u8]) -> FsResult<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(&(t, key.to_vec())) {
            return Ok(v.clone());
        }
        self.store.read(t, key)
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
        self.get(T::Inodes, &ino_key(ino))?.map(|b| dec(&b)).transpose()
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

    /// Writes an inode that already exists.
    pub fn put_inode(&mut self, i: &Inode) -> FsResult<()> {
        let v = enc(i)?;
        self.put(T::Inodes, &ino_key(i.attr.ino), v);
        Ok(())
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
            self.queue_destroy(l)?;
        }
        Ok(())
    }

    /// Puts a layout's objects into the destroy log, one entry per data server.
    pub fn queue_destroy(&mut self, l: &Layout) -> FsResult<()> {
        let mut per: BTreeMap<DsId, Vec<ObjectId>> = BTreeMap::new();
        for t in l.all_targets() {
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
        self.get(T::Dentries, &dentry_key(parent, name))?.map(|b| dec(&b)).transpose()
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
        self.get(T::DirLayouts, &ino_key(ino))?.map(|b| dec(&b)).transpose()
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
        self.get(T::DirLayouts, &composite_key(ino))?.map(|b| dec(&b)).transpose()
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

    /// Commits every write atomically: one sled transaction (fsync mode), or a journal record plus
    /// the pending overlay (journal mode; see the module docs).
    pub fn commit(self) -> FsResult<()> {
        if self.writes.is_empty() {
            return Ok(());
        }
        let store = self.store;
        let Some(j) = &store.journal else {
            apply_writes(&store.trees, self.writes.iter())?;
            store.inode_count.fetch_add(self.inode_delta, Ordering::Relaxed);
            return Ok(());
        };
        let ws: WriteSet = self.writes.iter().map(|((t, k), v)| (*t as u8, k.clone(), v.clone())).collect();
        let mut journal = j.lock().unwrap_or_else(|e| e.into_inner());
        let appended = journal.append(ws);
        {
            // Under the journal's lock: a rotation sees every record it closes in the overlay.
            let mut p = write_pending(&store.overlay.pending);
            p.commits += 1;
            let commit = p.commits;
            for (k, v) in self.writes {
                p.map.insert(k, (commit, v));
            }
        }
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

/// What start-up does when a journal segment other than the newest ends before its last byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JournalRecovery {
    /// Refuse to start, naming the segment and offset: the segments after it hold acknowledged changes
    /// that were made on top of what is lost, and applying them past the hole would be inconsistent.
    #[default]
    Refuse,
    /// Skip the rest of that segment (logged with the segment and offset) and replay the others: the
    /// operator's explicit choice (`tessera-mds --skip-corrupt-journal`).
    SkipCorrupt,
}

/// Applies the journal segments a crash left behind (oldest first), makes the result durable and
/// deletes them. Returns the number for the next segment. Only the newest segment may end torn (the
/// write(2) a crash interrupted, never acknowledged); a cut anywhere else is corruption, and nothing is
/// applied or deleted unless `recovery` says to skip it.
fn replay_journal(db: &Db, trees: &[Tree], dir: &Path, recovery: JournalRecovery) -> FsResult<u64> {
    let jerr = |e: std::io::Error| FsError::io(format!("metadata journal {}: {e}", dir.display()));
    let segs = journal::segments(dir).map_err(jerr)?;
    let Some(&(last, _)) = segs.last() else { return Ok(1) };
    // Read everything first: a refusal must leave the database and the journal as they are.
    let mut read = Vec::with_capacity(segs.len());
    let mut torn = 0usize;
    for (seg, path) in &segs {
        let s = journal::read_segment(path).map_err(jerr)?;
        if let Some(cut) = &s.cut {
            let at = format!("journal segment {} at offset {}: {}", path.display(), cut.offset, cut.why);
            if *seg == last {
                torn += 1;
                info!("torn tail cut off (a write the crash interrupted, never acknowledged): {at}");
            } else if recovery == JournalRecovery::SkipCorrupt {
                tracing::warn!("skipping the rest of a corrupt {at} (--skip-corrupt-journal)");
            } else {
                return Err(FsError::io(format!(
                    "corrupt {at}; later segments hold acknowledged changes, so the metadata server will not \
                     start past it (inspect or restore the journal, or start with --skip-corrupt-journal to \
                     drop the rest of this segment)"
                )));
            }
        }
        read.push(s.records);
    }
    let mut records = 0usize;
    for ws in read.into_iter().flatten() {
        for (t, k, v) in ws {
            let tree = trees.get(t as usize).ok_or_else(|| db_err(format!("journal names tree {t}")))?;
            match v {
                Some(v) => tree.insert(k, v),
                None => tree.remove(k),
            }
            .map_err(db_err)?;
        }
        records += 1;
    }
    db.flush().map_err(db_err)?;
    journal::retire(dir, last).map_err(jerr)?;
    info!(segments = segs.len(), records, torn_tails = torn, "metadata journal replayed");
    Ok(last + 1)
}

#[cfg(test)]
mod tests {
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

    /// A journaling store whose periodic commit never comes during a test.
    fn journaled(dir: &Path) -> Store {
        Store::open_with(dir, MetadataCommit::Journal, Duration::from_secs(3600), JournalRecovery::Refuse).unwrap()
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }

    #[test]
    fn journal_replays_acknowledged_changes_the_database_lacks() {
        let live = tempfile::tempdir().unwrap();
        let s = journaled(live.path());
        let mut tx = s.begin();
        tx.put(T::Meta, b"kept", b"1".to_vec());
        tx.put(T::Meta, b"gone", b"2".to_vec());
        tx.commit().unwrap();
        let mut tx = s.begin();
        tx.del(T::Meta, b"gone");
        tx.put(T::Xattrs, &xattr_key(9, "user.x"), b"v".to_vec());
        tx.commit().unwrap();
        // A database that never saw those commits (as if the MDS died before its fsync) plus the journal.
        let crashed = tempfile::tempdir().unwrap();
        copy_dir(&live.path().join("journal"), &crashed.path().join("journal"));
        {
            let r = Store::open(crashed.path(), MetadataCommit::Journal).unwrap();
            assert_eq!(r.tree(T::Meta).get(b"kept").unwrap().unwrap().as_ref(), b"1");
            assert!(r.tree(T::Meta).get(b"gone").unwrap().is_none());
            assert_eq!(r.tree(T::Xattrs).len(), 1);
            assert!(journal::segments(&crashed.path().join("journal"))
                .unwrap()
                .iter()
                .all(|(_, p)| { std::fs::metadata(p).unwrap().len() == 0 }));
        }
        // Replaying again over a database that has everything changes nothing.
        copy_dir(&live.path().join("journal"), &crashed.path().join("journal"));
        let r = Store::open(crashed.path(), MetadataCommit::Fsync).unwrap();
        assert_eq!(r.tree(T::Meta).get(b"kept").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"gone").unwrap().is_none());
        drop(s);
    }

    /// Only the last segment may end torn (the write(2) a crash interrupted); a cut in an earlier one is
    /// corruption, and replaying the segments after it would apply changes past a hole.
    #[test]
    fn a_cut_before_the_last_segment_refuses_start_up() {
        let live = tempfile::tempdir().unwrap();
        let jdir = live.path().join("journal");
        let mut j = Journal::create(&jdir, 1).unwrap();
        j.append(vec![(T::Meta as u8, b"one".to_vec(), Some(b"1".to_vec()))]).unwrap();
        j.append(vec![(T::Meta as u8, b"two".to_vec(), Some(b"2".to_vec()))]).unwrap();
        j.rotate().unwrap();
        j.append(vec![(T::Meta as u8, b"three".to_vec(), Some(b"3".to_vec()))]).unwrap();
        drop(j);
        let segs = journal::segments(&jdir).unwrap();
        let first = &segs[0].1;
        let mut bytes = std::fs::read(first).unwrap();
        let second_at = bytes.len() / 2;
        let n = bytes.len();
        bytes[n - 1] ^= 0xff; // the second record's payload: its CRC fails
        std::fs::write(first, &bytes).unwrap();
        let crashed = tempfile::tempdir().unwrap();
        copy_dir(&jdir, &crashed.path().join("journal"));
        let e = Store::open(crashed.path(), MetadataCommit::Journal).err().expect("start-up must refuse");
        let name = first.file_name().unwrap().to_str().unwrap();
        assert!(e.detail.contains(name), "names the segment: {}", e.detail);
        assert!(e.detail.contains(&format!("offset {second_at}")), "names the offset: {}", e.detail);
        // Nothing was applied or deleted: the operator can still decide.
        assert_eq!(journal::segments(&crashed.path().join("journal")).unwrap().len(), 2);
        // The operator's explicit choice: the intact records of both segments are replayed.
        let r = Store::open_with(crashed.path(), MetadataCommit::Fsync, COMMIT_INTERVAL, JournalRecovery::SkipCorrupt)
            .unwrap();
        assert_eq!(r.tree(T::Meta).get(b"one").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"two").unwrap().is_none(), "the corrupt record is dropped");
        assert_eq!(r.tree(T::Meta).get(b"three").unwrap().unwrap().as_ref(), b"3");
    }

    /// A torn tail of the newest segment is what a crash leaves: start-up cuts it and goes on.
    #[test]
    fn a_torn_tail_of_the_newest_segment_is_cut() {
        let live = tempfile::tempdir().unwrap();
        let jdir = live.path().join("journal");
        let mut j = Journal::create(&jdir, 1).unwrap();
        j.append(vec![(T::Meta as u8, b"one".to_vec(), Some(b"1".to_vec()))]).unwrap();
        j.append(vec![(T::Meta as u8, b"two".to_vec(), Some(b"2".to_vec()))]).unwrap();
        drop(j);
        let path = journal::segments(&jdir).unwrap()[0].1.clone();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let r = Store::open(live.path(), MetadataCommit::Fsync).unwrap();
        assert_eq!(r.tree(T::Meta).get(b"one").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"two").unwrap().is_none());
    }

    #[test]
    fn journaled_commits_are_read_from_the_overlay_until_applied() {
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let mut tx = s.begin();
        for n in ["a", "b", "c"] {
            tx.put(T::Xattrs, &xattr_key(7, n), n.as_bytes().to_vec());
        }
        tx.commit().unwrap();
        // Applied to sled by the commit thread only: sled lacks them, every read path sees them.
        assert_eq!(s.tree(T::Xattrs).len(), 0);
        assert_eq!(s.read(T::Xattrs, &xattr_key(7, "b")).unwrap(), Some(b"b".to_vec()));
        s.flush_sync().unwrap();
        assert_eq!(s.tree(T::Xattrs).len(), 3);
        // Pending changes over applied ones: a deletion hides sled's key, an insert joins in order.
        let mut tx = s.begin();
        tx.del(T::Xattrs, &xattr_key(7, "b"));
        tx.put(T::Xattrs, &xattr_key(7, "bb"), b"new".to_vec());
        tx.put(T::Xattrs, &xattr_key(7, "a"), b"A".to_vec());
        tx.commit().unwrap();
        let names = |s: &Store| -> Vec<(Vec<u8>, Vec<u8>)> {
            s.scan_from(T::Xattrs, &xattr_prefix(7), &xattr_prefix(7)).map(|kv| kv.unwrap()).collect()
        };
        let want = vec![
            (xattr_key(7, "a"), b"A".to_vec()),
            (xattr_key(7, "bb"), b"new".to_vec()),
            (xattr_key(7, "c"), b"c".to_vec()),
        ];
        assert_eq!(names(&s), want);
        assert_eq!(s.begin().scan(T::Xattrs, &xattr_prefix(7)).unwrap().len(), 3);
        // Starting mid-range, and a prefix that matches nothing.
        let from_b: Vec<_> =
            s.scan_from(T::Xattrs, &xattr_key(7, "b"), &xattr_prefix(7)).map(|kv| kv.unwrap()).collect();
        assert_eq!(from_b, want[1..].to_vec());
        assert_eq!(s.scan_from(T::Xattrs, &xattr_prefix(8), &xattr_prefix(8)).count(), 0);
        block_on(s.flush()).unwrap();
        assert_eq!(names(&s), want);
        assert_eq!(s.tree(T::Xattrs).len(), 3);
        assert!(read_pending(&s.overlay.pending).map.is_empty());
        // A newer pending value wins over the one sled has.
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"1".to_vec());
        tx.commit().unwrap();
        s.flush_sync().unwrap();
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"2".to_vec());
        tx.commit().unwrap();
        assert_eq!(s.tree(T::Meta).get(b"k").unwrap().unwrap().as_ref(), b"1");
        assert_eq!(s.read(T::Meta, b"k").unwrap(), Some(b"2".to_vec()));
        s.flush_sync().unwrap();
        assert_eq!(s.tree(T::Meta).get(b"k").unwrap().unwrap().as_ref(), b"2");
    }

    /// Writers commit while two threads apply the overlay to sled again and again: every reader sees its own
    /// latest writes throughout, and in the end sled holds exactly the last value of every key.
    #[test]
    fn overlay_stays_consistent_while_it_is_applied_concurrently() {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let done = std::sync::atomic::AtomicBool::new(false);
        let models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = std::thread::scope(|sc| {
            // Two appliers, as when the commit thread's tick meets a synchronous flush.
            for _ in 0..2 {
                sc.spawn(|| {
                    while !done.load(Ordering::Acquire) {
                        s.flush_sync().unwrap();
                    }
                });
            }
            let writers: Vec<_> = (0..4u8)
                .map(|w| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(w));
                        let mut model = BTreeMap::new();
                        for n in 0..400u32 {
                            let mut tx = s.begin();
                            for _ in 0..rng.gen_range(1..4) {
                                let key = vec![w, rng.gen_range(0..16u8)];
                                let v = rng.gen_bool(0.7).then(|| n.to_be_bytes().to_vec());
                                match &v {
                                    Some(v) => tx.put(T::Xattrs, &key, v.clone()),
                                    None => tx.del(T::Xattrs, &key),
                                }
                                model.insert(key, v);
                            }
                            tx.commit().unwrap();
                            let key = vec![w, rng.gen_range(0..16u8)];
                            assert_eq!(s.read(T::Xattrs, &key).unwrap(), model.get(&key).cloned().flatten());
                            let scanned: BTreeMap<Vec<u8>, Vec<u8>> =
                                s.scan_from(T::Xattrs, &[w], &[w]).map(|kv| kv.unwrap()).collect();
                            let live: BTreeMap<Vec<u8>, Vec<u8>> =
                                model.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
                            assert_eq!(scanned, live, "writer {w} after commit {n}");
                        }
                        model
                    })
                })
                .collect();
            let joined: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
            // Stop the applier before a failed writer's panic is passed on (else the scope waits forever).
            done.store(true, Ordering::Release);
            joined.into_iter().map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        });
        s.flush_sync().unwrap();
        assert!(read_pending(&s.overlay.pending).map.is_empty());
        let want: BTreeMap<Vec<u8>, Vec<u8>> =
            models.iter().flatten().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
        let in_sled: BTreeMap<Vec<u8>, Vec<u8>> =
            s.tree(T::Xattrs).iter().map(|kv| kv.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(in_sled, want);
    }

    #[test]
    fn flush_retires_journal_segments() {
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"v".to_vec());
        tx.commit().unwrap();
        let jdir = dir.path().join("journal");
        let bytes = |d: &Path| {
            journal::segments(d).unwrap().iter().map(|(_, p)| std::fs::metadata(p).unwrap().len()).sum::<u64>()
        };
        assert!(bytes(&jdir) > 0);
        block_on(s.flush()).unwrap();
        assert_eq!(bytes(&jdir), 0, "a durable database needs no journal");
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    #[test]
    fn a_format_1_database_is_migrated_and_its_layouts_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let target = |ds, object| StripeTarget { ds, object };
        let file = |ino: Ino, targets: Vec<StripeTarget>| InodeV1 {
            attr: Attr::new(ino, FileKind::File, 0o644, 0, 0, tessera_proto::Timestamp::now()),
            layout: Some(LayoutV1 { stripe_size: 65536, targets }),
            target: None,
            parent: 1,
        };
        {
            // A database as format 1 wrote it.
            let db = sled::open(dir.path()).unwrap();
            let inodes = db.open_tree(TREE_NAMES[T::Inodes as usize]).unwrap();
            inodes.insert(ino_key(10), wire::encode(&file(10, vec![target(0, 7), target(1, 8)])).unwrap()).unwrap();
            inodes.insert(ino_key(11), wire::encode(&file(11, vec![target(2, 9)])).unwrap()).unwrap();
            let d = InodeV1 {
                attr: Attr::new(12, FileKind::Dir, 0o755, 0, 0, tessera_proto::Timestamp::now()),
                layout: None,
                target: None,
                parent: 1,
            };
            inodes.insert(ino_key(12), wire::encode(&d).unwrap()).unwrap();
            let meta = db.open_tree(TREE_NAMES[T::Meta as usize]).unwrap();
            meta.insert(FORMAT_KEY, wire::encode(&1u32).unwrap()).unwrap();
            db.flush().unwrap();
        }
        for _ in 0..2 {
            // Opened twice: the second open finds format 2 and changes nothing.
            let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
            let rd = s.begin();
            let l = rd.inode(10).unwrap().layout.unwrap();
            assert_eq!(l, Layout::plain(65536, vec![target(0, 7), target(1, 8)]));
            assert!(!l.is_composite());
            assert_eq!(rd.inode(11).unwrap().layout.unwrap().targets, vec![target(2, 9)]);
            assert!(rd.inode(12).unwrap().layout.is_none());
            let ver: u32 = dec(&s.tree(T::Meta).get(FORMAT_KEY).unwrap().unwrap()).unwrap();
            assert_eq!(ver, FORMAT_VERSION);
        }
        // An interrupted migration (records already rewritten, format key still 1) completes.
        let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
        s.tree(T::Meta).insert(FORMAT_KEY, enc(&1u32).unwrap()).unwrap();
        assert_eq!(migrate_v1(s.tree(T::Inodes)).unwrap(), 2);
        assert_eq!(s.begin().inode(10).unwrap().layout.unwrap().targets.len(), 2);
    }
}
