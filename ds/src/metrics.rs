//! Prometheus metrics of a data server (`GET /metrics`, served by `tessera_metrics`), read from its
//! counters, locality monitor, serve control, scheduler, store and trace at each scrape.

use crate::counters::Counters;
use crate::locality::Locality;
use crate::scheduler::{Scheduler, ServeControl};
use crate::store::Store;
use crate::targetstats::TargetStats;
use crate::trace::Trace;
use std::fmt;
use std::sync::Arc;
use tessera_metrics::prometheus_client::registry::Registry;
use tessera_metrics::{collector, Scrape};
use tessera_proto::msg::ServeTarget;
use tessera_proto::DsId;

/// What the metrics show.
#[derive(Clone)]
pub struct Metrics {
    pub ds: DsId,
    pub counters: Arc<Counters>,
    pub locality: Arc<Locality>,
    pub serve: Arc<ServeControl>,
    pub scheduler: Scheduler,
    pub trace: Option<Arc<Trace>>,
    /// The targets' stores, by index.
    pub stores: Vec<Store>,
    /// The targets' request statistics, by index.
    pub target_stats: Vec<Arc<TargetStats>>,
}

impl Metrics {
    /// Everything the endpoint shows, every sample labelled with this server's `ds`.
    pub fn registry(self) -> Registry {
        let mut registry = Registry::with_labels([("ds".into(), self.ds.to_string().into())].into_iter());
        registry.register_collector(collector(move |s| self.collect(s)));
        registry
    }

