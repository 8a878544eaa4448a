//! What a data server reports about itself to the MDS ([`DsReport`]: space, queue, per-target traffic and
//! latency, per-job counters) and how the MDS shows a data server ([`DsStatus`], `tessera df`).

use super::common::SizeHistogram;
use crate::types::*;
use serde::{Deserialize, Serialize};

/// What a data server tells the MDS about itself, periodically.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsReport {
    pub ds: DsId,
    /// When the server took this report (its clock, microseconds since the Unix epoch).
    pub at_unix_us: u64,
    /// Counter generation: the counters below count from zero since the server started this generation
    /// (a new one at every start). Rates come from two reports of one generation.
    pub generation: u64,
    /// Bytes of the file system holding the object store.
    pub capacity: u64,
    pub used: u64,
    pub free: u64,
    pub objects: u64,
    /// Requests waiting or in service right now.
    pub queue_depth: u32,
    /// Per-job counters since the server started.
    pub jobs: Vec<JobCounters>,
    /// Sizes of the read and write requests that arrived since the server started.
    pub sizes: SizeHistogram,
    /// Of those, the ones forwarded by forwarding nodes, and the client requests they carried.
    pub forwarded: u64,
    pub forwarded_client_requests: u64,
    /// Each storage target's space and traffic (the fields above are their sums), by index.
    pub targets: Vec<TargetReport>,
    /// The server process's share of the machine's CPU over the last report interval (0..=1), its
    /// resident memory, and the data bytes it received (writes) and sent (reads) since it started.
    pub cpu: f64,
    pub rss_bytes: u64,
    pub data_rx_bytes: u64,
    pub data_tx_bytes: u64,
}

/// `OST cost = max utilisation / mean utilisation` (Tarazu's metric; 1.0 is perfect balance, and the
/// value when nothing is stored or no target is given).
pub fn ost_cost(utilisations: &[f64]) -> f64 {
    if utilisations.is_empty() {
        return 1.0;
    }
    let max = utilisations.iter().copied().fold(0.0f64, f64::max);
    let mean = utilisations.iter().sum::<f64>() / utilisations.len() as f64;
    if mean <= 0.0 {
        1.0
    } else {
        max / mean
    }
}

impl DsStatus {
    /// The server's targets as its report gives them (a report without per-target figures, from an older
    /// server, as one target); none before its first report.
    pub fn target_reports(&self) -> Vec<TargetReport> {
        match &self.report {
            Some(r) if r.targets.is_empty() => vec![TargetReport {
                capacity: r.capacity,
                used: r.used,
                free: r.free,
                objects: r.objects,
                ..Default::default()
            }],
            Some(r) => r.targets.clone(),
            None => Vec::new(),
        }
    }
}

/// One storage target's space and traffic since the server started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct TargetReport {
    pub target: TargetIdx,
    /// Configured capacity, else the host file system's.
    pub capacity: u64,
    /// Bytes the target's objects hold (configured capacity), else the host file system's use.
    pub used: u64,
    pub free: u64,
    pub objects: u64,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    /// Whether `capacity` is configured (enforced) rather than the host file system's.
    pub enforced: bool,
    /// Sizes of the reads and writes it served, and their latency (arrival at the server to done: queueing,
    /// the device and the I/O).
    pub sizes: SizeHistogram,
    pub latency: LatencyHistogram,
    /// Its traffic per job, the busiest [`TargetJob::MAX`] jobs (the rest summed under
    /// [`TargetJob::OTHERS`]); empty when per-job counting is off (`[metrics] job_counters`).
    pub jobs: Vec<TargetJob>,
}

/// One job's requests and bytes on one storage target since the server started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct TargetJob {
    pub job: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

impl TargetJob {
    /// Most jobs a target reports one by one.
    pub const MAX: usize = 32;
    /// The name the jobs beyond [`TargetJob::MAX`] are summed under.
    pub const OTHERS: &'static str = "(others)";
}

/// Request latencies in buckets (upper bounds in [`LatencyHistogram::BOUNDS_US`], the last open).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LatencyHistogram {
    pub counts: [u64; LatencyHistogram::BUCKETS],
    /// The latencies' sum, microseconds.
    pub sum_us: u64,
}

impl LatencyHistogram {
    pub const BUCKETS: usize = 14;
    /// Upper bounds (exclusive, microseconds) of the buckets but the last.
    pub const BOUNDS_US: [u64; 13] =
        [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000];

    pub fn bucket(us: u64) -> usize {
        Self::BOUNDS_US.partition_point(|&b| b <= us)
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Per bucket (upper bound in seconds, count), the last `f64::INFINITY`: a Prometheus histogram's.
    pub fn buckets_s(&self) -> Vec<(f64, u64)> {
        let bound = |i: usize| Self::BOUNDS_US.get(i).map_or(f64::INFINITY, |&us| us as f64 / 1e6);
        self.counts.iter().enumerate().map(|(i, &c)| (bound(i), c)).collect()
    }

    /// The upper bound (µs) of the bucket holding the `q` quantile (`None`: no requests; `u64::MAX`: in
    /// the open last bucket).
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= rank {
                return Some(Self::BOUNDS_US.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

impl TargetReport {
    /// used / capacity (0 for no capacity).
    pub fn utilisation(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            self.used as f64 / self.capacity as f64
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobCounters {
    pub job: String,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

/// One data server as the MDS sees it (`tessera df`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsStatus {
    pub ds: DsId,
    pub addr: String,
    /// Milliseconds since its last report; `None` if it never reported.
    pub report_age_ms: Option<u64>,
    pub report: Option<DsReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_name_their_bucket_bound() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in [10, 60, 60, 3_000, 2_000_000] {
            h.counts[LatencyHistogram::bucket(us)] += 1;
        }
        assert_eq!(LatencyHistogram::bucket(50), 1, "bounds are exclusive");
        assert_eq!(h.quantile_us(0.0), Some(50));
        assert_eq!(h.quantile_us(0.5), Some(100));
        assert_eq!(h.quantile_us(0.8), Some(5_000));
        assert_eq!(h.quantile_us(1.0), Some(u64::MAX));
    }
}
