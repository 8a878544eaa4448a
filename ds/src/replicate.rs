//! Mirrored stripes at the data server (issue 36; DESIGN.md "Redundancy"): the primary replica's fan-out
//! of a stripe's writes to its other replicas, and the ordering that keeps the replicas identical.
//!
//! **Protocol: primary fan-out** (as BeeGFS buddy mirroring; 3FS's CRAQ chains replicas instead). A
//! client sends a mirrored stripe's write (plain or vectored), fallocate and fsync to the stripe's
//! primary (replica 0) with the other replicas to write ([`MirrorCall::replicas`]); the primary applies
//! it and, at the same time, passes the same call on to every other replica (the request's object
//! replaced by the replica's, [`MirrorCall::from_primary`] set), and answers once all have it. Why not a
//! chain: a chain's latency grows with every replica (M − 1 hops in a row), fan-out's is one extra hop
//! whatever M; and why not client fan-out: the client would need an ordering point anyway, which the
//! primary is for free (one per object), and its uplink would carry every byte M times.
//!
//! **Ordering.** Two writes that overlap in an object must be applied in the same order on every
//! replica. The primary holds each call's object ranges ([`Ordering`]) from before it applies the call
//! until every replica has answered; a call overlapping one in flight waits for it. Writes that do not
//! overlap run in parallel, as without mirrors (the order of disjoint writes does not change the bytes).
//!
//! **Failures** (this step): a replica that cannot be reached fails the call (the client sees the
//! error, the replicas may differ in the failed call's range, as a failed write's range is undefined on
//! a local disk). Marking the missed replica stale at the MDS and going on is the next step.
//!
//! The sending is behind [`Sender`] (quinn-proto's style): [`Peers`] over QUIC in the daemon, another
//! in-process service in the tests.

use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tessera_proto::layout::MAX_MIRRORS;
use tessera_proto::msg::{DsCall, DsReply, DsRequest, MirrorCall};
use tessera_proto::rpc::RpcPeer;
use tessera_proto::{DsId, FsError, FsResult, ObjectId, Role};
use tokio::sync::Notify;

/// A boxed future of a reply from another data server.
pub type ReplyFuture<'a> = Pin<Box<dyn Future<Output = FsResult<DsReply>> + Send + 'a>>;

/// How a primary reaches the other replicas' data servers.
pub trait Sender: Send + Sync {
    fn send(&self, call: DsCall, payload: Bytes) -> ReplyFuture<'_>;
}

/// Connections to the other data servers of the cluster (role `ds`), made on first use.
pub struct Peers {
    peers: HashMap<DsId, RpcPeer>,
}

impl Peers {
    pub fn new(peers: HashMap<DsId, RpcPeer>) -> Peers {
        Peers { peers }
    }
}

impl Sender for Peers {
    fn send(&self, call: DsCall, payload: Bytes) -> ReplyFuture<'_> {
        Box::pin(async move {
            let peer = self
                .peers
                .get(&call.ds)
                .ok_or_else(|| FsError::invalid(format!("data server {} is not in the configuration", call.ds)))?;
            Ok(peer.call::<DsCall, DsReply>(&call, payload).await?.0)
        })
    }
}

/// The requests a primary passes on to the other replicas.
pub fn is_replicated(req: &DsRequest) -> bool {
    matches!(
        req,
        DsRequest::Write { .. } | DsRequest::WriteV { .. } | DsRequest::Fallocate { .. } | DsRequest::Fsync { .. }
    )
}

/// The object a replicated request is about.
pub fn object_of(req: &DsRequest) -> Option<ObjectId> {
    match req {
        DsRequest::Write { object, .. }
        | DsRequest::WriteV { object, .. }
        | DsRequest::Fallocate { object, .. }
        | DsRequest::Fsync { object, .. } => Some(*object),
        _ => None,
    }
}

/// `req` about `object` instead.
fn with_object(req: &DsRequest, to: ObjectId) -> DsRequest {
    let mut r = req.clone();
    match &mut r {
        DsRequest::Write { object, .. }
        | DsRequest::WriteV { object, .. }
        | DsRequest::Fallocate { object, .. }
        | DsRequest::Fsync { object, .. } => *object = to,
        _ => {}
    }
    r
}

