//! The forwarding node's service: clients' metadata calls go straight to the MDS (not scheduled), their
//! reads and writes through the dispatcher, other data calls (ping, report, fsync) straight to the data
//! server they name; its own calls (status, scheduler switch) are answered here. Metadata calls are
//! sent as a client sends them ([`MdsCall::send`]: idempotent ones retried through an MDS restart).

use crate::dispatch::Dispatcher;
use crate::dispatch::{error, Answer};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::frame::MAX_PAYLOAD;
use tessera_proto::msg::{
    carries_data, check_read_extents, split_runs, DsCall, DsReply, DsRequest, Extent, IonCall, IonReply, IonStatus,
    MdsCall, MdsReply,
};
use tessera_proto::requests::Senders;
use tessera_proto::rpc::{Payload, PeerInfo, RpcPeer, Service};
use tessera_proto::types::{DsId, IoTag, ObjectId, Role};

pub struct IonService {
    pub name: String,
    pub index: u32,
    pub mds: Arc<tessera_proto::rpc::MdsPeers>,
    pub servers: HashMap<DsId, Arc<RpcPeer>>,
    pub dispatcher: Arc<Dispatcher>,
}

impl IonService {
    async fn mds(&self, call: MdsCall) -> FsResult<MdsReply> {
        self.dispatcher.stats.metadata_call();
        self.mds.send(&call).await
    }

    async fn ds(&self, call: DsCall, payload: Bytes, app_len: u64) -> Answer {
        if call.via.is_some() {
            return error(FsError::invalid("a forwarded request cannot be forwarded again"));
        }
        if !carries_data(&call.req) && !payload.is_empty() {
            return error(FsError::protocol("unexpected payload on a request without data"));
        }
        if call.mirror.is_some() {
            // A mirrored stripe's call goes to its data server as it is: its primary orders the stripe's
            // writes and passes them on, and the scheduler's merged calls carry no replicas.
            // (Scheduling them like the others is left open.)
            if matches!(call.req, DsRequest::Truncate { .. } | DsRequest::Remove { .. } | DsRequest::Serve(_)) {
                return error(FsError::perm("forwarding nodes pass on only clients' data requests"));
            }
            let Some(peer) = self.servers.get(&call.ds) else {
                return error(FsError::invalid(format!("data server {} is not in the cluster configuration", call.ds)));
            };
            return match peer.call_chunked::<DsCall, DsReply>(&call, payload).await {
                Ok((r, chunks)) => (Ok(r), Payload::Whole(tessera_proto::frame::concat(chunks))),
                Err(e) => error(e),
            };
        }
        match call.req {
            DsRequest::Read { .. } | DsRequest::Write { .. } => {
                self.dispatcher.submit(call.ds, call.req, payload, app_len).await
            }
            DsRequest::WriteV { tag, object, extents, sync } => {
                self.write_v(call.ds, tag, object, &extents, payload, sync).await
            }
            DsRequest::ReadV { tag, object, extents } => self.read_v(call.ds, tag, object, &extents).await,
            DsRequest::Ping
            | DsRequest::Report
            | DsRequest::Fsync { .. }
            | DsRequest::Fallocate { .. }
            | DsRequest::Seek { .. }
            | DsRequest::JobTrace { .. } => {
                let Some(peer) = self.servers.get(&call.ds) else {
                    let e = format!("data server {} is not in the cluster configuration", call.ds);
                    return error(FsError::invalid(e));
                };
                match peer.call::<DsCall, DsReply>(&call, Bytes::new()).await {
                    Ok((r, p)) => (Ok(r), Payload::Whole(p)),
                    Err(e) => error(e),
                }
            }
            DsRequest::Truncate { .. }
            | DsRequest::Remove { .. }
            | DsRequest::Serve(_)
            | DsRequest::Resync { .. }
            | DsRequest::Checksum { .. }
            | DsRequest::Usage { .. }
            | DsRequest::ListObjects { .. } => {
                error(FsError::perm("forwarding nodes pass on only clients' data requests"))
            }
        }
    }

    /// A client's batch of small writes: each run is scheduled as a write of its own (the scheduler
    /// decides their order, the dispatcher merges the contiguous ones); answered once all are written.
    async fn write_v(
        &self,
        ds: DsId,
        tag: IoTag,
        object: ObjectId,
        extents: &[Extent],
        data: Bytes,
        sync: bool,
    ) -> Answer {
        let runs = match split_runs(extents, &data) {
            Ok(runs) => runs.map(|(offset, run)| {
                let len = run.len() as u64;
                let req = DsRequest::Write { tag: tag.clone(), object, offset, sync };
                self.dispatcher.submit(ds, req, run, len)
            }),
            Err(e) => return error(e),
        };
        for (r, _) in futures::future::join_all(runs).await {
            match r {
                Ok(DsReply::Written { .. }) => {}
                Ok(other) => {
                    return error(FsError::protocol(format!("data server {ds} answered Write with {other:?}")))
                }
                Err(e) => return error(e),
            }
        }
        (Ok(DsReply::Written { len: data.len() as u32 }), Payload::Whole(Bytes::new()))
    }

