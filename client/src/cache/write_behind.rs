//! Write-behind per open inode, inside close-to-open consistency: `flush` drains and reports the size
//! to the MDS, `open` starts afresh (the handles over it are [`super::open_file`]).
//!
//! Write-behind keeps an inode's buffered writes in a map by file offset, never overlapping: a write
//! that falls inside, overlaps or continues buffered data is merged into it, so a rewrite costs no
//! request. Buffers that grow to [`STREAM_MIN`] are streams (a sequential writer, tasks writing their
//! parts of a shared file): each is sent on its own once it holds [`WRITE_CHUNK`], and the least
//! recently written one when more than [`WRITE_STREAMS`] are buffered. Shorter buffers are scattered
//! writes: once [`BATCH_BYTES`] or [`BATCH_RUNS`] of them are buffered they go together, one vectored
//! request per object ([`crate::data::DataPlane::write_runs`]). A buffer never leaves while a
//! write it overlaps is in flight (the data servers could apply the two in either order): it waits in
//! the map until that one has landed, and the writer does not wait for it.

use crate::data::{DataPlane, WriteRun};
use crate::live_layout::LiveLayout;
use crate::mds_client::MdsClient;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tessera_proto::bufpool::PoolBuf;
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::Layout;
use tessera_proto::types::{Ino, IoTag, Timestamp};
use tokio::sync::Notify;

/// Largest buffer: a stream is sent when it holds this much (one asynchronous `DataPlane::write`).
pub const WRITE_CHUNK: usize = 8 << 20;
/// Buffers at least this long are streams; shorter ones are scattered writes, sent in batches.
pub const STREAM_MIN: usize = 128 << 10;
/// Streams buffered at once per inode (tasks writing their own parts of a shared file).
pub const WRITE_STREAMS: usize = 4;
/// Bytes of scattered writes buffered per inode before they are sent as a batch.
pub const BATCH_BYTES: u64 = 1 << 20;
/// Scattered writes buffered per inode before they are sent as a batch.
pub const BATCH_RUNS: usize = 256;
/// Batches of scattered writes in flight per inode: more would only queue at the data servers, and
/// every buffer they overlap would wait for them.
pub const BATCHES_INFLIGHT: usize = 4;
/// Bytes of scattered writes buffered per inode before writers wait.
pub const SCATTERED_MAX: u64 = 4 << 20;
/// Bytes of write-behind in flight per inode before writers wait.
pub const WRITE_INFLIGHT_MAX: u64 = 64 << 20;
/// Bytes buffered and in flight per inode before writers wait.
pub const WRITE_BEHIND_MAX: u64 = WRITE_INFLIGHT_MAX + (WRITE_STREAMS * WRITE_CHUNK) as u64;
/// Bytes buffered and in flight per inode before a write handed over whole ([`OpenInode::write_owned`])
/// waits: its chunks are the caller's fresh memory, not recycled buffers, so a writer that reads its data
/// into new blocks (`tessera put`) holds 4 chunks at most, as it did with its own streams.
pub const OWNED_MAX: u64 = 4 * WRITE_CHUNK as u64;

struct WBuf {
    /// Recycled: a streaming writer goes through 8 MiB chunks at the rate it writes.
    data: PoolBuf,
    /// The tag of the write that started it (a buffer merged from several writes keeps the latest's).
    tag: IoTag,
    /// The inode's write count at its last write: the least recently written stream goes first.
    last: u64,
}

