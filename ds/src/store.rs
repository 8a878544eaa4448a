//! The object store: one file per object under `objects/<xx>/<16 hex digits>` in the data directory.
//!
//! All file I/O is positional (`pread`/`pwrite`) on cached open handles and runs on tokio's blocking
//! pool; no lock is held while the device works.
//!
//! Large writes go around the page cache (`O_DIRECT`): on the VMs we measure on, a buffered write into
//! fresh page-cache memory ran at a third of the device's direct rate (see the README). Reads, small
//! writes and the unaligned ends of large ones stay buffered; the kernel keeps the two paths coherent.
//! Data just written is then not in the page cache; the [`WriteCache`] keeps it for reads instead.

use crate::write_cache::{CacheStats, WriteCache};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tessera_proto::error::ErrorCode;
use tessera_proto::fileio::pread_append;
use tessera_proto::{DsId, FsError, FsResult, ObjectId};

/// Largest object the store accepts (offset + length beyond it is EFBIG).
pub const MAX_OBJECT_SIZE: u64 = 1 << 50;
/// Bytes of recently written data kept for reads by default.
pub const DEFAULT_WRITE_CACHE: u64 = 256 << 20;
/// Open handles kept by default.
pub const DEFAULT_OPEN_FILES: usize = 512;

/// Writes at least this long are written with `O_DIRECT` (their aligned middle part).
pub const DIRECT_WRITE_MIN: usize = 128 << 10;
/// Alignment of `O_DIRECT` transfers: memory, offset and length (covers 512- and 4096-byte sectors).
pub const DIRECT_ALIGN: usize = 4096;
/// Unaligned data is copied into an aligned buffer of this size at a time.
const BOUNCE_LEN: usize = 1 << 20;

const FORMAT_FILE: &str = "format";
const FORMAT_MAGIC: &str = "tessera-ds";
const OBJECTS_DIR: &str = "objects";

/// Capacity and use of the store: its configured capacity and the bytes its objects hold, or (no
/// capacity configured) the file system holding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    pub capacity: u64,
    pub used: u64,
    pub free: u64,
    pub objects: u64,
    /// Bytes the objects hold (their sizes, holes included).
    pub stored: u64,
    /// Whether `capacity` is configured and enforced.
    pub enforced: bool,
}

/// Requests and bytes a store served since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

/// A cheaply clonable handle to the store.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    objects: PathBuf,
    cache: Mutex<FileCache>,
    object_count: AtomicU64,
    /// Large writes use `O_DIRECT`; cleared for good when the file system refuses it.
    direct_writes: AtomicBool,
    /// Bytes written with `O_DIRECT` since start.
    direct_bytes: AtomicU64,
    /// What large writes wrote, for reads.
    write_cache: WriteCache,
    /// Configured capacity: writes that would make the objects hold more fail with ENOSPC.
    limit: Option<u64>,
    /// Bytes the objects hold (the sum of their sizes), counted at open and kept up to date.
    stored: AtomicU64,
    /// Read ops, read bytes, write ops, write bytes served.
    traffic: [AtomicU64; 4],
}

/// An open object: its buffered handle, and an `O_DIRECT` one opened at its first large write.
struct Object {
    file: File,
    direct: OnceLock<Option<File>>,
    /// The object's size as the store's accounting knows it.
    size: AtomicU64,
}

impl Object {
    fn new(file: File, size: u64) -> Object {
        Object { file, direct: OnceLock::new(), size: AtomicU64::new(size) }
    }
}

/// Bounded LRU of open object files.
struct FileCache {
    cap: usize,
    tick: u64,
    /// Bumped around every removal: a handle opened across a removal is not cached (it may be unlinked).
    epoch: u64,
    map: HashMap<ObjectId, (Arc<Object>, u64)>,
    lru: BTreeMap<u64, ObjectId>,
}

impl FileCache {
    fn get(&mut self, id: ObjectId) -> Option<Arc<Object>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, t) = self.map.get_mut(&id)?;
        self.lru.remove(t);
        *t = tick;
        self.lru.insert(tick, id);
        Some(file.clone())
    }

    fn insert(&mut self, id: ObjectId, file: Arc<Object>) -> Arc<Object> {
        if let Some(existing) = self.get(id) {
            // Another request opened it concurrently: keep one handle.
            return existing;
        }
        while self.map.len() >= self.cap.max(1) {
            let Some((_, victim)) = self.lru.pop_first() else { break };
            self.map.remove(&victim);
        }
        self.tick += 1;
        self.map.insert(id, (file.clone(), self.tick));
        self.lru.insert(self.tick, id);
        file
    }

    fn evict(&mut self, id: ObjectId) {
        if let Some((_, t)) = self.map.remove(&id) {
            self.lru.remove(&t);
        }
    }
}

fn check_range(offset: u64, len: u64) -> FsResult<u64> {
    offset.checked_add(len).ok_or_else(|| FsError::invalid(format!("offset {offset} + length {len} overflows")))
}

fn too_big(end: u64) -> FsError {
    FsError::new(ErrorCode::TooBig, format!("object would reach {end} bytes (limit {MAX_OBJECT_SIZE})"))
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> FsResult<T> + Send + 'static) -> FsResult<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| FsError::io(format!("store task failed: {e}")))?
}

/// Of `len` bytes asked at `offset`, how many an object of `size` bytes holds.
fn held(size: u64, offset: u64, len: usize) -> usize {
    len.min(size.saturating_sub(offset).try_into().unwrap_or(usize::MAX))
}

/// The directory of target `k` of a data server whose data directory is `data_dir`: the data
/// directory itself for target 0 (so a single-target server's layout is what it always was), else
/// `data_dir/target<k>`.
pub fn target_dir(data_dir: &Path, k: tessera_proto::TargetIdx) -> PathBuf {
    match k {
        0 => data_dir.to_path_buf(),
        k => data_dir.join(format!("target{k}")),
    }
}

