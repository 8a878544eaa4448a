//! Removing entries: unlink and rmdir.

use super::{acl, err, validate_name, Namespace};
use crate::perm::{self, W, X};
use crate::store::{Dentry, Inode, Txn};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::MdsReply;
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, ROOT_INO};

impl Namespace {
    /// The entry `name` of directory `parent`, for removal: w+x on the parent and the sticky rule.
    pub(super) fn victim(&self, tx: &Txn<'_>, c: &Caller, parent: Ino, name: &str) -> FsResult<(Inode, Dentry, Inode)> {
        let p = tx.dir(parent)?;
        acl::check(tx, c, &p.attr, W | X)?;
        let d = tx.dentry(parent, name)?.ok_or_else(|| FsError::not_found(name.to_string()))?;
        let i = tx.inode(d.ino)?;
        perm::check_sticky(c, &p.attr, &i.attr)?;
        Ok((p, d, i))
    }

    pub(crate) async fn unlink(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        self.durable(self.unlink_sync(c, parent, name)).await
    }

    pub(crate) async fn rmdir(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        self.durable(self.rmdir_sync(c, parent, name)).await
    }

    fn unlink_sync(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        validate_name(name)?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, d, i) = self.victim(&tx, c, parent, name)?;
        if i.attr.kind == FileKind::Dir {
            return Err(err(ErrorCode::IsDir, format!("{name} is a directory")));
        }
        let parent_attr = self.remove_entry(&mut tx, parent, name, &d)?;
        self.drop_link(&mut tx, d.ino)?;
        self.commit(tx)?;
        if i.attr.kind == FileKind::File {
            self.placer.remember(parent, name, i.attr.size);
        }
        Ok(MdsReply::Attr(parent_attr))
    }

    fn rmdir_sync(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        match name {
            "." => return Err(FsError::invalid("cannot remove '.'")),
            ".." => return Err(err(ErrorCode::NotEmpty, "cannot remove '..'")),
            _ => validate_name(name)?,
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, d, i) = self.victim(&tx, c, parent, name)?;
        if i.attr.kind != FileKind::Dir {
            return Err(err(ErrorCode::NotDir, format!("{name} is not a directory")));
        }
        if i.attr.ino == ROOT_INO {
            return Err(err(ErrorCode::Busy, "cannot remove the root"));
        }
        if tx.dir_has_entries(i.attr.ino)? {
            return Err(err(ErrorCode::NotEmpty, format!("{name} is not empty")));
        }
        let parent_attr = self.remove_entry(&mut tx, parent, name, &d)?;
        tx.remove_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Attr(parent_attr))
    }
}
