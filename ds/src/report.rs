//! The data server's report (space, load, per-job counters) and the tasks sending it (with the per-job
//! detail of the jobs that changed) and the locality report to the MDS.

use crate::counters::Counters;
use crate::locality::Locality;
use crate::pipeline::DataPath;
use crate::scheduler::Scheduler;
use crate::store::Store;
use crate::targetstats::TargetStats;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::msg::{DsJobReport, DsReport, MdsCall, MdsRequest, TargetReport};
use tessera_proto::rpc::{self, MdsPeers, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{Caller, DsId, FsResult, Origin, TargetIdx};
use tracing::debug;

/// What goes into a report.
#[derive(Clone)]
pub struct Reporter {
    pub ds: DsId,
    /// The targets' stores, by index.
    pub stores: Vec<Store>,
    /// The targets' request statistics, by index.
    pub target_stats: Vec<Arc<TargetStats>>,
    pub scheduler: Scheduler,
    pub counters: Arc<Counters>,
    /// Samples this process's CPU share for the reports.
    pub load: Arc<std::sync::Mutex<tessera_ops::daemon::LoadProbe>>,
}

impl Reporter {
    /// The reporter of data server `ds` serving `path`: its targets' stores and statistics, its scheduler,
    /// and per-job counters (switched off unless `job_counters`: `[metrics] job_counters`).
    pub fn new(ds: DsId, path: &DataPath, job_counters: bool) -> Reporter {
        Reporter {
            ds,
            stores: path.targets.iter().map(|t| t.store.clone()).collect(),
            target_stats: path.targets.iter().map(|t| t.stats.clone()).collect(),
            scheduler: path.scheduler.clone(),
            counters: Arc::new(Counters::switched(job_counters)),
            load: Arc::default(),
        }
    }

    pub async fn build(&self) -> FsResult<DsReport> {
        let mut targets = Vec::with_capacity(self.stores.len());
        for (k, store) in self.stores.iter().enumerate() {
            let (space, t) = (store.space().await?, store.traffic());
            targets.push(TargetReport {
                target: k as TargetIdx,
                capacity: space.capacity,
                used: space.used,
                free: space.free,
                objects: space.objects,
                read_ops: t.read_ops,
                read_bytes: t.read_bytes,
                write_ops: t.write_ops,
                write_bytes: t.write_bytes,
                enforced: space.enforced,
                sizes: self.target_stats.get(k).map(|s| s.sizes()).unwrap_or_default(),
                latency: self.target_stats.get(k).map(|s| s.latency()).unwrap_or_default(),
                jobs: self.target_stats.get(k).map(|s| s.jobs()).unwrap_or_default(),
            });
        }
        // Targets sharing the host file system (no capacity configured) share its space: counted once.
        let shared = targets.iter().find(|t| !t.enforced);
        let sum = |f: fn(&TargetReport) -> u64| {
            targets.iter().filter(|t| t.enforced).map(f).sum::<u64>() + shared.map(f).unwrap_or(0)
        };
        let traffic = self.counters.traffic();
        Ok(DsReport {
            ds: self.ds,
            at_unix_us: tessera_proto::types::unix_us(),
            generation: self.counters.generation(),
            capacity: sum(|t| t.capacity),
            used: sum(|t| t.used),
            free: sum(|t| t.free),
            objects: targets.iter().map(|t| t.objects).sum(),
            queue_depth: self.scheduler.depth(),
            jobs: self.counters.snapshot(),
            sizes: traffic.sizes,
            forwarded: traffic.forwarded,
            forwarded_client_requests: traffic.forwarded_client_requests,
            cpu: self.load.lock().unwrap_or_else(|p| p.into_inner()).sample(std::time::Instant::now()).0,
            rss_bytes: tessera_ops::daemon::rss_bytes().unwrap_or(0),
            data_rx_bytes: targets.iter().map(|t| t.write_bytes).sum(),
            data_tx_bytes: targets.iter().map(|t| t.read_bytes).sum(),
            targets,
        })
    }
}

/// Sends a report to the MDS every `interval`; failures are retried at the next tick (the MDS may
/// start later or restart).
pub fn spawn_report_task(
    reporter: Reporter,
    identity: &NodeIdentity,
    mds: &[SocketAddr],
    tuning: Tuning,
    interval: Duration,
) -> FsResult<tokio::task::JoinHandle<()>> {
    let counters = reporter.counters.clone();
    let undelivered = move |req: &MdsRequest| {
        if let MdsRequest::DsJobReport(r) = req {
            counters.mark_changed(r.jobs.iter().map(|j| j.job.as_str()));
        }
    };
    let make = move || {
        let reporter = reporter.clone();
        async move {
            let mut out = Vec::new();
            match reporter.build().await {
                Ok(r) => {
                    let jobs = reporter.counters.take_changed();
                    if !jobs.is_empty() {
                        let (ds, at_unix_us, generation) = (r.ds, r.at_unix_us, r.generation);
                        out.push(MdsRequest::DsJobReport(Box::new(DsJobReport { ds, at_unix_us, generation, jobs })));
                    }
                    out.insert(0, MdsRequest::DsReport(Box::new(r)));
                }
                Err(e) => debug!("building report: {e}"),
            }
            out
        }
    };
    spawn_sender("report", identity, mds, tuning, interval, make, undelivered)
}

/// Sends the locality report to the MDS every `interval` (`orchestrator.report_interval_ms`).
pub fn spawn_locality_task(
    locality: Arc<Locality>,
    identity: &NodeIdentity,
    mds: &[SocketAddr],
    tuning: Tuning,
    interval: Duration,
) -> FsResult<tokio::task::JoinHandle<()>> {
    spawn_sender(
        "locality report",
        identity,
        mds,
        tuning,
        interval,
        move || {
            let report = locality.report(true);
            async move { vec![MdsRequest::LocalityReport(report)] }
        },
        |_| {},
    )
}

/// Every `interval` (at least 10 ms), builds requests with `make` and sends them to the MDS as root
/// (`undelivered` is told of those that failed). A request older than the next one is useless: no call
/// waits longer than an interval (at least 1 s).
fn spawn_sender<F, Fut, U>(
    what: &'static str,
    identity: &NodeIdentity,
    mds: &[SocketAddr],
    tuning: Tuning,
    interval: Duration,
    mut make: F,
    undelivered: U,
) -> FsResult<tokio::task::JoinHandle<()>>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Vec<MdsRequest>> + Send,
    U: Fn(&MdsRequest) + Send + 'static,
{
    let endpoint = rpc::client_endpoint(mds.first().is_some_and(|a| a.is_ipv6()))?;
    let interval = interval.max(Duration::from_millis(10));
    let tuning = Tuning { call_timeout: interval.max(Duration::from_secs(1)), ..tuning };
    let peer = MdsPeers::to_addrs(&endpoint, identity, mds, tuning)?;
    Ok(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for req in make().await {
                let call = MdsCall { caller: Caller::root(), origin: Origin::default(), req, seq: 0 };
                if let Err(e) = peer.send_once(&call).await {
                    debug!(mds = %peer.leader().addr(), "{what} not delivered: {e}");
                    undelivered(&call.req);
                }
            }
        }
    }))
}
