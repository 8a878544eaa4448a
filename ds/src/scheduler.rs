//! The request scheduler between the network and the device.
//!
//! Data requests are queued per job (FIFO within a job) and released to the device, at most `depth`
//! at once, choosing the job through a [`Policy`]: [`RoundRobin`] is the work-conserving mode; an
//! orchestrated mode (only the job owning the current time slice is released) is another policy that
//! answers [`Pick::Wait`] outside its job's slice.
//!
//! The scheduler runs the work itself, in the task of the call it belongs to: a request released at
//! once (a free slot, its job picked) runs right away; one that waits is handed its slot when the
//! policy picks its job and then runs. A request holds its slot until its work is done (or panicked:
//! the slot comes back and only that request fails), and giving a slot back picks the next request. So
//! up to `depth` requests run in parallel, each on its own call's task, with no hand-off to a
//! dispatcher task and no task spawned per request. A small timer task asks the policy again at the
//! instant it said to wait until, or when told its decision may have changed ([`Policy::waker`]). A
//! request whose caller goes away while it waits is dropped from its queue unstarted.
//!
//! [`Orchestrated`] follows the orchestrator's [`ServeCommand`]s held in a [`ServeControl`]: `All` is
//! round robin, `Job(j)` releases only j's requests (others wait even when the device is idle),
//! `Others` everything but the eligible jobs. Without a newer command within the command's
//! `fallback_ms` it falls back to `All` by itself, so the orchestrator can never hang I/O.

use crate::locality::Locality;
use futures::FutureExt;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_proto::msg::{ServeCommand, ServeTarget};
use tessera_proto::{FsError, FsResult};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// A queued request: its job, and where its slot is handed to it when its turn comes.
struct Pending {
    job: Arc<str>,
    turn: oneshot::Sender<Slot>,
}

/// The per-job queues as a policy sees them.
#[derive(Default)]
pub struct JobQueues {
    queues: HashMap<Arc<str>, VecDeque<Pending>>,
    /// Jobs with waiting requests, in round-robin order (front = next).
    ring: VecDeque<Arc<str>>,
}

impl JobQueues {
    /// Jobs with waiting requests, next in turn first.
    pub fn jobs(&self) -> impl Iterator<Item = &Arc<str>> {
        self.ring.iter()
    }

    /// Requests waiting for `job`.
    pub fn waiting(&self, job: &str) -> usize {
        self.queues.get(job).map_or(0, VecDeque::len)
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    fn push(&mut self, p: Pending) {
        let q = self.queues.entry(p.job.clone()).or_default();
        if q.is_empty() {
            self.ring.push_back(p.job.clone());
        }
        q.push_back(p);
    }

    /// Takes the oldest request of `job`; the job moves to the back of the ring (its turn is used).
    fn pop(&mut self, job: &str) -> Option<Pending> {
        let q = self.queues.get_mut(job)?;
        let p = q.pop_front()?;
        let pos = self.ring.iter().position(|j| &**j == job);
        if let Some(pos) = pos {
            let j = self.ring.remove(pos);
            if !q.is_empty() {
                self.ring.extend(j);
            }
        }
        if q.is_empty() {
            self.queues.remove(job);
        }
        Some(p)
    }
}

/// What a policy wants served next.
pub enum Pick {
    /// Serve the oldest request of this job.
    Job(Arc<str>),
    /// Serve nothing now; ask again at this instant (or when something changes if `None`).
    Wait(Option<Instant>),
}

/// Chooses which job's queue is released next.
pub trait Policy: Send + 'static {
    fn pick(&mut self, queues: &JobQueues, now: Instant) -> Pick;

