//! Open files, over the client's I/O engine ([`crate::cache`]): every `File` is an engine
//! [`Handle`], as every open of the FUSE mount is, and all `File`s of one inode in one [`crate::Client`]
//! (and its clones) share the inode's state, so each sees the others' writes.
//!
//! By default a `File` writes through and reads exactly: `write_at` returns once the data servers have
//! the bytes (its errors come back from it), `read_at` fetches just its range. With
//! [`OpenOptions::write_behind`] `write_at` returns once the bytes are buffered, and an error of a buffered
//! write comes back from a later `write_at`, or from [`File::flush`], [`File::fsync`] or [`File::close`];
//! with [`OpenOptions::read_ahead`] a stream of reads is fetched ahead. [`OpenOptions::with_cache`] turns
//! both on: the file runs as the mount's files do. Either way the MDS learns the new size at flush,
//! fsync and close (close-to-open consistency, like NFS): another client that opens the file after our
//! close (or flush, or fsync) sees our writes.
//!
//! Close a `File` with [`File::close`] to learn whether its writes landed. One dropped without it is
//! flushed and closed by a task on the current tokio runtime, which can only log what fails (a
//! `tracing` warning); dropped outside a runtime (or as the runtime shuts down) it is not closed at all
//! and buffered writes are lost, which is logged too.

use crate::cache::Handle;
use crate::mds_client::LockWait;
use bytes::Bytes;
use std::sync::Arc;
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::Layout;
use tessera_proto::locks::{HeldLock, LockKind, LockSpec, LockType};
use tessera_proto::msg::OpenFlags;
use tessera_proto::types::{Attr, Ino, IoTag};

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
    /// Write-behind, as the FUSE mount's: `write_at` returns once the bytes are buffered, and errors of
    /// buffered writes come back from a later write, `flush`, `fsync` or `close`. Off (the default): each
    /// write reaches the data servers before it returns (see [`File`]).
    pub write_behind: bool,
    /// Read-ahead, as the FUSE mount's: sequential and strided streams of reads are fetched ahead. Off
    /// (the default): each read fetches exactly its range.
    pub read_ahead: bool,
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

    /// The same with the engine's cache on, as the mount opens files: write-behind and read-ahead.
    pub fn with_cache(self) -> OpenOptions {
        OpenOptions { write_behind: true, read_ahead: true, ..self }
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
    /// Shared with the task that closes a dropped `File`.
    handle: Arc<Handle>,
    attr: Attr,
    flags: OpenFlags,
}

impl File {
    pub(crate) fn new(handle: Handle, attr: Attr, flags: OpenFlags) -> File {
        File { handle: Arc::new(handle), attr, flags }
    }

    /// Attributes as of the open.
    pub fn attr(&self) -> &Attr {
        &self.attr
    }

    pub fn ino(&self) -> Ino {
        self.attr.ino
    }

    /// The layout as last known (composite layouts gain extents as the file reaches them).
    pub fn layout(&self) -> Arc<Layout> {
        self.handle.inode.layout.get()
    }

    /// The MDS handle of this open.
    pub fn handle(&self) -> u64 {
        self.handle.mds_handle
    }

    /// The tag every data request of this file carries.
    pub fn io_tag(&self) -> &IoTag {
        &self.handle.tag
    }

    /// Whether this file's writes go into the write-behind ([`OpenOptions::write_behind`]).
    pub fn write_behind(&self) -> bool {
        self.handle.write_behind()
    }

    /// Whether this file's streams of reads are fetched ahead ([`OpenOptions::read_ahead`]).
    pub fn read_ahead(&self) -> bool {
        self.handle.read_ahead()
    }

    /// Writes `data` at `offset` (pwrite). Without write-behind all its object requests go in parallel
    /// and it returns once they are written; with it, once the bytes are buffered.
    pub async fn write_at(&self, offset: u64, data: Bytes) -> FsResult<()> {
        if !self.flags.write {
            return Err(FsError::new(ErrorCode::Access, "file not open for writing"));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.handle.inode.check_layout()?;
        self.handle.check_session()?;
        offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| FsError::new(ErrorCode::TooBig, "write beyond the largest file offset"))?;
        // PerSched: a job with a pattern waits for its interval and is paced; others pass (one atomic load).
        self.handle.write_paced(offset, data).await
    }

    /// Reads up to `len` bytes at `offset` (pread): short only at the end of the file; holes read as zeros.
    pub async fn read_at(&self, offset: u64, len: u64) -> FsResult<Bytes> {
        Ok(tessera_proto::frame::concat(self.read_pieces(offset, len).await?))
    }

