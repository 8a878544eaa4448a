//! PerSched on the client side (specs/periodic.md "In the file system"): the job's grant from the MDS
//! (intervals modulo T), refreshed by a cheap poll every third of the lease — never a round trip per I/O —
//! and the gate every read and write of the job passes: wait for the job's interval, then pace to its
//! granted bandwidth. A job with no grant is never delayed: its gate is one atomic load.
//!
//! When the cluster schedules online instead (`[persched] scheduler = "online-..."`, the paper's baselines),
//! the grant has no intervals: the gate asks the MDS for the job's rate when a transfer starts (every
//! 20 ms while the rate is 0, every 100 ms while transferring, so a preemption reaches it) and
//! [`Periodic::instance_done`] tells it the transfer ended — a central decision per event, which is what
//! the pattern avoids.
//!
//! **decision**: the grant's times are the MDS's Unix clock; clients are assumed to share it (NTP), as
//! the paper's jobs share the job scheduler's.

use crate::mds_client::MdsClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_proto::error::FsResult;
use tessera_proto::msg::{PeriodicGrant, PeriodicProfile};

/// The patterns of the jobs a mount serves, and the gate their reads and writes pass.
pub mod patterns;

/// The job's current grant and what it reports back.
#[derive(Default)]
pub struct Periodic {
    active: AtomicBool,
    grant: Mutex<Option<PeriodicGrant>>,
    /// Instances the job finished since it registered (reported with each poll).
    done: AtomicU64,
    polling: AtomicBool,
    /// The MDS's lease as this client's config states it (0: 3 s): without a grant, polls come every third.
    lease_hint_ms: AtomicU64,
    /// When the job's paced transfers so far are due to have finished: the granted rate is the job's in
    /// total, so concurrent transfers of its tasks share one pacing clock.
    paced_until: Mutex<Option<Instant>>,
    /// Online scheduling: the MDS to ask, the last rate it gave and when, and whether a transfer is on.
    online: AtomicBool,
    mds: Mutex<Option<MdsClient>>,
    online_rate: Mutex<Option<(u64, Instant)>>,
    in_io: AtomicBool,
    /// When a transfer of the job last passed the gate (Unix ms; 0: never).
    last_pass_ms: AtomicU64,
    /// Bytes the current instance has moved since it began in an interval, and that interval's rate.
    moved: AtomicU64,
    instance_bw: AtomicU64,
}

/// Online scheduling: how often a waiting job asks again, and how long a granted rate is used before
/// asking again (a preempted job learns it within this long).
const ONLINE_WAIT: Duration = Duration::from_millis(20);
const ONLINE_REFRESH: Duration = Duration::from_millis(100);

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic")
            .field("active", &self.active())
            .field("online", &self.online.load(Ordering::Relaxed))
            .field("grant", &self.grant())
            .field("done", &self.done.load(Ordering::Relaxed))
            .finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// How long past the end of an interval a transfer that started inside it may go on: a tenth of the
/// interval, 50 ms to 1 s.
pub fn grace_ms(len_ms: u64) -> u64 {
    (len_ms / 10).clamp(50, 1_000)
}

/// Where `now_ms` falls in the grant's period (ms since the period began).
fn position(g: &PeriodicGrant, now_ms: u64) -> u64 {
    now_ms.saturating_sub(g.origin_ms) % g.period_ms.max(1)
}

/// How long from `pos` until the period next reaches `start_ms` (a whole period when it is `pos` itself).
fn wait_until(start_ms: u64, pos: u64, period_ms: u64) -> u64 {
    if start_ms > pos {
        start_ms - pos
    } else {
        start_ms + period_ms - pos
    }
}

/// When a transfer of the job may start at `now_ms` and at what rate: `(wait_ms, bytes_per_sec)`.
/// `None`: no pattern, go now at full speed.
pub fn next_slot(g: &PeriodicGrant, now_ms: u64) -> Option<(u64, u64)> {
    next_slot_after(g, now_ms, None)
}

