//! Open files. Writes and reads go straight to the data servers, split per object and sent in parallel;
//! the MDS learns the new size at fsync and close (close-to-open consistency, like NFS).

use crate::client::Client;
use bytes::Bytes;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::Layout;
use tessera_proto::msg::{OpenFlags, SetAttrs};
use tessera_proto::types::{Attr, FileKind, Ino, IoTag};

/// How to open a file (POSIX `open(2)` flags). `OpenOptions::default()` opens read-only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    /// O_CREAT.
    pub create: bool,
    /// O_EXCL (only with `create`).
    pub exclusive: bool,
    /// O_TRUNC.
    pub truncate: bool,
    /// O_APPEND: implies `write`; [`File::append`] writes at the end.
    pub append: bool,
    /// Permission bits for a created file; 0 → 0o644.
    pub perm: u32,
}

impl OpenOptions {
    /// O_RDONLY.
    pub fn read_only() -> OpenOptions {
        OpenOptions { read: true, ..Default::default() }
    }

    /// O_RDWR.
    pub fn read_write() -> OpenOptions {
        OpenOptions { read: true, write: true, ..Default::default() }
    }

    /// O_WRONLY|O_CREAT|O_TRUNC, what `>` in a shell does.
    pub fn write_truncate() -> OpenOptions {
        OpenOptions { write: true, create: true, truncate: true, ..Default::default() }
    }

    /// The flags sent with `Open`: no access mode means read (O_RDONLY is 0); append and truncate need
    /// write access.
    pub fn open_flags(&self) -> OpenFlags {
        let write = self.write || self.append || self.truncate;
        OpenFlags { read: self.read || !write, write, truncate: self.truncate }
    }

    /// Permission bits used when the file is created.
    pub fn create_perm(&self) -> u32 {
        if self.perm == 0 {
            0o644
        } else {
            self.perm & 0o7777
        }
    }

    /// Whether a create must fail if the name exists.
    pub fn create_exclusive(&self) -> bool {
        self.create && self.exclusive
    }
}

/// An open regular file. Methods take `&self`: several tasks may read and write disjoint ranges at once.
pub struct File {
    client: Client,
    attr: Attr,
    layout: crate::live_layout::LiveLayout,
    handle: u64,
    tag: IoTag,
    flags: OpenFlags,
    /// Size last heard from the MDS.
    mds_size: AtomicU64,
    /// End of the furthest write through this handle.
    written_end: AtomicU64,
    wrote: AtomicBool,
    /// Stripes written since the last fsync.
    dirty: Mutex<BTreeSet<usize>>,
    /// End of the last `append` reservation, so concurrent appends do not overlap.
    closed: AtomicBool,
    /// The client's session at the open (see [`crate::session`]).
    session: u64,
}

impl File {
    pub(crate) fn new(client: Client, attr: Attr, layout: Option<Layout>, handle: u64, flags: OpenFlags) -> File {
        let tag = IoTag { origin: client.mds().origin().clone(), ino: attr.ino };
        let layout = layout.unwrap_or(Layout::plain(0, Vec::new()));
        File {
            mds_size: AtomicU64::new(attr.size),
            layout: crate::live_layout::LiveLayout::new(attr.ino, layout),
            handle,
            tag,
            flags,
            written_end: AtomicU64::new(0),
            wrote: AtomicBool::new(false),
            dirty: Mutex::new(BTreeSet::new()),
            closed: AtomicBool::new(false),
            session: client.mds().session().epoch(),
            client,
            attr,
        }
    }

    /// Attributes as of the open.
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    pub fn ino(&self) -> Ino {
        self.attr.ino
    }

    /// The layout as last known (composite layouts gain extents as the file reaches them).
    pub fn layout(&self) -> std::sync::Arc<Layout> {
        self.layout.get()
    }

    /// The MDS handle of this open.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The tag every data request of this file carries.
    pub fn io_tag(&self) -> &IoTag {
        &self.tag
    }

    fn known_size(&self) -> u64 {
        self.mds_size.load(Ordering::Acquire).max(self.written_end.load(Ordering::Acquire))
    }

    fn check_data_file(&self) -> FsResult<()> {
        if self.attr.kind != FileKind::File || self.layout.get().targets.is_empty() {
            return Err(FsError::new(ErrorCode::Invalid, format!("inode {} has no data layout", self.attr.ino)));
        }
        Ok(())
    }