impl Store {
    /// Opens (creating on first start) the store of data server `ds` in `root`.
    /// A directory formatted for another data server is refused.
    pub fn open(root: &Path, ds: DsId) -> FsResult<Store> {
        Self::open_with_cache(root, ds, DEFAULT_OPEN_FILES)
    }

    pub fn open_with_cache(root: &Path, ds: DsId, open_files: usize) -> FsResult<Store> {
        Self::open_target(root, ds, open_files, None)
    }

    /// Opens a store whose objects may hold at most `limit` bytes (`None`: as much as the file system
    /// holds). The objects already there are counted against it.
    pub fn open_target(root: &Path, ds: DsId, open_files: usize, limit: Option<u64>) -> FsResult<Store> {
        let ctx = |what: &str, e: io::Error| {
            let mut err = FsError::from(e);
            err.detail = format!("{what} {}: {}", root.display(), err.detail);
            err
        };
        std::fs::create_dir_all(root).map_err(|e| ctx("create data dir", e))?;
        check_or_write_format(root, ds)?;
        let objects = root.join(OBJECTS_DIR);
        std::fs::create_dir_all(&objects).map_err(|e| ctx("create objects dir", e))?;
        let store = Store {
            inner: Arc::new(Inner {
                root: root.to_path_buf(),
                objects,
                cache: Mutex::new(FileCache {
                    cap: open_files,
                    tick: 0,
                    epoch: 0,
                    map: HashMap::new(),
                    lru: BTreeMap::new(),
                }),
                object_count: AtomicU64::new(0),
                direct_writes: AtomicBool::new(true),
                direct_bytes: AtomicU64::new(0),
                write_cache: WriteCache::new(DEFAULT_WRITE_CACHE),
                limit,
                stored: AtomicU64::new(0),
                traffic: Default::default(),
            }),
        };
        let objects = store.inner.list_blocking()?;
        store.inner.object_count.store(objects.len() as u64, Ordering::Relaxed);
        store.inner.stored.store(objects.iter().map(|o| o.1).sum(), Ordering::Relaxed);
        Ok(store)
    }

    /// Whether large writes go around the page cache (`O_DIRECT`, the default).
    pub fn set_direct_writes(&self, on: bool) {
        self.inner.direct_writes.store(on, Ordering::Relaxed);
    }

    /// Keeps up to `bytes` of what large writes wrote for reads (0: none).
    pub fn set_write_cache(&self, bytes: u64) {
        self.inner.write_cache.set_capacity(bytes);
    }

    pub fn write_cache_stats(&self) -> CacheStats {
        self.inner.write_cache.stats()
    }

