//! The data service: checks each request (role, tag, sizes) and serves it from the store, data
//! operations through the data path ([`crate::pipeline`]: scheduler, device, observers); serve
//! commands from the orchestrator go to the scheduler's [`ServeControl`](crate::scheduler::ServeControl).

use crate::counters::Counters;
use crate::device::{DeviceOp, OpKind};
use crate::fence::Fences;
pub use crate::pipeline::Setup;
use crate::pipeline::{DataPath, Target};
use crate::replicate::{self, Replicator};
use crate::report::Reporter;
use crate::store::Store;
use bytes::Bytes;
use std::sync::Arc;
use tessera_proto::frame::MAX_PAYLOAD;
use tessera_proto::msg::{
    carries_data, check_read_extents, split_runs, DsCall, DsReply, DsRequest, Extent, MAX_LIST_OBJECTS,
    MAX_REMOVE_OBJECTS, MAX_USAGE_OBJECTS,
};
use tessera_proto::rpc::{PeerInfo, Service};

use tessera_proto::{DsId, FsError, FsResult, IoTag, ObjectId, Role, PROTOCOL_VERSION};

/// Builds the reporter (stores, scheduler, counters) and the data path of the targets `stores` (by
/// index; at least one). Needs a runtime.
pub fn assemble(stores: Vec<Store>, s: &Setup) -> FsResult<(Reporter, DataPath)> {
    let path = DataPath::assemble(&stores, s)?;
    Ok((Reporter::new(s.ds, &path, s.job_counters), path))
}

pub struct DsService {
    ds: DsId,
    counters: Arc<Counters>,
    reporter: Reporter,
    path: DataPath,
    /// Make every write durable before acknowledging it.
    sync_writes: bool,
    /// How this server, as a mirrored stripe's primary, reaches the other replicas (`None`: it cannot,
    /// and refuses to be a primary).
    replicator: Option<Arc<Replicator>>,
    /// Its replicas not in sync, as the MDS last said (mirrored client calls about them are refused).
    fences: Arc<Fences>,
    /// A resync's copying rate, bytes/s (0: unthrottled).
    resync_rate: u64,
}

fn check_tag(tag: &IoTag) -> FsResult<()> {
    tag.origin.check().map_err(FsError::from)
}

/// Only the MDS and administrators change or enumerate objects outside the data path.
fn check_privileged(role: Role) -> FsResult<()> {
    match role {
        Role::Mds | Role::Admin => Ok(()),
        other => Err(FsError::perm(format!("role {other} may not manage objects on a data server"))),
    }
}

impl DsService {
    pub fn new(reporter: Reporter, path: DataPath, sync_writes: bool) -> DsService {
        DsService {
            ds: reporter.ds,
            counters: reporter.counters.clone(),
            reporter,
            path,
            sync_writes,
            replicator: None,
            fences: Arc::new(Fences::open()),
            resync_rate: 0,
        }
    }

    /// Mirrored client calls checked against `fences`; resyncs copy at `resync_rate` bytes/s at most.
    pub fn with_fences(self, fences: Arc<Fences>, resync_rate: u64) -> DsService {
        DsService { fences, resync_rate, ..self }
    }

    /// Mirrored calls this server holds as a primary right now.
    pub fn replicator_in_flight(&self) -> usize {
        self.replicator.as_ref().map_or(0, |r| r.ordering.in_flight())
    }

    /// The service passing mirrored stripes' writes on through `r` when it is their primary.
    pub fn with_replicator(self, r: Arc<Replicator>) -> DsService {
        DsService { replicator: Some(r), ..self }
    }

    pub fn data_path(&self) -> &DataPath {
        &self.path
    }

    /// The target holding `object`.
    fn target(&self, object: ObjectId) -> FsResult<&Target> {
        let t = tessera_proto::target_of(object);
        self.path.targets.get(usize::from(t)).ok_or_else(|| {
            FsError::invalid(format!(
                "object {object:#x} is in target {t}, but data server {} serves {} target(s)",
                self.ds,
                self.path.targets.len()
            ))
        })
    }

    /// The store holding `object`.
    fn store(&self, object: ObjectId) -> FsResult<Store> {
        self.target(object).map(|t| t.store.clone())
    }

    pub async fn read(&self, tag: &IoTag, object: ObjectId, offset: u64, len: u32) -> FsResult<Bytes> {
        check_tag(tag)?;
        if len as usize > MAX_PAYLOAD {
            return Err(FsError::invalid(format!("read of {len} bytes exceeds the limit of {MAX_PAYLOAD}")));
        }
        let target = self.target(object)?;
        let store = target.store.clone();
        let op = DeviceOp { kind: OpKind::Read, object, offset, len: len.into() };
        let work = async move { store.read(object, offset, len as usize).await };
        let data = self.path.serve(target, tag, op, &[], work).await?;
        self.counters.record_read(tag, object, offset, data.len() as u64);
        Ok(data)
    }

    /// A vectored read: one request of all its runs (each run measured and traced like a single read),
    /// one blocking read of them all into one buffer; returns what each got and their bytes one after
    /// the other.
    pub async fn read_v(&self, tag: &IoTag, object: ObjectId, extents: &[Extent]) -> FsResult<(Vec<u32>, Bytes)> {
        check_tag(tag)?;
        let total = check_read_extents(extents, MAX_PAYLOAD)?;
        let target = self.target(object)?;
        let store = target.store.clone();
        let runs: Vec<(u64, usize)> = extents.iter().map(|e| (e.offset, e.len as usize)).collect();
        let op = DeviceOp { kind: OpKind::Read, object, offset: extents[0].offset, len: total };
        let work = async move { store.read_v(object, runs).await };
        let (lens, data): (Vec<u32>, Bytes) = self.path.serve(target, tag, op, extents, work).await?;
        for (e, got) in extents.iter().zip(&lens) {
            self.counters.record_read(tag, object, e.offset, u64::from(*got));
        }
        Ok((lens, data))
    }

