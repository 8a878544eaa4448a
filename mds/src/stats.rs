//! The stats view: each data server's recent reports with their ages (statfs, `tessera df`, placement,
//! per-job reports). A short ring of reports per server is kept, not only the latest, so that rates
//! (bytes per second per job) can be derived from two reports of one counter generation.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tessera_proto::msg::{DsReport, DsStatus};
use tessera_proto::{DsId, TargetIdx};

/// Reports kept per data server (at the default 1 s interval: the last half minute).
pub const HISTORY: usize = 32;

/// One configured data server as placement sees it.
#[derive(Clone, Debug)]
pub struct DsInfo {
    pub id: DsId,
    pub addr: String,
    pub report: Option<Arc<DsReport>>,
    /// Time since the last report.
    pub age: Option<Duration>,
    /// Not heard from for longer than [`StatsView::silent_after`] (or never, that long after the MDS
    /// started): presumed down, so placement leaves it out.
    pub silent: bool,
}

/// Whether a server whose last report is `age` old (`None`: none since the MDS started `uptime` ago)
/// counts as silent.
pub fn is_silent(age: Option<Duration>, uptime: Duration, silent_after: Duration) -> bool {
    age.unwrap_or(uptime) > silent_after
}

/// A data server not heard from for this long (or five report intervals, if longer) is presumed down.
pub const SILENT_AFTER: Duration = Duration::from_secs(5);

/// One report as received.
#[derive(Clone, Debug)]
pub struct Sample {
    pub report: Arc<DsReport>,
    /// When the MDS received it.
    pub received: Instant,
}

/// One job's throughput at one data server between two reports of the same counter generation.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRate {
    pub job: String,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    pub ops_per_s: f64,
}

/// Rates at one data server over an interval of its own clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Rates {
    pub ds: DsId,
    /// Length of the interval the rates are taken over (the server's clock).
    pub interval: Duration,
    pub jobs: Vec<JobRate>,
}

pub struct StatsView {
    /// Configured data servers, in configuration order.
    configured: Vec<(DsId, String)>,
    /// Recent reports per server, oldest first; only the current generation's.
    history: RwLock<HashMap<DsId, VecDeque<Sample>>>,
    /// Servers cut off (their certificate revoked): silent until they report again.
    cut_off: RwLock<HashSet<DsId>>,
    /// Servers taken out of the cluster (`tessera ds remove`): silent for good.
    removed: RwLock<HashSet<DsId>>,
    started: Instant,
    silent_after: Duration,
    /// Storage targets per server (1 unless configured).
    target_counts: HashMap<DsId, TargetIdx>,
    /// Failure domain names of the servers that name one (`[[ds]] domain`).
    domains: HashMap<DsId, String>,
}

impl StatsView {
    pub fn new(configured: Vec<(DsId, String)>) -> StatsView {
        StatsView {
            configured,
            history: RwLock::new(HashMap::new()),
            cut_off: RwLock::new(HashSet::new()),
            removed: RwLock::new(HashSet::new()),
            started: Instant::now(),
            silent_after: SILENT_AFTER,
            target_counts: HashMap::new(),
            domains: HashMap::new(),
        }
    }

    /// The failure domain each server names (`[[ds]] domain`; those not named are their own).
    pub fn with_domains(self, domains: HashMap<DsId, String>) -> StatsView {
        StatsView { domains, ..self }
    }

    /// The failure domain server `ds` names, if any.
    pub fn domain(&self, ds: DsId) -> Option<&str> {
        self.domains.get(&ds).map(String::as_str)
    }

    /// The number of storage targets of each server (those not named have one).
    pub fn with_target_counts(self, counts: HashMap<DsId, TargetIdx>) -> StatsView {
        StatsView { target_counts: counts, ..self }
    }

    /// How many storage targets server `ds` serves.
    pub fn target_count(&self, ds: DsId) -> TargetIdx {
        self.target_counts.get(&ds).copied().unwrap_or(1).max(1)
    }

    /// Servers reporting every `interval` are presumed down after five intervals without a report
    /// (at least [`SILENT_AFTER`]).
    pub fn with_report_interval(self, interval: Duration) -> StatsView {
        StatsView { silent_after: (interval * 5).max(SILENT_AFTER), ..self }
    }

    pub fn ds_count(&self) -> usize {
        self.configured.len()
    }

    pub fn is_configured(&self, ds: DsId) -> bool {
        self.configured.iter().any(|(id, _)| *id == ds)
    }