    /// Bytes written around the page cache since start.
    pub fn direct_bytes(&self) -> u64 {
        self.inner.direct_bytes.load(Ordering::Relaxed)
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Bytes the objects hold.
    pub fn stored(&self) -> u64 {
        self.inner.stored.load(Ordering::Relaxed)
    }

    /// The configured capacity, if any.
    pub fn limit(&self) -> Option<u64> {
        self.inner.limit
    }

    /// Requests and bytes served since the store opened.
    pub fn traffic(&self) -> Traffic {
        let t = |i: usize| self.inner.traffic[i].load(Ordering::Relaxed);
        Traffic { read_ops: t(0), read_bytes: t(1), write_ops: t(2), write_bytes: t(3) }
    }

    /// Path of an object's file.
    pub fn object_path(&self, id: ObjectId) -> PathBuf {
        self.inner.path(id)
    }

    /// Reads up to `len` bytes at `offset`: short at the end of the object, empty for a missing object,
    /// zeros for holes.
    pub async fn read(&self, id: ObjectId, offset: u64, len: usize) -> FsResult<Bytes> {
        check_range(offset, len as u64)?;
        if len == 0 || offset >= MAX_OBJECT_SIZE {
            return Ok(Bytes::new());
        }
        if let Some(data) = self.inner.write_cache.read(id, offset, len) {
            return Ok(data);
        }
        let inner = self.inner.clone();
        blocking(move || {
            let Some(object) = inner.handle(id, false)?.map(|(o, _)| o) else { return Ok(Bytes::new()) };
            let file = &object.file;
            // Allocate only what the object holds: a large read of a small object stays small.
            let len = held(file.metadata()?.len(), offset, len);
            if len == 0 {
                return Ok(Bytes::new());
            }
            let mut buf = BytesMut::with_capacity(len);
            pread_append(file, &mut buf, offset, len)?;
            Ok(buf.freeze())
        })
        .await
        .inspect(|data| self.inner.count(0, 1, data.len() as u64))
    }

    /// Reads each run `(offset, len)` as [`Store::read`] would, one after the other into one buffer, in
    /// one blocking call: returns what each run got (short at the end of the object) and their bytes.
    pub async fn read_v(&self, id: ObjectId, runs: Vec<(u64, usize)>) -> FsResult<(Vec<u32>, Bytes)> {
        for &(offset, len) in &runs {
            check_range(offset, len as u64)?;
        }
        let inner = self.inner.clone();
        blocking(move || {
            let object = inner.handle(id, false)?.map(|(o, _)| o);
            let size = match &object {
                Some(o) => o.file.metadata()?.len().min(MAX_OBJECT_SIZE),
                None => 0,
            };
            // Allocate only what the object holds (runs past its end are empty).
            let mut buf = BytesMut::with_capacity(runs.iter().map(|&(offset, len)| held(size, offset, len)).sum());
            let mut lens = Vec::with_capacity(runs.len());
            for run in &runs {
                let before = buf.len();
                if let Some(data) = inner.write_cache.read(id, run.0, run.1) {
                    buf.extend_from_slice(&data);
                } else if let (Some(o), n) = (&object, held(size, run.0, run.1)) {
                    if n > 0 {
                        pread_append(&o.file, &mut buf, run.0, n)?;
                    }
                }
                lens.push((buf.len() - before) as u32);
            }
            Ok((lens, buf.freeze()))
        })
        .await
        .inspect(|(lens, data)| self.inner.count(0, lens.len() as u64, data.len() as u64))
    }

    /// Writes `data` at `offset`, creating the object. `sync`: the data (and a new object's directory
    /// entry) is durable before this returns.
    pub async fn write(&self, id: ObjectId, offset: u64, data: Bytes, sync: bool) -> FsResult<()> {
        let end = check_range(offset, data.len() as u64)?;
        if end > MAX_OBJECT_SIZE {
            return Err(too_big(end));
        }
        let cache = &self.inner.write_cache;
        let change = cache.begin(id, offset, end);
        let inner = self.inner.clone();
        let res = blocking(move || {
            let (object, created) = inner.handle(id, true)?.ok_or_else(|| FsError::io("object vanished on create"))?;
            inner.grow(&object, end)?;
            let direct = inner.write_at(&object, &data, offset)?;
            inner.count(2, 1, data.len() as u64);
            if sync {
                object.file.sync_data()?;
                if created {
                    inner.sync_shard(id)?;
                }
            }
            // Only what went around the page cache is cached: the page cache holds the rest.
            Ok((direct > 0).then_some(data))
        })
        .await;
        match res {
            Ok(written) => {
                cache.finish(change, written);
                Ok(())
            }
            Err(e) => {
                cache.finish(change, None);
                Err(e)
            }
        }
    }

    /// `fallocate(2)` on `[offset, offset+len)` without changing the object's size: `punch` deallocates
    /// the range (it reads as zeros; a missing object needs nothing), otherwise reserves space for it,
    /// creating the object if missing (ENOSPC when the disk cannot hold it). A file system that cannot
    /// punch holes gets the range's existing bytes overwritten with zeros; one that cannot reserve space
    /// is left as it is (the space is then taken when written, as on such a local file system).
    pub async fn fallocate(&self, id: ObjectId, offset: u64, len: u64, punch: bool) -> FsResult<()> {
        let end = check_range(offset, len)?;
        if end > MAX_OBJECT_SIZE {
            return Err(too_big(end));
        }
        if len == 0 {
            return Ok(());
        }
        let cache = &self.inner.write_cache;
        let change = cache.begin(id, offset, end);
        let inner = self.inner.clone();
        let res = blocking(move || {
            use std::os::fd::AsRawFd;
            let Some((object, _)) = inner.handle(id, !punch)? else { return Ok(()) };
            let mode = libc::FALLOC_FL_KEEP_SIZE | if punch { libc::FALLOC_FL_PUNCH_HOLE } else { 0 };
            // SAFETY: a plain syscall on a descriptor the object keeps open.
            let r = unsafe { libc::fallocate(object.file.as_raw_fd(), mode, offset as i64, len as i64) };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(e.into());
            }
            if punch {
                let size = object.file.metadata()?.len();
                let zeros = vec![0u8; 1 << 20];
                let mut pos = offset;
                while pos < end.min(size) {
                    let n = (end.min(size) - pos).min(zeros.len() as u64) as usize;
                    std::os::unix::fs::FileExt::write_all_at(&object.file, &zeros[..n], pos)?;
                    pos += n as u64;
                }
            }
            Ok(())
        })
        .await;
        // Nothing of the range stays cached.
        cache.finish(change, None);
        res
    }

    /// Sets the object's size, creating it if missing.
    pub async fn truncate(&self, id: ObjectId, size: u64) -> FsResult<()> {
        if size > MAX_OBJECT_SIZE {
            return Err(too_big(size));
        }
        let cache = &self.inner.write_cache;
        let change = cache.begin(id, size, u64::MAX);
        let inner = self.inner.clone();
        let res = blocking(move || {
            let (object, _) = inner.handle(id, true)?.ok_or_else(|| FsError::io("object vanished on create"))?;
            object.file.set_len(size)?;
            // Truncating is never refused (a file may be extended sparsely, as on a local file system),
            // but the new size counts.
            let before = object.size.swap(size, Ordering::Relaxed);
            inner.adjust(before, size);
            Ok(())
        })
        .await;
        cache.finish(change, None);
        res
    }

