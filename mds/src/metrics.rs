//! Prometheus metrics of the MDS (`GET /metrics`, served by `tessera_metrics`): requests by type, and
//! what the orchestrator sees and decides, read from it at each scrape.

use crate::orchestrator::Orchestrator;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;
use tessera_metrics::prometheus_client::metrics::counter::Counter;
use tessera_metrics::prometheus_client::metrics::family::Family;
use tessera_metrics::prometheus_client::registry::Registry;
use tessera_metrics::{collector, Scrape};
use tessera_proto::msg::OrchestratorMode;

use tessera_proto::requests::NAMES;

/// The `type` label of a request counter.
type TypeLabel = [(&'static str, &'static str); 1];

/// Namespace counters: requests and failed requests by type name (every type in [`NAMES`] is shown,
/// at 0 until served).
pub struct RequestCounters {
    requests: Family<TypeLabel, Counter>,
    errors: Family<TypeLabel, Counter>,
}

impl Default for RequestCounters {
    fn default() -> Self {
        let c = RequestCounters { requests: Family::default(), errors: Family::default() };
        for kind in NAMES {
            drop(c.requests.get_or_create(&[("type", kind)]));
            drop(c.errors.get_or_create(&[("type", kind)]));
        }
        c
    }
}

impl RequestCounters {
    /// Counts one request of type `kind` (its [`tessera_proto::requests::Properties::name`]), and whether it succeeded.
    pub fn count(&self, kind: &'static str, ok: bool) {
        self.requests.get_or_create(&[("type", kind)]).inc();
        if !ok {
            self.errors.get_or_create(&[("type", kind)]).inc();
        }
    }

    /// (requests, errors) of type `kind` so far.
    pub fn get(&self, kind: &'static str) -> (u64, u64) {
        let of = |f: &Family<TypeLabel, Counter>| f.get(&[("type", kind)]).map_or(0, |c| c.get());
        (of(&self.requests), of(&self.errors))
    }

    /// Adds the counters to `registry` (the text shows the names with `_total`:
    /// `tessera_mds_requests_total`, `tessera_mds_request_errors_total`).
    fn register(&self, registry: &mut Registry) {
        registry.register("tessera_mds_requests", "Metadata requests served, by type", self.requests.clone());
        registry.register(
            "tessera_mds_request_errors",
            "Metadata requests answered with an error, by type",
            self.errors.clone(),
        );
    }
}

/// Everything the MDS's endpoint shows: the request counters, and the orchestrator's state at each scrape.
pub fn registry(orch: Arc<Orchestrator>, counters: &RequestCounters) -> Registry {
    let mut registry = Registry::default();
    counters.register(&mut registry);
    registry.register_collector(collector(move |s| orchestrator(s, &orch)));
    registry
}

/// Placement's families (specs/placement.md): each target's capacity and use as the placer sees it (reports
/// plus space allocated since), the OST cost, and the policy's solves.
pub fn add_placement(registry: &mut Registry, placer: Arc<crate::placement::placer::Placer>) {
    registry.register_collector(collector(move |s| placement(s, &placer)));
}

