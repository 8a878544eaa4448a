//! Spec: ../shared/specs/characterization.md, section "Parametric model" (thesis: El Sayed 2017, chapter 5).
//!
//! The pure parametric I/O model: a small discrete-event simulation of the path client → (forwarding
//! node) → data server → disk. Parameters are bandwidths (per-client link, per-server network, per-server
//! disk), a per-request latency, the request split size and an optional write-back burst buffer at the
//! forwarding node (the thesis's pagepool) with a size and a drain bandwidth.
//!
//! Driving it from a counter log follows the thesis (§5.3.1, §5.5.1): each window's logged requests
//! become requests of the window's average size, round-robin over the job's processes, each process
//! synchronous (one request in flight); consecutive busy windows form one I/O phase, and the idle time
//! between phases (computation) is preserved while the I/O is shifted in time. Requests larger than the
//! split size are split; every piece goes to the next server round-robin and is counted at the data
//! server when it reaches the disk (the counters Tessera's data servers keep). No I/O here: the
//! benchmark runs and files are in [`crate::modelcmd`].

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tessera_proto::characterize::Window;

const MIB: f64 = 1048576.0;

/// A write-back burst buffer at the forwarding node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct BurstBuffer {
    pub size_bytes: u64,
    pub drain_mib_s: f64,
}

/// The model's parameters.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Params {
    /// Each client's link (to its forwarding node or the servers), MiB/s.
    pub client_link_mib_s: f64,
    /// Each data server's network, MiB/s.
    pub server_net_mib_s: f64,
    /// Each data server's disk, MiB/s: writes, and reads unless `disk_read_mib_s` is given.
    pub disk_mib_s: f64,
    /// Each data server's disk for reads, MiB/s, when it differs from writes (parameter files without
    /// it read as the same rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_read_mib_s: Option<f64>,
    /// Fixed cost of each request (round trip, processing), microseconds.
    pub latency_us: f64,
    /// Requests larger than this are split (the stripe size).
    pub split_bytes: u64,
    /// Data servers.
    pub servers: usize,
    pub burst_buffer: Option<BurstBuffer>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            client_link_mib_s: 1000.0,
            server_net_mib_s: 1000.0,
            disk_mib_s: 500.0,
            disk_read_mib_s: None,
            latency_us: 200.0,
            split_bytes: 1 << 20,
            servers: 2,
            burst_buffer: None,
        }
    }
}

/// One I/O request of a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Req {
    pub bytes: u64,
    pub write: bool,
}

/// A burst of requests that started at `start_s` in the log (the start of its first busy window).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Phase {
    pub start_s: f64,
    pub reqs: Vec<Req>,
    /// Measured length of the phase (its busy windows), seconds.
    pub measured_s: f64,
}

/// A job as the model sees it: dense windows of length `dt_s` and its process count.
#[derive(Clone, Debug, PartialEq)]
pub struct JobLog {
    pub dt_s: f64,
    pub processes: usize,
    pub windows: Vec<Window>,
}

/// What the model predicts for a job.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Prediction {
    /// Dense windows of the log's Δt, counted at the data servers.
    pub windows: Vec<Window>,
    /// From the first request to the last client completion (the job's time line), seconds.
    pub duration_s: f64,
    /// Time the processes spent waiting for I/O (sum of phase lengths), seconds.
    pub io_time_s: f64,
    /// When the last byte reached a disk (later than `duration_s` with a burst buffer), seconds.
    pub drained_s: f64,
}

fn busy(w: &Window) -> bool {
    w.read_ops + w.write_ops > 0 || w.read_bytes + w.write_bytes > 0
}