/// [`next_slot`] for a job whose transfers last passed the gate at `last_pass_ms`: a transfer that began
/// inside an interval may go on for [`grace_ms`] past its end.
///
/// **decision** (the paper is silent on jobs that miss their interval): a pattern fits a job's compute
/// exactly between its intervals (at T = T_min with no slack at all), so a job that finishes an instance a
/// few milliseconds late arrives a few milliseconds into its next interval, cannot move its volume before
/// the interval ends, and would wait a whole period for the last megabytes. Letting a transfer that began
/// in its interval finish within a short grace costs the next interval's job at most that grace of shared
/// bandwidth, and a job late by more than the grace still waits.
pub fn next_slot_after(g: &PeriodicGrant, now_ms: u64, last_pass_ms: Option<u64>) -> Option<(u64, u64)> {
    if g.period_ms == 0 || g.intervals.is_empty() {
        return None;
    }
    let t = g.period_ms;
    let pos = position(g, now_ms);
    if let Some(i) = g.intervals.iter().find(|i| i.start_ms <= pos && pos < i.end_ms) {
        return Some((0, i.bytes_per_sec));
    }
    if let Some(last) = last_pass_ms {
        for i in &g.intervals {
            let len = i.end_ms.saturating_sub(i.start_ms);
            // Time since this interval last ended (modulo T), and when it began.
            let after = (pos + t - i.end_ms % t) % t;
            if after < grace_ms(len) && last >= now_ms.saturating_sub(after + len) {
                return Some((0, i.bytes_per_sec));
            }
        }
    }
    g.intervals.iter().map(|i| (wait_until(i.start_ms, pos, t), i.bytes_per_sec)).min_by_key(|x| x.0)
}

/// Where a new instance of `volume` bytes may begin at `now_ms`: `(wait_ms, bytes_per_sec)`, like
/// [`next_slot`].
///
/// **decision**: an instance begins at the start of a run of the job's intervals (intervals that follow
/// one another, modulo T, are one run), within [`grace_ms`] of it, or later inside a run only if the rest
/// of the run can move the whole volume at its rates. Otherwise it waits for the next run's start. A job
/// whose compute ends in the middle of its interval (its first instance, which starts wherever the job
/// does, or a late one) would otherwise overrun into the next job's interval; on disks two transfers at
/// once both slow down (the live platform loses 35% of B), so both overrun and the delay cascades through
/// the pattern (seen live: a 2.4 s transfer took 9.3 s). Every wait ends at a run's start, where the
/// instance may begin, so no grant can stall a job.
pub fn instance_slot(g: &PeriodicGrant, now_ms: u64, volume: u64) -> Option<(u64, u64)> {
    if g.period_ms == 0 || g.intervals.is_empty() {
        return None;
    }
    let t = g.period_ms;
    let pos = position(g, now_ms);
    let mut iv: Vec<&tessera_proto::msg::PeriodicInterval> =
        g.intervals.iter().filter(|i| i.start_ms < i.end_ms && i.start_ms < t).collect();
    if iv.is_empty() {
        return None;
    }
    iv.sort_by_key(|i| i.start_ms);
    let n = iv.len();
    // An interval continues the run of the one before it (modulo T) when it starts where that one ends.
    let continues = |k: usize| {
        let prev = iv[(k + n - 1) % n];
        n > 1 && (prev.end_ms == iv[k].start_ms || (prev.end_ms >= t && iv[k].start_ms == 0))
    };
    if let Some(k) = iv.iter().position(|i| i.start_ms <= pos && pos < i.end_ms) {
        // The run holding now: its first and last intervals (walking back and forth, at most once round).
        let mut first = k;
        for _ in 1..n {
            if !continues(first) {
                break;
            }
            first = (first + n - 1) % n;
        }
        let mut run = vec![first];
        for _ in 1..n {
            let next = (run[run.len() - 1] + 1) % n;
            if next == first || !continues(next) {
                break;
            }
            run.push(next);
        }
        let len: u64 = run.iter().map(|&j| iv[j].end_ms - iv[j].start_ms).sum();
        let into = (pos + t - iv[first].start_ms) % t;
        // What the rest of the run moves from now: the rest of this interval, then the ones after it.
        let after = run.iter().skip_while(|&&j| j != k).skip(1);
        let room = iv[k].end_ms.saturating_sub(pos) as f64 * iv[k].bytes_per_sec as f64 / 1e3
            + after.map(|&j| (iv[j].end_ms - iv[j].start_ms) as f64 * iv[j].bytes_per_sec as f64 / 1e3).sum::<f64>();
        if into <= grace_ms(len) || room >= volume as f64 {
            return Some((0, iv[k].bytes_per_sec));
        }
    }
    // The next run's start strictly after now (intervals that chain all round the period, which a job
    // that computes cannot have, are taken one by one).
    (0..n)
        .filter(|&k| !continues(k))
        .map(|k| (wait_until(iv[k].start_ms, pos, t), iv[k].bytes_per_sec))
        .min_by_key(|x| x.0)
        .or_else(|| next_slot(g, now_ms))
}