/// The object ranges `[start, end)` a request changes (none for fsync).
pub fn ranges_of(req: &DsRequest, payload_len: usize) -> Vec<(u64, u64)> {
    match req {
        DsRequest::Write { offset, .. } => vec![(*offset, offset.saturating_add(payload_len as u64))],
        DsRequest::WriteV { extents, .. } => {
            extents.iter().map(|e| (e.offset, e.offset.saturating_add(u64::from(e.len)))).collect()
        }
        DsRequest::Fallocate { offset, len, .. } => vec![(*offset, offset.saturating_add(*len))],
        _ => Vec::new(),
    }
}

/// Checks a mirrored call's envelope against the role of its sender: only data servers pass calls on
/// (and only replicated requests), a primary is given at most M − 1 other replicas, none on itself.
pub fn check_call(me: DsId, role: Role, req: &DsRequest, m: &MirrorCall) -> FsResult<()> {
    if m.from_primary != (role == Role::Ds) {
        return Err(FsError::perm(format!(
            "a call passed on by a primary comes from a data server and only from one (peer is {role})"
        )));
    }
    if m.from_primary && !(is_replicated(req) && m.replicas.is_empty()) {
        return Err(FsError::perm("a primary passes on only writes, fallocate and fsync, to nobody further"));
    }
    if m.replicas.len() >= MAX_MIRRORS as usize {
        return Err(FsError::invalid(format!("{} other replicas (at most {})", m.replicas.len(), MAX_MIRRORS - 1)));
    }
    if m.replicas.iter().any(|r| r.ds == me) {
        return Err(FsError::invalid(format!("a replica of this stripe on its primary's data server {me}")));
    }
    if !m.replicas.is_empty() && !is_replicated(req) {
        return Err(FsError::invalid("only writes, fallocate and fsync are passed on to other replicas"));
    }
    Ok(())
}

/// The object ranges in flight at a primary (see the module doc).
#[derive(Default)]
pub struct Ordering {
    inner: Mutex<Inflight>,
    changed: Notify,
}

#[derive(Default)]
struct Inflight {
    next: u64,
    /// object → (id, start, end) of the calls in flight.
    ranges: HashMap<ObjectId, Vec<(u64, u64, u64)>>,
}

/// Holds a call's ranges until dropped.
pub struct Held<'a> {
    ordering: &'a Ordering,
    object: ObjectId,
    id: u64,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Ok(mut g) = self.ordering.inner.lock() {
            if let Some(v) = g.ranges.get_mut(&self.object) {
                v.retain(|&(id, _, _)| id != self.id);
                if v.is_empty() {
                    g.ranges.remove(&self.object);
                }
            }
        }
        self.ordering.changed.notify_waiters();
    }
}

impl Ordering {
    /// Waits until no call in flight on `object` overlaps `ranges`, then holds them. An empty `ranges`
    /// (fsync) waits for nothing.
    pub async fn hold(&self, object: ObjectId, ranges: &[(u64, u64)]) -> FsResult<Held<'_>> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the check, so a release between the check and the wait is not missed.
            notified.as_mut().enable();
            {
                let mut g = self.inner.lock().map_err(|_| FsError::io("replica ordering poisoned"))?;
                let busy = g
                    .ranges
                    .get(&object)
                    .is_some_and(|v| v.iter().any(|&(_, s, e)| ranges.iter().any(|&(a, b)| a < e && s < b)));
                if !busy {
                    g.next += 1;
                    let id = g.next;
                    let v = g.ranges.entry(object).or_default();
                    v.extend(ranges.iter().map(|&(a, b)| (id, a, b)));
                    return Ok(Held { ordering: self, object, id });
                }
            }
            notified.await;
        }
    }

    /// Calls in flight (for tests and metrics).
    pub fn in_flight(&self) -> usize {
        self.inner.lock().map(|g| g.ranges.values().map(Vec::len).sum()).unwrap_or(0)
    }
}

/// A primary's replication: the ordering of its objects' calls and the way to the other replicas.
pub struct Replicator {
    pub ordering: Ordering,
    sender: Arc<dyn Sender>,
}

impl Replicator {
    pub fn new(sender: Arc<dyn Sender>) -> Replicator {
        Replicator { ordering: Ordering::default(), sender }
    }

