//! Prometheus metrics of a forwarding node (`GET /metrics`, served by `tessera_metrics`): its status
//! at each scrape, every sample labelled with the node's name.

use crate::server::IonService;
use std::fmt;
use std::sync::Arc;
use tessera_metrics::prometheus_client::registry::Registry;
use tessera_metrics::{collector, Scrape};
use tessera_proto::msg::SizeHistogram;

pub fn registry(service: Arc<IonService>) -> Registry {
    let mut registry = Registry::with_labels([("ion".into(), service.name.clone().into())].into_iter());
    registry.register_collector(collector(move |s| collect(&service, s)));
    registry
}

fn collect(service: &IonService, s: &mut Scrape) -> fmt::Result {
    let st = service.status();
    s.counter("tessera_ion_requests_forwarded_total", "Client data requests answered.")?
        .sample(&[], st.requests_forwarded)?;
    s.counter("tessera_ion_bytes_forwarded_total", "Bytes of client data requests answered.")?
        .sample(&[], st.bytes_forwarded)?;
    s.counter("tessera_ion_dispatched_total", "Requests sent to data servers (after merging).")?
        .sample(&[], st.dispatched)?;
    s.counter("tessera_ion_metadata_calls_total", "Metadata calls passed on to the MDS.")?
        .sample(&[], st.metadata_calls)?;
    s.gauge("tessera_ion_in_flight", "Merged requests at data servers, not answered yet.")?
        .sample(&[], st.in_flight)?;
    let mut f = s.gauge("tessera_ion_queue_depth", "Requests queued in the scheduler, per queue.")?;
    for (q, n) in &st.queues {
        f.sample(&[("scheduler", &st.scheduler), ("queue", q)], *n)?;
    }
    s.gauge("tessera_ion_window_seconds", "The scheduler's window (TWINS, SW).")?
        .sample(&[("scheduler", &st.scheduler)], st.window_us as f64 / 1e6)?;
    let mut f = s.counter("tessera_ion_request_sizes_total", "Requests by size bucket and where they were seen.")?;
    for (point, h) in [
        ("leaving_clients", &st.sizes_leaving_clients),
        ("arriving", &st.sizes_arriving),
        ("leaving", &st.sizes_leaving),
    ] {
        for (label, n) in SizeHistogram::LABELS.iter().zip(h.counts) {
            f.sample(&[("point", point), ("size", label)], n)?;
        }
    }
    s.gauge("tessera_ion_mean_offset_distance_bytes", "Mean offset distance of the stream leaving to each server.")?
        .sample(&[], st.mean_offset_distance)?;
    if let Some(us) = st.median_interarrival_us {
        s.gauge("tessera_ion_median_interarrival_seconds", "Median time between arriving data requests.")?
            .sample(&[], us as f64 / 1e6)?;
    }
    let mut f = s.counter("tessera_ion_job_requests_total", "Client data requests answered per job.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], j.requests)?;
    }
    let mut f = s.counter("tessera_ion_job_bytes_total", "Bytes answered per job.")?;
    for j in &st.jobs {
        f.sample(&[("job", &j.job)], j.bytes)?;
    }
    Ok(())
}
