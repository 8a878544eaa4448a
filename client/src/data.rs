//! The data path: one RPC peer per data server with a bound on requests in flight, the splitting of a
//! file range into per-object requests of at most `max_request` bytes, and the reassembly of reads.

use crate::forward::Forwarding;
use bytes::Bytes;
use futures::future::try_join_all;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::config::{ClusterConfig, ReplicaRead};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::frame::MAX_PAYLOAD;
use tessera_proto::layout::{Layout, ReplicaState, StripeTarget, MIN_STRIPE_SIZE};
use tessera_proto::msg::{DsCall, DsReply, DsReport, DsRequest, Extent, MirrorCall, MAX_EXTENTS};
use tessera_proto::rpc::{RpcPeer, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::types::{DsId, IoTag, Role};
use tessera_proto::PROTOCOL_VERSION;
use tokio::sync::Semaphore;

/// How long a data server whose call failed for want of it is passed over for mirrored stripes' other
/// replicas. Only a server out of reach ([`FsError::is_unreachable`]) is: a lost connection is not (a
/// restarted server resets it, and the call was sent again), nor a replica refusing for now (stale, or
/// its server fenced: `Busy`).
pub const FAILED_MEMORY: Duration = Duration::from_secs(5);

/// Whether an error means the data server (or the replica there) cannot serve the call now, so another
/// replica should: it is down or unreachable, or its replica is not in sync.
pub fn replica_unusable(e: &FsError) -> bool {
    use tessera_proto::error::ErrorCode as C;
    matches!(e.code, C::Unavailable | C::TimedOut | C::Stale | C::Busy | C::Io)
}

/// One data request's share of a file range: a contiguous run inside one object (the stripe math's chunk).
pub type Piece = tessera_proto::layout::Chunk;

/// One write of a batch for [`DataPlane::write_runs`]: `data` at file offset `offset`, for `tag`.
#[derive(Clone, Debug)]
pub struct WriteRun {
    pub tag: IoTag,
    pub offset: u64,
    pub data: Bytes,
}

/// Splits `[offset, offset+len)` into requests: per-object chunks from the stripe math, runs that are
/// contiguous in both the file and the object merged (1-wide layouts), then cut to `max_request`.
pub fn plan(layout: &Layout, offset: u64, len: u64, max_request: u64) -> Vec<Piece> {
    let max_request = max_request.max(1);
    let mut merged: Vec<Piece> = Vec::new();
    for ch in layout.chunks(offset, len) {
        if let Some(last) = merged.last_mut() {
            if last.stripe == ch.stripe
                && last.file_offset + last.len == ch.file_offset
                && last.object_offset + last.len == ch.object_offset
            {
                last.len += ch.len;
                continue;
            }
        }
        merged.push(ch);
    }
    let mut out = Vec::with_capacity(merged.len());
    for p in merged {
        let mut done = 0;
        while done < p.len {
            let n = (p.len - done).min(max_request);
            out.push(Piece {
                stripe: p.stripe,
                object_offset: p.object_offset + done,
                file_offset: p.file_offset + done,
                len: n,
            });
            done += n;
        }
    }
    out
}

/// The replies of a read of `[offset, offset+len)`, kept in the pieces they arrived in, in file order:
/// a range inside one piece is handed out without a copy, and a range across pieces as a list of them
/// (a FUSE reply writes that list with one `writev`). A reply shorter than its request (the object ends
/// early, i.e. a hole inside the file) reads as zeros for the rest.
#[derive(Clone, Debug, Default)]
pub struct ReadData {
    offset: u64,
    len: u64,
    /// (file offset, bytes), sorted by file offset, non-overlapping, none empty.
    segments: Vec<(u64, Bytes)>,
}

/// What holes are read from.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

impl ReadData {
    /// Checks each piece's reply (its chunks, in order) against the piece: none longer than asked, all
    /// inside the range.
    pub fn new(offset: u64, len: u64, parts: Vec<(Piece, Vec<Bytes>)>) -> FsResult<ReadData> {
        let mut segments = Vec::with_capacity(parts.iter().map(|(_, c)| c.len()).sum());
        for (p, chunks) in parts {
            let got: u64 = chunks.iter().map(|c| c.len() as u64).sum();
            if got > p.len {
                return Err(FsError::protocol(format!(
                    "data server returned {got} bytes for a read of {} at object offset {}",
                    p.len, p.object_offset
                )));
            }
            if p.file_offset < offset || p.file_offset + p.len > offset + len {
                return Err(FsError::invalid("read piece outside the requested range"));
            }
            let mut at = p.file_offset;
            for c in chunks.into_iter().filter(|c| !c.is_empty()) {
                let n = c.len() as u64;
                segments.push((at, c));
                at += n;
            }
        }
        segments.sort_by_key(|&(at, _)| at);
        Ok(ReadData { offset, len, segments })
    }

    /// The file offset the data starts at.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of file range `[from, to)`, clamped to this read's range, as consecutive pieces that
    /// share the replies' buffers (holes are static zeros): nothing is copied.
    pub fn slices(&self, from: u64, to: u64) -> Vec<Bytes> {
        let from = from.max(self.offset);
        let to = to.min(self.offset + self.len);
        let mut out = Vec::new();
        let mut pos = from;
        let first = self.segments.partition_point(|(at, data)| at + data.len() as u64 <= from);
        for (at, data) in &self.segments[first..] {
            if pos >= to || *at >= to {
                break;
            }
            // Pieces do not overlap; if they did, the part already covered is skipped.
            let end = (at + data.len() as u64).min(to);
            if end <= pos {
                continue;
            }
            push_zeros(&mut out, at.saturating_sub(pos));
            let start = pos.max(*at);
            out.push(data.slice((start - at) as usize..(end - at) as usize));
            pos = end;
        }
        push_zeros(&mut out, to.saturating_sub(pos));
        out
    }

    /// [`ReadData::slices`] as one buffer: zero-copy when one piece holds the whole range.
    pub fn slice(&self, from: u64, to: u64) -> Bytes {
        tessera_proto::frame::concat(self.slices(from, to))
    }
}

/// One object's pieces, in order, cut into vectored requests of at most [`MAX_EXTENTS`] runs and
/// `max_bytes` bytes (`len`: a piece's bytes; a longer piece goes alone).
fn batches<T>(pieces: Vec<T>, len: impl Fn(&T) -> u64, max_bytes: u64) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    let mut bytes = 0u64;
    for p in pieces {
        let n = len(&p);
        if !batch.is_empty() && (batch.len() >= MAX_EXTENTS || bytes + n > max_bytes) {
            out.push(std::mem::take(&mut batch));
            bytes = 0;
        }
        bytes += n;
        batch.push(p);
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// A vectored read's reply whose payload is not the length its runs declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("declared {declared} bytes but sent {sent}")]
struct PayloadMismatch {
    declared: u64,
    sent: u64,
}

/// A vectored read's reply payload (in the chunks it arrived in) cut into its runs of `lens` bytes, without
/// copying; an error unless the lengths add up to exactly the payload.
fn split_chunks(chunks: Vec<Bytes>, lens: &[u32]) -> Result<Vec<Vec<Bytes>>, PayloadMismatch> {
    let sent: u64 = chunks.iter().map(|c| c.len() as u64).sum();
    let declared: u64 = lens.iter().map(|&l| u64::from(l)).sum();
    if sent != declared {
        return Err(PayloadMismatch { declared, sent });
    }
    let mut chunks = chunks.into_iter().filter(|c| !c.is_empty());
    let mut cur = Bytes::new();
    let mut out = Vec::with_capacity(lens.len());
    for &l in lens {
        let mut want = l as usize;
        let mut run = Vec::new();
        while want > 0 {
            if cur.is_empty() {
                // Cannot happen once the sums agree.
                cur = chunks.next().ok_or(PayloadMismatch { declared, sent })?;
            }
            let n = want.min(cur.len());
            run.push(cur.split_to(n));
            want -= n;
        }
        out.push(run);
    }
    Ok(out)
}

fn push_zeros(out: &mut Vec<Bytes>, mut n: u64) {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        out.push(Bytes::from_static(&ZEROS[..k as usize]));
        n -= k;
    }
}

/// One data server: its connection and the permits bounding this client's requests in flight to it.
pub struct DsConn {
    pub id: DsId,
    pub peer: RpcPeer,
    permits: Semaphore,
    max_inflight: usize,
    /// When a call to it last failed for want of the server (mirrored stripes go elsewhere meanwhile).
    failed_at: std::sync::Mutex<Option<Instant>>,
}

impl DsConn {
    /// An in-flight slot to this server (held for the whole call, whichever way it goes).
    async fn permit(&self) -> FsResult<tokio::sync::SemaphorePermit<'_>> {
        self.permits.acquire().await.map_err(|_| FsError::io("client is shutting down"))
    }

    /// A call that waits for an in-flight slot first, the reply's payload in the chunks it arrived in.
    async fn call_chunked(&self, call: &DsCall, payload: Bytes) -> FsResult<(DsReply, Vec<Bytes>)> {
        let _permit = self.permit().await?;
        // Data requests are safe to send twice: a server restarted since the last call is not a failure.
        self.peer.call_chunked_resent(call, payload).await
    }
}

