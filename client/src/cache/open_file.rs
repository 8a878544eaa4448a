//! One open file handle over the inode's write-behind ([`super::write_behind`]): its reads (answered from
//! read-ahead chunks and strided windows where [`super::read_ahead`] sees a stream, else read exactly),
//! writes, `fallocate`, size, flush, fsync and release, inside close-to-open consistency. A handle
//! opened without write-behind ([`HandleOptions::write_behind`]) writes through, one without read-ahead
//! ([`HandleOptions::read_ahead`]) reads exactly, over the same inode state.

use super::engine::{Engine, HandleOptions};
use super::read_ahead::{Plan, Stream};
pub use super::read_ahead::{RA_AHEAD, RA_CHUNK};
use super::write_behind::OpenInode;
use crate::data::ReadData;
use crate::mds_client::{LockWait, MdsClient};
use crate::periodic::{patterns, Periodic};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::locks::{LockKind, LockSpec, LockType};
use tessera_proto::msg::{SetAttrs, MAX_EXTENTS};
use tessera_proto::types::IoTag;

/// The piece [`Handle::copy_range`] reads and writes at a time (4 MiB: a whole stripe on the default
/// layouts, one write-behind flush).
pub const COPY_PIECE: u64 = 4 << 20;

/// One read-ahead chunk on its way: its replies are kept apart, so a read inside one costs no copy.
pub type Fetch = Shared<BoxFuture<'static, Result<ReadData, FsError>>>;

/// One window of a strided stream's blocks on its way (one [`ReadData`] per block).
pub type BlocksFetch = Shared<BoxFuture<'static, Result<Arc<Vec<ReadData>>, FsError>>>;

/// A strided stream's blocks fetched together: `count` blocks of `len` bytes every `stride` bytes
/// from the window's start (the last may be shorter: the file ended).
#[derive(Clone)]
struct Window {
    stride: u64,
    len: u64,
    count: u64,
    fetch: BlocksFetch,
}

impl Window {
    /// The index of the block that holds all of `off..end`, if one does.
    fn block_of(&self, start: u64, off: u64, end: u64) -> Option<usize> {
        let k = off.checked_sub(start)? / self.stride;
        let block = start + k * self.stride;
        (k < self.count && end <= block + self.len).then_some(k as usize)
    }
}

/// Where a read's data comes from.
#[derive(Clone)]
pub enum Part {
    /// Read-ahead chunk `c`.
    Chunk(u64, Fetch),
    /// One block of a strided window.
    Block(BlocksFetch, usize),
}

/// Read-ahead state of one handle.
#[derive(Default)]
pub struct ReadAhead {
    wgen: u64,
    /// Which reads form a stream, and how far ahead to fetch ([`super::read_ahead`]).
    stream: Stream,
    chunks: BTreeMap<u64, Fetch>,
    /// A strided stream's windows, by the offset of their first block.
    windows: BTreeMap<u64, Window>,
}

impl ReadAhead {
    /// The fetched block that holds all of `off..end`.
    fn block(&self, off: u64, end: u64) -> Option<Part> {
        let (&start, w) = self.windows.range(..=off).next_back()?;
        w.block_of(start, off, end).map(|i| Part::Block(w.fetch.clone(), i))
    }
}

/// One open file handle (made by [`Engine::open`]).
pub struct Handle {
    pub inode: Arc<OpenInode>,
    pub mds_handle: u64,
    pub tag: IoTag,
    /// The opener's credentials.
    pub mds: MdsClient,
    engine: Arc<Engine>,
    pub writable: bool,
    /// Writes into the write-behind, or through.
    write_behind: bool,
    /// Reads through read-ahead, or exactly.
    read_ahead: bool,
    pub wrote: AtomicBool,
    released: AtomicBool,
    ra: Mutex<ReadAhead>,
    /// The client's session at the open: an eviction since makes this handle stale.
    session: u64,
    /// The opener's job's PerSched pattern (inactive: the job is not delayed).
    pub periodic: Arc<Periodic>,
    detect_periodic: bool,
}