fn placement(s: &mut Scrape, placer: &crate::placement::placer::Placer) -> fmt::Result {
    let (targets, _) = placer.view();
    let label = |t: &crate::placement::TargetInfo| (t.server.to_string(), t.target.to_string());
    let mut f = s.gauge("tessera_placement_target_capacity_bytes", "A storage target's capacity.")?;
    for t in &targets {
        let (ds, k) = label(t);
        f.sample(&[("ds", &ds), ("target", &k)], t.capacity)?;
    }
    let mut f =
        s.gauge("tessera_placement_target_used_bytes", "A target's use: its last report plus space allocated since.")?;
    for t in &targets {
        let (ds, k) = label(t);
        f.sample(&[("ds", &ds), ("target", &k)], t.used)?;
    }
    let util: Vec<f64> = targets.iter().map(|t| t.used as f64 / t.capacity.max(1) as f64).collect();
    s.gauge("tessera_placement_ost_cost", "Max over mean utilisation of the targets (1 = balanced).")?
        .sample(&[], crate::placement::ost_cost(&util))?;
    let st = placer.status();
    let mut f = s.gauge("tessera_placement_policy", "1 for the cluster's placement policy.")?;
    f.sample(&[("policy", &st.policy)], 1i64)?;
    s.counter("tessera_placement_solves_total", "Batches of creates placed.")?.sample(&[], st.solves)?;
    s.counter("tessera_placement_files_total", "Files placed.")?.sample(&[], st.files)?;
    s.counter("tessera_placement_fallbacks_total", "Balanced solves that fell back to lustre.")?
        .sample(&[], st.fallbacks)?;
    s.counter("tessera_placement_deferred_total", "Balanced solves run as lustre while the MDS was loaded.")?
        .sample(&[], st.deferred)?;
    s.counter("tessera_placement_declared_used_total", "Creates placed from a declaration.")?
        .sample(&[], st.declared_used)?;
    let (planned_used, planned_dropped) = placer.planned_counts();
    s.counter(
        "tessera_placement_planned_extents_used_total",
        "Composite extents placed where their declaration planned.",
    )?
    .sample(&[], planned_used)?;
    s.counter(
        "tessera_placement_planned_extents_dropped_total",
        "Planned composite extents placed anew when reached (a planned target full or down).",
    )?
    .sample(&[], planned_dropped)?;
    if let Some(l) = st.last {
        s.gauge("tessera_placement_last_solve_seconds", "Time the last solve took.")?
            .sample(&[("policy", &l.policy)], l.micros as f64 / 1e6)?;
        s.gauge("tessera_placement_last_solve_files", "Files in the last solve.")?
            .sample(&[("policy", &l.policy)], u64::from(l.batch))?;
    }
    Ok(())
}

/// Mirrored files' families (issue 36; what `tessera mirror status` shows): replicas not in sync, the bytes
/// they have to copy, the resync rate and what resync has done since the MDS started.
pub fn add_mirror(registry: &mut Registry, ns: Arc<crate::namespace::Namespace>) {
    registry.register_collector(collector(move |s| match ns.mirror_status() {
        Ok(st) => mirror(s, &st),
        // A scrape shows what it can; the store's error is the MDS log's business.
        Err(_) => Ok(()),
    }));
}

fn mirror(s: &mut Scrape, st: &tessera_proto::msg::MirrorStatus) -> fmt::Result {
    s.gauge("tessera_mirror_degraded_files", "Mirrored files with a replica not in sync.")?
        .sample(&[], st.degraded_files)?;
    s.gauge("tessera_mirror_degraded_objects", "Replica objects not in sync (stale or resyncing).")?
        .sample(&[], st.degraded_objects)?;
    let mut f = s.gauge("tessera_mirror_replicas", "Replica objects not in sync, by state.")?;
    f.sample(&[("state", "stale")], st.stale)?;
    f.sample(&[("state", "resyncing")], st.resyncing)?;
    s.gauge("tessera_mirror_bytes_to_resync", "Bytes the replicas not in sync have to copy.")?
        .sample(&[], st.bytes_to_resync)?;
    s.gauge("tessera_mirror_resync_bytes_per_second", "Resync copying rate over the last few seconds.")?
        .sample(&[], st.resync_rate)?;
    s.counter("tessera_mirror_resyncs_total", "Replica resyncs finished.")?.sample(&[], st.resyncs_done)?;
    s.counter("tessera_mirror_resynced_bytes_total", "Bytes copied by resyncs.")?.sample(&[], st.resynced_bytes)?;
    s.gauge("tessera_mirror_removed_servers", "Data servers taken out (tessera ds remove).")?
        .sample(&[], st.removed.len() as u64)
}

