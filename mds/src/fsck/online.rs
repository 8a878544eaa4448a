//! `tessera fsck`, online: the scan (`crate::fsck` documents what makes it trustworthy while
//! mutations go on), the confirmation of each finding against the store under the mutation lock, and
//! repair, as [`Namespace::fsck`]. Repair checks again after fixing (a removed entry can leave an inode
//! unreachable, a moved one a count to fix), up to [`MAX_PASSES`] passes, so a second run finds nothing.

use super::{check, Finding, Fix, Record, Scan, LOST_FOUND};
use crate::destroy;
use crate::dsclient::list_all_objects;
use crate::namespace::Namespace;
use crate::store::{dirseq_key, key_ino, xattr_key, Dentry, DestroyEntry, Inode, Txn, T};
use std::collections::HashSet;
use std::time::Instant;
use tessera_proto::acl::{Acl, ACCESS_XATTR};
use tessera_proto::layout::{ReplicaState, StripeTarget};
use tessera_proto::msg::{FsckFinding, FsckReport, MAX_FSCK_FINDINGS};
use tessera_proto::{wire, Attr, FileKind, FsError, FsResult, Ino, Timestamp, ROOT_INO};
use tracing::{info, warn};

/// How long `--repair` waits for the replicas it marked stale to be resynced.
const RESYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(120);
/// Check-and-repair passes at most.
pub const MAX_PASSES: u32 = 3;
/// Findings confirmed (and repaired) per hold of the mutation lock: mutations wait at most this long.
const CHUNK: usize = 256;
/// Tries, and the pause between them, to reach each data server before the scan.
const REACH_ATTEMPTS: usize = 4;
const REACH_PAUSE: std::time::Duration = std::time::Duration::from_millis(1100);

/// A record as the scan keeps it.
enum Decoded {
    Inode(Inode),
    /// `(parent, name, entry)`.
    Dentry(Ino, String, Dentry),
    /// `(parent, seq, name)`.
    Dirseq(Ino, u64, String),
    Destroy(DestroyEntry),
    /// A record of another tree, belonging to the inode its key starts with (xattrs, directory layouts).
    Of(Option<Ino>),
}

/// A record of `tree` decoded, or `None` when it does not decode (the scan and the confirmation of a
/// corrupt record both ask).
fn decode(tree: T, key: &[u8], value: &[u8]) -> Option<Decoded> {
    Some(match tree {
        T::Inodes => Decoded::Inode(wire::decode(value).ok()?),
        T::Dentries => {
            let name = std::str::from_utf8(key.get(8..).filter(|n| !n.is_empty())?).ok()?;
            Decoded::Dentry(u64_at(key, 0), name.to_string(), wire::decode(value).ok()?)
        }
        T::Dirseq if key.len() == 16 => {
            Decoded::Dirseq(u64_at(key, 0), u64_at(key, 8), std::str::from_utf8(value).ok()?.to_string())
        }
        T::Destroy if key.len() == 8 => Decoded::Destroy(wire::decode(value).ok()?),
        T::Dirseq | T::Destroy => return None,
        _ => Decoded::Of(key_ino(key)),
    })
}

fn u64_at(key: &[u8], at: usize) -> u64 {
    key.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0)
}

impl Namespace {
    /// Checks the namespace against itself and the data servers' objects; with `repair`, fixes what
    /// it finds (and checks again).
    pub async fn fsck(&self, repair: bool) -> FsResult<FsckReport> {
        self.fsck_with(repair, false).await
    }

