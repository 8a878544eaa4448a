//! PerSched in the mount (specs/periodic.md "In the file system": the client library *and the mount*
//! enforce a job's pattern). A mount serves many jobs — each request's job id is the calling process's
//! (`TESSERA_JOB`, the batch scheduler's id, else its session) — so it follows each job's pattern apart:
//! one [`Periodic`] per job, as the library keeps one per client, learnt with a poll at the job's first
//! open here and then by the library's background poll (every third of the lease, never one round trip
//! per I/O). A job's reads and writes through the mount wait for its interval and are paced to its
//! granted rate; a job without a pattern (registered or detected) costs one atomic load per request.
//!
//! **decision**: the gate is at the system call: a write waits before it enters the write-behind
//! buffer (what it buffers is sent at once or at the close, which waits for the interval too when data
//! is still buffered), a read before it is answered. Read-ahead the mount issues on its own is not gated.

use super::Periodic;
use crate::mds_client::MdsClient;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A job's state is dropped this long after its last open once none of its files is open here.
pub const IDLE: Duration = Duration::from_secs(60);
/// Jobs followed at once (more are followed only while their files are open).
pub const MAX_JOBS: usize = 1024;
/// The job of requests the kernel makes on its own (page-cache write-back): never gated.
const KERNEL_JOB: &str = "kernel";

/// Every job's pattern as this mount follows it.
#[derive(Default)]
pub struct Patterns {
    jobs: Mutex<HashMap<String, (Arc<Periodic>, Instant)>>,
    /// Shared by requests of no job in particular (the kernel's): never active.
    none: Arc<Periodic>,
    /// `[persched] lease_ms` of the mount's config: a job without a grant is polled every third of it.
    lease_ms: u64,
}

impl Patterns {
    pub fn new(lease_ms: u64) -> Patterns {
        Patterns { lease_ms, ..Default::default() }
    }

    /// The pattern state of the job `mds` calls for; a job new here asks the MDS for its grant first
    /// (so its first transfer already follows it), then keeps polling in the background.
    pub async fn of(&self, mds: &MdsClient) -> Arc<Periodic> {
        let job = mds.origin().job.clone();
        if job == KERNEL_JOB {
            return self.none.clone();
        }
        if let Ok(mut m) = self.jobs.lock() {
            if let Some((p, used)) = m.get_mut(&job) {
                *used = Instant::now();
                return p.clone();
            }
        }
        let p = Arc::new(Periodic::default());
        p.set_lease_hint(self.lease_ms);
        match mds.periodic_poll(0).await {
            Ok(g) => p.set_grant(g),
            Err(e) => tracing::debug!(%job, "periodic poll: {e}"),
        }
        let Ok(mut m) = self.jobs.lock() else { return p };
        if !m.contains_key(&job) && m.len() >= MAX_JOBS {
            // Followed while its handles live (the poll stops when the last goes).
            p.follow(mds.clone());
            return p;
        }
        let (p, _) = m.entry(job).or_insert_with(|| {
            p.follow(mds.clone());
            (p, Instant::now())
        });
        p.clone()
    }

    /// Forgets the jobs with no file open here and no open for [`IDLE`] (their polls stop).
    pub fn prune(&self) {
        if let Ok(mut m) = self.jobs.lock() {
            m.retain(|_, (p, used)| Arc::strong_count(p) > 1 || used.elapsed() < IDLE);
        }
    }

    /// Jobs followed now.
    pub fn len(&self) -> usize {
        self.jobs.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Waits for the job's interval when it has a pattern; the rate to pace the transfer to (`None`: no
/// pattern, go at full speed).
pub async fn gate(p: &Periodic, len: u64) -> Option<u64> {
    if p.active() {
        p.wait_slot(len).await
    } else {
        None
    }
}

/// After a transfer of `len` bytes that began at `t0` under `rate` from [`gate`]: what the rate asks.
pub async fn pace(p: &Periodic, rate: Option<u64>, len: u64, t0: Instant) {
    if let Some(bw) = rate {
        p.pace(len, bw, t0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::msg::{PeriodicGrant, PeriodicInterval};

    fn now_ms() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
    }

    #[tokio::test]
    async fn the_gate_waits_for_the_interval_only_with_a_pattern() {
        let p = Periodic::default();
        let t0 = Instant::now();
        assert_eq!(gate(&p, 1).await, None, "no pattern: no wait");
        // The interval [300, 400) ms of a 1 s period starting now.
        let iv = PeriodicInterval { start_ms: 300, end_ms: 400, bytes_per_sec: 1_000_000 };
        let origin = now_ms();
        p.set_grant(Some(PeriodicGrant {
            epoch: 1,
            origin_ms: origin,
            period_ms: 1_000,
            intervals: vec![iv],
            lease_ms: 1,
            online: false,
            volume: 0,
        }));
        assert_eq!(gate(&p, 1).await, Some(1_000_000));
        // Not released before its interval starts.
        assert!(now_ms() - origin >= 300, "released {} ms into the period", now_ms() - origin);
        assert!(t0.elapsed() >= Duration::from_millis(290));
    }
}