/// PerSched's families (specs/periodic.md): per periodic job planned and measured ρ̃ and dilation; the
/// system's SysEff, its upper bound and the period.
pub fn add_persched(registry: &mut Registry, p: Arc<crate::persched::shared::Shared>) {
    registry.register_collector(collector(move |s| {
        let st = p.lock().status(tessera_proto::types::unix_us() / 1000);
        persched(s, &st)
    }));
}

fn persched(s: &mut Scrape, st: &crate::persched::live::Status) -> fmt::Result {
    s.gauge("tessera_persched_period_seconds", "Period T of the current pattern (0: none).")?
        .sample(&[], st.period_ms as f64 / 1e3)?;
    s.gauge("tessera_persched_syseff", "SysEff of the periodic jobs (measured where reported, else planned).")?
        .sample(&[], st.syseff)?;
    s.gauge("tessera_persched_upper_bound", "Upper bound of SysEff: every job at its congestion-free efficiency.")?
        .sample(&[], st.upper_bound)?;
    let mut f = s.gauge("tessera_persched_job_planned_rho", "A periodic job's efficiency in the pattern.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], j.planned_rho)?;
    }
    let mut f =
        s.gauge("tessera_persched_job_measured_rho", "A periodic job's efficiency from its own instance count.")?;
    for j in &st.jobs {
        if let Some(m) = j.measured_rho {
            f.sample(&[("job", &j.job)], m)?;
        }
    }
    let mut f = s.gauge("tessera_persched_job_dilation", "rho over the job's measured (else planned) efficiency.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], j.dilation)?;
    }
    let mut f = s.gauge("tessera_persched_job_source", "1 per periodic job, labelled registered or detected.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job), ("source", j.source.name())], 1.0)?;
    }
    Ok(())
}

