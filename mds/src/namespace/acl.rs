//! POSIX ACLs at the metadata server (issue 42): kept as the `system.posix_acl_access` and
//! `system.posix_acl_default` extended attributes in Linux's own format (what `setfacl` sends through a
//! mount), consulted by every permission check the MDS makes, inherited by new entries and kept in step
//! with `chmod` — the rules are `tessera_proto::acl`'s, which follow Linux's `fs/posix_acl.c`.

use super::err;
use crate::perm;
use crate::store::{xattr_key, Inode, Txn, T};
use tessera_proto::acl::{self, Acl, ACCESS_XATTR, DEFAULT_XATTR};
use tessera_proto::error::ErrorCode;
use tessera_proto::{Attr, Caller, FileKind, FsError, FsResult, Ino};

/// Which of an inode's two ACLs an attribute name is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Which {
    Access,
    Default,
}

impl Which {
    pub(super) fn of(name: &str) -> Option<Which> {
        match name {
            ACCESS_XATTR => Some(Which::Access),
            DEFAULT_XATTR => Some(Which::Default),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Which::Access => ACCESS_XATTR,
            Which::Default => DEFAULT_XATTR,
        }
    }
}

/// The ACL stored as `which` on `ino`, if any (one that no longer parses is an I/O error: fsck reports it).
pub(super) fn stored(tx: &Txn<'_>, ino: Ino, which: Which) -> FsResult<Option<Acl>> {
    match tx.get(T::Xattrs, &xattr_key(ino, which.name()))? {
        None => Ok(None),
        Some(v) => Acl::parse(&v).map_err(|e| FsError::io(format!("inode {ino}: stored {}: {e}", which.name()))),
    }
}

/// Whether `c` may access `a` for every bit of `mask`, its access ACL read only when it can decide.
pub(super) fn allowed(tx: &Txn<'_>, c: &Caller, a: &Attr, mask: u32) -> FsResult<bool> {
    if !perm::acl_applies(c, a) {
        return Ok(perm::allowed(c, a, None, mask));
    }
    let acl = stored(tx, a.ino, Which::Access)?;
    Ok(perm::allowed(c, a, acl.as_ref(), mask))
}

/// EACCES unless [`allowed`].
pub(super) fn check(tx: &Txn<'_>, c: &Caller, a: &Attr, mask: u32) -> FsResult<()> {
    if allowed(tx, c, a, mask)? {
        Ok(())
    } else {
        Err(perm::denied(c, a, mask))
    }
}

/// The access ACL of `a` if it can decide for `c` (for checks made outside a transaction's reach).
pub(super) fn for_caller(tx: &Txn<'_>, c: &Caller, a: &Attr) -> FsResult<Option<Acl>> {
    if perm::acl_applies(c, a) {
        stored(tx, a.ino, Which::Access)
    } else {
        Ok(None)
    }
}

/// `getxattr` of an ACL: anyone may read it (as on Linux); ENODATA when there is none.
pub(super) fn get(tx: &Txn<'_>, i: &Inode, which: Which) -> FsResult<Vec<u8>> {
    stored(tx, i.attr.ino, which)?
        .map(|a| a.to_bytes())
        .ok_or_else(|| err(ErrorCode::NoData, format!("no {} on inode {}", which.name(), i.attr.ino)))
}

fn check_settable(c: &Caller, i: &Inode) -> FsResult<()> {
    if i.attr.kind == FileKind::Symlink {
        return Err(err(ErrorCode::Unsupported, "symbolic links have no ACLs"));
    }
    perm::check_owner(c, &i.attr, "setfacl")
}

