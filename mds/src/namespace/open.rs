//! Open handles: open (with O_TRUNC), close, write reports.

use super::{acl, err, Namespace};
use crate::perm::{self, R, W};
use crate::session::Closed;
use crate::store::{Inode, Txn};
use std::time::Instant;
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{HeldHandle, MdsReply, OpenFlags, MAX_REOPEN};
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, Timestamp};
use tracing::info;

/// The largest size a file may reach: what `off_t` holds.
const MAX_FILE_SIZE: u64 = i64::MAX as u64;

impl Namespace {
    /// A new open handle of `ino` for `client`. Call under the mutation lock, so an unlink sees it and
    /// keeps the file as an orphan. Handle numbers are the store's ids: never given twice, also across
    /// restarts and leaders, so a handle a client reasserts ([`Namespace::reopen`]) is no new one's.
    pub(super) fn register_open(&self, ino: Ino, client: u64) -> FsResult<u64> {
        let handle = self.store.new_id()?;
        self.hold_open(ino, client, handle);
        Ok(handle)
    }

    /// Records `client`'s `handle` on `ino` (under the mutation lock); false if it was held already.
    fn hold_open(&self, ino: Ino, client: u64, handle: u64) -> bool {
        if !self.opens().entry(ino).or_default().insert(handle) {
            return false;
        }
        self.sessions().opened(client, handle, ino, Instant::now());
        true
    }

    /// `Reopen`: `client`'s handles granted by an earlier start of the service, held again (the files
    /// they keep alive after an unlink are not destroyed at the end of the grace period, but at their
    /// last close); answers the handles whose files are gone.
    pub(crate) fn reopen(&self, client: u64, handles: &[HeldHandle]) -> FsResult<MdsReply> {
        if handles.len() > MAX_REOPEN {
            return Err(FsError::invalid(format!("{} handles in one reopen (at most {MAX_REOPEN})", handles.len())));
        }
        let _g = self.lock();
        let tx = self.store.begin();
        let mut stale = Vec::new();
        let mut held = 0;
        for h in handles {
            if tx.get_inode(h.ino)?.is_none() {
                stale.push(h.handle);
                continue;
            }
            // Held already (reasserted twice): nothing to do.
            if self.hold_open(h.ino, client, h.handle) {
                held += 1;
            }
        }
        if held > 0 || !stale.is_empty() {
            info!(client = format_args!("{client:016x}"), held, stale = stale.len(), "open handles reasserted");
        }
        Ok(MdsReply::Reopened { stale })
    }

    /// Forgets `handle` of `ino` (its session's record is the caller's: [`Namespace::close_sync`] asks
    /// it, eviction has dropped it already); says whether it was open.
    pub(super) fn unregister_open(&self, ino: Ino, handle: u64) -> bool {
        let mut opens = self.opens();
        let had = opens.get_mut(&ino).is_some_and(|h| h.remove(&handle));
        if opens.get(&ino).is_some_and(|h| h.is_empty()) {
            opens.remove(&ino);
        }
        had
    }

    fn check_open(tx: &Txn<'_>, c: &Caller, i: &Inode, flags: OpenFlags) -> FsResult<()> {
        let writes = flags.write || flags.truncate;
        match i.attr.kind {
            FileKind::Dir if writes => return Err(err(ErrorCode::IsDir, "cannot open a directory for writing")),
            FileKind::Symlink => return Err(err(ErrorCode::Loop, "cannot open a symlink")),
            _ => {}
        }
        let mut mask = 0;
        if flags.read {
            mask |= R;
        }
        if writes {
            mask |= W;
        }
        if mask != 0 {
            acl::check(tx, c, &i.attr, mask)?;
        }
        Ok(())
    }

