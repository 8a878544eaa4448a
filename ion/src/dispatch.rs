//! The forwarding node's data path (`specs/forwarding.md`): client reads and writes wait in the request
//! scheduler; the dispatch stage takes what the scheduler releases whenever one of its `dispatch_depth`
//! slots is free (IOFSL's dispatch threads), merges contiguous requests of one object, operation and job
//! (up to [`MAX_MERGE`]) and sends them, marked as forwarded, to the data server that holds them.
//! Write-through: a client's write is answered when the data server has answered the merged write.
//!
//! Merging: the scheduler's release (a run an aggregating scheduler already merged, or one request) is
//! extended with the following releases while each continues the run; the first that does not is held
//! for the next slot. Nothing is released before a slot is free, so the scheduler — not a queue behind
//! it — decides the order the data servers see.
//!
//! The dispatch loop is watched: the queued requests live in the [`Dispatcher`], not in the loop, so
//! after a panic the loop starts again on the same queues (the scheduler built afresh from what it held,
//! as a switch does; the requests of the batch the panic cut short are answered with an error). A loop
//! that keeps panicking ([`MAX_PANICS`] within [`PANIC_WINDOW`]) is not restarted again:
//! [`Dispatcher::failed`] says so, and `tessera-ion` exits non-zero for its supervisor to start it
//! afresh.

use crate::sched::{self, Next, Op, Params, Req, SchedError, Scheduler, MAX_MERGE, MAX_MERGED_BYTES};
use crate::stats::Stats;
use bytes::{Bytes, BytesMut};
use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::msg::{DsCall, DsReply, DsRequest, Forwarded, SchedulerSetting};
use tessera_proto::rpc::{Payload, RpcPeer};
use tessera_proto::types::{unix_us, DsId, IoTag};
use tokio::sync::{oneshot, watch, Notify, Semaphore};

/// Longest a data server's reply may take to pass through (its header came already).
const STREAM_DEADLINE: Duration = Duration::from_secs(60);

/// Panics of the dispatch loop within [`PANIC_WINDOW`] after which it is not restarted again.
pub const MAX_PANICS: usize = 3;

/// See [`MAX_PANICS`].
pub const PANIC_WINDOW: Duration = Duration::from_secs(60);

/// How a scheduler is built from its name (`sched::build`; another in tests).
type Build = fn(&str, &Params) -> Result<Box<dyn Scheduler>, SchedError>;

/// A client request's answer: the reply and its payload (whole, or passed on as it arrives).
pub type Answer = (FsResult<DsReply>, Payload);

/// An error answer, without payload.
pub fn error(e: FsError) -> Answer {
    (Err(e), Payload::Whole(Bytes::new()))
}

/// What stays with the dispatcher while a request is queued.
struct Waiter {
    tag: IoTag,
    /// A write's data.
    data: Bytes,
    sync: bool,
    reply: oneshot::Sender<Answer>,
}

struct State {
    sched: Box<dyn Scheduler>,
    params: Params,
    waiting: HashMap<u64, Waiter>,
    next_seq: u64,
    /// A release that did not continue the previous batch: the head of the next one.
    held: Option<Vec<Req>>,
}

/// The scheduler, the queued requests and the connections to the data servers.
pub struct Dispatcher {
    state: Mutex<State>,
    wake: Notify,
    slots: Arc<Semaphore>,
    /// Batches sent and not answered yet.
    in_flight: std::sync::atomic::AtomicU32,
    servers: HashMap<DsId, Arc<RpcPeer>>,
    ion: u32,
    pub stats: Arc<Stats>,
    build: Build,
    /// Why the dispatch loop was given up, once it was.
    failed: watch::Sender<Option<String>>,
}

/// What the status shows of the dispatcher.
pub struct View {
    pub scheduler: &'static str,
    pub params: Params,
    pub queues: Vec<(String, u64)>,
    pub in_flight: u32,
}

impl Dispatcher {
    /// A dispatcher for forwarding node `ion`, sending to `servers`, with `name`'s scheduler.
    pub fn new(
        ion: u32,
        servers: HashMap<DsId, Arc<RpcPeer>>,
        name: &str,
        params: Params,
        depth: u32,
        stats: Arc<Stats>,
    ) -> Result<Arc<Dispatcher>, SchedError> {
        let sched = sched::build(name, &params)?;
        Ok(Dispatcher::start(ion, servers, sched, sched::build, params, depth, stats))
    }

