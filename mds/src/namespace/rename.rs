//! Rename, with RENAME_NOREPLACE and RENAME_EXCHANGE.

use super::{acl, err, validate_name, Namespace};
use crate::perm::{self, W, X};
use crate::store::Txn;
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{MdsReply, RenameFlags};
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, Timestamp, ROOT_INO};

impl Namespace {
    /// Whether directory `ancestor` is `dir` or one of its ancestors.
    fn is_ancestor(tx: &Txn<'_>, ancestor: Ino, dir: Ino) -> FsResult<bool> {
        let mut cur = dir;
        // Bounded walk: a corrupt parent chain must not loop forever.
        for _ in 0..100_000 {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = tx.inode(cur)?.parent;
        }
        Err(FsError::io("directory parent chain too deep"))
    }

    pub(crate) async fn rename(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
    ) -> FsResult<MdsReply> {
        self.durable(self.rename_sync(c, parent, name, new_parent, new_name, flags)).await
    }

    fn rename_sync(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
    ) -> FsResult<MdsReply> {
        validate_name(name)?;
        validate_name(new_name)?;
        if flags.exchange && flags.noreplace {
            return Err(FsError::invalid("rename: exchange and noreplace together"));
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, sd, src) = self.victim(&tx, c, parent, name)?;
        let dp = tx.dir(new_parent)?;
        acl::check(&tx, c, &dp.attr, W | X)?;
        let dd = tx.dentry(new_parent, new_name)?;
        let dst = match &dd {
            Some(d) => Some(tx.inode(d.ino)?),
            None => None,
        };
        if let Some(dst) = &dst {
            if flags.noreplace {
                return Err(FsError::exists(new_name.to_string()));
            }
            if dst.attr.ino == src.attr.ino {
                return Ok(MdsReply::Ok); // hard links of each other (or the same name): nothing to do
            }
            perm::check_sticky(c, &dp.attr, &dst.attr)?;
        } else if flags.exchange {
            return Err(FsError::not_found(format!("rename exchange: {new_name}")));
        }
        let src_dir = src.attr.kind == FileKind::Dir;
        let moves_parent = parent != new_parent;
        // A directory changing parents rewrites its "..": write permission on it, and not into itself.
        if src_dir && moves_parent {
            acl::check(&tx, c, &src.attr, W)?;
            if Self::is_ancestor(&tx, src.attr.ino, new_parent)? {
                return Err(FsError::invalid("cannot move a directory into its own subtree"));
            }
        }
        let now = Timestamp::now();
        if flags.exchange {
            let (dst, dd) = match (dst, dd) {
                (Some(i), Some(d)) => (i, d),
                _ => return Err(FsError::not_found(new_name.to_string())),
            };
            let dst_dir = dst.attr.kind == FileKind::Dir;
            if dst_dir && moves_parent {
                acl::check(&tx, c, &dst.attr, W)?;
                if Self::is_ancestor(&tx, dst.attr.ino, parent)? {
                    return Err(FsError::invalid("cannot move a directory into its own subtree"));
                }
            }
            self.remove_entry(&mut tx, parent, name, &sd)?;
            self.remove_entry(&mut tx, new_parent, new_name, &dd)?;
            self.add_entry(&mut tx, parent, name, dst.attr.ino, dst.attr.kind)?;
            self.add_entry(&mut tx, new_parent, new_name, src.attr.ino, src.attr.kind)?;
            tx.update_inode(dst.attr.ino, |i| {
                i.attr.ctime = now;
                if dst_dir {
                    i.parent = parent;
                }
            })?;
        } else {
            if let (Some(dst), Some(dd)) = (&dst, &dd) {
                let dst_dir = dst.attr.kind == FileKind::Dir;
                if src_dir && !dst_dir {
                    return Err(err(ErrorCode::NotDir, format!("{new_name} is not a directory")));
                }
                if !src_dir && dst_dir {
                    return Err(err(ErrorCode::IsDir, format!("{new_name} is a directory")));
                }
                if dst_dir && tx.dir_has_entries(dst.attr.ino)? {
                    return Err(err(ErrorCode::NotEmpty, format!("{new_name} is not empty")));
                }
                self.remove_entry(&mut tx, new_parent, new_name, dd)?;
                if dst_dir {
                    tx.remove_inode(dst)?;
                } else {
                    self.drop_link(&mut tx, dst.attr.ino)?;
                }
            }
            self.remove_entry(&mut tx, parent, name, &sd)?;
            self.add_entry(&mut tx, new_parent, new_name, src.attr.ino, src.attr.kind)?;
        }
        tx.update_inode(src.attr.ino, |i| {
            i.attr.ctime = now;
            if src_dir {
                i.parent = new_parent;
            }
        })?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }
}