    pub(crate) async fn open(&self, c: &Caller, client: u64, ino: Ino, flags: OpenFlags) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let cur = rd.inode(ino)?;
        Self::check_open(&rd, c, &cur, flags)?;
        drop(rd);
        let truncate = flags.truncate && cur.attr.kind == FileKind::File;
        if truncate && cur.attr.size > 0 {
            if let Some(l) = &cur.layout {
                self.truncate_objects(l, 0).await?;
            }
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(ino)?;
            Self::check_open(&tx, c, &i, flags)?;
            if truncate {
                let now = Timestamp::now();
                i.attr.size = 0;
                i.attr.mtime = now;
                i.attr.ctime = now;
                self.note_truncated(&mut i);
                tx.put_inode(&i)?;
                self.commit(tx)?;
            }
            let handle = self.register_open(ino, client)?;
            Ok(MdsReply::Opened { attr: i.attr, layout: i.layout, handle, parent: None })
        };
        if truncate {
            self.durable(r).await
        } else {
            r
        }
    }

    /// `Close`. A close that changed nothing (no write, no orphan removed) has nothing to make durable.
    pub(crate) async fn close(&self, ino: Ino, handle: u64, size: Option<u64>, wrote: bool) -> FsResult<MdsReply> {
        match self.close_sync(ino, handle, size, wrote) {
            Ok((reply, true)) => self.durable(Ok(reply)).await,
            other => other.map(|(reply, _)| reply),
        }
    }

    /// A client's close: [`Namespace::close_handle`], unless eviction closed the handle already (ESTALE:
    /// the writes it covered may be lost).
    fn close_sync(&self, ino: Ino, handle: u64, size: Option<u64>, wrote: bool) -> FsResult<(MdsReply, bool)> {
        if self.sessions().closed(handle) == Closed::Evicted {
            return Err(err(
                ErrorCode::Stale,
                format!("handle {handle} of inode {ino} was closed when this client was evicted (silent too long)"),
            ));
        }
        self.close_handle(ino, handle, size, wrote)
    }

    /// Drops a handle and merges the size; also says whether anything was written to the store.
    pub(super) fn close_handle(
        &self,
        ino: Ino,
        handle: u64,
        size: Option<u64>,
        wrote: bool,
    ) -> FsResult<(MdsReply, bool)> {
        let _g = self.lock();
        let had = self.unregister_open(ino, handle);
        let mut tx = self.store.begin();
        let Some(mut i) = tx.get_inode(ino)? else {
            return if had {
                Ok((MdsReply::Ok, false))
            } else {
                Err(err(ErrorCode::Stale, format!("inode {ino} is gone")))
            };
        };
        let mut changed = false;
        if i.attr.kind == FileKind::File {
            if let Some(s) = size {
                if s > i.attr.size {
                    i.attr.size = s;
                    changed = true;
                }
            }
            if wrote {
                let now = Timestamp::now();
                i.attr.mtime = now;
                i.attr.ctime = now;
                changed = true;
            }
            if changed {
                self.note_written(&mut i);
            }
        }
        if i.attr.nlink == 0 && !self.is_open(ino) {
            tx.remove_inode(&i)?;
            changed = true;
        } else if changed {
            tx.put_inode(&i)?;
        }
        if changed {
            self.commit(tx)?;
        }
        Ok((MdsReply::Ok, changed))
    }

    pub(crate) async fn report_write(&self, c: &Caller, ino: Ino, size: u64) -> FsResult<MdsReply> {
        self.durable(self.report_write_sync(c, ino, size)).await
    }

    pub(crate) async fn append(&self, c: &Caller, ino: Ino, len: u64) -> FsResult<MdsReply> {
        self.durable(self.append_sync(c, ino, len)).await
    }

    fn report_write_sync(&self, c: &Caller, ino: Ino, size: u64) -> FsResult<MdsReply> {
        self.written(c, ino, |_| Ok(size)).map(|_| MdsReply::Ok)
    }

    /// `Append`: the file's end is the append's offset, and the size moves `len` past it.
    fn append_sync(&self, c: &Caller, ino: Ino, len: u64) -> FsResult<MdsReply> {
        let mut offset = 0;
        self.written(c, ino, |size| {
            offset = size;
            size.checked_add(len).filter(|&end| end <= MAX_FILE_SIZE).ok_or_else(|| {
                err(ErrorCode::TooBig, format!("an append of {len} bytes at {size} passes the largest file size"))
            })
        })?;
        Ok(MdsReply::Appended { offset })
    }

    /// A write to `ino` by `c` (who may write it, or holds it open): the size max-merged with what `end`
    /// makes of the current one, mtime/ctime now.
    fn written(&self, c: &Caller, ino: Ino, end: impl FnOnce(u64) -> FsResult<u64>) -> FsResult<()> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        match i.attr.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(err(ErrorCode::IsDir, "write to a directory")),
            _ => return Err(FsError::invalid("write report for a special file")),
        }
        if !acl::allowed(&tx, c, &i.attr, W)? && !self.is_open(ino) {
            return Err(perm::denied(c, &i.attr, W));
        }
        let now = Timestamp::now();
        i.attr.size = i.attr.size.max(end(i.attr.size)?);
        i.attr.mtime = now;
        i.attr.ctime = now;
        self.note_written(&mut i);
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(())
    }
}