    /// A dispatcher with `sched`, rebuilt by `build` after a panic; starts the watched dispatch loop.
    fn start(
        ion: u32,
        servers: HashMap<DsId, Arc<RpcPeer>>,
        sched: Box<dyn Scheduler>,
        build: Build,
        params: Params,
        depth: u32,
        stats: Arc<Stats>,
    ) -> Arc<Dispatcher> {
        let d = Arc::new(Dispatcher {
            state: Mutex::new(State { sched, params, waiting: HashMap::new(), next_seq: 0, held: None }),
            wake: Notify::new(),
            slots: Arc::new(Semaphore::new(depth.max(1) as usize)),
            in_flight: Default::default(),
            servers,
            ion,
            stats,
            build,
            failed: watch::Sender::new(None),
        });
        tokio::spawn(d.clone().watch());
        d
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a client's read or write and waits for its answer.
    pub async fn submit(&self, ds: DsId, req: DsRequest, payload: Bytes, app_len: u64) -> Answer {
        let (tag, object, offset, op, len, sync) = match req {
            DsRequest::Read { tag, object, offset, len } => (tag, object, offset, Op::Read, u64::from(len), false),
            DsRequest::Write { tag, object, offset, sync } => {
                (tag, object, offset, Op::Write, payload.len() as u64, sync)
            }
            other => return error(FsError::invalid(format!("not a read or write: {other:?}"))),
        };
        if !self.servers.contains_key(&ds) {
            return error(FsError::invalid(format!("data server {ds} is not in the cluster configuration")));
        }
        if let Err(e) = tag.origin.check() {
            return error(FsError::from(e));
        }
        if offset.checked_add(len).is_none() {
            return error(FsError::invalid("request ends past the largest offset"));
        }
        let now = unix_us();
        self.stats.arrived(len, app_len, now);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            let seq = st.next_seq;
            st.next_seq += 1;
            let r = Req { seq, arrival_us: now, ds, ino: tag.ino, object, job: Arc::from(tag.job()), op, offset, len };
            st.waiting.insert(seq, Waiter { tag, data: payload, sync, reply: tx });
            st.sched.push(r);
        }
        self.wake.notify_one();
        match rx.await {
            Ok(answer) => answer,
            Err(_) => error(FsError::io("forwarding node dropped the request")),
        }
    }

    /// Switches the scheduler: the queued requests move to the new one in arrival order.
    pub fn switch(&self, s: &SchedulerSetting) -> Result<(), SchedError> {
        let mut st = self.lock();
        let mut params = st.params.clone();
        if let Some(w) = s.window_us {
            params.window_us = w;
        }
        if let Some(q) = s.quantum {
            params.quantum = q;
        }
        let mut new = (self.build)(&s.name, &params)?;
        let mut queued: Vec<Req> = st.held.take().unwrap_or_default();
        queued.extend(st.sched.take_all());
        queued.sort_by_key(|r| r.seq);
        for r in queued {
            new.push(r);
        }
        st.sched = new;
        st.params = params;
        drop(st);
        self.wake.notify_one();
        Ok(())
    }

