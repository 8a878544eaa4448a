//! PerSched on the client side (specs/periodic.md "In the file system"): the job's grant from the MDS
//! (intervals modulo T), refreshed by a cheap poll every third of the lease — never a round trip per I/O —
//! and the gate every read and write of the job passes: wait for the job's interval, then pace to its
//! granted bandwidth. A job with no grant is never delayed: its gate is one atomic load.
//!
//! **decision**: the grant's times are the MDS's Unix clock; clients are assumed to share it (NTP), as
//! the paper's jobs share the job scheduler's.

use crate::mds_client::MdsClient;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_proto::error::FsResult;
use tessera_proto::msg::{PeriodicGrant, PeriodicProfile};

/// The job's current grant and what it reports back.
#[derive(Default, Debug)]
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
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// When a transfer of the job may start at `now_ms` and at what rate: `(wait_ms, bytes_per_sec)`.
/// `None`: no pattern, go now at full speed.
pub fn next_slot(g: &PeriodicGrant, now_ms: u64) -> Option<(u64, u64)> {
    if g.period_ms == 0 || g.intervals.is_empty() {
        return None;
    }
    let pos = now_ms.saturating_sub(g.origin_ms) % g.period_ms;
    if let Some(i) = g.intervals.iter().find(|i| i.start_ms <= pos && pos < i.end_ms) {
        return Some((0, i.bytes_per_sec));
    }
    g.intervals
        .iter()
        .map(|i| {
            let wait = if i.start_ms > pos { i.start_ms - pos } else { i.start_ms + g.period_ms - pos };
            (wait, i.bytes_per_sec)
        })
        .min_by_key(|x| x.0)
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
        let on = g.as_ref().is_some_and(|g| g.period_ms > 0 && !g.intervals.is_empty());
        if let Ok(mut cur) = self.grant.lock() {
            *cur = g;
        }
        self.active.store(on, Ordering::Relaxed);
    }

    /// The job finished one more instance (compute + transfer).
    pub fn instance_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits until the job's interval; returns the granted rate (bytes/s) to pace `len` bytes to.
    pub async fn wait_slot(&self) -> Option<u64> {
        let g = self.grant()?;
        let (wait, bw) = next_slot(&g, now_ms())?;
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
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
        Ok(g.unwrap_or(PeriodicGrant { epoch: 0, origin_ms: 0, period_ms: 0, intervals: vec![], lease_ms: 0 }))
    }

    /// Polls for the job's grant in the background while this client exists (once per client).
    pub fn follow(self: &Arc<Self>, mds: MdsClient) {
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
        let g = PeriodicGrant { epoch: 1, origin_ms: 1_000, period_ms: 10_000, intervals: vec![iv], lease_ms: 1 };
        assert_eq!(next_slot(&g, 1_000), Some((2_000, 5)));
        assert_eq!(next_slot(&g, 3_500), Some((0, 5)));
        assert_eq!(next_slot(&g, 5_500), Some((7_500, 5)));
        let none = PeriodicGrant { period_ms: 0, intervals: vec![], ..g };
        assert_eq!(next_slot(&none, 5_500), None);
        let p = Periodic::default();
        assert!(!p.active());
        p.set_grant(Some(none));
        assert!(!p.active(), "an empty grant delays nothing");
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