    /// Adds a report to its server's ring. A new counter generation (the server restarted) starts the
    /// ring anew; a report older than the newest of its generation (reordered in transit) is dropped.
    pub fn record(&self, report: DsReport) {
        self.cut_off.write().unwrap_or_else(|p| p.into_inner()).remove(&report.ds);
        let mut m = self.history.write().unwrap_or_else(|p| p.into_inner());
        let ring = m.entry(report.ds).or_default();
        if let Some(last) = ring.back() {
            if last.report.generation != report.generation {
                ring.clear();
            } else if report.at_unix_us < last.report.at_unix_us {
                return;
            }
        }
        if ring.len() == HISTORY {
            ring.pop_front();
        }
        ring.push_back(Sample { report: Arc::new(report), received: Instant::now() });
    }

    /// The reports kept for `ds`, oldest first.
    pub fn history(&self, ds: DsId) -> Vec<Sample> {
        let m = self.history.read().unwrap_or_else(|p| p.into_inner());
        m.get(&ds).map(|r| r.iter().cloned().collect()).unwrap_or_default()
    }

    /// Per-job rates at `ds` over (at most) the last `over` of its reports: from the oldest report inside
    /// that window to the newest. `None` until two reports of one generation are there.
    pub fn rates(&self, ds: DsId, over: Duration) -> Option<Rates> {
        let m = self.history.read().unwrap_or_else(|p| p.into_inner());
        let ring = m.get(&ds)?;
        let newest = &ring.back()?.report;
        let since = newest.at_unix_us.saturating_sub(over.as_micros().min(u64::MAX as u128) as u64);
        let oldest =
            &ring.iter().find(|s| s.report.at_unix_us >= since && s.report.at_unix_us < newest.at_unix_us)?.report;
        let interval = Duration::from_micros(newest.at_unix_us - oldest.at_unix_us);
        let secs = interval.as_secs_f64();
        let jobs = newest
            .jobs
            .iter()
            .map(|j| {
                let before = oldest.jobs.iter().find(|o| o.job == j.job).cloned().unwrap_or_default();
                let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
                JobRate {
                    job: j.job.clone(),
                    read_bytes_per_s: per_s(j.read_bytes, before.read_bytes),
                    write_bytes_per_s: per_s(j.write_bytes, before.write_bytes),
                    ops_per_s: per_s(j.read_ops + j.write_ops, before.read_ops + before.write_ops),
                }
            })
            .collect();
        Some(Rates { ds, interval, jobs })
    }

    /// Counts a server as silent at once, until it reports again (its certificate was revoked: it cannot
    /// be reached, so new files should not wait the silence period to avoid it).
    pub fn cut(&self, ds: DsId) {
        self.cut_off.write().unwrap_or_else(|p| p.into_inner()).insert(ds);
    }

    /// Counts a server as silent for good (`tessera ds remove`): placement and resync leave it out.
    pub fn remove_server(&self, ds: DsId) {
        self.removed.write().unwrap_or_else(|p| p.into_inner()).insert(ds);
    }

    /// Every configured data server with its latest report.
    pub fn snapshot(&self) -> Vec<DsInfo> {
        let mut cut = self.cut_off.read().unwrap_or_else(|p| p.into_inner()).clone();
        cut.extend(self.removed.read().unwrap_or_else(|p| p.into_inner()).iter().copied());
        let m = self.history.read().unwrap_or_else(|p| p.into_inner());
        self.configured
            .iter()
            .map(|(id, addr)| {
                let r = m.get(id).and_then(|r| r.back());
                let age = r.map(|s| s.received.elapsed());
                DsInfo {
                    id: *id,
                    addr: addr.clone(),
                    report: r.map(|s| s.report.clone()),
                    age,
                    silent: cut.contains(id) || is_silent(age, self.started.elapsed(), self.silent_after),
                }
            })
            .collect()
    }

    /// (capacity, free, available) bytes summed over the latest reports of the configured servers: free
    /// is what is not used (capacity − used, statvfs's `f_bfree`), available what may still be written
    /// (a report's `free`, statvfs's `f_bavail`: without the blocks a file system reserves for root).
    pub fn totals(&self) -> (u64, u64, u64) {
        self.snapshot().iter().filter_map(|i| i.report.as_ref()).fold((0u64, 0u64, 0u64), |(c, f, a), r| {
            let free = r.capacity.saturating_sub(r.used).max(r.free);
            (c.saturating_add(r.capacity), f.saturating_add(free), a.saturating_add(r.free))
        })
    }

