//! The stats view: each data server's latest report and its age (statfs, `tessera df`, placement).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tessera_proto::msg::{DsReport, DsStatus};
use tessera_proto::DsId;

/// One configured data server as placement sees it.
#[derive(Clone, Debug)]
pub struct DsInfo {
    pub id: DsId,
    pub addr: String,
    pub report: Option<Arc<DsReport>>,
    /// Time since the last report.
    pub age: Option<Duration>,
}

pub struct StatsView {
    /// Configured data servers, in configuration order.
    configured: Vec<(DsId, String)>,
    latest: RwLock<HashMap<DsId, (Arc<DsReport>, Instant)>>,
}

impl StatsView {
    pub fn new(configured: Vec<(DsId, String)>) -> StatsView {
        StatsView { configured, latest: RwLock::new(HashMap::new()) }
    }

    pub fn ds_count(&self) -> usize {
        self.configured.len()
    }

    pub fn is_configured(&self, ds: DsId) -> bool {
        self.configured.iter().any(|(id, _)| *id == ds)
    }

    pub fn record(&self, report: DsReport) {
        let mut m = self.latest.write().unwrap_or_else(|p| p.into_inner());
        m.insert(report.ds, (Arc::new(report), Instant::now()));
    }

    /// Every configured data server with its latest report.
    pub fn snapshot(&self) -> Vec<DsInfo> {
        let m = self.latest.read().unwrap_or_else(|p| p.into_inner());
        self.configured
            .iter()
            .map(|(id, addr)| {
                let r = m.get(id);
                DsInfo {
                    id: *id,
                    addr: addr.clone(),
                    report: r.map(|(rep, _)| rep.clone()),
                    age: r.map(|(_, t)| t.elapsed()),
                }
            })
            .collect()
    }

    /// (capacity, free) bytes summed over the latest reports.
    pub fn totals(&self) -> (u64, u64) {
        let m = self.latest.read().unwrap_or_else(|p| p.into_inner());
        m.iter()
            .filter(|(id, _)| self.is_configured(**id))
            .fold((0u64, 0u64), |(c, f), (_, (r, _))| (c.saturating_add(r.capacity), f.saturating_add(r.free)))
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

    #[test]
    fn latest_report_wins_and_unconfigured_ignored() {
        let v = StatsView::new(vec![(0, "a".into()), (1, "b".into())]);
        v.record(DsReport { ds: 0, capacity: 100, free: 50, ..Default::default() });
        v.record(DsReport { ds: 0, capacity: 100, free: 40, ..Default::default() });
        v.record(DsReport { ds: 7, capacity: 1000, free: 1000, ..Default::default() });
        assert_eq!(v.totals(), (100, 40));
        let s = v.cluster_status();
        assert_eq!(s.len(), 2);
        assert!(s[0].report_age_ms.is_some() && s[1].report.is_none());
    }
}