    pub async fn write(&self, tag: &IoTag, object: ObjectId, offset: u64, data: Bytes, sync: bool) -> FsResult<u32> {
        let len = self.write_run(tag, object, offset, data, sync).await?;
        self.counters.record_write(tag, object, offset, len.into());
        Ok(len)
    }

    /// A write, not counted yet (a vectored write counts its runs in their order once all are done).
    async fn write_run(&self, tag: &IoTag, object: ObjectId, offset: u64, data: Bytes, sync: bool) -> FsResult<u32> {
        check_tag(tag)?;
        let len = u32::try_from(data.len()).map_err(|_| FsError::invalid("write payload too large"))?;
        let target = self.target(object)?;
        let store = target.store.clone();
        let sync = sync || self.sync_writes;
        let op = DeviceOp { kind: OpKind::Write, object, offset, len: len.into() };
        self.path.serve(target, tag, op, &[], async move { store.write(object, offset, data, sync).await }).await?;
        Ok(len)
    }

    /// Writes each run of a vectored write as a request of its own (queued, modelled, measured and
    /// traced like a single write), all at once; returns the bytes written. Every run is carried out
    /// even when another fails (the first failure, in run order, is the answer).
    pub async fn write_v(
        &self,
        tag: &IoTag,
        object: ObjectId,
        extents: &[Extent],
        data: Bytes,
        sync: bool,
    ) -> FsResult<u32> {
        check_tag(tag)?;
        let len = u32::try_from(data.len()).map_err(|_| FsError::invalid("write payload too large"))?;
        let runs = split_runs(extents, &data)?.map(|(offset, run)| self.write_run(tag, object, offset, run, sync));
        futures::future::join_all(runs).await.into_iter().collect::<FsResult<Vec<u32>>>()?;
        for e in extents {
            self.counters.record_write(tag, object, e.offset, e.len.into());
        }
        Ok(len)
    }

    /// Serves one call from a peer of `role`: it must name this server (a misrouted call is refused,
    /// never served from the wrong server's objects).
    pub async fn call(&self, role: Role, call: DsCall, payload: Bytes) -> (FsResult<DsReply>, Bytes) {
        if call.ds != self.ds {
            let e = format!("a request for data server {} reached data server {}", call.ds, self.ds);
            return (Err(FsError::invalid(e)), Bytes::new());
        }
        if let Some(via) = call.via {
            if role != Role::Ion {
                let e = format!("only forwarding nodes pass requests on (peer is {role})");
                return (Err(FsError::perm(e)), Bytes::new());
            }
            if via.requests == 0 {
                return (Err(FsError::invalid("a forwarded request carries no client request")), Bytes::new());
            }
        }
        match &call.mirror {
            Some(m) => {
                if let Err(e) = replicate::check_call(self.ds, role, &call.req, m) {
                    return (Err(e), Bytes::new());
                }
            }
            // A primary pings a slow replica's server to tell slow from down.
            None if role == Role::Ds && call.req != DsRequest::Ping => {
                let e = "a data server sends only calls a mirrored stripe's primary passes on, and pings";
                return (Err(FsError::perm(e)), Bytes::new());
            }
            None => {}
        }
        let forwarded = call.via.map(|v| v.requests);
        match &call.req {
            DsRequest::Read { len, .. } => self.counters.record_request(u64::from(*len), forwarded),
            DsRequest::ReadV { extents, .. } => {
                let total = extents.iter().map(|e| u64::from(e.len)).sum();
                self.counters.record_request(total, forwarded)
            }
            DsRequest::Write { .. } | DsRequest::WriteV { .. } => {
                self.counters.record_request(payload.len() as u64, forwarded)
            }
            _ => {}
        }
        match call.mirror {
            // A primary's resync cuts its replica to size (only with a mirrored call: checked above).
            Some(m) if m.from_primary && matches!(call.req, DsRequest::Truncate { .. }) => {
                self.request(Role::Mds, call.req, payload).await
            }
            Some(m) if m.from_primary => {
                if let (Some(rep), Some(o)) = (&self.replicator, call.req.object()) {
                    if rep.deposes(o, m.gen) {
                        let e =
                            format!("object {o}: a call from a primary of layout generation {}, deposed since", m.gen);
                        return (Err(FsError::new(tessera_proto::error::ErrorCode::Stale, e)), Bytes::new());
                    }
                }
                self.request(role, call.req, payload).await
            }
            Some(m) => {
                // A client's call: refused for a replica here that is not in sync.
                let object = call.req.object();
                if let Some(o) = object {
                    if let Err(e) = self.fences.check(o) {
                        return (Err(e), Bytes::new());
                    }
                }
                // Even a client whose layout names no other replica to write goes through the primary's
                // replication when it is a write: the primary may know of a replica being resynced since
                // (`known`), which every write must reach, and the resync's copy is ordered against it.
                // Applied here directly, such writes skipped a resyncing replica, which then came out of
                // its resync in sync without them (the chaos soak's losses of results/mirror).
                let replicated = replicate::is_replicated(&call.req);
                if m.failed.is_empty() && (!replicated || (m.replicas.is_empty() && self.replicator.is_none())) {
                    return self.request(role, call.req, payload).await;
                }
                let Some(rep) = &self.replicator else {
                    let e = format!("data server {} cannot reach other replicas", self.ds);
                    return (Err(FsError::unavailable(e)), Bytes::new());
                };
                if !m.failed.is_empty() {
                    let Some(o) = object else { return (Err(FsError::invalid("a takeover of nothing")), Bytes::new()) };
                    if let Err(e) = rep.take_over(o, &m).await {
                        return (Err(e), Bytes::new());
                    }
                }
                // Checked again once the call holds its ranges: marked stale meanwhile (a client took the
                // stripe over from this server while it was slow), it must not change the replica now,
                // after the new primary's writes or its resync.
                let (req, data) = (call.req.clone(), payload.clone());
                let local = async move {
                    if let Some(Err(e)) = object.map(|o| self.fences.check(o)) {
                        return (Err(e), Bytes::new());
                    }
                    self.request(role, req, data).await
                };
                rep.fan_out(call.req, m, payload, local).await
            }
            None => self.request(role, call.req, payload).await,
        }
    }

