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
//! **Failures: degraded mode.** A replica whose call failed, or that has not answered
//! [`Replicator::grace`] after the primary's own write is done and then does not answer a ping either
//! ([`PING_WITHIN`]; one that does is slow, not down, and is waited for; a server that failed a ping is
//! pinged without the grace until it answers again), missed the call: the primary has the MDS mark it stale
//! ([`Marker`]), durably and fenced (see `mds/src/namespace/mirror.rs`), and only then acknowledges the
//! call; the MDS refuses if no replica in sync would remain, and the call fails. The primary remembers
//! which replicas it had marked and leaves them out of later calls from clients whose layout is older
//! than the mark (`known`). A client that cannot reach the primary sends the call to another in-sync
//! replica naming the primary as failed ([`MirrorCall::failed`]): that replica has the MDS mark the
//! primary stale first (which makes it the primary) and then serves the call as one (a takeover). A
//! primary taken over while slow rather than down may still pass calls on; the new primary refuses
//! those of older layout generations than its own ([`Replicator::deposes`]), as they were ordered by
//! the old primary, not by it.
//!
//! **Resync** ([`Replicator::resync`]): the MDS has the primary copy a stale replica's object, range by
//! range, each range held against writes like a call, throttled; the replica is written by every call
//! from the moment the copy begins (the MDS hands the primary the replica set), so when the copy ends
//! the replica holds everything. What is copied: only what the replica missed when the primary kept
//! count of it ([`MissedLog`]: a primary that marks a replica stale because it missed a call logs, from
//! before the mark on, every range of the object changed here; the MDS names that log in the resync
//! when the replica's episode began with that mark and the same server is still the primary), else the
//! whole object (the primary restarted since, the replica was a primary that failed and may hold writes
//! nobody else has, its store was lost, or the MDS restarted).
//!
//! The sending is behind [`Sender`] (quinn-proto's style): [`Peers`] over QUIC in the daemon, another
//! in-process service in the tests.

use bytes::Bytes;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_proto::layout::StripeTarget;
use tessera_proto::layout::MAX_MIRRORS;
use tessera_proto::msg::{DsCall, DsReply, DsRequest, MdsCall, MdsReply, MdsRequest, MirrorCall};
use tessera_proto::rpc::RpcPeer;
use tessera_proto::{Caller, DsId, FsError, FsResult, ObjectId, Origin, Role};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A boxed future of a reply from another data server.
pub type ReplyFuture<'a> = Pin<Box<dyn Future<Output = FsResult<DsReply>> + Send + 'a>>;

/// How a primary reaches the other replicas' data servers.
pub trait Sender: Send + Sync {
    fn send(&self, call: DsCall, payload: Bytes) -> ReplyFuture<'_>;
    /// Whether data server `ds` answers a ping within `within` (it is up, if slow).
    fn alive(&self, ds: DsId, within: Duration) -> BoxFuture<'_, bool>;
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
            // A peer restarted since the last call is not one that missed it: once more on a new
            // connection (calls passed on are safe to repeat).
            Ok(peer.call_chunked_resent::<DsCall, DsReply>(&call, payload).await?.0)
        })
    }

    fn alive(&self, ds: DsId, within: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(peer) = self.peers.get(&ds) else { return false };
            let call = DsCall::new(ds, DsRequest::Ping);
            let ping = peer.call_chunked_resent::<DsCall, DsReply>(&call, Bytes::new());
            matches!(tokio::time::timeout(within, ping).await, Ok(Ok((DsReply::Pong { .. }, _))))
        })
    }
}

/// How a primary has the MDS mark replicas that missed a call stale (returns the layout generation
/// after the mark).
pub trait Marker: Send + Sync {
    /// `logs`: for each of `missed`, the [`MissedLog`] this server keeps of what it misses (0: none).
    fn mark_stale(&self, from: StripeTarget, missed: Vec<StripeTarget>, logs: Vec<u64>)
        -> BoxFuture<'_, FsResult<u64>>;
}

/// The MDS over QUIC.
pub struct MdsMarker {
    pub peer: tessera_proto::rpc::MdsPeers,
}