    pub fn view(&self) -> View {
        let st = self.lock();
        let mut queues: Vec<(String, u64)> = st.sched.depths().into_iter().map(|(q, n)| (q, n as u64)).collect();
        if let Some(h) = &st.held {
            queues.push(("dispatch".into(), h.len() as u64));
        }
        View {
            scheduler: st.sched.name(),
            params: st.params.clone(),
            queues,
            in_flight: self.in_flight.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Resolves (with the reason) once the dispatch loop has been given up: it kept panicking. Nothing
    /// is forwarded any more; the process should exit non-zero.
    pub async fn failed(&self) -> String {
        let mut rx = self.failed.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            // The dispatcher (with the sender) lives as long as `self`: not reached.
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }

    /// Runs the dispatch loop, keeping its handle: restarted after a panic on the same queues, given up
    /// (see [`Dispatcher::failed`]) after [`MAX_PANICS`] within [`PANIC_WINDOW`].
    async fn watch(self: Arc<Self>) {
        let mut panics: VecDeque<Instant> = VecDeque::new();
        loop {
            let running = tokio::spawn(self.clone().run());
            let why = match running.await {
                // The slots were closed: nothing more to dispatch.
                Ok(()) => return,
                Err(e) => match e.try_into_panic() {
                    Ok(payload) => panic_message(payload.as_ref()),
                    // Cancelled: the runtime is shutting down.
                    Err(_) => return,
                },
            };
            let now = Instant::now();
            panics.retain(|t| now.duration_since(*t) < PANIC_WINDOW);
            panics.push_back(now);
            let lost = match std::panic::catch_unwind(AssertUnwindSafe(|| self.recover(&why))) {
                Ok(lost) => lost,
                Err(p) => {
                    let e = format!(
                        "the dispatch loop panicked ({why}), and so did its recovery ({})",
                        panic_message(p.as_ref())
                    );
                    self.give_up(e);
                    return;
                }
            };
            if panics.len() >= MAX_PANICS {
                self.give_up(format!(
                    "the dispatch loop panicked {} times within {PANIC_WINDOW:?}, last: {why}",
                    panics.len()
                ));
                return;
            }
            tracing::error!(lost, "the dispatch loop panicked ({why}); restarted on the same queues");
        }
    }

    fn give_up(&self, why: String) {
        tracing::error!("{why}: forwarding stops");
        self.failed.send_replace(Some(why));
    }

    /// After a panic of the dispatch loop: the scheduler is built afresh (its state may be what
    /// panicked) and given the requests the old one still held, in arrival order, as a switch does.
    /// Queued requests no scheduler holds any more — taken for the batch the panic cut short — are
    /// answered with an error rather than left waiting. Returns how many were.
    fn recover(&self, why: &str) -> usize {
        let lost: Vec<Waiter> = {
            let mut st = self.lock();
            let mut queued: Vec<Req> = st.held.take().unwrap_or_default();
            queued.extend(st.sched.take_all());
            queued.sort_by_key(|r| r.seq);
            if let Ok(fresh) = (self.build)(st.sched.name(), &st.params) {
                st.sched = fresh;
            }
            let kept: HashSet<u64> = queued.iter().map(|r| r.seq).collect();
            for r in queued {
                st.sched.push(r);
            }
            let gone: Vec<u64> = st.waiting.keys().filter(|s| !kept.contains(s)).copied().collect();
            gone.iter().filter_map(|s| st.waiting.remove(s)).collect()
        };
        let n = lost.len();
        for w in lost {
            let e = format!("forwarding node lost the request: its dispatch loop panicked ({why})");
            let _ = w.reply.send(error(FsError::io(e)));
        }
        self.wake.notify_one();
        n
    }

    /// The dispatch loop: a free slot, then a batch, sent in its own task.
    async fn run(self: Arc<Self>) {
        loop {
            let Ok(slot) = self.slots.clone().acquire_owned().await else { return };
            let batch = loop {
                // Registered before looking, so a push between the look and the wait is not missed.
                let notified = self.wake.notified();
                let wait_until = {
                    let mut st = self.lock();
                    match next_batch(&mut st, unix_us()) {
                        Ok(batch) => break batch,
                        Err(until) => until,
                    }
                };
                match wait_until {
                    Some(t) => {
                        let dt = std::time::Duration::from_micros(t.saturating_sub(unix_us()));
                        tokio::select! {
                            _ = notified => {}
                            _ = tokio::time::sleep(dt) => {}
                        }
                    }
                    None => notified.await,
                }
            };
            let waiters: Vec<(Req, Waiter)> = {
                let mut st = self.lock();
                batch.into_iter().filter_map(|r| st.waiting.remove(&r.seq).map(|w| (r, w))).collect()
            };
            if waiters.is_empty() {
                continue;
            }
            let me = self.clone();
            self.in_flight.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                // Counted out and the slot given back even if the send panics (its clients then get
                // an error: their reply senders are dropped).
                let _sent = InFlight { dispatcher: me.clone(), _slot: slot };
                me.send(waiters).await;
            });
        }
    }

