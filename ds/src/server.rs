//! The data service: checks each request (role, tag, sizes) and serves it from the store, data
//! operations through the scheduler.

use crate::counters::Counters;
use crate::device::{DeviceModel, DeviceOp, OpKind};
use crate::report::Reporter;
use crate::scheduler::Scheduler;
use crate::store::Store;
use bytes::Bytes;
use std::sync::Arc;
use tessera_proto::frame::MAX_PAYLOAD;
use tessera_proto::msg::{DsReply, DsRequest, LIST_OBJECTS_MAX};
use tessera_proto::rpc::{PeerInfo, Service};

use tessera_proto::{DsId, FsError, FsResult, IoTag, ObjectId, Role, JOB_ID_MAX, PROTOCOL_VERSION};

pub struct DsService {
    ds: DsId,
    store: Store,
    scheduler: Scheduler,
    counters: Arc<Counters>,
    reporter: Reporter,
    device: DeviceModel,
    /// Make every write durable before acknowledging it.
    sync_writes: bool,
}

fn check_tag(tag: &IoTag) -> FsResult<()> {
    if tag.job.len() > JOB_ID_MAX {
        return Err(FsError::invalid(format!("job id of {} bytes exceeds {JOB_ID_MAX}", tag.job.len())));
    }
    Ok(())
}

/// Only the MDS and administrators change or enumerate objects outside the data path.
fn check_privileged(role: Role) -> FsResult<()> {
    match role {
        Role::Mds | Role::Admin => Ok(()),
        other => Err(FsError::perm(format!("role {other} may not manage objects on a data server"))),
    }
}

impl DsService {
    pub fn new(reporter: Reporter, device: DeviceModel, sync_writes: bool) -> DsService {
        DsService {
            ds: reporter.ds,
            store: reporter.store.clone(),
            scheduler: reporter.scheduler.clone(),
            counters: reporter.counters.clone(),
            reporter,
            device,
            sync_writes,
        }
    }

    /// Runs `work` as a device request of `tag`'s job, adding the device model's delay.
    async fn device<T, F>(&self, tag: &IoTag, op: DeviceOp, work: F) -> FsResult<T>
    where
        T: Send + 'static,
        F: std::future::Future<Output = FsResult<T>> + Send + 'static,
    {
        let delay = self.device.delay(&op);
        self.scheduler
            .submit(&tag.job, async move {
                let r = work.await;
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                r
            })
            .await
    }

    pub async fn read(&self, tag: &IoTag, object: ObjectId, offset: u64, len: u32) -> FsResult<Bytes> {
        check_tag(tag)?;
        if len as usize > MAX_PAYLOAD {
            return Err(FsError::invalid(format!("read of {len} bytes exceeds the limit of {MAX_PAYLOAD}")));
        }
        let store = self.store.clone();
        let op = DeviceOp { kind: OpKind::Read, object, offset, len: len.into() };
        let data = self.device(tag, op, async move { store.read(object, offset, len as usize).await }).await?;
        self.counters.record_read(&tag.job, data.len() as u64);
        Ok(data)
    }

    pub async fn write(&self, tag: &IoTag, object: ObjectId, offset: u64, data: Bytes, sync: bool) -> FsResult<u32> {
        check_tag(tag)?;
        let len = u32::try_from(data.len()).map_err(|_| FsError::invalid("write payload too large"))?;
        let store = self.store.clone();
        let sync = sync || self.sync_writes;
        let op = DeviceOp { kind: OpKind::Write, object, offset, len: len.into() };
        self.device(tag, op, async move { store.write(object, offset, data, sync).await }).await?;
        self.counters.record_write(&tag.job, len.into());
        Ok(len)
    }

