//! Entry helpers shared by the mutations (callers hold the mutation lock): adding and removing
//! directory entries, dropping links, new inodes and layouts.

use super::{acl, validate_name, Namespace};
use crate::perm::{self, W, X};
use crate::placement::placer::{Planned, Slot};
use crate::placement::CreateRequest;
use crate::store::{xattr_key, Dentry, Inode, Txn, T};
use tessera_proto::layout::{Component, Layout, LayoutSpec, Replica, ReplicaState, StripeTarget};
use tessera_proto::{object_in, Attr, Caller, FileKind, FsError, FsResult, Ino, Timestamp};

/// A new file's placement, made before the namespace lock is taken.
#[derive(Clone, Debug)]
pub(super) struct Placed {
    pub stripe_size: u64,
    /// The first extent's mirror count M: `slots` holds M × stripe count targets, replica-major.
    pub mirrors: u8,
    pub slots: Vec<Slot>,
    /// A composite layout's extents after the first (placed when the file reaches them).
    pub rest: Vec<Component>,
    /// Where those of them the file's declaration reaches go (kept for the new inode by
    /// [`Namespace::layout_of`]).
    pub planned: Vec<Planned>,
}

/// The extended attribute naming a directory's (or a file's) placement policy (`tessera setstripe --policy`).
pub const POLICY_XATTR: &str = "tessera.placement";

impl Namespace {
    /// Adds `name → ino` to `parent` with a fresh readdir position; parent size/nlink/times follow.
    /// Returns the parent's new attributes.
    pub(crate) fn add_entry(
        &self,
        tx: &mut Txn<'_>,
        parent: Ino,
        name: &str,
        ino: Ino,
        kind: FileKind,
    ) -> FsResult<Attr> {
        self.add_entry_at(tx, parent, name, ino, kind, Timestamp::now())
    }

    /// [`Namespace::add_entry`] made at `now` (a lease holder's create, at the time it showed).
    pub(crate) fn add_entry_at(
        &self,
        tx: &mut Txn<'_>,
        parent: Ino,
        name: &str,
        ino: Ino,
        kind: FileKind,
        now: Timestamp,
    ) -> FsResult<Attr> {
        let seq = self.store.new_id()?;
        tx.put_dentry(parent, name, Dentry { ino, kind, seq })?;
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
        self.remove_entry_at(tx, parent, name, d, Timestamp::now())
    }

    /// [`Namespace::remove_entry`] made at `now` (a lease holder's unlink, at the time it showed).
    pub(super) fn remove_entry_at(
        &self,
        tx: &mut Txn<'_>,
        parent: Ino,
        name: &str,
        d: &Dentry,
        now: Timestamp,
    ) -> FsResult<Attr> {
        tx.del_dentry(parent, name, d);
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

    /// A new inode of `c` in `parent`, with `(perm, umask)` as asked (its inherited ACLs put in `tx`).
    pub(super) fn new_inode(
        &self,
        tx: &mut Txn<'_>,
        c: &Caller,
        parent: &Inode,
        kind: FileKind,
        (perm, umask): (u32, u32),
        rdev: u32,
    ) -> FsResult<Inode> {
        let ino = self.store.new_ino()?;
        let (uid, gid, perm) = perm::new_owner(c, &parent.attr, kind, perm);
        let mut attr = Attr { rdev, ..Attr::new(ino, kind, perm, uid, gid, Timestamp::now()) };
        acl::inherit(tx, parent.attr.ino, &mut attr, umask)?;
        Ok(Inode { attr, layout: None, target: None, parent: parent.attr.ino })
    }

    /// The stripe size, count (0: all targets) and mirror count of `spec` over `base` over the cluster
    /// defaults.
    pub(super) fn merged_spec(&self, spec: LayoutSpec, base: LayoutSpec) -> (u64, usize, u8) {
        let merged = spec.over(base).over(self.defaults);
        (
            merged.stripe_size.unwrap_or(1 << 20),
            merged.stripe_count.unwrap_or(0) as usize,
            merged.mirrors.unwrap_or(1).clamp(1, tessera_proto::layout::MAX_MIRRORS),
        )
    }

    /// A fresh layout: `spec` over `base` over the cluster defaults, placed by `policy` (`None`: the
    /// cluster's). Targets of data servers not heard from lately are left out while others are up (a
    /// file gets fewer stripes, as Lustre skips inactive OSTs).
    pub(super) fn new_layout(&self, spec: LayoutSpec, base: LayoutSpec, policy: Option<&str>) -> FsResult<Layout> {
        let (stripe_size, stripe_count, mirrors) = self.merged_spec(spec, base);
        let req = CreateRequest::fresh(stripe_count, stripe_size, mirrors);
        let slots = self.placer.place(policy, &[req])?.pop().unwrap_or_default();
        self.layout_on(stripe_size, mirrors, &slots)
    }

    /// A layout of fresh objects on `slots` (object ids name their target): `mirrors` replicas per
    /// stripe, `slots` replica-major (placement's order).
    pub(super) fn layout_on(&self, stripe_size: u64, mirrors: u8, slots: &[Slot]) -> FsResult<Layout> {
        let (targets, replicas) = self.objects_on(mirrors, slots)?;
        let mut l = Layout::plain(stripe_size, targets);
        if mirrors > 1 {
            l.mirror_count = mirrors;
            l.mirrors = replicas;
        }
        l.validate()?;
        Ok(l)
    }

    /// Fresh objects on `slots`, `mirrors` replicas per stripe (`slots` replica-major: the first stripe
    /// count of them are the primaries): the primaries, and each stripe's other replicas (in sync: nothing
    /// is written yet).
    pub(super) fn objects_on(&self, mirrors: u8, slots: &[Slot]) -> FsResult<(Vec<StripeTarget>, Vec<Vec<Replica>>)> {
        let m = usize::from(mirrors.max(1));
        if !slots.len().is_multiple_of(m) {
            return Err(FsError::io(format!("placement gave {} targets for {m} replicas per stripe", slots.len())));
        }
        let objects = slots
            .iter()
            .map(|&(ds, t)| Ok(StripeTarget { ds, object: object_in(t, self.store.new_id()?) }))
            .collect::<FsResult<Vec<_>>>()?;
        let count = objects.len() / m;
        let primaries = objects[..count].to_vec();
        let others = if m == 1 {
            Vec::new()
        } else {
            (0..count)
                .map(|k| {
                    (1..m).map(|r| Replica { target: objects[r * count + k], state: ReplicaState::InSync }).collect()
                })
                .collect()
        };
        Ok((primaries, others))
    }

    /// The layout of the placed new file `ino`: fresh objects for its (first) extent, the others pending
    /// (their planned targets, if declared, kept by the placer until the file reaches them).
    pub(super) fn layout_of(&self, ino: Ino, p: Placed) -> FsResult<Layout> {
        let mut l = self.layout_on(p.stripe_size, p.mirrors, &p.slots)?;
        l.extents = p.rest;
        l.validate()?;
        self.placer.keep_planned(ino, p.planned);
        Ok(l)
    }

    /// The placement policy `ino` names for itself or its new files (`tessera.placement`), if any.
    pub(super) fn policy_of(&self, tx: &Txn<'_>, ino: Ino) -> FsResult<Option<String>> {
        Ok(tx
            .get(T::Xattrs, &xattr_key(ino, POLICY_XATTR))?
            .and_then(|v| String::from_utf8(v).ok())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty()))
    }

