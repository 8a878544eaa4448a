//! Lookups and path resolution.

use super::{acl, entry, err, validate_name, Namespace};
use crate::perm::X;
use crate::store::Inode;
use std::collections::VecDeque;
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::MdsReply;
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, NAME_MAX, PATH_MAX, ROOT_INO};

/// Symlinks followed in one path walk before ELOOP (Linux's MAXSYMLINKS).
const MAX_SYMLINK_HOPS: usize = 40;

impl Namespace {
    pub(crate) fn lookup(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let p = rd.dir(parent)?;
        acl::check(&rd, c, &p.attr, X)?;
        let i = match name {
            "." => p,
            ".." => rd.inode(p.parent)?,
            _ => {
                validate_name(name)?;
                let d = rd.dentry(parent, name)?.ok_or_else(|| FsError::not_found(name.to_string()))?;
                rd.inode(d.ino)?
            }
        };
        Ok(entry(i))
    }

    /// `LookupPath`: [`Namespace::resolve`].
    pub(crate) fn lookup_path(&self, c: &Caller, path: &str, follow: bool) -> FsResult<MdsReply> {
        self.resolve(c, path, follow).map(entry)
    }

    /// `Readlink`: a symlink's target.
    pub(crate) fn readlink(&self, ino: Ino) -> FsResult<MdsReply> {
        let i = self.store.begin().inode(ino)?;
        match i.target {
            Some(t) if i.attr.kind == FileKind::Symlink => Ok(MdsReply::Target(t)),
            _ => Err(FsError::invalid(format!("inode {ino} is not a symlink"))),
        }
    }

    /// Resolves an absolute path like the kernel's path walk.
    pub fn resolve(&self, c: &Caller, path: &str, follow: bool) -> FsResult<Inode> {
        if path.len() > PATH_MAX {
            return Err(err(ErrorCode::NameTooLong, format!("path of {} bytes", path.len())));
        }
        if !path.starts_with('/') {
            return Err(FsError::invalid(format!("path '{path}' is not absolute")));
        }
        fn components(p: &str) -> VecDeque<String> {
            let mut v: VecDeque<String> = p.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
            // A trailing slash demands a directory (and follows a final symlink).
            if p.ends_with('/') && !v.is_empty() {
                v.push_back(".".into());
            }
            v
        }
        let rd = self.store.begin();
        let mut comps = components(path);
        let mut cur = rd.inode(ROOT_INO)?;
        let mut hops = 0;
        while let Some(name) = comps.pop_front() {
            if cur.attr.kind != FileKind::Dir {
                return Err(err(ErrorCode::NotDir, format!("{path}: inode {} is not a directory", cur.attr.ino)));
            }
            acl::check(&rd, c, &cur.attr, X)?;
            match name.as_str() {
                "." => continue,
                ".." => {
                    cur = rd.inode(cur.parent)?;
                    continue;
                }
                _ => {}
            }
            if name.len() > NAME_MAX {
                return Err(err(ErrorCode::NameTooLong, format!("{path}: component of {} bytes", name.len())));
            }
            let d = rd.dentry(cur.attr.ino, &name)?.ok_or_else(|| FsError::not_found(format!("{path}: {name}")))?;
            let child = rd.inode(d.ino)?;
            if child.attr.kind == FileKind::Symlink && (follow || !comps.is_empty()) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(err(ErrorCode::Loop, format!("{path}: too many symbolic links")));
                }
                let target = child.target.clone().unwrap_or_default();
                if target.starts_with('/') {
                    cur = rd.inode(ROOT_INO)?;
                }
                for t in components(&target).into_iter().rev() {
                    comps.push_front(t);
                }
                continue;
            }
            cur = child;
        }
        Ok(cur)
    }
}