impl Marker for MdsMarker {
    fn mark_stale(
        &self,
        from: StripeTarget,
        missed: Vec<StripeTarget>,
        logs: Vec<u64>,
    ) -> BoxFuture<'_, FsResult<u64>> {
        Box::pin(async move {
            let call = MdsCall {
                caller: Caller::root(),
                origin: Origin::default(),
                req: MdsRequest::MirrorMarkStale { from, missed, logs },
                seq: 0,
            };
            match self.peer.send_once(&call).await? {
                MdsReply::MirrorMarked { gen } => Ok(gen),
                other => Err(FsError::protocol(format!("MDS answered MirrorMarkStale with {other:?}"))),
            }
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
    req.object().filter(|_| is_replicated(req))
}

/// `req` about `object` instead.
fn with_object(req: &DsRequest, to: ObjectId) -> DsRequest {
    let mut r = req.clone();
    if let Some(o) = r.object_mut() {
        *o = to;
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

/// The object ranges `[start, end)` a request changes here, a truncate's included (from its size on).
pub fn changed_ranges(req: &DsRequest, payload_len: usize) -> Vec<(u64, u64)> {
    match req {
        DsRequest::Truncate { size, .. } => vec![(*size, u64::MAX)],
        r => ranges_of(r, payload_len),
    }
}

/// Most objects with a [`MissedLog`] at once on one server (more are resynced whole).
pub const MAX_LOGGED_OBJECTS: usize = 1 << 16;

/// Most separate ranges one log keeps (more are merged into one from the first on: still all it missed).
pub const MAX_LOGGED_RANGES: usize = 1024;

/// What replicas this primary marked stale have missed since (see the module doc): per object and
/// replica, a log named by a random id, holding every range of the object changed here since it was
/// opened. In memory: a restarted server has none, and its replicas are resynced whole.
#[derive(Default)]
pub struct MissedLog {
    logs: Mutex<HashMap<ObjectId, Vec<Missed>>>,
}

struct Missed {
    replica: StripeTarget,
    id: u64,
    ranges: rangemap::RangeSet<u64>,
}

impl Missed {
    fn add(&mut self, ranges: &[(u64, u64)]) {
        for &(a, b) in ranges.iter().filter(|(a, b)| a < b) {
            self.ranges.insert(a..b);
        }
        if self.ranges.len() > MAX_LOGGED_RANGES {
            let from = self.ranges.iter().next().map_or(0, |r| r.start);
            self.ranges = std::iter::once(from..u64::MAX).collect();
        }
    }
}

impl MissedLog {
    fn logs(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, Vec<Missed>>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The log of what `replica` of `object` misses, with `ranges` in it: the one open, or a new one.
    /// Its id, or 0 when there are too many logs already.
    pub fn open(&self, object: ObjectId, replica: StripeTarget, ranges: &[(u64, u64)]) -> u64 {
        let mut logs = self.logs();
        if !logs.contains_key(&object) && logs.len() >= MAX_LOGGED_OBJECTS {
            return 0;
        }
        let of = logs.entry(object).or_default();
        let i = match of.iter().position(|m| m.replica == replica) {
            Some(i) => i,
            None => {
                let id = rand::random::<u64>().max(1);
                of.push(Missed { replica, id, ranges: rangemap::RangeSet::new() });
                of.len() - 1
            }
        };
        of[i].add(ranges);
        of[i].id
    }

    /// `object` changed here in `ranges`: in every log of it.
    pub fn record(&self, object: ObjectId, ranges: &[(u64, u64)]) {
        let mut logs = self.logs();
        if let Some(of) = logs.get_mut(&object) {
            for m in of {
                m.add(ranges);
            }
        }
    }

    /// The ranges of log `id` of `replica` of `object`, if it is open.
    pub fn ranges(&self, object: ObjectId, replica: StripeTarget, id: u64) -> Option<Vec<(u64, u64)>> {
        let logs = self.logs();
        let m = logs.get(&object)?.iter().find(|m| m.replica == replica && m.id == id)?;
        Some(m.ranges.iter().map(|r| (r.start, r.end)).collect())
    }

    /// Log `id` of `replica` of `object` has served its resync.
    pub fn close(&self, object: ObjectId, replica: StripeTarget, id: u64) {
        let mut logs = self.logs();
        if let Some(of) = logs.get_mut(&object) {
            of.retain(|m| !(m.replica == replica && m.id == id));
            if of.is_empty() {
                logs.remove(&object);
            }
        }
    }

    /// `object` was removed here.
    pub fn forget(&self, object: ObjectId) {
        self.logs().remove(&object);
    }

    /// Objects with a log.
    pub fn len(&self) -> usize {
        self.logs().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    let cut = matches!(req, DsRequest::Truncate { .. });
    if m.from_primary && !((is_replicated(req) || cut) && m.replicas.is_empty() && m.failed.is_empty()) {
        return Err(FsError::perm(
            "a primary passes on only writes, fallocate, fsync and a resync's cut, to nobody further",
        ));
    }
    if cut && !m.from_primary {
        return Err(FsError::perm("only a primary's resync cuts an object with a mirrored call"));
    }
    if m.failed.len() >= MAX_MIRRORS as usize || (!m.failed.is_empty() && !is_replicated(req)) {
        return Err(FsError::invalid("a takeover names at most M - 1 failed replicas, on writes, fallocate and fsync"));
    }
    if m.failed.iter().chain(&m.replicas).any(|r| m.failed.contains(r) && m.replicas.contains(r)) {
        return Err(FsError::invalid("a replica both failed and to be written"));
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
    /// This data server.
    me: DsId,
    /// `None`: a replica that misses a call fails it (no MDS to mark it stale).
    marker: Option<Arc<dyn Marker>>,
    /// How long after its own write a primary waits for the other replicas.
    grace: Duration,
    /// Per object: the replicas to write as of a layout generation, when this primary knows better than
    /// clients holding an older layout (it marked some stale, or a resync began).
    known: Mutex<HashMap<ObjectId, (u64, Vec<StripeTarget>)>>,
    /// Servers that did not answer a ping and have not answered a call since: a replica there that has
    /// not answered by the time the local write is done is pinged at once, without the grace (a
    /// writer touching many stripes on a dead server would otherwise wait the grace once per stripe).
    down: Mutex<std::collections::HashSet<DsId>>,
    /// What the replicas it marked stale missed since.
    pub missed: MissedLog,
}

impl Replicator {
    pub fn new(sender: Arc<dyn Sender>) -> Replicator {
        Replicator {
            ordering: Ordering::default(),
            sender,
            me: 0,
            marker: None,
            grace: Duration::from_secs(1),
            known: Mutex::default(),
            down: Mutex::default(),
            missed: MissedLog::default(),
        }
    }

    /// Replicas that miss a call are marked stale through `marker` (as data server `me`), after `grace`.
    pub fn with_marker(self, me: DsId, marker: Arc<dyn Marker>, grace: Duration) -> Replicator {
        Replicator { me, marker: Some(marker), grace, ..self }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, (u64, Vec<StripeTarget>)>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The replicas a call about `object` goes to: the client's, unless this primary knows of a later
    /// generation. What it knows is kept (not dropped when one client catches up: another may still
    /// hold an older layout, whose list would leave a resyncing replica out).
    fn replicas_for(&self, object: ObjectId, m: &MirrorCall) -> Vec<StripeTarget> {
        match self.known().get(&object) {
            Some((gen, list)) if *gen > m.gen => list.clone(),
            _ => m.replicas.clone(),
        }
    }

    /// Whether a call about `object` passed on by a primary as of layout generation `gen` comes from
    /// one deposed since: this server served `object` as its primary at a later generation (it took
    /// the stripe over, or marked or resynced replicas as its primary). Such a call, late from a primary
    /// that was slow rather than down, would overwrite writes made since (the ordering point moved).
    pub fn deposes(&self, object: ObjectId, gen: u64) -> bool {
        self.known().get(&object).is_some_and(|(known, _)| *known > gen)
    }

    /// Whether `ds` failed its last ping and has answered nothing since.
    pub fn is_down(&self, ds: DsId) -> bool {
        self.down.lock().unwrap_or_else(|p| p.into_inner()).contains(&ds)
    }

    fn note(&self, ds: DsId, up: bool) {
        let mut down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        if up {
            down.remove(&ds);
        } else if down.insert(ds) {
            tracing::info!(ds, "data server does not answer: its replicas miss calls without the grace");
        }
    }

    fn learn(&self, object: ObjectId, gen: u64, replicas: Vec<StripeTarget>) {
        let mut known = self.known();
        match known.get(&object) {
            Some((g, _)) if *g > gen => {}
            _ => {
                known.insert(object, (gen, replicas));
            }
        }
    }

    /// Has the MDS mark `missed` stale, this server's `object` reporting, with the logs this server
    /// keeps of what they miss (`logs`, one per replica; empty: none).
    async fn mark(&self, object: ObjectId, missed: Vec<StripeTarget>, logs: Vec<u64>) -> FsResult<u64> {
        let marker =
            self.marker.as_ref().ok_or_else(|| FsError::unavailable("no MDS to mark missed replicas stale"))?;
        marker.mark_stale(StripeTarget { ds: self.me, object }, missed, logs).await
    }

    /// A takeover (see the module doc): the replicas the client could not reach, the primary among
    /// them, are marked stale before this server serves the call as the primary. No log: a primary that
    /// failed may hold writes that reached nobody else, so it is resynced whole.
    pub async fn take_over(&self, object: ObjectId, m: &MirrorCall) -> FsResult<()> {
        let gen = self.mark(object, m.failed.clone(), Vec::new()).await?;
        let left: Vec<StripeTarget> = m.replicas.iter().copied().filter(|r| !m.failed.contains(r)).collect();
        self.learn(object, gen, left);
        Ok(())
    }

    /// Serves a mirrored call at its primary: holds its ranges, applies it here (`local`) while passing
    /// it on to every other replica, and answers with the local reply once every replica has it or
    /// those that have not answered within the grace after the local write are marked stale (the first
    /// failure otherwise).
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
        let replicas = self.replicas_for(object, &m);
        let (done_tx, done_rx) = tokio::sync::watch::channel(None::<Instant>);
        let grace = self.grace;
        let passed = replicas.iter().map(|r| {
            let call = DsCall {
                ds: r.ds,
                req: with_object(&req, r.object),
                via: None,
                mirror: Some(MirrorCall {
                    gen: m.gen,
                    stripe: m.stripe,
                    replicas: Vec::new(),
                    from_primary: true,
                    failed: Vec::new(),
                }),
            };
            let target = *r;
            let sent = self.sender.send(call, payload.clone());
            let mut done = done_rx.clone();
            async move {
                // Until the grace after the local write has passed (none for a server known down)
                // and the replica's server does not answer a ping (a slow replica is waited for:
                // marking it would leave one copy).
                let sender = &self.sender;
                let deadline = async move {
                    let at = match done.wait_for(Option::is_some).await {
                        Ok(v) => v.unwrap_or_else(Instant::now),
                        Err(_) => Instant::now(),
                    };
                    if !self.is_down(target.ds) {
                        tokio::time::sleep_until(at + grace).await;
                    }
                    while sender.alive(target.ds, PING_WITHIN).await {
                        self.note(target.ds, true);
                        tokio::time::sleep(grace).await;
                    }
                    self.note(target.ds, false);
                };
                tokio::select! {
                    r = sent => {
                        if r.is_ok() {
                            self.note(target.ds, true);
                        }
                        (target, Some(r))
                    }
                    () = deadline => (target, None),
                }
            }
        });
        let local = async {
            let r = local.await;
            let _ = done_tx.send(Some(Instant::now()));
            r
        };
        let (mine, theirs) = futures::future::join(local, futures::future::join_all(passed)).await;
        if mine.0.is_err() {
            return mine;
        }
        let mut missed = Vec::new();
        let mut first_error = None;
        for (target, r) in theirs {
            match (r, &mine.0) {
                (Some(Ok(a)), Ok(b)) if same_outcome(&a, b) => continue,
                (Some(Ok(a)), _) => {
                    first_error.get_or_insert_with(|| {
                        FsError::io(format!("the replica on data server {} answered {a:?}", target.ds))
                    });
                }
                (Some(Err(e)), _) => {
                    first_error.get_or_insert_with(|| {
                        FsError::new(e.code, format!("replica on data server {}: {}", target.ds, e.detail))
                    });
                }
                (None, _) => {
                    first_error.get_or_insert_with(|| {
                        FsError::new(
                            tessera_proto::error::ErrorCode::TimedOut,
                            format!(
                                "replica on data server {} did not answer within {} ms nor a ping",
                                target.ds,
                                grace.as_millis()
                            ),
                        )
                    });
                }
            }
            missed.push(target);
        }
        if missed.is_empty() {
            return mine;
        }
        let e = first_error.unwrap_or_else(|| FsError::io("a replica missed the call"));
        if self.marker.is_none() {
            return (Err(e), Bytes::new());
        }
        tracing::warn!(object, missed = ?missed, "replicas missed a call ({e}): marking them stale");
        // Logged from before the mark on: a client that learns of it writes here without them.
        let logs = missed.iter().map(|r| self.missed.open(object, *r, &ranges)).collect();
        match self.mark(object, missed.clone(), logs).await {
            Ok(gen) => {
                let left = replicas.into_iter().filter(|r| !missed.contains(r)).collect();
                self.learn(object, gen, left);
                mine
            }
            Err(me) => {
                (Err(FsError::new(me.code, format!("{e}; and marking it stale failed: {}", me.detail))), Bytes::new())
            }
        }
    }

    /// A resync (see the module doc) of this server's `object` to replica `to`, `rate` bytes/s at most
    /// (0: unthrottled): `read(offset, len)` reads the object here, `size()` its size. Returns the bytes
    /// copied.
    pub async fn resync<R, RF, S, SF>(&self, order: ResyncOrder, rate: u64, read: R, size: S) -> FsResult<u64>
    where
        R: Fn(u64, u32) -> RF,
        RF: Future<Output = FsResult<Bytes>>,
        S: Fn() -> SF,
        SF: Future<Output = FsResult<u64>>,
    {
        let ResyncOrder { object, to, gen, replicas, log } = order;
        if to.ds == self.me || !replicas.contains(&to) {
            return Err(FsError::invalid(format!(
                "resync to {}:{} which is not among the replicas to write",
                to.ds, to.object
            )));
        }
        // The replica joins the calls while none is in flight (one in flight that leaves it out has
        // its ranges logged before it is done, so the copy's list has them), and what to copy is read.
        let logged = {
            let _all = self.ordering.hold(object, &[(0, u64::MAX)]).await?;
            self.learn(object, gen, replicas);
            (log != 0).then(|| self.missed.ranges(object, to, log)).flatten()
        };
        if log != 0 && logged.is_none() {
            tracing::info!(object, to = ?to, "no log of what the replica missed here (restarted since?): copied whole");
        }
        let pass = |req: DsRequest, payload: Bytes| {
            let mirror = MirrorCall { gen, stripe: 0, replicas: Vec::new(), from_primary: true, failed: Vec::new() };
            self.sender.send(DsCall { ds: to.ds, req, via: None, mirror: Some(mirror) }, payload)
        };
        let start = Instant::now();
        let mut copied = 0u64;
        for (from, end) in logged.clone().unwrap_or_else(|| vec![(0, u64::MAX)]) {
            let mut offset = from;
            while offset < end {
                let want = (end - offset).min(u64::from(RESYNC_CHUNK)) as u32;
                let held = self.ordering.hold(object, &[(offset, offset + u64::from(want))]).await?;
                let data = read(offset, want).await?;
                let n = data.len();
                if n > 0 {
                    let tag = resync_tag();
                    match pass(DsRequest::Write { tag, object: to.object, offset, sync: false }, data).await? {
                        DsReply::Written { len } if len as usize == n => {}
                        r => return Err(FsError::io(format!("resync write to data server {} answered {r:?}", to.ds))),
                    }
                }
                drop(held);
                copied += n as u64;
                if n < want as usize {
                    break;
                }
                offset += n as u64;
                if rate > 0 {
                    let due = start + Duration::from_secs_f64(copied as f64 / rate as f64);
                    tokio::time::sleep_until(due).await;
                }
            }
        }
        // The replica's size is the object's, cut while nothing else changes it; then made durable.
        let _all = self.ordering.hold(object, &[(0, u64::MAX)]).await?;
        let size = size().await?;
        match pass(DsRequest::Truncate { object: to.object, size }, Bytes::new()).await? {
            DsReply::Ok => {}
            r => return Err(FsError::io(format!("resync cut on data server {} answered {r:?}", to.ds))),
        }
        match pass(DsRequest::Fsync { tag: resync_tag(), object: to.object }, Bytes::new()).await? {
            DsReply::Ok => {
                if logged.is_some() {
                    self.missed.close(object, to, log);
                }
                Ok(copied)
            }
            r => Err(FsError::io(format!("resync fsync on data server {} answered {r:?}", to.ds))),
        }
    }
}

/// A resync the MDS asked for ([`DsRequest::Resync`]).
pub struct ResyncOrder {
    pub object: ObjectId,
    pub to: StripeTarget,
    pub gen: u64,
    pub replicas: Vec<StripeTarget>,
    /// The [`MissedLog`] of what `to` missed here (0: copy the whole object).
    pub log: u64,
}

/// How soon a replica past the grace must answer a ping to count as up (and be waited for).
pub const PING_WITHIN: Duration = Duration::from_millis(500);

/// What a resync copies per step (one range held at a time).
pub const RESYNC_CHUNK: u32 = 1 << 20;

/// The tag of a resync's requests: job `resync`.
pub fn resync_tag() -> tessera_proto::IoTag {
    tessera_proto::IoTag { origin: Origin { job: "resync".into(), ..Origin::default() }, ino: 0 }
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

        fn alive(&self, ds: DsId, _within: Duration) -> BoxFuture<'_, bool> {
            let up = !self.down.lock().unwrap().contains(&ds) && self.servers.contains_key(&ds);
            Box::pin(async move { up })
        }
    }

    /// A primary on data server `me` passing calls on to the servers `others` (in this process, those
    /// in `down` unreachable), with a marker recording its marks when `marked` (else none: no MDS).
    struct Fixture {
        _dirs: Vec<tempfile::TempDir>,
        others: Arc<InProcess>,
        marks: Arc<Marks>,
        rep: Arc<Replicator>,
        primary: Arc<crate::server::DsService>,
    }

    fn fixture(me: DsId, others: &[DsId], down: &[DsId], marked: bool) -> Fixture {
        use crate::server::tests::service_with;
        use crate::server::Setup;
        let mut dirs = Vec::new();
        let mut servers = HashMap::new();
        for &ds in others {
            let (d, s) = service_with(Setup::new(ds));
            dirs.push(d);
            servers.insert(ds, Arc::new(s));
        }
        let others = Arc::new(InProcess { servers, down: Mutex::new(down.to_vec()) });
        let marks = Arc::new(Marks::default());
        let mut rep = Replicator::new(others.clone());
        if marked {
            rep = rep.with_marker(me, marks.clone(), Duration::from_millis(50));
        }
        let rep = Arc::new(rep);
        let (d, s) = service_with(Setup::new(me));
        dirs.push(d);
        let primary = Arc::new(s.with_replicator(rep.clone()));
        Fixture { _dirs: dirs, others, marks, rep, primary }
    }

    #[tokio::test]
    async fn a_primary_writes_every_replica_in_one_order_and_fails_when_one_is_missing() {
        use crate::server::tests::{service_with, tag};
        use crate::server::Setup;
        use tessera_proto::layout::StripeTarget;
        let Fixture { others, primary, _dirs, .. } = fixture(0, &[1, 2], &[], false);
        let replicas = vec![StripeTarget { ds: 1, object: 11 }, StripeTarget { ds: 2, object: 12 }];
        let m = MirrorCall { gen: 0, stripe: 0, replicas: replicas.clone(), from_primary: false, failed: vec![] };
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
        let m = MirrorCall {
            gen: 0,
            stripe: 0,
            replicas: vec![StripeTarget { ds: 1, object: 11 }],
            from_primary: false,
            failed: vec![],
        };
        let call = DsCall { ds: 3, req, via: None, mirror: Some(m) };
        assert!(s3.call(Role::Client, call, Bytes::from_static(b"x")).await.0.is_err());
    }

    /// Records the marks (and the logs they name), answering generation 1, 2, ...
    #[derive(Default)]
    struct Marks(Mutex<Vec<(StripeTarget, Vec<StripeTarget>)>>, Mutex<Vec<Vec<u64>>>);

    impl Marker for Marks {
        fn mark_stale(
            &self,
            from: StripeTarget,
            missed: Vec<StripeTarget>,
            logs: Vec<u64>,
        ) -> BoxFuture<'_, FsResult<u64>> {
            self.1.lock().unwrap().push(logs);
            let mut m = self.0.lock().unwrap();
            m.push((from, missed));
            let gen = m.len() as u64;
            Box::pin(async move { Ok(gen) })
        }
    }

    #[tokio::test]
    async fn a_replica_that_misses_a_write_is_marked_stale_and_left_out_until_the_client_catches_up() {
        use crate::server::tests::{service_with, tag};
        use crate::server::Setup;
        let Fixture { others, marks, primary, _dirs, .. } = fixture(0, &[1, 2], &[2], true);
        let (r1, r2) = (StripeTarget { ds: 1, object: 11 }, StripeTarget { ds: 2, object: 12 });
        let m = MirrorCall { gen: 0, stripe: 0, replicas: vec![r1, r2], from_primary: false, failed: vec![] };
        let write = |m: MirrorCall, byte: u8| {
            let p = primary.clone();
            async move {
                let req = DsRequest::Write { tag: tag("j"), object: 10, offset: 0, sync: false };
                p.call(Role::Client, DsCall { ds: 0, req, via: None, mirror: Some(m) }, Bytes::from(vec![byte; 100]))
                    .await
                    .0
            }
        };
        // Server 2 is down: the write is acknowledged once 2 is marked stale, reported by the primary.
        write(m.clone(), 1).await.unwrap();
        assert_eq!(*marks.0.lock().unwrap(), vec![(StripeTarget { ds: 0, object: 10 }, vec![r2])]);
        // A client with the old layout (generation 0): 2 is left out, no second mark.
        write(m.clone(), 2).await.unwrap();
        assert_eq!(marks.0.lock().unwrap().len(), 1);
        // A client with generation 1 names only 1: as it says.
        let caught_up = MirrorCall { gen: 1, replicas: vec![r1], ..m.clone() };
        write(caught_up, 3).await.unwrap();
        let read = |ds: DsId, object| {
            let s = others.servers[&ds].clone();
            async move {
                let call = DsCall::new(ds, DsRequest::Read { tag: tag("j"), object, offset: 0, len: 100 });
                s.call(Role::Client, call, Bytes::new()).await
            }
        };
        assert_eq!(read(1, 11).await.1, Bytes::from(vec![3u8; 100]));
        // Without a marker (no MDS to tell) a missed replica fails the call.
        let (_d4, s4) = service_with(Setup::new(4));
        let no_marker = Arc::new(s4.with_replicator(Arc::new(Replicator::new(others.clone()))));
        let req = DsRequest::Write { tag: tag("j"), object: 40, offset: 0, sync: false };
        let m4 = MirrorCall { replicas: vec![r2], ..m.clone() };
        let e = no_marker
            .call(Role::Client, DsCall { ds: 4, req, via: None, mirror: Some(m4) }, Bytes::from_static(b"x"))
            .await
            .0;
        assert!(e.is_err());
    }

    /// A client whose layout shows every other replica stale sends its writes with none to pass on; once
    /// the primary has been told to resync a replica (a later generation), those writes reach it too,
    /// else the replica would come out of its resync in sync without them.
    #[tokio::test]
    async fn a_write_naming_no_replica_still_reaches_one_being_resynced() {
        use crate::server::tests::tag;
        let Fixture { others, rep, primary, _dirs, .. } = fixture(0, &[1], &[], true);
        let r1 = StripeTarget { ds: 1, object: 11 };
        // The resync of r1 began at generation 5 (the MDS's order): from now on every write goes there.
        rep.learn(10, 5, vec![r1]);
        let stale_view = MirrorCall { gen: 4, stripe: 0, replicas: vec![], from_primary: false, failed: vec![] };
        let req = DsRequest::Write { tag: tag("j"), object: 10, offset: 0, sync: false };
        let call = DsCall { ds: 0, req, via: None, mirror: Some(stale_view) };
        primary.call(Role::Client, call, Bytes::from_static(b"late")).await.0.unwrap();
        let read = DsCall::new(1, DsRequest::Read { tag: tag("j"), object: 11, offset: 0, len: 10 });
        assert_eq!(others.servers[&1].call(Role::Client, read, Bytes::new()).await.1, Bytes::from_static(b"late"));
    }

    /// A replica that missed writes while its server was down is resynced with only the ranges changed
    /// at the primary since it was marked (writes it missed, and a cut), and comes out identical; the
    /// log is then closed. Without the log (0, or one the primary no longer has) the object is copied
    /// whole. A takeover keeps no log: a failed primary may hold writes no other replica has.
    #[tokio::test]
    async fn a_resync_copies_only_what_the_replica_missed_when_the_primary_logged_it() {
        use crate::server::tests::{service_with, tag};
        use crate::server::Setup;
        let Fixture { others, marks, rep, primary, _dirs } = fixture(0, &[1], &[], true);
        let r1 = StripeTarget { ds: 1, object: 11 };
        let m = MirrorCall { gen: 0, stripe: 0, replicas: vec![r1], from_primary: false, failed: vec![] };
        let write = |offset: u64, data: Vec<u8>| {
            let (p, m) = (primary.clone(), m.clone());
            async move {
                let req = DsRequest::Write { tag: tag("j"), object: 10, offset, sync: false };
                p.call(Role::Client, DsCall { ds: 0, req, via: None, mirror: Some(m) }, Bytes::from(data)).await.0
            }
        };
        const MIB: u64 = 1 << 20;
        write(0, vec![1; 3 * MIB as usize]).await.unwrap();
        // Server 1 down: two writes missed (the second sent as a client that knows, naming nobody).
        others.down.lock().unwrap().push(1);
        write(MIB + 100, vec![2; 5000]).await.unwrap();
        let logs = marks.1.lock().unwrap().clone();
        assert_eq!(logs.len(), 1);
        let log = logs[0][0];
        assert_ne!(log, 0, "the primary names the log it keeps");
        let caught_up = MirrorCall { gen: 1, replicas: vec![], ..m.clone() };
        let req = DsRequest::Write { tag: tag("j"), object: 10, offset: 2 * MIB + MIB / 2, sync: false };
        let call = DsCall { ds: 0, req, via: None, mirror: Some(caught_up) };
        primary.call(Role::Client, call, Bytes::from(vec![3; 1000])).await.0.unwrap();
        others.down.lock().unwrap().clear();
        assert_eq!(
            rep.missed.ranges(10, r1, log).unwrap(),
            vec![(MIB + 100, MIB + 5100), (2 * MIB + MIB / 2, 2 * MIB + MIB / 2 + 1000)]
        );
        let resync = |log: u64| {
            let p = primary.clone();
            async move {
                let req = DsRequest::Resync { object: 10, to: r1, gen: 2, replicas: vec![r1], log };
                match p.call(Role::Mds, DsCall::new(0, req), Bytes::new()).await.0.unwrap() {
                    DsReply::Resynced { bytes } => bytes,
                    r => panic!("{r:?}"),
                }
            }
        };
        let read = |s: Arc<crate::server::DsService>, ds, object| async move {
            let call = DsCall::new(ds, DsRequest::Read { tag: tag("j"), object, offset: 0, len: 4 * MIB as u32 });
            let (r, data) = s.call(Role::Client, call, Bytes::new()).await;
            r.unwrap();
            data
        };
        assert_ne!(read(others.servers[&1].clone(), 1, 11).await, read(primary.clone(), 0, 10).await);
        assert_eq!(resync(log).await, 6000, "only the two ranges missed");
        assert_eq!(read(others.servers[&1].clone(), 1, 11).await, read(primary.clone(), 0, 10).await);
        assert!(rep.missed.is_empty(), "the log served its resync");
        // The same log again (closed now), or none: whole.
        assert_eq!(resync(log).await, 3 * MIB);
        assert_eq!(resync(0).await, 3 * MIB);
        // A takeover names no log.
        let (_d2, s2) = service_with(Setup::new(2));
        let marks2 = Arc::new(Marks::default());
        let rep2 = Replicator::new(others.clone()).with_marker(2, marks2.clone(), Duration::from_millis(50));
        let taker = s2.with_replicator(Arc::new(rep2));
        let m2 = MirrorCall {
            gen: 0,
            stripe: 0,
            replicas: vec![],
            from_primary: false,
            failed: vec![StripeTarget { ds: 0, object: 10 }],
        };
        let req = DsRequest::Write { tag: tag("j"), object: 12, offset: 0, sync: false };
        taker
            .call(Role::Client, DsCall { ds: 2, req, via: None, mirror: Some(m2) }, Bytes::from_static(b"t"))
            .await
            .0
            .unwrap();
        assert_eq!(*marks2.1.lock().unwrap(), vec![Vec::<u64>::new()]);
    }

    /// Changes logged past the cap are merged, never dropped: a log holds at least every range changed.
    #[test]
    fn a_full_log_merges_its_ranges_into_one() {
        let log = MissedLog::default();
        let r = StripeTarget { ds: 1, object: 11 };
        let id = log.open(10, r, &[(0, 10)]);
        for i in 1..=MAX_LOGGED_RANGES as u64 {
            log.record(10, &[(i * 100, i * 100 + 10)]);
        }
        assert_eq!(log.ranges(10, r, id).unwrap(), vec![(0, u64::MAX)]);
        log.record(11, &[(0, 1)]);
        assert!(log.ranges(11, r, id).is_none(), "objects without a log are not logged");
        assert_eq!(log.open(10, r, &[]), id, "one log per replica, reopened");
        log.forget(10);
        assert!(log.is_empty());
    }

    #[tokio::test]
    async fn a_takeover_marks_the_failed_primary_before_it_writes() {
        use crate::server::tests::tag;
        let Fixture { others, marks, primary: r1, _dirs, .. } = fixture(1, &[2], &[], true);
        let (p, r2) = (StripeTarget { ds: 0, object: 10 }, StripeTarget { ds: 2, object: 12 });
        let m = MirrorCall { gen: 0, stripe: 0, replicas: vec![r2], from_primary: false, failed: vec![p] };
        let req = DsRequest::Write { tag: tag("j"), object: 11, offset: 0, sync: false };
        let r = r1
            .call(Role::Client, DsCall { ds: 1, req, via: None, mirror: Some(m) }, Bytes::from_static(b"abc"))
            .await
            .0;
        assert_eq!(r.unwrap(), DsReply::Written { len: 3 });
        assert_eq!(*marks.0.lock().unwrap(), vec![(StripeTarget { ds: 1, object: 11 }, vec![p])]);
        let call = DsCall::new(2, DsRequest::Read { tag: tag("j"), object: 12, offset: 0, len: 10 });
        assert_eq!(others.servers[&2].call(Role::Client, call, Bytes::new()).await.1, Bytes::from_static(b"abc"));
        // The old primary was slow, not down: a call it passes on late (ordered by it, as of the layout
        // before the takeover) is refused; one of the takeover's generation or later is not.
        let passed = |gen: u64| {
            let req = DsRequest::Write { tag: tag("j"), object: 11, offset: 0, sync: false };
            let m = MirrorCall { gen, stripe: 0, replicas: vec![], from_primary: true, failed: vec![] };
            DsCall { ds: 1, req, via: None, mirror: Some(m) }
        };
        let e = r1.call(Role::Ds, passed(0), Bytes::from_static(b"old")).await.0.unwrap_err();
        assert_eq!(e.code, tessera_proto::error::ErrorCode::Stale, "{e}");
        r1.call(Role::Ds, passed(1), Bytes::from_static(b"new")).await.0.unwrap();
    }

    /// Data servers killed with their connections still open: calls to them never come back and
    /// pings are not answered.
    struct Silent;

    impl Sender for Silent {
        fn send(&self, _call: DsCall, _payload: Bytes) -> ReplyFuture<'_> {
            Box::pin(std::future::pending())
        }

        fn alive(&self, _ds: DsId, _within: Duration) -> BoxFuture<'_, bool> {
            Box::pin(async { false })
        }
    }

    /// The first call that misses a dead server's replica waits the grace; once the server failed a
    /// ping, calls about other objects with replicas there do not (a writer over many stripes would
    /// otherwise pause a grace per stripe). Virtual time: the grace is a minute.
    #[tokio::test(start_paused = true)]
    async fn a_server_that_failed_a_ping_is_not_waited_the_grace_for_again() {
        use crate::server::tests::{service_with, tag};
        use crate::server::Setup;
        let (_d0, s0) = service_with(Setup::new(0));
        let marks = Arc::new(Marks::default());
        let grace = Duration::from_secs(60);
        let rep = Arc::new(Replicator::new(Arc::new(Silent)).with_marker(0, marks.clone(), grace));
        let primary = Arc::new(s0.with_replicator(rep.clone()));
        let write = |object, replica| {
            let p = primary.clone();
            let replicas = vec![StripeTarget { ds: 2, object: replica }];
            let m = MirrorCall { gen: 0, stripe: 0, replicas, from_primary: false, failed: vec![] };
            async move {
                let req = DsRequest::Write { tag: tag("j"), object, offset: 0, sync: false };
                p.call(Role::Client, DsCall { ds: 0, req, via: None, mirror: Some(m) }, Bytes::from_static(b"x"))
                    .await
                    .0
            }
        };
        assert!(!rep.is_down(2));
        let t = tokio::time::Instant::now();
        write(10, 12).await.unwrap();
        assert!(t.elapsed() >= grace, "the first miss was not waited for: {:?}", t.elapsed());
        assert!(rep.is_down(2), "a server that failed its ping is remembered");
        let t = tokio::time::Instant::now();
        write(20, 22).await.unwrap();
        assert!(t.elapsed() < grace, "a server known down was waited the grace for: {:?}", t.elapsed());
        let marked: Vec<_> = marks.0.lock().unwrap().iter().map(|(_, m)| m[0].object).collect();
        assert_eq!(marked, vec![12, 22]);
    }

    #[test]
    fn only_data_servers_pass_calls_on_and_only_replicated_ones() {
        let tag = crate::server::tests::tag("j");
        let w = DsRequest::Write { tag: tag.clone(), object: 1, offset: 0, sync: false };
        let r = DsRequest::Read { tag, object: 1, offset: 0, len: 1 };
        let t = |ds| tessera_proto::layout::StripeTarget { ds, object: 9 };
        let m =
            |replicas: Vec<_>, from_primary| MirrorCall { gen: 0, stripe: 0, replicas, from_primary, failed: vec![] };
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
