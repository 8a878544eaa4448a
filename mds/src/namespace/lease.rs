//! Directory leases: granting one, and applying a holder's batch of creates and unlinks.

use super::entries::Placed;
use super::{acl, err, validate_name, Namespace};
use crate::lease::{Holder, Renewal, LEASE_TIME, RESERVED_INOS};
use crate::perm::{W, X};
use crate::store::{Inode, Store, Txn, T};
use std::time::Duration;
use tessera_proto::acl::Acl;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::Layout;
use tessera_proto::layout::LayoutSpec;
use tessera_proto::msg::{AsyncCreate, BatchResult, DirLease, DirOp, MdsReply, LEASE_NAMES_MAX, LEASE_NAME_BYTES_MAX};
use tessera_proto::{Attr, Caller, FileKind, FsError, FsResult, Ino, Timestamp, ROOT_INO};

/// Meta key: when a lease was last granted or renewed (milliseconds since the epoch, big-endian).
const LEASE_ACTIVITY_KEY: &[u8] = b"lease-activity";

fn epoch_ms() -> u64 {
    let t = Timestamp::now();
    (t.secs.max(0) as u64) * 1000 + u64::from(t.nanos / 1_000_000)
}

/// Written with every grant and batch, so a restarted MDS knows whether a lease may still be in use: its
/// holder keeps answering for the directory until its lease would have expired.
fn note_lease_activity(tx: &mut Txn<'_>) {
    tx.put(T::Meta, LEASE_ACTIVITY_KEY, epoch_ms().to_be_bytes().to_vec());
}

/// Meta key: when a client's `Watch` last marked name and attribute leases as in use (as above).
const CACHE_ACTIVITY_KEY: &[u8] = b"cache-lease-activity";

/// Written at most once a second while clients watch (see [`lease_grace`]).
pub(super) fn note_cache_activity(tx: &mut Txn<'_>) {
    tx.put(T::Meta, CACHE_ACTIVITY_KEY, epoch_ms().to_be_bytes().to_vec());
}

/// How long after this start requests on directories and inodes must wait: until the leases the previous
/// run may have granted have certainly expired at their holders (directory leases, and the name and
/// attribute leases of clients that watched, noted at most a second late: one more second).
pub(super) fn lease_grace(store: &Store) -> FsResult<Duration> {
    let since = |key: &[u8], lease: Duration| -> FsResult<Duration> {
        let Some(v) = store.read(T::Meta, key)? else { return Ok(Duration::ZERO) };
        let last = v.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(0);
        let until = last.saturating_add(lease.as_millis() as u64);
        Ok(Duration::from_millis(until.saturating_sub(epoch_ms())).min(lease))
    };
    let caches = crate::caches::LEASE + Duration::from_secs(1);
    Ok(since(LEASE_ACTIVITY_KEY, LEASE_TIME)?.max(since(CACHE_ACTIVITY_KEY, caches)?))
}

/// What a leased directory passes on to the files a batch creates in it.
struct DirDefaults {
    layout: LayoutSpec,
    acl: Option<Acl>,
}

impl Namespace {
    fn new_lease(&self, dir: Ino, token: u64, count: usize, attr: Attr) -> FsResult<DirLease> {
        let inos = (0..count).map(|_| self.store.new_ino()).collect::<FsResult<Vec<_>>>()?;
        self.leases.reserve(dir, &inos);
        Ok(DirLease { dir, token, valid_ms: LEASE_TIME.as_millis() as u32, inos, attr, entries: Vec::new() })
    }

    /// Grants `holder` the lease on directory `dir`, with its names, if `c` may create and remove in it and
    /// its names fit in the grant.
    pub(crate) fn lease_dir(&self, c: &Caller, holder: Holder, dir: Ino) -> FsResult<DirLease> {
        crate::offload::offload(|| self.lease_dir_sync(c, holder, dir))
    }