    /// [`File::read_at`] with the data in the pieces it arrived in (no gathering copy).
    pub async fn read_pieces(&self, offset: u64, len: u64) -> FsResult<Vec<Bytes>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.handle.check_session()?;
        self.handle.read_paced(offset, len).await
    }

    /// Appends at the file's end as the MDS orders every client's appends ([`crate::MdsClient::append`]);
    /// returns the offset written at.
    pub async fn append(&self, data: Bytes) -> FsResult<u64> {
        if !self.flags.write {
            return Err(FsError::new(ErrorCode::Access, "file not open for writing"));
        }
        if data.is_empty() {
            return self.size().await;
        }
        let offset = self.handle.mds.append(self.attr.ino, data.len() as u64).await?;
        self.write_at(offset, data).await?;
        Ok(offset)
    }

    /// The file size: the MDS's, or the end of this client's writes if that is further.
    pub async fn size(&self) -> FsResult<u64> {
        self.handle.size(true).await
    }

    /// Truncates or extends the file (ftruncate): the MDS cuts the objects, and this client forgets
    /// writes beyond the new end, so a close does not grow the file back.
    pub async fn set_len(&self, size: u64) -> FsResult<()> {
        self.handle.set_len(size).await
    }

    /// Sends what is buffered and tells the MDS the size: a client that opens the file from now on sees
    /// every write made so far.
    pub async fn flush(&self) -> FsResult<()> {
        self.handle.check_session()?;
        self.handle.flush().await
    }

    /// Makes everything written so far durable on the data servers and tells the MDS the size.
    pub async fn fsync(&self) -> FsResult<()> {
        self.handle.check_session()?;
        self.handle.fsync().await
    }

    /// Places (`Read`, `Write`) or removes (`Unlock`) a lock on bytes `start..=end` of the file (a
    /// `Flock` lock covers the whole file), holding across every client and mount: the MDS is the lock
    /// manager (see `tessera_proto::locks`). The owner is this open file, as Linux's open file description
    /// locks (`F_OFD_SETLK`): its locks never conflict with each other and go at close. `wait`: a lock
    /// held by another owner is waited for (EDEADLK if that would deadlock); otherwise EAGAIN.
    pub async fn lock(&self, kind: LockKind, typ: LockType, start: u64, end: u64, wait: bool) -> FsResult<()> {
        self.handle.check_session()?;
        let spec = LockSpec { kind, typ, start, end, pid: std::process::id() };
        let w = wait.then(LockWait::new);
        self.handle.lock(self.handle.mds_handle, spec, w.as_ref()).await
    }

    /// `F_GETLK`: the lock of another owner that would keep this file from taking `typ` on `start..=end`.
    pub async fn test_lock(&self, typ: LockType, start: u64, end: u64) -> FsResult<Option<HeldLock>> {
        let spec = LockSpec { kind: LockKind::Posix, typ, start, end, pid: std::process::id() };
        self.handle.mds.test_lock(self.attr.ino, self.handle.mds_handle, spec).await
    }

    /// Flushes and closes the handle (releasing its locks); the MDS merges the end of our furthest write
    /// into the size.
    pub async fn close(self) -> FsResult<()> {
        let locks = release_locks(&self.handle).await;
        self.handle.release().await.and(locks)
    }
}

/// Gives up the locks a `File` holds (at its close).
async fn release_locks(h: &Handle) -> FsResult<()> {
    let posix = h.unlock_all(h.mds_handle, LockKind::Posix).await;
    let flock = h.unlock_all(h.mds_handle, LockKind::Flock).await;
    posix.and(flock)
}

impl Drop for File {
    /// A file dropped without `close` is flushed and closed in the background (see the module's notes).
    fn drop(&mut self) {
        if self.handle.released() {
            return;
        }
        let h = self.handle.clone();
        let ino = self.attr.ino;
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = release_locks(&h).await {
                        tracing::warn!(ino, "releasing the locks of a file dropped without close: {e}");
                    }
                    if let Err(e) = h.release().await {
                        tracing::warn!(ino, "closing a file dropped without close: {e}");
                    }
                });
            }
            Err(_) if h.inode.has_pending() => {
                tracing::warn!(ino, "a file dropped outside a tokio runtime: not closed, buffered writes lost")
            }
            Err(_) => tracing::debug!(ino, "a file dropped outside a tokio runtime: not closed"),
        }
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
    fn the_cache_is_opt_in_and_changes_no_flag() {
        let plain = OpenOptions::read_write();
        assert!(!plain.write_behind && !plain.read_ahead && !OpenOptions::default().write_behind);
        let o = OpenOptions::write_truncate().with_cache();
        assert!(o.write_behind && o.read_ahead);
        assert_eq!(o.open_flags(), OpenOptions::write_truncate().open_flags());
        assert_eq!(OpenOptions { write_behind: false, read_ahead: false, ..o }, OpenOptions::write_truncate());
    }

    #[test]
    fn create_perm_and_exclusive() {
        assert_eq!(OpenOptions::default().create_perm(), 0o644);
        assert_eq!(OpenOptions { perm: 0o100600, ..Default::default() }.create_perm(), 0o600);
        assert!(!OpenOptions { exclusive: true, ..Default::default() }.create_exclusive());
        assert!(OpenOptions { create: true, exclusive: true, ..Default::default() }.create_exclusive());
    }
}
