//! Composite (progressive) layouts, like Lustre's PFL (`tessera setstripe -E END -c COUNT ...`): setting
//! them on a directory (the default of its new files, inherited by its subdirectories) or on an empty
//! file, and instantiating a file's extents when it first reaches them (a write or a truncate past an
//! extent's start), so their placement sees the load of that moment.
//!
//! Spec: `../shared/specs/placement.md` ("Layouts"). The stripe math is `tessera_proto::layout`'s.
//!
//! Instantiation places outside the namespace lock: on the targets planned for the extent when the file
//! was declared (`tessera declare` with an expected size: its extents were solved in one batch with the
//! other declared files', [`crate::placement::placer::Placer::declare`]) if they still have room, else
//! now, with the file's policy (its own `tessera.placement`, else the directory it was created in, else the
//! cluster's), avoiding the targets the file's earlier extents use
//! ([`crate::placement::placer::Placer::place_avoiding`]:
//! distinct targets, the file stops growing once it has a stripe on every target). Then, under the lock, each extent still without objects gets fresh
//! object ids. Two clients racing to instantiate the same extent both place it; the first commit wins and
//! the other's placement only stays counted as pending allocation for a while. Reaching an extent
//! instantiates every extent before it (Lustre does the same), so instantiated extents are a prefix.

use super::entries::Placed;
use super::{acl, err, Namespace};
use crate::perm::{self, W};
use crate::placement::placer::Slot;
use crate::placement::CreateRequest;
use crate::store::{Inode, Txn};
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{validate_extents, Component, ExtentSpec, Layout, LayoutSpec, EOF};
use tessera_proto::msg::MdsReply;
use tessera_proto::{target_of, Caller, FileKind, FsError, FsResult, Ino, Timestamp};

impl Namespace {
    /// A requested composite layout resolved over the cluster defaults: the first extent's stripe size
    /// and count (0: all targets), and the other extents, not instantiated.
    pub(super) fn composite_parts(&self, specs: &[ExtentSpec]) -> ((u64, usize, u8), Vec<Component>) {
        let resolve = |e: &ExtentSpec| {
            self.merged_spec(
                LayoutSpec { stripe_size: e.stripe_size, stripe_count: e.stripe_count, mirrors: e.mirrors },
                LayoutSpec::default(),
            )
        };
        let first = specs
            .first()
            .map(resolve)
            .unwrap_or_else(|| self.merged_spec(LayoutSpec::default(), LayoutSpec::default()));
        let mut start = specs.first().map_or(EOF, |e| e.end);
        let mut rest = Vec::new();
        for e in specs.iter().skip(1) {
            let (stripe_size, stripe_count, mirror_count) = resolve(e);
            rest.push(Component {
                start,
                end: e.end,
                stripe_size,
                stripe_count: stripe_count as u32,
                targets: Vec::new(),
                mirror_count,
                mirrors: Vec::new(),
            });
            start = e.end;
        }
        (first, rest)
    }

    /// The placement policy of file `i`: its own, else its directory's (`None`: the cluster's).
    fn file_policy(&self, tx: &Txn<'_>, i: &Inode) -> FsResult<Option<String>> {
        match self.policy_of(tx, i.attr.ino)? {
            Some(p) => Ok(Some(p)),
            None if i.parent != i.attr.ino && tx.dir(i.parent).is_ok() => self.policy_of(tx, i.parent),
            None => Ok(None),
        }
    }

    /// `SetCompositeLayout`: a directory's composite default (replacing its plain one), or an empty
    /// file's new layout (its first extent placed now, its old objects destroyed); EBUSY on a file with data.
    pub(crate) async fn set_composite(&self, c: &Caller, ino: Ino, specs: &[ExtentSpec]) -> FsResult<MdsReply> {
        self.durable(crate::offload::offload(|| self.set_composite_sync(c, ino, specs))).await
    }