    /// Serves a mirrored call at its primary: holds its ranges, applies it here (`local`) while passing
    /// it on to every other replica, and answers with the local reply once every replica has it (the
    /// first failure otherwise, naming the replica).
    pub async fn fan_out<F>(
        &self,
        req: DsRequest,
        m: MirrorCall,
        payload: Bytes,
        local: F,
    ) -> (FsResult<DsReply>, Bytes)
    where
        F: Future<Output = (FsResult<DsReply>, Bytes)>,
    {
        let Some(object) = object_of(&req) else {
            return (Err(FsError::invalid("not a replicated request")), Bytes::new());
        };
        let ranges = ranges_of(&req, payload.len());
        let _held = match self.ordering.hold(object, &ranges).await {
            Ok(h) => h,
            Err(e) => return (Err(e), Bytes::new()),
        };
        let passed = m.replicas.iter().map(|r| {
            let call = DsCall {
                ds: r.ds,
                req: with_object(&req, r.object),
                via: None,
                mirror: Some(MirrorCall { gen: m.gen, stripe: m.stripe, replicas: Vec::new(), from_primary: true }),
            };
            let ds = r.ds;
            let sent = self.sender.send(call, payload.clone());
            async move { (ds, sent.await) }
        });
        let (mine, theirs) = futures::future::join(local, futures::future::join_all(passed)).await;
        if mine.0.is_err() {
            return mine;
        }
        for (ds, r) in theirs {
            match (r, &mine.0) {
                (Ok(a), Ok(b)) if same_outcome(&a, b) => {}
                (Ok(a), _) => {
                    let e = format!("the replica on data server {ds} answered {a:?}");
                    return (Err(FsError::io(e)), Bytes::new());
                }
                (Err(e), _) => {
                    let e = FsError::new(e.code, format!("replica on data server {ds}: {}", e.detail));
                    return (Err(e), Bytes::new());
                }
            }
        }
        mine
    }
}