    /// Serves one request from a peer of `role`.
    pub async fn request(&self, role: Role, req: DsRequest, payload: Bytes) -> (FsResult<DsReply>, Bytes) {
        if !matches!(req, DsRequest::Write { .. }) && !payload.is_empty() {
            return (Err(FsError::protocol("unexpected payload on a request without data")), Bytes::new());
        }
        let r = match req {
            DsRequest::Ping => Ok(DsReply::Pong { version: PROTOCOL_VERSION, ds: self.ds }),
            DsRequest::Read { tag, object, offset, len } => match self.read(&tag, object, offset, len).await {
                Ok(data) => return (Ok(DsReply::Data { len: data.len() as u32 }), data),
                Err(e) => Err(e),
            },
            DsRequest::Write { tag, object, offset, sync } => {
                self.write(&tag, object, offset, payload, sync).await.map(|len| DsReply::Written { len })
            }
            DsRequest::Fsync { tag, object } => self.fsync(&tag, object).await.map(|()| DsReply::Ok),
            DsRequest::Stat { object } => {
                self.store.stat(object).await.map(|(exists, size)| DsReply::ObjectStat { exists, size })
            }
            DsRequest::Truncate { object, size } => match check_privileged(role) {
                Ok(()) => self.store.truncate(object, size).await.map(|()| DsReply::Ok),
                Err(e) => Err(e),
            },
            DsRequest::Remove { objects } => match check_privileged(role) {
                Ok(()) => self.store.remove(objects).await.map(|()| DsReply::Ok),
                Err(e) => Err(e),
            },
            DsRequest::ListObjects { after, max } => match check_privileged(role) {
                Ok(()) => self.list(after, max).await,
                Err(e) => Err(e),
            },
            DsRequest::Report => self.reporter.build().await.map(DsReply::Report),
            DsRequest::Serve(_) | DsRequest::Locality => {
                Err(FsError::new(tessera_proto::error::ErrorCode::Unsupported, "orchestration not available"))
            }
        };
        (r, Bytes::new())
    }

    async fn fsync(&self, tag: &IoTag, object: ObjectId) -> FsResult<()> {
        check_tag(tag)?;
        let store = self.store.clone();
        let op = DeviceOp { kind: OpKind::Fsync, object, offset: 0, len: 0 };
        self.device(tag, op, async move { store.fsync(object).await }).await
    }

    /// One page of the object list, in id order.
    async fn list(&self, after: Option<ObjectId>, max: u32) -> FsResult<DsReply> {
        let mut list = self.store.list().await?;
        list.sort_unstable_by_key(|&(id, _)| id);
        let start = match after {
            Some(a) => list.partition_point(|&(id, _)| id <= a),
            None => 0,
        };
        let n = max.clamp(1, LIST_OBJECTS_MAX) as usize;
        Ok(DsReply::Objects(list.into_iter().skip(start).take(n).collect()))
    }
}

impl Service for DsService {
    type Request = DsRequest;
    type Reply = DsReply;

    fn accepts(&self, role: Role) -> bool {
        matches!(role, Role::Client | Role::Ion | Role::Mds | Role::Admin)
    }