impl WBuf {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

fn is_stream(len: u64) -> bool {
    len >= STREAM_MIN as u64
}

#[derive(Default)]
struct WState {
    /// Buffered writes by file offset, never overlapping.
    bufs: BTreeMap<u64, WBuf>,
    /// Bytes in `bufs`.
    buffered: u64,
    /// Streams in `bufs`.
    streams: usize,
    /// Bytes and buffers of the scattered writes in `bufs`.
    scattered_bytes: u64,
    scattered_runs: usize,
    /// Writes on their way to the data servers, by start: (end, id of their send). Never overlapping.
    inflight: BTreeMap<u64, (u64, u64)>,
    inflight_bytes: u64,
    /// Batches of scattered writes in flight.
    batches: usize,
    /// The last batch found nothing to send (all held back by writes in flight): no new attempt
    /// until one of those lands.
    batch_held: bool,
    next_id: u64,
    /// Writes through this inode so far.
    writes: u64,
    /// End of the furthest write through this client (buffered bytes included).
    written_end: u64,
    /// Stripes written since the last fsync.
    dirty: BTreeSet<usize>,
    /// Writes not yet reported to the MDS (size, mtime).
    unreported: bool,
    last_write: Timestamp,
    /// First asynchronous write error, reported at the next write/flush/fsync/release.
    error: Option<FsError>,
}

impl WState {
    fn account(&mut self, len: u64, added: bool) {
        let (bytes, runs, streams) = (&mut self.scattered_bytes, &mut self.scattered_runs, &mut self.streams);
        if added {
            self.buffered += len;
            if is_stream(len) {
                *streams += 1;
            } else {
                *bytes += len;
                *runs += 1;
            }
        } else {
            self.buffered -= len;
            if is_stream(len) {
                *streams -= 1;
            } else {
                *bytes -= len;
                *runs -= 1;
            }
        }
    }

    fn put(&mut self, off: u64, b: WBuf) {
        self.account(b.len(), true);
        self.bufs.insert(off, b);
    }

    fn take(&mut self, off: u64) -> Option<WBuf> {
        let b = self.bufs.remove(&off)?;
        self.account(b.len(), false);
        Some(b)
    }

    /// True if a write in flight overlaps `start..end`.
    fn in_flight(&self, start: u64, end: u64) -> bool {
        // In-flight writes never overlap, so their ends grow with their starts: only the last one
        // starting before `end` can reach past `start`.
        self.inflight.range(..end).next_back().is_some_and(|(_, &(e, _))| e > start)
    }

    fn blocked(&self, off: u64) -> bool {
        self.bufs.get(&off).is_some_and(|b| self.in_flight(off, off + b.len()))
    }

    /// The scattered writes the next batch takes: at most [`BATCH_RUNS`] and about [`BATCH_BYTES`], by
    /// offset, none held back by a write in flight. Small batches land soon, so writers waiting for
    /// room never wait long.
    fn next_batch(&self) -> Vec<u64> {
        let (mut keys, mut bytes) = (Vec::new(), 0);
        for (&k, b) in &self.bufs {
            if keys.len() >= BATCH_RUNS || bytes >= BATCH_BYTES {
                break;
            }
            if !is_stream(b.len()) && !self.in_flight(k, k + b.len()) {
                keys.push(k);
                bytes += b.len();
            }
        }
        keys
    }

    /// Offsets of the buffers that overlap or touch `start..end`, in order.
    fn touching(&self, start: u64, end: u64) -> Vec<u64> {
        let mut v = Vec::new();
        for (&k, b) in self.bufs.range(..=end).rev() {
            if k + b.len() < start {
                break;
            }
            v.push(k);
        }
        v.reverse();
        v
    }