impl Handle {
    pub(super) fn new(
        engine: Arc<Engine>,
        inode: Arc<OpenInode>,
        mds_handle: u64,
        mds: MdsClient,
        size: u64,
        opts: HandleOptions,
    ) -> Self {
        inode.heard_size(size);
        Handle {
            tag: IoTag { origin: mds.origin().clone(), ino: inode.ino },
            inode,
            mds_handle,
            session: mds.session().epoch(),
            mds,
            engine,
            writable: opts.flags.write,
            write_behind: opts.write_behind,
            read_ahead: opts.read_ahead,
            wrote: AtomicBool::new(false),
            released: AtomicBool::new(false),
            ra: Mutex::new(ReadAhead::default()),
            periodic: opts.periodic,
            detect_periodic: opts.detect_periodic,
        }
    }

    /// Whether this handle's writes go into the write-behind.
    pub fn write_behind(&self) -> bool {
        self.write_behind
    }

    /// Whether this handle's reads of a stream are fetched ahead.
    pub fn read_ahead(&self) -> bool {
        self.read_ahead
    }

    /// Fails (EIO) once the MDS has evicted this client since the open (see [`crate::session`]).
    pub fn check_session(&self) -> FsResult<()> {
        self.mds.session().check(self.session)
    }

    /// The size as far as this handle knows; `refresh` asks the MDS.
    pub async fn size(&self, refresh: bool) -> FsResult<u64> {
        if refresh {
            let attr = self.mds.getattr(self.inode.ino).await?;
            self.inode.heard_size(attr.size);
        }
        Ok(self.inode.size())
    }

    /// Writes `data` at `off`: into the write-behind (returns once buffered; an error of an earlier
    /// buffered write may come back here), or without the cache to the data servers.
    pub async fn write(&self, off: u64, data: &[u8]) -> FsResult<()> {
        if self.write_behind {
            self.write_buffered(off, data).await
        } else {
            self.write_through(off, Bytes::copy_from_slice(data)).await
        }
    }

    /// [`Handle::write`] of bytes the caller owns: they are sent as they are without write-behind, and
    /// with it when they make a whole chunk of their own ([`OpenInode::write_owned`]).
    pub async fn write_bytes(&self, off: u64, data: Bytes) -> FsResult<()> {
        if self.write_behind {
            self.check_writable()?;
            self.inode.write_owned(&self.mds, &self.tag, off, data).await
        } else {
            self.write_through(off, data).await
        }
    }

    async fn write_buffered(&self, off: u64, data: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        self.inode.write(&self.mds, &self.tag, off, data).await
    }

    async fn write_through(&self, off: u64, data: Bytes) -> FsResult<()> {
        if !self.writable {
            return Err(FsError::new(ErrorCode::Invalid, "file not open for writing"));
        }
        self.inode.write_through(&self.mds, &self.tag, off, data).await?;
        self.wrote.store(true, Ordering::Release);
        Ok(())
    }

    /// [`Handle::write`] if it needs no waiting (see [`OpenInode::try_write`]); `None` without write-behind.
    pub fn try_write(&self, off: u64, data: &[u8]) -> Option<FsResult<()>> {
        if !self.write_behind {
            return None;
        }
        if let Err(e) = self.check_writable() {
            return Some(Err(e));
        }
        self.inode.try_write(&self.tag, off, data)
    }

    /// Waits for the job's PerSched interval when it has a pattern (see [`patterns::gate`]); with
    /// detection on, the first transfer starts following the job's pattern.
    pub async fn gate(&self, len: u64) -> Option<u64> {
        if self.detect_periodic && !self.periodic.following() {
            self.periodic.follow(self.mds.clone());
        }
        patterns::gate(&self.periodic, len).await
    }

    /// [`Handle::write_bytes`] in the job's PerSched interval, paced to its rate.
    pub async fn write_paced(&self, off: u64, data: Bytes) -> FsResult<()> {
        let len = data.len() as u64;
        let rate = self.gate(len).await;
        let t0 = Instant::now();
        self.write_bytes(off, data).await?;
        patterns::pace(&self.periodic, rate, len, t0).await;
        Ok(())
    }

    /// [`Handle::read`] in the job's PerSched interval, paced to its rate: clamped to the size first,
    /// so a read at the end waits for nothing.
    pub async fn read_paced(&self, off: u64, len: u64) -> FsResult<Vec<Bytes>> {
        let Some((end, size)) = self.bounds(off, len).await? else { return Ok(Vec::new()) };
        let rate = self.gate(end - off).await;
        let t0 = Instant::now();
        let out = self.read_within(off, end, size).await?;
        patterns::pace(&self.periodic, rate, out.iter().map(|b| b.len() as u64).sum(), t0).await;
        Ok(out)
    }