    fn collect(&self, s: &mut Scrape) -> fmt::Result {
        let jobs = self.counters.snapshot();
        let mut f = s.counter("tessera_ds_job_ops_total", "Data requests served per job and operation.")?;
        for j in &jobs {
            f.sample(&[("job", &j.job), ("op", "read")], j.read_ops)?;
            f.sample(&[("job", &j.job), ("op", "write")], j.write_ops)?;
        }
        let mut f = s.counter("tessera_ds_job_bytes_total", "Bytes served per job and operation.")?;
        for j in &jobs {
            f.sample(&[("job", &j.job), ("op", "read")], j.read_bytes)?;
            f.sample(&[("job", &j.job), ("op", "write")], j.write_bytes)?;
        }
        let loc = self.locality.report(false);
        s.gauge("tessera_ds_sl_bytes", "SL_i: EWMA of the address gap between consecutive requests.")?
            .sample(&[], loc.sl)?;
        s.gauge("tessera_ds_seek_time_seconds", "SeekTime_i: expected cost of leaving to serve others.")?
            .sample(&[], loc.seek_time_us / 1e6)?;
        let mut f = s.gauge("tessera_ds_job_sl_bytes", "SL_ij: EWMA of the address gap between a job's requests.")?;
        for j in &loc.jobs {
            f.sample(&[("job", &j.job)], j.sl)?;
        }
        let mut f = s.gauge("tessera_ds_job_rd_seconds", "RD_ij: EWMA of a job's reuse distance while served.")?;
        for j in loc.jobs.iter().filter(|j| j.rd_valid) {
            f.sample(&[("job", &j.job)], j.rd_us / 1e6)?;
        }
        if let Some(rd) = loc.others_rd_us {
            s.gauge("tessera_ds_others_rd_seconds", "Reuse distance of the others object while served.")?
                .sample(&[], rd / 1e6)?;
        }
        s.counter("tessera_ds_direct_write_bytes_total", "Bytes written around the page cache (O_DIRECT).")?
            .sample(&[], self.stores.iter().map(Store::direct_bytes).sum::<u64>())?;
        let caches: Vec<_> = self.stores.iter().map(Store::write_cache_stats).collect();
        s.gauge("tessera_ds_write_cache_bytes", "Recently written data kept in memory for reads.")?
            .sample(&[], caches.iter().map(|c| c.bytes).sum::<u64>())?;
        let mut f = s.counter("tessera_ds_write_cache_reads_total", "Reads looked up in the write cache.")?;
        f.sample(&[("result", "hit")], caches.iter().map(|c| c.hits).sum::<u64>())?;
        f.sample(&[("result", "miss")], caches.iter().map(|c| c.misses).sum::<u64>())?;
        let names: Vec<String> = (0..self.stores.len()).map(|k| k.to_string()).collect();
        let mut f = s.gauge("tessera_ds_target_stored_bytes", "Bytes the objects of each storage target hold.")?;
        for (store, k) in self.stores.iter().zip(&names) {
            f.sample(&[("target", k)], store.stored())?;
        }
        let mut f = s.gauge("tessera_ds_target_capacity_bytes", "Configured capacity of each storage target.")?;
        for (store, k) in self.stores.iter().zip(&names) {
            if let Some(cap) = store.limit() {
                f.sample(&[("target", k)], cap)?;
            }
        }
        let traffic: Vec<_> = self.stores.iter().map(Store::traffic).collect();
        let mut f = s.counter("tessera_ds_target_ops_total", "Data requests served per storage target.")?;
        for (t, k) in traffic.iter().zip(&names) {
            f.sample(&[("target", k), ("op", "read")], t.read_ops)?;
            f.sample(&[("target", k), ("op", "write")], t.write_ops)?;
        }
        let mut f = s.counter("tessera_ds_target_bytes_total", "Bytes served per storage target.")?;
        for (t, k) in traffic.iter().zip(&names) {
            f.sample(&[("target", k), ("op", "read")], t.read_bytes)?;
            f.sample(&[("target", k), ("op", "write")], t.write_bytes)?;
        }
        let mut f = s.histogram(
            "tessera_ds_target_request_latency_seconds",
            "Reads and writes per storage target by their time at the server (queued, device, I/O).",
        )?;
        for (t, k) in self.target_stats.iter().zip(&names) {
            let l = t.latency();
            f.sample(&[("target", k)], l.sum_us as f64 / 1e6, l.total(), &l.buckets_s())?;
        }
        let mut f = s.counter("tessera_ds_target_request_size_total", "Reads and writes per target by size bucket.")?;
        for (t, k) in self.target_stats.iter().zip(&names) {
            for (count, size) in t.sizes().counts.iter().zip(tessera_proto::msg::SizeHistogram::LABELS) {
                f.sample(&[("target", k), ("size", size)], *count)?;
            }
        }
        let per_job: Vec<_> = self.target_stats.iter().map(|t| t.jobs()).collect();
        let mut f = s.counter("tessera_ds_target_job_bytes_total", "Bytes per storage target, job and operation.")?;
        for (jobs, k) in per_job.iter().zip(&names) {
            for j in jobs {
                f.sample(&[("target", k), ("job", &j.job), ("op", "read")], j.read_bytes)?;
                f.sample(&[("target", k), ("job", &j.job), ("op", "write")], j.write_bytes)?;
            }
        }
        let mut f = s.counter("tessera_ds_target_job_ops_total", "Requests per storage target, job and operation.")?;
        for (jobs, k) in per_job.iter().zip(&names) {
            for j in jobs {
                f.sample(&[("target", k), ("job", &j.job), ("op", "read")], j.read_ops)?;
                f.sample(&[("target", k), ("job", &j.job), ("op", "write")], j.write_ops)?;
            }
        }
        s.gauge("tessera_ds_queue_depth", "Requests waiting or in service.")?.sample(&[], self.scheduler.depth())?;
        let serve = self.serve.snapshot();
        s.gauge("tessera_ds_serve_epoch", "Epoch of the serve command in force (0 = work-conserving).")?
            .sample(&[], serve.epoch)?;
        let (kind, job) = match &serve.target {
            ServeTarget::All => ("all", String::new()),
            ServeTarget::Job(j) => ("job", j.clone()),
            ServeTarget::Others { eligible } => ("others", eligible.join(",")),
        };
        s.gauge("tessera_ds_serve_target", "The scheduling object being served.")?
            .sample(&[("kind", kind), ("job", &job)], 1i64)?;
        s.gauge("tessera_ds_serve_fallback", "1 while fallen back to work-conserving service.")?
            .sample(&[], i64::from(serve.fallen_back))?;
        s.counter("tessera_ds_serve_fallbacks_total", "Fallbacks since start.")?.sample(&[], serve.fallbacks)?;
        s.counter("tessera_ds_device_busy_seconds_total", "Time with a request in service.")?
            .sample(&[], self.scheduler.busy_seconds())?;
        if let Some(t) = &self.trace {
            s.counter("tessera_ds_trace_dropped_total", "Trace lines dropped (writer behind).")?
                .sample(&[], t.dropped())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceModel;
    use crate::scheduler::Orchestrated;
    use std::time::Duration;
    use tessera_metrics::render;
    use tessera_proto::msg::ServeCommand;

    #[tokio::test]
    async fn renders_counters_locality_serve_state_and_store() {
        let locality = Locality::new(3, DeviceModel::None, Duration::from_secs(5));
        let ctl = ServeControl::new(locality.clone(), Duration::from_secs(5));
        let scheduler = Scheduler::start(2, Orchestrated::new(ctl.clone()));
        let counters = Arc::new(Counters::new());
        let origin = tessera_proto::Origin { job: "job\"1".into(), client: 1, pid: 1 };
        counters.record_read(&tessera_proto::IoTag { origin, ino: 2 }, 1, 0, 4096);
        locality.on_arrival("job\"1");
        locality.on_served("job\"1", 0, 4096, Duration::from_micros(10));
        locality.on_served("job\"1", 1 << 20, 4096, Duration::from_micros(10));
        ctl.apply(&ServeCommand { epoch: 4, target: ServeTarget::Job("job\"1".into()), slice_ms: 100, fallback_ms: 0 });
        scheduler.submit("job\"1", async { Ok(()) }).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 3).unwrap();
        store.write(1, 0, bytes::Bytes::from(vec![1u8; 1 << 20]), false).await.unwrap();
        store.read(1, 0, 10).await.unwrap();
        let stats = Arc::new(TargetStats::new(true));
        stats.record("job\"1", true, 1 << 20, Duration::from_micros(700));
        let target_stats = vec![stats];
        let m = Metrics {
            ds: 3,
            counters,
            locality,
            serve: ctl,
            scheduler,
            trace: None,
            stores: vec![store],
            target_stats,
        };
        // The HTTP side (status, Content-Type, 404) is tessera_metrics::endpoint's test.
        let body = render(&m.registry()).unwrap();
        for want in [
            "tessera_ds_job_ops_total{ds=\"3\",job=\"job\\\"1\",op=\"read\"} 1",
            "tessera_ds_job_bytes_total{ds=\"3\",job=\"job\\\"1\",op=\"read\"} 4096",
            "tessera_ds_sl_bytes{ds=\"3\"} 1044480",
            "tessera_ds_seek_time_seconds{ds=\"3\"} 0.00001",
            "tessera_ds_job_sl_bytes{ds=\"3\",job=\"job\\\"1\"} 1044480",
            "tessera_ds_queue_depth{ds=\"3\"} 0",
            "tessera_ds_direct_write_bytes_total{ds=\"3\"} 1048576",
            "tessera_ds_write_cache_bytes{ds=\"3\"} 1048576",
            "tessera_ds_write_cache_reads_total{ds=\"3\",result=\"hit\"} 1",
            "tessera_ds_serve_epoch{ds=\"3\"} 4",
            "tessera_ds_serve_target{ds=\"3\",kind=\"job\",job=\"job\\\"1\"} 1",
            "tessera_ds_serve_fallback{ds=\"3\"} 0",
            "tessera_ds_target_request_latency_seconds_bucket{ds=\"3\",le=\"0.001\",target=\"0\"} 1",
            "tessera_ds_target_request_latency_seconds_count{ds=\"3\",target=\"0\"} 1",
            "tessera_ds_target_request_size_total{ds=\"3\",target=\"0\",size=\"1M-4M\"} 1",
            "tessera_ds_target_job_bytes_total{ds=\"3\",target=\"0\",job=\"job\\\"1\",op=\"write\"} 1048576",
            // OpenMetrics names a counter family without its samples' `_total`.
            "# TYPE tessera_ds_device_busy_seconds counter",
            "tessera_ds_device_busy_seconds_total{ds=\"3\"} ",
        ] {
            assert!(body.contains(want), "missing {want} in\n{body}");
        }
    }
}