/// How a data request reaches the data server it names: straight to it, or through a forwarding node
/// (ION) that passes the same call on (calls name their server).
pub enum Route {
    /// One connection and in-flight bound per data server.
    Direct(HashMap<DsId, Arc<DsConn>>),
    /// Through the client's forwarding node, with the same in-flight bound per data server; `direct`
    /// is where requests go when the forwarding nodes have failed and direct access is allowed.
    Forwarded { fwd: Arc<Forwarding>, direct: HashMap<DsId, Arc<DsConn>> },
}

impl Route {
    /// Through `fwd` when the cluster has forwarding nodes, else direct.
    pub fn new(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        cfg: &ClusterConfig,
        tuning: Tuning,
        fwd: Option<Arc<Forwarding>>,
    ) -> FsResult<Route> {
        let direct = Route::connections(endpoint, id, cfg, tuning)?;
        Ok(match fwd {
            Some(fwd) => Route::Forwarded { fwd, direct },
            None => Route::Direct(direct),
        })
    }

    /// Direct connections to every `[[ds]]` of the config (made on first use).
    pub fn direct(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        cfg: &ClusterConfig,
        tuning: Tuning,
    ) -> FsResult<Route> {
        Ok(Route::Direct(Route::connections(endpoint, id, cfg, tuning)?))
    }

    fn connections(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        cfg: &ClusterConfig,
        tuning: Tuning,
    ) -> FsResult<HashMap<DsId, Arc<DsConn>>> {
        let inflight = cfg.client.inflight_per_server.max(1) as usize;
        let mut servers = HashMap::new();
        for ds in &cfg.ds {
            // Resolved at connect time: a data server may come back at another address.
            let peer = RpcPeer::to_host(endpoint.clone(), id, Role::Ds, &ds.addr, tuning)?;
            let conn = DsConn {
                id: ds.id,
                peer,
                permits: Semaphore::new(inflight),
                max_inflight: inflight,
                failed_at: std::sync::Mutex::new(None),
            };
            servers.insert(ds.id, Arc::new(conn));
        }
        Ok(servers)
    }

    /// Data server ids, sorted.
    pub fn ids(&self) -> Vec<DsId> {
        let mut v: Vec<DsId> = match self {
            Route::Direct(servers) | Route::Forwarded { direct: servers, .. } => servers.keys().copied().collect(),
        };
        v.sort_unstable();
        v
    }

    fn direct_conn(servers: &HashMap<DsId, Arc<DsConn>>, ds: DsId) -> FsResult<&Arc<DsConn>> {
        servers
            .get(&ds)
            .ok_or_else(|| FsError::unavailable(format!("data server {ds} is not in the cluster configuration")))
    }

    /// Sends `req` to data server `ds`.
    pub async fn call(&self, ds: DsId, req: DsRequest, payload: Bytes) -> FsResult<(DsReply, Bytes)> {
        let app_len = payload.len() as u64;
        self.call_sized(ds, req, payload, app_len).await.map(|(r, chunks)| (r, tessera_proto::frame::concat(chunks)))
    }

    /// [`Route::call`] with the reply's payload in the chunks it arrived in.
    pub async fn call_chunked(&self, ds: DsId, req: DsRequest, payload: Bytes) -> FsResult<(DsReply, Vec<Bytes>)> {
        let app_len = payload.len() as u64;
        self.call_sized(ds, req, payload, app_len).await
    }

    /// [`Route::call_chunked`] for a request that is part of an application's read or write of
    /// `app_len` bytes (what a forwarding node records as the size leaving the client).
    pub async fn call_sized(
        &self,
        ds: DsId,
        req: DsRequest,
        payload: Bytes,
        app_len: u64,
    ) -> FsResult<(DsReply, Vec<Bytes>)> {
        self.send(DsCall::new(ds, req), payload, app_len).await
    }

    /// Requests this client has in flight to data server `ds` (0 for a server it does not know).
    pub fn in_flight(&self, ds: DsId) -> usize {
        let servers = match self {
            Route::Direct(servers) | Route::Forwarded { direct: servers, .. } => servers,
        };
        servers.get(&ds).map_or(0, |c| c.max_inflight.saturating_sub(c.permits.available_permits()))
    }

    fn conns(&self) -> &HashMap<DsId, Arc<DsConn>> {
        match self {
            Route::Direct(servers) | Route::Forwarded { direct: servers, .. } => servers,
        }
    }

    /// Notes that data server `ds` could not be reached just now.
    pub fn mark_failed(&self, ds: DsId) {
        if let Some(c) = self.conns().get(&ds) {
            *c.failed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        }
    }

    /// Whether a call to `ds` failed for want of the server within the last [`FAILED_MEMORY`].
    pub fn recently_failed(&self, ds: DsId) -> bool {
        self.conns().get(&ds).is_some_and(|c| {
            c.failed_at.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| t.elapsed() < FAILED_MEMORY)
        })
    }

    /// [`Route::call_sized`] of a whole call (a mirrored stripe's carries its [`MirrorCall`]).
    pub async fn send(&self, call: DsCall, payload: Bytes, app_len: u64) -> FsResult<(DsReply, Vec<Bytes>)> {
        let ds = call.ds;
        match self {
            Route::Direct(servers) => Route::direct_conn(servers, ds)?.call_chunked(&call, payload).await,
            Route::Forwarded { fwd, direct } => {
                let conn = Route::direct_conn(direct, ds)?;
                {
                    let _permit = conn.permit().await?;
                    if let Some(reply) = fwd.ds_call(&call, payload.clone(), app_len).await? {
                        return Ok(reply);
                    }
                }
                conn.call_chunked(&call, payload).await
            }
        }
    }

    /// The forwarding nodes, when requests go through them.
    pub fn forwarding(&self) -> Option<&Arc<Forwarding>> {
        match self {
            Route::Direct(_) => None,
            Route::Forwarded { fwd, .. } => Some(fwd),
        }
    }
}