    /// Notified when the policy's decision may have changed outside the scheduler (a new command).
    fn waker(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// Work-conserving round-robin over the jobs with waiting requests.
#[derive(Default)]
pub struct RoundRobin;

impl Policy for RoundRobin {
    fn pick(&mut self, queues: &JobQueues, _now: Instant) -> Pick {
        match queues.jobs().next() {
            Some(j) => Pick::Job(j.clone()),
            None => Pick::Wait(None),
        }
    }
}

#[derive(Default)]
struct Gauges {
    queued: AtomicU32,
    in_service: AtomicU32,
    /// Time with at least one request in service, microseconds.
    busy_us: AtomicU64,
}

/// The queues, the policy and the slots in use.
struct State {
    queues: JobQueues,
    policy: Box<dyn Policy>,
    in_service: u32,
    busy_since: Option<Instant>,
    /// When the policy asked to be asked again (its last [`Pick::Wait`]).
    wake_at: Option<Instant>,
}

struct Shared {
    state: Mutex<State>,
    depth: u32,
    gauges: Gauges,
    /// Tells the timer task that `wake_at` changed.
    rearm: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands the free slots to the requests the policy picks, until the slots or the queues run out or
    /// the policy says to wait.
    fn release(self: &Arc<Self>, st: &mut State) {
        let mut wake_at = None;
        while st.in_service < self.depth && !st.queues.is_empty() {
            match st.policy.pick(&st.queues, Instant::now()) {
                Pick::Job(job) => {
                    let Some(p) = st.queues.pop(&job) else { break };
                    self.gauges.queued.fetch_sub(1, Ordering::Relaxed);
                    // The slot is counted below, under this lock, before its holder can give it back.
                    match p.turn.send(Slot { shared: self.clone(), armed: true }) {
                        Ok(()) => {
                            if st.in_service == 0 {
                                st.busy_since = Some(Instant::now());
                            }
                            st.in_service += 1;
                            self.gauges.in_service.fetch_add(1, Ordering::Relaxed);
                        }
                        // Its caller went away while it waited: dropped unstarted (the slot, never
                        // counted, must not give itself back: that would re-enter this lock).
                        Err(mut slot) => slot.armed = false,
                    }
                }
                Pick::Wait(at) => {
                    wake_at = at;
                    break;
                }
            }
        }
        if st.wake_at != wake_at {
            st.wake_at = wake_at;
            self.rearm.notify_one();
        }
    }

    /// Adds the busy period that just ended, if the device went idle.
    fn idle_check(&self, st: &mut State) {
        if st.in_service == 0 {
            if let Some(t) = st.busy_since.take() {
                self.gauges.busy_us.fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
        }
    }
}

/// A request's place at the device: given back (and the next request released) when dropped.
struct Slot {
    shared: Arc<Shared>,
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.shared.lock();
        st.in_service = st.in_service.saturating_sub(1);
        self.shared.gauges.in_service.fetch_sub(1, Ordering::Relaxed);
        self.shared.idle_check(&mut st);
        self.shared.release(&mut st);
    }
}

/// Asks the policy again when it said to wait until an instant, or when its waker says its decision
/// may have changed.
async fn timer(shared: Arc<Shared>, policy_waker: Arc<Notify>) {
    loop {
        let at = shared.lock().wake_at;
        let sleep = async {
            match at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.rearm.notified() => continue,
            _ = policy_waker.notified() => {}
            _ = sleep => {}
        }
        let mut st = shared.lock();
        shared.release(&mut st);
    }
}

/// The last handle stops the timer task.
struct Handle {
    shared: Arc<Shared>,
    timer: tokio::task::AbortHandle,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

/// Handle to the scheduler; clones share the same queues and slots.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Handle>,
}

impl Scheduler {
    /// A scheduler serving at most `depth` requests at once; its timer task runs on the current runtime.
    pub fn start(depth: u32, policy: impl Policy) -> Scheduler {
        let policy_waker = policy.waker().unwrap_or_default();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queues: JobQueues::default(),
                policy: Box::new(policy),
                in_service: 0,
                busy_since: None,
                wake_at: None,
            }),
            depth: depth.max(1),
            gauges: Gauges::default(),
            rearm: Notify::new(),
        });
        let timer = tokio::spawn(timer(shared.clone(), policy_waker)).abort_handle();
        Scheduler { inner: Arc::new(Handle { shared, timer }) }
    }

    /// Queues `work` for `job`, runs it when the policy releases it and returns its result.
    pub async fn submit<T, F>(&self, job: &str, work: F) -> FsResult<T>
    where
        F: Future<Output = FsResult<T>>,
    {
        self.submit_arc(Arc::from(job), work).await
    }

    /// [`Scheduler::submit`] with the job id already shared.
    pub async fn submit_arc<T, F>(&self, job: Arc<str>, work: F) -> FsResult<T>
    where
        F: Future<Output = FsResult<T>>,
    {
        let shared = &self.inner.shared;
        let (turn, my_turn) = oneshot::channel();
        {
            let mut st = shared.lock();
            shared.gauges.queued.fetch_add(1, Ordering::Relaxed);
            st.queues.push(Pending { job, turn });
            shared.release(&mut st);
        }
        let slot = my_turn.await.map_err(|_| FsError::unavailable("request scheduler stopped"))?;
        let r = AssertUnwindSafe(work).catch_unwind().await;
        drop(slot);
        r.unwrap_or_else(|_| Err(FsError::io("request abandoned by the device")))
    }

    /// Requests waiting or in service.
    pub fn depth(&self) -> u32 {
        let g = &self.inner.shared.gauges;
        g.queued.load(Ordering::Relaxed) + g.in_service.load(Ordering::Relaxed)
    }

    /// Seconds the device had at least one request in service (up to the last idle moment).
    pub fn busy_seconds(&self) -> f64 {
        self.inner.shared.gauges.busy_us.load(Ordering::Relaxed) as f64 / 1e6
    }
}