    /// Serves one request from a peer of `role`.
    pub async fn request(&self, role: Role, req: DsRequest, payload: Bytes) -> (FsResult<DsReply>, Bytes) {
        if !carries_data(&req) && !payload.is_empty() {
            return (Err(FsError::protocol("unexpected payload on a request without data")), Bytes::new());
        }
        // Every change of an object whose replica missed calls here is logged, before it is made.
        if let (Some(rep), Some(object)) = (&self.replicator, req.object()) {
            let ranges = replicate::changed_ranges(&req, payload.len());
            if !ranges.is_empty() {
                rep.missed.record(object, &ranges);
            }
        }
        let r = match req {
            DsRequest::Ping => Ok(DsReply::Pong { version: PROTOCOL_VERSION, ds: self.ds }),
            DsRequest::Read { tag, object, offset, len } => match self.read(&tag, object, offset, len).await {
                Ok(data) => return (Ok(DsReply::Data { len: data.len() as u32 }), data),
                Err(e) => Err(e),
            },
            DsRequest::ReadV { tag, object, extents } => match self.read_v(&tag, object, &extents).await {
                Ok((lens, data)) => return (Ok(DsReply::DataV { lens }), data),
                Err(e) => Err(e),
            },
            DsRequest::Write { tag, object, offset, sync } => {
                self.write(&tag, object, offset, payload, sync).await.map(|len| DsReply::Written { len })
            }
            DsRequest::WriteV { tag, object, extents, sync } => {
                self.write_v(&tag, object, &extents, payload, sync).await.map(|len| DsReply::Written { len })
            }
            DsRequest::Fsync { tag, object } => self.fsync(&tag, object).await.map(|()| DsReply::Ok),
            DsRequest::Fallocate { tag, object, offset, len, punch } => match check_tag(&tag) {
                Ok(()) => match self.store(object) {
                    Ok(store) => store.fallocate(object, offset, len, punch).await.map(|()| DsReply::Ok),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            DsRequest::Truncate { object, size } => match check_privileged(role) {
                Ok(()) => match self.store(object) {
                    Ok(store) => store.truncate(object, size).await.map(|()| DsReply::Ok),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            DsRequest::Remove { objects } => match check_privileged(role) {
                Ok(()) if objects.len() > MAX_REMOVE_OBJECTS => Err(FsError::invalid(format!(
                    "remove of {} objects (at most {MAX_REMOVE_OBJECTS} per request)",
                    objects.len()
                ))),
                Ok(()) => self.remove(objects).await.map(|()| DsReply::Ok),
                Err(e) => Err(e),
            },
            DsRequest::Report => self.reporter.build().await.map(DsReply::Report),
            DsRequest::ListObjects { shard, after, max } => match check_privileged(role) {
                Ok(()) => {
                    let max = (max as usize).min(MAX_LIST_OBJECTS);
                    self.list_shard(shard, after, max).await.map(|(objects, more)| DsReply::Objects { objects, more })
                }
                Err(e) => Err(e),
            },
            DsRequest::JobTrace { job, set, after, max } => self.path.job_traces.request(&job, set, after, max),
            DsRequest::Checksum { object } => match check_privileged(role) {
                Ok(()) => self.checksum(object).await.map(|(size, crc32)| DsReply::Checksum { size, crc32 }),
                Err(e) => Err(e),
            },
            DsRequest::Usage { objects } => match check_privileged(role) {
                Ok(()) if objects.len() > MAX_USAGE_OBJECTS => Err(FsError::invalid(format!(
                    "usage of {} objects (at most {MAX_USAGE_OBJECTS} per request)",
                    objects.len()
                ))),
                Ok(()) => self.usage(objects).await.map(DsReply::Usage),
                Err(e) => Err(e),
            },
            DsRequest::Seek { object, offset, hole } => match self.store(object) {
                Ok(store) => store.seek(object, offset, hole).await.map(DsReply::Seek),
                Err(e) => Err(e),
            },
            DsRequest::Resync { object, to, gen, replicas, log } => match role {
                Role::Mds => {
                    let order = replicate::ResyncOrder { object, to, gen, replicas, log };
                    self.resync(order).await.map(|bytes| DsReply::Resynced { bytes })
                }
                other => Err(FsError::perm(format!("role {other} may not start a resync (mds only)"))),
            },
            DsRequest::Serve(cmd) => match role {
                Role::Mds => {
                    let (epoch, at_unix_us) = self.path.serve.apply(&cmd);
                    Ok(DsReply::Switched { epoch, at_unix_us })
                }
                other => Err(FsError::perm(format!("role {other} may not send serve commands (mds only)"))),
            },
        };
        (r, Bytes::new())
    }

    /// What each of `objects` takes on disk, in bytes, asked of the store each is on.
    async fn usage(&self, objects: Vec<ObjectId>) -> FsResult<Vec<u64>> {
        let mut out = vec![0; objects.len()];
        let mut by_store: Vec<(Store, Vec<usize>)> = Vec::new();
        for (i, &o) in objects.iter().enumerate() {
            let store = self.store(o)?;
            match by_store.iter_mut().find(|(s, _)| s.same(&store)) {
                Some((_, v)) => v.push(i),
                None => by_store.push((store, vec![i])),
            }
        }
        for (store, idx) in by_store {
            let got = store.usage(idx.iter().map(|&i| objects[i]).collect()).await?;
            for (i, bytes) in idx.into_iter().zip(got) {
                out[i] = bytes;
            }
        }
        Ok(out)
    }

    /// `object`'s size and the CRC-32 of its bytes, read whole (a missing object: 0 bytes).
    async fn checksum(&self, object: ObjectId) -> FsResult<(u64, u32)> {
        let store = self.store(object)?;
        let (exists, size) = store.stat(object).await?;
        let mut h = crc32fast::Hasher::new();
        let mut at = 0u64;
        while exists && at < size {
            let data = store.read(object, at, replicate::RESYNC_CHUNK as usize).await?;
            if data.is_empty() {
                break;
            }
            h.update(&data);
            at += data.len() as u64;
        }
        Ok((size, h.finalize()))
    }

    /// Copies this server's `object` (a mirrored stripe's primary) to replica `to` (see
    /// [`Replicator::resync`]).
    async fn resync(&self, order: replicate::ResyncOrder) -> FsResult<u64> {
        let object = order.object;
        let rep =
            self.replicator.as_ref().ok_or_else(|| FsError::unavailable("this data server cannot reach others"))?;
        self.fences.check(object)?;
        let store = self.store(object)?;
        let tag = replicate::resync_tag();
        let read = |offset, len| {
            let tag = tag.clone();
            async move {
                match self.read(&tag, object, offset, len).await {
                    Err(e) if e.code == tessera_proto::error::ErrorCode::NotFound => Ok(Bytes::new()),
                    r => r,
                }
            }
        };
        let size = || {
            let store = store.clone();
            async move { store.stat(object).await.map(|(_, size)| size) }
        };
        rep.resync(order, self.resync_rate, read, size).await
    }

    /// Removes objects from the targets holding them (all are checked before any is removed).
    async fn remove(&self, objects: Vec<ObjectId>) -> FsResult<()> {
        let mut by_target: Vec<Vec<ObjectId>> = vec![Vec::new(); self.path.targets.len()];
        for o in objects {
            self.target(o)?;
            by_target[usize::from(tessera_proto::target_of(o))].push(o);
        }
        if let Some(rep) = &self.replicator {
            by_target.iter().flatten().for_each(|o| rep.missed.forget(*o));
        }
        for (t, objects) in by_target.into_iter().enumerate().filter(|(_, o)| !o.is_empty()) {
            self.path.targets[t].store.remove(objects).await?;
        }
        Ok(())
    }

    /// Up to `max` objects of shard `shard` with ids above `after`, over all targets in id order (a
    /// target's ids all lie above the previous target's), and whether there are more.
    async fn list_shard(&self, shard: u8, after: ObjectId, max: usize) -> FsResult<(Vec<(ObjectId, u64)>, bool)> {
        let mut out = Vec::new();
        for t in usize::from(tessera_proto::target_of(after))..self.path.targets.len() {
            let (mut objects, more) = self.path.targets[t].store.list_shard(shard, after, max - out.len()).await?;
            out.append(&mut objects);
            if more || out.len() >= max {
                return Ok((out, true));
            }
        }
        Ok((out, false))
    }

    async fn fsync(&self, tag: &IoTag, object: ObjectId) -> FsResult<()> {
        check_tag(tag)?;
        let target = self.target(object)?;
        let store = target.store.clone();
        let op = DeviceOp { kind: OpKind::Fsync, object, offset: 0, len: 0 };
        self.path.serve(target, tag, op, &[], async move { store.fsync(object).await }).await
    }
}

impl Service for DsService {
    type Request = DsCall;
    type Reply = DsReply;

    fn accepts(&self, role: Role) -> bool {
        // Data servers: only for calls a mirrored stripe's primary passes on (checked per call).
        matches!(role, Role::Client | Role::Ion | Role::Mds | Role::Admin | Role::Ds)
    }

    async fn handle(&self, peer: Arc<PeerInfo>, call: DsCall, payload: Bytes) -> (FsResult<DsReply>, Bytes) {
        self.call(peer.role, call, payload).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::device::DeviceModel;
    use std::time::Duration;
    use std::time::Instant;
    use tessera_proto::error::ErrorCode;
    use tessera_proto::msg::{ServeCommand, ServeTarget};
    use tessera_proto::JOB_ID_MAX;

    pub(crate) fn service_with(setup: Setup) -> (tempfile::TempDir, DsService) {
        let d = tempfile::tempdir().unwrap();
        let (reporter, path) = assemble(vec![Store::open(d.path(), setup.ds).unwrap()], &setup).unwrap();
        (d, DsService::new(reporter, path, false))
    }

    /// A data server (id 2) on a temporary store.
    pub(crate) fn service() -> (tempfile::TempDir, DsService) {
        service_with(Setup::new(2))
    }

    pub(crate) fn tag(job: &str) -> IoTag {
        IoTag { origin: tessera_proto::Origin { job: job.into(), client: 1, pid: 42 }, ino: 5 }
    }

    #[tokio::test]
    async fn report_has_job_counters_after_io() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), 4).unwrap();
        let (reporter, path) = assemble(vec![store], &Setup::new(4)).unwrap();
        let svc = DsService::new(reporter.clone(), path, false);
        let tag = |job: &str| tessera_proto::IoTag {
            origin: tessera_proto::Origin { job: job.into(), client: 1, pid: 0 },
            ino: 2,
        };
        for i in 0..3u64 {
            svc.write(&tag("wjob"), 9, i * 100, Bytes::from(vec![7u8; 100]), false).await.unwrap();
        }
        let got = svc.read(&tag("rjob"), 9, 50, 1000).await.unwrap();
        assert_eq!(got.len(), 250);
        let r = reporter.build().await.unwrap();
        assert_eq!(r.ds, 4);
        assert_eq!(r.objects, 1);
        assert!(r.capacity > 0);
        assert_eq!(r.queue_depth, 0);
        let w = r.jobs.iter().find(|j| j.job == "wjob").unwrap();
        assert_eq!((w.write_ops, w.write_bytes, w.read_ops), (3, 300, 0));
        let rj = r.jobs.iter().find(|j| j.job == "rjob").unwrap();
        assert_eq!((rj.read_ops, rj.read_bytes, rj.write_ops), (1, 250, 0));
    }

    #[tokio::test]
    async fn job_counters_switched_off_count_no_job() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path(), 4).unwrap();
        let setup = Setup { job_counters: false, ..Setup::new(4) };
        let (reporter, path) = assemble(vec![store], &setup).unwrap();
        let svc = DsService::new(reporter.clone(), path, false);
        let tag = tessera_proto::IoTag { origin: tessera_proto::Origin { job: "j".into(), client: 1, pid: 0 }, ino: 2 };
        svc.write(&tag, 9, 0, Bytes::from(vec![7u8; 100]), false).await.unwrap();
        assert_eq!(svc.read(&tag, 9, 0, 100).await.unwrap().len(), 100);
        let r = reporter.build().await.unwrap();
        assert!(r.jobs.is_empty(), "{:?}", r.jobs);
        assert!(reporter.counters.take_changed().is_empty(), "no detail to send");
        assert_eq!(r.data_rx_bytes, 100, "the node's own totals still count");
    }