    /// Takes `data` (written at `off`, ending at `end`) into the buffers; returns the offset of the
    /// buffer holding it, and the buffers it touches but is too long to merge with, taken out to be
    /// sent first. `None` (nothing changed) when one of those is held back by a write in flight: the
    /// writer waits for that one to land.
    fn absorb(&mut self, off: u64, end: u64, data: &[u8], tag: &IoTag) -> Option<(u64, Vec<(u64, WBuf)>)> {
        self.writes += 1;
        let now = self.writes;
        let touching = self.touching(off, end);
        if let [k] = touching[..] {
            if let Some(b) = self.bufs.get_mut(&k) {
                let (bend, blen) = (k + b.len(), b.len());
                if k <= off && end <= bend {
                    // A rewrite of buffered bytes.
                    let at = (off - k) as usize;
                    b.data.as_mut_slice()[at..at + data.len()].copy_from_slice(data);
                    b.last = now;
                    return Some((k, Vec::new()));
                }
                if bend == off && blen + data.len() as u64 <= WRITE_CHUNK as u64 {
                    // The continuation of a buffer: the common case of a sequential writer.
                    b.data.extend_from_slice(data);
                    b.last = now;
                    self.account(blen, false);
                    self.account(blen + data.len() as u64, true);
                    return Some((k, Vec::new()));
                }
            }
        }
        let start = touching.first().map_or(off, |&k| k.min(off));
        let stop = touching.last().map_or(end, |&k| (k + self.bufs.get(&k).map_or(0, WBuf::len)).max(end));
        if !touching.is_empty() && stop - start <= WRITE_CHUNK as u64 {
            // Overlaps or joins buffers: one buffer for all, the new bytes over the old.
            let mut buf = PoolBuf::with_capacity((stop - start) as usize);
            let mut pos = start;
            for k in &touching {
                let Some(b) = self.take(*k) else { continue };
                if *k > pos {
                    buf.extend_from_slice(&data[(pos - off) as usize..(*k - off) as usize]);
                }
                buf.extend_from_slice(b.data.as_slice());
                pos = k + b.len();
            }
            if stop > pos {
                buf.extend_from_slice(&data[(pos - off) as usize..(stop - off) as usize]);
            }
            buf.as_mut_slice()[(off - start) as usize..(end - start) as usize].copy_from_slice(data);
            self.put(start, WBuf { data: buf, tag: tag.clone(), last: now });
            return Some((start, Vec::new()));
        }
        // Buffers it touches but is too long to merge with are older: they go first.
        if touching.iter().any(|&k| self.blocked(k)) {
            self.writes -= 1;
            return None;
        }
        let older = touching.iter().filter_map(|&k| self.take(k).map(|b| (k, b))).collect();
        // A buffer of its own. Large writes are likely a streaming writer: room for a whole chunk at
        // once. Small ones grow as needed, so many files open with a little data each stay cheap.
        let cap = if data.len() >= WRITE_CHUNK {
            data.len()
        } else if data.len() >= 128 << 10 {
            WRITE_CHUNK
        } else {
            (data.len() * 4).max(16 << 10)
        };
        let mut buf = PoolBuf::with_capacity(cap);
        buf.extend_from_slice(data);
        self.put(off, WBuf { data: buf, tag: tag.clone(), last: now });
        Some((off, older))
    }
}

/// One inode open through this client (a mount, a library user): shared by all its handles
/// ([`super::engine::Engine`] keeps the table).
pub struct OpenInode {
    pub ino: Ino,
    /// The client's data servers, where the buffers go.
    data: Arc<DataPlane>,
    /// Composite layouts gain extents as the file reaches them ([`LiveLayout`]).
    pub layout: LiveLayout,
    st: Mutex<WState>,
    changed: Notify,
    /// Bumped by every write, so read-ahead data fetched before it is dropped.
    pub(super) wgen: AtomicU64,
    /// The mode has bits a write by an unprivileged caller clears ([`privileged_bits`]), as last heard
    /// from the MDS through this client.
    pub privileged: AtomicBool,
    /// The file's size as last heard from the MDS (each open's reply, a refresh) or set here (a truncate):
    /// shared by every handle, so an open after another client's close sees that client's size.
    mds_size: AtomicU64,
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

impl OpenInode {
    pub fn new(ino: Ino, layout: Layout, data: Arc<DataPlane>, mds: Option<MdsClient>) -> OpenInode {
        OpenInode {
            ino,
            data,
            layout: match mds {
                Some(m) => LiveLayout::with_mds(ino, layout, m),
                None => LiveLayout::new(ino, layout),
            },
            st: Mutex::new(WState::default()),
            changed: Notify::new(),
            wgen: AtomicU64::new(0),
            privileged: AtomicBool::new(false),
            mds_size: AtomicU64::new(0),
        }
    }

    /// The size the MDS just gave (an open's reply, a getattr): what this client knows from now on,
    /// together with its own writes.
    pub fn heard_size(&self, size: u64) {
        self.mds_size.store(size, Ordering::Release);
    }

