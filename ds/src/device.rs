//! The device model: `none` (real I/O only) or `hdd`, an emulated rotating disk with one head.
//!
//! Every request is served the same way ([`Device::perform`]): the real I/O, which the `hdd` device
//! only delays, never changes. The `hdd` device waits for its head to reach the request, lets the real
//! I/O happen, then holds the head for the modelled service time (seek(distance) + rotational latency +
//! size / media rate) of each of the request's runs: a vectored read is one request whose runs the head
//! visits one by one, each with its own seek, in the order its local C-LOOK elevator chooses among all
//! the runs waiting (other requests' runs may come between them). It serves one run at a time and runs
//! on its own OS thread with a virtual clock (`free_at += service`) so timer rounding never
//! accumulates: a 64 KiB transfer is only 0.84 ms, below tokio's timer granularity.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tessera_proto::config::{DeviceKind, Elevator, HddParams, UnknownName};
use tessera_proto::{FsError, FsResult, ObjectId};
use tokio::sync::oneshot;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Fsync,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Fsync => "fsync",
        }
    }
}

/// One request as the device sees it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceOp {
    pub kind: OpKind,
    pub object: ObjectId,
    pub offset: u64,
    pub len: u64,
}

/// Timing of the emulated disk. Seek over a fraction x = d / capacity of the disk:
/// `seek(x) = t2t + a*sqrt(x) + b*x` (0 for d = 0), with a and b fitted so that seek(→0) = track-to-track,
/// seek(1/3) = average seek (1/3 of the capacity is the mean random distance) and seek(1) = full stroke.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HddModel {
    capacity: f64,
    t2t_us: f64,
    a_us: f64,
    b_us: f64,
    half_rotation_us: f64,
    /// Media rate in bytes per microsecond (= MB/s with MB = 10^6 bytes).
    bytes_per_us: f64,
    /// C-LOOK (true) or arrival order.
    clook: bool,
}