/// The order in which a mirrored stripe's readable replicas (primary first) are tried. `Load`: by
/// `load` (servers that failed a moment ago last, then the fewest of this client's requests in flight),
/// ties broken round by stripe so that the stripes of one file spread over the replicas. `First`: as
/// given, the primary first.
pub fn replica_order<K: Ord>(
    mut replicas: Vec<StripeTarget>,
    stripe: usize,
    how: ReplicaRead,
    load: impl Fn(&StripeTarget) -> K,
) -> Vec<StripeTarget> {
    if how == ReplicaRead::Load && !replicas.is_empty() {
        let n = replicas.len();
        replicas.rotate_left(stripe % n);
        replicas.sort_by_key(|t| load(t));
    }
    replicas
}

/// Runs `read` on the replicas of `order` one after the other — the next when one fails, or also when
/// `hedge` has passed without an answer (then both run and the first answer is taken, the other
/// dropped) — and returns the replica that answered and its answer, or the last failure (`None`: no
/// replica at all).
pub async fn first_answer<T, F, Fut>(
    order: Vec<StripeTarget>,
    hedge: Option<Duration>,
    read: F,
) -> Result<(StripeTarget, T), Option<FsError>>
where
    F: Fn(StripeTarget) -> Fut,
    Fut: std::future::Future<Output = FsResult<T>>,
{
    use futures::stream::{FuturesUnordered, StreamExt};
    let mut order = order.into_iter().peekable();
    let start = |t: StripeTarget| {
        let reading = read(t);
        async move { (t, reading.await) }
    };
    let mut running = FuturesUnordered::new();
    let mut last = None;
    loop {
        if running.is_empty() {
            match order.next() {
                Some(t) => running.push(start(t)),
                None => return Err(last),
            }
        }
        // Nothing left to hedge with: wait for what runs.
        let hedged = match hedge.filter(|_| order.peek().is_some()) {
            Some(d) => futures::future::Either::Left(tokio::time::sleep(d)),
            None => futures::future::Either::Right(std::future::pending()),
        };
        tokio::select! {
            Some((target, r)) = running.next() => match r {
                Ok(v) => return Ok((target, v)),
                Err(e) => {
                    tracing::debug!(ds = target.ds, "replica read failed, trying the next: {e}");
                    last = Some(e);
                }
            },
            () = hedged => {
                if let Some(t) = order.next() {
                    tracing::debug!(ds = t.ds, "replica read slow: also reading the next replica");
                    running.push(start(t));
                }
            }
        }
    }
}

/// What a [`watch`]ed call came to: its answer, or — its server no longer holds its fence lease — the
/// call, still running.
pub enum Watched<F: std::future::Future> {
    Answered(F::Output),
    Lapsed(std::pin::Pin<Box<F>>),
}

/// Waits for `call`, a mirrored write to the server that is to serve it. Once `hedge` has passed without
/// an answer, asks `holds` whether that server still holds its fence lease at the MDS, and again every
/// quarter hedge: a server that lost it is down or cut off and refuses mirrored calls once the lease has
/// run out, so another replica may take the write over at once rather than after the dead connection's
/// idle timeout. A server that still holds it is only slow, and is waited for. Without a hedge, the call
/// as it goes.
pub async fn watch<F, H, HF>(call: F, hedge: Option<Duration>, holds: H) -> Watched<F>
where
    F: std::future::Future,
    H: Fn() -> HF,
    HF: std::future::Future<Output = bool>,
{
    let mut call = Box::pin(call);
    let Some(hedge) = hedge else { return Watched::Answered(call.await) };
    let lapsed = async {
        tokio::time::sleep(hedge).await;
        while holds().await {
            tokio::time::sleep(hedge / 4).await;
        }
    };
    let answer = tokio::select! {
        r = &mut call => Some(r),
        () = lapsed => None,
    };
    match answer {
        Some(r) => Watched::Answered(r),
        None => Watched::Lapsed(call),
    }
}

/// All data servers of the cluster, as seen by one client: requests go through its [`Route`].
pub struct DataPlane {
    route: Route,
    max_request: u64,
    /// Mirrored stripes: which replica is read, and after how long the next one is tried as well.
    replica_read: ReplicaRead,
    hedge: Option<Duration>,
    /// Asked whether a data server still holds its fence lease ([`watch`]); `None`: never taken for down
    /// on silence alone.
    mds: Option<crate::mds_client::MdsClient>,
    /// Its last answers, kept for a quarter hedge (many writes in flight to one server ask once).
    leases: std::sync::Mutex<HashMap<DsId, (Instant, bool)>>,
}

impl DataPlane {
    /// The data servers through `route`, requests cut at `cfg`'s `client.max_request`, replicas read
    /// as `client.replica_read` and `client.hedge_ms` say.
    pub fn new(route: Route, cfg: &ClusterConfig) -> DataPlane {
        let hedge = (cfg.client.hedge_ms > 0).then(|| Duration::from_millis(cfg.client.hedge_ms));
        DataPlane {
            route,
            max_request: effective_max_request(cfg.client.max_request),
            replica_read: cfg.client.replica_read,
            hedge,
            mds: None,
            leases: std::sync::Mutex::default(),
        }
    }

    /// Mirrored writes a server has not answered within `client.hedge_ms` are taken over by another
    /// replica once `mds` says that server no longer holds its fence lease ([`watch`]).
    pub fn with_lease_oracle(self, mds: crate::mds_client::MdsClient) -> DataPlane {
        DataPlane { mds: Some(mds), ..self }
    }

    /// Whether data server `ds` holds its fence lease, as the MDS last said within a quarter hedge; an
    /// MDS that cannot be asked counts as yes (silence alone takes no server for down).
    async fn holds_lease(&self, ds: DsId) -> bool {
        let Some(mds) = &self.mds else { return true };
        let fresh_for = self.hedge.unwrap_or_default() / 4;
        let seen = self.leases.lock().unwrap_or_else(|p| p.into_inner()).get(&ds).copied();
        if let Some((_, held)) = seen.filter(|(at, _)| at.elapsed() < fresh_for) {
            return held;
        }
        let held = match mds.mirror_lease(ds).await {
            Ok(held) => held,
            Err(e) => {
                tracing::debug!(ds, "MDS not asked whether the server holds its lease: {e}");
                true
            }
        };
        self.leases.lock().unwrap_or_else(|p| p.into_inner()).insert(ds, (Instant::now(), held));
        held
    }

