//! The data path of open files: write-behind per inode (sequential writes gathered into large chunks and
//! sent asynchronously, overlapping ranges kept in order) and read-ahead per handle, both inside
//! close-to-open consistency: `flush` drains and reports the size to the MDS, `open` starts afresh.

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tessera_client::data::ReadData;
use tessera_client::{Client, FsError, FsResult, Ino, IoTag, Layout, MdsClient, Timestamp};
use tessera_proto::bufpool::PoolBuf;
use tokio::sync::Notify;

/// Size of one write-behind chunk (one asynchronous `DataPlane::write`).
pub const WRITE_CHUNK: usize = 8 << 20;
/// Sequential streams buffered at once per inode (tasks writing their own parts of a shared file).
pub const WRITE_STREAMS: usize = 4;
/// Bytes of write-behind in flight per inode before writers wait.
pub const WRITE_INFLIGHT_MAX: u64 = 64 << 20;
use crate::readahead::{Plan, Stream};
pub use crate::readahead::{RA_AHEAD, RA_CHUNK};

struct WBuf {
    off: u64,
    /// Recycled: a streaming writer goes through 8 MiB chunks at the rate it writes.
    data: PoolBuf,
    tag: IoTag,
}

#[derive(Default)]
struct WState {
    /// One buffer per sequential stream, oldest first.
    bufs: Vec<WBuf>,
    /// Writes on their way to the data servers: (id, start, end).
    inflight: Vec<(u64, u64, u64)>,
    inflight_bytes: u64,
    next_id: u64,
    /// End of the furthest write through this mount (buffered bytes included).
    written_end: u64,
    /// Stripes written since the last fsync.
    dirty: BTreeSet<usize>,
    /// Writes not yet reported to the MDS (size, mtime).
    unreported: bool,
    last_write: Timestamp,
    /// First asynchronous write error, reported at the next write/flush/fsync/release.
    error: Option<FsError>,
}

/// One inode open through this mount: shared by all its handles.
pub struct OpenInode {
    pub ino: Ino,
    pub layout: Layout,
    st: Mutex<WState>,
    changed: Notify,
    /// Bumped by every write, so read-ahead data fetched before it is dropped.
    wgen: AtomicU64,
    /// The mode has bits a write by an unprivileged caller clears ([`privileged_bits`]), as last heard
    /// from the MDS through this mount.
    pub privileged: AtomicBool,
}

/// The mode bits a write or truncate by a caller without CAP_FSETID clears (Linux `should_remove_suid`):
/// S_ISUID, and S_ISGID when group-execute is set (without it S_ISGID means mandatory locking).
pub fn privileged_bits(perm: u32) -> u32 {
    let mut bits = perm & libc::S_ISUID;
    if perm & (libc::S_ISGID | libc::S_IXGRP) == libc::S_ISGID | libc::S_IXGRP {
        bits |= libc::S_ISGID;
    }
    bits
}