/// Whether a replica's reply matches the primary's (the same bytes written).
fn same_outcome(a: &DsReply, b: &DsReply) -> bool {
    match (a, b) {
        (DsReply::Written { len: x }, DsReply::Written { len: y }) => x == y,
        (DsReply::Ok, DsReply::Ok) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn overlapping_calls_wait_and_disjoint_ones_do_not() {
        let o = Arc::new(Ordering::default());
        let a = o.hold(7, &[(0, 100)]).await.unwrap();
        // Disjoint range of the same object, and any range of another object: at once.
        let b = tokio::time::timeout(Duration::from_secs(1), o.hold(7, &[(100, 200)])).await.unwrap().unwrap();
        let c = tokio::time::timeout(Duration::from_secs(1), o.hold(8, &[(0, 100)])).await.unwrap().unwrap();
        assert_eq!(o.in_flight(), 3);
        // Overlapping: waits until the holder is done.
        let o2 = o.clone();
        let waiter = tokio::spawn(async move {
            let _h = o2.hold(7, &[(50, 60)]).await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "an overlapping call ran while the first was in flight");
        drop(a);
        tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
        drop((b, c));
        assert_eq!(o.in_flight(), 0);
        // Fsync holds nothing and waits for nothing.
        let _d = o.hold(7, &[(0, u64::MAX)]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), o.hold(7, &[])).await.unwrap().unwrap();
    }

    /// The other replicas' servers, in this process (`down`: unreachable).
    struct InProcess {
        servers: HashMap<DsId, Arc<crate::server::DsService>>,
        down: Mutex<Vec<DsId>>,
    }

    impl Sender for InProcess {
        fn send(&self, call: DsCall, payload: Bytes) -> ReplyFuture<'_> {
            Box::pin(async move {
                if self.down.lock().unwrap().contains(&call.ds) {
                    return Err(FsError::unavailable(format!("data server {} is down", call.ds)));
                }
                let s = self.servers.get(&call.ds).ok_or_else(|| FsError::invalid("no such server"))?;
                s.call(Role::Ds, call, payload).await.0
            })
        }
    }

    #[tokio::test]
    async fn a_primary_writes_every_replica_in_one_order_and_fails_when_one_is_missing() {
        use crate::server::tests::{service_with, tag};
        use crate::server::Setup;
        use tessera_proto::layout::StripeTarget;
        let (_d1, s1) = service_with(Setup::new(1));
        let (_d2, s2) = service_with(Setup::new(2));
        let (_d0, s0) = service_with(Setup::new(0));
        let others = Arc::new(InProcess {
            servers: [(1, Arc::new(s1)), (2, Arc::new(s2))].into_iter().collect(),
            down: Mutex::new(Vec::new()),
        });
        let primary = Arc::new(s0.with_replicator(Arc::new(Replicator::new(others.clone()))));
        let replicas = vec![StripeTarget { ds: 1, object: 11 }, StripeTarget { ds: 2, object: 12 }];
        let m = MirrorCall { gen: 0, stripe: 0, replicas: replicas.clone(), from_primary: false };
        // Many overlapping writers at once: every replica must end with the same bytes.
        let writes = (0..32u8).map(|i| {
            let p = primary.clone();
            let m = m.clone();
            async move {
                let req = DsRequest::Write { tag: tag("j"), object: 10, offset: u64::from(i % 4) * 1000, sync: false };
                let call = DsCall { ds: 0, req, via: None, mirror: Some(m) };
                p.call(Role::Client, call, Bytes::from(vec![i; 3000])).await.0.unwrap()
            }
        });
        futures::future::join_all(writes).await;
        let read = |s: Arc<crate::server::DsService>, ds, object| async move {
            let call = DsCall::new(ds, DsRequest::Read { tag: tag("j"), object, offset: 0, len: 10_000 });
            let (r, data) = s.call(Role::Client, call, Bytes::new()).await;
            r.unwrap();
            data
        };
        let here = read(primary.clone(), 0, 10).await;
        assert_eq!(here.len(), 6000);
        for (ds, object) in [(1, 11), (2, 12)] {
            assert_eq!(read(others.servers[&ds].clone(), ds, object).await, here, "replica on {ds} differs");
        }
        // Fsync reaches every replica; with one of them down the call fails and names it.
        let fsync =
            DsCall { ds: 0, req: DsRequest::Fsync { tag: tag("j"), object: 10 }, via: None, mirror: Some(m.clone()) };
        primary.call(Role::Client, fsync, Bytes::new()).await.0.unwrap();
        others.down.lock().unwrap().push(2);
        let req = DsRequest::Write { tag: tag("j"), object: 10, offset: 0, sync: false };
        let call = DsCall { ds: 0, req, via: None, mirror: Some(m) };
        let e = primary.call(Role::Client, call, Bytes::from_static(b"x")).await.0.unwrap_err();
        assert!(e.detail.contains("data server 2"), "{e}");
        assert_eq!(primary.replicator_in_flight(), 0);
        // A data server without a way to the others refuses to be a primary.
        let (_d3, s3) = service_with(Setup::new(3));
        let req = DsRequest::Write { tag: tag("j"), object: 10, offset: 0, sync: false };
        let m =
            MirrorCall { gen: 0, stripe: 0, replicas: vec![StripeTarget { ds: 1, object: 11 }], from_primary: false };
        let call = DsCall { ds: 3, req, via: None, mirror: Some(m) };
        assert!(s3.call(Role::Client, call, Bytes::from_static(b"x")).await.0.is_err());
    }

    #[test]
    fn only_data_servers_pass_calls_on_and_only_replicated_ones() {
        let tag = crate::server::tests::tag("j");
        let w = DsRequest::Write { tag: tag.clone(), object: 1, offset: 0, sync: false };
        let r = DsRequest::Read { tag, object: 1, offset: 0, len: 1 };
        let t = |ds| tessera_proto::layout::StripeTarget { ds, object: 9 };
        let m = |replicas: Vec<_>, from_primary| MirrorCall { gen: 0, stripe: 0, replicas, from_primary };
        assert!(check_call(0, Role::Client, &w, &m(vec![t(1)], false)).is_ok());
        assert!(check_call(0, Role::Client, &r, &m(vec![], false)).is_ok(), "a mirrored read");
        assert!(check_call(0, Role::Client, &r, &m(vec![t(1)], false)).is_err(), "reads are not passed on");
        assert!(check_call(0, Role::Client, &w, &m(vec![], true)).is_err(), "a client posing as a primary");
        assert!(check_call(0, Role::Ds, &w, &m(vec![], true)).is_ok());
        assert!(check_call(0, Role::Ds, &w, &m(vec![t(2)], true)).is_err(), "passed on further");
        assert!(check_call(0, Role::Ds, &r, &m(vec![], true)).is_err(), "a data server may only write here");
        assert!(check_call(0, Role::Ds, &w, &m(vec![], false)).is_err());
        assert!(check_call(0, Role::Client, &w, &m(vec![t(0)], false)).is_err(), "a replica on the primary");
        assert!(check_call(0, Role::Client, &w, &m(vec![t(1), t(2), t(3)], false)).is_err(), "too many");
    }
}