    /// [`Namespace::fsck`]; with `verify_mirrors`, mirrored stripes' in-sync replicas are compared by
    /// checksum too.
    pub async fn fsck_with(&self, repair: bool, verify_mirrors: bool) -> FsResult<FsckReport> {
        let t0 = Instant::now();
        let mut report = FsckReport::default();
        let mut reported: HashSet<(&'static str, String)> = HashSet::new();
        for pass in 1..=MAX_PASSES {
            let scan = self.fsck_scan(verify_mirrors).await?;
            report.passes = pass;
            report.inodes = scan.inodes.len() as u64;
            report.entries = scan.dentries.len() as u64;
            report.objects = scan.objects.values().filter_map(|r| r.as_ref().ok()).map(|l| l.len() as u64).sum();
            report.servers = scan.objects.values().filter(|r| r.is_ok()).count() as u32;
            let found = check(&scan);
            let (confirmed, repaired) = self.fsck_confirm(found, &scan, repair).await?;
            report.repaired += repaired;
            if repair {
                // Replicas marked stale are resynced before the next pass checks again.
                let marked: HashSet<Ino> = confirmed
                    .iter()
                    .filter_map(|f| match f.fix {
                        Fix::MirrorStale { ino, .. } => Some(ino),
                        _ => None,
                    })
                    .collect();
                if !marked.is_empty() {
                    self.fences.bump();
                    self.resync_files(&marked).await;
                }
            }
            for f in confirmed {
                if !reported.insert((f.kind, f.what.clone())) {
                    continue;
                }
                if report.findings.len() < MAX_FSCK_FINDINGS {
                    let repaired = repair && f.fix != Fix::Report;
                    report.findings.push(FsckFinding { kind: f.kind.into(), what: f.what, action: f.action, repaired });
                } else {
                    report.omitted += 1;
                }
            }
            if !repair || repaired == 0 {
                break;
            }
        }
        report.elapsed_ms = t0.elapsed().as_millis() as u64;
        let found = report.findings.len() as u64 + report.omitted;
        info!(found, repaired = report.repaired, passes = report.passes, ms = report.elapsed_ms, "fsck");
        Ok(report)
    }

    /// Resyncs until none of `files` has a replica out of sync (at most [`RESYNC_WAIT`]; the
    /// background resync may be copying some of them meanwhile).
    async fn resync_files(&self, files: &HashSet<Ino>) {
        let t = Instant::now();
        while t.elapsed() < RESYNC_WAIT {
            self.resync_pass(4).await;
            match self.store.degraded_files() {
                Ok(d) if d.iter().any(|i| files.contains(i)) => {}
                _ => return,
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        warn!(files = files.len(), "fsck --repair: replicas marked stale are not resynced yet");
    }

    /// Reads everything, in the order `crate::fsck` relies on: mark, inodes, entries, then the destroy
    /// log, then the data servers' objects.
    async fn fsck_scan(&self, verify_mirrors: bool) -> FsResult<Scan> {
        // A data server that has just come back may still be in this MDS's reconnect hold-off: a few
        // seconds' patience before the destroy log is drained and the objects are listed.
        let servers: Vec<_> = self.stats.snapshot().iter().map(|s| s.id).collect();
        futures::future::join_all(servers.iter().map(|&ds| async move {
            for _ in 0..REACH_ATTEMPTS {
                if self.data.list_objects(ds, 0, u64::MAX).await.is_ok() {
                    return;
                }
                tokio::time::sleep(REACH_PAUSE).await;
            }
        }))
        .await;
        let (start, mark) = {
            let _g = self.lock();
            (Timestamp::now(), self.store.new_id()?)
        };
        // What can be destroyed is, so the log holds only what does not drain.
        destroy::drain_once(&self.store, self.data.as_ref()).await;
        let mut scan = Scan { start, mark, ..Default::default() };
        // Whole trees read: not on the async worker.
        crate::offload::offload(|| -> FsResult<()> {
            self.read_trees(&mut scan, &[T::Inodes, T::Dentries, T::Dirseq])?;
            scan.orphan_markers = self.store.orphans()?.into_iter().collect();
            self.read_trees(&mut scan, &[T::Xattrs, T::DirLayouts, T::Destroy])
        })?;
        scan.open = self.opens().iter().filter(|(_, h)| !h.is_empty()).map(|(i, _)| *i).collect();
        scan.servers = servers;
        let data = self.data.as_ref();
        let listed = futures::future::join_all(scan.servers.iter().map(|&ds| list_all_objects(data, ds))).await;
        for (&ds, r) in scan.servers.iter().zip(listed) {
            scan.objects.insert(ds, r);
        }
        if verify_mirrors {
            let wanted: Vec<StripeTarget> = scan
                .inodes
                .values()
                .filter(|i| !scan.open.contains(&i.attr.ino))
                .filter_map(|i| i.layout.as_ref().filter(|l| l.is_mirrored()))
                .flat_map(|l| {
                    (0..l.stripe_count())
                        .flat_map(|k| l.replicas(k).into_iter().filter(|r| r.state == ReplicaState::InSync))
                        .map(|r| r.target)
                        .collect::<Vec<_>>()
                })
                .filter(|t| scan.servers.contains(&t.ds))
                .collect();
            // A few at a time per server's worth: each reads its object whole.
            for batch in wanted.chunks(8) {
                let sums = futures::future::join_all(batch.iter().map(|t| self.data.checksum(t.ds, t.object))).await;
                for (t, r) in batch.iter().zip(sums) {
                    match r {
                        Ok(v) => {
                            scan.checksums.insert((t.ds, t.object), v);
                        }
                        Err(e) => warn!(ds = t.ds, object = t.object, "fsck: no checksum: {e}"),
                    }
                }
            }
        }
        Ok(scan)
    }

    /// Reads every record of `trees` into the scan, each decoded once; those that do not decode are
    /// findings.
    fn read_trees(&self, scan: &mut Scan, trees: &[T]) -> FsResult<()> {
        for &tree in trees {
            for kv in self.store.scan_from(tree, &[], &[]) {
                let (key, value) = kv?;
                match decode(tree, &key, &value) {
                    Some(Decoded::Inode(i)) => {
                        scan.inodes.insert(i.attr.ino, i);
                    }
                    Some(Decoded::Dentry(parent, name, d)) => scan.dentries.push((parent, name, d)),
                    Some(Decoded::Dirseq(parent, seq, name)) => scan.dirseq.push((parent, seq, name)),
                    Some(Decoded::Destroy(e)) => scan.destroy.push((key, e)),
                    Some(Decoded::Of(Some(ino))) => {
                        if let (T::Xattrs, Some(default)) = (tree, crate::fsck::acl_key(ino, &key)) {
                            scan.acls.push((ino, default, key.clone(), value.to_vec()));
                        }
                        scan.records.push(Record { tree, key, ino })
                    }
                    Some(Decoded::Of(None)) => {}
                    None => scan.corrupt.push((tree, key, format!("{tree:?} record does not decode"))),
                }
            }
        }
        Ok(())
    }

    /// Keeps the findings that still hold under the mutation lock (see `crate::fsck`) and, with
    /// `repair`, fixes them in the same hold. Returns them and the number fixed.
    async fn fsck_confirm(&self, found: Vec<Finding>, scan: &Scan, repair: bool) -> FsResult<(Vec<Finding>, u64)> {
        let mut confirmed = Vec::new();
        let mut repaired = 0;
        for chunk in found.chunks(CHUNK) {
            let r = crate::offload::offload(|| {
                let _g = self.lock();
                let mut tx = self.store.begin();
                let checked = chunk.iter().try_for_each(|f| {
                    if !self.still_holds(&tx, &f.fix, scan)? {
                        return Ok(());
                    }
                    if repair && f.fix != Fix::Report {
                        self.apply_fix(&mut tx, &f.fix, scan)
                            .inspect_err(|e| warn!(kind = f.kind, what = %f.what, "fsck could not repair: {e}"))?;
                        repaired += 1;
                    }
                    confirmed.push(f.clone());
                    Ok(())
                });
                checked.and_then(|()| self.commit(tx))
            });
            self.durable(r).await?;
        }
        Ok((confirmed, repaired))
    }

    /// The inode, if it exists and has not changed since the scan began (the ctime rule).
    fn unchanged(tx: &Txn<'_>, ino: Ino, scan: &Scan) -> FsResult<Option<Inode>> {
        Ok(tx.get_inode(ino)?.filter(|i| i.attr.ctime < scan.start))
    }

    fn still_holds(&self, tx: &Txn<'_>, fix: &Fix, scan: &Scan) -> FsResult<bool> {
        Ok(match fix {
            Fix::RemoveEntry { parent, name } => match tx.dentry(*parent, name)? {
                None => false,
                Some(d) => {
                    let in_dir = tx.get_inode(*parent)?.is_some_and(|p| p.attr.kind == FileKind::Dir);
                    !in_dir || tx.get_inode(d.ino)?.is_none()
                }
            },
            Fix::EntryKind { parent, name } => match tx.dentry(*parent, name)? {
                Some(d) => tx.get_inode(d.ino)?.is_some_and(|i| i.attr.kind != d.kind),
                None => false,
            },
            Fix::AddSeq { parent, name } => match tx.dentry(*parent, name)? {
                Some(d) => tx.get(T::Dirseq, &dirseq_key(*parent, d.seq))?.as_deref() != Some(name.as_bytes()),
                None => false,
            },
            Fix::DropSeq { parent, seq } => match tx.get(T::Dirseq, &dirseq_key(*parent, *seq))? {
                Some(name) => match (tx.get_inode(*parent)?, std::str::from_utf8(&name)) {
                    (Some(_), Ok(name)) => tx.dentry(*parent, name)?.is_none_or(|d| d.seq != *seq),
                    _ => true,
                },
                None => false,
            },
            Fix::LinkCount { ino, nlink } => Self::unchanged(tx, *ino, scan)?.is_some_and(|i| i.attr.nlink != *nlink),
            Fix::EntryCount { ino, size } => Self::unchanged(tx, *ino, scan)?.is_some_and(|i| i.attr.size != *size),
            Fix::DirParent { ino, parent } => Self::unchanged(tx, *ino, scan)?.is_some_and(|i| i.parent != *parent),
            Fix::LostFound { ino } => *ino != ROOT_INO && Self::unchanged(tx, *ino, scan)?.is_some(),
            Fix::Destroy { ino } => {
                Self::unchanged(tx, *ino, scan)?.is_some_and(|i| i.attr.nlink == 0) && !self.is_open(*ino)
            }
            Fix::Replace { ino, stripe } => tx
                .get_inode(*ino)?
                .and_then(|i| i.layout)
                .is_some_and(|l| l.target(*stripe).is_some_and(|t| !scan.servers.contains(&t.ds))),
            Fix::MirrorStale { ino, stripe, replica } => {
                !self.is_open(*ino)
                    && tx.get_inode(*ino)?.and_then(|i| i.layout).is_some_and(|l| {
                        l.target(*stripe) != Some(*replica)
                            && l.replica_state(*stripe, *replica) == Some(ReplicaState::InSync)
                    })
            }
            // The object mark (module docs of `crate::fsck`): nothing can name them now.
            Fix::Orphans { .. } | Fix::Report => true,
            Fix::DropDestroy { key } => tx.get(T::Destroy, key)?.is_some(),
            Fix::Size { ino, size } => {
                let scanned = scan.inodes.get(ino).and_then(|i| i.layout.as_ref());
                let now = Self::unchanged(tx, *ino, scan)?;
                now.is_some_and(|i| i.attr.size < *size && i.layout.as_ref() == scanned)
                    && !self.is_open(*ino)
                    && !self.is_truncating(*ino)
            }
            Fix::DropMarker { ino } => tx.is_orphan(*ino)? && tx.get_inode(*ino)?.is_none_or(|i| i.attr.nlink > 0),
            Fix::DropAcl { ino, key } => match (tx.get(T::Xattrs, key)?, Self::unchanged(tx, *ino, scan)?) {
                (Some(v), Some(i)) => crate::fsck::acl_problem(&i, crate::fsck::acl_key(*ino, key) == Some(true), &v)
                    .is_some_and(|(_, _, drop)| drop),
                _ => false,
            },
            Fix::AclFromMode { ino } => {
                let key = xattr_key(*ino, ACCESS_XATTR);
                match (tx.get(T::Xattrs, &key)?, Self::unchanged(tx, *ino, scan)?) {
                    (Some(v), Some(i)) => crate::fsck::acl_problem(&i, false, &v).is_some_and(|(_, _, drop)| !drop),
                    _ => false,
                }
            }
            Fix::DropRecord { tree, key, of } => match tx.get(*tree, key)? {
                None => false,
                Some(v) => match of {
                    Some(ino) => tx.get_inode(*ino)?.is_none(),
                    None => decode(*tree, key, &v).is_none(),
                },
            },
        })
    }

    fn apply_fix(&self, tx: &mut Txn<'_>, fix: &Fix, scan: &Scan) -> FsResult<()> {
        let now = Timestamp::now();
        match fix {
            Fix::RemoveEntry { parent, name } => {
                // The directory's counts are findings of their own (the check counted live entries).
                if let Some(d) = tx.dentry(*parent, name)? {
                    tx.del_dentry(*parent, name, &d);
                }
            }
            Fix::EntryKind { parent, name } => {
                if let Some(mut d) = tx.dentry(*parent, name)? {
                    d.kind = tx.inode(d.ino)?.attr.kind;
                    tx.put_dentry(*parent, name, d)?;
                }
            }
            Fix::AddSeq { parent, name } => {
                if let Some(mut d) = tx.dentry(*parent, name)? {
                    d.seq = self.store.new_id()?;
                    tx.put_dentry(*parent, name, d)?;
                }
            }
            Fix::DropSeq { parent, seq } => tx.del(T::Dirseq, &dirseq_key(*parent, *seq)),
            Fix::LinkCount { ino, nlink } => set(tx, *ino, now, |i| i.attr.nlink = *nlink)?,
            Fix::EntryCount { ino, size } => set(tx, *ino, now, |i| i.attr.size = *size)?,
            Fix::DirParent { ino, parent } => set(tx, *ino, now, |i| i.parent = *parent)?,
            Fix::LostFound { ino } => self.move_to_lost_found(tx, *ino, now)?,
            Fix::Destroy { ino } => {
                let i = tx.inode(*ino)?;
                tx.remove_inode(&i)?;
            }
            Fix::Replace { ino, stripe } => {
                let mut i = tx.inode(*ino)?;
                if let Some(l) = i.layout.as_mut() {
                    let used: Vec<_> = l.all_targets().map(|t| t.ds).collect();
                    let ds = scan
                        .servers
                        .iter()
                        .find(|d| !used.contains(d))
                        .or(scan.servers.first())
                        .copied()
                        .ok_or_else(|| FsError::unavailable("no data server configured"))?;
                    if let Some(t) = l.target_mut(*stripe) {
                        *t = StripeTarget { ds, object: self.store.new_id()? };
                    }
                }
                i.attr.ctime = now;
                tx.put_inode(&i)?;
            }
            Fix::MirrorStale { ino, stripe, replica } => {
                let mut i = tx.inode(*ino)?;
                if let Some(l) = i.layout.as_mut() {
                    if let Some(primary) = l.target(*stripe) {
                        l.mark_stale(primary, &[*replica])?;
                        // Found to differ: no log of what it missed covers that.
                        self.resync.forget(*replica);
                    }
                }
                tx.put_inode(&i)?;
            }
            Fix::Orphans { ds, objects } => tx.destroy_objects(*ds, objects.clone())?,
            Fix::DropDestroy { key } => tx.del(T::Destroy, key),
            Fix::Size { ino, size } => set(tx, *ino, now, |i| i.attr.size = *size)?,
            Fix::DropMarker { ino } => tx.set_orphan(*ino, false),
            Fix::DropRecord { tree, key, .. } => tx.del(*tree, key),
            Fix::DropAcl { key, .. } => tx.del(T::Xattrs, key),
            Fix::AclFromMode { ino } => {
                let key = xattr_key(*ino, ACCESS_XATTR);
                if let Some(mut acl) = tx.get(T::Xattrs, &key)?.and_then(|v| Acl::parse(&v).ok().flatten()) {
                    acl.chmod(tx.inode(*ino)?.attr.perm);
                    tx.put(T::Xattrs, &key, acl.to_bytes());
                }
            }
            Fix::Report => {}
        }
        Ok(())
    }

    /// Links an inode no entry names into `/lost+found` (made if missing) as `#ino`, with one link.
    fn move_to_lost_found(&self, tx: &mut Txn<'_>, ino: Ino, now: Timestamp) -> FsResult<()> {
        let lf = match tx.dentry(ROOT_INO, LOST_FOUND)? {
            Some(d) if d.kind == FileKind::Dir => d.ino,
            Some(_) => return Err(FsError::exists(format!("/{LOST_FOUND} is not a directory"))),
            None => {
                let lf = self.store.new_ino()?;
                let attr = Attr::new(lf, FileKind::Dir, 0o700, 0, 0, now);
                tx.add_inode(&Inode { attr, layout: None, target: None, parent: ROOT_INO })?;
                self.add_entry(tx, ROOT_INO, LOST_FOUND, lf, FileKind::Dir)?;
                lf
            }
        };
        let mut i = tx.inode(ino)?;
        let mut name = format!("#{ino}");
        let mut n = 1;
        while tx.dentry(lf, &name)?.is_some() {
            name = format!("#{ino}.{n}");
            n += 1;
        }
        if i.attr.kind == FileKind::Dir {
            i.parent = lf;
        } else {
            i.attr.nlink = 1;
        }
        i.attr.ctime = now;
        tx.put_inode(&i)?;
        tx.set_orphan(ino, false);
        self.add_entry(tx, lf, &name, ino, i.attr.kind)?;
        Ok(())
    }
}

/// Changes one inode and stamps its ctime.
fn set(tx: &mut Txn<'_>, ino: Ino, now: Timestamp, f: impl FnOnce(&mut Inode)) -> FsResult<()> {
    tx.update_inode(ino, |i| {
        f(i);
        i.attr.ctime = now;
    })
    .map(|_| ())
}