    /// Sends one batch (contiguous requests of one object, operation and job) and answers its clients.
    async fn send(&self, batch: Vec<(Req, Waiter)>) {
        let first = &batch[0].0;
        let (ds, object, offset, op) = (first.ds, first.object, first.offset, first.op);
        let total: u64 = batch.iter().map(|(r, _)| r.len).sum();
        let tag = batch[0].1.tag.clone();
        let via = Some(Forwarded { ion: self.ion, requests: batch.len() as u32 });
        self.stats.dispatched(ds, object, offset, total);
        let Some(peer) = self.servers.get(&ds) else {
            for (_, w) in batch {
                let _ = w.reply.send(error(FsError::invalid(format!("no data server {ds}"))));
            }
            return;
        };
        match op {
            Op::Read if batch.len() == 1 => {
                // Cut-through: the client gets the header at once and the data as it arrives.
                let Some((r, w)) = batch.into_iter().next() else { return };
                let req = DsRequest::Read { tag, object, offset, len: total as u32 };
                match peer.call_streamed::<DsCall, DsReply>(&DsCall { ds, req, via, mirror: None }, Bytes::new()).await
                {
                    Ok((DsReply::Data { len }, mut stream))
                        if len as usize == stream.left() && u64::from(len) <= total =>
                    {
                        let (tx, rx) = tokio::sync::mpsc::channel(64);
                        let streamed = Payload::Streamed { len: len as usize, chunks: rx };
                        if w.reply.send((Ok(DsReply::Data { len }), streamed)).is_err() {
                            return;
                        }
                        // An error or a stall ends the channel short: the client's stream is reset, never
                        // wrong, and the dispatch slot is not held forever by a server that stopped sending.
                        let pass_on = async {
                            while let Some(chunk) = stream.next().await {
                                let Ok(chunk) = chunk else { return false };
                                if tx.send(chunk).await.is_err() {
                                    return false;
                                }
                            }
                            true
                        };
                        if matches!(tokio::time::timeout(STREAM_DEADLINE, pass_on).await, Ok(true)) {
                            self.stats.answered(&w.tag, r.object, r.offset, u64::from(len), false);
                        }
                    }
                    Ok((DsReply::Data { len }, stream)) => {
                        let e = format!(
                            "data server {ds} declared {len} bytes ({} to come) for a read of {total}",
                            stream.left()
                        );
                        let _ = w.reply.send(error(FsError::protocol(e)));
                    }
                    Ok((other, _)) => {
                        let e = format!("data server {ds} answered Read with {other:?}");
                        let _ = w.reply.send(error(FsError::protocol(e)));
                    }
                    Err(e) => {
                        let _ = w.reply.send(error(e));
                    }
                }
            }
            Op::Read => {
                let req = DsRequest::Read { tag, object, offset, len: total as u32 };
                let result =
                    peer.call_chunked::<DsCall, DsReply>(&DsCall { ds, req, via, mirror: None }, Bytes::new()).await;
                let data = match result {
                    Ok((DsReply::Data { len }, chunks)) => {
                        let data = tessera_proto::frame::concat(chunks);
                        if data.len() != len as usize || data.len() as u64 > total {
                            Err(FsError::protocol(format!(
                                "data server {ds} sent {} bytes for a read of {total}",
                                data.len()
                            )))
                        } else {
                            Ok(data)
                        }
                    }
                    Ok((r, _)) => Err(FsError::protocol(format!("data server {ds} answered Read with {r:?}"))),
                    Err(e) => Err(e),
                };
                for (r, w) in batch {
                    let answer = match &data {
                        Ok(data) => {
                            // A short read (the object ends early) gives the later requests less or nothing.
                            let from = ((r.offset - offset) as usize).min(data.len());
                            let to = ((r.offset - offset + r.len) as usize).min(data.len());
                            let part = data.slice(from..to);
                            self.stats.answered(&w.tag, r.object, r.offset, part.len() as u64, false);
                            (Ok(DsReply::Data { len: part.len() as u32 }), Payload::Whole(part))
                        }
                        Err(e) => error(e.clone()),
                    };
                    let _ = w.reply.send(answer);
                }
            }
            Op::Write => {
                let sync = batch.iter().any(|(_, w)| w.sync);
                let payload = if batch.len() == 1 {
                    batch[0].1.data.clone()
                } else {
                    let mut buf = BytesMut::with_capacity(total as usize);
                    for (_, w) in &batch {
                        buf.extend_from_slice(&w.data);
                    }
                    buf.freeze()
                };
                let req = DsRequest::Write { tag, object, offset, sync };
                let result = peer.call::<DsCall, DsReply>(&DsCall { ds, req, via, mirror: None }, payload).await;
                let outcome = match result {
                    Ok((DsReply::Written { len }, _)) if u64::from(len) == total => Ok(()),
                    Ok((DsReply::Written { len }, _)) => {
                        Err(FsError::io(format!("data server {ds} wrote {len} of {total} bytes")))
                    }
                    Ok((r, _)) => Err(FsError::protocol(format!("data server {ds} answered Write with {r:?}"))),
                    Err(e) => Err(e),
                };
                for (r, w) in batch {
                    let answer = match &outcome {
                        Ok(()) => {
                            self.stats.answered(&w.tag, r.object, r.offset, r.len, true);
                            (Ok(DsReply::Written { len: r.len as u32 }), Payload::Whole(Bytes::new()))
                        }
                        Err(e) => error(e.clone()),
                    };
                    let _ = w.reply.send(answer);
                }
            }
        }
    }
}