impl Periodic {
    /// Whether the job follows a pattern (the only cost on the I/O path of a job that does not).
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The lease of `[persched] lease_ms`: a client without a grant polls every third of it.
    pub fn set_lease_hint(&self, lease_ms: u64) {
        self.lease_hint_ms.store(lease_ms, Ordering::Relaxed);
    }

    /// Whether the grant is being polled for.
    pub fn following(&self) -> bool {
        self.polling.load(Ordering::Acquire)
    }

    pub fn grant(&self) -> Option<PeriodicGrant> {
        self.grant.lock().ok().and_then(|g| g.clone())
    }

    pub fn set_grant(&self, g: Option<PeriodicGrant>) {
        let (old, new) = (self.grant().map(|g| g.epoch), g.as_ref().map(|g| g.epoch));
        if old != new {
            tracing::debug!(?old, ?new, origin_ms = g.as_ref().map(|g| g.origin_ms), "periodic grant: new epoch");
        }
        let online = g.as_ref().is_some_and(|g| g.online);
        let on = online || g.as_ref().is_some_and(|g| g.period_ms > 0 && !g.intervals.is_empty());
        self.online.store(online, Ordering::Relaxed);
        if let Ok(mut cur) = self.grant.lock() {
            *cur = g;
        }
        self.active.store(on, Ordering::Relaxed);
    }

    /// The job finished one more instance (compute + transfer).
    pub fn instance_done(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        self.moved.store(0, Ordering::Relaxed);
        if self.online.load(Ordering::Relaxed) && self.in_io.swap(false, Ordering::AcqRel) {
            if let Ok(mut r) = self.online_rate.lock() {
                *r = None;
            }
            let mds = self.mds.lock().ok().and_then(|m| m.clone());
            if let (Some(mds), Ok(rt)) = (mds, tokio::runtime::Handle::try_current()) {
                rt.spawn(async move {
                    if let Err(e) = mds.periodic_io(false, done).await {
                        tracing::debug!("periodic io end: {e}");
                    }
                });
            }
        }
    }

    /// Online scheduling: the job's rate, asking the MDS when the last answer is older than
    /// [`ONLINE_REFRESH`] and waiting while it is 0. `None` when no MDS is known (no grant followed).
    async fn online_slot(&self) -> Option<u64> {
        let cached = self.online_rate.lock().ok().and_then(|r| *r);
        if let Some((rate, at)) = cached {
            if rate > 0 && at.elapsed() < ONLINE_REFRESH {
                return Some(rate);
            }
        }
        let mds = self.mds.lock().ok().and_then(|m| m.clone())?;
        self.in_io.store(true, Ordering::Release);
        loop {
            let done = self.done.load(Ordering::Relaxed);
            match mds.periodic_io(true, done).await {
                Ok(rate) => {
                    if let Ok(mut r) = self.online_rate.lock() {
                        *r = Some((rate, Instant::now()));
                    }
                    if rate > 0 {
                        return Some(rate);
                    }
                }
                // Not registered any more (expired) or the MDS is away: never stall the job on it.
                Err(e) => {
                    tracing::debug!("periodic io: {e}");
                    return None;
                }
            }
            if !self.online.load(Ordering::Relaxed) {
                return None;
            }
            tokio::time::sleep(ONLINE_WAIT).await;
        }
    }