    /// [`Route::send`] of a mirrored write to the replica `ds` that is to serve it, [`watch`]ed.
    async fn send_watched(
        &self,
        call: DsCall,
        payload: Bytes,
        app_len: u64,
    ) -> Watched<impl std::future::Future<Output = FsResult<(DsReply, Vec<Bytes>)>> + '_> {
        let ds = call.ds;
        let hedge = self.hedge.filter(|_| self.mds.is_some());
        watch(self.route.send(call, payload, app_len), hedge, || self.holds_lease(ds)).await
    }

    pub fn max_request(&self) -> u64 {
        self.max_request
    }

    /// Data server ids, sorted.
    pub fn ids(&self) -> Vec<DsId> {
        self.route.ids()
    }

    pub fn route(&self) -> &Route {
        &self.route
    }

    /// Writes `data` at file `offset`; returns the stripes (objects) written to.
    pub async fn write(&self, tag: &IoTag, layout: &Layout, offset: u64, data: Bytes) -> FsResult<Vec<usize>> {
        check_instantiated(layout, offset, data.len() as u64)?;
        let pieces = plan(layout, offset, data.len() as u64, self.max_request);
        let mut stripes: Vec<usize> = pieces.iter().map(|p| p.stripe).collect();
        stripes.sort_unstable();
        stripes.dedup();
        try_join_all(pieces.into_iter().map(|p| {
            let at = (p.file_offset - offset) as usize;
            let payload = data.slice(at..at + p.len as usize);
            self.write_piece(tag, layout, p, payload, data.len() as u64)
        }))
        .await?;
        Ok(stripes)
    }

    /// Writes a batch of runs (a mount's buffered small writes, scattered over the file): the pieces
    /// for one object and tag travel together, as vectored writes of at most [`MAX_EXTENTS`] runs and
    /// `max_request` bytes, all sent at once. Returns the stripes written to.
    pub async fn write_runs(&self, layout: &Layout, runs: &[WriteRun]) -> FsResult<Vec<usize>> {
        let mut tags: Vec<&IoTag> = Vec::new();
        // (stripe, tag) -> (object offset, bytes), in the order written
        let mut groups: BTreeMap<(usize, usize), Vec<(u64, Bytes)>> = BTreeMap::new();
        for run in runs {
            let t = match tags.iter().position(|t| *t == &run.tag) {
                Some(t) => t,
                None => {
                    tags.push(&run.tag);
                    tags.len() - 1
                }
            };
            check_instantiated(layout, run.offset, run.data.len() as u64)?;
            for p in plan(layout, run.offset, run.data.len() as u64, self.max_request) {
                let at = (p.file_offset - run.offset) as usize;
                groups
                    .entry((p.stripe, t))
                    .or_default()
                    .push((p.object_offset, run.data.slice(at..at + p.len as usize)));
            }
        }
        let mut stripes: Vec<usize> = groups.keys().map(|&(stripe, _)| stripe).collect();
        stripes.dedup(); // sorted by stripe first
        let mut requests = Vec::new();
        for ((stripe, t), mut pieces) in groups {
            pieces.sort_by_key(|&(at, _)| at);
            for batch in batches(pieces, |(_, data)| data.len() as u64, self.max_request) {
                requests.push(self.write_batch(tags[t], layout, stripe, batch));
            }
        }
        try_join_all(requests).await?;
        Ok(stripes)
    }

    /// Runs of one object (sorted by offset) as one request: a plain write for a single run.
    async fn write_batch(&self, tag: &IoTag, layout: &Layout, stripe: usize, batch: Vec<(u64, Bytes)>) -> FsResult<()> {
        let primary = stripe_target(layout, stripe)?;
        let target = (layout, stripe, primary);
        let (req, payload) = match &batch[..] {
            [(at, data)] => {
                (DsRequest::Write { tag: tag.clone(), object: primary.object, offset: *at, sync: false }, data.clone())
            }
            _ => {
                // Runs that meet in the object (pieces of neighbouring writes) travel as one.
                let mut extents: Vec<Extent> = Vec::with_capacity(batch.len());
                for (at, d) in &batch {
                    match extents.last_mut() {
                        Some(e) if e.offset + u64::from(e.len) == *at => e.len += d.len() as u32,
                        _ => extents.push(Extent { offset: *at, len: d.len() as u32 }),
                    }
                }
                let payload = tessera_proto::frame::concat(batch.into_iter().map(|(_, d)| d).collect());
                (DsRequest::WriteV { tag: tag.clone(), object: primary.object, extents, sync: false }, payload)
            }
        };
        let len = payload.len() as u64;
        self.send_write(target, req, payload, len).await
    }

    async fn write_piece(&self, tag: &IoTag, layout: &Layout, p: Piece, payload: Bytes, app_len: u64) -> FsResult<()> {
        let target = stripe_target(layout, p.stripe)?;
        let req = DsRequest::Write { tag: tag.clone(), object: target.object, offset: p.object_offset, sync: false };
        self.send_write((layout, p.stripe, target), req, payload, app_len).await
    }

    /// Sends a write (plain or vectored) of `payload` to the server of stripe `stripe`'s `target` (a
    /// mirrored stripe's primary, which passes it on to the other replicas); an error unless it wrote
    /// all of it. `app_len`: see [`Route::call_sized`].
    async fn send_write(
        &self,
        (layout, stripe, target): (&Layout, usize, StripeTarget),
        req: DsRequest,
        payload: Bytes,
        app_len: u64,
    ) -> FsResult<()> {
        let len = payload.len() as u64;
        match self.send_mirrored(layout, stripe, target, req, payload, app_len).await?.0 {
            DsReply::Written { len: n } if u64::from(n) == len => Ok(()),
            DsReply::Written { len: n } => Err(FsError::io(format!(
                "data server {} wrote {n} of {len} bytes to object {}",
                target.ds, target.object
            ))),
            r => Err(FsError::protocol(format!("data server {} answered Write with {r:?}", target.ds))),
        }
    }

    /// Sends `req` (named `what` in errors), which carries no data, to `ds`; an error unless it answers
    /// `Ok`. A mirrored stripe's call (`mirror`) goes to its primary, which passes it on.
    async fn call_ok(
        &self,
        layout: &Layout,
        stripe: usize,
        target: StripeTarget,
        what: &str,
        req: DsRequest,
    ) -> FsResult<()> {
        match self.send_mirrored(layout, stripe, target, req, Bytes::new(), 0).await?.0 {
            DsReply::Ok => Ok(()),
            r => Err(FsError::protocol(format!("data server {} answered {what} with {r:?}", target.ds))),
        }
    }

    /// Sends a write, fallocate or fsync about stripe `stripe` to its primary `target`, which passes it
    /// on to the other replicas. When the primary cannot serve it (down, unreachable, no longer in sync,
    /// or silent past the hedge with its fence lease lost: [`watch`]), the next in-sync replica that can
    /// takes over: it has the MDS mark the primary stale and serves the call as the stripe's primary. A
    /// primary that failed within [`FAILED_MEMORY`] is passed over at once. When no other replica can
    /// take the call, the primary has the last word: its call still running is waited for, or one that
    /// was passed over is sent to it after all.
    async fn send_mirrored(
        &self,
        layout: &Layout,
        stripe: usize,
        target: StripeTarget,
        req: DsRequest,
        payload: Bytes,
        app_len: u64,
    ) -> FsResult<(DsReply, Vec<Bytes>)> {
        let mirror = mirror_call(layout, stripe, true);
        let Some(m) = mirror.filter(|_| layout.mirrors_of(stripe).iter().any(|r| r.state == ReplicaState::InSync))
        else {
            let call = DsCall { mirror: mirror_call(layout, stripe, true), ..DsCall::new(target.ds, req) };
            return self.route.send(call, payload, app_len).await;
        };
        let to_primary = DsCall { mirror: Some(m.clone()), ..DsCall::new(target.ds, req.clone()) };
        let mut failed: Vec<StripeTarget> = Vec::new();
        let mut last = None;
        // The primary's call, still running when its server lost its lease.
        let mut pending = None;
        let passed_over = self.route.recently_failed(target.ds);
        if passed_over {
            tracing::debug!(ds = target.ds, stripe, "primary replica down a moment ago: another takes over");
        } else {
            match self.send_watched(to_primary.clone(), payload.clone(), app_len).await {
                Watched::Answered(Err(e)) if replica_unusable(&e) => {
                    tracing::warn!(ds = target.ds, stripe, "primary replica failed, another takes over: {e}");
                    if e.is_unreachable() {
                        self.route.mark_failed(target.ds);
                    }
                    last = Some(e);
                }
                Watched::Answered(r) => return r,
                Watched::Lapsed(call) => {
                    tracing::warn!(
                        ds = target.ds,
                        stripe,
                        "primary replica silent and its lease lost: another takes over"
                    );
                    self.route.mark_failed(target.ds);
                    pending = Some(call);
                }
            }
        }
        failed.push(target);
        let mut candidates: Vec<StripeTarget> =
            layout.mirrors_of(stripe).iter().filter(|r| r.state == ReplicaState::InSync).map(|r| r.target).collect();
        candidates.sort_by_key(|t| self.route.recently_failed(t.ds));
        for next in candidates {
            let mut r = req.clone();
            if let Some(o) = r.object_mut() {
                *o = next.object;
            }
            let replicas = m.replicas.iter().copied().filter(|x| *x != next && !failed.contains(x)).collect();
            let mc = MirrorCall { replicas, failed: failed.clone(), ..m.clone() };
            let call = DsCall { mirror: Some(mc), ..DsCall::new(next.ds, r) };
            let e = match self.send_watched(call, payload.clone(), app_len).await {
                Watched::Answered(Err(e)) if replica_unusable(&e) => e,
                Watched::Answered(r) => return r,
                Watched::Lapsed(_) => FsError::new(
                    tessera_proto::error::ErrorCode::TimedOut,
                    format!("data server {}: silent, and its fence lease lost", next.ds),
                ),
            };
            tracing::warn!(ds = next.ds, stripe, "replica cannot take over: {e}");
            if e.is_unreachable() {
                self.route.mark_failed(next.ds);
            }
            failed.push(next);
            last = Some(e);
        }
        // No other replica could: the primary's word is the last.
        if let Some(call) = pending {
            return call.await;
        }
        if passed_over {
            return self.route.send(to_primary, payload, app_len).await;
        }
        Err(last.unwrap_or_else(|| FsError::unavailable(format!("no replica of stripe {stripe} can take the write"))))
    }

    /// Reads `[offset, offset+len)` of a file whose size is at least `offset+len` (the caller clamps to the
    /// size): holes and short objects read as zeros.
    pub async fn read(&self, tag: &IoTag, layout: &Layout, offset: u64, len: u64) -> FsResult<Bytes> {
        let data = self.read_data(tag, layout, offset, len).await?;
        Ok(data.slice(offset, offset + len))
    }

    /// [`DataPlane::read`] with the replies kept apart, for callers that hand out slices of it.
    pub async fn read_data(&self, tag: &IoTag, layout: &Layout, offset: u64, len: u64) -> FsResult<ReadData> {
        usize::try_from(len).map_err(|_| FsError::invalid("read too large for this machine"))?;
        let pieces = plan(layout, offset, len, self.max_request);
        let parts = try_join_all(pieces.into_iter().map(|p| async move {
            let data = self.read_piece(tag, layout, p, len).await?;
            Ok::<_, FsError>((p, data))
        }))
        .await?;
        ReadData::new(offset, len, parts)
    }

    /// Reads several ranges `(offset, len)` of a file at once (a strided reader's blocks), each inside the
    /// file's size (the caller clamps): the pieces for one object travel together, as vectored reads of
    /// at most [`MAX_EXTENTS`] runs and `max_request` bytes, all sent at once. One [`ReadData`] per range,
    /// in order; holes and short objects read as zeros.
    pub async fn read_runs(&self, tag: &IoTag, layout: &Layout, runs: &[(u64, u64)]) -> FsResult<Vec<ReadData>> {
        // stripe -> (range index, piece)
        let mut groups: BTreeMap<usize, Vec<(usize, Piece)>> = BTreeMap::new();
        for (i, &(offset, len)) in runs.iter().enumerate() {
            usize::try_from(len).map_err(|_| FsError::invalid("read too large for this machine"))?;
            for p in plan(layout, offset, len, self.max_request) {
                groups.entry(p.stripe).or_default().push((i, p));
            }
        }
        let mut requests = Vec::new();
        for (stripe, pieces) in groups {
            for batch in batches(pieces, |(_, p)| p.len, self.max_request) {
                requests.push(self.read_batch(tag, layout, stripe, batch));
            }
        }
        let mut parts: Vec<Vec<(Piece, Vec<Bytes>)>> = vec![Vec::new(); runs.len()];
        for (i, p, data) in try_join_all(requests).await?.into_iter().flatten() {
            parts[i].push((p, data));
        }
        runs.iter().zip(parts).map(|(&(offset, len), parts)| ReadData::new(offset, len, parts)).collect()
    }

    /// Pieces of one object (each tagged with its range's index) as one request: a plain read for a
    /// single piece, else a vectored one whose reply is split back into the pieces.
    async fn read_batch(
        &self,
        tag: &IoTag,
        layout: &Layout,
        stripe: usize,
        batch: Vec<(usize, Piece)>,
    ) -> FsResult<Vec<(usize, Piece, Vec<Bytes>)>> {
        if let [(i, p)] = batch[..] {
            return Ok(vec![(i, p, self.read_piece(tag, layout, p, p.len).await?)]);
        }
        let extents: Vec<Extent> =
            batch.iter().map(|(_, p)| Extent { offset: p.object_offset, len: p.len as u32 }).collect();
        let app_len = batch[0].1.len;
        let runs = batch.len();
        let (target, (lens, chunks)) = self
            .read_replicas(layout, stripe, |target| {
                let req = DsRequest::ReadV { tag: tag.clone(), object: target.object, extents: extents.clone() };
                async move {
                    let call = DsCall { mirror: mirror_call(layout, stripe, false), ..DsCall::new(target.ds, req) };
                    match self.route.send(call, Bytes::new(), app_len).await? {
                        (DsReply::DataV { lens }, chunks) if lens.len() == runs => Ok((lens, chunks)),
                        (r, _) => {
                            Err(FsError::protocol(format!("data server {} answered ReadV with {r:?}", target.ds)))
                        }
                    }
                }
            })
            .await?;
        let mut split = split_chunks(chunks, &lens)
            .map_err(|e| FsError::protocol(format!("data server {}: {e}", target.ds)))?
            .into_iter();
        Ok(batch.into_iter().map(|(i, p)| (i, p, split.next().unwrap_or_default())).collect())
    }

    /// One piece's reply, in the chunks it arrived in.
    async fn read_piece(&self, tag: &IoTag, layout: &Layout, p: Piece, app_len: u64) -> FsResult<Vec<Bytes>> {
        self.read_replicas(layout, p.stripe, |target| self.read_piece_at(tag, layout, p, target, app_len))
            .await
            .map(|(_, data)| data)
    }

    /// Tries `read` on the stripe's replicas that may be read (the primary and those in sync) in the
    /// order [`replica_order`] gives, hedged after `client.hedge_ms` ([`first_answer`]).
    async fn read_replicas<T, F, Fut>(&self, layout: &Layout, stripe: usize, read: F) -> FsResult<(StripeTarget, T)>
    where
        F: Fn(StripeTarget) -> Fut,
        Fut: std::future::Future<Output = FsResult<T>>,
    {
        let primary = stripe_target(layout, stripe)?;
        let others = layout.mirrors_of(stripe);
        if others.is_empty() {
            return Ok((primary, read(primary).await?));
        }
        let readable: Vec<StripeTarget> = std::iter::once(primary)
            .chain(others.iter().filter(|r| r.state == ReplicaState::InSync).map(|r| r.target))
            .collect();
        let load = |t: &StripeTarget| (self.route.recently_failed(t.ds), self.route.in_flight(t.ds));
        let order = replica_order(readable, stripe, self.replica_read, load);
        first_answer(order, self.hedge, read)
            .await
            .map_err(|e| e.unwrap_or_else(|| FsError::unavailable(format!("stripe {stripe} has no replica to read"))))
    }

    /// One piece's reply from replica `target`, in the chunks it arrived in.
    async fn read_piece_at(
        &self,
        tag: &IoTag,
        layout: &Layout,
        p: Piece,
        target: StripeTarget,
        app_len: u64,
    ) -> FsResult<Vec<Bytes>> {
        let req =
            DsRequest::Read { tag: tag.clone(), object: target.object, offset: p.object_offset, len: p.len as u32 };
        let call = DsCall { mirror: mirror_call(layout, p.stripe, false), ..DsCall::new(target.ds, req) };
        match self.route.send(call, Bytes::new(), app_len).await {
            Ok((DsReply::Data { len }, chunks)) => {
                let sent: usize = chunks.iter().map(Bytes::len).sum();
                if len as usize != sent {
                    return Err(FsError::protocol(format!(
                        "data server {} declared {len} bytes but sent {sent}",
                        target.ds
                    )));
                }
                Ok(chunks)
            }
            Ok((r, _)) => Err(FsError::protocol(format!("data server {} answered Read with {r:?}", target.ds))),
            // An object never written (a file that is all hole there) reads as zeros.
            Err(e) if e.code == tessera_proto::error::ErrorCode::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// `fallocate` on the file range `[offset, offset+len)`: each object's share of it at once, all in
    /// parallel (see [`DsRequest::Fallocate`]: `punch` makes the range read as zeros, otherwise space is
    /// reserved). Sizes do not change: the file's is the MDS's.
    pub async fn fallocate(&self, tag: &IoTag, layout: &Layout, offset: u64, len: u64, punch: bool) -> FsResult<()> {
        let shares = layout.all_targets().enumerate().filter_map(|(s, &t)| {
            let r = layout.object_range(s, offset, len);
            (!r.is_empty()).then_some((s, t, r))
        });
        try_join_all(shares.map(|(stripe, target, r)| async move {
            let req = DsRequest::Fallocate {
                tag: tag.clone(),
                object: target.object,
                offset: r.start,
                len: r.end - r.start,
                punch,
            };
            self.call_ok(layout, stripe, target, "Fallocate", req).await
        }))
        .await?;
        Ok(())
    }

    /// Makes the listed stripes' objects durable, all in parallel.
    pub async fn fsync(&self, tag: &IoTag, layout: &Layout, stripes: &[usize]) -> FsResult<()> {
        try_join_all(stripes.iter().map(|&s| async move {
            let target = stripe_target(layout, s)?;
            let req = DsRequest::Fsync { tag: tag.clone(), object: target.object };
            self.call_ok(layout, s, target, "Fsync", req).await
        }))
        .await?;
        Ok(())
    }

    /// Pings one data server; returns the round-trip time.
    pub async fn ping(&self, ds: DsId) -> FsResult<Duration> {
        let t = Instant::now();
        match self.route.call(ds, DsRequest::Ping, Bytes::new()).await?.0 {
            DsReply::Pong { version, .. } if version == PROTOCOL_VERSION => Ok(t.elapsed()),
            DsReply::Pong { version, .. } => Err(FsError::protocol(format!(
                "data server {ds} speaks protocol version {version}, this client {PROTOCOL_VERSION}"
            ))),
            r => Err(FsError::protocol(format!("data server {ds} answered Ping with {r:?}"))),
        }
    }

    /// `lseek(SEEK_DATA)` (`hole` false) or `SEEK_HOLE` on a file of `size` bytes laid out by `layout`,
    /// from `offset`: where the next data (hole) starts, or ENXIO at or past the end (and, for data,
    /// when none follows). Each stripe's primary object is asked where its next data (hole) is, from
    /// the first of its bytes at or after `offset`, and the nearest answer in the file wins; the end of
    /// the file is a hole. A composite layout is answered as all data (what Linux does for file systems
    /// that do not know their holes).
    pub async fn seek(&self, layout: &Layout, size: u64, offset: u64, hole: bool) -> FsResult<u64> {
        let enxio = || FsError::new(tessera_proto::error::ErrorCode::NoSuchAddress, "seek past the end");
        if offset >= size {
            return Err(enxio());
        }
        let count = layout.stripe_count();
        if layout.is_composite() || count == 0 {
            return Ok(if hole { size } else { offset });
        }
        let plan = SeekPlan { stripe_size: layout.stripe_size, count: count as u64 };
        let asks = (0..count).map(|k| async move {
            let from = plan.object_offset_from(k as u64, offset);
            // The primary, or (out of reach) the next replica in sync, as reads fail over.
            let mut last = FsError::io(format!("stripe {k} has no replica in sync"));
            for r in layout.replicas(k).into_iter().filter(|r| r.state == ReplicaState::InSync) {
                let req = DsRequest::Seek { object: r.target.object, offset: from, hole };
                match self.route.call(r.target.ds, req, Bytes::new()).await {
                    Ok((DsReply::Seek(at), _)) => return Ok(at.map(|o| plan.file_offset(k as u64, o))),
                    Ok((other, _)) => {
                        let ds = r.target.ds;
                        return Err(FsError::protocol(format!("data server {ds} answered Seek with {other:?}")));
                    }
                    Err(e) if e.is_unreachable() => last = e,
                    Err(e) => return Err(e),
                }
            }
            Err(last)
        });
        let found = futures::future::try_join_all(asks).await?.into_iter().flatten().filter(|&f| f >= offset).min();
        match (found, hole) {
            (Some(f), false) if f < size => Ok(f),
            (_, false) => Err(enxio()),
            (f, true) => Ok(f.unwrap_or(size).min(size)),
        }
    }

    /// A data server's own report.
    pub async fn report(&self, ds: DsId) -> FsResult<DsReport> {
        match self.route.call(ds, DsRequest::Report, Bytes::new()).await?.0 {
            DsReply::Report(r) => Ok(r),
            r => Err(FsError::protocol(format!("data server {ds} answered Report with {r:?}"))),
        }
    }
}

/// RAID-0's map between file offsets and stripe objects' offsets (a plain layout of `count` stripes).
#[derive(Clone, Copy, Debug)]
struct SeekPlan {
    stripe_size: u64,
    count: u64,
}

impl SeekPlan {
    /// The file offset of byte `o` of stripe `k`'s object.
    fn file_offset(self, k: u64, o: u64) -> u64 {
        let (row, within) = (o / self.stripe_size, o % self.stripe_size);
        row.saturating_mul(self.count).saturating_add(k).saturating_mul(self.stripe_size).saturating_add(within)
    }

    /// The first byte of stripe `k`'s object whose file offset is `f` or after.
    fn object_offset_from(self, k: u64, f: u64) -> u64 {
        let unit = f / self.stripe_size;
        let (row, at) = (unit / self.count, unit % self.count);
        match k.cmp(&at) {
            std::cmp::Ordering::Equal => row * self.stripe_size + f % self.stripe_size,
            std::cmp::Ordering::Greater => row * self.stripe_size,
            std::cmp::Ordering::Less => (row + 1) * self.stripe_size,
        }
    }
}

/// The mirror envelope of a call about stripe `stripe` (`None` when it has one copy): a write's names the
/// other replicas its primary passes it on to (in sync or resyncing), a read's none.
fn mirror_call(layout: &Layout, stripe: usize, write: bool) -> Option<MirrorCall> {
    let others = layout.mirrors_of(stripe);
    if others.is_empty() {
        return None;
    }
    let replicas =
        if write { others.iter().filter(|r| r.state.written()).map(|r| r.target).collect() } else { Vec::new() };
    Some(MirrorCall {
        gen: layout.mirror_gen,
        stripe: stripe as u32,
        replicas,
        from_primary: false,
        failed: Vec::new(),
    })
}

/// The object of global stripe `stripe`.
fn stripe_target(layout: &Layout, stripe: usize) -> FsResult<StripeTarget> {
    layout.target(stripe).ok_or_else(|| FsError::invalid(format!("stripe {stripe} outside the layout")))
}

/// A write must not reach extents of a composite layout that have no objects yet (it would be lost):
/// the caller instantiates them first ([`crate::live_layout::LiveLayout::for_write`]).
fn check_instantiated(layout: &Layout, offset: u64, len: u64) -> FsResult<()> {
    if len > 0 && offset.saturating_add(len) > layout.instantiated_end() {
        return Err(FsError::invalid(format!(
            "write up to {} past the layout's instantiated extents (up to {})",
            offset.saturating_add(len),
            layout.instantiated_end()
        )));
    }
    Ok(())
}

/// `client.max_request` bounded to what a frame can carry and to at least one stripe unit.
pub fn effective_max_request(configured: u32) -> u64 {
    (configured as u64).clamp(MIN_STRIPE_SIZE, MAX_PAYLOAD as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte of a 3-stripe file maps to its object's offset and back; a stripe's first byte at or
    /// after a file offset is the nearest one (before it in the same row, the next row's).
    #[test]
    fn seek_plan_maps_file_and_object_offsets_both_ways() {
        let p = SeekPlan { stripe_size: 4, count: 3 };
        for f in 0..60u64 {
            let (unit, within) = (f / 4, f % 4);
            let (k, o) = (unit % 3, (unit / 3) * 4 + within);
            assert_eq!(p.file_offset(k, o), f);
            assert_eq!(p.object_offset_from(k, f), o, "stripe {k} at file offset {f}");
            for other in (0..3).filter(|&j| j != k) {
                let from = p.object_offset_from(other, f);
                let at = p.file_offset(other, from);
                assert!(at > f, "stripe {other}'s next byte {at} after {f}");
                // Nothing of that stripe lies between.
                assert!(from == 0 || p.file_offset(other, from - 1) < f);
            }
        }
    }

    fn t(ds: DsId) -> StripeTarget {
        StripeTarget { ds, object: 100 + u64::from(ds) }
    }

    #[test]
    fn replicas_are_read_by_load_or_primary_first() {
        let busy = |x: &StripeTarget| if x.ds == 0 { 5 } else { 0 };
        // By load: the busy primary last.
        assert_eq!(replica_order(vec![t(0), t(1), t(2)], 0, ReplicaRead::Load, busy), vec![t(1), t(2), t(0)]);
        // First: the primary whatever its load.
        assert_eq!(replica_order(vec![t(0), t(1), t(2)], 0, ReplicaRead::First, busy), vec![t(0), t(1), t(2)]);
        // Equal loads: stripes start at different replicas.
        let even = |_: &StripeTarget| 0;
        let firsts: Vec<DsId> =
            (0..4).map(|s| replica_order(vec![t(0), t(1)], s, ReplicaRead::Load, even)[0].ds).collect();
        assert_eq!(firsts, vec![0, 1, 0, 1]);
    }

    /// A read in flight to a server that died never answers: after the hedge the next replica is read
    /// as well and its answer taken; without a hedge only a failure moves on.
    #[tokio::test(start_paused = true)]
    async fn a_silent_replica_is_hedged_and_a_failed_one_skipped() {
        let hedge = Duration::from_millis(1000);
        let read = |x: StripeTarget| async move {
            match x.ds {
                0 => std::future::pending().await,
                1 => Err(FsError::unavailable("down")),
                _ => Ok(x.ds),
            }
        };
        let t0 = tokio::time::Instant::now();
        let (who, v) = first_answer(vec![t(0), t(2)], Some(hedge), read).await.unwrap();
        assert_eq!((who, v), (t(2), 2));
        assert_eq!(t0.elapsed(), hedge, "the next replica is read once the hedge has passed");
        // A failure moves on at once, hedge or not.
        let t0 = tokio::time::Instant::now();
        assert_eq!(first_answer(vec![t(1), t(2)], None, read).await.unwrap().0, t(2));
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // All fail: the last failure; none at all: nothing.
        let e = first_answer(vec![t(1), t(1)], Some(hedge), read).await.unwrap_err().unwrap();
        assert!(e.detail.contains("down"), "{e}");
        assert!(first_answer(Vec::new(), Some(hedge), read).await.unwrap_err().is_none());
        // Without a hedge a silent replica is waited for (here: still waiting after an hour).
        let waited = tokio::time::timeout(Duration::from_secs(3600), first_answer(vec![t(0), t(2)], None, read));
        assert!(waited.await.is_err());
    }

    /// A mirrored write its server does not answer is taken for lapsed only once the hedge has passed
    /// and the MDS says the server lost its fence lease; a slow server still holding it is waited for,
    /// and the call lapsed is handed back still running.
    #[tokio::test(start_paused = true)]
    async fn a_silent_write_lapses_only_when_its_server_lost_its_lease() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hedge = Duration::from_millis(1000);
        let answer_after = |d: Duration| async move {
            tokio::time::sleep(d).await;
            7
        };
        // Answered before the hedge: the MDS is never asked.
        let asked = AtomicUsize::new(0);
        let holds = || {
            asked.fetch_add(1, Ordering::SeqCst);
            async { false }
        };
        let w = watch(answer_after(Duration::from_millis(999)), Some(hedge), holds).await;
        assert!(matches!(w, Watched::Answered(7)));
        assert_eq!(asked.load(Ordering::SeqCst), 0);
        // Silent, lease lost on the third question: lapsed at hedge + 2 quarters, the call still running.
        let t0 = tokio::time::Instant::now();
        let asked = AtomicUsize::new(0);
        let holds = || {
            let n = asked.fetch_add(1, Ordering::SeqCst);
            async move { n < 2 }
        };
        let Watched::Lapsed(call) = watch(answer_after(Duration::from_secs(10)), Some(hedge), holds).await else {
            panic!("a silent server without its lease is not waited for");
        };
        assert_eq!(t0.elapsed(), hedge + hedge / 2);
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        assert_eq!(call.await, 7, "the call lapsed goes on running");
        // Slow but holding its lease: waited for, however long.
        let t0 = tokio::time::Instant::now();
        let w = watch(answer_after(Duration::from_secs(30)), Some(hedge), || async { true }).await;
        assert!(matches!(w, Watched::Answered(7)));
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
        // Without a hedge nothing is asked.
        let w = watch(answer_after(Duration::from_secs(30)), None, || async { false }).await;
        assert!(matches!(w, Watched::Answered(7)));
    }

    #[test]
    fn pieces_of_one_object_are_cut_by_count_and_bytes() {
        let lens = |b: &Vec<Vec<u64>>| b.iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(batches(vec![10u64, 20, 30, 40], |&n| n, 60), [vec![10, 20, 30], vec![40]]);
        assert_eq!(batches(vec![100u64, 5], |&n| n, 60), [vec![100], vec![5]], "a long piece goes alone");
        let many = batches(vec![1u64; MAX_EXTENTS * 2 + 1], |&n| n, u64::MAX);
        assert_eq!(lens(&many), [MAX_EXTENTS, MAX_EXTENTS, 1]);
        assert!(batches(Vec::<u64>::new(), |&n| n, 60).is_empty());
    }

    #[test]
    fn a_vectored_reply_splits_into_its_runs_across_chunks_without_copies() {
        let chunks = vec![Bytes::from_static(b"abc"), Bytes::new(), Bytes::from_static(b"defgh")];
        let runs = split_chunks(chunks.clone(), &[2, 0, 4, 2]).unwrap();
        let flat: Vec<Vec<u8>> = runs.iter().map(|r| r.concat()).collect();
        assert_eq!(flat, [b"ab".to_vec(), vec![], b"cdef".to_vec(), b"gh".to_vec()]);
        assert_eq!(runs[2].len(), 2, "a run across two chunks is two slices");
        assert!(split_chunks(chunks.clone(), &[2, 4]).is_err(), "declared less than sent");
        assert!(split_chunks(chunks, &[2, 4, 3]).is_err(), "declared more than sent");
        assert!(split_chunks(Vec::new(), &[]).unwrap().is_empty());
    }

    fn layout(s: u64, c: usize) -> Layout {
        Layout::plain(s, (0..c).map(|i| StripeTarget { ds: i as u32, object: 10 + i as u64 }).collect())
    }

    /// The result of a read of `len` bytes at `offset` from the pieces' replies, one chunk each.
    fn assemble(offset: u64, len: usize, parts: Vec<(Piece, Bytes)>) -> FsResult<Bytes> {
        let parts = parts.into_iter().map(|(p, data)| (p, vec![data])).collect();
        Ok(ReadData::new(offset, len as u64, parts)?.slice(offset, offset + len as u64))
    }

    fn check_plan(l: &Layout, off: u64, len: u64, max: u64) -> Vec<Piece> {
        let ps = plan(l, off, len, max);
        let mut pos = off;
        for p in &ps {
            assert!(p.len > 0 && p.len <= max, "{p:?} exceeds {max}");
            assert_eq!(p.file_offset, pos);
            // Every byte of the piece maps to (stripe, object offset) per the stripe math.
            for x in [p.file_offset, p.file_offset + p.len - 1] {
                let ch = l.chunks(x, 1)[0];
                assert_eq!(ch.stripe, p.stripe);
                assert_eq!(ch.object_offset, p.object_offset + (x - p.file_offset));
            }
            pos += p.len;
        }
        assert_eq!(pos, off + len);
        ps
    }

    #[test]
    fn requests_never_exceed_max_request() {
        let l = layout(1 << 20, 1);
        // 1-wide: contiguous stripes merge, then are cut at max_request.
        let ps = check_plan(&l, 0, 10 << 20, 4 << 20);
        assert_eq!(ps.iter().map(|p| p.len).collect::<Vec<_>>(), vec![4 << 20, 4 << 20, 2 << 20]);
        // Stripe larger than max_request.
        let l = layout(16 << 20, 3);
        let ps = check_plan(&l, 5, 40 << 20, 4 << 20);
        assert!(ps.len() >= 10);
        // Wide layout: one request per chunk.
        let l = layout(65536, 4);
        let ps = check_plan(&l, 1000, 300_000, 1 << 20);
        assert_eq!(ps.len(), l.chunks(1000, 300_000).len());
        assert!(plan(&l, 7, 0, 4096).is_empty());
    }

    #[test]
    fn plan_random_ranges() {
        use rand::Rng;
        let mut rng = rand::thread_rng();
        for _ in 0..500 {
            let l = layout(4096 * rng.gen_range(1..6u64), rng.gen_range(1..5usize));
            let off = rng.gen_range(0..100_000u64);
            let len = rng.gen_range(0..200_000u64);
            let max = rng.gen_range(1..20_000u64);
            check_plan(&l, off, len, max);
        }
    }

    #[test]
    fn assembly_fills_holes_and_short_reads_with_zeros() {
        let l = layout(4, 2);
        // Read 12 bytes at 2: pieces [2,4) s0, [4,8) s1, [8,12) s0, [12,14) s1.
        let ps = plan(&l, 2, 12, 100);
        assert_eq!(ps.len(), 4);
        let replies = vec![
            Bytes::from_static(b"ab"),
            Bytes::from_static(b"c"), // short: rest of the piece is a hole
            Bytes::new(),             // object ends before: all zeros
            Bytes::from_static(b"yz"),
        ];
        let parts: Vec<(Piece, Bytes)> = ps.into_iter().zip(replies).collect();
        let out = assemble(2, 12, parts.clone()).unwrap();
        assert_eq!(&out[..], b"abc\0\0\0\0\0\0\0yz");
        let reversed = assemble(2, 12, parts.into_iter().rev().collect()).unwrap();
        assert_eq!(&reversed[..], b"abc\0\0\0\0\0\0\0yz", "replies in any order");
    }

    #[test]
    fn assembly_single_piece_is_zero_copy_and_rejects_overlong() {
        let l = layout(1 << 20, 1);
        let p = plan(&l, 0, 5, 1 << 20)[0];
        let data = Bytes::from_static(b"hello");
        let out = assemble(0, 5, vec![(p, data.clone())]).unwrap();
        assert_eq!(out.as_ptr(), data.as_ptr());
        let err = assemble(0, 5, vec![(p, Bytes::from_static(b"hello!"))]).unwrap_err();
        assert_eq!(err.code, tessera_proto::error::ErrorCode::Protocol);
    }

    #[test]
    fn read_data_slices_within_a_reply_without_copying() {
        let l = layout(4, 2);
        // 12 bytes at 4: [4,8) s1, [8,12) s0 (short: "x" then a hole), [12,16) s1.
        let ps = plan(&l, 4, 12, 100);
        let replies = [Bytes::from_static(b"abcd"), Bytes::from_static(b"x"), Bytes::from_static(b"wxyz")];
        // The last reply arrived in two chunks.
        let chunked = |i: usize| {
            if i == 2 {
                vec![replies[2].slice(..1), replies[2].slice(1..)]
            } else {
                vec![replies[i].clone()]
            }
        };
        let rd =
            ReadData::new(4, 12, ps.into_iter().enumerate().map(|(i, p)| (p, chunked(i))).rev().collect()).unwrap();
        let inside = rd.slice(5, 7);
        assert_eq!(&inside[..], b"bc");
        assert_eq!(inside.as_ptr(), replies[0][1..].as_ptr(), "a slice inside one reply is not copied");
        let pieces = rd.slices(6, 15);
        let lens: Vec<usize> = pieces.iter().map(Bytes::len).collect();
        assert_eq!(lens, vec![2, 1, 3, 1, 2], "reply, reply, hole, chunk, chunk");
        assert_eq!(pieces[3].as_ptr(), replies[2].as_ptr(), "chunks are shared, not copied");
        assert_eq!(pieces.concat(), b"cdx\0\0\0wxy");
        assert_eq!(&rd.slice(6, 14)[..], b"cdx\0\0\0wx", "across replies and the hole");
        assert_eq!(&rd.slice(9, 11)[..], b"\0\0", "inside the hole only");
        assert_eq!(&rd.slice(0, 100)[..], b"abcdx\0\0\0wxyz", "clamped to the read's range");
        assert!(rd.slice(16, 20).is_empty() && rd.slice(7, 7).is_empty());
        assert_eq!(&ReadData::new(0, 3, Vec::new()).unwrap().slice(0, 3)[..], b"\0\0\0", "no replies: zeros");
    }

    #[test]
    fn max_request_is_bounded() {
        assert_eq!(effective_max_request(0), MIN_STRIPE_SIZE);
        assert_eq!(effective_max_request(u32::MAX), MAX_PAYLOAD as u64);
        assert_eq!(effective_max_request(4 << 20), 4 << 20);
    }
}
