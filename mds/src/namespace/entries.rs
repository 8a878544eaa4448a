//! Entry helpers shared by the mutations (callers hold the mutation lock): adding and removing
//! directory entries, dropping links, new inodes and layouts.

use super::{validate_name, Namespace};
use crate::perm::{self, W, X};
use crate::placement::{CreateRequest, TargetInfo};
use crate::store::{Dentry, Inode, Txn};
use tessera_proto::layout::{Layout, LayoutSpec, StripeTarget};
use tessera_proto::{Attr, Caller, DsId, FileKind, FsError, FsResult, Ino, Timestamp};

impl Namespace {
    /// Adds `name → ino` to `parent` with a fresh readdir position; parent size/nlink/times follow.
    /// Returns the parent's new attributes.
    pub(super) fn add_entry(
        &self,
        tx: &mut Txn<'_>,
        parent: Ino,
        name: &str,
        ino: Ino,
        kind: FileKind,
    ) -> FsResult<Attr> {
        let seq = self.store.new_id()?;
        tx.put_dentry(parent, name, Dentry { ino, kind, seq })?;
        let now = Timestamp::now();
        let p = tx.update_inode(parent, |p| {
            p.attr.size = p.attr.size.saturating_add(1);
            if kind == FileKind::Dir {
                p.attr.nlink = p.attr.nlink.saturating_add(1);
            }
            p.attr.mtime = now;
            p.attr.ctime = now;
        })?;
        Ok(p.attr)
    }

    /// Removes an entry; returns the parent's new attributes.
    pub(super) fn remove_entry(&self, tx: &mut Txn<'_>, parent: Ino, name: &str, d: &Dentry) -> FsResult<Attr> {
        tx.del_dentry(parent, name, d);
        let now = Timestamp::now();
        let p = tx.update_inode(parent, |p| {
            p.attr.size = p.attr.size.saturating_sub(1);
            if d.kind == FileKind::Dir {
                p.attr.nlink = p.attr.nlink.saturating_sub(1).max(2);
            }
            p.attr.mtime = now;
            p.attr.ctime = now;
        })?;
        Ok(p.attr)
    }

    /// Drops one link of a non-directory: at zero links it becomes an orphan if open, else it is
    /// deleted and its objects go to the destroy log (same transaction).
    pub(super) fn drop_link(&self, tx: &mut Txn<'_>, ino: Ino) -> FsResult<()> {
        let mut i = tx.inode(ino)?;
        i.attr.nlink = i.attr.nlink.saturating_sub(1);
        i.attr.ctime = Timestamp::now();
        if i.attr.nlink > 0 {
            tx.put_inode(&i)
        } else if i.attr.kind == FileKind::File && self.is_open(ino) {
            tx.set_orphan(ino, true);
            tx.put_inode(&i)
        } else {
            tx.remove_inode(&i)
        }
    }

    pub(super) fn new_inode(
        &self,
        c: &Caller,
        parent: &Inode,
        kind: FileKind,
        perm: u32,
        rdev: u32,
    ) -> FsResult<Inode> {
        let ino = self.store.new_ino()?;
        let (uid, gid, perm) = perm::new_owner(c, &parent.attr, kind, perm);
        let attr = Attr { rdev, ..Attr::new(ino, kind, perm, uid, gid, Timestamp::now()) };
        Ok(Inode { attr, layout: None, target: None, parent: parent.attr.ino })
    }

    /// A fresh layout: `spec` over `base` over the cluster defaults, placed by the policy.
    pub(super) fn new_layout(&self, spec: LayoutSpec, base: LayoutSpec) -> FsResult<Layout> {
        let merged = spec.over(base).over(self.defaults);
        let stripe_size = merged.stripe_size.unwrap_or(1 << 20);
        // Data servers not heard from lately are left out while others are up (a file gets fewer
        // stripes, as Lustre skips inactive OSTs), so new files can be written while one is down.
        let mut servers = self.stats.snapshot();
        if servers.iter().any(|s| !s.silent) {
            servers.retain(|s| !s.silent);
        }
        let mut count = merged.stripe_count.unwrap_or(0) as usize;
        if count == 0 || count > servers.len() {
            count = servers.len();
        }
        // One target per data server until the lead's target plumbing lands; a server that has not
        // reported yet counts as having room.
        let targets: Vec<TargetInfo> = servers
            .iter()
            .map(|s| {
                let (capacity, used) = match &s.report {
                    Some(r) if r.capacity > 0 => (r.capacity, r.capacity.saturating_sub(r.free)),
                    _ => (u64::MAX, 0),
                };
                TargetInfo { server: s.id, target: 0, capacity, used, server_load: 0.0, usable: true }
            })
            .collect();
        let req = CreateRequest { stripe_count: count, stripe_size, expected_size: 0, exclude: Vec::new() };
        let ds: Vec<DsId> = self.placement.place(&targets, &req)?.into_iter().map(|i| targets[i].server).collect();
        let targets =
            ds.into_iter().map(|ds| Ok(StripeTarget { ds, object: self.store.new_id()? })).collect::<FsResult<_>>()?;
        let l = Layout { stripe_size, targets };
        l.validate()?;
        Ok(l)
    }

    /// Parent for a new entry: a directory the caller may write and search, without `name` (EEXIST).
    pub(super) fn parent_for_new(&self, tx: &Txn<'_>, c: &Caller, parent: Ino, name: &str) -> FsResult<Inode> {
        validate_name(name)?;
        let p = tx.dir(parent)?;
        perm::check(c, &p.attr, X)?;
        if tx.dentry(parent, name)?.is_some() {
            return Err(FsError::exists(name.to_string()));
        }
        perm::check(c, &p.attr, W)?;
        Ok(p)
    }
}
