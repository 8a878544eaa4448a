//! Mirrored files at the MDS (issue 36): the replica states a primary reports ([`Namespace::mirror_mark_stale`]),
//! the fences the data servers fetch ([`Namespace::mirror_fences`]), resync ([`Namespace::resync_pass`]),
//! rebuild on other servers ([`Namespace::ds_remove`]) and the status (`tessera mirror status`).
//!
//! **Never a read from a stale replica.** A write acknowledged without replica R (R missed it) was
//! acknowledged only after R was marked stale durably *and* R's data server knew it or had stopped
//! serving mirrored calls. Data servers fetch their list of replicas not in sync (their fences) every
//! quarter of the fence lease `F` (`[mirror] fence_lease_ms`) and refuse mirrored calls when their
//! last answer is older than `F` (counted from when they asked). The MDS, having marked R stale, waits
//! until R's server has fetched the new list or `F` has passed since it last asked ([`FenceTable`]);
//! after an MDS restart it counts every server as having asked at its start. A client holding an
//! older layout that still names R in sync is refused by R's server and reads another replica.
//!
//! **Resync only what was missed.** A primary that marks a replica stale because it missed a call keeps a
//! log of every range of the object it changes from then on, and names it in the mark
//! (`ds/src/replicate.rs`, `MissedLog`). The MDS remembers, per stale replica, which server keeps which
//! log ([`ResyncCounters::logs`]) when the mark is what took that replica out of sync, and forgets it
//! when the replica is in sync again, is marked by anyone without a log while in sync (a truncate with
//! its server down, a takeover from a failed primary, which may hold writes nobody else has), or its
//! store is lost. A resync names the log when its primary is the server keeping it; otherwise, and
//! after an MDS restart (the record is in memory), the object is copied whole.
//!
//! The layout rules themselves (who may report whom, the primary always in sync) are
//! `tessera_proto::layout::mirror`'s, pure and tested there.

use super::Namespace;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{ReplicaState, StripeTarget};
use tessera_proto::msg::{MdsReply, MirrorStatus};
use tessera_proto::{DsId, FsError, FsResult, Ino, ObjectId};
use tokio::sync::Notify;
use tracing::{info, warn};

/// What each data server knows of the fences (see the module doc).
pub struct FenceTable {
    /// Bumped after every committed change of a replica state.
    version: AtomicU64,
    /// Per server: when it last asked, and the version it was answered.
    asked: Mutex<HashMap<DsId, (Instant, u64)>>,
    started: Instant,
    lease: Mutex<Duration>,
    changed: Notify,
}

impl Default for FenceTable {
    fn default() -> Self {
        // A version no data server can hold from an earlier run of the MDS.
        let v = tessera_proto::types::unix_us();
        FenceTable {
            version: AtomicU64::new(v),
            asked: Mutex::default(),
            started: Instant::now(),
            lease: Mutex::new(tessera_proto::config::MirrorOptions::default().fence_lease()),
            changed: Notify::new(),
        }
    }
}

impl FenceTable {
    pub fn set_lease(&self, lease: Duration) {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner()) = lease;
    }

    fn lease(&self) -> Duration {
        *self.lease.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// A replica state changed (after its commit): a new version.
    pub fn bump(&self) -> u64 {
        self.version.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Server `ds` asked now and is answered with version `v`.
    pub fn asked(&self, ds: DsId, v: u64) {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).insert(ds, (Instant::now(), v));
        self.changed.notify_waiters();
    }

    /// Whether `ds` asked for its fences within half the lease (it asks every quarter): it is up, and a
    /// resync to it may start. A server killed a moment ago may still look up to the statistics plane
    /// (reports are slower); a resync started to it would put its replica back among those every write
    /// goes to, and each writer would wait to find it missing again.
    pub fn fresh(&self, ds: DsId) -> bool {
        self.asked_within(ds, self.lease() / 2)
    }

    /// Whether `ds` asked for its fences within the last `d`.
    fn asked_within(&self, ds: DsId, d: Duration) -> bool {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).get(&ds).is_some_and(|(at, _)| at.elapsed() <= d)
    }

    /// Whether `ds` may still serve mirrored calls as far as the MDS knows (`MirrorLease`): it asked
    /// for its fences within the lease (a server that did not refuses them itself), or the MDS started
    /// too recently to tell.
    pub fn holds_lease(&self, ds: DsId) -> bool {
        let lease = self.lease();
        self.asked_within(ds, lease) || self.started.elapsed() <= lease
    }

    /// When `ds` knows version `v`, or will refuse mirrored calls: `None` if already, else how long
    /// to wait at most.
    fn remaining(&self, ds: DsId, v: u64, now: Instant) -> Option<Duration> {
        let (at, known) =
            self.asked.lock().unwrap_or_else(|p| p.into_inner()).get(&ds).copied().unwrap_or((self.started, 0));
        let at = at.max(self.started);
        if known >= v {
            return None;
        }
        let until = at + self.lease();
        (until > now).then(|| until - now)
    }

    /// Waits until `ds` knows version `v` or its fence lease has run out.
    pub async fn wait_known(&self, ds: DsId, v: u64) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.remaining(ds, v, Instant::now()) {
                None => return,
                Some(d) => {
                    let _ = tokio::time::timeout(d, changed).await;
                }
            }
        }
    }
}