/// The thesis's request generator: each window's requests at their average size, phases of busy windows.
pub fn phases(log: &JobLog) -> Vec<Phase> {
    let mut out: Vec<Phase> = Vec::new();
    let mut in_phase = false;
    for (i, w) in log.windows.iter().enumerate() {
        if !busy(w) {
            in_phase = false;
            continue;
        }
        if !in_phase {
            out.push(Phase { start_s: i as f64 * log.dt_s, ..Phase::default() });
            in_phase = true;
        }
        let p = out.last_mut().expect("pushed above");
        p.measured_s += log.dt_s;
        for (bytes, ops, write) in [(w.write_bytes, w.write_ops, true), (w.read_bytes, w.read_ops, false)] {
            if bytes == 0 && ops == 0 {
                continue;
            }
            let n = ops.max(1);
            let (each, rest) = (bytes / n, bytes % n);
            p.reqs.extend((0..n).map(|i| Req { bytes: each + u64::from(i < rest), write }));
        }
    }
    // The logged start is the start of a window; a phase with a partly busy first window started later
    // in it: by the part of a full window (its busiest) the first one lacks (when it lacks over 10%).
    let mut i = 0usize;
    for ph in &mut out {
        while i < log.windows.len() && !busy(&log.windows[i]) {
            i += 1;
        }
        let vol = |w: &Window| (w.read_bytes + w.write_bytes) as f64;
        let n = (ph.measured_s / log.dt_s).round() as usize;
        let ws = &log.windows[i..(i + n).min(log.windows.len())];
        let full = ws.iter().map(vol).fold(0.0, f64::max);
        if ws.len() >= 2 && full > 0.0 && vol(&ws[0]) < 0.9 * full {
            ph.start_s += log.dt_s * (1.0 - vol(&ws[0]) / full);
        }
        i += n;
    }
    out
}

fn secs(bytes: u64, mib_s: f64) -> f64 {
    if mib_s <= 0.0 || !mib_s.is_finite() {
        return 0.0;
    }
    bytes as f64 / (mib_s * MIB)
}

/// Counts of one piece at the data server at time `t`.
struct Count {
    t: f64,
    bytes: u64,
    write: bool,
}

/// The simulated machine: when each resource is free next.
struct Machine<'a> {
    p: &'a Params,
    link: Vec<f64>,
    net: Vec<f64>,
    disk: Vec<f64>,
    drain: f64,
    /// Burst-buffer bytes held and when they leave (reach the disk).
    held: BinaryHeap<Reverse<(u64, u64)>>,
    held_bytes: u64,
    next_server: usize,
    counts: Vec<Count>,
    last_disk: f64,
}

/// Time as an orderable key (nanoseconds).
fn key(t: f64) -> u64 {
    (t.max(0.0) * 1e9) as u64
}

impl Machine<'_> {
    /// One request of `client` issued at `t`; returns when the client sees it complete.
    fn request(&mut self, client: usize, t: f64, r: Req) -> f64 {
        let p = self.p;
        let split = p.split_bytes.max(1);
        let mut left = r.bytes.max(1);
        let mut done = t;
        let mut sent = t;
        while left > 0 {
            let piece = left.min(split);
            left -= piece;
            let s = self.next_server % self.net.len();
            self.next_server += 1;
            // Cut-through: each stage starts when the one before has started and the stage is free,
            // and ends no earlier than the one before. Client link, serial per client.
            let s1 = sent.max(self.link[client]);
            let t1 = s1 + secs(piece, p.client_link_mib_s);
            self.link[client] = t1;
            sent = t1;
            // Burst buffer: a write that fits is acknowledged at the link rate, then drained.
            let mut absorbed = false;
            let (mut from, mut from_end) = (s1, t1);
            if let (true, Some(bb)) = (r.write, p.burst_buffer) {
                while let Some(Reverse((at, b))) = self.held.peek().copied() {
                    if at > key(t1) {
                        break;
                    }
                    self.held.pop();
                    self.held_bytes -= b;
                }
                if self.held_bytes + piece <= bb.size_bytes {
                    absorbed = true;
                    let d0 = s1.max(self.drain);
                    self.drain = (d0 + secs(piece, bb.drain_mib_s)).max(t1);
                    (from, from_end) = (d0, self.drain);
                }
            }
            let s2 = from.max(self.net[s]);
            let t2 = (s2 + secs(piece, p.server_net_mib_s)).max(from_end);
            self.net[s] = t2;
            let s3 = s2.max(self.disk[s]);
            let t3 = (s3 + secs(piece, p.disk_rate(r.write))).max(t2);
            self.disk[s] = t3;
            self.last_disk = self.last_disk.max(t3);
            self.counts.push(Count { t: t3, bytes: piece, write: r.write });
            if absorbed {
                self.held.push(Reverse((key(t3), piece)));
                self.held_bytes += piece;
                done = done.max(t1);
            } else {
                done = done.max(t3);
            }
        }
        done + p.latency_us * 1e-6
    }
}