impl HddModel {
    pub fn new(p: &HddParams) -> FsResult<HddModel> {
        let vals = [p.track_to_track_ms, p.average_seek_ms, p.full_stroke_ms, p.rpm, p.media_rate_mb_s, p.capacity_gb];
        if vals.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            return Err(FsError::invalid(format!("ds_options.hdd: every parameter must be positive ({p:?})")));
        }
        if !(p.track_to_track_ms <= p.average_seek_ms && p.average_seek_ms <= p.full_stroke_ms) {
            return Err(FsError::invalid(
                "ds_options.hdd: need track_to_track_ms <= average_seek_ms <= full_stroke_ms",
            ));
        }
        let clook = p.elevator == Elevator::Clook;
        let (t2t, avg, full) = (p.track_to_track_ms * 1e3, p.average_seek_ms * 1e3, p.full_stroke_ms * 1e3);
        // a/sqrt(3) + b/3 = avg - t2t and a + b = full - t2t.
        let span = full - t2t;
        let mut a = ((avg - t2t) - span / 3.0) / (1.0 / 3f64.sqrt() - 1.0 / 3.0);
        a = a.clamp(0.0, span);
        let b = span - a;
        Ok(HddModel {
            capacity: p.capacity_gb * 1e9,
            t2t_us: t2t,
            a_us: a,
            b_us: b,
            half_rotation_us: 60e6 / p.rpm / 2.0,
            bytes_per_us: p.media_rate_mb_s,
            clook,
        })
    }

    /// Fitted coefficients (a, b) in microseconds.
    pub fn coefficients_us(&self) -> (f64, f64) {
        (self.a_us, self.b_us)
    }

    /// Seek time over `distance` bytes, microseconds.
    pub fn seek_us(&self, distance: f64) -> f64 {
        if distance <= 0.0 {
            return 0.0;
        }
        let x = (distance / self.capacity).min(1.0);
        self.t2t_us + self.a_us * x.sqrt() + self.b_us * x
    }

    /// Seek plus rotational latency (none for a sequential request), microseconds.
    pub fn positioning_us(&self, distance: f64) -> f64 {
        if distance <= 0.0 {
            0.0
        } else {
            self.seek_us(distance) + self.half_rotation_us
        }
    }

    pub fn transfer_us(&self, len: u64) -> f64 {
        len as f64 / self.bytes_per_us
    }

    /// Bytes passing under the head in one revolution (one track at the media rate).
    pub fn track_bytes(&self) -> f64 {
        self.bytes_per_us * 2.0 * self.half_rotation_us
    }

    /// Service time of a request at `addr` of `len` bytes with the head at `head`.
    ///
    /// A short forward gap is not a seek: the head stays on its track and the platter brings the gap
    /// past it in gap / media rate — its rotational latency is that, not the average half revolution
    /// of a random access (whichever is less: past about half a track, seeking and waiting is the
    /// model's cost again). Charging seek + half a revolution for every gap made a 10-byte gap (hpio's
    /// region spacing) cost 4.97 ms and a 16 KiB one (noncontig's column stride) the same, i.e. those
    /// near-sequential programs ran as if they were random.
    pub fn service(&self, head: u64, addr: u64, len: u64) -> Duration {
        let d = head.abs_diff(addr) as f64;
        let positioning =
            if addr > head { (d / self.bytes_per_us).min(self.positioning_us(d)) } else { self.positioning_us(d) };
        let us = positioning + self.transfer_us(len);
        Duration::from_nanos((us * 1e3) as u64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DeviceModel {
    /// Real I/O only.
    None,
    /// Emulated rotating disk.
    Hdd(HddModel),
}

impl DeviceModel {
    /// The model of `ds_options.device_model` (the emulated disk's parameters checked).
    pub fn of(kind: DeviceKind, hdd: &HddParams) -> FsResult<DeviceModel> {
        match kind {
            DeviceKind::None => Ok(DeviceModel::None),
            DeviceKind::Hdd => Ok(DeviceModel::Hdd(HddModel::new(hdd)?)),
        }
    }

    /// [`DeviceModel::of`] the model named `s` (`none`, `hdd`).
    pub fn parse(s: &str, hdd: &HddParams) -> FsResult<DeviceModel> {
        DeviceModel::of(s.parse().map_err(|e: UnknownName| FsError::invalid(e.to_string()))?, hdd)
    }

    pub fn name(&self) -> &'static str {
        match self {
            DeviceModel::None => "none",
            DeviceModel::Hdd(_) => "hdd",
        }
    }
}

/// The running device: every data request passes through it ([`Device::perform`]).
#[derive(Clone)]
pub enum Device {
    None,
    Hdd(Arc<HddDevice>),
}

/// What the device did with a request.
pub struct Performed<T> {
    /// The real I/O's result.
    pub result: T,
    /// How long the real I/O took (without the model's delay).
    pub real: Duration,
    /// The order the head served the request's runs in (indices into them); `None`: as given (no head).
    pub order: Option<Vec<usize>>,
}

impl Device {
    /// Starts the device of `model` (the hdd's thread).
    pub fn start(model: DeviceModel) -> FsResult<Device> {
        match model {
            DeviceModel::None => Ok(Device::None),
            DeviceModel::Hdd(m) => Ok(Device::Hdd(Arc::new(HddDevice::start(m)?))),
        }
    }

    /// Performs a request whose real I/O is `work` and whose runs lie at `at` (address, length; empty
    /// when it has no address, e.g. a read of a missing object or an fsync). `none` runs the work; `hdd`
    /// runs it once its head has reached the first of the runs, then holds the head for each run's
    /// modelled service time (a request without an address passes unmodelled).
    pub async fn perform<T>(&self, at: &[(u64, u64)], work: impl Future<Output = T>) -> Performed<T> {
        let grant = match self {
            Device::Hdd(h) => h.acquire_runs(at).await,
            Device::None => None,
        };
        let t0 = Instant::now();
        let result = work.await;
        let real = t0.elapsed();
        let order = match grant {
            Some(g) => Some(g.finish(real).await),
            None => None,
        };
        Performed { result, real, order }
    }
}

/// A run waiting for the head.
struct Waiting {
    seq: u64,
    addr: u64,
    len: u64,
    enqueued: Instant,
    /// The request it belongs to, and its index there.
    request: u64,
    run: usize,
}

/// A request at the device, from its arrival until the head has passed its last run.
struct InDevice {
    /// Sent when the head first reaches one of its runs: the requester then does the real I/O.
    grant: Option<oneshot::Sender<Grant>>,
    /// Told, with the order of its runs, when the head has passed the last one.
    finished: Option<oneshot::Sender<Vec<usize>>>,
    left: usize,
    order: Vec<usize>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    requests: HashMap<u64, InDevice>,
    seq: u64,
    next_request: u64,
    closed: bool,
}

impl Queue {
    /// Drops a request whose requester is gone, with its runs still waiting.
    fn forget(&mut self, request: u64) {
        self.requests.remove(&request);
        self.waiting.retain(|w| w.request != request);
    }
}

struct Shared {
    queue: Mutex<Queue>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The emulated disk; dropping it stops its thread once the queue is drained.
pub struct HddDevice {
    shared: Arc<Shared>,
    model: HddModel,
}

/// The head is this request's: do the real I/O, then [`Grant::finish`].
pub struct Grant {
    done: mpsc::SyncSender<Duration>,
    finished: oneshot::Receiver<Vec<usize>>,
}

impl Grant {
    /// Reports the real I/O time and waits until the modelled service time of every run has elapsed;
    /// returns the order the runs were served in.
    pub async fn finish(self, real: Duration) -> Vec<usize> {
        let _ = self.done.send(real);
        self.finished.await.unwrap_or_default()
    }
}

/// The next request of a queue of (address, arrival sequence): C-LOOK, or the earliest arrival.
pub fn elevator_pick(clook: bool, addrs: impl Iterator<Item = (u64, u64)>, head: u64) -> Option<usize> {
    if clook {
        clook_pick(addrs, head)
    } else {
        addrs.enumerate().min_by_key(|&(_, (_, seq))| seq).map(|(i, _)| i)
    }
}

/// C-LOOK: the request nearest ahead of the head, else (wrap) the lowest address; FIFO among equals.
pub fn clook_pick(addrs: impl Iterator<Item = (u64, u64)>, head: u64) -> Option<usize> {
    addrs.enumerate().min_by_key(|&(_, (addr, seq))| (addr < head, addr, seq)).map(|(i, _)| i)
}

impl HddDevice {
    fn start(model: HddModel) -> FsResult<HddDevice> {
        let shared = Arc::new(Shared { queue: Mutex::new(Queue::default()), cv: Condvar::new() });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("tessera-hdd".into())
            .spawn(move || run_head(s, model))
            .map_err(|e| FsError::io(format!("starting the hdd device thread: {e}")))?;
        Ok(HddDevice { shared, model })
    }

    pub fn model(&self) -> &HddModel {
        &self.model
    }

    /// Waits for the head to reach a request at `addr` of `len` bytes. `None` if the device stopped
    /// (the request then runs unmodelled rather than failing).
    pub async fn acquire(&self, addr: u64, len: u64) -> Option<Grant> {
        self.acquire_runs(&[(addr, len)]).await
    }

    /// Waits for the head to reach the first (in elevator order) of a request's runs `(address, length)`.
    /// `None` if the device stopped or there are no runs (the request then runs unmodelled).
    pub async fn acquire_runs(&self, runs: &[(u64, u64)]) -> Option<Grant> {
        if runs.is_empty() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut q = self.shared.lock();
            if q.closed {
                return None;
            }
            q.next_request += 1;
            let request = q.next_request;
            let enqueued = Instant::now();
            for (run, &(addr, len)) in runs.iter().enumerate() {
                q.seq += 1;
                let seq = q.seq;
                q.waiting.push(Waiting { seq, addr, len, enqueued, request, run });
            }
            let state = InDevice { grant: Some(tx), finished: None, left: runs.len(), order: Vec::new() };
            q.requests.insert(request, state);
        }
        self.shared.cv.notify_one();
        rx.await.ok()
    }
}

impl Drop for HddDevice {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.cv.notify_all();
    }
}