/// A batch sent and not answered yet: counted in `in_flight` and holding its dispatch slot until dropped.
struct InFlight {
    dispatcher: Arc<Dispatcher>,
    _slot: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.dispatcher.in_flight.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A panic's message (its payload when it is a string).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (None, Some(s)) => s.clone(),
        (None, None) => "a panic without a message".to_string(),
    }
}

/// The next batch to send: the held release or the scheduler's next, extended while releases continue
/// it. `Err(Some(t))`: nothing before time `t`; `Err(None)`: nothing queued.
fn next_batch(st: &mut State, now_us: u64) -> Result<Vec<Req>, Option<u64>> {
    let mut batch = match st.held.take() {
        Some(h) => h,
        None => match st.sched.next(now_us) {
            Next::Release(v) if !v.is_empty() => v,
            Next::Release(_) | Next::Idle => return Err(None),
            Next::WaitUntil(t) => return Err(Some(t)),
        },
    };
    let mut bytes: u64 = batch.iter().map(|r| r.len).sum();
    while batch.len() < MAX_MERGE {
        let more = match st.sched.next(now_us) {
            Next::Release(v) if !v.is_empty() => v,
            _ => break,
        };
        let more_bytes: u64 = more.iter().map(|r| r.len).sum();
        let fits = batch.len() + more.len() <= MAX_MERGE && bytes + more_bytes <= MAX_MERGED_BYTES;
        if fits && batch.last().is_some_and(|last| last.continued_by(&more[0])) {
            bytes += more_bytes;
            batch.extend(more);
        } else {
            st.held = Some(more);
            break;
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(seq: u64, offset: u64, len: u64) -> Req {
        Req { seq, arrival_us: seq, ds: 0, ino: 1, object: 9, job: Arc::from("j"), op: Op::Read, offset, len }
    }

    fn state(name: &str) -> State {
        State {
            sched: sched::build(name, &Params { servers: vec![0, 1], ..Params::default() }).unwrap(),
            params: Params::default(),
            waiting: HashMap::new(),
            next_seq: 0,
            held: None,
        }
    }

    #[test]
    fn contiguous_releases_are_merged_up_to_sixteen() {
        let mut st = state("fifo");
        for i in 0..20 {
            st.sched.push(req(i, i * 100, 100));
        }
        let b = next_batch(&mut st, 0).unwrap();
        assert_eq!(b.len(), MAX_MERGE);
        assert_eq!(b.iter().map(|r| r.seq).collect::<Vec<_>>(), (0..16).collect::<Vec<_>>());
        let b = next_batch(&mut st, 0).unwrap();
        assert_eq!(b.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![16, 17, 18, 19]);
        assert_eq!(next_batch(&mut st, 0), Err(None));
    }

    #[test]
    fn a_release_that_does_not_continue_is_held_for_the_next_batch() {
        let mut st = state("fifo");
        st.sched.push(req(0, 0, 100));
        st.sched.push(req(1, 100, 100));
        st.sched.push(req(2, 5000, 100)); // a gap
        st.sched.push(req(3, 5100, 100));
        let mut other_job = req(4, 5200, 100);
        other_job.job = Arc::from("k");
        st.sched.push(other_job);
        let seqs = |b: Vec<Req>| b.iter().map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(next_batch(&mut st, 0).unwrap()), vec![0, 1]);
        assert_eq!(st.held.as_ref().map(|h| h[0].seq), Some(2));
        assert_eq!(seqs(next_batch(&mut st, 0).unwrap()), vec![2, 3]);
        assert_eq!(seqs(next_batch(&mut st, 0).unwrap()), vec![4], "another job is not merged");
    }

    /// FIFO that takes its oldest request and panics (a scheduler bug) once `at` requests are queued.
    struct Panicky {
        inner: sched::fifo::Fifo,
        at: usize,
    }

    impl Scheduler for Panicky {
        fn name(&self) -> &'static str {
            "fifo"
        }

        fn push(&mut self, r: Req) {
            self.inner.push(r)
        }

        fn next(&mut self, now_us: u64) -> Next {
            if self.inner.len() < self.at {
                return Next::Idle;
            }
            let _taken = self.inner.next(now_us);
            panic!("a scheduler bug");
        }

        fn len(&self) -> usize {
            self.inner.len()
        }

        fn depths(&self) -> Vec<(String, usize)> {
            self.inner.depths()
        }

        fn take_all(&mut self) -> Vec<Req> {
            self.inner.take_all()
        }
    }

    /// Data server 0 at a port nothing listens on: a call fails after a short connect timeout.
    fn dead_server() -> (tempfile::TempDir, HashMap<DsId, Arc<RpcPeer>>) {
        use tessera_ops::ca::{issue_to_dir, write_ca};
        use tessera_proto::rpc::{self, Tuning};
        use tessera_proto::tls::NodeIdentity;
        let d = tempfile::tempdir().unwrap();
        let ca = tessera_ops::issue::generate_ca("t").unwrap();
        write_ca(d.path(), &ca).unwrap();
        let files = issue_to_dir(d.path(), &ca, tessera_proto::Role::Ion, "ion-0", &["127.0.0.1".into()]);
        let id = NodeIdentity::load(&files.unwrap()).unwrap();
        let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let tuning = Tuning { connect_timeout: Duration::from_millis(200), ..Tuning::default() };
        let peer = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &id, tessera_proto::Role::Ds, addr, tuning);
        (d, HashMap::from([(0, Arc::new(peer.unwrap()))]))
    }

    fn read(offset: u64) -> DsRequest {
        let origin = tessera_proto::Origin { job: "j".into(), client: 1, pid: 2 };
        DsRequest::Read { tag: IoTag { origin, ino: 1 }, object: 9, offset, len: 10 }
    }

    /// Submits `n` reads at once; their answers' errors, in any order.
    async fn submit_reads(d: &Arc<Dispatcher>, n: u64) -> Vec<String> {
        let calls: Vec<_> = (0..n)
            .map(|i| {
                let d = d.clone();
                tokio::spawn(async move { d.submit(0, read(i * 100), Bytes::new(), 10).await })
            })
            .collect();
        let mut errors = Vec::new();
        for c in calls {
            let (r, _) = tokio::time::timeout(Duration::from_secs(10), c).await.expect("answered").unwrap();
            errors.push(r.expect_err("no data server there").detail);
        }
        errors
    }

    #[tokio::test]
    async fn a_panicking_dispatch_loop_restarts_on_the_same_queues() {
        let (_d, servers) = dead_server();
        let sched = Box::new(Panicky { inner: Default::default(), at: 3 });
        let d = Dispatcher::start(0, servers, sched, sched::build, Params::default(), 1, Arc::default());
        // The request the panic took is answered with an error saying so; the two still queued are sent
        // (and fail: no data server there) by the restarted loop.
        let errors = submit_reads(&d, 3).await;
        let lost = errors.iter().filter(|e| e.contains("dispatch loop panicked (a scheduler bug)")).count();
        assert_eq!(lost, 1, "{errors:?}");
        // The loop keeps forwarding, with a fresh scheduler of the same kind.
        let errors = submit_reads(&d, 1).await;
        assert!(!errors[0].contains("panicked"), "{errors:?}");
        assert_eq!(d.view().scheduler, "fifo");
        assert!(tokio::time::timeout(Duration::from_millis(50), d.failed()).await.is_err(), "not given up");
    }

    #[tokio::test]
    async fn a_dispatch_loop_that_keeps_panicking_is_given_up() {
        let (_d, servers) = dead_server();
        let build: Build = |_, _| Ok(Box::new(Panicky { inner: Default::default(), at: 1 }));
        let sched = build("fifo", &Params::default()).unwrap();
        let d = Dispatcher::start(0, servers, sched, build, Params::default(), 1, Arc::default());
        let errors = submit_reads(&d, MAX_PANICS as u64).await;
        assert!(errors.iter().all(|e| e.contains("dispatch loop panicked")), "{errors:?}");
        let why = tokio::time::timeout(Duration::from_secs(5), d.failed()).await.expect("given up");
        assert!(why.contains(&format!("panicked {MAX_PANICS} times")), "{why}");
    }

    #[test]
    fn twins_waits_for_its_window() {
        let mut st = state("twins");
        let mut r = req(0, 0, 100);
        r.ds = 1;
        st.sched.push(r);
        // Window 0 (1 ms from the epoch) belongs to server 0 for ION 0: nothing to send before 1000 µs.
        assert_eq!(next_batch(&mut st, 10), Err(Some(1_000)));
        assert_eq!(next_batch(&mut st, 1_000).unwrap().len(), 1);
    }
}