    pub fn cluster_status(&self) -> Vec<DsStatus> {
        self.snapshot()
            .into_iter()
            .map(|i| DsStatus {
                ds: i.id,
                addr: i.addr,
                report_age_ms: i.age.map(|a| a.as_millis().min(u64::MAX as u128) as u64),
                report: i.report.map(|r| (*r).clone()),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::msg::JobCounters;

    #[test]
    fn latest_report_wins_and_unconfigured_ignored() {
        let v = StatsView::new(vec![(0, "a".into()), (1, "b".into())]);
        v.record(DsReport { ds: 0, capacity: 100, used: 30, free: 50, ..Default::default() });
        v.record(DsReport { ds: 0, capacity: 100, used: 40, free: 40, ..Default::default() });
        v.record(DsReport { ds: 7, capacity: 1000, free: 1000, ..Default::default() });
        assert_eq!(v.totals(), (100, 60, 40), "free is what is not used; available what may be written");
        let s = v.cluster_status();
        assert_eq!(s.len(), 2);
        assert!(s[0].report_age_ms.is_some() && s[1].report.is_none());
        v.record(DsReport { ds: 1, capacity: 100, used: 20, free: 10, ..Default::default() });
        assert_eq!(v.totals(), (200, 140, 50), "summed over the servers");
    }

    #[test]
    fn a_server_is_silent_after_its_reports_stop_or_if_none_came_since_start() {
        let (sec, after) = (Duration::from_secs(1), SILENT_AFTER);
        assert!(!is_silent(Some(sec), sec * 60, after), "reported a second ago");
        assert!(is_silent(Some(after + sec), sec * 60, after), "reports stopped");
        assert!(!is_silent(None, sec, after), "just started: not heard from yet");
        assert!(is_silent(None, after + sec, after), "never heard from since start");
        let v = StatsView::new(vec![(0, "a".into())]).with_report_interval(Duration::from_secs(3));
        assert_eq!(v.silent_after, Duration::from_secs(15), "five report intervals");
        v.record(DsReport { ds: 0, ..Default::default() });
        assert!(!v.snapshot()[0].silent);
    }

    #[test]
    fn a_server_cut_off_is_silent_at_once_until_it_reports_again() {
        let v = StatsView::new(vec![(0, "a".into()), (1, "b".into())]);
        v.record(DsReport { ds: 0, ..Default::default() });
        v.record(DsReport { ds: 1, ..Default::default() });
        v.cut(1);
        let s = v.snapshot();
        assert!(!s[0].silent && s[1].silent, "its last report was just now, but it is cut off");
        v.record(DsReport { ds: 1, ..Default::default() });
        assert!(!v.snapshot()[1].silent, "a report (say, with a renewed certificate) brings it back");
    }

    fn report(generation: u64, at_s: u64, read_bytes: u64, write_bytes: u64) -> DsReport {
        let job = JobCounters { job: "j".into(), read_ops: read_bytes / 10, read_bytes, write_ops: 0, write_bytes };
        DsReport { ds: 0, at_unix_us: at_s * 1_000_000, generation, jobs: vec![job], ..Default::default() }
    }

    #[test]
    fn the_ring_keeps_recent_reports_of_one_generation() {
        let v = StatsView::new(vec![(0, "a".into())]);
        for s in 0..HISTORY as u64 + 5 {
            v.record(report(1, s, 0, 0));
        }
        let h = v.history(0);
        assert_eq!(h.len(), HISTORY, "bounded");
        assert_eq!(h[0].report.at_unix_us, 5_000_000, "the oldest went first");
        v.record(report(1, 3, 0, 0));
        assert_eq!(v.history(0).len(), HISTORY, "a report older than the newest is dropped");
        v.record(report(2, 1, 0, 0));
        assert_eq!(v.history(0).len(), 1, "a restarted server's counters start a new ring");
    }

    #[test]
    fn rates_come_from_two_reports_of_one_generation() {
        let v = StatsView::new(vec![(0, "a".into())]);
        v.record(report(1, 10, 1000, 0));
        assert_eq!(v.rates(0, Duration::from_secs(60)), None, "one report gives no rate");
        v.record(report(1, 12, 5000, 200));
        v.record(report(1, 14, 9000, 600));
        let r = v.rates(0, Duration::from_secs(60)).unwrap();
        assert_eq!(r.interval, Duration::from_secs(4));
        assert_eq!(r.jobs[0].read_bytes_per_s, 2000.0);
        assert_eq!(r.jobs[0].write_bytes_per_s, 150.0);
        assert_eq!(r.jobs[0].ops_per_s, 200.0);
        // Only the window asked for.
        let r = v.rates(0, Duration::from_secs(2)).unwrap();
        assert_eq!(r.interval, Duration::from_secs(2));
        assert_eq!(r.jobs[0].write_bytes_per_s, 200.0);
        // A restart: counters from zero are not a negative rate.
        v.record(report(2, 15, 10, 0));
        assert_eq!(v.rates(0, Duration::from_secs(60)), None);
        v.record(report(2, 16, 20, 0));
        assert_eq!(v.rates(0, Duration::from_secs(60)).unwrap().jobs[0].read_bytes_per_s, 10.0);
    }
}
