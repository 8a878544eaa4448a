//! Rendering a registry, and collectors over live state: a closure given a [`Scrape`] writes metric
//! families whose values it reads at scrape time (label values are escaped by `prometheus_client`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::marker::PhantomData;

/// The Content-Type of what [`render`] produces.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry in the OpenMetrics text format, `# EOF` included.
pub fn render(registry: &Registry) -> Result<String, fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

/// A collector that runs `f` on every scrape (register it with `Registry::register_collector`).
pub fn collector<F>(f: F) -> Box<dyn Collector>
where
    F: Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static,
{
    Box::new(FnCollector(f))
}

struct FnCollector<F>(F);

impl<F> fmt::Debug for FnCollector<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnCollector")
    }
}

impl<F> Collector for FnCollector<F>
where
    F: Fn(&mut Scrape) -> fmt::Result + Send + Sync + 'static,
{
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        (self.0)(&mut Scrape { enc })
    }
}

/// One scrape, to which a collector writes its families.
pub struct Scrape<'a> {
    enc: DescriptorEncoder<'a>,
}

/// Marks a [`Family`] of gauges.
pub enum Gauge {}
/// Marks a [`Family`] of counters.
pub enum Counter {}
/// Marks a [`Family`] of histograms.
pub enum Histogram {}

/// One metric family being written: its samples follow its `# HELP` and `# TYPE` lines.
pub struct Family<'s, T> {
    enc: MetricEncoder<'s>,
    kind: PhantomData<T>,
}

impl<'a> Scrape<'a> {
    /// Starts a gauge family.
    pub fn gauge<'s>(&'s mut self, name: &'s str, help: &str) -> Result<Family<'s, Gauge>, fmt::Error> {
        let enc = self.enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        Ok(Family { enc, kind: PhantomData })
    }

    /// Starts a counter family; `name` is the samples' name, which ends in `_total` (the family's name
    /// in the `# TYPE` line is without it, as OpenMetrics has it).
    pub fn counter<'s>(&'s mut self, name: &'s str, help: &str) -> Result<Family<'s, Counter>, fmt::Error> {
        let family = name.strip_suffix("_total").ok_or(fmt::Error)?;
        let enc = self.enc.encode_descriptor(family, help, None, MetricType::Counter)?;
        Ok(Family { enc, kind: PhantomData })
    }
}

impl<'a> Scrape<'a> {
    /// Starts a histogram family (samples `NAME_bucket{le=...}`, `NAME_sum`, `NAME_count`).
    pub fn histogram<'s>(&'s mut self, name: &'s str, help: &str) -> Result<Family<'s, Histogram>, fmt::Error> {
        let enc = self.enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
        Ok(Family { enc, kind: PhantomData })
    }
}

impl<T> Family<'_, T> {
    /// The encoder of one sample: with `labels` after the registry's constant labels, or none.
    fn with<R>(
        &mut self,
        labels: &[(&str, &str)],
        f: impl FnOnce(&mut MetricEncoder) -> Result<R, fmt::Error>,
    ) -> Result<R, fmt::Error> {
        if labels.is_empty() {
            f(&mut self.enc)
        } else {
            f(&mut self.enc.encode_family(&labels)?)
        }
    }
}

impl Family<'_, Gauge> {
    /// One sample.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl EncodeGaugeValue) -> fmt::Result {
        self.with(labels, |e| e.encode_gauge(&value))
    }
}

impl Family<'_, Counter> {
    /// One sample.
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl EncodeCounterValue) -> fmt::Result {
        self.with(labels, |e| e.encode_counter::<NoLabelSet, _, u64>(&value, None))
    }
}

impl Family<'_, Histogram> {
    /// One histogram: the sum and count of the observations, and per bucket (upper bound, observations in
    /// it — not cumulative; the last bound `f64::INFINITY`).
    pub fn sample(&mut self, labels: &[(&str, &str)], sum: f64, count: u64, buckets: &[(f64, u64)]) -> fmt::Result {
        self.with(labels, |e| e.encode_histogram::<NoLabelSet>(sum, count, buckets, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectors_render_labels_escaped_and_counters_with_total() {
        let mut r = Registry::with_labels([("ds".into(), "3".into())].into_iter());
        r.register_collector(collector(|s| {
            s.gauge("t_depth", "Queue depth")?.sample(&[], 2i64)?;
            let mut f = s.counter("t_bytes_total", "Bytes by job")?;
            f.sample(&[("job", "a\"b\\c\nd")], 7u64)?;
            f.sample(&[("job", "plain")], 1.5f64)?;
            Ok(())
        }));
        let text = render(&r).unwrap();
        let want = "# HELP t_depth Queue depth\n# TYPE t_depth gauge\nt_depth{ds=\"3\"} 2\n\
                    # HELP t_bytes Bytes by job\n# TYPE t_bytes counter\n\
                    t_bytes_total{ds=\"3\",job=\"a\\\"b\\\\c\\nd\"} 7\nt_bytes_total{ds=\"3\",job=\"plain\"} 1.5\n\
                    # EOF\n";
        assert_eq!(text, want);

        let mut bare = Registry::default();
        bare.register_collector(collector(|s| s.gauge("t_up", "Up")?.sample(&[], 1i64)));
        assert_eq!(render(&bare).unwrap(), "# HELP t_up Up\n# TYPE t_up gauge\nt_up 1\n# EOF\n");
    }

    #[test]
    fn histograms_render_cumulative_buckets() {
        let mut r = Registry::default();
        r.register_collector(collector(|s| {
            s.histogram("t_latency_seconds", "Latency")?.sample(
                &[("target", "0")],
                0.5,
                3,
                &[(0.1, 1), (f64::INFINITY, 2)],
            )
        }));
        let text = render(&r).unwrap();
        assert!(text.contains("# TYPE t_latency_seconds histogram"), "{text}");
        assert!(text.contains("t_latency_seconds_bucket{le=\"0.1\",target=\"0\"} 1"), "{text}");
        assert!(text.contains("t_latency_seconds_bucket{le=\"+Inf\",target=\"0\"} 3"), "{text}");
        assert!(text.contains("t_latency_seconds_count{target=\"0\"} 3"), "{text}");
    }

    #[test]
    fn a_counter_name_without_total_is_refused() {
        let mut r = Registry::default();
        r.register_collector(collector(|s| s.counter("t_bytes", "Bytes")?.sample(&[], 1u64)));
        assert!(render(&r).is_err());
    }
}