/// Resync progress since the MDS started (`tessera mirror status`).
#[derive(Default)]
pub struct ResyncCounters {
    pub done: AtomicU64,
    pub bytes: AtomicU64,
    /// (when, bytes) of each resync finished recently, for the rate.
    samples: Mutex<Vec<(Instant, u64)>>,
    /// Replicas being copied now: (file, replica object).
    pub running: Mutex<HashSet<(Ino, ObjectId)>>,
    /// Per stale replica: the server keeping a log of what it missed, and the log's id (module doc).
    pub logs: Mutex<HashMap<StripeTarget, (StripeTarget, u64)>>,
}

impl ResyncCounters {
    fn record(&self, bytes: u64) {
        self.done.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let mut s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        s.push((now, bytes));
        s.retain(|&(t, _)| now.duration_since(t) < RATE_WINDOW);
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, HashMap<StripeTarget, (StripeTarget, u64)>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The log to name in a resync of `replica` by `primary` (0: copy whole).
    pub fn log_for(&self, replica: StripeTarget, primary: StripeTarget) -> u64 {
        self.logs().get(&replica).filter(|(keeper, _)| *keeper == primary).map_or(0, |(_, id)| *id)
    }

    /// `replica` is in sync again, or lost what it held: no log of it counts any more.
    pub fn forget(&self, replica: StripeTarget) {
        self.logs().remove(&replica);
    }

    /// Bytes per second resynced over the last [`RATE_WINDOW`].
    fn rate(&self) -> u64 {
        let s = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let bytes: u64 = s.iter().filter(|&&(t, _)| now.duration_since(t) < RATE_WINDOW).map(|&(_, b)| b).sum();
        bytes / RATE_WINDOW.as_secs()
    }
}

/// What the resync rate is averaged over.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// One replica to resync: the file, the stripe, its primary and the replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResyncJob {
    pub ino: Ino,
    pub stripe: usize,
    pub primary: StripeTarget,
    pub replica: StripeTarget,
}

impl Namespace {
    /// `MirrorMarkStale` (see [`tessera_proto::msg::MdsRequest::MirrorMarkStale`]).
    /// `logs`: as the request's (empty, or one per replica of `missed`).
    pub(crate) async fn mirror_mark_stale(
        &self,
        from: StripeTarget,
        missed: Vec<StripeTarget>,
        logs: Vec<u64>,
    ) -> FsResult<MdsReply> {
        if !logs.is_empty() && logs.len() != missed.len() {
            return Err(FsError::invalid(format!("{} logs for {} missed replicas", logs.len(), missed.len())));
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let ino = tx.mirrored_file_of(from.object)?.ok_or_else(|| {
                FsError::new(ErrorCode::NotFound, format!("object {} is not a mirrored file's", from.object))
            })?;
            let mut i = tx.inode(ino)?;
            let l = i.layout.as_mut().ok_or_else(|| FsError::invalid(format!("inode {ino} has no layout")))?;
            // Which of them this mark takes out of sync, and whether each was its stripe's primary.
            let was: Vec<(bool, bool)> = missed
                .iter()
                .map(|m| {
                    let stripe = l.stripe_of(*m);
                    let in_sync = stripe.and_then(|k| l.replica_state(k, *m)) == Some(ReplicaState::InSync);
                    (in_sync, stripe.and_then(|k| l.target(k)) == Some(*m))
                })
                .collect();
            let changed = l.mark_stale(from, &missed)?;
            // The logs of what they miss from now on: only a replica that was in sync, and not a
            // primary (which may hold writes that reached no other replica).
            let mut records = self.resync.logs();
            for (k, m) in missed.iter().enumerate() {
                let (in_sync, primary) = was[k];
                match logs.get(k).copied().filter(|&id| id != 0 && in_sync && !primary) {
                    Some(id) => {
                        records.insert(*m, (from, id));
                    }
                    None if in_sync => {
                        records.remove(m);
                    }
                    None => {}
                }
            }
            drop(records);
            let gen = l.mirror_gen;
            if changed {
                tx.put_inode(&i)?;
                self.commit(tx)?;
                info!(ino, gen, from = ?from, missed = ?missed, "replicas missed a write: marked stale");
            }
            Ok((gen, changed))
        };
        let (gen, changed) = self.durable(r).await?;
        if changed {
            let v = self.fences.bump();
            for m in &missed {
                self.fences.wait_known(m.ds, v).await;
            }
        }
        Ok(MdsReply::MirrorMarked { gen })
    }

