//! Creating entries: files (and special files), directories, symlinks, hard links.

use super::entries::POLICY_XATTR;
use super::{acl, entry, err, validate_name, Namespace};
use crate::perm::{W, X};
use crate::placement::placer::{DeclaredCreate, PlannedExtent};
use crate::placement::CreateRequest;
use crate::store::{xattr_key, Inode, T};
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{ExtentSpec, LayoutSpec, EOF};
use tessera_proto::msg::{DeclaredFile, MdsReply, OpenFlags, MAX_DECLARE};
use tessera_proto::{Attr, Caller, FileKind, FsError, FsResult, Ino, Timestamp, PATH_MAX};

impl Namespace {
    /// `Create`: a file, FIFO, socket or device (or, not `exclusive`, the regular file of that name).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn create(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        kind: FileKind,
        perm: (u32, u32),
        rdev: u32,
        exclusive: bool,
        layout: Option<LayoutSpec>,
    ) -> FsResult<MdsReply> {
        let r = self.create_sync(c, parent, name, kind, perm, rdev, exclusive, layout, None);
        self.durable(r.map(|(i, _)| entry(i))).await
    }

    /// `CreateOpen`: a new file, opened for `client`; an existing one is opened as by `Open`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn create_open(
        &self,
        c: &Caller,
        client: u64,
        parent: Ino,
        name: &str,
        perm: (u32, u32),
        exclusive: bool,
        layout: Option<LayoutSpec>,
        flags: OpenFlags,
    ) -> FsResult<MdsReply> {
        let open = Some(client);
        let r = self.create_sync(c, parent, name, FileKind::File, perm, 0, exclusive, layout, open);
        match self.durable(r).await? {
            (i, Some((handle, parent))) => {
                Ok(MdsReply::Opened { attr: i.attr, layout: i.layout, handle, parent: Some(parent) })
            }
            // It existed: an ordinary open, with its permission checks and O_TRUNC.
            (i, None) => self.open(c, client, i.attr.ino, flags).await,
        }
    }

    pub(crate) async fn mkdir(&self, c: &Caller, parent: Ino, name: &str, perm: (u32, u32)) -> FsResult<MdsReply> {
        self.durable(self.mkdir_sync(c, parent, name, perm)).await
    }

    pub(crate) async fn symlink(&self, c: &Caller, parent: Ino, name: &str, target: &str) -> FsResult<MdsReply> {
        self.durable(self.symlink_sync(c, parent, name, target)).await
    }

    pub(crate) async fn link(&self, c: &Caller, ino: Ino, new_parent: Ino, new_name: &str) -> FsResult<MdsReply> {
        self.durable(self.link_sync(c, ino, new_parent, new_name)).await
    }

    /// Creates `name` (or, if `exclusive` is false, finds the regular file of that name), with `perm`
    /// and the caller's umask (`acl::inherit`). With `open`
    /// (the client to open it for), a NEW file is also opened, registered under the same lock so no unlink can slip in between:
    /// its handle is returned with the parent's new attributes; for an existing file it is `None` and
    /// the caller opens it normally.
    #[allow(clippy::too_many_arguments)]
    fn create_sync(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        kind: FileKind,
        perm: (u32, u32),
        rdev: u32,
        exclusive: bool,
        spec: Option<LayoutSpec>,
        open: Option<u64>,
    ) -> FsResult<(Inode, Option<(u64, Attr)>)> {
        validate_name(name)?;
        if matches!(kind, FileKind::Dir | FileKind::Symlink) {
            return Err(FsError::invalid("create makes files, FIFOs, sockets and devices (use mkdir/symlink)"));
        }
        if let Some(s) = &spec {
            s.validate()?;
        }
        // Placed before taking the lock; its error matters only if the file is new.
        let placed = match kind {
            FileKind::File => Some(
                self.place_new_files(parent, &[name], spec)
                    .and_then(|mut l| l.pop().ok_or_else(|| FsError::io("placement returned no layout"))),
            ),
            _ => None,
        };
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = tx.dir(parent)?;
        acl::check(&tx, c, &p.attr, X)?;
        if let Some(d) = tx.dentry(parent, name)? {
            if !exclusive && kind == FileKind::File && d.kind == FileKind::File {
                return Ok((tx.inode(d.ino)?, None));
            }
            return Err(FsError::exists(name.to_string()));
        }
        acl::check(&tx, c, &p.attr, W)?;
        let rdev = if matches!(kind, FileKind::CharDev | FileKind::BlockDev) { rdev } else { 0 };
        let mut i = self.new_inode(&mut tx, c, &p, kind, perm, rdev)?;
        if let Some(placed) = placed {
            let p = placed?;
            i.layout = Some(self.layout_of(i.attr.ino, p)?);
        }
        tx.add_inode(&i)?;
        let parent_attr = self.add_entry(&mut tx, parent, name, i.attr.ino, kind)?;
        self.commit(tx)?;
        let handle = match open {
            Some(client) => Some((self.register_open(i.attr.ino, client)?, parent_attr)),
            None => None,
        };
        Ok((i, handle))
    }

    /// Declared creates (`tessera declare`): each in a directory the caller may create in, placed as
    /// one batch per placement policy; kept by the placer until the create arrives. In a directory with a
    /// composite default layout, every extent the expected size reaches is placed in that batch too (the
    /// first extent with the declared stripe count, if one is given).
    pub(crate) fn declare(&self, c: &Caller, files: Vec<DeclaredFile>) -> FsResult<MdsReply> {
        // A batch solve (balanced placement) can take a while: not on the async worker.
        crate::offload::offload(|| self.declare_sync(c, files))
    }

    fn declare_sync(&self, c: &Caller, files: Vec<DeclaredFile>) -> FsResult<MdsReply> {
        if files.len() > MAX_DECLARE {
            return Err(FsError::invalid(format!("{} files in one declaration (at most {MAX_DECLARE})", files.len())));
        }
        let rd = self.store.begin();
        let mut by_policy: std::collections::BTreeMap<Option<String>, Vec<DeclaredCreate>> = Default::default();
        for f in files {
            validate_name(&f.name)?;
            let p = rd.dir(f.parent)?;
            acl::check(&rd, c, &p.attr, W | X)?;
            let d = match rd.dir_composite(f.parent)? {
                Some(specs) => self.declared_composite(&f, &specs),
                None => {
                    let base = rd.dir_layout(f.parent)?.unwrap_or_default();
                    let spec = LayoutSpec { stripe_size: None, stripe_count: f.stripe_count, mirrors: None };
                    let (stripe_size, stripe_count, mirrors) = self.merged_spec(spec, base);
                    let req = CreateRequest {
                        stripe_count,
                        stripe_size,
                        expected_size: f.expected_size,
                        exclude: Vec::new(),
                        mirrors: mirrors as usize,
                    };
                    DeclaredCreate::plain(f.parent, f.name, req)
                }
            };
            by_policy.entry(self.policy_of(&rd, f.parent)?).or_default().push(d);
        }
        let mut count = 0;
        for (policy, files) in by_policy {
            count += self.placer.declare(policy.as_deref(), files)?;
        }
        Ok(MdsReply::Declared { count: count as u32 })
    }

    /// A declared file under the composite layout `specs`: its first extent, and each later extent its
    /// expected size reaches with the bytes it is expected to hold there (none reached when the size is
    /// unknown, 0).
    fn declared_composite(&self, f: &DeclaredFile, specs: &[ExtentSpec]) -> DeclaredCreate {
        let ((stripe_size, count, mirrors), rest) = self.composite_parts(specs);
        let stripe_count = f.stripe_count.map_or(count, |c| c as usize);
        let first_end = rest.first().map_or(EOF, |e| e.start);
        let first = CreateRequest {
            stripe_count,
            stripe_size,
            expected_size: f.expected_size.min(first_end),
            exclude: Vec::new(),
            mirrors: mirrors as usize,
        };
        let later = rest
            .iter()
            .enumerate()
            .filter(|(_, e)| f.expected_size > e.start)
            .map(|(k, e)| PlannedExtent {
                index: k + 1,
                start: e.start,
                end: e.end,
                req: CreateRequest {
                    stripe_count: e.stripe_count as usize,
                    stripe_size: e.stripe_size,
                    expected_size: f.expected_size.min(e.end) - e.start,
                    exclude: Vec::new(),
                    mirrors: usize::from(e.mirror_count),
                },
            })
            .collect();
        DeclaredCreate { parent: f.parent, name: f.name.clone(), first, later }
    }

    fn mkdir_sync(&self, c: &Caller, parent: Ino, name: &str, perm: (u32, u32)) -> FsResult<MdsReply> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = self.parent_for_new(&tx, c, parent, name)?;
        let i = self.new_inode(&mut tx, c, &p, FileKind::Dir, perm, 0)?;
        tx.add_inode(&i)?;
        // Subdirectories inherit the default layout and placement policy (as Lustre does).
        if let Some(spec) = tx.dir_layout(parent)? {
            tx.set_dir_layout(i.attr.ino, Some(spec))?;
        }
        if let Some(specs) = tx.dir_composite(parent)? {
            tx.set_dir_composite(i.attr.ino, Some(&specs))?;
        }
        if let Some(policy) = self.policy_of(&tx, parent)? {
            tx.put(T::Xattrs, &xattr_key(i.attr.ino, POLICY_XATTR), policy.into_bytes());
        }
        self.add_entry(&mut tx, parent, name, i.attr.ino, FileKind::Dir)?;
        self.commit(tx)?;
        Ok(entry(i))
    }

    fn symlink_sync(&self, c: &Caller, parent: Ino, name: &str, target: &str) -> FsResult<MdsReply> {
        if target.is_empty() {
            return Err(FsError::not_found("empty symlink target"));
        }
        if target.len() > PATH_MAX {
            return Err(err(ErrorCode::NameTooLong, format!("symlink target of {} bytes", target.len())));
        }
        if target.contains('\0') {
            return Err(FsError::invalid("symlink target contains NUL"));
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = self.parent_for_new(&tx, c, parent, name)?;
        let mut i = self.new_inode(&mut tx, c, &p, FileKind::Symlink, (0o777, 0), 0)?;
        i.attr.size = target.len() as u64;
        i.target = Some(target.to_string());
        tx.add_inode(&i)?;
        self.add_entry(&mut tx, parent, name, i.attr.ino, FileKind::Symlink)?;
        self.commit(tx)?;
        Ok(entry(i))
    }

    fn link_sync(&self, c: &Caller, ino: Ino, new_parent: Ino, new_name: &str) -> FsResult<MdsReply> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let i = tx.inode(ino)?;
        if i.attr.kind == FileKind::Dir {
            return Err(FsError::perm("hard links to directories are not allowed"));
        }
        if i.attr.nlink == 0 {
            return Err(FsError::not_found(format!("inode {ino} was unlinked")));
        }
        self.parent_for_new(&tx, c, new_parent, new_name)?;
        let now = Timestamp::now();
        let i = tx.update_inode(ino, |i| {
            i.attr.nlink = i.attr.nlink.saturating_add(1);
            i.attr.ctime = now;
        })?;
        self.add_entry(&mut tx, new_parent, new_name, ino, i.attr.kind)?;
        self.commit(tx)?;
        Ok(entry(i))
    }
}