    /// The file's size as this client knows it: the MDS's last word and this client's writes since.
    pub fn size(&self) -> u64 {
        self.mds_size.load(Ordering::Acquire).max(self.local_state().0)
    }

    pub fn wgen(&self) -> u64 {
        self.wgen.load(Ordering::Acquire)
    }

    /// Fails (EINVAL) if the file has no data layout to read or write through.
    pub fn check_layout(&self) -> FsResult<()> {
        if self.layout.get().targets.is_empty() {
            return Err(FsError::invalid(format!("inode {} has no data layout", self.ino)));
        }
        Ok(())
    }

    /// Buffers a write; returns once it is buffered or sent (errors of earlier writes come back here).
    pub async fn write(self: &Arc<Self>, mds: &MdsClient, tag: &IoTag, off: u64, data: &[u8]) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.check_layout()?;
        // A write reaching extents of a composite layout not placed yet has them placed first.
        let end = off.saturating_add(data.len() as u64);
        self.layout.for_write(mds, end).await?;
        let t0 = std::time::Instant::now();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_write(tag, off, data) {
                if t0.elapsed() > std::time::Duration::from_millis(10) {
                    let (b, f) = self.st.lock().map(|st| (st.buffered, st.inflight_bytes)).unwrap_or_default();
                    tracing::debug!(ino = self.ino, "a write waited {:?} (buffered {b}, in flight {f})", t0.elapsed());
                }
                return r;
            }
            // Too much is buffered and in flight.
            notified.await;
        }
    }