    /// `MirrorFences`: data server `ds`'s replicas not in sync, unless it holds the current version.
    pub(crate) fn mirror_fences(&self, ds: DsId, known: u64) -> FsResult<MdsReply> {
        let version = self.fences.version();
        if known == version {
            self.fences.asked(ds, version);
            return Ok(MdsReply::Fences { version, objects: None });
        }
        let rd = self.store.begin();
        let mut objects = Vec::new();
        for ino in self.store.degraded_files()? {
            if let Some(l) = rd.get_inode(ino)?.and_then(|i| i.layout) {
                objects.extend(l.degraded().into_iter().filter(|(_, t, _)| t.ds == ds).map(|(_, t, _)| t.object));
            }
        }
        self.fences.asked(ds, version);
        Ok(MdsReply::Fences { version, objects: Some(objects) })
    }

    /// `MirrorFences` with the server's store identity: a store not seen before under a known server
    /// was lost (wiped or replaced), so every replica it held is stale first ([`Namespace::lost_store`]).
    pub(crate) async fn mirror_fences_of(&self, ds: DsId, known: u64, store: u64) -> FsResult<MdsReply> {
        if !self.stats.is_configured(ds) {
            return Err(FsError::invalid(format!("data server {ds} is not in the configuration")));
        }
        let prev = self.store.begin().server_store(ds)?;
        if prev == Some(store) {
            return self.mirror_fences(ds, known);
        }
        let r = {
            let _g = self.lock();
            let lost = match prev {
                Some(old) => {
                    warn!(ds, old, new = store, "data server's object store is new: every replica it held is stale");
                    self.lost_store(ds)?
                }
                None => Vec::new(),
            };
            let mut tx = self.store.begin();
            tx.set_server_store(ds, store);
            for i in &lost {
                tx.put_inode(i)?;
            }
            self.commit(tx)?;
            Ok(())
        };
        self.durable(r).await?;
        self.fences.bump();
        self.mirror_fences(ds, 0)
    }

    /// Every mirrored file with a replica on `ds` not yet stale, with those replicas marked stale (each
    /// reported by an in-sync replica elsewhere; a stripe with none left is lost and logged). Under the
    /// mutation lock.
    fn lost_store(&self, ds: DsId) -> FsResult<Vec<crate::store::Inode>> {
        let rd = self.store.begin();
        let mut out = Vec::new();
        for ino in self.store.mirrored_files()? {
            let Some(mut i) = rd.get_inode(ino)? else { continue };
            let Some(l) = i.layout.as_mut() else { continue };
            let mut changed = false;
            for stripe in 0..l.stripe_count() {
                let reps = l.replicas(stripe);
                for r in reps.iter().filter(|r| r.target.ds == ds) {
                    // What the lost store held is gone: no log of what it missed is enough.
                    self.resync.forget(r.target);
                }
                for t in reps.iter().filter(|r| r.target.ds == ds && r.state != ReplicaState::Stale).map(|r| r.target) {
                    let from =
                        l.replicas(stripe).into_iter().find(|r| r.target.ds != ds && r.state == ReplicaState::InSync);
                    match from {
                        Some(from) => changed |= l.mark_stale(from.target, &[t])?,
                        None if l.target(stripe) == Some(t) => {
                            // The only in-sync copy is gone: the best copy left (resyncing before stale,
                            // elsewhere) becomes the primary; the writes it missed are lost.
                            let reps = l.replicas(stripe);
                            let best = reps
                                .iter()
                                .filter(|r| r.target.ds != ds)
                                .min_by_key(|r| r.state != ReplicaState::Resyncing)
                                .map(|r| r.target);
                            match best {
                                Some(keep) => {
                                    l.promote_after_loss(stripe, keep)?;
                                    self.resync.forget(keep);
                                    changed = true;
                                    tracing::error!(ino, stripe, ds, kept = ?keep, "the only in-sync replica of this stripe was on the lost store: the best copy left is the primary now, and the writes it missed are lost");
                                }
                                None => tracing::error!(
                                    ino,
                                    stripe,
                                    ds,
                                    "every replica of this stripe was on the lost store"
                                ),
                            }
                        }
                        None => {}
                    }
                }
            }
            if changed {
                out.push(i);
            }
        }
        Ok(out)
    }

