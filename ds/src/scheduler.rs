//! The request scheduler between the network and the device.
//!
//! Data requests are queued per job (FIFO within a job). A dispatcher task owns the queues and hands
//! requests to the device, at most `depth` at once, choosing the job through a [`Policy`]:
//! [`RoundRobin`] is the work-conserving mode; an orchestrated mode (only the job owning the current
//! time slice is released) is another policy that answers [`Pick::Wait`] outside its job's slice.
//! Each request carries a oneshot through which its caller gets the result.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tessera_proto::{FsError, FsResult};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A queued request: starting it yields the future that performs it and reports its result.
struct Pending {
    job: Arc<str>,
    start: Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>,
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
}

/// Handle to the scheduler; clones share the same dispatcher.
#[derive(Clone)]
pub struct Scheduler {
    tx: mpsc::UnboundedSender<Pending>,
    gauges: Arc<Gauges>,
}

impl Scheduler {
    /// Starts a dispatcher on the current runtime serving at most `depth` requests at once.
    pub fn start(depth: u32, policy: impl Policy) -> Scheduler {
        let (tx, rx) = mpsc::unbounded_channel();
        let gauges = Arc::new(Gauges::default());
        tokio::spawn(dispatch(rx, depth.max(1), Box::new(policy), gauges.clone()));
        Scheduler { tx, gauges }
    }

    /// Queues `work` for `job` and returns its result once the device has served it.
    pub async fn submit<T, F>(&self, job: &str, work: F) -> FsResult<T>
    where
        T: Send + 'static,
        F: Future<Output = FsResult<T>> + Send + 'static,
    {
        let (done_tx, done_rx) = oneshot::channel();
        let start: Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send> = Box::new(move || {
            Box::pin(async move {
                // The caller may have gone away (connection closed): the result is then dropped.
                let _ = done_tx.send(work.await);
            })
        });
        self.gauges.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(Pending { job: Arc::from(job), start }).is_err() {
            self.gauges.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(FsError::unavailable("request scheduler stopped"));
        }
        done_rx.await.map_err(|_| FsError::io("request abandoned by the device"))?
    }

    /// Requests waiting or in service.
    pub fn depth(&self) -> u32 {
        self.gauges.queued.load(Ordering::Relaxed) + self.gauges.in_service.load(Ordering::Relaxed)
    }
}

/// Sends a completion to the dispatcher when a request ends, even if it panicked.
struct DoneGuard(mpsc::UnboundedSender<()>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

async fn dispatch(
    mut rx: mpsc::UnboundedReceiver<Pending>,
    depth: u32,
    mut policy: Box<dyn Policy>,
    gauges: Arc<Gauges>,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
    let mut queues = JobQueues::default();
    let mut in_service = 0u32;
    let mut open = true;
    loop {
        // Take everything already submitted so the policy sees all waiting jobs.
        while let Ok(p) = rx.try_recv() {
            queues.push(p);
        }
        let mut wake_at = None;
        while in_service < depth && !queues.is_empty() {
            match policy.pick(&queues, Instant::now()) {
                Pick::Job(job) => {
                    let Some(p) = queues.pop(&job) else { break };
                    in_service += 1;
                    gauges.queued.fetch_sub(1, Ordering::Relaxed);
                    gauges.in_service.fetch_add(1, Ordering::Relaxed);
                    let guard = DoneGuard(done_tx.clone());
                    let fut = (p.start)();
                    tokio::spawn(async move {
                        fut.await;
                        drop(guard);
                    });
                }
                Pick::Wait(at) => {
                    wake_at = at;
                    break;
                }
            }
        }
        if !open && queues.is_empty() && in_service == 0 {
            return;
        }
        let sleep = async {
            match wake_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = rx.recv(), if open => match p {
                Some(p) => queues.push(p),
                None => open = false,
            },
            Some(()) = done_rx.recv() => {
                in_service -= 1;
                gauges.in_service.fetch_sub(1, Ordering::Relaxed);
            }
            _ = sleep => {}
        }
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