    pub(super) fn set_composite_sync(&self, c: &Caller, ino: Ino, specs: &[ExtentSpec]) -> FsResult<MdsReply> {
        validate_extents(specs)?;
        let placed = {
            let rd = self.store.begin();
            let i = rd.inode(ino)?;
            match i.attr.kind {
                FileKind::File if i.attr.size > 0 => {
                    return Err(err(ErrorCode::Busy, format!("inode {ino} already has data")));
                }
                FileKind::File => {
                    let policy = self.file_policy(&rd, &i)?;
                    let ((stripe_size, stripe_count, mirrors), rest) = self.composite_parts(specs);
                    let req = CreateRequest::fresh(stripe_count, stripe_size, mirrors);
                    let slots = self.placer.place(policy.as_deref(), &[req])?.pop().unwrap_or_default();
                    Some(Placed { stripe_size, mirrors, slots, rest, planned: Vec::new() })
                }
                FileKind::Dir => None,
                _ => return Err(FsError::invalid(format!("inode {ino} cannot have a layout"))),
            }
        };
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        acl::check(&tx, c, &i.attr, W)?;
        match (i.attr.kind, placed) {
            (FileKind::Dir, _) => {
                tx.set_dir_composite(ino, Some(specs))?;
                tx.set_dir_layout(ino, None)?;
            }
            (FileKind::File, Some(p)) if i.attr.size == 0 => {
                let new = self.layout_of(ino, p)?;
                if let Some(old) = i.layout.replace(new) {
                    tx.queue_destroy(&old)?;
                }
            }
            (FileKind::File, _) => return Err(err(ErrorCode::Busy, format!("inode {ino} already has data"))),
            _ => return Err(FsError::invalid(format!("inode {ino} cannot have a layout"))),
        }
        i.attr.ctime = Timestamp::now();
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    /// `InstantiateExtent`: places the extent of `ino` holding `offset` and every one before it that has
    /// no objects yet; returns the file's layout (unchanged if they all have objects already).
    pub(crate) async fn instantiate(&self, c: &Caller, ino: Ino, offset: u64) -> FsResult<Layout> {
        let (i, policy) = {
            let rd = self.store.begin();
            let i = rd.inode(ino)?;
            let policy = self.file_policy(&rd, &i)?;
            (i, policy)
        };
        if i.attr.kind != FileKind::File {
            return Err(FsError::invalid(format!("inode {ino} is not a regular file")));
        }
        // As for a truncate: writers of an open file may, whatever the mode now says.
        if !acl::allowed(&self.store.begin(), c, &i.attr, W)? && !self.is_open(ino) {
            return Err(perm::denied(c, &i.attr, W));
        }
        let l = i.layout.ok_or_else(|| err(ErrorCode::NoData, format!("inode {ino} has no layout")))?;
        let want = l.extent_index_at(offset);
        if l.extent(want).is_none_or(|e| e.instantiated()) {
            return Ok(l);
        }
        // Placement (a solve per extent) and the commit, off the async worker.
        let r = crate::offload::offload(|| {
            let mut avoid: Vec<Slot> = l.all_targets().map(|t| (t.ds, target_of(t.object))).collect();
            let mut placed = Vec::new();
            for (k, e) in l.extents.iter().enumerate().take(want).filter(|(_, e)| e.targets.is_empty()) {
                let expected_size = if e.end == EOF { 0 } else { e.end - e.start };
                let req = CreateRequest {
                    stripe_count: e.stripe_count as usize,
                    stripe_size: e.stripe_size,
                    expected_size,
                    exclude: Vec::new(),
                    mirrors: usize::from(e.mirror_count),
                };
                // `k + 1`: the extent's index in the layout (extent 0 is the first, `l.targets`).
                let slots = self.placer.place_extent(policy.as_deref(), ino, k + 1, e.start, e.end, req, &avoid)?;
                avoid.extend(&slots);
                placed.push((k, e.start, slots));
            }
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(ino)?;
            let l = i.layout.as_mut().ok_or_else(|| err(ErrorCode::NoData, format!("inode {ino} has no layout")))?;
            let mut changed = false;
            for (k, start, slots) in placed {
                // Skipped if another instantiation got there first, or the layout was replaced meanwhile.
                if let Some(e) = l.extents.get_mut(k).filter(|e| e.targets.is_empty() && e.start == start) {
                    (e.targets, e.mirrors) = self.objects_on(e.mirror_count, &slots)?;
                    changed = true;
                }
            }
            l.validate()?;
            let out = l.clone();
            if changed {
                tx.put_inode(&i)?;
                self.commit(tx)?;
            }
            Ok(out)
        });
        self.durable(r).await
    }
}