    /// Writes `data` at `offset` (pwrite): all its object requests in parallel.
    pub async fn write_at(&self, offset: u64, data: Bytes) -> FsResult<()> {
        if !self.flags.write {
            return Err(FsError::new(ErrorCode::Access, "file not open for writing"));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.check_data_file()?;
        self.client.mds().session().check(self.session)?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| FsError::new(ErrorCode::TooBig, "write beyond the largest file offset"))?;
        // PerSched: a job with a pattern waits for its interval and is paced; others pass (one atomic load).
        self.client.periodic_detectable();
        let len = data.len() as u64;
        let paced = if self.client.periodic().active() { self.client.periodic().wait_slot(len).await } else { None };
        let t0 = std::time::Instant::now();
        let layout = self.layout.for_write(self.client.mds(), end).await?;
        let stripes = self.client.data().write(&self.tag, &layout, offset, data).await?;
        if let Some(bw) = paced {
            self.client.periodic().pace(len, bw, t0).await;
        }
        if let Ok(mut d) = self.dirty.lock() {
            d.extend(stripes);
        }
        self.wrote.store(true, Ordering::Release);
        self.written_end.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` (pread): short only at the end of the file; holes read as zeros.
    pub async fn read_at(&self, offset: u64, len: u64) -> FsResult<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let mut size = self.known_size();
        if offset.saturating_add(len) > size {
            // Near the end: someone may have extended the file and closed since our open.
            size = self.size().await?;
        }
        let end = offset.saturating_add(len).min(size);
        if offset >= end {
            return Ok(Bytes::new());
        }
        self.check_data_file()?;
        self.client.mds().session().check(self.session)?;
        self.client.periodic_detectable();
        let paced =
            if self.client.periodic().active() { self.client.periodic().wait_slot(end - offset).await } else { None };
        let t0 = std::time::Instant::now();
        let layout = self.layout.for_read(self.client.mds(), end).await?;
        let out = self.client.data().read(&self.tag, &layout, offset, end - offset).await?;
        if let Some(bw) = paced {
            self.client.periodic().pace(out.len() as u64, bw, t0).await;
        }
        Ok(out)
    }

    /// Appends at the file's end as the MDS orders every client's appends ([`MdsClient::append`]);
    /// returns the offset written at.
    pub async fn append(&self, data: Bytes) -> FsResult<u64> {
        if !self.flags.write {
            return Err(FsError::new(ErrorCode::Access, "file not open for writing"));
        }
        if data.is_empty() {
            return self.size().await;
        }
        let offset = self.client.mds().append(self.attr.ino, data.len() as u64).await?;
        self.write_at(offset, data).await?;
        Ok(offset)
    }

    /// The file size: the MDS's, or the end of our own writes if that is further.
    pub async fn size(&self) -> FsResult<u64> {
        let attr = self.client.mds().getattr(self.attr.ino).await?;
        self.mds_size.store(attr.size, Ordering::Release);
        Ok(self.known_size())
    }

    /// Truncates or extends the file (ftruncate): the MDS cuts the objects, and this handle forgets
    /// writes beyond the new end, so its close does not grow the file back.
    pub async fn set_len(&self, size: u64) -> FsResult<()> {
        let set = SetAttrs { size: Some(size), ..Default::default() };
        self.client.mds().setattr(self.attr.ino, set).await?;
        self.written_end.fetch_min(size, Ordering::AcqRel);
        self.mds_size.store(size, Ordering::Release);
        Ok(())
    }

    /// Makes everything written so far durable on the data servers and tells the MDS the size.
    pub async fn fsync(&self) -> FsResult<()> {
        self.client.mds().session().check(self.session)?;
        let stripes: Vec<usize> = match self.dirty.lock() {
            Ok(mut d) => std::mem::take(&mut *d).into_iter().collect(),
            Err(_) => return Err(FsError::io("fsync state poisoned")),
        };
        if let Err(e) = self.client.data().fsync(&self.tag, &self.layout.get(), &stripes).await {
            if let Ok(mut d) = self.dirty.lock() {
                d.extend(stripes);
            }
            return Err(e);
        }
        if self.wrote.load(Ordering::Acquire) {
            self.client.mds().report_write(self.attr.ino, self.written_end.load(Ordering::Acquire)).await?;
        }
        // The file's metadata (its creation, size, times) must be on disk too.
        self.client.mds().sync().await
    }

    /// Closes the handle; the MDS merges the end of our furthest write into the size.
    pub async fn close(self) -> FsResult<()> {
        self.closed.store(true, Ordering::Release);
        let wrote = self.wrote.load(Ordering::Acquire);
        let size = wrote.then(|| self.written_end.load(Ordering::Acquire));
        self.client.mds().close(self.attr.ino, self.handle, size, wrote).await
    }
}

impl Drop for File {
    /// A file dropped without `close` is closed in the background so the MDS does not keep the handle.
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let mds = self.client.mds().clone();
        let (ino, handle) = (self.attr.ino, self.handle);
        let wrote = self.wrote.load(Ordering::Acquire);
        let size = wrote.then(|| self.written_end.load(Ordering::Acquire));
        rt.spawn(async move {
            if let Err(e) = mds.close(ino, handle, size, wrote).await {
                tracing::debug!(ino, "background close failed: {e}");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_options_map_to_open_flags() {
        let f = OpenOptions::default().open_flags();
        assert_eq!(f, OpenFlags { read: true, write: false, truncate: false });
        let f = OpenOptions { write: true, ..Default::default() }.open_flags();
        assert_eq!(f, OpenFlags { read: false, write: true, truncate: false });
        let f = OpenOptions { append: true, ..Default::default() }.open_flags();
        assert!(f.write && !f.read && !f.truncate);
        let f = OpenOptions { read: true, truncate: true, ..Default::default() }.open_flags();
        assert_eq!(f, OpenFlags { read: true, write: true, truncate: true });
        assert_eq!(OpenOptions::write_truncate().open_flags(), OpenFlags { read: false, write: true, truncate: true });
        assert_eq!(OpenOptions::read_write().open_flags(), OpenFlags { read: true, write: true, truncate: false });
    }

    #[test]
    fn create_perm_and_exclusive() {
        assert_eq!(OpenOptions::default().create_perm(), 0o644);
        assert_eq!(OpenOptions { perm: 0o100600, ..Default::default() }.create_perm(), 0o600);
        assert!(!OpenOptions { exclusive: true, ..Default::default() }.create_exclusive());
        assert!(OpenOptions { create: true, exclusive: true, ..Default::default() }.create_exclusive());
    }
}