    /// Replicas to resync now: not in sync, not being copied, both servers up (`up`).
    pub(crate) fn resync_jobs(&self, up: &dyn Fn(DsId) -> bool, max: usize) -> FsResult<Vec<ResyncJob>> {
        let running = self.resync.running.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let rd = self.store.begin();
        let mut out = Vec::new();
        for ino in self.store.degraded_files()? {
            let Some(l) = rd.get_inode(ino)?.and_then(|i| i.layout) else { continue };
            for (stripe, replica, _) in l.degraded() {
                let Some(primary) = l.target(stripe) else { continue };
                if running.contains(&(ino, replica.object)) || !up(replica.ds) || !up(primary.ds) {
                    continue;
                }
                out.push(ResyncJob { ino, stripe, primary, replica });
                if out.len() >= max {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// Resync step 1: the replica is resyncing (written with the others from now on). Returns the
    /// layout generation and the replicas the primary writes, or `None` if the job is out of date.
    async fn resync_start(&self, job: ResyncJob) -> FsResult<Option<(u64, Vec<StripeTarget>)>> {
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(job.ino)?;
            let Some(l) = i.layout.as_mut() else { return Ok(None) };
            if l.target(job.stripe) != Some(job.primary) {
                return Ok(None);
            }
            let changed = match l.resync_started(job.stripe, job.replica) {
                Ok(c) => c,
                Err(_) => return Ok(None),
            };
            let gen = l.mirror_gen;
            let written: Vec<StripeTarget> =
                l.mirrors_of(job.stripe).iter().filter(|r| r.state.written()).map(|r| r.target).collect();
            if changed {
                tx.put_inode(&i)?;
                self.commit(tx)?;
            }
            Ok(Some((gen, written)))
        };
        let r = self.durable(r).await?;
        self.fences.bump();
        Ok(r)
    }

    /// Resync step 3: the copy finished: in sync, unless the replica missed a write meanwhile.
    async fn resync_finish(&self, job: ResyncJob) -> FsResult<bool> {
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(job.ino)?;
            let Some(l) = i.layout.as_mut() else { return Ok(false) };
            if l.resync_done(job.stripe, job.replica).is_err() {
                return Ok(false);
            }
            self.resync.forget(job.replica);
            tx.put_inode(&i)?;
            self.commit(tx)?;
            Ok(true)
        };
        let done = self.durable(r).await?;
        self.fences.bump();
        Ok(done)
    }

    /// Resyncs one replica: marks it resyncing, has the primary copy its object to it, marks it in sync.
    pub(crate) async fn resync_one(&self, job: ResyncJob) -> FsResult<Option<u64>> {
        let key = (job.ino, job.replica.object);
        if !self.resync.running.lock().unwrap_or_else(|p| p.into_inner()).insert(key) {
            return Ok(None);
        }
        let r = async {
            let Some((gen, replicas)) = self.resync_start(job).await? else { return Ok(None) };
            let log = self.resync.log_for(job.replica, job.primary);
            let bytes = self.data.resync(job.primary.ds, job.primary.object, job.replica, gen, replicas, log).await?;
            Ok(self.resync_finish(job).await?.then_some(bytes))
        }
        .await;
        self.resync.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        if let Ok(Some(bytes)) = r {
            self.resync.record(bytes);
            info!(ino = job.ino, stripe = job.stripe, replica = ?job.replica, bytes, "replica resynced");
        }
        r
    }

    /// One pass of the resync driver: up to `parallel` replicas copied at once; returns how many
    /// finished.
    pub async fn resync_pass(&self, parallel: usize) -> usize {
        let stats = self.stats.clone();
        let up = |ds: DsId| self.fences.fresh(ds) && stats.snapshot().iter().any(|s| s.id == ds && !s.silent);
        let jobs = match self.resync_jobs(&up, parallel.max(1)) {
            Ok(j) => j,
            Err(e) => {
                warn!("listing replicas to resync: {e}");
                return 0;
            }
        };
        let results = futures::future::join_all(jobs.into_iter().map(|j| self.resync_one(j))).await;
        let mut n = 0;
        for r in results {
            match r {
                Ok(Some(_)) => n += 1,
                Ok(None) => {}
                Err(e) => warn!("resync: {e}"),
            }
        }
        n
    }

    /// `tessera mirror status`.
    pub(crate) fn mirror_status(&self) -> FsResult<MirrorStatus> {
        let rd = self.store.begin();
        let mut st = MirrorStatus::default();
        for ino in self.store.degraded_files()? {
            let Some(i) = rd.get_inode(ino)? else { continue };
            let Some(l) = &i.layout else { continue };
            let d = l.degraded();
            if d.is_empty() {
                continue;
            }
            st.degraded_files += 1;
            for (stripe, _, state) in d {
                st.degraded_objects += 1;
                match state {
                    ReplicaState::Stale => st.stale += 1,
                    ReplicaState::Resyncing => st.resyncing += 1,
                    ReplicaState::InSync => {}
                }
                st.bytes_to_resync += l.object_size(stripe, i.attr.size);
            }
        }
        st.resyncs_done = self.resync.done.load(Ordering::Relaxed);
        st.resynced_bytes = self.resync.bytes.load(Ordering::Relaxed);
        st.resync_rate = self.resync.rate();
        st.removed = self.store.removed_servers()?;
        Ok(st)
    }

    /// `tessera ds remove N [--rebuild]`: `ds` leaves placement for good; with `rebuild`, each mirrored
    /// replica on it is replaced by a new object on another server (distinct from the stripe's other
    /// replicas, the least full first), stale until the resync driver has copied it.
    pub(crate) async fn ds_remove(&self, ds: DsId, rebuild: bool) -> FsResult<MdsReply> {
        if !self.stats.is_configured(ds) {
            return Err(FsError::invalid(format!("data server {ds} is not in the configuration")));
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            tx.set_removed(ds, true);
            let mut moved = 0u64;
            if rebuild {
                let removed: HashSet<DsId> = self.store.removed_servers()?.into_iter().chain([ds]).collect();
                // Free bytes per server, updated as replicas are given out (spread over the servers).
                let mut free: BTreeMap<DsId, i128> = self
                    .stats
                    .snapshot()
                    .iter()
                    .filter(|s| !removed.contains(&s.id) && !s.silent)
                    .map(|s| (s.id, s.report.as_ref().map_or(0, |r| i128::from(r.free))))
                    .collect();
                for ino in self.store.mirrored_files()? {
                    let Some(mut i) = tx.get_inode(ino)? else { continue };
                    let size = i.attr.size;
                    let Some(l) = i.layout.as_mut() else { continue };
                    let mut changed = false;
                    for stripe in 0..l.stripe_count() {
                        let reps = l.replicas(stripe);
                        let Some(old) = reps.iter().find(|r| r.target.ds == ds).map(|r| r.target) else { continue };
                        let taken: HashSet<DsId> = reps.iter().map(|r| r.target.ds).collect();
                        let Some((&to, _)) = free.iter().filter(|(d, _)| !taken.contains(d)).max_by_key(|(_, f)| **f)
                        else {
                            warn!(ino, stripe, "no data server left to rebuild a replica on");
                            continue;
                        };
                        let bytes = l.object_size(stripe, size);
                        if l.target(stripe) == Some(old) {
                            // The primary is leaving: an in-sync replica takes its place first.
                            let Some(other) = reps.iter().skip(1).find(|r| r.state == ReplicaState::InSync) else {
                                warn!(ino, stripe, "the primary is the only copy in sync: not rebuilt");
                                continue;
                            };
                            l.mark_stale(other.target, &[old])?;
                        }
                        let new = StripeTarget { ds: to, object: tessera_proto::object_in(0, self.store.new_id()?) };
                        l.replace_replica(stripe, old, new)?;
                        tx.unindex_object(old.object);
                        tx.destroy_objects(ds, vec![old.object])?;
                        *free.entry(to).or_default() -= i128::from(bytes);
                        changed = true;
                        moved += 1;
                    }
                    if changed {
                        tx.put_inode(&i)?;
                    }
                }
            }
            self.commit(tx)?;
            Ok(moved)
        };
        let moved = self.durable(r).await?;
        self.fences.bump();
        self.stats.remove_server(ds);
        info!(ds, rebuild, replicas = moved, "data server removed");
        Ok(MdsReply::MirrorStatus(self.mirror_status()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::tests::open_ns;
    use tessera_proto::layout::{Layout, LayoutSpec};
    use tessera_proto::msg::MdsRequest;
    use tessera_proto::{Caller, FileKind, ROOT_INO};

    /// Live data servers: each asks for its fences every 5 ms (as they do every quarter of the lease) for
    /// as long as this lives, so the resync driver counts them as up.
    struct Asking(tokio::task::JoinHandle<()>);

    impl Drop for Asking {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    fn servers_asking(ns: &Namespace) -> Asking {
        let (fences, ids): (_, Vec<DsId>) = (ns.fences.clone(), ns.stats.snapshot().iter().map(|s| s.id).collect());
        Asking(tokio::spawn(async move {
            loop {
                for &ds in &ids {
                    fences.asked(ds, fences.version());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }))
    }

    async fn mirrored_file(ns: &Namespace, name: &str) -> (Ino, Layout) {
        let layout = Some(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: Some(2) });
        let req = MdsRequest::Create {
            parent: ROOT_INO,
            name: name.into(),
            kind: FileKind::File,
            perm: 0o644,
            umask: 0,
            rdev: 0,
            exclusive: true,
            layout,
        };
        match ns.handle(&Caller::root(), req).await.unwrap() {
            MdsReply::Entry { attr, layout: Some(l) } => (attr.ino, l),
            other => panic!("{other:?}"),
        }
    }

    fn layout_of(ns: &Namespace, ino: Ino) -> Layout {
        ns.store.begin().inode(ino).unwrap().layout.unwrap()
    }

    fn fenced(ns: &Namespace, ds: DsId) -> Vec<ObjectId> {
        match ns.mirror_fences(ds, 0).unwrap() {
            MdsReply::Fences { objects: Some(o), .. } => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_server_is_up_for_resync_only_while_it_asks_for_its_fences() {
        let f = FenceTable::default();
        f.set_lease(Duration::from_millis(100));
        assert!(!f.fresh(1), "never asked since the MDS started");
        assert!(f.holds_lease(1), "the MDS started too recently to tell");
        f.asked(1, f.version());
        assert!(f.fresh(1));
        assert!(!f.fresh(2));
        std::thread::sleep(Duration::from_millis(60));
        assert!(!f.fresh(1), "silent for more than half the lease");
        assert!(f.holds_lease(1), "but not for the whole lease");
        std::thread::sleep(Duration::from_millis(50));
        assert!(!f.holds_lease(1), "silent for the lease, and the MDS is up for longer than that");
        f.asked(1, f.version());
        assert!(f.fresh(1));
    }

    /// A truncate while a replica's server is down: the others are cut and it is marked stale (it
    /// missed the cut); with every replica of a stripe down the truncate fails.
    #[tokio::test]
    async fn a_truncate_goes_on_without_a_replica_whose_server_is_down() {
        let dir = tempfile::tempdir().unwrap();
        let (ns, data) = open_ns(dir.path());
        ns.fences.set_lease(Duration::from_millis(50));
        let (ino, l) = mirrored_file(&ns, "f").await;
        let (p, r) = (l.target(0).unwrap(), l.mirrors_of(0)[0].target);
        data.down.lock().unwrap().push(r.ds);
        let set = |size| MdsRequest::SetAttr {
            ino,
            set: tessera_proto::msg::SetAttrs { size: Some(size), ..Default::default() },
        };
        match ns.handle(&Caller::root(), set(100_000)).await.unwrap() {
            MdsReply::Attr(a) => assert_eq!(a.size, 100_000),
            other => panic!("{other:?}"),
        }
        let now = layout_of(&ns, ino);
        assert_eq!(now.replica_state(0, r), Some(ReplicaState::Stale), "the replica that missed the cut");
        assert_eq!(now.replica_state(0, p), Some(ReplicaState::InSync));
        assert_eq!(data.objects.lock().unwrap().get(&(p.ds, p.object)), Some(&l.object_size(0, 100_000)));
        // Its primary's server down too: nothing in sync to cut.
        data.down.lock().unwrap().push(p.ds);
        let e = ns.handle(&Caller::root(), set(10)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable, "{e}");
    }

    #[tokio::test]
    async fn a_missed_replica_is_fenced_until_resynced_and_a_removed_server_is_rebuilt_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let (ns, data) = open_ns(dir.path());
        ns.fences.set_lease(Duration::from_millis(100));
        let (ino, l) = mirrored_file(&ns, "f").await;
        let (p, r) = (l.target(0).unwrap(), l.mirrors_of(0)[0].target);
        assert!(fenced(&ns, r.ds).is_empty());
        data.objects.lock().unwrap().insert((p.ds, p.object), 4096);

        // The primary reports r missing: stale, durable, fenced at r's server.
        let reply = ns.mirror_mark_stale(p, vec![r], Vec::new()).await.unwrap();
        assert_eq!(reply, MdsReply::MirrorMarked { gen: 1 });
        assert_eq!(layout_of(&ns, ino).replica_state(0, r), Some(ReplicaState::Stale));
        assert_eq!(fenced(&ns, r.ds), vec![r.object]);
        let st = ns.mirror_status().unwrap();
        assert_eq!((st.degraded_files, st.degraded_objects, st.stale), (1, 1, 1));
        // Only the file's own replicas may report, only in-sync ones.
        assert_eq!(
            ns.mirror_mark_stale(StripeTarget { ds: 0, object: 999_999 }, vec![], vec![]).await.unwrap_err().code,
            ErrorCode::NotFound
        );
        assert_eq!(ns.mirror_mark_stale(r, vec![p], Vec::new()).await.unwrap_err().code, ErrorCode::Stale);

        // Servers that do not ask for their fences are not resynced to (down, or a moment from it).
        assert_eq!(ns.resync_pass(4).await, 0);
        // The resync driver copies it back: in sync, no longer fenced.
        let _up = servers_asking(&ns);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(ns.resync_pass(4).await, 1);
        assert_eq!(data.objects.lock().unwrap().get(&(r.ds, r.object)), Some(&4096));
        assert!(layout_of(&ns, ino).degraded().is_empty());
        assert!(fenced(&ns, r.ds).is_empty());
        let st = ns.mirror_status().unwrap();
        assert_eq!((st.degraded_objects, st.resyncs_done, st.resynced_bytes), (0, 1, 4096));

        // The primary's server is removed with a rebuild: r is the primary now, and a new replica on
        // a third server is resynced from it.
        ns.ds_remove(p.ds, true).await.unwrap();
        let after = layout_of(&ns, ino);
        assert_eq!(after.target(0), Some(r));
        assert!(after.all_objects().all(|t| t.ds != p.ds), "{after:?}");
        assert!(ns.mirror_status().unwrap().stale >= 1);
        assert!(ns.resync_pass(4).await >= 1);
        assert!(layout_of(&ns, ino).degraded().is_empty());
        assert_eq!(ns.mirror_status().unwrap().removed, vec![p.ds]);
        // Gone from the index with the file.
        ns.handle(&Caller::root(), MdsRequest::Unlink { parent: ROOT_INO, name: "f".into() }).await.unwrap();
        assert_eq!(ns.store.begin().mirrored_file_of(r.object).unwrap(), None);
    }

    /// The log a primary names when its mark takes a replica out of sync goes to that replica's resync
    /// when the same server is its primary; a takeover's (the failed primary may hold writes nobody else
    /// has) is not kept, a later mark while stale keeps the first, and being in sync again or a lost
    /// store forgets it.
    #[tokio::test]
    async fn a_resync_names_the_log_of_the_primary_whose_mark_took_the_replica_out_of_sync() {
        let dir = tempfile::tempdir().unwrap();
        let (ns, data) = open_ns(dir.path());
        ns.fences.set_lease(Duration::from_millis(100));
        let (_, l) = mirrored_file(&ns, "f").await;
        let (p0, r0) = (l.target(0).unwrap(), l.mirrors_of(0)[0].target);
        let (p1, r1) = (l.target(1).unwrap(), l.mirrors_of(1)[0].target);
        assert!(ns.mirror_mark_stale(p0, vec![r0], vec![1, 2]).await.is_err(), "one log per replica or none");
        ns.mirror_mark_stale(p0, vec![r0], vec![7]).await.unwrap();
        ns.mirror_mark_stale(p0, vec![r0], vec![8]).await.unwrap();
        assert_eq!(ns.resync.log_for(r0, p0), 7, "the log since the replica went out of sync");
        assert_eq!(ns.resync.log_for(r0, r1), 0, "kept by another server");
        // A takeover: stripe 1's other replica marks its primary.
        ns.mirror_mark_stale(r1, vec![p1], vec![9]).await.unwrap();
        assert_eq!(ns.resync.log_for(p1, r1), 0);
        let _up = servers_asking(&ns);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(ns.resync_pass(4).await, 2);
        let mut named = data.resync_logs.lock().unwrap().clone();
        named.sort_by_key(|(t, _)| t.object);
        let mut want = vec![(r0, 7), (p1, 0)];
        want.sort_by_key(|(t, _)| t.object);
        assert_eq!(named, want);
        assert_eq!(ns.resync.log_for(r0, p0), 0, "in sync again: forgotten");
        // A lost store: what a log says it missed is not all it lacks.
        ns.mirror_fences_of(r0.ds, 0, 1).await.unwrap();
        ns.mirror_mark_stale(p0, vec![r0], vec![10]).await.unwrap();
        assert_eq!(ns.resync.log_for(r0, p0), 10);
        ns.mirror_fences_of(r0.ds, 0, 2).await.unwrap();
        assert_eq!(ns.resync.log_for(r0, p0), 0);
    }

    #[tokio::test]
    async fn fsck_finds_replicas_that_differ_by_size_or_checksum_and_repair_resyncs_them() {
        let dir = tempfile::tempdir().unwrap();
        let (ns, data) = open_ns(dir.path());
        ns.fences.set_lease(Duration::from_millis(50));
        let _up = servers_asking(&ns);
        let (ino, l) = mirrored_file(&ns, "f").await;
        let kinds = |r: &tessera_proto::msg::FsckReport| r.findings.iter().map(|f| f.kind.clone()).collect::<Vec<_>>();
        let (p, r) = (l.target(1).unwrap(), l.mirrors_of(1)[0].target);
        for k in 0..l.stripe_count() {
            for t in l.replicas(k) {
                data.objects.lock().unwrap().insert((t.target.ds, t.target.object), 1000);
            }
        }
        assert!(kinds(&ns.fsck(false).await.unwrap()).iter().all(|k| !k.starts_with("mirror")));
        // Same size, other bytes: only a checksum sees it.
        data.corrupt.lock().unwrap().push((r.ds, r.object));
        assert!(!kinds(&ns.fsck(false).await.unwrap()).contains(&"mirror-checksum".to_string()));
        let found = ns.fsck_with(false, true).await.unwrap();
        assert_eq!(
            kinds(&found).iter().filter(|k| k.starts_with("mirror")).collect::<Vec<_>>(),
            ["mirror-checksum"],
            "{found:?}"
        );
        // A short replica: its size.
        data.corrupt.lock().unwrap().clear();
        data.objects.lock().unwrap().insert((r.ds, r.object), 10);
        let found = ns.fsck(false).await.unwrap();
        assert!(kinds(&found).contains(&"mirror-size".to_string()), "{found:?}");
        // Repair marks it stale and resyncs it (the primary's bytes copied) before checking again.
        let fixed = ns.fsck_with(true, true).await.unwrap();
        assert!(fixed.repaired >= 1, "{fixed:?}");
        assert_eq!(layout_of(&ns, ino).replica_state(1, r), Some(ReplicaState::InSync));
        assert_eq!(ns.mirror_status().unwrap().resyncs_done, 1);
        let held = data.objects.lock().unwrap().clone();
        assert_eq!(held.get(&(r.ds, r.object)), held.get(&(p.ds, p.object)));
        let clean = ns.fsck_with(false, true).await.unwrap();
        assert!(kinds(&clean).iter().all(|k| !k.starts_with("mirror")), "{clean:?}");
    }

    #[tokio::test]
    async fn a_lost_store_is_fenced_whole_and_its_only_in_sync_copies_give_way_to_the_best_left() {
        let dir = tempfile::tempdir().unwrap();
        let (ns, _data) = open_ns(dir.path());
        ns.fences.set_lease(Duration::from_millis(50));
        let (ino, l) = mirrored_file(&ns, "f").await;
        let (p, r) = (l.target(0).unwrap(), l.mirrors_of(0)[0].target);
        let (p1, r1) = (l.target(1).unwrap(), l.mirrors_of(1)[0].target);
        // Stripe 0's replica missed a write: its primary holds the only in-sync copy.
        ns.mirror_mark_stale(p, vec![r], Vec::new()).await.unwrap();
        ns.mirror_fences_of(p.ds, 0, 7).await.unwrap();
        ns.mirror_fences_of(p1.ds, 0, 9).await.unwrap();
        // p's server comes back with a new store: every replica it held is stale, and stripe 0's best
        // copy left (r) is its primary now.
        let fenced = match ns.mirror_fences_of(p.ds, 0, 8).await.unwrap() {
            MdsReply::Fences { objects: Some(o), .. } => o,
            other => panic!("{other:?}"),
        };
        let now = layout_of(&ns, ino);
        assert_eq!(now.target(0), Some(r));
        assert_eq!(now.replica_state(0, p), Some(ReplicaState::Stale));
        let on_p: Vec<ObjectId> = now.all_objects().filter(|t| t.ds == p.ds).map(|t| t.object).collect();
        assert!(on_p.iter().all(|o| fenced.contains(o)), "{fenced:?} {on_p:?}");
        // A stripe with an in-sync copy elsewhere is simply marked.
        if p1.ds == p.ds {
            assert_eq!(now.target(1), Some(r1));
        }
        // The same store again: nothing more changes.
        let gen = now.mirror_gen;
        ns.mirror_fences_of(p.ds, 0, 8).await.unwrap();
        assert_eq!(layout_of(&ns, ino).mirror_gen, gen);
    }
}