    /// [`OpenInode::write`] of bytes the caller hands over: a write of at least [`WRITE_CHUNK`] that no
    /// buffered or in-flight write overlaps or touches goes out as it is, without a copy into a buffer
    /// (a whole stream chunk: `tessera put`'s blocks, large transfers); any other is buffered as ever.
    pub async fn write_owned(self: &Arc<Self>, mds: &MdsClient, tag: &IoTag, off: u64, data: Bytes) -> FsResult<()> {
        if data.len() < WRITE_CHUNK {
            return self.write(mds, tag, off, &data).await;
        }
        self.check_layout()?;
        self.layout.for_write(mds, off.saturating_add(data.len() as u64)).await?;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_write_owned(tag, off, &data) {
                return r;
            }
            notified.await;
        }
    }

    /// [`OpenInode::try_write`] for [`OpenInode::write_owned`].
    fn try_write_owned(self: &Arc<Self>, tag: &IoTag, off: u64, data: &Bytes) -> Option<FsResult<()>> {
        let Some(end) = off.checked_add(data.len() as u64) else {
            return Some(Err(FsError::new(ErrorCode::TooBig, "write beyond the largest offset")));
        };
        {
            let mut st = match self.st.lock() {
                Ok(st) => st,
                Err(_) => return Some(Err(poisoned())),
            };
            let clear = end <= self.layout.get().instantiated_end()
                && st.error.is_none()
                && st.touching(off, end).is_empty()
                && !st.in_flight(off, end);
            if clear {
                let held = st.buffered + st.inflight_bytes;
                if held > 0 && held + data.len() as u64 > OWNED_MAX {
                    self.send_ready(&mut st);
                    return None;
                }
                st.writes += 1;
                self.note_write(&mut st, end);
                self.send_runs(&mut st, vec![WriteRun { tag: tag.clone(), offset: off, data: data.clone() }], false);
                return Some(Ok(()));
            }
        }
        self.try_write(tag, off, data)
    }

    /// Buffers a write if that needs no waiting: `None` when too much is buffered and in flight. Never
    /// blocks, so the FUSE thread can answer at once; call it inside the tokio runtime's context (what
    /// is sent goes by spawned tasks).
    pub fn try_write(self: &Arc<Self>, tag: &IoTag, off: u64, data: &[u8]) -> Option<FsResult<()>> {
        let Some(end) = off.checked_add(data.len() as u64) else {
            return Some(Err(FsError::new(ErrorCode::TooBig, "write beyond the largest offset")));
        };
        if end > self.layout.get().instantiated_end() {
            return None; // extents to place first: the MDS must be asked (see `write`)
        }
        let mut st = match self.st.lock() {
            Ok(st) => st,
            Err(_) => return Some(Err(poisoned())),
        };
        if let Some(e) = st.error.take() {
            return Some(Err(e));
        }
        let len = data.len() as u64;
        let held = |st: &WState| st.buffered + st.inflight_bytes;
        if held(&st) > 0 && held(&st) + len > WRITE_BEHIND_MAX {
            self.send_ready(&mut st);
            if held(&st) > 0 && held(&st) + len > WRITE_BEHIND_MAX {
                return None;
            }
        }
        if st.scattered_bytes >= SCATTERED_MAX {
            // The data servers take scattered writes slower than they come: wait for a batch to land.
            self.send_batch(&mut st);
            return None;
        }
        let (key, older) = st.absorb(off, end, data, tag)?;
        self.note_write(&mut st, end);
        for b in older {
            self.send_bufs(&mut st, vec![b], false);
        }
        // A full stream goes now.
        if st.bufs.get(&key).is_some_and(|b| b.data.len() >= WRITE_CHUNK) {
            self.send(&mut st, &[key], false);
        }
        // Too many streams: the least recently written goes.
        while st.streams > WRITE_STREAMS {
            let lru = st
                .bufs
                .iter()
                .filter(|(&k, b)| is_stream(b.len()) && !st.blocked(k))
                .min_by_key(|(_, b)| b.last)
                .map(|(&k, _)| k);
            match lru {
                Some(k) => {
                    self.send(&mut st, &[k], false);
                }
                None => break,
            }
        }
        // Enough scattered writes: a batch, unless enough are on their way.
        if st.scattered_bytes >= BATCH_BYTES || st.scattered_runs >= BATCH_RUNS {
            self.send_batch(&mut st);
        }
        Some(Ok(()))
    }

    /// A write sent at once, not buffered (an open without the cache): returns once the data servers
    /// have it; its stripes count for the next fsync and its end for the size, as a buffered write's.
    /// Buffered writes of other handles land first, so the servers never apply an older one after it.
    pub async fn write_through(self: &Arc<Self>, mds: &MdsClient, tag: &IoTag, off: u64, data: Bytes) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.check_layout()?;
        let end = off
            .checked_add(data.len() as u64)
            .ok_or_else(|| FsError::new(ErrorCode::TooBig, "write beyond the largest file offset"))?;
        if self.has_pending() {
            self.drain().await?;
        }
        self.layout.for_write(mds, end).await?;
        let stripes = self
            .layout
            .retrying(|l| {
                let data = data.clone();
                async move { self.data.write(tag, &l, off, data).await }
            })
            .await?;
        let mut st = self.st.lock().map_err(|_| poisoned())?;
        st.dirty.extend(stripes);
        self.note_write(&mut st, end);
        Ok(())
    }

    fn note_write(&self, st: &mut WState, end: u64) {
        st.written_end = st.written_end.max(end);
        st.unreported = true;
        st.last_write = Timestamp::now();
        self.wgen.fetch_add(1, Ordering::AcqRel);
    }

    /// Sends the buffers at `keys` that no write in flight holds back (`batch`: as a batch of
    /// scattered writes); returns whether it sent any.
    fn send(self: &Arc<Self>, st: &mut WState, keys: &[u64], batch: bool) -> bool {
        let bufs = keys.iter().filter(|&&k| !st.blocked(k)).copied().collect::<Vec<_>>();
        let bufs: Vec<_> = bufs.into_iter().filter_map(|k| st.take(k).map(|b| (k, b))).collect();
        let sent = !bufs.is_empty();
        self.send_bufs(st, bufs, batch);
        sent
    }

    /// Sends the scattered writes as one batch if fewer than [`BATCHES_INFLIGHT`] are on their way
    /// and the last attempt was not held back since.
    fn send_batch(self: &Arc<Self>, st: &mut WState) {
        if st.batches >= BATCHES_INFLIGHT || st.batch_held {
            return;
        }
        let keys = st.next_batch();
        st.batch_held = !self.send(st, &keys, true);
    }

    /// Sends buffers taken out of the map as one asynchronous write: a single buffer as a plain
    /// write, several as a batch.
    fn send_bufs(self: &Arc<Self>, st: &mut WState, bufs: Vec<(u64, WBuf)>, batch: bool) {
        let runs = bufs.into_iter().map(|(k, b)| WriteRun { tag: b.tag, offset: k, data: b.data.freeze() }).collect();
        self.send_runs(st, runs, batch);
    }

    /// Sends writes (taken out of the buffers, or handed over whole) as one asynchronous write: a single
    /// run as a plain write, several as a batch. They are in flight until it lands.
    fn send_runs(self: &Arc<Self>, st: &mut WState, runs: Vec<WriteRun>, batch: bool) {
        if runs.is_empty() {
            return;
        }
        let id = st.next_id;
        let mut bytes = 0;
        for run in &runs {
            let len = run.data.len() as u64;
            st.inflight.insert(run.offset, (run.offset + len, id));
            bytes += len;
        }
        st.next_id += 1;
        st.inflight_bytes += bytes;
        st.batches += usize::from(batch);
        let me = self.clone();
        tokio::spawn(async move {
            let res = me
                .layout
                .retrying(|l| {
                    let (me, runs) = (&me, &runs);
                    async move {
                        match &runs[..] {
                            [run] => me.data.write(&run.tag, &l, run.offset, run.data.clone()).await,
                            _ => me.data.write_runs(&l, runs).await,
                        }
                    }
                })
                .await;
            if let Ok(mut st) = me.st.lock() {
                for run in &runs {
                    st.inflight.remove(&run.offset);
                }
                st.inflight_bytes -= bytes;
                st.batches -= usize::from(batch);
                st.batch_held = false;
                match res {
                    Ok(stripes) => st.dirty.extend(stripes),
                    Err(e) => {
                        tracing::warn!(
                            ino = me.ino,
                            "background write of {bytes} bytes at {} failed: {e}",
                            runs[0].offset
                        );
                        st.error.get_or_insert(e);
                    }
                }
            }
            me.changed.notify_waiters();
        });
    }

    /// Sends every buffer not held back by a write in flight: streams one by one, scattered writes as
    /// one batch.
    fn send_ready(self: &Arc<Self>, st: &mut WState) {
        let (streams, scattered): (Vec<u64>, Vec<u64>) =
            st.bufs.keys().partition(|k| st.bufs.get(*k).is_some_and(|b| is_stream(b.len())));
        for k in streams {
            self.send(st, &[k], false);
        }
        self.send(st, &scattered, true);
    }

    /// True if writes are buffered or in flight.
    pub fn has_pending(&self) -> bool {
        self.st.lock().map(|st| !st.bufs.is_empty() || !st.inflight.is_empty()).unwrap_or(false)
    }

    /// Sends the buffers and waits until nothing is in flight; returns (and clears) the first write error.
    pub async fn drain(self: &Arc<Self>) -> FsResult<()> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.st.lock().map_err(|_| poisoned())?;
                self.send_ready(&mut st);
                if st.bufs.is_empty() && st.inflight.is_empty() {
                    return match st.error.take() {
                        Some(e) => Err(e),
                        None => Ok(()),
                    };
                }
            }
            // In flight, or held back by what is in flight.
            notified.await;
        }
    }

    /// Drains, then tells the MDS the size if there were writes since the last report.
    pub async fn flush(self: &Arc<Self>, mds: &MdsClient) -> FsResult<()> {
        self.drain().await?;
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
    pub async fn fsync(self: &Arc<Self>, mds: &MdsClient, tag: &IoTag) -> FsResult<()> {
        self.drain().await?;
        let stripes: Vec<usize> = {
            let mut st = self.st.lock().map_err(|_| poisoned())?;
            std::mem::take(&mut st.dirty).into_iter().collect()
        };
        if let Err(e) = self
            .layout
            .retrying(|l| {
                let stripes = &stripes;
                async move { self.data.fsync(tag, &l, stripes).await }
            })
            .await
        {
            if let Ok(mut st) = self.st.lock() {
                st.dirty.extend(stripes);
            }
            return Err(e);
        }
        self.flush(mds).await?;
        // The file's metadata (its creation, size, times) must be on the MDS's disk too.
        mds.sync().await
    }

    /// After a truncate: writes before it no longer extend the file, whose size is now `size`.
    pub fn truncated(&self, size: u64) {
        if let Ok(mut st) = self.st.lock() {
            st.written_end = st.written_end.min(size);
        }
        self.mds_size.store(size, Ordering::Release);
        self.wgen.fetch_add(1, Ordering::AcqRel);
    }

    /// After an `fallocate` that grew the file to `end` (without `KEEP_SIZE`): the size counts it as a
    /// write would (the attributes a mount answers, the next report to the MDS).
    pub fn extended(&self, end: u64) {
        if let Ok(mut st) = self.st.lock() {
            self.note_write(&mut st, end);
        }
    }

    /// End of the furthest write, and the time of the last unreported write (for attributes).
    pub fn local_state(&self) -> (u64, Option<Timestamp>) {
        self.st.lock().map(|st| (st.written_end, st.unreported.then_some(st.last_write))).unwrap_or((0, None))
    }
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

    fn tag() -> IoTag {
        IoTag::default()
    }

    /// The buffers' invariants: none overlap or is empty, and the counters add up.
    fn check(st: &WState) {
        let mut prev_end = 0;
        let (mut bytes, mut streams, mut sbytes, mut sruns) = (0, 0, 0, 0);
        for (&k, b) in &st.bufs {
            assert!(b.len() > 0 && k >= prev_end, "buffer at {k} overlaps the one before (ends {prev_end})");
            prev_end = k + b.len();
            bytes += b.len();
            if is_stream(b.len()) {
                streams += 1;
            } else {
                sbytes += b.len();
                sruns += 1;
            }
        }
        assert_eq!((st.buffered, st.streams, st.scattered_bytes, st.scattered_runs), (bytes, streams, sbytes, sruns));
    }

    /// A write absorbed; returns where it went and the offsets of the buffers taken out to go first.
    fn write(st: &mut WState, off: u64, data: &[u8]) -> (u64, Vec<u64>) {
        let (k, older) = st.absorb(off, off + data.len() as u64, data, &tag()).expect("nothing in flight");
        check(st);
        (k, older.into_iter().map(|(k, _)| k).collect())
    }

    #[test]
    fn sequential_writes_grow_one_buffer_into_a_stream() {
        let mut st = WState::default();
        for i in 0..40u64 {
            assert_eq!(write(&mut st, i * 4096, &[i as u8; 4096]), (0, vec![]));
        }
        assert_eq!((st.bufs.len(), st.streams, st.scattered_runs), (1, 1, 0));
        assert_eq!(st.bufs[&0].data.as_slice()[39 * 4096], 39);
    }

    #[test]
    fn random_writes_stay_apart_and_rewrites_cost_nothing() {
        let mut st = WState::default();
        for off in [40960u64, 0, 81920, 16384] {
            write(&mut st, off, &[1; 4096]);
        }
        assert_eq!((st.bufs.len(), st.scattered_runs, st.scattered_bytes), (4, 4, 16384));
        // Inside a buffer: overwritten in place.
        assert_eq!(write(&mut st, 41000, &[7; 100]), (40960, vec![]));
        assert_eq!(st.bufs.len(), 4);
        assert_eq!(&st.bufs[&40960].data.as_slice()[39..41], &[1, 7]);
        // Joining two buffers across a gap: one buffer, old bytes where the new write is not.
        assert_eq!(write(&mut st, 4096, &[9; 12288]), (0, vec![]));
        let b = st.bufs[&0].data.as_slice();
        assert_eq!(b.len(), 20480);
        assert_eq!((b[4095], b[4096], b[16383], b[16384], b[20479]), (1, 9, 9, 1, 1));
        assert_eq!(st.bufs.len(), 3);
    }

    #[test]
    fn buffers_too_long_to_merge_go_first() {
        let chunk = WRITE_CHUNK as u64;
        let mut st = WState::default();
        write(&mut st, 0, &vec![1; WRITE_CHUNK - 10]);
        // Continues it past WRITE_CHUNK: a buffer of its own, the full one taken out to go first.
        assert_eq!(write(&mut st, chunk - 10, &[2; 20]), (chunk - 10, vec![0]));
        assert_eq!(st.bufs.keys().copied().collect::<Vec<_>>(), [chunk - 10]);
        let mut st = WState::default();
        write(&mut st, 0, &vec![1; WRITE_CHUNK - 10]);
        assert_eq!(write(&mut st, 100, &[3; 300]), (0, vec![]), "inside the buffer: rewritten in place");
        // Overlaps its end and would make it longer than WRITE_CHUNK: the same.
        assert_eq!(write(&mut st, chunk - 12, &[4; 20]), (chunk - 12, vec![0]));
    }

    #[test]
    fn writes_in_flight_hold_back_what_overlaps_them() {
        let mut st = WState::default();
        st.inflight.insert(100, (200, 0));
        st.inflight.insert(300, (310, 1));
        assert!(st.in_flight(150, 160) && st.in_flight(0, 101) && st.in_flight(199, 400) && st.in_flight(305, 306));
        assert!(!st.in_flight(0, 100) && !st.in_flight(200, 300) && !st.in_flight(310, 1000));
        write(&mut st, 190, &[1; 5]);
        write(&mut st, 250, &[1; 5]);
        assert!(st.blocked(190) && !st.blocked(250));
        // Too long to merge with a buffer that is held back: the writer waits, nothing changes.
        st.inflight.insert(0, (1, 2));
        write(&mut st, 1, &vec![5; WRITE_CHUNK - 1]);
        assert!(st.blocked(1));
        assert!(st.absorb(WRITE_CHUNK as u64 - 1, WRITE_CHUNK as u64 + 9, &[6; 10], &tag()).is_none());
        check(&st);
        assert_eq!(st.bufs[&1].len(), WRITE_CHUNK as u64 - 1);
    }

    #[test]
    fn batches_are_small_and_skip_streams_and_held_back_writes() {
        let mut st = WState::default();
        write(&mut st, 0, &vec![1; STREAM_MIN]); // a stream
        for i in 0..1000u64 {
            write(&mut st, (1 << 30) + i * 8192, &[2; 4096]);
        }
        st.inflight.insert(1 << 30, ((1 << 30) + 4096, 0)); // holds back the first scattered write
        let batch = st.next_batch();
        assert_eq!(batch.len(), BATCH_RUNS);
        assert_eq!(batch[0], (1 << 30) + 8192, "by offset, the stream and the held-back write left out");
        let mut st = WState::default();
        for i in 0..100u64 {
            write(&mut st, i * 100_000, &[3; 50_000]);
        }
        let bytes: u64 = st.next_batch().iter().map(|k| st.bufs[k].len()).sum();
        assert!((BATCH_BYTES..BATCH_BYTES + 50_000).contains(&bytes), "{bytes}");
    }

    /// Random writes into the buffers read back as a plain array written the same way.
    #[test]
    fn buffers_hold_the_latest_bytes_of_random_writes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(19);
        for round in 0..50 {
            let mut st = WState::default();
            let size = 1 << 20;
            let mut model = vec![None::<u8>; size];
            for i in 0..200 {
                let len = if rng.gen_bool(0.2) { rng.gen_range(1..200_000) } else { rng.gen_range(1..9000) };
                let off = rng.gen_range(0..size - len);
                let byte = (round * 200 + i) as u8;
                let (_, older) = write(&mut st, off as u64, &vec![byte; len]);
                assert!(older.is_empty(), "no buffer reaches WRITE_CHUNK here");
                model[off..off + len].fill(Some(byte));
            }
            let mut seen = vec![None::<u8>; size];
            for (&k, b) in &st.bufs {
                for (i, &x) in b.data.as_slice().iter().enumerate() {
                    seen[k as usize + i] = Some(x);
                }
            }
            assert!(seen == model, "round {round}: buffered bytes differ from the writes");
        }
    }
}