fn poisoned() -> FsError {
    FsError::io("write-behind state poisoned")
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl OpenInode {
    pub fn new(ino: Ino, layout: Layout) -> OpenInode {
        OpenInode {
            ino,
            layout,
            st: Mutex::new(WState::default()),
            changed: Notify::new(),
            wgen: AtomicU64::new(0),
            privileged: AtomicBool::new(false),
        }
    }

    pub fn wgen(&self) -> u64 {
        self.wgen.load(Ordering::Acquire)
    }

    fn check_layout(&self) -> FsResult<()> {
        if self.layout.targets.is_empty() {
            return Err(FsError::invalid(format!("inode {} has no data layout", self.ino)));
        }
        Ok(())
    }

    /// Buffers a write; returns once it is buffered or sent (errors of earlier writes come back here).
    pub async fn write(self: &Arc<Self>, client: &Client, tag: &IoTag, off: u64, data: &[u8]) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.check_layout()?;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_write(client, tag, off, data) {
                return r;
            }
            // An overlapping write is still in flight (keep the order) or too much is in flight.
            notified.await;
        }
    }

    /// Buffers a write if that needs no waiting: `None` when an overlapping write is still in flight
    /// or too much is. Never blocks, so the FUSE thread can answer at once; call it inside the tokio
    /// runtime's context (a full buffer is sent by a spawned task).
    pub fn try_write(self: &Arc<Self>, client: &Client, tag: &IoTag, off: u64, data: &[u8]) -> Option<FsResult<()>> {
        let Some(end) = off.checked_add(data.len() as u64) else {
            return Some(Err(FsError::new(tessera_client::ErrorCode::TooBig, "write beyond the largest offset")));
        };
        let mut st = match self.st.lock() {
            Ok(st) => st,
            Err(_) => return Some(Err(poisoned())),
        };
        if let Some(e) = st.error.take() {
            return Some(Err(e));
        }
        // The continuation of a buffered stream: extend it — unless the new bytes overlap another
        // buffer or a write in flight, whose older data could then land after them.
        let continues = |b: &WBuf| b.off + b.data.len() as u64 == off && b.tag == *tag;
        let span = |b: &WBuf| (b.off, b.off + b.data.len() as u64);
        let extend =
            st.bufs.iter().position(|b| continues(b) && b.data.len() + data.len() <= WRITE_CHUNK).filter(|&i| {
                !st.bufs.iter().enumerate().any(|(j, b)| j != i && overlaps(span(b), (off, end)))
                    && !st.inflight.iter().any(|&(_, s, e)| overlaps((s, e), (off, end)))
            });
        if let Some(i) = extend {
            st.bufs[i].data.extend_from_slice(data);
            let full = st.bufs[i].data.len() >= WRITE_CHUNK;
            self.note_write(&mut st, end);
            if full {
                self.submit(&mut st, i, client);
            }
            return Some(Ok(()));
        }
        // A new stream. Send first what it overlaps (writes stay in order) or continues (a full buffer),
        // and the oldest stream if all are taken.
        let mut i = 0;
        while i < st.bufs.len() {
            let b = &st.bufs[i];
            if continues(b) || overlaps(span(b), (off, end)) {
                self.submit(&mut st, i, client);
            } else {
                i += 1;
            }
        }
        if st.bufs.len() >= WRITE_STREAMS {
            self.submit(&mut st, 0, client);
        }
        let busy = st.inflight.iter().any(|&(_, s, e)| overlaps((s, e), (off, end)));
        let full = st.inflight_bytes > 0 && st.inflight_bytes + data.len() as u64 > WRITE_INFLIGHT_MAX;
        if busy || full {
            return None;
        }
        // Large writes are likely a streaming writer: room for a whole chunk at once. Small ones grow
        // as needed, so many files open with a little data each stay cheap.
        let cap = if data.len() >= WRITE_CHUNK {
            data.len()
        } else if data.len() >= 128 << 10 {
            WRITE_CHUNK
        } else {
            (data.len() * 4).max(16 << 10)
        };
        let mut buf = PoolBuf::with_capacity(cap);
        buf.extend_from_slice(data);
        st.bufs.push(WBuf { off, data: buf, tag: tag.clone() });
        self.note_write(&mut st, end);
        if data.len() >= WRITE_CHUNK {
            let last = st.bufs.len() - 1;
            self.submit(&mut st, last, client);
        }
        Some(Ok(()))
    }

    fn note_write(&self, st: &mut WState, end: u64) {
        st.written_end = st.written_end.max(end);
        st.unreported = true;
        st.last_write = Timestamp::now();
        self.wgen.fetch_add(1, Ordering::AcqRel);
    }

    /// Sends buffer `i` asynchronously.
    fn submit(self: &Arc<Self>, st: &mut WState, i: usize, client: &Client) {
        if i >= st.bufs.len() {
            return;
        }
        let b = st.bufs.remove(i);
        let id = st.next_id;
        st.next_id += 1;
        let len = b.data.len() as u64;
        st.inflight.push((id, b.off, b.off + len));
        st.inflight_bytes += len;
        let me = self.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let res = client.data().write(&b.tag, &me.layout, b.off, b.data.freeze()).await;
            if let Ok(mut st) = me.st.lock() {
                st.inflight.retain(|&(i, _, _)| i != id);
                st.inflight_bytes -= len;
                match res {
                    Ok(stripes) => st.dirty.extend(stripes),
                    Err(e) => {
                        tracing::warn!(ino = me.ino, "background write at {} failed: {e}", b.off);
                        st.error.get_or_insert(e);
                    }
                }
            }
            me.changed.notify_waiters();
        });
    }

    /// True if writes are buffered or in flight.
    pub fn has_pending(&self) -> bool {
        self.st.lock().map(|st| !st.bufs.is_empty() || !st.inflight.is_empty()).unwrap_or(false)
    }

    /// Sends the buffers and waits until nothing is in flight; returns (and clears) the first write error.
    pub async fn drain(self: &Arc<Self>, client: &Client) -> FsResult<()> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.st.lock().map_err(|_| poisoned())?;
                while !st.bufs.is_empty() {
                    self.submit(&mut st, 0, client);
                }
                if st.inflight.is_empty() {
                    return match st.error.take() {
                        Some(e) => Err(e),
                        None => Ok(()),
                    };
                }
            }
            notified.await;
        }
    }

    /// Drains, then tells the MDS the size if there were writes since the last report.
    pub async fn flush(self: &Arc<Self>, client: &Client, mds: &MdsClient) -> FsResult<()> {
        self.drain(client).await?;
        let report = {
            let mut st = self.st.lock().map_err(|_| poisoned())?;
            let r = st.unreported.then_some(st.written_end);
            st.unreported = false;
            r
        };
        if let Some(size) = report {
            if let Err(e) = mds.report_write(self.ino, size).await {
                if let Ok(mut st) = self.st.lock() {
                    st.unreported = true;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Drains, makes the written stripes durable and reports the size.
    pub async fn fsync(self: &Arc<Self>, client: &Client, mds: &MdsClient, tag: &IoTag) -> FsResult<()> {
        self.drain(client).await?;
        let stripes: Vec<usize> = {
            let mut st = self.st.lock().map_err(|_| poisoned())?;
            std::mem::take(&mut st.dirty).into_iter().collect()
        };
        if let Err(e) = client.data().fsync(tag, &self.layout, &stripes).await {
            if let Ok(mut st) = self.st.lock() {
                st.dirty.extend(stripes);
            }
            return Err(e);
        }
        self.flush(client, mds).await?;
        // The file's metadata (its creation, size, times) must be on the MDS's disk too.
        mds.sync().await
    }

    /// After a truncate: writes before it no longer extend the file.
    pub fn truncated(&self, size: u64) {
        if let Ok(mut st) = self.st.lock() {
            st.written_end = st.written_end.min(size);
        }
        self.wgen.fetch_add(1, Ordering::AcqRel);
    }

    /// End of the furthest write, and the time of the last unreported write (for attributes).
    pub fn local_state(&self) -> (u64, Option<Timestamp>) {
        self.st.lock().map(|st| (st.written_end, st.unreported.then_some(st.last_write))).unwrap_or((0, None))
    }
}

/// One read-ahead chunk on its way: its replies are kept apart, so a read inside one costs no copy.
pub type Fetch = Shared<BoxFuture<'static, Result<ReadData, FsError>>>;

/// Read-ahead state of one handle.
#[derive(Default)]
pub struct ReadAhead {
    wgen: u64,
    /// Which reads form a stream, and how far ahead to fetch ([`crate::readahead`]).
    stream: Stream,
    chunks: BTreeMap<u64, Fetch>,
}

/// One open file handle.
pub struct Handle {
    pub inode: Arc<OpenInode>,
    pub mds_handle: u64,
    pub tag: IoTag,
    /// The opener's credentials.
    pub mds: MdsClient,
    pub client: Client,
    pub writable: bool,
    pub wrote: AtomicBool,
    /// Size last heard from the MDS.
    pub mds_size: AtomicU64,
    ra: Mutex<ReadAhead>,
}

impl Handle {
    pub fn new(inode: Arc<OpenInode>, mds_handle: u64, tag: IoTag, client: Client, writable: bool, size: u64) -> Self {
        Handle {
            inode,
            mds_handle,
            tag,
            mds: client.mds().clone(),
            client,
            writable,
            wrote: AtomicBool::new(false),
            mds_size: AtomicU64::new(size),
            ra: Mutex::new(ReadAhead::default()),
        }
    }

    /// The size as far as this handle knows; `refresh` asks the MDS.
    pub async fn size(&self, refresh: bool) -> FsResult<u64> {
        if refresh {
            let attr = self.mds.getattr(self.inode.ino).await?;
            self.mds_size.store(attr.size, Ordering::Release);
        }
        Ok(self.mds_size.load(Ordering::Acquire).max(self.inode.local_state().0))
    }

    pub async fn write(&self, off: u64, data: &[u8]) -> FsResult<()> {
        self.check_writable()?;
        self.inode.write(&self.client, &self.tag, off, data).await
    }

    /// [`Handle::write`] if it needs no waiting (see [`OpenInode::try_write`]).
    pub fn try_write(&self, off: u64, data: &[u8]) -> Option<FsResult<()>> {
        if let Err(e) = self.check_writable() {
            return Some(Err(e));
        }
        self.inode.try_write(&self.client, &self.tag, off, data)
    }

    fn check_writable(&self) -> FsResult<()> {
        if !self.writable {
            return Err(FsError::new(tessera_client::ErrorCode::Invalid, "file not open for writing"));
        }
        self.wrote.store(true, Ordering::Release);
        Ok(())
    }

    fn fetch(&self, off: u64, len: u64) -> Fetch {
        let client = self.client.clone();
        let tag = self.tag.clone();
        let layout = self.inode.layout.clone();
        async move { client.data().read_data(&tag, &layout, off, len).await }.boxed().shared()
    }

    /// Reads up to `len` bytes at `off`: short only at the end of the file. The data comes as the pieces
    /// it arrived in (see [`ReadData::slices`]).
    pub async fn read(&self, off: u64, len: u64) -> FsResult<Vec<Bytes>> {
        if self.inode.has_pending() {
            // Our own buffered writes must be visible to our reads.
            self.inode.drain(&self.client).await?;
        }
        self.inode.check_layout()?;
        let mut size = self.size(false).await?;
        if off.saturating_add(len) > size {
            size = self.size(true).await?;
        }
        let end = off.saturating_add(len).min(size);
        if off >= end {
            return Ok(Vec::new());
        }
        match self.plan_read(off, end, size)? {
            Some(parts) => self.assemble(off, end, parts).await,
            None => self.read_direct(off, end).await,
        }
    }

    /// A read answered without waiting when its read-ahead chunks have arrived (the common case of a
    /// sequential reader), else what is left to do, for [`Handle::finish_read`]. Call it inside the
    /// tokio runtime's context (read-ahead is started by spawned tasks).
    pub fn try_read(&self, off: u64, len: u64) -> Result<FsResult<Vec<Bytes>>, PendingRead> {
        if self.inode.has_pending() {
            return Err(PendingRead::Slow);
        }
        if let Err(e) = self.inode.check_layout() {
            return Ok(Err(e));
        }
        let size = self.local_size();
        let end = off.saturating_add(len);
        if end > size || off >= end {
            return Err(PendingRead::Slow); // the size may have grown elsewhere: ask the MDS
        }
        let parts = match self.plan_read(off, end, size) {
            Ok(Some(parts)) => parts,
            Ok(None) => return Err(PendingRead::Slow),
            Err(e) => return Ok(Err(e)),
        };
        let ready: Option<Vec<Vec<Bytes>>> = parts
            .iter()
            .map(|(c, f)| match f.peek() {
                Some(Ok(data)) => Self::piece(off, end, *c, data),
                _ => None,
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

    fn local_size(&self) -> u64 {
        self.mds_size.load(Ordering::Acquire).max(self.inode.local_state().0)
    }

    /// For a read of `off..end` that continues a stream (or falls inside chunks already fetched): the
    /// read-ahead chunks covering it, starting the fetches of those missing and of the ones ahead.
    /// `None`: a random read, read directly ([`crate::readahead`] decides).
    fn plan_read(&self, off: u64, end: u64, size: u64) -> FsResult<Option<Vec<(u64, Fetch)>>> {
        let first = off / RA_CHUNK;
        let last = (end - 1) / RA_CHUNK;
        let mut ra = self.ra.lock().map_err(|_| FsError::io("read-ahead state poisoned"))?;
        let wgen = self.inode.wgen();
        if ra.wgen != wgen {
            ra.chunks.clear();
            ra.wgen = wgen;
        }
        // A write buffered since the caller drained (the kernel writes back mmap'ed pages on its own
        // schedule) is not on the data servers yet: chunks fetched now would be stale under this
        // generation. Read directly instead; the next read after the write sees a new generation.
        if self.inode.has_pending() {
            return Ok(None);
        }
        let cached = (first..=last).all(|c| ra.chunks.contains_key(&c));
        let ahead = match ra.stream.plan(off, end, cached) {
            Plan::Direct => return Ok(None),
            Plan::Chunks { ahead } => ahead,
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
        Ok(Some((first..=last).filter_map(|c| ra.chunks.get(&c).map(|f| (c, f.clone()))).collect()))
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
        let data = self.client.data().read_data(&self.tag, &self.inode.layout, off, end - off).await?;
        Ok(data.slices(off, end))
    }

    async fn assemble(&self, off: u64, end: u64, parts: Vec<(u64, Fetch)>) -> FsResult<Vec<Bytes>> {
        let mut pieces = Vec::with_capacity(parts.len());
        for (c, f) in parts {
            let data = f.await?;
            match Self::piece(off, end, c, &data) {
                Some(p) => pieces.push(p),
                None => {
                    // The chunk was fetched when the file was shorter: read directly.
                    if let Ok(mut ra) = self.ra.lock() {
                        ra.chunks.remove(&c);
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
    /// Wait for these read-ahead chunks.
    Parts { off: u64, end: u64, parts: Vec<(u64, Fetch)> },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileged_bits_follow_linux_should_remove_suid() {
        assert_eq!(privileged_bits(0o4755), 0o4000);
        assert_eq!(privileged_bits(0o2775), 0o2000, "S_ISGID with group-exec");
        assert_eq!(privileged_bits(0o2765), 0, "S_ISGID without group-exec is mandatory locking");
        assert_eq!(privileged_bits(0o6777), 0o6000);
        assert_eq!(privileged_bits(0o777), 0);
    }

    #[test]
    fn ranges_overlap() {
        assert!(overlaps((0, 10), (5, 6)));
        assert!(overlaps((5, 6), (0, 10)));
        assert!(!overlaps((0, 10), (10, 20)));
        assert!(!overlaps((10, 20), (0, 10)));
    }
}
