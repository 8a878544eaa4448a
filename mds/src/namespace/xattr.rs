//! Extended attributes, and layouts (the `tessera.layout` attribute and the layout requests).

use super::entries::POLICY_XATTR;
use super::{acl, err, Namespace};
use crate::perm::{R, W};
use crate::store::{xattr_key, xattr_prefix, Inode, Txn, T};
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{text, LayoutSpec};
use tessera_proto::msg::{MdsReply, XattrMode};
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, Timestamp, NAME_MAX, XATTR_SIZE_MAX};

enum XattrNs {
    User,
    Trusted,
    Security,
    Layout,
    /// `tessera.placement`: the policy placing a directory's new files, or re-placing an empty file.
    Placement,
    /// `system.posix_acl_access` and `system.posix_acl_default` (`acl.rs`).
    Acl(acl::Which),
}

fn xattr_ns(name: &str) -> FsResult<XattrNs> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(err(ErrorCode::Range, format!("xattr name of {} bytes", name.len())));
    }
    if name.contains('\0') {
        return Err(FsError::invalid("xattr name contains NUL"));
    }
    if let Some(w) = acl::Which::of(name) {
        Ok(XattrNs::Acl(w))
    } else if name == text::XATTR_NAME {
        Ok(XattrNs::Layout)
    } else if name == POLICY_XATTR {
        Ok(XattrNs::Placement)
    } else if name.starts_with("user.") {
        Ok(XattrNs::User)
    } else if name.starts_with("trusted.") {
        Ok(XattrNs::Trusted)
    } else if name.starts_with("security.") {
        Ok(XattrNs::Security)
    } else {
        Err(err(ErrorCode::Unsupported, format!("xattr namespace of '{name}' not supported")))
    }
}