/// How far the virtual clock may lag real time: absorbs sleep overshoot without banking idle time.
const CLOCK_SLACK: Duration = Duration::from_millis(2);

fn run_head(shared: Arc<Shared>, model: HddModel) {
    let mut head = 0u64;
    let mut free_at = Instant::now();
    loop {
        let (w, grant) = {
            let mut q = shared.lock();
            while q.waiting.is_empty() && !q.closed {
                q = shared.cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
            let Some(i) = elevator_pick(model.clook, q.waiting.iter().map(|w| (w.addr, w.seq)), head) else {
                return;
            };
            let w = q.waiting.swap_remove(i);
            let grant = q.requests.get_mut(&w.request).and_then(|r| r.grant.take());
            (w, grant)
        };
        let now = Instant::now();
        let start = free_at.max(w.enqueued).max(now.checked_sub(CLOCK_SLACK).unwrap_or(now));
        let service = model.service(head, w.addr, w.len);
        // The first of its request's runs under the head: the request's real I/O happens now. Its
        // other runs only cost their service time when the head reaches them.
        let mut gone = false;
        let real = match grant {
            None => Duration::ZERO,
            Some(grant) => {
                let (done_tx, done_rx) = mpsc::sync_channel(1);
                let (fin_tx, fin_rx) = oneshot::channel();
                if grant.send(Grant { done: done_tx, finished: fin_rx }).is_err() {
                    shared.lock().forget(w.request);
                    continue; // The requester is gone: the head does not move.
                }
                if let Some(r) = shared.lock().requests.get_mut(&w.request) {
                    r.finished = Some(fin_tx);
                }
                // A requester that dies mid-I/O drops its sender: count no real time.
                done_rx.recv().unwrap_or_else(|_| {
                    gone = true;
                    Duration::ZERO
                })
            }
        };
        free_at = start + real + service;
        let now = Instant::now();
        if free_at > now {
            std::thread::sleep(free_at - now);
        }
        head = w.addr.saturating_add(w.len);
        let mut q = shared.lock();
        if gone {
            q.forget(w.request);
            continue;
        }
        let Some(r) = q.requests.get_mut(&w.request) else { continue };
        r.order.push(w.run);
        r.left = r.left.saturating_sub(1);
        if r.left == 0 {
            if let Some(r) = q.requests.remove(&w.request) {
                if let Some(fin) = r.finished {
                    let _ = fin.send(r.order);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> HddModel {
        HddModel::new(&HddParams::default()).unwrap()
    }

    #[test]
    fn parse_models() {
        let p = HddParams::default();
        assert_eq!(DeviceModel::parse("none", &p).unwrap(), DeviceModel::None);
        assert!(matches!(DeviceModel::parse("hdd", &p).unwrap(), DeviceModel::Hdd(_)));
        assert!(DeviceModel::parse("floppy", &p).is_err());
        let bad = HddParams { average_seek_ms: 20.0, ..HddParams::default() };
        assert!(DeviceModel::parse("hdd", &bad).is_err());
        let bad = HddParams { rpm: 0.0, ..HddParams::default() };
        assert!(DeviceModel::parse("hdd", &bad).is_err());
    }

    #[test]
    fn seek_curve_hits_its_three_points() {
        let m = model();
        let c = HddParams::default().capacity_gb * 1e9;
        assert_eq!(m.seek_us(0.0), 0.0);
        assert!((m.seek_us(512.0) - 800.0).abs() < 5.0, "{}", m.seek_us(512.0));
        assert!((m.seek_us(c / 3.0) - 8500.0).abs() < 1.0, "{}", m.seek_us(c / 3.0));
        assert!((m.seek_us(c) - 17_000.0).abs() < 1.0);
        assert!((m.seek_us(10.0 * c) - 17_000.0).abs() < 1.0, "clamped at full stroke");
        // Monotone.
        let mut prev = 0.0;
        for i in 1..=100 {
            let s = m.seek_us(c * i as f64 / 100.0);
            assert!(s > prev);
            prev = s;
        }
        let (a, b) = m.coefficients_us();
        assert!(a > 0.0 && b > 0.0);
        // Sequential: transfer only; 64 KiB at 78 MB/s = 0.84 ms.
        assert_eq!(m.service(100, 100, 65536), Duration::from_nanos((65536.0 / 78.0 * 1e3) as u64));
        // Non-sequential adds half a rotation (4.17 ms at 7200 rpm).
        let far = m.service(0, 1 << 30, 0).as_secs_f64() * 1e6;
        assert!((far - m.seek_us((1u64 << 30) as f64) - 4166.67).abs() < 1.0);
    }

    #[test]
    fn short_forward_gaps_rotate_past_instead_of_seeking() {
        let m = model();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        // 78 MB/s at 7200 rpm: 650 kB per revolution.
        assert!((m.track_bytes() - 650_000.0).abs() < 1.0, "{}", m.track_bytes());
        // hpio's 10-byte spacing and noncontig's 16 KiB stride: the gap's passing time only.
        let base = 1_000_000;
        assert!((us(m.service(base, base + 10, 0)) - 10.0 / 78.0).abs() < 0.01);
        assert!((us(m.service(base, base + 16384, 4096)) - (16384.0 + 4096.0) / 78.0).abs() < 0.01);
        // A gap of a track, or any backward one, is a seek plus half a revolution.
        let t = m.track_bytes() as u64;
        let far = us(m.service(base, base + t, 0));
        assert!((far - m.positioning_us(t as f64)).abs() < 0.01 && far > 4166.0);
        assert!(us(m.service(base, base - 64, 0)) > 4166.0 + 800.0);
        // Rotating past never costs more than seeking would, and cost grows with the gap.
        let mut prev = 0.0;
        for k in 1..=40u64 {
            let c = us(m.service(base, base + k * t / 20, 0));
            assert!(c >= prev && c <= m.positioning_us((k * t / 20) as f64) + 0.01, "gap {k}/20 track: {c}");
            prev = c;
        }
    }

    #[test]
    fn elevator_is_clook() {
        let reqs = [(500, 1), (100, 2), (900, 3), (300, 4), (500, 5)];
        let order = |head| {
            let mut left: Vec<(u64, u64)> = reqs.to_vec();
            let mut h = head;
            let mut out = Vec::new();
            while let Some(i) = clook_pick(left.iter().copied(), h) {
                let (a, s) = left.remove(i);
                out.push(s);
                h = a;
            }
            out
        };
        assert_eq!(order(400), [1, 5, 3, 2, 4]);
        assert_eq!(order(0), [2, 4, 1, 5, 3]);
        assert_eq!(clook_pick(std::iter::empty(), 7), None);
        // The fifo elevator serves in arrival order wherever the head is.
        let q = [(500u64, 3u64), (10, 2), (900, 1)];
        assert_eq!(elevator_pick(false, q.iter().copied(), 400), Some(2));
        assert_eq!(elevator_pick(true, q.iter().copied(), 400), Some(0));
        let e = toml::from_str::<HddParams>("elevator = \"deadline\"").unwrap_err().to_string();
        assert!(e.contains("deadline") && e.contains("clook"), "an unknown elevator fails at load: {e}");
    }

    async fn run_stream(dev: &Arc<HddDevice>, addrs: Vec<u64>, len: u64) {
        for a in addrs {
            let g = dev.acquire(a, len).await.unwrap();
            g.finish(Duration::ZERO).await;
        }
    }

    /// The device really delays requests by the modelled time. Only lower bounds on elapsed time are
    /// asserted (a loaded machine can make sleeps longer, never shorter); the sequential-vs-far contrast
    /// is checked on the model itself, which is deterministic.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn device_delays_by_the_model_and_far_streams_cost_more() {
        let Device::Hdd(dev) = Device::start(DeviceModel::Hdd(model())).unwrap() else { unreachable!() };
        let m = *dev.model();
        let len = 65536u64;
        let n = 60u64;
        let t = Instant::now();
        run_stream(&dev, (0..n).map(|i| i * len).collect(), len).await;
        let seq = t.elapsed();
        let modelled_seq: Duration = (1..n).map(|i| m.service((i - 1) * len + len, i * len, len)).sum();
        assert!(seq >= modelled_seq, "sequential stream took {seq:?}, the model says at least {modelled_seq:?}");
        let rate = (n * len) as f64 / seq.as_secs_f64() / 1e6;
        assert!(rate <= 79.0, "faster than the media rate: {rate:.1} MB/s");
        // Requests alternating between two regions 100 GB apart (issued in that order, one at a time, so
        // the interleaving does not depend on task scheduling): every request after the first is a far seek.
        let far = 100_000_000_000u64;
        let addrs: Vec<u64> = (0..10).flat_map(|i| [(n + i) * len, far + i * len]).collect();
        let modelled_mixed: Duration = addrs.windows(2).map(|w| m.service(w[0] + len, w[1], len)).sum();
        let t = Instant::now();
        run_stream(&dev, addrs, len).await;
        let mixed = t.elapsed();
        assert!(
            mixed >= modelled_mixed,
            "alternating requests took {mixed:?}, the model says at least {modelled_mixed:?}"
        );
        let far_service = m.service(n * len, far, len);
        let near_service = m.service(2 * len, 2 * len, len);
        assert!(far_service > near_service * 8, "far {far_service:?} vs sequential {near_service:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn device_serves_in_elevator_order_one_at_a_time() {
        let Device::Hdd(dev) = Device::start(DeviceModel::Hdd(model())).unwrap() else { unreachable!() };
        // Hold the head with a first request while the others queue up.
        let first = dev.acquire(400, 0).await.unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for addr in [900u64, 100, 500, 300] {
            let (dev, log) = (dev.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                let g = dev.acquire(addr, 0).await.unwrap();
                log.lock().unwrap().push(addr);
                g.finish(Duration::ZERO).await;
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(log.lock().unwrap().is_empty(), "nothing runs while the head is held");
        first.finish(Duration::ZERO).await;
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*log.lock().unwrap(), [500, 900, 100, 300]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_of_several_runs_seeks_to_each_in_elevator_order() {
        let dev = Device::start(DeviceModel::Hdd(model())).unwrap();
        let Device::Hdd(h) = &dev else { unreachable!() };
        let m = *h.model();
        let (far, len) = (100_000_000_000u64, 65536u64);
        // Given out of order; from the head at 0 the elevator takes them by address.
        let at = [(far, len), (0, len), (far / 2, len)];
        let t = Instant::now();
        let done = dev.perform(&at, async { 7 }).await;
        let took = t.elapsed();
        assert_eq!((done.result, done.order.as_deref()), (7, Some(&[1, 2, 0][..])));
        let modelled = m.service(0, 0, len) + m.service(len, far / 2, len) + m.service(far / 2 + len, far, len);
        assert!(took >= modelled, "{took:?} < {modelled:?}: every run is a seek of its own");
        // Without an address, or on the `none` device: the work alone, its runs as given.
        let done = dev.perform(&[], async { 8 }).await;
        assert_eq!((done.result, done.order), (8, None));
        let done = Device::None.perform(&at, async { 9 }).await;
        assert_eq!((done.result, done.order), (9, None));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_requests_run_may_come_between_the_runs_of_one() {
        let Device::Hdd(dev) = Device::start(DeviceModel::Hdd(model())).unwrap() else { unreachable!() };
        let first = dev.acquire(400, 0).await.unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let multi = tokio::spawn({
            let (dev, log) = (dev.clone(), log.clone());
            async move {
                let g = dev.acquire_runs(&[(900, 0), (100, 0)]).await.unwrap();
                log.lock().unwrap().push("two runs: granted");
                let order = g.finish(Duration::ZERO).await;
                log.lock().unwrap().push("two runs: done");
                order
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let single = tokio::spawn({
            let (dev, log) = (dev.clone(), log.clone());
            async move {
                let g = dev.acquire(950, 0).await.unwrap();
                log.lock().unwrap().push("one run: granted");
                g.finish(Duration::ZERO).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.finish(Duration::ZERO).await;
        // From 400: 900 (the first run of two), 950, then the wrap to 100.
        assert_eq!(multi.await.unwrap(), [0, 1]);
        single.await.unwrap();
        assert_eq!(*log.lock().unwrap(), ["two runs: granted", "one run: granted", "two runs: done"]);
    }
}