    /// Removes objects; missing ones are fine.
    pub async fn remove(&self, ids: Vec<ObjectId>) -> FsResult<()> {
        let cache = &self.inner.write_cache;
        let changes: Vec<_> = ids.iter().map(|&id| cache.begin(id, 0, u64::MAX)).collect();
        let inner = self.inner.clone();
        let res = blocking(move || {
            for id in ids {
                inner.bump_and_evict(id);
                let size = std::fs::metadata(inner.path(id)).map(|m| m.len()).unwrap_or(0);
                let res = std::fs::remove_file(inner.path(id));
                inner.bump_and_evict(id);
                match res {
                    Ok(()) => {
                        inner.adjust(size, 0);
                        let _ = inner
                            .object_count
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        })
        .await;
        for change in changes {
            cache.finish(change, None);
        }
        res
    }

    /// Makes an object's data and directory entry durable (a missing object is fine).
    pub async fn fsync(&self, id: ObjectId) -> FsResult<()> {
        let inner = self.inner.clone();
        blocking(move || {
            if let Some((object, _)) = inner.handle(id, false)? {
                object.file.sync_all()?;
                inner.sync_shard(id)?;
            }
            Ok(())
        })
        .await
    }

    /// Whether `other` is this store (the same disk's objects).
    pub fn same(&self, other: &Store) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// What each object takes on disk, in bytes (`st_blocks` × 512); 0 for a missing one.
    pub async fn usage(&self, ids: Vec<ObjectId>) -> FsResult<Vec<u64>> {
        use std::os::unix::fs::MetadataExt;
        let inner = self.inner.clone();
        blocking(move || {
            ids.iter()
                .map(|&id| match std::fs::metadata(inner.path(id)) {
                    Ok(m) => Ok(m.blocks().saturating_mul(512)),
                    Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
                    Err(e) => Err(e.into()),
                })
                .collect()
        })
        .await
    }

    /// `lseek(SEEK_DATA)` (or `SEEK_HOLE` with `hole`) on the object's file from `offset`: where the next
    /// data (hole) starts; no data after the end (`None`), the end being a hole. A missing object is all
    /// hole.
    pub async fn seek(&self, id: ObjectId, offset: u64, hole: bool) -> FsResult<Option<u64>> {
        let off = i64::try_from(offset).map_err(|_| FsError::invalid(format!("seek to offset {offset}")))?;
        let inner = self.inner.clone();
        let past_end = if hole { Some(offset) } else { None };
        blocking(move || {
            use std::os::fd::AsRawFd;
            let Some((object, _)) = inner.handle(id, false)? else { return Ok(past_end) };
            let whence = if hole { libc::SEEK_HOLE } else { libc::SEEK_DATA };
            // SAFETY: a plain syscall on a descriptor the object keeps open (its file position is not
            // used: reads and writes are positional).
            let r = unsafe { libc::lseek(object.file.as_raw_fd(), off, whence) };
            if r >= 0 {
                return Ok(Some(r as u64));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENXIO) {
                return Ok(past_end);
            }
            Err(e.into())
        })
        .await
    }

    /// Whether the object exists, and its size.
    pub async fn stat(&self, id: ObjectId) -> FsResult<(bool, u64)> {
        let path = self.inner.path(id);
        blocking(move || match std::fs::metadata(&path) {
            Ok(m) => Ok((true, m.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok((false, 0)),
            Err(e) => Err(e.into()),
        })
        .await
    }

    /// Every object with its size, in id order.
    pub async fn list(&self) -> FsResult<Vec<(ObjectId, u64)>> {
        let inner = self.inner.clone();
        blocking(move || inner.list_blocking()).await
    }

    /// Up to `max` objects of shard `shard` (the low byte of their ids) with ids above `after`, in id
    /// order, and whether the shard holds more: one directory read per page.
    pub async fn list_shard(&self, shard: u8, after: ObjectId, max: usize) -> FsResult<(Vec<(ObjectId, u64)>, bool)> {
        let inner = self.inner.clone();
        blocking(move || {
            let mut out = Vec::new();
            let dir = inner.objects.join(format!("{shard:02x}"));
            match std::fs::read_dir(&dir) {
                Ok(entries) => inner.list_dir(&dir, entries, &mut out, |id| id > after)?,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            out.sort_unstable();
            let more = out.len() > max;
            out.truncate(max);
            Ok((out, more))
        })
        .await
    }

    /// Space of the file system holding the store, and the number of objects.
    pub async fn space(&self) -> FsResult<Space> {
        let inner = self.inner.clone();
        blocking(move || {
            let fs = statvfs(&inner.root)?;
            let stored = inner.stored.load(Ordering::Relaxed);
            let objects = inner.object_count.load(Ordering::Relaxed);
            Ok(match inner.limit {
                Some(cap) => Space {
                    capacity: cap,
                    used: stored.min(cap),
                    free: cap.saturating_sub(stored).min(fs.free),
                    objects,
                    stored,
                    enforced: true,
                },
                None => Space { objects, stored, ..fs },
            })
        })
        .await
    }
}

impl Inner {
    /// Counts `ops` requests of `bytes` in traffic slot `slot` (0 reads, 2 writes).
    fn count(&self, slot: usize, ops: u64, bytes: u64) {
        self.traffic[slot].fetch_add(ops, Ordering::Relaxed);
        self.traffic[slot + 1].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Accounts for a write reaching `end` of `object`: the growth is taken from the capacity, or the
    /// write is refused with ENOSPC (nothing written, nothing counted).
    fn grow(&self, object: &Object, end: u64) -> FsResult<()> {
        let before = object.size.fetch_max(end, Ordering::Relaxed);
        if end <= before {
            return Ok(());
        }
        let grow = end - before;
        let Some(limit) = self.limit else {
            self.stored.fetch_add(grow, Ordering::Relaxed);
            return Ok(());
        };
        let take = self.stored.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
            u.checked_add(grow).filter(|after| *after <= limit)
        });
        match take {
            Ok(_) => Ok(()),
            Err(stored) => {
                // Give the size back unless a concurrent write grew it further meanwhile.
                let _ = object.size.compare_exchange(end, before, Ordering::Relaxed, Ordering::Relaxed);
                Err(FsError::new(
                    ErrorCode::NoSpace,
                    format!(
                        "target {} is full: {stored} of {limit} bytes used, a write needs {grow} more",
                        self.root.display()
                    ),
                ))
            }
        }
    }

    /// Accounts for an object going from `before` to `after` bytes (truncate, removal).
    fn adjust(&self, before: u64, after: u64) {
        let _ = self.stored.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
            Some(if after >= before { u.saturating_add(after - before) } else { u.saturating_sub(before - after) })
        });
    }

    fn shard_dir(&self, id: ObjectId) -> PathBuf {
        self.objects.join(format!("{:02x}", id & 0xff))
    }

    fn path(&self, id: ObjectId) -> PathBuf {
        self.shard_dir(id).join(format!("{id:016x}"))
    }

    fn bump_and_evict(&self, id: ObjectId) {
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        c.epoch += 1;
        c.evict(id);
    }

    /// The object's open file (and whether this call created it); `None` if missing and `!create`.
    fn handle(&self, id: ObjectId, create: bool) -> FsResult<Option<(Arc<Object>, bool)>> {
        let epoch = {
            let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = c.get(id) {
                return Ok(Some((f, false)));
            }
            c.epoch
        };
        // Opened without the lock: opening may touch the disk.
        let path = self.path(id);
        let (file, created) = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => (f, false),
            Err(e) if e.kind() == ErrorKind::NotFound && create => self.create(id, &path)?,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = file.metadata()?.len();
        let file = Arc::new(Object::new(file, size));
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if c.epoch != epoch {
            // A removal ran meanwhile: use the handle for this request only.
            return Ok(Some((file, created)));
        }
        Ok(Some((c.insert(id, file), created)))
    }

    /// Creates the object's file (and its shard directory), counting it if this call created it.
    fn create(&self, id: ObjectId, path: &Path) -> FsResult<(File, bool)> {
        let open_new = || OpenOptions::new().read(true).write(true).create_new(true).open(path);
        let res = match open_new() {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                std::fs::create_dir_all(self.shard_dir(id))?;
                open_new()
            }
            r => r,
        };
        match res {
            Ok(f) => {
                self.object_count.fetch_add(1, Ordering::Relaxed);
                Ok((f, true))
            }
            // Created concurrently by another request.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Ok((OpenOptions::new().read(true).write(true).open(path)?, false))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `data` at `offset`: the aligned middle of a large write with `O_DIRECT`, the rest buffered.
    /// Returns how many bytes went around the page cache.
    fn write_at(&self, object: &Object, data: &[u8], offset: u64) -> io::Result<usize> {
        let align = DIRECT_ALIGN as u64;
        let head = ((align - offset % align) % align) as usize;
        let body = data.len().saturating_sub(head) / DIRECT_ALIGN * DIRECT_ALIGN;
        let large = body >= DIRECT_WRITE_MIN / 2 && data.len() >= DIRECT_WRITE_MIN;
        let direct = if large { self.direct_handle(object) } else { None };
        let Some(direct) = direct else { return object.file.write_all_at(data, offset).map(|()| 0) };
        object.file.write_all_at(&data[..head], offset)?;
        let done = self.write_direct(direct, &data[head..head + body], offset + head as u64)?;
        self.direct_bytes.fetch_add(done as u64, Ordering::Relaxed);
        // What `O_DIRECT` did not take (nothing, unless the file system refused it) goes buffered.
        let from = head + done;
        object.file.write_all_at(&data[from..], offset + from as u64)?;
        Ok(done)
    }

    /// The object's `O_DIRECT` handle, reopened through /proc so that it is the same file even if the
    /// object was unlinked meanwhile. `None` if direct writes are off or the file system refuses them.
    fn direct_handle<'a>(&self, object: &'a Object) -> Option<&'a File> {
        if !self.direct_writes.load(Ordering::Relaxed) {
            return None;
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&object.file);
        let opened = object.direct.get_or_init(|| {
            let path = format!("/proc/self/fd/{fd}");
            match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
                Ok(f) => Some(f),
                // EINVAL: the file system has no O_DIRECT. Anything else (no /proc, out of descriptors)
                // concerns this handle only.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.refuse_direct(&e);
                    None
                }
                Err(_) => None,
            }
        });
        opened.as_ref()
    }