    #[tokio::test]
    async fn objects_go_to_the_target_their_id_names_and_unknown_targets_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let stores = (0..3)
            .map(|k| Store::open_target(&crate::store::target_dir(d.path(), k), 2, 8, Some(1 << 20)).unwrap())
            .collect();
        let (reporter, path) = assemble(stores, &Setup::new(2)).unwrap();
        let s = DsService::new(reporter, path, false);
        let (a, b) = (tessera_proto::object_in(0, 7), tessera_proto::object_in(2, 7));
        for (o, n) in [(a, 10usize), (b, 20)] {
            let w = DsRequest::Write { tag: tag("j"), object: o, offset: 0, sync: false };
            s.request(Role::Client, w, Bytes::from(vec![1u8; n])).await.0.unwrap();
        }
        assert!(d.path().join("target2").join("objects").join("07").join(format!("{b:016x}")).exists());
        assert!(d.path().join("objects").join("07").join(format!("{a:016x}")).exists());
        let r = s.reporter.build().await.unwrap();
        let used: Vec<u64> = r.targets.iter().map(|t| t.used).collect();
        assert_eq!(used, vec![10, 0, 20]);
        assert_eq!((r.capacity, r.used, r.objects), (3 << 20, 30, 2));
        // Listing walks the targets in id order; removal finds each object's target.
        let (objects, more) = s.list_shard(7, 0, 10).await.unwrap();
        assert_eq!((objects, more), (vec![(a, 10), (b, 20)], false));
        let (objects, _) = s.list_shard(7, a, 10).await.unwrap();
        assert_eq!(objects, vec![(b, 20)]);
        s.request(Role::Mds, DsRequest::Remove { objects: vec![a, b] }, Bytes::new()).await.0.unwrap();
        assert_eq!(s.reporter.build().await.unwrap().used, 0);
        // A target the server does not have: refused, nothing written.
        let w = DsRequest::Write { tag: tag("j"), object: tessera_proto::object_in(3, 1), offset: 0, sync: false };
        let e = s.request(Role::Client, w, Bytes::from_static(b"x")).await.0.unwrap_err();
        assert!(e.detail.contains("serves 3 target"), "{e}");
        // A full target: ENOSPC for that target only.
        let w = |o| DsRequest::Write { tag: tag("j"), object: o, offset: 0, sync: false };
        let big = Bytes::from(vec![0u8; (1 << 20) + 1]);
        assert_eq!(s.request(Role::Client, w(a), big).await.0.unwrap_err().code, ErrorCode::NoSpace);
        s.request(Role::Client, w(b), Bytes::from(vec![0u8; 1 << 20])).await.0.unwrap();
    }

    #[tokio::test]
    async fn list_objects_pages_through_a_shard_in_id_order_for_privileged_roles_only() {
        let (_d, s) = service();
        // Shard 0x07: ids whose low byte is 7; one object elsewhere.
        let ids: Vec<u64> = (0..5u64).map(|k| (k << 8) | 7).collect();
        for (k, &id) in ids.iter().enumerate().rev() {
            let w = DsRequest::Write { tag: tag("j"), object: id, offset: 0, sync: false };
            s.request(Role::Client, w, Bytes::from(vec![1u8; k + 1])).await.0.unwrap();
        }
        let w = DsRequest::Write { tag: tag("j"), object: 8, offset: 0, sync: false };
        s.request(Role::Client, w, Bytes::from_static(b"x")).await.0.unwrap();
        let list = |after, max| DsRequest::ListObjects { shard: 7, after, max };
        let page = |r: FsResult<DsReply>| match r.unwrap() {
            DsReply::Objects { objects, more } => (objects, more),
            o => panic!("{o:?}"),
        };
        let (first, more) = page(s.request(Role::Admin, list(0, 2), Bytes::new()).await.0);
        assert_eq!(first, vec![(ids[0], 1), (ids[1], 2)]);
        assert!(more);
        let (rest, more) = page(s.request(Role::Mds, list(ids[1], 100), Bytes::new()).await.0);
        assert_eq!(rest, vec![(ids[2], 3), (ids[3], 4), (ids[4], 5)]);
        assert!(!more);
        let (none, more) =
            page(s.request(Role::Mds, DsRequest::ListObjects { shard: 9, after: 0, max: 10 }, Bytes::new()).await.0);
        assert!(none.is_empty() && !more, "an empty shard");
        // An absurd page size is capped, not allocated.
        let (all, _) = page(s.request(Role::Admin, list(0, u32::MAX), Bytes::new()).await.0);
        assert_eq!(all.len(), 5);
        for role in [Role::Client, Role::Ion] {
            assert_eq!(s.request(role, list(0, 10), Bytes::new()).await.0.unwrap_err().code, ErrorCode::Perm);
        }
    }

    #[tokio::test]
    async fn roles_and_validation() {
        let (_d, s) = service();
        assert!(s.accepts(Role::Client) && s.accepts(Role::Mds) && s.accepts(Role::Ion) && s.accepts(Role::Admin));
        // Data servers connect (a primary passes mirrored writes on, and pings a slow replica), but only
        // such calls are served.
        assert!(s.accepts(Role::Ds));
        let ping = s.call(Role::Ds, DsCall::new(2, DsRequest::Ping), Bytes::new()).await.0;
        assert!(matches!(ping.unwrap(), DsReply::Pong { .. }));
        let read = DsRequest::Read { tag: tag("j"), object: 3, offset: 0, len: 1 };
        let r = s.call(Role::Ds, DsCall::new(2, read), Bytes::new()).await.0;
        assert_eq!(r.unwrap_err().code, ErrorCode::Perm);
        let w = DsRequest::Write { tag: tag("j"), object: 3, offset: 2, sync: true };
        let (r, _) = s.request(Role::Client, w, Bytes::from_static(b"xyz")).await;
        assert_eq!(r.unwrap(), DsReply::Written { len: 3 });
        let (r, p) =
            s.request(Role::Ion, DsRequest::Read { tag: tag("j"), object: 3, offset: 0, len: 10 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Data { len: 5 });
        assert_eq!(&p[..], b"\0\0xyz");
        for req in [DsRequest::Truncate { object: 3, size: 0 }, DsRequest::Remove { objects: vec![3] }] {
            let (r, _) = s.request(Role::Client, req, Bytes::new()).await;
            assert_eq!(r.unwrap_err().code, ErrorCode::Perm);
        }
        assert_eq!(s.store(3).unwrap().list().await.unwrap(), vec![(3, 5)]);
        let (r, _) = s.request(Role::Admin, DsRequest::Truncate { object: 3, size: 1 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Ok);
        assert_eq!(s.store(3).unwrap().stat(3).await.unwrap(), (true, 1));
        let (r, _) = s.request(Role::Mds, DsRequest::Remove { objects: vec![3, 4] }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Ok);
        let too_many = DsRequest::Remove { objects: (0..MAX_REMOVE_OBJECTS as u64 + 1).collect() };
        assert_eq!(s.request(Role::Mds, too_many, Bytes::new()).await.0.unwrap_err().code, ErrorCode::Invalid);
        let long =
            IoTag { origin: tessera_proto::Origin { job: "x".repeat(JOB_ID_MAX + 1), ..Default::default() }, ino: 0 };
        let (r, _) = s.request(Role::Client, DsRequest::Fsync { tag: long, object: 1 }, Bytes::new()).await;
        assert_eq!(r.unwrap_err().code, ErrorCode::Invalid);
        let big = DsRequest::Read { tag: tag("j"), object: 1, offset: 0, len: MAX_PAYLOAD as u32 + 1 };
        assert_eq!(s.request(Role::Client, big, Bytes::new()).await.0.unwrap_err().code, ErrorCode::Invalid);
        let (r, _) = s.request(Role::Client, DsRequest::Ping, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Pong { version: PROTOCOL_VERSION, ds: 2 });
        let (r, _) = s.request(Role::Client, DsRequest::Report, Bytes::new()).await;
        assert!(matches!(r.unwrap(), DsReply::Report(rep) if rep.ds == 2 && rep.jobs.len() == 1));
        // A call names its server: one for another is refused, whatever it asks.
        let (r, _) = s.call(Role::Client, DsCall::new(2, DsRequest::Ping), Bytes::new()).await;
        assert!(matches!(r.unwrap(), DsReply::Pong { ds: 2, .. }));
        let misrouted = DsCall::new(3, DsRequest::Read { tag: tag("j"), object: 3, offset: 0, len: 1 });
        let e = s.call(Role::Client, misrouted, Bytes::new()).await.0.unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid);
        assert!(e.detail.contains("data server 3 reached data server 2"), "{e}");
        // Forwarded calls come from forwarding nodes only, and are counted as such.
        let fwd =
            |req| DsCall { via: Some(tessera_proto::msg::Forwarded { ion: 0, requests: 3 }), ..DsCall::new(2, req) };
        let write = DsRequest::Write { tag: tag("j"), object: 9, offset: 0, sync: false };
        let e = s.call(Role::Client, fwd(write.clone()), Bytes::from_static(b"ab")).await.0.unwrap_err();
        assert_eq!(e.code, ErrorCode::Perm, "{e}");
        let (r, _) = s.call(Role::Ion, fwd(write), Bytes::from_static(b"ab")).await;
        assert_eq!(r.unwrap(), DsReply::Written { len: 2 });
        let read = DsRequest::Read { tag: tag("j"), object: 9, offset: 0, len: 5 };
        let (r, p) = s.call(Role::Ion, fwd(read), Bytes::new()).await;
        assert_eq!((r.unwrap(), &p[..]), (DsReply::Data { len: 2 }, &b"ab"[..]));
        let t = s.counters.traffic();
        assert_eq!((t.forwarded, t.forwarded_client_requests), (2, 6));
    }

    #[tokio::test]
    async fn vectored_writes_land_each_run_and_refuse_bad_runs() {
        let (_d, s) = service();
        let runs = vec![Extent { offset: 10, len: 3 }, Extent { offset: 0, len: 2 }, Extent { offset: 4, len: 1 }];
        let w = |extents| DsRequest::WriteV { tag: tag("j"), object: 7, extents, sync: false };
        let (r, _) = s.call(Role::Client, DsCall::new(2, w(runs.clone())), Bytes::from_static(b"xyzabQ")).await;
        assert_eq!(r.unwrap(), DsReply::Written { len: 6 });
        let read = DsRequest::Read { tag: tag("j"), object: 7, offset: 0, len: 20 };
        let (r, p) = s.request(Role::Client, read.clone(), Bytes::new()).await;
        assert_eq!((r.unwrap(), &p[..]), (DsReply::Data { len: 13 }, &b"ab\0\0Q\0\0\0\0\0xyz"[..]));
        assert_eq!(s.counters.traffic().sizes.total(), 1, "one request for the three runs");
        // Runs that do not match the payload, or too many of them: refused, nothing written.
        for (extents, payload) in [
            (runs.clone(), &b"xyzab"[..]),
            (vec![Extent { offset: 100, len: 0 }], &b""[..]),
            (vec![Extent { offset: 100, len: 1 }; tessera_proto::msg::MAX_EXTENTS + 1], &[0u8; 1025][..]),
        ] {
            let (r, _) = s.request(Role::Client, w(extents), Bytes::copy_from_slice(payload)).await;
            assert!(r.is_err());
        }
        let (_, p) = s.request(Role::Client, read, Bytes::new()).await;
        assert_eq!(p.len(), 13, "no refused run was written");
    }

    #[tokio::test]
    async fn vectored_reads_answer_each_run_short_past_the_end() {
        let hdd = DeviceModel::parse("hdd", &tessera_proto::config::HddParams::default()).unwrap();
        // One request for all runs, or (emulated disk) one per run: the same answers.
        for model in [DeviceModel::None, hdd] {
            vectored_reads_with(model).await;
        }
    }

    async fn vectored_reads_with(model: DeviceModel) {
        let (_d, s) = service_with(Setup { model, ..Setup::new(2) });
        let w = DsRequest::Write { tag: tag("j"), object: 7, offset: 0, sync: false };
        let (r, _) = s.request(Role::Client, w, Bytes::from_static(b"0123456789abc")).await;
        assert_eq!(r.unwrap(), DsReply::Written { len: 13 });
        let rv = |extents| DsCall::new(2, DsRequest::ReadV { tag: tag("j"), object: 7, extents });
        let runs = vec![Extent { offset: 8, len: 2 }, Extent { offset: 0, len: 3 }, Extent { offset: 11, len: 5 }];
        let (r, p) = s.call(Role::Client, rv(runs), Bytes::new()).await;
        assert_eq!((r.unwrap(), &p[..]), (DsReply::DataV { lens: vec![2, 3, 2] }, &b"89012bc"[..]));
        assert_eq!(s.counters.traffic().sizes.total(), 1, "one request for the three runs");
        // Past the object's end: an empty run; a missing object: all runs empty.
        let (r, p) = s.call(Role::Client, rv(vec![Extent { offset: 100, len: 4 }]), Bytes::new()).await;
        assert_eq!((r.unwrap(), p.len()), (DsReply::DataV { lens: vec![0] }, 0));
        let missing = DsRequest::ReadV { tag: tag("j"), object: 8, extents: vec![Extent { offset: 0, len: 4 }] };
        let (r, _) = s.request(Role::Client, missing, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::DataV { lens: vec![0] });
        // Bad runs, too many bytes, a payload: refused.
        let too_much = vec![Extent { offset: 0, len: MAX_PAYLOAD as u32 }, Extent { offset: 0, len: 1 }];
        for extents in [vec![], vec![Extent { offset: 0, len: 0 }], too_much] {
            let (r, _) = s.call(Role::Client, rv(extents), Bytes::new()).await;
            assert!(r.is_err());
        }
        let (r, _) = s.call(Role::Client, rv(vec![Extent { offset: 0, len: 1 }]), Bytes::from_static(b"x")).await;
        assert!(r.is_err(), "a read carries no payload");
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hdd_model_delays_far_requests_not_sequential_ones() {
        let hdd = tessera_proto::config::HddParams::default();
        let model = DeviceModel::parse("hdd", &hdd).unwrap();
        let setup = Setup { model, reservation: 100_000_000_000, ..Setup::new(2) };
        let (_d, s) = service_with(setup);
        let chunk = Bytes::from(vec![5u8; 65536]);
        // Object 1 at address 0, object 2 at 100 GB.
        s.write(&tag("a"), 1, 0, chunk.clone(), false).await.unwrap();
        let t = Instant::now();
        for i in 1..11u64 {
            s.write(&tag("a"), 1, i * 65536, chunk.clone(), false).await.unwrap();
        }
        let seq = t.elapsed();
        // Sequential requests are charged no positioning, only transfer.
        assert_eq!(s.data_path().locality.report(false).seek_time_us, 0.0);
        let t = Instant::now();
        for i in 0..4u64 {
            s.write(&tag("b"), 2, i * 65536, chunk.clone(), false).await.unwrap();
            s.write(&tag("a"), 1, (11 + i) * 65536, chunk.clone(), false).await.unwrap();
        }
        let far = t.elapsed();
        // 10 sequential 64 KiB requests: 8.4 ms of transfer; 8 alternating ones: about 11.4 ms each. Only
        // lower bounds: a loaded machine can make either phase slower, never faster than the model.
        assert!(seq >= Duration::from_micros(8400), "{seq:?}");
        assert!(far >= Duration::from_millis(85), "{far:?}");
        assert_eq!(&s.read(&tag("b"), 2, 65536, 4).await.unwrap()[..], &[5u8; 4]);
        let rep = s.data_path().locality.report(false);
        assert!(rep.seek_time_us > 4167.0, "{rep:?}");
    }

    #[tokio::test]
    async fn serve_commands_locality_and_trace() {
        let setup = Setup { reservation: 1 << 20, trace: true, ..Setup::new(2) };
        let (d, s) = service_with(setup);
        let serve = |epoch, target| DsRequest::Serve(ServeCommand { epoch, target, slice_ms: 100, fallback_ms: 5000 });
        let (r, _) = s.request(Role::Client, serve(1, ServeTarget::Job("a".into())), Bytes::new()).await;
        assert_eq!(r.unwrap_err().code, ErrorCode::Perm);
        let (r, _) = s.request(Role::Mds, serve(1, ServeTarget::Job("a".into())), Bytes::new()).await;
        let Ok(DsReply::Switched { epoch: 1, at_unix_us }) = r else { panic!("{r:?}") };
        assert!(at_unix_us > 0);
        // Job a streams object 10 (base 0), then b writes object 11 (base 1 MiB) once a's slice ends.
        for i in 0..4u64 {
            s.write(&tag("a"), 10, i * 4096, Bytes::from(vec![1u8; 4096]), false).await.unwrap();
        }
        s.request(Role::Mds, serve(2, ServeTarget::Others { eligible: vec!["a".into()] }), Bytes::new())
            .await
            .0
            .unwrap();
        s.write(&tag("b"), 11, 0, Bytes::from(vec![2u8; 4096]), false).await.unwrap();
        let rep = s.data_path().locality.report(false);
        assert_eq!(rep.ds, 2);
        assert_eq!(rep.epoch, 2);
        let a = rep.jobs.iter().find(|j| j.job == "a").unwrap();
        assert_eq!((a.sl, a.requests, a.bytes), (0.0, 4, 4 * 4096));
        assert!(a.rd_valid, "a's arrivals in its dedicated slice");
        // SL_i is sampled outside dedicated slices only: its one sample is the gap |1 MiB - 16 KiB| from a's
        // last write to b's (the first sample seeds the EWMA).
        assert_eq!(rep.sl, ((1u64 << 20) - 4 * 4096) as f64);
        s.data_path().trace.as_ref().unwrap().flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(d.path().join(crate::trace::TRACE_FILE)).unwrap();
        let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').skip(1).collect()).collect();
        assert_eq!(rows.len(), 5);
        // The originating client and process (the test tag's) close each line.
        assert_eq!(rows[3], ["a", "12288", "4096", "write", "1", "42"]);
        assert_eq!(rows[4], ["b", "1048576", "4096", "write", "1", "42"]);
    }
}

#[cfg(test)]
mod net_tests {
    use super::tests::tag;
    use super::*;
    use std::time::Instant;
    use tessera_proto::error::ErrorCode;
    use tessera_proto::rpc::{self, RpcPeer, Tuning};
    use tessera_proto::tls::NodeIdentity;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_over_quic_and_refuses_ds_peers() {
        let d = tempfile::tempdir().unwrap();
        let tdir = d.path().join("tls");
        let ca = tessera_ops::issue::generate_ca("t").unwrap();
        tessera_ops::ca::write_ca(&tdir, &ca).unwrap();
        let id = |role, name| {
            NodeIdentity::load(&tessera_ops::ca::issue_to_dir(&tdir, &ca, role, name, &["127.0.0.1".into()]).unwrap())
                .unwrap()
        };
        let (ds_id, client_id, other_ds) = (id(Role::Ds, "ds-0"), id(Role::Client, "c"), id(Role::Ds, "ds-1"));
        let (reporter, path) = assemble(vec![Store::open(&d.path().join("data"), 0).unwrap()], &Setup::new(0)).unwrap();
        // The automatic loopback MTU (64 KiB datagrams) is what production uses.
        let tuning = Tuning::default();
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &ds_id, &tuning).unwrap();
        let addr = ep.local_addr().unwrap();
        tokio::spawn(rpc::serve(ep, Arc::new(DsService::new(reporter, path, false)), ds_id.crl.clone()));

        let peer =
            Arc::new(RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client_id, Role::Ds, addr, tuning).unwrap());
        let chunk = 1usize << 20;
        let total = 64usize;
        let data: Bytes = (0..chunk).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
        let t = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..8usize {
            let (peer, data) = (peer.clone(), data.clone());
            tasks.push(tokio::spawn(async move {
                for i in (w..total).step_by(8) {
                    let req =
                        DsRequest::Write { tag: tag("bench"), object: 42, offset: (i * chunk) as u64, sync: false };
                    let (rep, _): (DsReply, Bytes) = peer.call(&DsCall::new(0, req), data.clone()).await.unwrap();
                    assert_eq!(rep, DsReply::Written { len: chunk as u32 });
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let wsecs = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let req = DsRequest::Read { tag: tag("bench"), object: 42, offset: 5 * chunk as u64 + 3, len: chunk as u32 };
        let (rep, payload): (DsReply, Bytes) = peer.call(&DsCall::new(0, req), Bytes::new()).await.unwrap();
        assert_eq!(rep, DsReply::Data { len: chunk as u32 });
        assert_eq!(&payload[..chunk - 3], &data[3..]);
        assert_eq!(&payload[chunk - 3..], &data[..3]);
        let mut tasks = Vec::new();
        for w in 0..8usize {
            let peer = peer.clone();
            tasks.push(tokio::spawn(async move {
                for i in (w..total).step_by(8) {
                    let req = DsRequest::Read {
                        tag: tag("bench"),
                        object: 42,
                        offset: (i * chunk) as u64,
                        len: chunk as u32,
                    };
                    let (_, p): (DsReply, Bytes) = peer.call(&DsCall::new(0, req), Bytes::new()).await.unwrap();
                    assert_eq!(p.len(), chunk);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        eprintln!(
            "one DS over QUIC, debug build: write {:.0} MiB/s, read {:.0} MiB/s",
            total as f64 / wsecs,
            total as f64 / t.elapsed().as_secs_f64()
        );
        // Errors come back as FsError, and the server keeps serving.
        let bad = DsRequest::Truncate { object: 42, size: 0 };
        let e = peer.call::<_, DsReply>(&DsCall::new(0, bad), Bytes::new()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Perm);
        let (rep, _): (DsReply, Bytes) = peer.call(&DsCall::new(0, DsRequest::Report), Bytes::new()).await.unwrap();
        let DsReply::Report(r) = rep else { panic!("not a report") };
        assert_eq!(r.jobs[0].write_bytes, (total * chunk) as u64);

        // Another data server is not a client of this one: it may ping, not read.
        let intruder = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &other_ds, Role::Ds, addr, tuning).unwrap();
        assert!(intruder.call::<_, DsReply>(&DsCall::new(0, DsRequest::Ping), Bytes::new()).await.is_ok());
        let read = DsRequest::Read { tag: tag("j"), object: 1, offset: 0, len: 1 };
        assert!(intruder.call::<_, DsReply>(&DsCall::new(0, read), Bytes::new()).await.is_err());
    }
}
