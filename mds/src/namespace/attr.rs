//! Attributes: setattr (chown, chmod, truncate, times) and statfs.

use super::{acl, err, Namespace};
use crate::perm::{self, W};
use crate::store::Inode;
use std::collections::BTreeMap;
use tessera_proto::acl::Acl;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{Layout, ReplicaState, StripeTarget};
use tessera_proto::msg::{MdsReply, SetAttrs, StatFs, TimeSet};
use tessera_proto::{Caller, FileKind, FsError, FsResult, Ino, Timestamp, NAME_MAX};

use tracing::warn;

const STATFS_BLOCK: u64 = 4096;
/// Reported free inodes: there is no fixed inode table.
const FILES_FREE: u64 = 1 << 40;

impl Namespace {
    /// Applies `set` to `i` with every permission rule (used once to validate, once for real).
    /// `acl`: the inode's access ACL if it can decide for `c` ([`acl::for_caller`]).
    fn apply_setattr(
        &self,
        c: &Caller,
        i: &mut Inode,
        acl: Option<&Acl>,
        set: &SetAttrs,
        now: Timestamp,
    ) -> FsResult<()> {
        let orig = i.attr.clone();
        if set.uid.is_some() || set.gid.is_some() {
            perm::check_chown(c, &orig, set.uid, set.gid)?;
            if let Some(uid) = set.uid {
                i.attr.uid = uid;
            }
            if let Some(gid) = set.gid {
                i.attr.gid = gid;
            }
            i.attr.perm = perm::mode_after_chown(i.attr.kind, i.attr.perm);
        }
        if let Some(p) = set.perm {
            let mut check_attr = orig.clone();
            check_attr.gid = i.attr.gid;
            i.attr.perm = perm::chmod_mode(c, &check_attr, p)?;
        }
        if let Some(size) = set.size {
            match i.attr.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(err(ErrorCode::IsDir, "cannot truncate a directory")),
                _ => return Err(FsError::invalid("truncate of a special file")),
            }
            // ftruncate on an open descriptor is allowed without write permission on the inode now.
            if !perm::allowed(c, &orig, acl, W) && !self.is_open(orig.ino) {
                return Err(perm::denied(c, &orig, W));
            }
            i.attr.size = size;
            if set.mtime.is_none() {
                i.attr.mtime = now;
            }
        }
        for (t, slot) in [(set.atime, &mut i.attr.atime), (set.mtime, &mut i.attr.mtime)] {
            match t {
                Some(TimeSet::At(ts)) => {
                    perm::check_times(c, &orig, acl, true)?;
                    *slot = ts;
                }
                Some(TimeSet::Now) => {
                    perm::check_times(c, &orig, acl, false)?;
                    *slot = now;
                }
                None => {}
            }
        }
        i.attr.ctime = now;
        Ok(())
    }

    /// Truncates (or extends) every object of `l` (every replica of a mirrored stripe) to match a file of
    /// `size` bytes, in parallel. A mirrored stripe's replica whose server cannot be reached missed the
    /// cut as it would a write: it is marked stale (reported by a replica of the stripe that was cut, and
    /// fenced, `mirror_mark_stale`) and resync later copies it at the primary's size; replicas already
    /// not in sync are left to their resync. The truncate fails only when no in-sync replica of a stripe
    /// could be cut, or an error is not a server out of reach.
    pub(super) async fn truncate_objects(&self, l: &Layout, size: u64) -> FsResult<()> {
        let objects: Vec<(usize, StripeTarget)> = l.stripe_objects().collect();
        let calls = objects.iter().map(|&(k, t)| self.data.truncate(t.ds, t.object, l.object_size(k, size)));
        let results = futures::future::join_all(calls).await;
        let in_sync = |k: usize, t: StripeTarget| l.replica_state(k, t) == Some(ReplicaState::InSync);
        let mut cut: BTreeMap<usize, StripeTarget> = BTreeMap::new();
        let mut missed: BTreeMap<usize, Vec<StripeTarget>> = BTreeMap::new();
        for (&(k, t), r) in objects.iter().zip(results) {
            match r {
                Ok(()) => {
                    if in_sync(k, t) {
                        cut.entry(k).or_insert(t);
                    }
                }
                Err(e) if !l.mirrors_of(k).is_empty() && e.is_unreachable() => {
                    if in_sync(k, t) {
                        missed.entry(k).or_default().push(t);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        for (k, m) in missed {
            let from = cut.get(&k).copied().ok_or_else(|| {
                FsError::unavailable(format!(
                    "no replica of stripe {k} in sync could be truncated: its servers are down"
                ))
            })?;
            warn!(stripe = k, missed = ?m, "replicas out of reach missed a truncate: marking them stale");
            self.mirror_mark_stale(from, m, Vec::new()).await?;
        }
        Ok(())
    }

    pub(crate) fn getattr(&self, ino: Ino) -> FsResult<MdsReply> {
        Ok(MdsReply::Attr(self.store.begin().inode(ino)?.attr))
    }

    /// `Access`: whether `c` may read, write or search `ino` (as `mask`'s low three bits ask).
    pub(crate) fn access(&self, c: &Caller, ino: Ino, mask: u32) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let i = rd.inode(ino)?;
        if mask & 7 != 0 {
            acl::check(&rd, c, &i.attr, mask & 7)?;
        }
        Ok(MdsReply::Ok)
    }

    pub(crate) async fn setattr(&self, c: &Caller, ino: Ino, set: SetAttrs) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let mut cur = rd.inode(ino)?;
        let cur_acl = acl::for_caller(&rd, c, &cur.attr)?;
        drop(rd);
        // Validate before touching the data servers.
        self.apply_setattr(c, &mut cur.clone(), cur_acl.as_ref(), &set, Timestamp::now())?;
        // Growing into extents of a composite layout not instantiated yet instantiates them, so the
        // objects (and a size recovered from them) reach the new end.
        if let (Some(size), Some(l)) = (set.size, &cur.layout) {
            if size > l.instantiated_end() {
                cur.layout = Some(self.instantiate(c, ino, size - 1).await?);
            }
        }
        let _busy = (set.size.is_some() && cur.layout.is_some()).then(|| Truncating::start(self, ino));
        if let (Some(size), Some(l)) = (set.size, &cur.layout) {
            self.truncate_objects(l, size).await?;
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(ino)?;
            let i_acl = acl::for_caller(&tx, c, &i.attr)?;
            self.apply_setattr(c, &mut i, i_acl.as_ref(), &set, Timestamp::now())?;
            if set.size.is_some() {
                self.note_truncated(&mut i);
            }
            if set.perm.is_some() {
                acl::chmod(&mut tx, ino, i.attr.perm)?;
            }
            tx.put_inode(&i)?;
            self.commit(tx).map(|_| MdsReply::Attr(i.attr))
        };
        self.durable(r).await
    }

    pub(crate) fn statfs(&self) -> MdsReply {
        // Free and available apart, as each data server's file system reports them (`df` shows used =
        // blocks − free; a disk's reserved blocks are free but not available).
        let (capacity, free, avail) = self.stats.totals();
        let files = self.store.inode_count();
        MdsReply::StatFs(StatFs {
            block_size: STATFS_BLOCK as u32,
            blocks: capacity / STATFS_BLOCK,
            blocks_free: free / STATFS_BLOCK,
            blocks_avail: avail / STATFS_BLOCK,
            files,
            files_free: FILES_FREE.saturating_sub(files),
            name_max: NAME_MAX as u32,
        })
    }
}

/// Marks a file as having its objects truncated until dropped (after the size is committed).
struct Truncating<'a> {
    ns: &'a Namespace,
    ino: Ino,
}

impl<'a> Truncating<'a> {
    fn start(ns: &'a Namespace, ino: Ino) -> Truncating<'a> {
        *ns.truncating().entry(ino).or_default() += 1;
        Truncating { ns, ino }
    }
}

impl Drop for Truncating<'_> {
    fn drop(&mut self) {
        let mut t = self.ns.truncating();
        if let Some(n) = t.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ino);
            }
        }
    }
}