    fn lease_dir_sync(&self, c: &Caller, holder: Holder, dir: Ino) -> FsResult<DirLease> {
        // Under the mutation lock: no entry can change between the listing and the grant.
        let _g = self.lock();
        let mut tx = self.store.begin();
        let d = tx.dir(dir)?;
        acl::check(&tx, c, &d.attr, W | X)?;
        if acl::has_default(&tx, dir)? {
            // Its creates inherit an ACL: the MDS makes them.
            return Err(err(ErrorCode::Busy, "a directory with a default ACL is not leased"));
        }
        let entries = tx
            .dir_entries_bounded(dir, LEASE_NAMES_MAX, LEASE_NAME_BYTES_MAX)?
            .ok_or_else(|| err(ErrorCode::Busy, "too many entries to lease"))?;
        if self.caches.names_cached_elsewhere(dir, holder) {
            // Recalled now: asked again, it is granted.
            return Err(err(ErrorCode::Busy, "another client caches its names"));
        }
        let token = self.leases.grant(dir, holder).ok_or_else(|| err(ErrorCode::Busy, "another client holds it"))?;
        note_lease_activity(&mut tx);
        self.commit(tx)?;
        let mut lease = self.new_lease(dir, token, RESERVED_INOS, d.attr)?;
        lease.entries = entries;
        Ok(lease)
    }

    /// Applies a lease holder's batch of creates and unlinks, then renews or ends its lease.
    pub(crate) async fn dir_batch(
        &self,
        holder: Holder,
        dir: Ino,
        token: u64,
        entries: Vec<DirOp>,
        keep: bool,
    ) -> FsResult<MdsReply> {
        if self.leases.holds(dir, token, holder) {
            // Others keep waiting while this batch is applied, however long that takes.
            self.leases.extend(dir, token);
        } else {
            // Lost (expired, or the MDS restarted): whoever holds it now goes first.
            self.leases.wait_for(holder, Some(dir)).await;
        }
        // Each create used a reserved inode number (or meant to): as many come with the renewal.
        let used = entries.iter().filter(|e| matches!(e, DirOp::Create(_))).count();
        let r = crate::offload::offload(|| self.dir_batch_sync(holder.client, dir, entries));
        let (results, dir_attr) = self.durable(r).await?;
        let lease = match self.leases.renew(dir, token, keep) {
            Renewal::Renewed => Some(self.new_lease(dir, token, used, dir_attr.clone())?),
            Renewal::Recalled | Renewal::Ended => None,
        };
        Ok(MdsReply::Batch { results, dir_attr, lease })
    }

    /// Whether `ino` may have been reserved for a lease before this MDS restarted (its reservations are
    /// in memory): handed out by an earlier run and not in use.
    fn reserved_before_restart(&self, tx: &Txn<'_>, ino: Ino) -> FsResult<bool> {
        Ok(ino < self.boot_ino && ino > ROOT_INO && tx.get_inode(ino)?.is_none())
    }

    /// Applies each change of a batch in one transaction: creates (and opens, as asked) and unlinks; an
    /// entry that cannot be applied fails alone. A create whose name already holds its inode number was
    /// made by an earlier send of the same batch.
    fn dir_batch_sync(&self, client: u64, dir: Ino, entries: Vec<DirOp>) -> FsResult<(Vec<BatchResult>, Attr)> {
        // The batch's new files are placed together, before taking the lock; if that fails (say, a full
        // cluster), each create is placed alone and fails alone.
        let names: Vec<&str> = entries
            .iter()
            .filter_map(|e| if let DirOp::Create(c) = e { Some(c.name.as_str()) } else { None })
            .collect();
        let mut placed: std::collections::VecDeque<Placed> = match self.place_new_files(dir, &names, None) {
            Ok(l) => l.into(),
            Err(e) => {
                tracing::debug!(dir, "placing a batch of {} creates: {e}", names.len());
                Default::default()
            }
        };
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut dir_attr = tx.dir(dir)?.attr;
        // Read once for the whole batch (a default ACL set since the lease was granted still passes on).
        let defaults = DirDefaults {
            layout: tx.dir_layout(dir)?.unwrap_or_default(),
            acl: acl::stored(&tx, dir, acl::Which::Default)?,
        };
        note_lease_activity(&mut tx);
        let mut results = Vec::with_capacity(entries.len());
        let mut used = Vec::new();
        // Opened before the commit, so an unlink later in the batch keeps the file as an orphan; closed
        // again if the commit fails.
        let mut opened: Vec<(Ino, u64)> = Vec::new();
        for e in entries {
            let (ino, result) = match e {
                DirOp::Create(e) => {
                    let pre = placed.pop_front();
                    let r = self.batch_create(&mut tx, dir, &defaults, pre, &e, &mut used, &mut dir_attr);
                    let r = r.and_then(|layout| match (e.open, layout) {
                        (Some(_), Some(l)) => {
                            let handle = self.register_open(e.ino, client)?;
                            opened.push((e.ino, handle));
                            Ok(Some((handle, l)))
                        }
                        (Some(_), None) => Err(FsError::protocol(format!("inode {} has no layout", e.ino))),
                        (None, _) => Ok(None),
                    });
                    (e.ino, r)
                }
                DirOp::Unlink { name, time, .. } => match self.batch_unlink(&mut tx, dir, &name, time) {
                    Ok((ino, attr)) => {
                        dir_attr = attr;
                        (ino, Ok(None))
                    }
                    Err(e) => (0, Err(e)),
                },
            };
            results.push(BatchResult { ino, result });
        }
        if let Err(e) = self.commit(tx) {
            for (ino, handle) in opened {
                self.sessions().closed(handle);
                self.unregister_open(ino, handle);
            }
            return Err(e);
        }
        // Only now: a batch that failed as a whole may be sent again with the same numbers.
        self.leases.consume(dir, &used);
        Ok((results, dir_attr))
    }