/// Runs the job's phases through the model: each phase starts at its logged start (the thesis generates a
/// window's requests at its beginning), shifted later by as much as earlier phases overran (§5.5.1).
pub fn simulate(p: &Params, phases: &[Phase], processes: usize, dt_s: f64) -> Prediction {
    let clients = processes.max(1);
    let servers = p.servers.max(1);
    let mut m = Machine {
        p,
        link: vec![0.0; clients],
        net: vec![0.0; servers],
        disk: vec![0.0; servers],
        drain: 0.0,
        held: BinaryHeap::new(),
        held_bytes: 0,
        next_server: 0,
        counts: Vec::new(),
        last_disk: 0.0,
    };
    let mut now = 0.0f64;
    let mut io_time = 0.0;
    let mut shift = 0.0f64;
    for ph in phases {
        let start = (ph.start_s + shift).max(now);
        shift = start - ph.start_s;
        // Clients ready at `start`; the earliest ready client issues the next request (FCFS resources).
        let mut ready: BinaryHeap<Reverse<(u64, usize)>> = (0..clients).map(|c| Reverse((key(start), c))).collect();
        let mut times = vec![start; clients];
        for r in &ph.reqs {
            let Reverse((_, c)) = ready.pop().expect("one entry per client");
            let t = m.request(c, times[c], *r);
            times[c] = t;
            ready.push(Reverse((key(t), c)));
        }
        let end = times.iter().copied().fold(start, f64::max);
        io_time += end - start;
        now = end;
    }
    let dt = if dt_s > 0.0 { dt_s } else { 1.0 };
    let n = ((m.last_disk.max(now) / dt).floor() as usize + 1).min(1 << 24);
    let mut windows = vec![Window::default(); n];
    for c in &m.counts {
        // A piece ending exactly at a window's end belongs to that window.
        let w = &mut windows[(((c.t / dt).ceil() as usize).saturating_sub(1)).min(n - 1)];
        if c.write {
            w.write_bytes += c.bytes;
            w.write_ops += 1;
        } else {
            w.read_bytes += c.bytes;
            w.read_ops += 1;
        }
    }
    while windows.len() > 1 && !busy(windows.last().expect("non-empty")) {
        windows.pop();
    }
    Prediction { windows, duration_s: now, io_time_s: io_time, drained_s: m.last_disk }
}

/// Replays a counter log.
pub fn replay(p: &Params, log: &JobLog) -> Prediction {
    simulate(p, &phases(log), log.processes, log.dt_s)
}

/// Mean relative error per counter over the windows (the thesis's "average error of logs").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CounterErrors {
    pub read_bytes: f64,
    pub write_bytes: f64,
    pub read_ops: f64,
    pub write_ops: f64,
    /// |predicted − measured| / measured of the job's busy time (busy windows × Δt vs predicted span).
    pub duration: f64,
}

impl CounterErrors {
    /// Mean of the four counters' errors.
    pub fn mean(&self) -> f64 {
        (self.read_bytes + self.write_bytes + self.read_ops + self.write_ops) / 4.0
    }
}

