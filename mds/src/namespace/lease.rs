//! Directory leases: granting one, and applying a holder's batch of creates.

use super::{err, validate_name, Namespace};
use crate::lease::{Holder, Renewal, LEASE_TIME, RESERVED_INOS};
use crate::perm::{self, W, X};
use crate::store::{Inode, Store, Txn, T};
use std::time::Duration;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::LayoutSpec;
use tessera_proto::msg::{AsyncCreate, BatchResult, DirLease, MdsReply};
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

/// How long after this start requests on directories must wait: until the leases the previous run may
/// have granted have certainly expired at their holders.
pub(super) fn lease_grace(store: &Store) -> FsResult<Duration> {
    let Some(v) = store.read(T::Meta, LEASE_ACTIVITY_KEY)? else { return Ok(Duration::ZERO) };
    let last = v.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(0);
    let until = last.saturating_add(LEASE_TIME.as_millis() as u64);
    Ok(Duration::from_millis(until.saturating_sub(epoch_ms())).min(LEASE_TIME))
}

impl Namespace {
    fn new_lease(&self, dir: Ino, token: u64, count: usize, attr: Attr) -> FsResult<DirLease> {
        let inos = (0..count).map(|_| self.store.new_ino()).collect::<FsResult<Vec<_>>>()?;
        self.leases.reserve(dir, &inos);
        Ok(DirLease { dir, token, valid_ms: LEASE_TIME.as_millis() as u32, inos, attr })
    }

    /// Grants `holder` the lease on the empty directory `dir` if `c` may create in it.
    pub(super) fn lease_dir(&self, c: &Caller, holder: Holder, dir: Ino) -> FsResult<DirLease> {
        // Under the mutation lock: no entry can appear between the check and the grant.
        let _g = self.lock();
        let mut tx = self.store.begin();
        let d = tx.dir(dir)?;
        perm::check(c, &d.attr, W | X)?;
        if tx.dir_has_entries(dir)? {
            return Err(err(ErrorCode::Busy, "only an empty directory is leased"));
        }
        let token = self.leases.grant(dir, holder).ok_or_else(|| err(ErrorCode::Busy, "another client holds it"))?;
        note_lease_activity(&mut tx);
        self.commit(tx)?;
        self.new_lease(dir, token, RESERVED_INOS, d.attr)
    }

    /// Applies a lease holder's batch of creates, then renews or ends its lease.
    pub(super) async fn create_batch(
        &self,
        holder: Holder,
        dir: Ino,
        token: u64,
        entries: Vec<AsyncCreate>,
        keep: bool,
    ) -> FsResult<MdsReply> {
        if self.leases.holds(dir, token, holder) {
            // Others keep waiting while this batch is applied, however long that takes.
            self.leases.extend(dir, token);
        } else {
            // Lost (expired, or the MDS restarted): whoever holds it now goes first.
            self.leases.wait_for(holder, Some(dir)).await;
        }
        let used = entries.len();
        let r = self.create_batch_sync(dir, entries);
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

    /// Creates (and opens, as asked) each entry of a batch in one transaction; an entry that cannot be
    /// made fails alone. An entry whose name already holds its inode number was made by an earlier send
    /// of the same batch.
    fn create_batch_sync(&self, dir: Ino, entries: Vec<AsyncCreate>) -> FsResult<(Vec<BatchResult>, Attr)> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut dir_attr = tx.dir(dir)?.attr;
        let base = tx.dir_layout(dir)?.unwrap_or_default();
        note_lease_activity(&mut tx);
        let mut made = Vec::with_capacity(entries.len());
        let mut used = Vec::new();
        for e in entries {
            let layout = match tx.dentry(dir, &e.name)? {
                Some(d) if d.ino == e.ino => Ok(tx.inode(e.ino)?.layout),
                Some(_) => Err(FsError::exists(e.name.clone())),
                None => match validate_name(&e.name) {
                    Err(x) => Err(x),
                    // Set-id bits are never created without the MDS deciding (the holder sends none).
                    Ok(()) if e.perm & !0o1777 != 0 => Err(FsError::invalid("mode bits beyond 01777")),
                    Ok(()) if used.contains(&e.ino) => Err(FsError::invalid("inode number used twice")),
                    Ok(()) if !self.leases.is_reserved(dir, e.ino) && !self.reserved_before_restart(&tx, e.ino)? => {
                        Err(FsError::invalid(format!("inode {} was not reserved for this directory", e.ino)))
                    }
                    Ok(()) => {
                        let attr = Attr::new(e.ino, FileKind::File, e.perm, e.uid, e.gid, e.time);
                        let layout = self.new_layout(LayoutSpec::default(), base)?;
                        tx.add_inode(&Inode { attr, layout: Some(layout.clone()), target: None, parent: dir })?;
                        dir_attr = self.add_entry(&mut tx, dir, &e.name, e.ino, FileKind::File)?;
                        used.push(e.ino);
                        Ok(Some(layout))
                    }
                },
            };
            made.push((e.ino, e.open, layout));
        }
        self.commit(tx)?;
        // Only now: a batch that failed as a whole may be sent again with the same numbers.
        self.leases.consume(dir, &used);
        let results = made
            .into_iter()
            .map(|(ino, open, layout)| {
                let result = layout.and_then(|l| match (open, l) {
                    (Some(_), Some(l)) => Ok(Some((self.register_open(ino), l))),
                    (Some(_), None) => Err(FsError::protocol(format!("inode {ino} has no layout"))),
                    (None, _) => Ok(None),
                });
                BatchResult { ino, result }
            })
            .collect();
        Ok((results, dir_attr))
    }
}