    /// One create of a batch: the new file's layout (or the existing one's, when resent).
    #[allow(clippy::too_many_arguments)]
    fn batch_create(
        &self,
        tx: &mut Txn<'_>,
        dir: Ino,
        defaults: &DirDefaults,
        placed: Option<Placed>,
        e: &AsyncCreate,
        used: &mut Vec<Ino>,
        dir_attr: &mut Attr,
    ) -> FsResult<Option<Layout>> {
        match tx.dentry(dir, &e.name)? {
            Some(d) if d.ino == e.ino => return Ok(tx.inode(e.ino)?.layout),
            Some(_) => return Err(FsError::exists(e.name.clone())),
            None => validate_name(&e.name)?,
        }
        // Set-id bits are never created without the MDS deciding (the holder sends none).
        if e.perm & !0o1777 != 0 {
            return Err(FsError::invalid("mode bits beyond 01777"));
        }
        if used.contains(&e.ino) {
            return Err(FsError::invalid("inode number used twice"));
        }
        if !self.leases.is_reserved(dir, e.ino) && !self.reserved_before_restart(tx, e.ino)? {
            return Err(FsError::invalid(format!("inode {} was not reserved for this directory", e.ino)));
        }
        let mut attr = Attr::new(e.ino, FileKind::File, e.perm, e.uid, e.gid, e.time);
        acl::inherit_from(tx, defaults.acl.as_ref(), &mut attr, 0)?;
        let layout = match placed {
            Some(p) => self.layout_of(e.ino, p)?,
            None if tx.dir_composite(dir)?.is_some() => {
                let p = self.place_new_files(dir, &[e.name.as_str()], None)?.pop();
                self.layout_of(e.ino, p.ok_or_else(|| FsError::io("placement returned no layout"))?)?
            }
            None => self.new_layout(LayoutSpec::default(), defaults.layout, self.policy_of(tx, dir)?.as_deref())?,
        };
        tx.add_inode(&Inode { attr, layout: Some(layout.clone()), target: None, parent: dir })?;
        // At the time the holder showed for it: the directory's times do not move when the batch arrives.
        *dir_attr = self.add_entry_at(tx, dir, &e.name, e.ino, FileKind::File, e.time)?;
        used.push(e.ino);
        Ok(Some(layout))
    }

    /// One unlink of a batch, made at `time` (the holder's): the inode removed and the directory's new
    /// attributes.
    fn batch_unlink(&self, tx: &mut Txn<'_>, dir: Ino, name: &str, time: Timestamp) -> FsResult<(Ino, Attr)> {
        validate_name(name)?;
        let d = tx.dentry(dir, name)?.ok_or_else(|| FsError::not_found(name.to_string()))?;
        if d.kind == FileKind::Dir {
            return Err(err(ErrorCode::IsDir, format!("{name} is a directory")));
        }
        if d.kind == FileKind::File {
            self.placer.remember(dir, name, tx.inode(d.ino)?.attr.size);
        }
        let attr = self.remove_entry_at(tx, dir, name, &d, time)?;
        self.drop_link(tx, d.ino)?;
        Ok((d.ino, attr))
    }
}