/// The orchestrator's families.
fn orchestrator(s: &mut Scrape, orch: &Orchestrator) -> fmt::Result {
    let st = orch.status(Instant::now());
    let mut f = s.gauge("tessera_orchestrator_mode", "1 for the orchestrator's current mode.")?;
    for m in [OrchestratorMode::Off, OrchestratorMode::Even, OrchestratorMode::IOrchestrator] {
        f.sample(&[("mode", &m.to_string())], i64::from(st.mode == m))?;
    }
    s.gauge("tessera_orchestrator_window_seconds", "Scheduling window length.")?
        .sample(&[], f64::from(st.window_ms) / 1e3)?;
    s.counter("tessera_orchestrator_windows_total", "Scheduling windows run.")?.sample(&[], st.windows_run)?;
    let mut f = s.gauge(
        "tessera_orchestrator_switch_skew_seconds",
        "Spread of the data servers' switch times (last, median of recent).",
    )?;
    if let Some(us) = st.last_switch_skew_us {
        f.sample(&[("stat", "last")], us as f64 / 1e6)?;
    }
    if let Some(us) = st.median_switch_skew_us {
        f.sample(&[("stat", "median")], us as f64 / 1e6)?;
    }
    let mut f =
        s.gauge("tessera_orchestrator_plan_slice_seconds", "Slice of each scheduling object in the current window.")?;
    for slice in &st.plan {
        f.sample(&[("object", &slice.label)], slice.slice_ms / 1e3)?;
    }
    let servers: Vec<(String, f64, f64, u64)> =
        st.servers.iter().map(|&(ds, sl, seek, age)| (ds.to_string(), sl, seek, age)).collect();
    let mut f = s.gauge(
        "tessera_orchestrator_server_sl_bytes",
        "SL_i: EWMA address gap between consecutive requests at a data server.",
    )?;
    for (ds, sl, _, _) in &servers {
        f.sample(&[("ds", ds)], *sl)?;
    }
    let mut f =
        s.gauge("tessera_orchestrator_server_seek_seconds", "SeekTime_i: expected cost of leaving to serve others.")?;
    for (ds, _, seek_us, _) in &servers {
        f.sample(&[("ds", ds)], seek_us / 1e6)?;
    }
    let mut f =
        s.gauge("tessera_orchestrator_server_report_age_seconds", "Age of a data server's last locality report.")?;
    for (ds, _, _, age_ms) in &servers {
        f.sample(&[("ds", ds)], *age_ms as f64 / 1e3)?;
    }
    let mut f = s.gauge("tessera_orchestrator_job_eligible", "1 if the program is eligible for dedicated service.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], i64::from(j.eligible))?;
    }
    let mut f = s.gauge("tessera_orchestrator_job_slice_share", "Share of the window dedicated to the program.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], j.slice_share)?;
    }
    let mut f = s.gauge(
        "tessera_orchestrator_job_sl_bytes",
        "SL_ij: EWMA address gap between consecutive requests of a program at a data server.",
    )?;
    for j in &st.jobs {
        for (ds, sl, _) in &j.servers {
            f.sample(&[("ds", &ds.to_string()), ("job", &j.job)], *sl)?;
        }
    }
    let mut f = s.gauge(
        "tessera_orchestrator_job_rd_seconds",
        "RD_ij: EWMA reuse distance of a program at a data server under dedicated service.",
    )?;
    for j in &st.jobs {
        for (ds, _, rd_us) in &j.servers {
            if let Some(rd_us) = rd_us {
                f.sample(&[("ds", &ds.to_string()), ("job", &j.job)], rd_us / 1e6)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::Params;
    use tessera_metrics::render;
    use tessera_proto::msg::MdsRequest;
    use tessera_proto::msg::{JobLocality, LocalityReport};

    #[test]
    fn renders_persched_state() {
        use crate::persched::live::{LiveConfig, Profile, Registry as Live};
        use crate::persched::shared::Shared;
        let mut live = Live::new(LiveConfig::test_cluster());
        live.register("p\"1", Profile { nodes: 4, compute_ms: 2_000, volume: 60_000_000 }, 0).unwrap();
        live.replan(0);
        let mut reg = Registry::default();
        add_persched(&mut reg, Arc::new(Shared::new(live)));
        let body = render(&reg).unwrap();
        for line in [
            "tessera_persched_period_seconds 4",
            "tessera_persched_job_planned_rho{job=\"p\\\"1\"} 0.5",
            "tessera_persched_upper_bound 0.25",
            "tessera_persched_job_source{job=\"p\\\"1\",source=\"registered\"} 1",
        ] {
            assert!(body.contains(line), "{line} missing in\n{body}");
        }
    }

    #[test]
    fn renders_mirror_state() {
        let st = tessera_proto::msg::MirrorStatus {
            degraded_files: 2,
            degraded_objects: 3,
            stale: 1,
            resyncing: 2,
            bytes_to_resync: 4096,
            resyncs_done: 5,
            resynced_bytes: 1 << 20,
            resync_rate: 1000,
            removed: vec![3],
        };
        let mut reg = Registry::default();
        reg.register_collector(collector(move |s| mirror(s, &st)));
        let body = render(&reg).unwrap();
        for line in [
            "tessera_mirror_degraded_objects 3",
            "tessera_mirror_replicas{state=\"resyncing\"} 2",
            "tessera_mirror_bytes_to_resync 4096",
            "tessera_mirror_resync_bytes_per_second 1000",
            "tessera_mirror_resynced_bytes_total 1048576",
            "tessera_mirror_removed_servers 1",
        ] {
            assert!(body.contains(line), "{line} missing in\n{body}");
        }
    }

    #[test]
    fn renders_placement_state() {
        use crate::stats::StatsView;
        use tessera_proto::msg::{DsReport, TargetReport};
        let stats = Arc::new(
            StatsView::new(vec![(0, String::new()), (1, String::new())])
                .with_target_counts([(0, 2), (1, 2)].into_iter().collect()),
        );
        for ds in 0..2 {
            let t = |k: u16, used: u64| TargetReport { target: k, capacity: 1000, used, ..Default::default() };
            stats.record(DsReport {
                ds,
                targets: vec![t(0, 100 * u64::from(ds + 1)), t(1, 100)],
                ..Default::default()
            });
        }
        let placer = Arc::new(
            crate::placement::placer::Placer::new(stats, "lustre", std::time::Duration::from_secs(1)).unwrap(),
        );
        let mut reg = Registry::default();
        add_placement(&mut reg, placer);
        let body = render(&reg).unwrap();
        for line in [
            "tessera_placement_target_used_bytes{ds=\"1\",target=\"0\"} 200",
            "tessera_placement_target_capacity_bytes{ds=\"0\",target=\"1\"} 1000",
            "tessera_placement_ost_cost 1.6",
            "tessera_placement_policy{policy=\"lustre\"} 1",
            "tessera_placement_planned_extents_used_total 0",
        ] {
            assert!(body.contains(line), "{line} missing in\n{body}");
        }
    }

    #[test]
    fn renders_requests_and_orchestrator_state() {
        let orch = Arc::new(Orchestrator::new(Params::default(), OrchestratorMode::Even, vec![0, 1]));
        let now = Instant::now();
        for ds in 0..2 {
            let jobs = vec![
                JobLocality { job: "seq\"1".into(), sl: 0.0, rd_us: 1500.0, rd_valid: true, requests: 3, bytes: 1 },
                JobLocality { job: "rnd".into(), sl: 2e9, requests: 3, ..Default::default() },
            ];
            orch.record(LocalityReport { ds, sl: 2e9, seek_time_us: 8000.0, jobs, ..Default::default() }, now);
        }
        orch.plan_window(now);
        orch.record_skew(120);
        let counters = RequestCounters::default();
        counters.count(MdsRequest::Ping.properties().name, true);
        counters.count(MdsRequest::StatFs.properties().name, false);
        assert_eq!(counters.get("Ping"), (1, 0));
        assert_eq!(counters.get("StatFs"), (1, 1));
        let body = render(&registry(orch, &counters)).unwrap();
        // The HTTP side (status, Content-Type, Content-Length, 404, 405) is tessera_metrics::endpoint's test.
        for line in [
            "tessera_mds_requests_total{type=\"Ping\"} 1",
            "tessera_mds_requests_total{type=\"Mkdir\"} 0",
            "tessera_mds_request_errors_total{type=\"StatFs\"} 1",
            "tessera_orchestrator_mode{mode=\"even\"} 1",
            "tessera_orchestrator_mode{mode=\"off\"} 0",
            "tessera_orchestrator_windows_total 1",
            "tessera_orchestrator_switch_skew_seconds{stat=\"last\"} 0.00012",
            "tessera_orchestrator_job_eligible{job=\"seq\\\"1\"} 1",
            "tessera_orchestrator_job_eligible{job=\"rnd\"} 0",
            "tessera_orchestrator_job_slice_share{job=\"seq\\\"1\"} 0.5",
            // OpenMetrics floats: an integral value keeps its `.0`.
            "tessera_orchestrator_job_sl_bytes{ds=\"1\",job=\"rnd\"} 2000000000.0",
            "tessera_orchestrator_server_sl_bytes{ds=\"0\"} 2000000000.0",
            "tessera_orchestrator_server_seek_seconds{ds=\"1\"} 0.008",
            "# TYPE tessera_mds_requests counter",
            "# HELP tessera_orchestrator_window_seconds Scheduling window length.",
        ] {
            assert!(body.lines().any(|l| l == line), "missing {line}\n{body}");
        }
        assert_eq!(body.lines().filter(|l| l.starts_with("tessera_mds_requests_total{")).count(), NAMES.len());
    }
}