    /// Sends what is buffered and tells the MDS the size: others who open the file from now on see
    /// every write made through this client (close-to-open).
    pub async fn flush(&self) -> FsResult<()> {
        self.inode.flush(&self.mds).await
    }

    /// Places, changes or removes `owner`'s file lock through this handle (see [`MdsClient::lock`]),
    /// with the data rules that make locks useful to programs sharing a file between nodes (NFS's):
    /// before a lock is given up or weakened, what this client wrote reaches the data servers and the
    /// size the MDS; after one is granted, what was fetched ahead is dropped and the size asked again,
    /// so the holder reads what the previous holder wrote.
    pub async fn lock(&self, owner: u64, spec: LockSpec, wait: Option<&LockWait>) -> FsResult<()> {
        let flushed = if spec.typ != LockType::Write { self.flush().await } else { Ok(()) };
        if spec.typ == LockType::Unlock {
            // A lost write is no reason to keep the lock: it is released, and the write's error returned.
            let r = self.mds.lock(self.inode.ino, owner, spec, wait).await;
            return flushed.and(r);
        }
        flushed?;
        self.mds.lock(self.inode.ino, owner, spec, wait).await?;
        self.inode.wgen.fetch_add(1, Ordering::AcqRel);
        self.size(true).await?;
        Ok(())
    }

    /// Gives up every lock of `kind` that `owner` holds on the file, if it holds any (a close): no
    /// round trip otherwise.
    pub async fn unlock_all(&self, owner: u64, kind: LockKind) -> FsResult<()> {
        if !self.mds.session().holds_lock(self.inode.ino, owner, kind) {
            return Ok(());
        }
        self.lock(owner, LockSpec::unlock_all(kind), None).await
    }

    /// Makes everything written to the inode durable on the data servers, and the size and the file's
    /// metadata on the MDS.
    pub async fn fsync(&self) -> FsResult<()> {
        self.inode.fsync(&self.mds, &self.tag).await
    }

    /// Truncates or extends the file (ftruncate): earlier writes land first, and none before it
    /// extends the file again.
    pub async fn set_len(&self, size: u64) -> FsResult<()> {
        if self.write_behind || self.inode.has_pending() {
            self.inode.flush(&self.mds).await?;
        }
        self.mds.setattr(self.inode.ino, SetAttrs { size: Some(size), ..Default::default() }).await?;
        self.inode.truncated(size);
        Ok(())
    }