/// Per counter: the mean over windows where it was measured or predicted non-zero of
/// |predicted − measured| / measured (a window predicted busy but measured idle counts 100%); windows
/// are aligned at the first busy one. NaN-free: a counter never seen has error 0.
pub fn errors(measured: &[Window], predicted: &[Window], dt_s: f64, predicted_span_s: f64) -> CounterErrors {
    let first = |v: &[Window]| v.iter().position(busy).unwrap_or(v.len());
    let m = &measured[first(measured)..];
    let p = &predicted[first(predicted)..];
    let n = m.len().max(p.len());
    let zero = Window::default();
    let get = |v: &[Window], i: usize| v.get(i).unwrap_or(&zero).clone();
    let err = |f: &dyn Fn(&Window) -> u64| {
        let (mut sum, mut k) = (0.0, 0usize);
        for i in 0..n {
            let (a, b) = (f(&get(m, i)), f(&get(p, i)));
            if a == 0 && b == 0 {
                continue;
            }
            k += 1;
            sum += if a == 0 { 1.0 } else { (b as f64 - a as f64).abs() / a as f64 };
        }
        if k == 0 {
            0.0
        } else {
            sum / k as f64
        }
    };
    let busy_m = m.iter().filter(|w| busy(w)).count() as f64 * dt_s;
    CounterErrors {
        read_bytes: err(&|w| w.read_bytes),
        write_bytes: err(&|w| w.write_bytes),
        read_ops: err(&|w| w.read_ops),
        write_ops: err(&|w| w.write_ops),
        duration: if busy_m > 0.0 { (predicted_span_s - busy_m).abs() / busy_m } else { 0.0 },
    }
}

/// The predicted busy span comparable with the measured busy windows: I/O time, rounded up per phase to
/// whole windows as the counters would show it.
pub fn predicted_busy_s(pred: &Prediction, dt_s: f64) -> f64 {
    pred.windows.iter().filter(|w| busy(w)).count() as f64 * dt_s
}

/// The fit objective over logs: mean over logs of (mean counter error + duration error).
pub fn objective(p: &Params, logs: &[JobLog]) -> f64 {
    if logs.is_empty() {
        return 0.0;
    }
    logs.iter()
        .map(|l| {
            let pr = replay(p, l);
            let e = errors(&l.windows, &pr.windows, l.dt_s, predicted_busy_s(&pr, l.dt_s));
            e.mean() + e.duration
        })
        .sum::<f64>()
        / logs.len() as f64
}

impl Params {
    /// The disk's rate for writes or reads.
    pub fn disk_rate(&self, write: bool) -> f64 {
        match (write, self.disk_read_mib_s) {
            (false, Some(r)) => r,
            _ => self.disk_mib_s,
        }
    }
}