    /// Waits until the job may move `len` more bytes; returns the granted rate (bytes/s) to pace them to.
    ///
    /// **decision**: an instance begins when a transfer passes the gate inside one of the job's intervals
    /// and goes on until the job has moved its declared volume — even past the interval's end — as the
    /// paper's modified IOR starts each transfer at its time and rate. A job that the system serves a
    /// little slower than planned then overruns its interval by a little instead of waiting a whole period
    /// for its last bytes. Inside any of its intervals it moves at that interval's rate (an instance's
    /// pieces may differ: a little beside another job's transfer, then all of B), outside them at the rate
    /// of the last one it was in. Without a known volume the intervals are strict (with [`grace_ms`]).
    pub async fn wait_slot(&self, len: u64) -> Option<u64> {
        if self.online.load(Ordering::Relaxed) {
            return self.online_slot().await;
        }
        let g = self.grant()?;
        if g.volume > 0 {
            let moved = self.moved.load(Ordering::Relaxed);
            let bw = self.instance_bw.load(Ordering::Relaxed);
            if moved > 0 && moved < g.volume && bw > 0 {
                let now = now_ms();
                let bw = match next_slot(&g, now) {
                    Some((0, here)) if here > 0 => {
                        self.instance_bw.store(here, Ordering::Relaxed);
                        here
                    }
                    _ => bw,
                };
                self.moved.fetch_add(len, Ordering::Relaxed);
                self.last_pass_ms.store(now, Ordering::Relaxed);
                return Some(bw);
            }
        }
        // The grace is for jobs whose volume is unknown: with a volume, an instance's end is known, and the
        // next one begins inside an interval.
        let last = self.last_pass_ms.load(Ordering::Relaxed);
        let now = now_ms();
        let (wait, bw) = if g.volume > 0 {
            instance_slot(&g, now, g.volume)?
        } else {
            next_slot_after(&g, now, (last > 0).then_some(last))?
        };
        let moved = self.moved.load(Ordering::Relaxed);
        if moved >= g.volume || moved == 0 {
            tracing::debug!(
                epoch = g.epoch,
                pos = position(&g, now),
                wait,
                bw,
                "periodic: an instance waits for its interval"
            );
        }
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        self.last_pass_ms.store(now_ms(), Ordering::Relaxed);
        // A new instance (the last one moved its volume, or none began yet).
        if self.moved.load(Ordering::Relaxed) >= g.volume {
            self.moved.store(0, Ordering::Relaxed);
        }
        self.moved.fetch_add(len, Ordering::Relaxed);
        self.instance_bw.store(bw, Ordering::Relaxed);
        Some(bw)
    }

    /// After moving `len` bytes that started at `start` at rate `bw` (the job's total): sleeps what the rate
    /// still asks, counting the job's other transfers paced meanwhile (its tasks share the rate).
    pub async fn pace(&self, len: u64, bw: u64, start: Instant) {
        if bw == 0 {
            return;
        }
        let due = Duration::from_secs_f64(len as f64 / bw as f64);
        let until = match self.paced_until.lock() {
            Ok(mut p) => {
                let from = p.map_or(start, |u| u.max(start));
                let until = from + due;
                *p = Some(until);
                until
            }
            Err(_) => start + due,
        };
        tokio::time::sleep_until(until.into()).await;
    }

    /// Registers the job's profile and follows the pattern from now on (a poll every third of the lease).
    pub async fn register(self: &Arc<Self>, mds: &MdsClient, profile: PeriodicProfile) -> FsResult<PeriodicGrant> {
        let g = mds.periodic_register(profile).await?;
        self.done.store(0, Ordering::Relaxed);
        self.set_grant(g.clone());
        self.follow(mds.clone());
        Ok(g.unwrap_or(PeriodicGrant::default()))
    }