    /// A client's vectored read: each run is scheduled as a read of its own (merged with neighbours by
    /// the dispatcher like any read); answered once all are read, their bytes one after the other.
    async fn read_v(&self, ds: DsId, tag: IoTag, object: ObjectId, extents: &[Extent]) -> Answer {
        if let Err(e) = check_read_extents(extents, MAX_PAYLOAD) {
            return error(e);
        }
        let tag = &tag;
        let runs = extents.iter().map(|e| async move {
            let req = DsRequest::Read { tag: tag.clone(), object, offset: e.offset, len: e.len };
            match self.dispatcher.submit(ds, req, Bytes::new(), u64::from(e.len)).await {
                (Ok(DsReply::Data { len }), p) => {
                    let data = gather(p).await?;
                    if data.len() != len as usize {
                        return Err(FsError::protocol(format!(
                            "data server {ds} declared {len} bytes but sent {}",
                            data.len()
                        )));
                    }
                    Ok(data)
                }
                (Ok(other), _) => Err(FsError::protocol(format!("data server {ds} answered Read with {other:?}"))),
                (Err(e), _) => Err(e),
            }
        });
        match futures::future::try_join_all(runs).await {
            Ok(parts) => {
                let lens = parts.iter().map(|p| p.len() as u32).collect();
                (Ok(DsReply::DataV { lens }), Payload::Whole(tessera_proto::frame::concat(parts)))
            }
            Err(e) => error(e),
        }
    }

    pub fn status(&self) -> IonStatus {
        let v = self.dispatcher.view();
        IonStatus {
            name: self.name.clone(),
            index: self.index,
            scheduler: v.scheduler.to_string(),
            window_us: v.params.window_us,
            quantum: v.params.quantum,
            queues: v.queues,
            in_flight: v.in_flight,
            ..self.dispatcher.stats.snapshot()
        }
    }
}

/// A reply's payload as one buffer (a streamed one is gathered); an error if it ended short.
async fn gather(p: Payload) -> FsResult<Bytes> {
    match p {
        Payload::Whole(p) => Ok(p),
        Payload::Streamed { len, mut chunks } => {
            let mut parts = Vec::new();
            while let Some(c) = chunks.recv().await {
                parts.push(c);
            }
            let data = tessera_proto::frame::concat(parts);
            if data.len() != len {
                return Err(FsError::io("a data server's reply ended short"));
            }
            Ok(data)
        }
    }
}

impl Service for IonService {
    type Request = IonCall;
    type Reply = IonReply;

    /// Clients (and administrators) only: servers never call a forwarding node.
    fn accepts(&self, role: Role) -> bool {
        matches!(role, Role::Client | Role::Admin)
    }

    /// Whole replies (a streamed one is gathered), for callers of `handle`.
    async fn handle(&self, peer: Arc<PeerInfo>, call: IonCall, payload: Bytes) -> (FsResult<IonReply>, Bytes) {
        let (r, p) = self.handle_streamed(peer, call, payload).await;
        match gather(p).await {
            Ok(data) => (r, data),
            Err(e) => (Err(e), Bytes::new()),
        }
    }

    async fn handle_streamed(
        &self,
        peer: Arc<PeerInfo>,
        call: IonCall,
        payload: Bytes,
    ) -> (FsResult<IonReply>, Payload) {
        let whole = |r: FsResult<IonReply>| (r, Payload::Whole(Bytes::new()));
        match call {
            IonCall::Ds { call, app_len } => {
                let (r, p) = self.ds(call, payload, app_len).await;
                (r.map(IonReply::Ds), p)
            }
            _ if !payload.is_empty() => whole(Err(FsError::protocol("unexpected payload on a request without data"))),
            IonCall::Mds(call) => whole(self.mds(call).await.map(IonReply::Mds)),
            IonCall::Status => whole(Ok(IonReply::Status(self.status()))),
            IonCall::SetScheduler { caller, setting } => {
                if let Err(e) = Senders::Admins.admit(peer.role, &caller) {
                    return whole(Err(FsError::perm(format!("switching the scheduler: {e}"))));
                }
                match self.dispatcher.switch(&setting) {
                    Ok(()) => {
                        tracing::info!(scheduler = %setting.name, by = %peer.name, "scheduler switched");
                        whole(Ok(IonReply::Status(self.status())))
                    }
                    Err(e) => whole(Err(FsError::from(e))),
                }
            }
        }
    }
}
