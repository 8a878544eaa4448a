//! Per storage target: request sizes, latencies and traffic per job (issue 15's statistics plane; the
//! MDS shows them in `tessera df --jobs` and its metrics). An observer of the data path
//! ([`crate::pipeline`]): a latency is a request's whole time at the server, queued by the scheduler,
//! the device, the I/O; a vectored read is one request of all its bytes.

use crate::device::OpKind;
use crate::observe::{Observer, Request};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tessera_proto::msg::{LatencyHistogram, SizeHistogram, TargetJob};

/// Most jobs a target counts apart; the rest go to [`TargetJob::OTHERS`] (the report names the busiest
/// [`TargetJob::MAX`]).
const MAX_JOBS: usize = 256;

/// One target's counters. Cheap to record: atomics, and one short lock for the job's entry.
pub struct TargetStats {
    sizes: [AtomicU64; SizeHistogram::BUCKETS],
    latency: [AtomicU64; LatencyHistogram::BUCKETS],
    latency_sum_us: AtomicU64,
    /// job → [read ops, read bytes, write ops, write bytes]; `None` when per-job counting is off.
    jobs: Option<Mutex<HashMap<String, [u64; 4]>>>,
}

impl TargetStats {
    /// Counters that keep per-job traffic when `per_job` (`[metrics] job_counters`).
    pub fn new(per_job: bool) -> TargetStats {
        TargetStats {
            sizes: Default::default(),
            latency: Default::default(),
            latency_sum_us: AtomicU64::new(0),
            jobs: per_job.then(|| Mutex::new(HashMap::new())),
        }
    }

    /// A read or write of `len` bytes by `job` that took `took` at the server.
    pub fn record(&self, job: &str, write: bool, len: u64, took: Duration) {
        self.sizes[SizeHistogram::bucket(len)].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.latency[LatencyHistogram::bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(us.min(u64::MAX >> 16), Ordering::Relaxed);
        let Some(jobs) = &self.jobs else { return };
        let mut m = jobs.lock().unwrap_or_else(|p| p.into_inner());
        let key = if m.contains_key(job) || m.len() < MAX_JOBS { job } else { TargetJob::OTHERS };
        let e = match m.get_mut(key) {
            Some(e) => e,
            None => m.entry(key.to_string()).or_default(),
        };
        let i = if write { 2 } else { 0 };
        e[i] = e[i].saturating_add(1);
        e[i + 1] = e[i + 1].saturating_add(len);
    }

    pub fn sizes(&self) -> SizeHistogram {
        SizeHistogram { counts: std::array::from_fn(|i| self.sizes[i].load(Ordering::Relaxed)) }
    }

    pub fn latency(&self) -> LatencyHistogram {
        LatencyHistogram {
            counts: std::array::from_fn(|i| self.latency[i].load(Ordering::Relaxed)),
            sum_us: self.latency_sum_us.load(Ordering::Relaxed),
        }
    }

    /// The busiest [`TargetJob::MAX`] jobs by bytes, the rest summed under [`TargetJob::OTHERS`].
    pub fn jobs(&self) -> Vec<TargetJob> {
        let Some(jobs) = &self.jobs else { return Vec::new() };
        let mut all: Vec<TargetJob> = jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(job, c)| TargetJob {
                job: job.clone(),
                read_ops: c[0],
                read_bytes: c[1],
                write_ops: c[2],
                write_bytes: c[3],
            })
            .collect();
        all.sort_by(|a, b| {
            let bytes = |j: &TargetJob| j.read_bytes.saturating_add(j.write_bytes);
            bytes(b).cmp(&bytes(a)).then_with(|| a.job.cmp(&b.job))
        });
        if all.len() > TargetJob::MAX {
            let rest = all.split_off(TargetJob::MAX - 1);
            let mut others = TargetJob { job: TargetJob::OTHERS.to_string(), ..Default::default() };
            for j in rest {
                others.read_ops = others.read_ops.saturating_add(j.read_ops);
                others.read_bytes = others.read_bytes.saturating_add(j.read_bytes);
                others.write_ops = others.write_ops.saturating_add(j.write_ops);
                others.write_bytes = others.write_bytes.saturating_add(j.write_bytes);
            }
            all.push(others);
        }
        all
    }
}

/// Reads and writes served, each as one request.
impl Observer for TargetStats {
    fn served(&self, req: &Request<'_>, _real: Duration) {
        if matches!(req.op.kind, OpKind::Read | OpKind::Write) {
            self.record(&req.job, req.op.kind == OpKind::Write, req.op.len, req.arrived.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_latencies_and_jobs_are_counted() {
        let s = TargetStats::new(true);
        s.record("a", true, 1 << 20, Duration::from_micros(700));
        s.record("a", false, 4096, Duration::from_micros(40));
        s.record("b", true, 100, Duration::from_millis(30));
        assert_eq!(s.sizes().total(), 3);
        assert_eq!(s.sizes().counts[SizeHistogram::bucket(1 << 20)], 1);
        let l = s.latency();
        assert_eq!((l.counts[0], l.counts[4], l.counts[9]), (1, 1, 1));
        let jobs = s.jobs();
        assert_eq!(jobs[0].job, "a", "the busiest first");
        assert_eq!(
            (jobs[0].read_ops, jobs[0].read_bytes, jobs[0].write_ops, jobs[0].write_bytes),
            (1, 4096, 1, 1 << 20)
        );
        assert_eq!((jobs[1].job.as_str(), jobs[1].write_bytes), ("b", 100));
    }

    #[test]
    fn jobs_are_bounded_and_the_rest_summed() {
        let s = TargetStats::new(true);
        for i in 0..MAX_JOBS + 10 {
            s.record(&format!("j{i}"), true, 1000 + i as u64, Duration::ZERO);
        }
        let jobs = s.jobs();
        assert_eq!(jobs.len(), TargetJob::MAX);
        let others = jobs.last().unwrap();
        assert_eq!(others.job, TargetJob::OTHERS);
        let total: u64 = jobs.iter().map(|j| j.write_ops).sum();
        assert_eq!(total, (MAX_JOBS + 10) as u64, "every request is in some entry");
    }

    #[test]
    fn no_jobs_when_per_job_counting_is_off() {
        let s = TargetStats::new(false);
        s.record("a", true, 10, Duration::ZERO);
        assert!(s.jobs().is_empty());
        assert_eq!(s.sizes().total(), 1);
    }
}
