//! Per-job read/write operation and byte counters since the server started.

use std::collections::HashMap;
use std::sync::Mutex;
use tessera_proto::msg::{JobCounters, SizeHistogram};
use tessera_proto::types::job_entry;

/// Request sizes and forwarded requests since the server started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub sizes: SizeHistogram,
    pub forwarded: u64,
    pub forwarded_client_requests: u64,
}

pub struct Counters {
    jobs: Mutex<HashMap<String, JobCounters>>,
    /// Sizes of the read and write requests served, and how many came through forwarding nodes.
    traffic: Mutex<Traffic>,
    /// This set of counters' generation (reported with them): they count from zero since it began.
    generation: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    /// Counters from zero, in a new generation (the time they start, microseconds since the epoch: two
    /// starts of a server never share one, and a reader can tell which is newer).
    pub fn new() -> Counters {
        Counters { jobs: Mutex::default(), traffic: Mutex::default(), generation: tessera_proto::types::unix_us() }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn with_job(&self, job: &str, f: impl FnOnce(&mut JobCounters)) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        f(job_entry(&mut jobs, job, |key| JobCounters { job: key.to_string(), ..Default::default() }));
    }

    pub fn record_read(&self, job: &str, bytes: u64) {
        self.with_job(job, |c| {
            c.read_ops += 1;
            c.read_bytes += bytes;
        });
    }

    pub fn record_write(&self, job: &str, bytes: u64) {
        self.with_job(job, |c| {
            c.write_ops += 1;
            c.write_bytes += bytes;
        });
    }

    /// A read or write request of `len` bytes arrived; `forwarded`: it carried this many client
    /// requests merged by a forwarding node.
    pub fn record_request(&self, len: u64, forwarded: Option<u32>) {
        let mut t = self.traffic.lock().unwrap_or_else(|p| p.into_inner());
        t.sizes.record(len);
        if let Some(n) = forwarded {
            t.forwarded += 1;
            t.forwarded_client_requests += u64::from(n);
        }
    }

    pub fn traffic(&self) -> Traffic {
        self.traffic.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// All jobs' counters, sorted by job id.
    pub fn snapshot(&self) -> Vec<JobCounters> {
        let mut v: Vec<JobCounters> = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        v.sort_by(|a, b| a.job.cmp(&b.job));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::types::{MAX_JOBS, OVERFLOW_JOB};

    #[test]
    fn counts_per_job_and_bounds_jobs() {
        let c = Counters::new();
        c.record_read("a", 10);
        c.record_read("a", 5);
        c.record_write("b", 7);
        let s = c.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].job.as_str(), s[0].read_ops, s[0].read_bytes, s[0].write_ops), ("a", 2, 15, 0));
        assert_eq!((s[1].job.as_str(), s[1].write_ops, s[1].write_bytes), ("b", 1, 7));
        for i in 0..MAX_JOBS + 10 {
            c.record_write(&format!("j{i}"), 1);
        }
        let s = c.snapshot();
        assert_eq!(s.len(), MAX_JOBS + 1);
        assert!(s.iter().any(|j| j.job == OVERFLOW_JOB && j.write_ops >= 10));
    }

    #[test]
    fn request_sizes_and_forwarded_requests() {
        let c = Counters::new();
        c.record_request(4096, None);
        c.record_request(1 << 20, Some(16));
        c.record_request(50, Some(1));
        let t = c.traffic();
        assert_eq!(t.sizes.counts[SizeHistogram::bucket(4096)], 1);
        assert_eq!(t.sizes.counts[4], 0, "1 MiB is in the 1-4 MiB bucket");
        assert_eq!(t.sizes.counts[5], 1);
        assert_eq!(t.sizes.counts[0], 1);
        assert_eq!((t.forwarded, t.forwarded_client_requests), (2, 17));
    }
}