    async fn handle(&self, peer: Arc<PeerInfo>, req: DsRequest, payload: Bytes) -> (FsResult<DsReply>, Bytes) {
        self.request(peer.role, req, payload).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::RoundRobin;
    use tessera_proto::error::ErrorCode;

    fn service() -> (tempfile::TempDir, DsService) {
        let d = tempfile::tempdir().unwrap();
        let reporter = Reporter {
            ds: 2,
            store: Store::open(d.path(), 2).unwrap(),
            scheduler: Scheduler::start(8, RoundRobin),
            counters: Arc::new(Counters::new()),
        };
        (d, DsService::new(reporter, DeviceModel::None, false))
    }

    pub(super) fn tag(job: &str) -> IoTag {
        IoTag { job: job.into(), client: 1, ino: 5 }
    }

    #[tokio::test]
    async fn roles_and_validation() {
        let (_d, s) = service();
        assert!(s.accepts(Role::Client) && s.accepts(Role::Mds) && s.accepts(Role::Ion) && s.accepts(Role::Admin));
        assert!(!s.accepts(Role::Ds));
        let w = DsRequest::Write { tag: tag("j"), object: 3, offset: 2, sync: true };
        let (r, _) = s.request(Role::Client, w, Bytes::from_static(b"xyz")).await;
        assert_eq!(r.unwrap(), DsReply::Written { len: 3 });
        let (r, p) =
            s.request(Role::Ion, DsRequest::Read { tag: tag("j"), object: 3, offset: 0, len: 10 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Data { len: 5 });
        assert_eq!(&p[..], b"\0\0xyz");
        for req in [
            DsRequest::Truncate { object: 3, size: 0 },
            DsRequest::Remove { objects: vec![3] },
            DsRequest::ListObjects { after: None, max: 10 },
        ] {
            let (r, _) = s.request(Role::Client, req, Bytes::new()).await;
            assert_eq!(r.unwrap_err().code, ErrorCode::Perm);
        }
        let (r, _) = s.request(Role::Mds, DsRequest::ListObjects { after: None, max: 10 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Objects(vec![(3, 5)]));
        let (r, _) = s.request(Role::Admin, DsRequest::Truncate { object: 3, size: 1 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Ok);
        let (r, _) = s.request(Role::Client, DsRequest::Stat { object: 3 }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::ObjectStat { exists: true, size: 1 });
        let (r, _) = s.request(Role::Mds, DsRequest::Remove { objects: vec![3, 4] }, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Ok);
        let long = IoTag { job: "x".repeat(JOB_ID_MAX + 1), client: 0, ino: 0 };
        let (r, _) = s.request(Role::Client, DsRequest::Fsync { tag: long, object: 1 }, Bytes::new()).await;
        assert_eq!(r.unwrap_err().code, ErrorCode::Invalid);
        let big = DsRequest::Read { tag: tag("j"), object: 1, offset: 0, len: MAX_PAYLOAD as u32 + 1 };
        assert_eq!(s.request(Role::Client, big, Bytes::new()).await.0.unwrap_err().code, ErrorCode::Invalid);
        let (r, _) = s.request(Role::Client, DsRequest::Ping, Bytes::new()).await;
        assert_eq!(r.unwrap(), DsReply::Pong { version: PROTOCOL_VERSION, ds: 2 });
        let (r, _) = s.request(Role::Client, DsRequest::Report, Bytes::new()).await;
        assert!(matches!(r.unwrap(), DsReply::Report(rep) if rep.ds == 2 && rep.jobs.len() == 1));
    }
}

#[cfg(test)]
mod net_tests {
    use super::tests::tag;
    use super::*;
    use crate::scheduler::RoundRobin;
    use std::time::Instant;
    use tessera_proto::error::ErrorCode;
    use tessera_proto::rpc::{self, RpcPeer, Tuning};
    use tessera_proto::tls::{self, NodeIdentity};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serves_over_quic_and_refuses_ds_peers() {
        let d = tempfile::tempdir().unwrap();
        let tdir = d.path().join("tls");
        let ca = tls::generate_ca("t").unwrap();
        tls::write_ca(&tdir, &ca).unwrap();
        let id = |role, name| {
            NodeIdentity::load(&tls::issue_to_dir(&tdir, &ca, role, name, &["127.0.0.1".into()]).unwrap()).unwrap()
        };
        let (ds_id, client_id, other_ds) = (id(Role::Ds, "ds-0"), id(Role::Client, "c"), id(Role::Ds, "ds-1"));
        let reporter = Reporter {
            ds: 0,
            store: Store::open(&d.path().join("data"), 0).unwrap(),
            scheduler: Scheduler::start(8, RoundRobin),
            counters: Arc::new(Counters::new()),
        };
        // The automatic loopback MTU (64 KiB datagrams) is what production uses.
        let tuning = Tuning::default();
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &ds_id, &tuning).unwrap();
        let addr = ep.local_addr().unwrap();
        tokio::spawn(rpc::serve(ep, Arc::new(DsService::new(reporter, DeviceModel::None, false))));

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
                    let (rep, _): (DsReply, Bytes) = peer.call(&req, data.clone()).await.unwrap();
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
        let (rep, payload): (DsReply, Bytes) = peer.call(&req, Bytes::new()).await.unwrap();
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
                    let (_, p): (DsReply, Bytes) = peer.call(&req, Bytes::new()).await.unwrap();
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
        let e = peer.call::<_, DsReply>(&bad, Bytes::new()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Perm);
        let (rep, _): (DsReply, Bytes) = peer.call(&DsRequest::Report, Bytes::new()).await.unwrap();
        let DsReply::Report(r) = rep else { panic!("not a report") };
        assert_eq!(r.jobs[0].write_bytes, (total * chunk) as u64);

        // Another data server is not a client of this one.
        let intruder = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &other_ds, Role::Ds, addr, tuning).unwrap();
        assert!(intruder.call::<_, DsReply>(&DsRequest::Ping, Bytes::new()).await.is_err());
    }
}