/// `setxattr` of an ACL by its owner or root. An access ACL sets the mode's owner, group (its mask) and
/// other bits, and is kept only if it says more than the mode (an empty or three-entry one is removed);
/// as `chmod`, it clears the set-group-ID bit of a caller outside the file's group. A default ACL is for
/// directories only (EACCES otherwise, as Linux); an empty one removes it.
pub(super) fn set(tx: &mut Txn<'_>, c: &Caller, i: &mut Inode, which: Which, value: &[u8]) -> FsResult<()> {
    check_settable(c, i)?;
    let parsed = Acl::parse(value)?;
    let key = xattr_key(i.attr.ino, which.name());
    match (which, parsed) {
        (_, None) => tx.del(T::Xattrs, &key),
        (Which::Access, Some(a)) => {
            let (mode, equivalent) = a.equiv_mode(i.attr.perm);
            i.attr.perm = mode;
            if c.uid != 0 && !c.in_group(i.attr.gid) {
                i.attr.perm &= !perm::S_ISGID;
            }
            if equivalent {
                tx.del(T::Xattrs, &key);
            } else {
                tx.put(T::Xattrs, &key, a.to_bytes());
            }
        }
        (Which::Default, Some(a)) => {
            if i.attr.kind != FileKind::Dir {
                return Err(FsError::access(format!("inode {} is not a directory: no default ACL", i.attr.ino)));
            }
            tx.put(T::Xattrs, &key, a.to_bytes());
        }
    }
    Ok(())
}

/// `removexattr` of an ACL by its owner or root: the mode stays as it is; removing none is no error.
pub(super) fn remove(tx: &mut Txn<'_>, c: &Caller, i: &Inode, which: Which) -> FsResult<()> {
    check_settable(c, i)?;
    tx.del(T::Xattrs, &xattr_key(i.attr.ino, which.name()));
    Ok(())
}

/// A new inode's mode and ACLs (`attr` as `perm::new_owner` made it): with a default ACL on `parent`,
/// the inode's access ACL is that ACL masked by the requested mode, and a directory inherits the default
/// too; without one, the umask applies (POSIX.1e: never both). Symbolic links have neither.
pub(super) fn inherit(tx: &mut Txn<'_>, parent: Ino, attr: &mut Attr, umask: u32) -> FsResult<()> {
    let default = match attr.kind {
        FileKind::Symlink => None,
        _ => stored(tx, parent, Which::Default)?,
    };
    inherit_from(tx, default.as_ref(), attr, umask)
}

/// [`inherit`] with the parent's default ACL already read (`None`: it has none).
pub(super) fn inherit_from(tx: &mut Txn<'_>, default: Option<&Acl>, attr: &mut Attr, umask: u32) -> FsResult<()> {
    if attr.kind == FileKind::Symlink {
        return Ok(());
    }
    let Some(default) = default else {
        attr.perm &= !(umask & 0o777);
        return Ok(());
    };
    let inherited = acl::inherit(default, attr.kind == FileKind::Dir, attr.perm);
    attr.perm = inherited.mode;
    if let Some(a) = inherited.access {
        tx.put(T::Xattrs, &xattr_key(attr.ino, ACCESS_XATTR), a.to_bytes());
    }
    if let Some(d) = inherited.default {
        tx.put(T::Xattrs, &xattr_key(attr.ino, DEFAULT_XATTR), d.to_bytes());
    }
    Ok(())
}

/// After a `chmod`: the access ACL's owner, mask (or group) and other entries take the new mode's bits.
pub(super) fn chmod(tx: &mut Txn<'_>, ino: Ino, perm: u32) -> FsResult<()> {
    if let Some(mut a) = stored(tx, ino, Which::Access)? {
        a.chmod(perm);
        tx.put(T::Xattrs, &xattr_key(ino, ACCESS_XATTR), a.to_bytes());
    }
    Ok(())
}

/// Whether `dir` has a default ACL (its creates need the MDS: no lease lets a client make them alone).
pub(super) fn has_default(tx: &Txn<'_>, dir: Ino) -> FsResult<bool> {
    Ok(tx.get(T::Xattrs, &xattr_key(dir, DEFAULT_XATTR))?.is_some())
}