    /// Where the new files `names` in `dir` go (`spec`: the layout asked for, if any): placed as one batch
    /// outside the namespace lock, a declared file on its declared targets, the others solved together
    /// with the directory's policy. Their object ids are allocated later, under the lock, by
    /// [`Namespace::layout_on`] (fsck's object mark relies on ids being allocated there).
    pub(super) fn place_new_files(&self, dir: Ino, names: &[&str], spec: Option<LayoutSpec>) -> FsResult<Vec<Placed>> {
        let rd = self.store.begin();
        let base = rd.dir_layout(dir)?.unwrap_or_default();
        let policy = self.policy_of(&rd, dir)?;
        // A directory's composite default applies unless the create asks for a layout of its own.
        let composite = match spec {
            Some(s) if s != LayoutSpec::default() => None,
            _ => rd.dir_composite(dir)?,
        };
        let (stripe_size, stripe_count, mirrors, rest, first_end) = match &composite {
            Some(specs) => {
                let (first, rest) = self.composite_parts(specs);
                (first.0, first.1, first.2, rest, specs[0].end)
            }
            None => {
                let (size, count, mirrors) = self.merged_spec(spec.unwrap_or_default(), base);
                (size, count, mirrors, Vec::new(), u64::MAX)
            }
        };
        let mut out: Vec<Placed> = Vec::with_capacity(names.len());
        let mut undeclared = Vec::new();
        for (k, name) in names.iter().enumerate() {
            // A declaration holds unless the create asks for another stripe count than declared.
            let declared = self.placer.take_declared(dir, name).filter(|t| {
                spec.and_then(|s| s.stripe_count)
                    .is_none_or(|c| c == 0 || c as usize * usize::from(mirrors) == t.slots.len())
            });
            let (slots, planned) = match declared {
                // The plan of the later extents holds only for the composite layout it was made for.
                Some(t) => (t.slots, if composite.is_some() { t.later } else { Vec::new() }),
                None => {
                    undeclared.push(k);
                    (Vec::new(), Vec::new())
                }
            };
            out.push(Placed { stripe_size, mirrors, slots, rest: rest.clone(), planned });
        }
        // Without a declaration, the predictor's size: what the same path held last (a job's previous run).
        let reqs: Vec<CreateRequest> = undeclared
            .iter()
            .map(|&k| CreateRequest {
                stripe_count,
                stripe_size,
                expected_size: self.placer.predict(dir, names[k]).min(first_end),
                exclude: Vec::new(),
                mirrors: mirrors as usize,
            })
            .collect();
        let placed = self.placer.place(policy.as_deref(), &reqs)?;
        for (k, slots) in undeclared.into_iter().zip(placed) {
            out[k].slots = slots;
        }
        Ok(out)
    }

    /// Parent for a new entry: a directory the caller may write and search, without `name` (EEXIST).
    pub(super) fn parent_for_new(&self, tx: &Txn<'_>, c: &Caller, parent: Ino, name: &str) -> FsResult<Inode> {
        validate_name(name)?;
        let p = tx.dir(parent)?;
        acl::check(tx, c, &p.attr, X)?;
        if tx.dentry(parent, name)?.is_some() {
            return Err(FsError::exists(name.to_string()));
        }
        acl::check(tx, c, &p.attr, W)?;
        Ok(p)
    }
}