    /// Polls for the job's grant in the background while this client exists (once per client).
    pub fn follow(self: &Arc<Self>, mds: MdsClient) {
        if let Ok(mut m) = self.mds.lock() {
            *m = Some(mds.clone());
        }
        if self.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(p) = me.upgrade() else { return };
                let hint = match p.lease_hint_ms.load(Ordering::Relaxed) {
                    0 => 3_000,
                    h => h,
                };
                let lease = p.grant().map_or(hint, |g| g.lease_ms).clamp(300, 60_000);
                let done = p.done.load(Ordering::Relaxed);
                match mds.periodic_poll(done).await {
                    Ok(g) => p.set_grant(g),
                    Err(e) => tracing::debug!("periodic poll: {e}"),
                }
                if !p.polling.load(Ordering::Acquire) {
                    return;
                }
                drop(p);
                tokio::time::sleep(Duration::from_millis(lease / 3)).await;
            }
        });
    }

    /// Leaves the pattern: no more delays, and the MDS replans for the others.
    pub async fn leave(&self, mds: &MdsClient) -> FsResult<()> {
        self.polling.store(false, Ordering::Release);
        self.set_grant(None);
        mds.periodic_leave().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::msg::PeriodicInterval;

    #[test]
    fn next_slot_waits_for_the_interval_and_never_delays_without_a_pattern() {
        let iv = PeriodicInterval { start_ms: 2_000, end_ms: 4_000, bytes_per_sec: 5 };
        let g = PeriodicGrant {
            epoch: 1,
            origin_ms: 1_000,
            period_ms: 10_000,
            intervals: vec![iv],
            lease_ms: 1,
            online: false,
            volume: 0,
        };
        assert_eq!(next_slot(&g, 1_000), Some((2_000, 5)));
        assert_eq!(next_slot(&g, 3_500), Some((0, 5)));
        assert_eq!(next_slot(&g, 5_500), Some((7_500, 5)));
        let none = PeriodicGrant { period_ms: 0, intervals: vec![], ..g };
        assert_eq!(next_slot(&none, 5_500), None);
        // Interval [2 s, 4 s) from origin 1 s: absolute [3 s, 5 s) + k·10 s; grace 200 ms.
        assert_eq!(next_slot_after(&g, 5_100, Some(4_900)), Some((0, 5)), "began inside: may finish");
        assert_eq!(next_slot_after(&g, 5_100, Some(2_000)), Some((7_900, 5)), "passed before the interval");
        assert_eq!(next_slot_after(&g, 5_250, Some(4_900)), Some((7_750, 5)), "past the grace: waits");
        assert_eq!(next_slot_after(&g, 5_100, None), Some((7_900, 5)));
        let p = Periodic::default();
        assert!(!p.active());
        p.set_grant(Some(none));
        assert!(!p.active(), "an empty grant delays nothing");
    }

    #[test]
    fn an_instance_begins_at_its_runs_start_or_where_the_rest_of_the_run_holds_it() {
        // T = 10 s from origin 0. Interval [2 s, 4 s) at 100 B/s (200 B of room): a 150 B instance.
        let g = |intervals: Vec<PeriodicInterval>| PeriodicGrant {
            epoch: 1,
            origin_ms: 0,
            period_ms: 10_000,
            intervals,
            lease_ms: 1,
            online: false,
            volume: 150,
        };
        let one = g(vec![PeriodicInterval { start_ms: 2_000, end_ms: 4_000, bytes_per_sec: 100 }]);
        assert_eq!(instance_slot(&one, 1_000, 150), Some((1_000, 100)), "before: waits for the start");
        assert_eq!(instance_slot(&one, 2_150, 150), Some((0, 100)), "within the grace of the start");
        assert_eq!(instance_slot(&one, 2_400, 150), Some((0, 100)), "1.6 s left hold 160 B");
        assert_eq!(instance_slot(&one, 2_600, 150), Some((9_400, 100)), "1.4 s hold 140 B: next period");
        assert_eq!(instance_slot(&one, 13_990, 150), Some((8_010, 100)));
        // A run across T: [9 s, 10 s) then [0, 1 s), 100 B/s each. At 9.4 s the run still holds 160 B.
        let wrap = g(vec![
            PeriodicInterval { start_ms: 0, end_ms: 1_000, bytes_per_sec: 100 },
            PeriodicInterval { start_ms: 9_000, end_ms: 10_000, bytes_per_sec: 100 },
        ]);
        assert_eq!(instance_slot(&wrap, 9_400, 150), Some((0, 100)));
        assert_eq!(instance_slot(&wrap, 500, 150), Some((8_500, 100)), "[0, 1 s) continues the run of 9 s");
        assert_eq!(instance_slot(&wrap, 5_000, 150), Some((4_000, 100)));
        // Two runs: a late arrival in the first waits for the second's start, where it begins.
        let two = g(vec![
            PeriodicInterval { start_ms: 1_000, end_ms: 2_000, bytes_per_sec: 100 },
            PeriodicInterval { start_ms: 6_000, end_ms: 8_000, bytes_per_sec: 100 },
        ]);
        assert_eq!(instance_slot(&two, 1_500, 150), Some((4_500, 100)));
        assert_eq!(instance_slot(&two, 6_000, 150), Some((0, 100)));
        let none = PeriodicGrant { period_ms: 0, ..one };
        assert_eq!(instance_slot(&none, 0, 150), None);
    }

    #[tokio::test]
    async fn an_instance_begun_in_its_interval_moves_its_volume_past_the_end() {
        let iv = PeriodicInterval { start_ms: 2_000, end_ms: 4_000, bytes_per_sec: 5 };
        let at = |pos: u64| PeriodicGrant {
            epoch: 1,
            origin_ms: now_ms() - pos,
            period_ms: 100_000,
            intervals: vec![iv],
            lease_ms: 60_000,
            online: false,
            volume: 100,
        };
        let p = Periodic::default();
        p.set_grant(Some(at(2_050)));
        assert_eq!(p.wait_slot(60).await, Some(5), "at the interval's start: an instance begins");
        // The interval is over (the clock is now 10 s into the period): the instance still has 40 bytes.
        p.set_grant(Some(at(10_000)));
        assert_eq!(p.wait_slot(60).await, Some(5), "the instance goes on past the interval's end");
        // Its volume is moved: the next transfer waits for the next interval, 92 s away.
        let next = tokio::time::timeout(Duration::from_millis(200), p.wait_slot(60)).await;
        assert!(next.is_err(), "a new instance waits for its interval");
        // Nor may a new instance begin within the grace after its interval (ended 20 ms ago here).
        let r = Periodic::default();
        r.set_grant(Some(at(2_010)));
        assert_eq!(r.wait_slot(100).await, Some(5), "one whole instance inside the interval");
        r.set_grant(Some(at(4_020)));
        assert!(tokio::time::timeout(Duration::from_millis(200), r.wait_slot(60)).await.is_err());
        // A job whose volume is unknown keeps to its intervals.
        let q = Periodic::default();
        q.set_grant(Some(PeriodicGrant { volume: 0, ..at(3_000) }));
        assert_eq!(q.wait_slot(60).await, Some(5));
        q.set_grant(Some(PeriodicGrant { volume: 0, ..at(10_000) }));
        assert!(tokio::time::timeout(Duration::from_millis(200), q.wait_slot(60)).await.is_err());
    }

    #[tokio::test]
    async fn an_instance_takes_the_rate_of_the_interval_it_is_in() {
        // One instance over two pieces: a little beside another job's transfer, then more. Past both, it
        // keeps the last piece's rate.
        let pieces = vec![
            PeriodicInterval { start_ms: 2_000, end_ms: 4_000, bytes_per_sec: 3 },
            PeriodicInterval { start_ms: 4_000, end_ms: 5_000, bytes_per_sec: 200 },
        ];
        let at = |pos: u64| PeriodicGrant {
            epoch: 1,
            origin_ms: now_ms() - pos,
            period_ms: 100_000,
            intervals: pieces.clone(),
            lease_ms: 60_000,
            online: false,
            // The rest of the run from 3 s (1 s at 3 B/s, 1 s at 200 B/s) holds it: it may begin there.
            volume: 200,
        };
        let p = Periodic::default();
        p.set_grant(Some(at(3_000)));
        assert_eq!(p.wait_slot(10).await, Some(3), "the instance begins in the first piece");
        assert_eq!(p.wait_slot(10).await, Some(3));
        p.set_grant(Some(at(4_500)));
        assert_eq!(p.wait_slot(10).await, Some(200), "the second piece's rate, not the first's");
        p.set_grant(Some(at(9_000)));
        assert_eq!(p.wait_slot(10).await, Some(200), "past its pieces: the last rate");
    }

    #[tokio::test]
    async fn concurrent_transfers_share_the_jobs_rate() {
        // Two tasks of one job each move 100 kB at a granted 1 MB/s in total: together 200 ms, not 100.
        let p = Arc::new(Periodic::default());
        let t0 = Instant::now();
        let (a, b) = (p.clone(), p.clone());
        tokio::join!(a.pace(100_000, 1_000_000, t0), b.pace(100_000, 1_000_000, t0));
        assert!(t0.elapsed() >= Duration::from_millis(199), "{:?}", t0.elapsed());
    }
}