impl Namespace {
    pub(crate) fn get_layout(&self, ino: Ino) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let i = rd.inode(ino)?;
        match (i.attr.kind, i.layout) {
            (FileKind::File, Some(l)) => Ok(MdsReply::Layout(l)),
            (FileKind::Dir, _) => match (rd.dir_composite(ino)?, rd.dir_layout(ino)?) {
                (Some(e), _) => Ok(MdsReply::DirComposite(e)),
                (None, Some(s)) => Ok(MdsReply::DirLayout(s)),
                (None, None) => Err(err(ErrorCode::NoData, format!("directory {ino} has no default layout"))),
            },
            _ => Err(err(ErrorCode::NoData, format!("inode {ino} has no layout"))),
        }
    }

    /// Sets a directory default, or re-lays out an empty file with fresh objects (EBUSY if it has data).
    fn apply_layout(&self, tx: &mut Txn<'_>, c: &Caller, i: &mut Inode, spec: Option<LayoutSpec>) -> FsResult<()> {
        acl::check(tx, c, &i.attr, W)?;
        match i.attr.kind {
            FileKind::Dir => {
                tx.set_dir_layout(i.attr.ino, spec)?;
                tx.set_dir_composite(i.attr.ino, None)?;
            }
            FileKind::File => {
                if i.attr.size > 0 {
                    return Err(err(ErrorCode::Busy, format!("inode {} already has data", i.attr.ino)));
                }
                let policy = self.policy_of(tx, i.attr.ino)?;
                let new = self.new_layout(spec.unwrap_or_default(), LayoutSpec::default(), policy.as_deref())?;
                if let Some(old) = i.layout.replace(new) {
                    tx.queue_destroy(&old)?;
                }
            }
            _ => return Err(FsError::invalid(format!("inode {} cannot have a layout", i.attr.ino))),
        }
        i.attr.ctime = Timestamp::now();
        tx.put_inode(i)
    }

    pub(crate) async fn set_layout(&self, c: &Caller, ino: Ino, spec: LayoutSpec) -> FsResult<MdsReply> {
        self.durable(self.set_layout_sync(c, ino, spec)).await
    }

    fn set_layout_sync(&self, c: &Caller, ino: Ino, spec: LayoutSpec) -> FsResult<MdsReply> {
        spec.validate()?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        self.apply_layout(&mut tx, c, &mut i, Some(spec))?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    pub(crate) fn get_xattr(&self, c: &Caller, ino: Ino, name: &str) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        let rd = self.store.begin();
        let i = rd.inode(ino)?;
        let nodata = || err(ErrorCode::NoData, format!("no attribute {name}"));
        match ns {
            XattrNs::Layout => {
                return match (i.attr.kind, &i.layout) {
                    (FileKind::File, Some(l)) => Ok(MdsReply::Xattr(text::format_layout(l).into_bytes())),
                    (FileKind::Dir, _) => match (rd.dir_composite(ino)?, rd.dir_layout(ino)?) {
                        (Some(e), _) => Ok(MdsReply::Xattr(text::format_extents(&e).into_bytes())),
                        (None, Some(s)) => Ok(MdsReply::Xattr(text::format_spec(&s).into_bytes())),
                        (None, None) => Err(nodata()),
                    },
                    _ => Err(nodata()),
                };
            }
            XattrNs::Acl(w) => return acl::get(&rd, &i, w).map(MdsReply::Xattr),
            XattrNs::Trusted if c.uid != 0 => return Err(FsError::perm("trusted.* attributes need root")),
            XattrNs::User | XattrNs::Placement => {
                if !matches!(i.attr.kind, FileKind::File | FileKind::Dir) {
                    return Err(nodata());
                }
                acl::check(&rd, c, &i.attr, R)?;
            }
            _ => {}
        }
        rd.get(T::Xattrs, &xattr_key(ino, name))?.map(MdsReply::Xattr).ok_or_else(nodata)
    }

    /// Permission to change attribute `name` of `i`.
    fn check_xattr_write(tx: &Txn<'_>, c: &Caller, i: &Inode, ns: &XattrNs) -> FsResult<()> {
        match ns {
            XattrNs::Placement => {
                if !matches!(i.attr.kind, FileKind::File | FileKind::Dir) {
                    return Err(FsError::invalid("only files and directories have a placement policy"));
                }
                acl::check(tx, c, &i.attr, W)
            }
            XattrNs::Trusted | XattrNs::Security if c.uid != 0 => {
                Err(FsError::perm("trusted.* and security.* attributes need root"))
            }
            XattrNs::User => {
                if !matches!(i.attr.kind, FileKind::File | FileKind::Dir) {
                    return Err(FsError::perm("user.* attributes only on files and directories"));
                }
                acl::check(tx, c, &i.attr, W)
            }
            _ => Ok(()),
        }
    }

    pub(crate) async fn set_xattr(
        &self,
        c: &Caller,
        ino: Ino,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> FsResult<MdsReply> {
        self.durable(self.set_xattr_sync(c, ino, name, value, mode)).await
    }

    fn set_xattr_sync(&self, c: &Caller, ino: Ino, name: &str, value: &[u8], mode: XattrMode) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(err(ErrorCode::Range, format!("xattr value of {} bytes (max {XATTR_SIZE_MAX})", value.len())));
        }
        if let XattrNs::Layout = ns {
            if let text::ParsedLayout::Composite(specs) = text::parse(value)? {
                return self.set_composite_sync(c, ino, &specs);
            }
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        if let XattrNs::Layout = ns {
            let spec = text::parse_spec(value)?;
            let spec = (spec != LayoutSpec::default() || i.attr.kind != FileKind::Dir).then_some(spec);
            self.apply_layout(&mut tx, c, &mut i, spec)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        if let XattrNs::Acl(w) = ns {
            acl::set(&mut tx, c, &mut i, w, value)?;
            i.attr.ctime = Timestamp::now();
            tx.put_inode(&i)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        Self::check_xattr_write(&tx, c, &i, &ns)?;
        let value = match ns {
            // Stored under its canonical name; an unknown one is refused.
            XattrNs::Placement => {
                let text = std::str::from_utf8(value).map_err(|_| FsError::invalid("policy name is not UTF-8"))?;
                crate::placement::placer::canonical(text.trim_matches(|c: char| c == '\0' || c.is_whitespace()))?
                    .as_bytes()
            }
            _ => value,
        };
        let key = xattr_key(ino, name);
        let exists = tx.get(T::Xattrs, &key)?.is_some();
        match mode {
            XattrMode::Create if exists => return Err(FsError::exists(format!("attribute {name}"))),
            XattrMode::Replace if !exists => return Err(err(ErrorCode::NoData, format!("no attribute {name}"))),
            _ => {}
        }
        tx.put(T::Xattrs, &key, value.to_vec());
        i.attr.ctime = Timestamp::now();
        let composite = i.layout.as_ref().is_some_and(|l| l.is_composite());
        if let (XattrNs::Placement, FileKind::File, 0, false) = (&ns, i.attr.kind, i.attr.size, composite) {
            // An empty file is placed anew by its policy, keeping its stripe size and count.
            let spec = i.layout.as_ref().map(|l| LayoutSpec {
                stripe_size: Some(l.stripe_size),
                stripe_count: Some(l.targets.len() as u32),
                mirrors: None,
            });
            self.apply_layout(&mut tx, c, &mut i, spec)?;
        }
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    pub(crate) fn list_xattr(&self, c: &Caller, ino: Ino) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        rd.inode(ino)?;
        let prefix = xattr_prefix(ino);
        let names = rd
            .scan(T::Xattrs, &prefix)?
            .into_keys()
            .filter_map(|k| String::from_utf8(k[prefix.len()..].to_vec()).ok())
            .filter(|n| c.uid == 0 || !n.starts_with("trusted."))
            .collect();
        Ok(MdsReply::XattrNames(names))
    }

    pub(crate) async fn remove_xattr(&self, c: &Caller, ino: Ino, name: &str) -> FsResult<MdsReply> {
        self.durable(self.remove_xattr_sync(c, ino, name)).await
    }

    fn remove_xattr_sync(&self, c: &Caller, ino: Ino, name: &str) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        if let XattrNs::Layout = ns {
            if i.attr.kind != FileKind::Dir {
                return Err(FsError::perm("a file's layout cannot be removed"));
            }
            if tx.dir_layout(ino)?.is_none() {
                return Err(err(ErrorCode::NoData, "no default layout"));
            }
            self.apply_layout(&mut tx, c, &mut i, None)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        if let XattrNs::Acl(w) = ns {
            acl::remove(&mut tx, c, &i, w)?;
            i.attr.ctime = Timestamp::now();
            tx.put_inode(&i)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        Self::check_xattr_write(&tx, c, &i, &ns)?;
        let key = xattr_key(ino, name);
        if tx.get(T::Xattrs, &key)?.is_none() {
            return Err(err(ErrorCode::NoData, format!("no attribute {name}")));
        }
        tx.del(T::Xattrs, &key);
        i.attr.ctime = Timestamp::now();
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }
}