/// Fits the bandwidths (the disk's for reads and writes apart) and the latency by a coordinate search in
/// log space (multiplicative steps shrinking from ×4 to ×1.02); the split size, server count and burst
/// buffer stay as given.
pub fn fit(start: &Params, logs: &[JobLog], rounds: usize) -> (Params, f64) {
    let mut best = start.clone();
    best.disk_read_mib_s.get_or_insert(best.disk_mib_s);
    let mut best_f = objective(&best, logs);
    let mut step = 4.0f64;
    for _ in 0..rounds {
        let mut improved = false;
        for k in 0..5 {
            for dir in [step, 1.0 / step] {
                let mut c = best.clone();
                let v = match k {
                    0 => &mut c.client_link_mib_s,
                    1 => &mut c.server_net_mib_s,
                    2 => &mut c.disk_mib_s,
                    3 => c.disk_read_mib_s.get_or_insert(best.disk_mib_s),
                    _ => &mut c.latency_us,
                };
                *v = (*v * dir).clamp(1e-3, 1e7);
                let f = objective(&c, logs);
                if f < best_f - 1e-12 {
                    best = c;
                    best_f = f;
                    improved = true;
                }
            }
        }
        if !improved {
            step = step.sqrt();
            if step < 1.02 {
                break;
            }
        }
    }
    (best, best_f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast() -> Params {
        Params {
            client_link_mib_s: 1e9,
            server_net_mib_s: 1e9,
            disk_mib_s: 1e9,
            disk_read_mib_s: None,
            latency_us: 0.0,
            split_bytes: 1 << 20,
            servers: 1,
            burst_buffer: None,
        }
    }

    fn burst(mib: u64, write: bool) -> Vec<Phase> {
        vec![Phase { start_s: 0.0, reqs: vec![Req { bytes: 1 << 20, write }; mib as usize], measured_s: 0.0 }]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-3 * b.abs().max(1e-9)
    }

    #[test]
    fn single_link_bound_gives_volume_over_bandwidth() {
        for (k, bw) in [(0, 100.0), (1, 50.0), (2, 25.0)] {
            let mut p = fast();
            match k {
                0 => p.client_link_mib_s = bw,
                1 => p.server_net_mib_s = bw,
                _ => p.disk_mib_s = bw,
            }
            let pr = simulate(&p, &burst(200, true), 1, 1.0);
            assert!(close(pr.duration_s, 200.0 / bw), "bound {k}: {} s", pr.duration_s);
        }
    }

    #[test]
    fn latency_adds_per_request() {
        let mut p = fast();
        p.latency_us = 1000.0;
        let pr = simulate(&p, &burst(100, false), 1, 1.0);
        assert!(close(pr.duration_s, 0.1), "{}", pr.duration_s);
    }

    #[test]
    fn clients_share_a_server_but_not_their_links() {
        let mut p = fast();
        p.client_link_mib_s = 100.0;
        // Two clients, 200 MiB: each link carries 100 MiB → 1 s.
        assert!(close(simulate(&p, &burst(200, true), 2, 1.0).duration_s, 1.0));
        p.disk_mib_s = 100.0;
        // The one disk is the bound now: 2 s.
        assert!(close(simulate(&p, &burst(200, true), 2, 1.0).duration_s, 2.0));
        p.servers = 2;
        assert!(close(simulate(&p, &burst(200, true), 2, 1.0).duration_s, 1.0));
    }

    #[test]
    fn burst_buffer_absorbs_a_burst_smaller_than_its_size_at_the_link_rate() {
        let mut p = fast();
        p.client_link_mib_s = 100.0;
        p.disk_mib_s = 10.0;
        assert!(close(simulate(&p, &burst(50, true), 1, 1.0).duration_s, 5.0));
        p.burst_buffer = Some(BurstBuffer { size_bytes: 64 << 20, drain_mib_s: 1e9 });
        let pr = simulate(&p, &burst(50, true), 1, 1.0);
        assert!(close(pr.duration_s, 0.5), "{}", pr.duration_s);
        // The bytes still reach the disk at its rate.
        assert!(close(pr.drained_s, 5.0), "{}", pr.drained_s);
        // Reads bypass it.
        assert!(close(simulate(&p, &burst(50, false), 1, 1.0).duration_s, 5.0));
    }

    #[test]
    fn burst_buffer_overflow_falls_back_to_the_disk_rate() {
        let mut p = fast();
        p.client_link_mib_s = 100.0;
        p.disk_mib_s = 10.0;
        p.burst_buffer = Some(BurstBuffer { size_bytes: 10 << 20, drain_mib_s: 1e9 });
        // 10 MiB absorbed; the rest waits behind the drain at 10 MiB/s: about 10 s, not 0.5 s.
        let d = simulate(&p, &burst(100, true), 1, 1.0).duration_s;
        assert!(d > 9.0 && d <= 10.0 + 1e-6, "{d}");
    }

    #[test]
    fn phases_keep_computation_gaps_and_average_sizes() {
        let w = |b: u64, ops: u64| Window { write_bytes: b, write_ops: ops, ..Window::default() };
        let log = JobLog { dt_s: 1.0, processes: 1, windows: vec![w(10, 2), w(5, 1), w(0, 0), w(0, 0), w(4, 4)] };
        let ph = phases(&log);
        assert_eq!(ph.len(), 2);
        assert_eq!(ph[0].reqs.iter().map(|r| r.bytes).collect::<Vec<_>>(), vec![5, 5, 5]);
        assert_eq!(ph[1].start_s, 4.0);
        assert_eq!(ph[1].reqs.len(), 4);
        assert_eq!(ph[0].measured_s, 2.0);
    }

    #[test]
    fn replay_reproduces_a_log_the_model_made_and_fit_recovers_a_bandwidth() {
        let mut truth = fast();
        truth.disk_mib_s = 50.0;
        truth.servers = 2;
        // A made-up job: 200 MiB written in 1 MiB requests by 2 processes, then idle, then read back.
        let ph = vec![
            Phase { start_s: 0.0, reqs: vec![Req { bytes: 1 << 20, write: true }; 200], measured_s: 0.0 },
            Phase { start_s: 5.0, reqs: vec![Req { bytes: 1 << 20, write: false }; 200], measured_s: 0.0 },
        ];
        let made = simulate(&truth, &ph, 2, 1.0);
        let log = JobLog { dt_s: 1.0, processes: 2, windows: made.windows.clone() };
        let again = replay(&truth, &log);
        let e = errors(&log.windows, &again.windows, 1.0, predicted_busy_s(&again, 1.0));
        assert!(e.mean() < 0.02, "{e:?}");
        let mut start = truth.clone();
        start.disk_mib_s = 200.0;
        let (fitted, f) = fit(&start, std::slice::from_ref(&log), 40);
        assert!(f < 0.05, "objective {f}");
        assert!((fitted.disk_mib_s - 50.0).abs() / 50.0 < 0.1, "{fitted:?}");
        // A wrong disk bandwidth shows up as error.
        let mut slow = truth.clone();
        slow.disk_mib_s = 10.0;
        assert!(objective(&slow, std::slice::from_ref(&log)) > 0.3);
    }

    #[test]
    fn reads_and_writes_have_their_own_disk_rates_and_fit_finds_both() {
        let mut truth = fast();
        truth.disk_mib_s = 100.0;
        truth.disk_read_mib_s = Some(25.0);
        // 100 MiB written at 100 MiB/s, then read back at 25 MiB/s.
        assert!(close(simulate(&truth, &burst(100, true), 1, 1.0).duration_s, 1.0));
        assert!(close(simulate(&truth, &burst(100, false), 1, 1.0).duration_s, 4.0));
        let ph = vec![
            Phase { start_s: 0.0, reqs: vec![Req { bytes: 1 << 20, write: true }; 400], measured_s: 0.0 },
            Phase { start_s: 6.0, reqs: vec![Req { bytes: 1 << 20, write: false }; 200], measured_s: 0.0 },
        ];
        let made = simulate(&truth, &ph, 1, 1.0);
        let log = JobLog { dt_s: 1.0, processes: 1, windows: made.windows };
        let start = Params { disk_mib_s: 50.0, disk_read_mib_s: None, ..truth.clone() };
        let (fitted, f) = fit(&start, std::slice::from_ref(&log), 60);
        assert!(f < 0.05, "objective {f}: {fitted:?}");
        let read = fitted.disk_read_mib_s.unwrap();
        assert!((fitted.disk_mib_s - 100.0).abs() < 10.0 && (read - 25.0).abs() < 2.5, "{fitted:?}");
        // A parameter file without the read rate reads as one rate.
        let old: Params = serde_json::from_str(&serde_json::to_string(&fast()).unwrap()).unwrap();
        assert_eq!((old.disk_read_mib_s, old.disk_rate(false)), (None, 1e9));
    }

    #[test]
    fn errors_count_extra_windows_fully() {
        let w = |b: u64| Window { read_bytes: b, read_ops: 1, ..Window::default() };
        let e = errors(&[w(100)], &[w(50), w(50)], 1.0, 2.0);
        assert!(close(e.read_bytes, 0.75), "{e:?}");
        assert!(close(e.duration, 1.0));
    }
}