    /// Closes the handle (once; later calls do nothing): what it wrote is flushed and the MDS merges its
    /// end into the size, then the MDS forgets the handle. A handle without the cache tells the size with
    /// the close (one round trip). The first error is returned; the handle is closed either way.
    pub async fn release(&self) -> FsResult<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let ino = self.inode.ino;
        let wrote = self.wrote.load(Ordering::Acquire);
        let flushed = if wrote && (self.write_behind || self.inode.has_pending()) {
            self.inode.flush(&self.mds).await
        } else {
            Ok(())
        };
        // Reported by the flush: the close need not move size or mtime again.
        let (size, report) = match &flushed {
            Ok(()) if self.write_behind || !wrote => (None, false),
            _ => (Some(self.inode.local_state().0), wrote),
        };
        let closed = self.mds.close(ino, self.mds_handle, size, report).await;
        self.engine.detach(ino);
        flushed?;
        closed
    }

    /// True once [`Handle::release`] ran.
    pub fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// `fallocate(2)` through this handle: mode 0 or `FALLOC_FL_KEEP_SIZE` reserve space,
    /// `FALLOC_FL_PUNCH_HOLE` (with `KEEP_SIZE`) and `FALLOC_FL_ZERO_RANGE` make the range read as zeros.
    /// Buffered writes land first (a later punch must win over an earlier write); read-ahead fetched
    /// before is dropped; the size grows to the range's end unless `KEEP_SIZE`.
    pub async fn fallocate(&self, offset: u64, len: u64, mode: i32) -> FsResult<()> {
        self.check_writable()?;
        let end =
            offset.checked_add(len).ok_or_else(|| FsError::new(ErrorCode::TooBig, "range past the largest offset"))?;
        let zero = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        self.inode.drain().await?;
        if !zero {
            self.inode.layout.for_write(&self.mds, end).await?;
        }
        let data = self.engine.data();
        let r =
            self.inode.layout.retrying(|l| async move { data.fallocate(&self.tag, &l, offset, len, zero).await }).await;
        self.inode.wgen.fetch_add(1, Ordering::AcqRel);
        r?;
        if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > self.inode.size() {
            // The new size is this mount's answer from now on (getattr, lseek, appends), as a write's
            // would be, and the MDS has it before the call returns.
            self.inode.extended(end);
            self.inode.flush(&self.mds).await?;
        }
        Ok(())
    }

    /// `copy_file_range(2)` from this handle to `dst`: up to `len` bytes at `off_in` are read here and
    /// written at `off_out` through `dst` in pieces of [`COPY_PIECE`], so a copy of any length holds at
    /// most one piece in memory. Returns how many bytes were copied: short only at this file's end. The
    /// caller clamps `len` to what its reply can count.
    pub async fn copy_range(&self, off_in: u64, dst: &Handle, off_out: u64, len: u64) -> FsResult<u64> {
        dst.check_writable()?;
        off_out.checked_add(len).ok_or_else(|| FsError::new(ErrorCode::TooBig, "range past the largest offset"))?;
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(COPY_PIECE);
            let pieces = self.read(off_in + done, want).await?;
            let mut got = 0u64;
            for p in &pieces {
                dst.write(off_out + done + got, p).await?;
                got += p.len() as u64;
            }
            done += got;
            if got < want {
                break; // the end of the source
            }
        }
        Ok(done)
    }

    fn check_writable(&self) -> FsResult<()> {
        if !self.writable {
            return Err(FsError::new(ErrorCode::Invalid, "file not open for writing"));
        }
        self.wrote.store(true, Ordering::Release);
        Ok(())
    }

    fn fetch(&self, off: u64, len: u64) -> Fetch {
        let data = self.engine.data().clone();
        let tag = self.tag.clone();
        let inode = self.inode.clone();
        async move {
            inode
                .layout
                .retrying(|l| {
                    let (data, tag) = (&data, &tag);
                    async move { data.read_data(tag, &l, off, len).await }
                })
                .await
        }
        .boxed()
        .shared()
    }

    /// Fetches the blocks `(offset, len)` as vectored requests ([`crate::data::DataPlane::read_runs`]).
    fn fetch_blocks(&self, blocks: Vec<(u64, u64)>) -> BlocksFetch {
        let data = self.engine.data().clone();
        let tag = self.tag.clone();
        let inode = self.inode.clone();
        async move {
            inode
                .layout
                .retrying(|l| {
                    let (data, tag, blocks) = (&data, &tag, &blocks);
                    async move { data.read_runs(tag, &l, blocks).await }
                })
                .await
                .map(Arc::new)
        }
        .boxed()
        .shared()
    }

    /// Reads up to `len` bytes at `off`: short only at the end of the file. The data comes as the pieces
    /// it arrived in (see [`ReadData::slices`]).
    pub async fn read(&self, off: u64, len: u64) -> FsResult<Vec<Bytes>> {
        match self.bounds(off, len).await? {
            Some((end, size)) => self.read_within(off, end, size).await,
            None => Ok(Vec::new()),
        }
    }

    /// Where a read of `len` bytes at `off` ends, and the size it was clamped to; `None`: nothing to
    /// read there. Our own buffered writes land first, and a composite layout whose extents another
    /// client placed since our open is fetched again.
    async fn bounds(&self, off: u64, len: u64) -> FsResult<Option<(u64, u64)>> {
        if self.inode.has_pending() {
            // Our own buffered writes must be visible to our reads.
            self.inode.drain().await?;
        }
        self.inode.check_layout()?;
        let mut size = self.size(false).await?;
        if off.saturating_add(len) > size {
            size = self.size(true).await?;
        }
        let end = off.saturating_add(len).min(size);
        if off >= end {
            return Ok(None);
        }
        // A composite layout whose extents another client placed since our open: fetch it again (and
        // drop read-ahead fetched with the old one, which read those extents as holes).
        let known = self.inode.layout.get().instantiated_end();
        if size > known && self.inode.layout.for_read(&self.mds, size).await?.instantiated_end() > known {
            self.inode.wgen.fetch_add(1, Ordering::AcqRel);
        }
        Ok(Some((end, size)))
    }

    /// Reads `off..end` of a file of `size` bytes (see [`Handle::bounds`]).
    async fn read_within(&self, off: u64, end: u64, size: u64) -> FsResult<Vec<Bytes>> {
        match self.plan_read(off, end, size)? {
            Some(parts) => self.assemble(off, end, parts).await,
            None => self.read_direct(off, end).await,
        }
    }

    /// A read answered without waiting when its read-ahead chunks have arrived (the common case of a
    /// sequential reader), else what is left to do, for [`Handle::finish_read`]. Call it inside the
    /// tokio runtime's context (read-ahead is started by spawned tasks).
    pub fn try_read(&self, off: u64, len: u64) -> Result<FsResult<Vec<Bytes>>, PendingRead> {
        if !self.read_ahead || self.inode.has_pending() {
            return Err(PendingRead::Slow);
        }
        if let Err(e) = self.inode.check_layout() {
            return Ok(Err(e));
        }
        let size = self.inode.size();
        let end = off.saturating_add(len);
        if end > size || off >= end || size > self.inode.layout.get().instantiated_end() {
            return Err(PendingRead::Slow); // the size (or a composite layout) may have grown elsewhere
        }
        let parts = match self.plan_read(off, end, size) {
            Ok(Some(parts)) => parts,
            Ok(None) => return Err(PendingRead::Slow),
            Err(e) => return Ok(Err(e)),
        };
        let ready: Option<Vec<Vec<Bytes>>> = parts
            .iter()
            .map(|p| match p {
                Part::Chunk(c, f) => match f.peek() {
                    Some(Ok(data)) => Self::piece(off, end, *c, data),
                    _ => None,
                },
                Part::Block(f, i) => match f.peek() {
                    Some(Ok(blocks)) => Self::block_piece(off, end, &blocks[*i]),
                    _ => None,
                },
            })
            .collect();
        match ready {
            Some(pieces) => Ok(Ok(pieces.concat())),
            None => Err(PendingRead::Parts { off, end, parts }),
        }
    }

    /// Completes a read [`Handle::try_read`] could not answer at once.
    pub async fn finish_read(&self, off: u64, len: u64, pending: PendingRead) -> FsResult<Vec<Bytes>> {
        match pending {
            PendingRead::Slow => self.read(off, len).await,
            PendingRead::Parts { off, end, parts } => self.assemble(off, end, parts).await,
        }
    }

    /// For a read of `off..end` that continues a stream (or falls inside what was fetched already): the
    /// read-ahead chunks covering it or the strided block holding it, starting the fetches of those
    /// missing and of the ones ahead. `None`: a random read, read directly ([`super::read_ahead`] decides).
    fn plan_read(&self, off: u64, end: u64, size: u64) -> FsResult<Option<Vec<Part>>> {
        // A job following a PerSched pattern reads only what it asks for, each read gated to its intervals
        // and paced: fetches ahead would move bytes outside them, and past the granted rate. A handle
        // without read-ahead reads exactly too.
        if !self.read_ahead || self.periodic.active() {
            return Ok(None);
        }
        let first = off / RA_CHUNK;
        let last = (end - 1) / RA_CHUNK;
        let mut ra = self.ra.lock().map_err(|_| FsError::io("read-ahead state poisoned"))?;
        let wgen = self.inode.wgen();
        if ra.wgen != wgen {
            ra.chunks.clear();
            ra.windows.clear();
            ra.wgen = wgen;
        }
        // A write buffered since the caller drained (the kernel writes back mmap'ed pages on its own
        // schedule) is not on the data servers yet: chunks fetched now would be stale under this
        // generation. Read directly instead; the next read after the write sees a new generation.
        if self.inode.has_pending() {
            return Ok(None);
        }
        let chunked = (first..=last).all(|c| ra.chunks.contains_key(&c));
        let block = ra.block(off, end);
        let ahead = match ra.stream.plan(off, end, chunked || block.is_some()) {
            Plan::Direct => return Ok(None),
            Plan::Chunks { ahead: 0 } if !chunked => return Ok(block.map(|b| vec![b])),
            Plan::Chunks { ahead } => ahead,
            Plan::Strided { base, stride, ahead } => {
                self.fetch_windows(&mut ra, base, stride, off, end - off, ahead, size);
                return Ok(ra.block(off, end).map(|b| vec![b]));
            }
        };
        // Keep a little behind us (late out-of-order reads), drop the rest; fetch what is ahead.
        let keep_from = first.saturating_sub(2);
        let keep_to = last + RA_AHEAD + 1;
        ra.chunks.retain(|&c, _| c >= keep_from && c <= keep_to);
        let ahead_end = ((last + 1 + ahead) * RA_CHUNK).min(size);
        let mut c = first;
        while c * RA_CHUNK < ahead_end {
            if let std::collections::btree_map::Entry::Vacant(v) = ra.chunks.entry(c) {
                let start = c * RA_CHUNK;
                let f = self.fetch(start, RA_CHUNK.min(size - start));
                if c > last {
                    tokio::spawn(f.clone().map(|_| ()));
                }
                v.insert(f);
            }
            c += 1;
        }
        Ok(Some((first..=last).filter_map(|c| ra.chunks.get(&c).map(|f| Part::Chunk(c, f.clone()))).collect()))
    }

    /// For a strided stream's read at `off` of `len` bytes: fetches the window of blocks
    /// (`base + k * stride`, `len` bytes each, [`RA_CHUNK`] bytes of blocks per window) that holds it,
    /// unless fetched, and `ahead` windows beyond; drops the windows behind it. Blocks past `size` are
    /// not fetched.
    #[allow(clippy::too_many_arguments)]
    fn fetch_windows(&self, ra: &mut ReadAhead, base: u64, stride: u64, off: u64, len: u64, ahead: u64, size: u64) {
        let per = (RA_CHUNK / len).clamp(1, MAX_EXTENTS as u64);
        let span = per * stride;
        let w0 = (off - base) / span;
        ra.windows.retain(|&start, w| {
            start + w.count * w.stride > off.saturating_sub(span) && start <= off + (ahead + 1) * span
        });
        for w in w0..=w0 + ahead {
            let start = base + w * span;
            if start >= size {
                break;
            }
            let covered = ra.windows.get(&start).is_some_and(|x| x.stride == stride && x.len == len);
            if covered {
                continue;
            }
            let blocks: Vec<(u64, u64)> = (0..per)
                .map(|k| start + k * stride)
                .take_while(|&b| b < size)
                .map(|b| (b, len.min(size - b)))
                .collect();
            let count = blocks.len() as u64;
            let fetch = self.fetch_blocks(blocks);
            if w > w0 {
                tokio::spawn(fetch.clone().map(|_| ()));
            }
            ra.windows.insert(start, Window { stride, len, count, fetch });
        }
    }

    /// The part of chunk `c`'s data inside `off..end`; `None` if the chunk was fetched when the file
    /// was shorter.
    fn piece(off: u64, end: u64, c: u64, data: &ReadData) -> Option<Vec<Bytes>> {
        let cstart = c * RA_CHUNK;
        let from = off.max(cstart);
        let to = end.min(cstart + RA_CHUNK);
        (data.offset() + data.len() >= to).then(|| data.slices(from, to))
    }

    /// A read around the read-ahead.
    async fn read_direct(&self, off: u64, end: u64) -> FsResult<Vec<Bytes>> {
        let plane = self.engine.data();
        let data =
            self.inode.layout.retrying(|l| async move { plane.read_data(&self.tag, &l, off, end - off).await }).await?;
        Ok(data.slices(off, end))
    }

    /// The part of a strided block's data inside `off..end`; `None` unless the block holds all of it
    /// (it was fetched when the file was shorter).
    fn block_piece(off: u64, end: u64, data: &ReadData) -> Option<Vec<Bytes>> {
        (data.offset() <= off && data.offset() + data.len() >= end).then(|| data.slices(off, end))
    }

    async fn assemble(&self, off: u64, end: u64, parts: Vec<Part>) -> FsResult<Vec<Bytes>> {
        let mut pieces = Vec::with_capacity(parts.len());
        for part in parts {
            let piece = match &part {
                Part::Chunk(c, f) => Self::piece(off, end, *c, &f.clone().await?),
                Part::Block(f, i) => Self::block_piece(off, end, &f.clone().await?[*i]),
            };
            match piece {
                Some(p) => pieces.push(p),
                None => {
                    // Fetched when the file was shorter: read directly.
                    if let Ok(mut ra) = self.ra.lock() {
                        match part {
                            Part::Chunk(c, _) => {
                                ra.chunks.remove(&c);
                            }
                            Part::Block(..) => ra.windows.clear(),
                        }
                    }
                    return self.read_direct(off, end).await;
                }
            }
        }
        Ok(pieces.concat())
    }
}

/// What is left of a read [`Handle::try_read`] could not answer at once.
pub enum PendingRead {
    /// Start over on the asynchronous path (size refresh, draining our writes, random access).
    Slow,
    /// Wait for these read-ahead chunks or this block.
    Parts { off: u64, end: u64, parts: Vec<Part> },
}