/// The orchestrator's current command, and the fallback to work-conserving service.
pub struct ServeControl {
    state: Mutex<ServeState>,
    locality: Arc<Locality>,
    waker: Arc<Notify>,
    default_fallback: Duration,
}

struct ServeState {
    target: ServeTarget,
    /// Epoch of the last accepted command (0: none yet).
    epoch: u64,
    /// Older epochs are refused while this holds. A fallback (or the silence that would cause one)
    /// clears it: a restarted orchestrator may count its epochs from anew.
    ordered: bool,
    last_command: std::time::Instant,
    fallback: Duration,
    switched_at_us: u64,
    /// Changes with every switch of the served object (commands and fallbacks).
    generation: u64,
    fallen_back: bool,
    fallbacks: u64,
}

/// The serve state as reports and metrics show it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeSnapshot {
    pub target: ServeTarget,
    /// Epoch of the command in force (0 = work-conserving).
    pub epoch: u64,
    /// Currently in fallback (the orchestrator went silent).
    pub fallen_back: bool,
    /// Fallbacks since start.
    pub fallbacks: u64,
    pub switched_at_unix_us: u64,
}

impl ServeControl {
    /// `default_fallback` applies to commands with `fallback_ms` = 0.
    pub fn new(locality: Arc<Locality>, default_fallback: Duration) -> Arc<ServeControl> {
        Arc::new(ServeControl {
            state: Mutex::new(ServeState {
                target: ServeTarget::All,
                epoch: 0,
                ordered: false,
                last_command: std::time::Instant::now(),
                fallback: default_fallback,
                switched_at_us: crate::trace::unix_us(),
                generation: 0,
                fallen_back: false,
                fallbacks: 0,
            }),
            locality,
            waker: Arc::new(Notify::new()),
            default_fallback: default_fallback.max(Duration::from_millis(1)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ServeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Falls back to `All` once the command in force has gone unrenewed for its fallback time. A
    /// server already serving `All` on command falls back too (counted, epochs no longer ordered): its
    /// orchestrator went silent all the same.
    fn expire(&self, st: &mut ServeState, now: std::time::Instant) {
        let commanded = st.ordered || st.target != ServeTarget::All;
        if commanded && now >= st.last_command + st.fallback {
            tracing::warn!(
                epoch = st.epoch,
                "no orchestrator command for {:?}: falling back to work-conserving service",
                st.fallback
            );
            st.fallen_back = true;
            st.fallbacks += 1;
            st.ordered = false;
            if st.target != ServeTarget::All {
                st.target = ServeTarget::All;
                st.generation += 1;
                st.switched_at_us = crate::trace::unix_us();
                self.locality.set_slice(st.generation, ServeTarget::All, 0, None);
            }
        }
    }

    /// Applies a command; returns the epoch in force and the wall-clock time (µs since the Unix epoch)
    /// its target took effect. A command older than the one in force is ignored (the reply then names
    /// the newer epoch); the same epoch again only renews the fallback deadline.
    pub fn apply(&self, cmd: &ServeCommand) -> (u64, u64) {
        let now = std::time::Instant::now();
        let mut st = self.lock();
        self.expire(&mut st, now);
        if now >= st.last_command + st.fallback {
            st.ordered = false;
        }
        if st.ordered && cmd.epoch < st.epoch {
            tracing::debug!(epoch = cmd.epoch, current = st.epoch, "ignoring an outdated serve command");
            return (st.epoch, st.switched_at_us);
        }
        let same = st.ordered && cmd.epoch == st.epoch && st.target == cmd.target;
        st.fallback =
            if cmd.fallback_ms > 0 { Duration::from_millis(cmd.fallback_ms.into()) } else { self.default_fallback };
        st.last_command = now;
        st.epoch = cmd.epoch;
        st.ordered = true;
        st.fallen_back = false;
        if !same {
            st.target = cmd.target.clone();
            st.generation += 1;
            st.switched_at_us = crate::trace::unix_us();
        }
        let until = (st.target != ServeTarget::All).then(|| now + st.fallback);
        self.locality.set_slice(st.generation, st.target.clone(), st.epoch, until);
        let out = (st.epoch, st.switched_at_us);
        drop(st);
        self.waker.notify_one();
        out
    }

    pub fn snapshot(&self) -> ServeSnapshot {
        let mut st = self.lock();
        self.expire(&mut st, std::time::Instant::now());
        ServeSnapshot {
            target: st.target.clone(),
            epoch: if st.target == ServeTarget::All { 0 } else { st.epoch },
            fallen_back: st.fallen_back,
            fallbacks: st.fallbacks,
            switched_at_unix_us: st.switched_at_us,
        }
    }
}

/// Dedicated service following a [`ServeControl`]; round robin among the released jobs.
pub struct Orchestrated {
    ctl: Arc<ServeControl>,
}

impl Orchestrated {
    pub fn new(ctl: Arc<ServeControl>) -> Orchestrated {
        Orchestrated { ctl }
    }
}

impl Policy for Orchestrated {
    fn pick(&mut self, queues: &JobQueues, now: Instant) -> Pick {
        let mut st = self.ctl.lock();
        self.ctl.expire(&mut st, now.into_std());
        let found = match &st.target {
            ServeTarget::All => queues.jobs().next(),
            ServeTarget::Job(j) => queues.jobs().find(|x| ***x == **j),
            ServeTarget::Others { eligible } => queues.jobs().find(|x| !eligible.iter().any(|e| **e == ***x)),
        };
        match found {
            Some(j) => Pick::Job(j.clone()),
            None if st.target == ServeTarget::All => Pick::Wait(None),
            // Hold the others, but never past the fallback deadline.
            None => Pick::Wait(Some(Instant::from_std(st.last_command + st.fallback))),
        }
    }

    fn waker(&self) -> Option<Arc<Notify>> {
        Some(self.ctl.waker.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    type Log = Arc<Mutex<Vec<String>>>;

    fn record(log: &Log, s: &str) -> impl Future<Output = FsResult<()>> + Send + 'static {
        let log = log.clone();
        let s = s.to_string();
        async move {
            log.lock().unwrap().push(s);
            Ok(())
        }
    }

    #[tokio::test]
    async fn jobs_interleave_round_robin() {
        let s = Scheduler::start(1, RoundRobin);
        let log: Log = Arc::default();
        let (gate_tx, gate_rx) = oneshot::channel::<()>();
        // Holds the only device slot while the queues fill up.
        let blocker = tokio::spawn({
            let s = s.clone();
            async move { s.submit("x", async move { gate_rx.await.map_err(|_| FsError::io("gate")) }).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut waits = Vec::new();
        for (job, n) in [("a", 3), ("b", 3), ("c", 1)] {
            for i in 0..n {
                let s = s.clone();
                let fut = record(&log, &format!("{job}{i}"));
                let job = job.to_string();
                waits.push(tokio::spawn(async move { s.submit(&job, fut).await }));
                // Keep submission order deterministic.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        assert_eq!(s.depth(), 8);
        gate_tx.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        for w in waits {
            w.await.unwrap().unwrap();
        }
        assert_eq!(*log.lock().unwrap(), ["a0", "b0", "c0", "a1", "b1", "a2", "b2"]);
        assert_eq!(s.depth(), 0);
    }

    #[tokio::test]
    async fn depth_limit_respected() {
        let s = Scheduler::start(3, RoundRobin);
        let active = Arc::new(AtomicU32::new(0));
        let max = Arc::new(AtomicU32::new(0));
        let mut waits = Vec::new();
        for i in 0..30 {
            let (s, active, max) = (s.clone(), active.clone(), max.clone());
            waits.push(tokio::spawn(async move {
                s.submit(&format!("j{}", i % 4), async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
            }));
        }
        for w in waits {
            w.await.unwrap().unwrap();
        }
        assert_eq!(max.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn work_runs_in_the_callers_task_and_a_caller_gone_while_waiting_frees_nothing_twice() {
        let s = Scheduler::start(1, RoundRobin);
        // The work may borrow the caller's state: it is not sent anywhere.
        let mut seen = Vec::new();
        s.submit("a", async {
            seen.push(1);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(seen, [1]);
        // A request whose caller goes away while it waits is dropped unstarted; the slot stays usable.
        let (gate_tx, gate_rx) = oneshot::channel::<()>();
        let blocker = tokio::spawn({
            let s = s.clone();
            async move { s.submit("x", async move { gate_rx.await.map_err(|_| FsError::io("gate")) }).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Arc::new(AtomicU32::new(0));
        let waiting = tokio::spawn({
            let (s, started) = (s.clone(), started.clone());
            async move {
                s.submit("y", async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(s.depth(), 2);
        waiting.abort();
        let _ = waiting.await;
        gate_tx.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        let v = tokio::time::timeout(Duration::from_secs(5), s.submit("z", async { Ok(7) })).await.unwrap();
        assert_eq!(v.unwrap(), 7);
        assert_eq!((started.load(Ordering::SeqCst), s.depth()), (0, 0));
    }

    #[tokio::test]
    async fn failing_request_does_not_stall() {
        let s = Scheduler::start(1, RoundRobin);
        let e = s.submit::<(), _>("a", async { Err(FsError::io("disk on fire")) }).await.unwrap_err();
        assert_eq!(e.detail, "disk on fire");
        // A panicking request releases its slot too.
        let s2 = s.clone();
        let p = tokio::spawn(async move {
            s2.submit::<(), _>("a", async {
                panic!("boom");
            })
            .await
        });
        assert!(p.await.unwrap().is_err());
        let v = tokio::time::timeout(Duration::from_secs(5), s.submit("b", async { Ok(42) })).await.unwrap();
        assert_eq!(v.unwrap(), 42);
    }
}

#[cfg(test)]
mod orchestrated_tests {
    use super::*;
    use crate::device::DeviceModel;
    use rand::Rng;
    use std::time::Duration;

    fn setup() -> (Arc<ServeControl>, Scheduler) {
        let loc = Locality::new(0, DeviceModel::None, Duration::from_secs(1));
        let ctl = ServeControl::new(loc, Duration::from_secs(1));
        let s = Scheduler::start(4, Orchestrated::new(ctl.clone()));
        (ctl, s)
    }

    fn cmd(epoch: u64, target: ServeTarget, fallback_ms: u32) -> ServeCommand {
        ServeCommand { epoch, target, slice_ms: 100, fallback_ms }
    }

    fn job(j: &str) -> ServeTarget {
        ServeTarget::Job(j.into())
    }

    fn spawn_req(s: &Scheduler, j: &str) -> tokio::task::JoinHandle<FsResult<()>> {
        let (s, j) = (s.clone(), j.to_string());
        tokio::spawn(async move { s.submit(&j, async { Ok(()) }).await })
    }

    async fn done_within(h: &mut tokio::task::JoinHandle<FsResult<()>>, ms: u64) -> bool {
        match tokio::time::timeout(Duration::from_millis(ms), &mut *h).await {
            Ok(r) => {
                r.unwrap().unwrap();
                true
            }
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn dedicated_holds_others_and_releases_on_switch() {
        let (ctl, s) = setup();
        // Work-conserving by default.
        assert!(done_within(&mut spawn_req(&s, "b"), 1000).await);
        let (e, at) = ctl.apply(&cmd(1, job("a"), 10_000));
        assert_eq!(e, 1);
        assert!(at > 1_600_000_000_000_000);
        let mut b = spawn_req(&s, "b");
        assert!(!done_within(&mut b, 100).await, "b is held while a is served, even with an idle device");
        assert!(done_within(&mut spawn_req(&s, "a"), 1000).await);
        assert_eq!(s.depth(), 1);
        ctl.apply(&cmd(2, job("b"), 10_000));
        assert!(done_within(&mut b, 1000).await, "released at the switch");
        // Others: everything but the eligible jobs.
        ctl.apply(&cmd(3, ServeTarget::Others { eligible: vec!["a".into()] }, 10_000));
        let mut a = spawn_req(&s, "a");
        assert!(done_within(&mut spawn_req(&s, "c"), 1000).await);
        assert!(!done_within(&mut a, 100).await);
        ctl.apply(&cmd(4, ServeTarget::All, 10_000));
        assert!(done_within(&mut a, 1000).await);
        assert_eq!(ctl.snapshot().epoch, 0, "All is reported as work-conserving");
    }

    #[tokio::test]
    async fn older_epochs_are_ignored() {
        let (ctl, s) = setup();
        let (_, at5) = ctl.apply(&cmd(5, job("a"), 10_000));
        assert_eq!(ctl.apply(&cmd(3, job("b"), 10_000)), (5, at5));
        assert_eq!(ctl.snapshot().target, job("a"));
        let mut b = spawn_req(&s, "b");
        assert!(!done_within(&mut b, 50).await);
        // Re-delivery of the same command keeps its switch time.
        assert_eq!(ctl.apply(&cmd(5, job("a"), 10_000)), (5, at5));
        let (e, at6) = ctl.apply(&cmd(6, job("b"), 10_000));
        assert!(e == 6 && at6 >= at5);
        assert!(done_within(&mut b, 1000).await);
    }

    #[tokio::test]
    async fn falls_back_when_the_orchestrator_goes_silent() {
        let (ctl, s) = setup();
        let t = std::time::Instant::now();
        ctl.apply(&cmd(9, job("a"), 150));
        let mut b = spawn_req(&s, "b");
        assert!(done_within(&mut b, 2000).await, "released by the fallback");
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(140) && waited < Duration::from_millis(1000), "{waited:?}");
        let snap = ctl.snapshot();
        assert!(snap.fallen_back && snap.fallbacks == 1 && snap.target == ServeTarget::All && snap.epoch == 0);
        // A restarted orchestrator counting from 1 is accepted after the fallback.
        assert_eq!(ctl.apply(&cmd(1, job("a"), 150)).0, 1);
        // Silence while serving All on command is a fallback too (seen in the metrics), counted once.
        ctl.apply(&cmd(5, ServeTarget::All, 100));
        tokio::time::sleep(Duration::from_millis(150)).await;
        let snap = ctl.snapshot();
        assert!(snap.fallen_back && snap.fallbacks == 2 && snap.target == ServeTarget::All, "{snap:?}");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(ctl.snapshot().fallbacks, 2);
        assert_eq!(ctl.apply(&cmd(1, job("a"), 150)).0, 1);
        assert!(!ctl.snapshot().fallen_back);
        // Renewals keep the slice alive past one fallback period.
        let mut c = spawn_req(&s, "c");
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            ctl.apply(&cmd(1, job("a"), 150));
        }
        assert!(!done_within(&mut c, 10).await);
        assert!(done_within(&mut c, 2000).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nothing_stays_stuck_under_random_commands() {
        let (ctl, s) = setup();
        let jobs = ["a", "b", "c", "d"];
        let mut waits = Vec::new();
        let mut epoch = 0u64;
        for _ in 0..200 {
            let (jn, r, d) = {
                let mut rng = rand::thread_rng();
                (jobs[rng.gen_range(0..4)], rng.gen_range(0..10), rng.gen_range(0..3))
            };
            if r < 3 {
                // Sometimes out of order.
                epoch += 1;
                let e = if r == 0 { epoch.saturating_sub(3) } else { epoch };
                let target = match r {
                    0 | 1 => job(jn),
                    _ => ServeTarget::Others { eligible: vec![jn.to_string()] },
                };
                ctl.apply(&cmd(e, target, 100));
            } else {
                let s = s.clone();
                waits.push(tokio::spawn(async move {
                    s.submit(jn, async move {
                        tokio::time::sleep(Duration::from_millis(d)).await;
                        Ok(())
                    })
                    .await
                }));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // After the last command every request completes within the fallback time (plus slack).
        for w in waits {
            tokio::time::timeout(Duration::from_secs(3), w).await.expect("request stuck").unwrap().unwrap();
        }
        // Depth counts down as slots are given back (before each caller has its result).
        for _ in 0..100 {
            if s.depth() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(s.depth(), 0);
    }
}