    /// Writes aligned `data` at aligned `offset` with `O_DIRECT`, through a bounce buffer if `data` is not
    /// aligned in memory. Returns how much it wrote: all of it, or less if the file system refused.
    fn write_direct(&self, direct: &File, data: &[u8], offset: u64) -> io::Result<usize> {
        let mut done = 0;
        if data.as_ptr().align_offset(DIRECT_ALIGN) == 0 {
            while done < data.len() {
                match direct.write_at(&data[done..], offset + done as u64) {
                    Ok(0) => return Err(io::Error::new(ErrorKind::WriteZero, "direct write wrote nothing")),
                    Ok(n) if n % DIRECT_ALIGN == 0 => done += n,
                    Ok(n) => return Ok(done + n), // A short unaligned write: the rest goes buffered.
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.refuse_direct(&e);
                        return Ok(done);
                    }
                    Err(e) => return Err(e),
                }
            }
            return Ok(done);
        }
        BOUNCE.with_borrow_mut(|bounce| {
            let buf = bounce.get_or_insert_with(|| vec![0u8; BOUNCE_LEN + DIRECT_ALIGN]);
            let start = buf.as_ptr().align_offset(DIRECT_ALIGN);
            while done < data.len() {
                let n = (data.len() - done).min(BOUNCE_LEN);
                let chunk = &mut buf[start..start + n];
                chunk.copy_from_slice(&data[done..done + n]);
                let wrote = self.write_direct(direct, chunk, offset + done as u64)?;
                done += wrote;
                if wrote < n {
                    break;
                }
            }
            Ok(done)
        })
    }

    fn refuse_direct(&self, e: &io::Error) {
        if self.direct_writes.swap(false, Ordering::Relaxed) {
            tracing::warn!(root = %self.root.display(), "O_DIRECT refused ({e}): large writes go through the page cache");
        }
    }

    fn sync_shard(&self, id: ObjectId) -> FsResult<()> {
        File::open(self.shard_dir(id))?.sync_all()?;
        Ok(())
    }

    fn list_blocking(&self) -> FsResult<Vec<(ObjectId, u64)>> {
        let mut out = Vec::new();
        for shard in std::fs::read_dir(&self.objects)? {
            let shard = shard?;
            if shard.file_name().len() != 2 || !shard.file_type()?.is_dir() {
                continue;
            }
            self.list_dir(&shard.path(), std::fs::read_dir(shard.path())?, &mut out, |_| true)?;
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The objects (`(id, size)`) in shard directory `dir` whose ids pass `keep`, appended to `out`
    /// unsorted; names that are not objects of this shard are skipped.
    fn list_dir(
        &self,
        dir: &Path,
        entries: std::fs::ReadDir,
        out: &mut Vec<(ObjectId, u64)>,
        keep: impl Fn(ObjectId) -> bool,
    ) -> FsResult<()> {
        let shard_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        for ent in entries {
            let ent = ent?;
            let name = ent.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.len() != 16 {
                continue;
            }
            let Ok(id) = u64::from_str_radix(name, 16) else { continue };
            if format!("{:02x}", id & 0xff) != shard_name || !keep(id) {
                continue;
            }
            match ent.metadata() {
                Ok(m) if m.is_file() => out.push((id, m.len())),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// Checks the `format` marker (written on first start) names this data server.
fn check_or_write_format(root: &Path, ds: DsId) -> FsResult<()> {
    let path = root.join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut words = text.split_whitespace();
            let magic = words.next();
            let id = words.next().and_then(|w| w.parse::<DsId>().ok());
            match (magic, id) {
                (Some(FORMAT_MAGIC), Some(id)) if id == ds => Ok(()),
                (Some(FORMAT_MAGIC), Some(id)) => {
                    Err(FsError::invalid(format!("data dir {} belongs to data server {id}, not {ds}", root.display())))
                }
                _ => Err(FsError::invalid(format!(
                    "data dir {}: {} is not a Tessera data server marker",
                    root.display(),
                    path.display()
                ))),
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let tmp = root.join(format!("{FORMAT_FILE}.tmp"));
            let write = || -> io::Result<()> {
                std::fs::write(&tmp, format!("{FORMAT_MAGIC} {ds}\n"))?;
                File::open(&tmp)?.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                File::open(root)?.sync_all()
            };
            write().map_err(|e| {
                let mut err = FsError::from(e);
                err.detail = format!("write {}: {}", path.display(), err.detail);
                err
            })
        }
        Err(e) => {
            let mut err = FsError::from(e);
            err.detail = format!("read {}: {}", path.display(), err.detail);
            Err(err)
        }
    }
}

fn statvfs(path: &Path) -> FsResult<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| FsError::invalid("NUL in data dir"))?;
    // SAFETY: an all-zero statvfs is a valid value; the pointer is valid for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error().into());
    }
    let frsize = st.f_frsize as u64;
    let blocks = st.f_blocks as u64;
    Ok(Space {
        capacity: blocks.saturating_mul(frsize),
        used: blocks.saturating_sub(st.f_bfree as u64).saturating_mul(frsize),
        free: (st.f_bavail as u64).saturating_mul(frsize),
        ..Space::default()
    })
}

thread_local! {
    /// Per blocking-pool thread: the aligned copy of unaligned data for `O_DIRECT`.
    static BOUNCE: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), 3).unwrap();
        (dir, s)
    }

    #[tokio::test]
    async fn a_configured_capacity_is_enforced_counted_across_restarts_and_freed_by_removal() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open_target(d.path(), 0, 8, Some(10_000)).unwrap();
        s.write(1, 0, Bytes::from(vec![1u8; 6000]), false).await.unwrap();
        // Overwriting inside the object takes nothing more.
        s.write(1, 1000, Bytes::from(vec![2u8; 5000]), false).await.unwrap();
        let e = s.write(2, 0, Bytes::from(vec![3u8; 5000]), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
        assert!(e.detail.contains("full"), "{e}");
        // Nothing of the refused write was written or counted.
        assert_eq!(s.stat(2).await.unwrap().1, 0);
        let sp = s.space().await.unwrap();
        assert_eq!((sp.capacity, sp.used, sp.free, sp.enforced), (10_000, 6000, 4000, true));
        s.write(2, 0, Bytes::from(vec![3u8; 4000]), false).await.unwrap();
        assert_eq!(s.write(1, 6000, Bytes::from_static(b"x"), false).await.unwrap_err().code, ErrorCode::NoSpace);
        drop(s);
        let s = Store::open_target(d.path(), 0, 8, Some(10_000)).unwrap();
        assert_eq!(s.space().await.unwrap().used, 10_000);
        s.remove(vec![1]).await.unwrap();
        assert_eq!(s.stored(), 4000);
        s.write(5, 0, Bytes::from(vec![4u8; 6000]), false).await.unwrap();
        s.truncate(5, 1000).await.unwrap();
        assert_eq!(s.space().await.unwrap().used, 5000);
        let t = s.traffic();
        assert_eq!((t.write_ops, t.write_bytes), (1, 6000));
        // Without a capacity the host file system's space is reported, and the objects' bytes too.
        let (_d2, plain) = store();
        plain.write(9, 0, Bytes::from(vec![1u8; 100]), false).await.unwrap();
        let sp = plain.space().await.unwrap();
        assert!(!sp.enforced && sp.capacity > 10_000 && sp.stored == 100);
    }

    #[tokio::test]
    async fn vectored_reads_fill_one_buffer_short_past_the_end() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), 0).unwrap();
        s.write(4, 0, Bytes::from_static(b"0123456789"), false).await.unwrap();
        let (lens, data) = s.read_v(4, vec![(7, 2), (0, 3), (9, 5), (50, 4)]).await.unwrap();
        assert_eq!((lens, &data[..]), (vec![2, 3, 1, 0], &b"780129"[..]));
        let (lens, data) = s.read_v(5, vec![(0, 4)]).await.unwrap();
        assert_eq!((lens, data.len()), (vec![0], 0), "a missing object reads as nothing");
        assert!(s.read_v(4, vec![(u64::MAX, 2)]).await.is_err(), "past the largest offset");
    }

    #[tokio::test]
    async fn round_trip_and_layout() {
        let (_d, s) = store();
        let id = 0x1234_5678_9abc_def0;
        s.write(id, 0, Bytes::from_static(b"hello world"), false).await.unwrap();
        assert_eq!(&s.read(id, 0, 100).await.unwrap()[..], b"hello world");
        assert!(s.root().join("objects/f0/123456789abcdef0").is_file());
        assert_eq!(s.stat(id).await.unwrap(), (true, 11));
        assert_eq!(s.stat(7).await.unwrap(), (false, 0));
        assert!(s.read(7, 0, 10).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn unaligned_holes_and_short_reads() {
        let (_d, s) = store();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        s.write(1, 4093, Bytes::from(data.clone()), false).await.unwrap();
        // Hole before the data reads as zeros.
        let all = s.read(1, 0, 20_000).await.unwrap();
        assert_eq!(all.len(), 4093 + 10_000);
        assert!(all[..4093].iter().all(|&b| b == 0));
        assert_eq!(&all[4093..], &data[..]);
        // Unaligned middle read and a read straddling the end.
        assert_eq!(&s.read(1, 5000, 333).await.unwrap()[..], &data[907..1240]);
        assert_eq!(&s.read(1, 14_000, 1000).await.unwrap()[..], &data[14_000 - 4093..]);
        assert!(s.read(1, 1 << 40, 10).await.unwrap().is_empty());
        // Write far past the end: hole in between.
        s.write(1, 100_000, Bytes::from_static(b"z"), false).await.unwrap();
        let mid = s.read(1, 20_000, 1000).await.unwrap();
        assert!(mid.len() == 1000 && mid.iter().all(|&b| b == 0));
    }

    /// Large writes at unaligned offsets, from unaligned memory and over buffered data read back exactly,
    /// with their aligned middles written around the page cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn large_writes_go_direct_and_read_back() {
        let (_d, s) = store();
        let mut model = vec![0u8; 3 << 20];
        let pattern = |seed: u32, n: usize| -> Vec<u8> { (0..n as u32).map(|i| (i * 31 + seed) as u8).collect() };
        // (offset, length, memory misalignment): aligned, unaligned both ends, and a small buffered overwrite
        // straddling a direct region.
        let writes = [(0usize, 1 << 20, 0usize), (1_000_003, 700_001, 5), (2 << 20, 1 << 20, 1), (1_048_000, 9_000, 0)];
        for (i, &(off, len, skew)) in writes.iter().enumerate() {
            let data = pattern(i as u32, len + skew);
            let payload = Bytes::from(data).slice(skew..);
            model[off..off + len].copy_from_slice(&payload);
            s.write(9, off as u64, payload, false).await.unwrap();
        }
        assert!(s.direct_bytes() >= 2 << 20, "only {} bytes went direct", s.direct_bytes());
        // From the write cache, where it covers the range, then from the disk alone.
        assert_eq!(&s.read(9, 2 << 20, 1 << 20).await.unwrap()[..], &model[2 << 20..3 << 20]);
        assert_eq!(s.write_cache_stats().hits, 1);
        assert_eq!(s.read(9, 0, 4 << 20).await.unwrap(), Bytes::from(model.clone()));
        s.set_write_cache(0);
        assert_eq!(s.read(9, 0, 4 << 20).await.unwrap(), Bytes::from(model.clone()));
        s.set_write_cache(DEFAULT_WRITE_CACHE);
        // Concurrent large writes to neighbouring, partly shared pages.
        let mut tasks = Vec::new();
        for k in 0..8usize {
            let (s, data) = (s.clone(), pattern(100 + k as u32, 300_001));
            let off = (k * 300_001) as u64;
            model.resize(model.len().max(off as usize + data.len()), 0);
            model[off as usize..off as usize + data.len()].copy_from_slice(&data);
            tasks.push(tokio::spawn(async move { s.write(10, off, Bytes::from(data), false).await }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(&s.read(10, 0, 8 * 300_001).await.unwrap()[..], &model[..8 * 300_001]);
        s.set_write_cache(0);
        assert_eq!(&s.read(10, 0, 8 * 300_001).await.unwrap()[..], &model[..8 * 300_001]);
    }

    /// Cached data never outlives the change that replaced it: a small overwrite, a truncation, a removal.
    #[tokio::test]
    async fn write_cache_follows_later_changes() {
        let (_d, s) = store();
        s.write(4, 0, Bytes::from(vec![1u8; 1 << 20]), false).await.unwrap();
        assert_eq!(s.read(4, 4096, 10).await.unwrap(), Bytes::from(vec![1u8; 10]));
        s.write(4, 4096, Bytes::from_static(b"new"), false).await.unwrap();
        assert_eq!(&s.read(4, 4095, 5).await.unwrap()[..], b"\x01new\x01");
        s.write(4, 0, Bytes::from(vec![2u8; 1 << 20]), false).await.unwrap();
        s.truncate(4, 100).await.unwrap();
        assert_eq!(s.read(4, 0, 1 << 20).await.unwrap(), Bytes::from(vec![2u8; 100]));
        s.write(4, 0, Bytes::from(vec![3u8; 1 << 20]), false).await.unwrap();
        s.remove(vec![4]).await.unwrap();
        assert!(s.read(4, 0, 10).await.unwrap().is_empty());
        assert_eq!(s.write_cache_stats().bytes, 0);
    }

    #[tokio::test]
    async fn direct_writes_can_be_switched_off() {
        let (_d, s) = store();
        s.set_direct_writes(false);
        s.write(1, 0, Bytes::from(vec![3u8; 1 << 20]), true).await.unwrap();
        assert_eq!(s.direct_bytes(), 0);
        assert_eq!(s.read(1, 0, 1 << 20).await.unwrap(), Bytes::from(vec![3u8; 1 << 20]));
    }

    #[tokio::test]
    async fn limits() {
        let (_d, s) = store();
        let e = s.write(1, u64::MAX, Bytes::from_static(b"ab"), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid);
        let e = s.write(1, MAX_OBJECT_SIZE, Bytes::from_static(b"a"), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::TooBig);
        assert_eq!(s.truncate(1, MAX_OBJECT_SIZE + 1).await.unwrap_err().code, ErrorCode::TooBig);
        assert_eq!(s.read(1, u64::MAX, 2).await.unwrap_err().code, ErrorCode::Invalid);
        assert_eq!(s.stat(1).await.unwrap(), (false, 0));
    }

    #[tokio::test]
    async fn truncate_up_and_down() {
        let (_d, s) = store();
        s.truncate(5, 100).await.unwrap();
        assert_eq!(s.stat(5).await.unwrap(), (true, 100));
        assert_eq!(&s.read(5, 0, 200).await.unwrap()[..], &[0u8; 100][..]);
        s.write(5, 0, Bytes::from_static(b"abcdef"), false).await.unwrap();
        s.truncate(5, 3).await.unwrap();
        assert_eq!(&s.read(5, 0, 200).await.unwrap()[..], b"abc");
        s.truncate(5, 6).await.unwrap();
        assert_eq!(&s.read(5, 0, 200).await.unwrap()[..], b"abc\0\0\0");
    }

    #[tokio::test]
    async fn fallocate_reserves_and_punches_without_changing_the_size() {
        use std::os::unix::fs::MetadataExt;
        let (d, s) = store();
        s.fallocate(7, 0, 1 << 20, false).await.unwrap();
        assert_eq!(s.stat(7).await.unwrap(), (true, 0), "reserved, size unchanged");
        let path = s.object_path(7);
        assert!(std::fs::metadata(&path).unwrap().blocks() * 512 >= 1 << 20, "blocks reserved");
        s.write(7, 0, Bytes::from(vec![9u8; 3 << 16]), false).await.unwrap();
        s.fallocate(7, 1 << 16, 1 << 16, true).await.unwrap();
        let got = s.read(7, 0, 3 << 16).await.unwrap();
        assert_eq!(got.len(), 3 << 16, "size unchanged");
        assert!(got[..1 << 16].iter().all(|&b| b == 9));
        assert!(got[1 << 16..2 << 16].iter().all(|&b| b == 0), "punched");
        assert!(got[2 << 16..].iter().all(|&b| b == 9));
        s.fallocate(8, 0, 4096, true).await.unwrap();
        assert_eq!(s.stat(8).await.unwrap(), (false, 0), "nothing to punch in a missing object");
        assert_eq!(s.fallocate(7, MAX_OBJECT_SIZE, 1, false).await.unwrap_err().code, ErrorCode::TooBig);
        assert_eq!(s.fallocate(7, u64::MAX, 2, true).await.unwrap_err().code, ErrorCode::Invalid);
        drop(d);
    }

    #[tokio::test]
    async fn remove_list_fsync_and_count() {
        let (d, s) = store();
        for id in [1u64, 2, 0x300, 0xffff_ffff_ffff_ffff] {
            s.write(id, 0, Bytes::from(vec![1u8; id as usize % 50 + 1]), id == 2).await.unwrap();
        }
        s.fsync(1).await.unwrap();
        s.fsync(99).await.unwrap();
        assert_eq!(s.list().await.unwrap(), vec![(1, 2), (2, 3), (0x300, 19), (u64::MAX, 16)]);
        assert_eq!(s.space().await.unwrap().objects, 4);
        s.remove(vec![2, 0x300, 12345]).await.unwrap();
        s.remove(vec![2]).await.unwrap();
        assert_eq!(s.list().await.unwrap(), vec![(1, 2), (u64::MAX, 16)]);
        // The cached handle of a removed object must not resurrect its old data.
        assert!(s.read(2, 0, 10).await.unwrap().is_empty());
        let sp = s.space().await.unwrap();
        assert_eq!(sp.objects, 2);
        assert!(sp.capacity > 0 && sp.free <= sp.capacity);
        drop(s);
        // Reopen: count recovered from the directory.
        let s = Store::open(d.path(), 3).unwrap();
        assert_eq!(s.space().await.unwrap().objects, 2);
    }

    #[tokio::test]
    async fn small_cache_evicts() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open_with_cache(d.path(), 0, 2).unwrap();
        for id in 0..10u64 {
            s.write(id, id, Bytes::from(vec![id as u8; 3]), false).await.unwrap();
        }
        for id in 0..10u64 {
            assert_eq!(&s.read(id, id, 3).await.unwrap()[..], &[id as u8; 3][..]);
        }
        assert!(s.inner.cache.lock().unwrap().map.len() <= 2);
    }

    #[tokio::test]
    async fn enospc_is_no_space_and_store_keeps_serving() {
        let (_d, s) = store();
        // An object whose file is /dev/full: every write fails with ENOSPC.
        std::fs::create_dir_all(s.root().join("objects/01")).unwrap();
        std::os::unix::fs::symlink("/dev/full", s.object_path(1)).unwrap();
        let e = s.write(1, 0, Bytes::from_static(b"data"), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
        let e = s.write(1, 0, Bytes::from(vec![1u8; 1 << 20]), false).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoSpace, "a large (direct) write: {e}");
        s.write(2, 0, Bytes::from_static(b"ok"), false).await.unwrap();
        assert_eq!(&s.read(2, 0, 2).await.unwrap()[..], b"ok");
    }

    #[test]
    fn format_marker_mismatch_refused() {
        let d = tempfile::tempdir().unwrap();
        drop(Store::open(d.path(), 1).unwrap());
        drop(Store::open(d.path(), 1).unwrap());
        let e = Store::open(d.path(), 2).err().unwrap();
        assert!(e.detail.contains("belongs to data server 1"), "{e}");
        std::fs::write(d.path().join("format"), "junk").unwrap();
        assert!(Store::open(d.path(), 1).is_err());
    }
}
