//! Prometheus text-format metrics on `GET /metrics` (plain HTTP/1.1 over TCP; a tiny responder, one
//! request per connection).

use crate::counters::Counters;
use crate::locality::Locality;
use crate::scheduler::{Scheduler, ServeControl};
use crate::store::Store;
use crate::trace::Trace;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::msg::ServeTarget;
use tessera_proto::DsId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the metrics show.
#[derive(Clone)]
pub struct Metrics {
    pub ds: DsId,
    pub counters: Arc<Counters>,
    pub locality: Arc<Locality>,
    pub serve: Arc<ServeControl>,
    pub scheduler: Scheduler,
    pub trace: Option<Arc<Trace>>,
    pub store: Store,
}

/// A label value with `\`, `"` and line breaks escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Metrics {
    pub fn render(&self) -> String {
        let ds = self.ds;
        let mut o = String::new();
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let jobs = self.counters.snapshot();
        head(&mut o, "tessera_ds_job_ops_total", "counter", "Data requests served per job and operation.");
        for j in &jobs {
            let n = label(&j.job);
            let _ = writeln!(o, "tessera_ds_job_ops_total{{ds=\"{ds}\",job=\"{n}\",op=\"read\"}} {}", j.read_ops);
            let _ = writeln!(o, "tessera_ds_job_ops_total{{ds=\"{ds}\",job=\"{n}\",op=\"write\"}} {}", j.write_ops);
        }
        head(&mut o, "tessera_ds_job_bytes_total", "counter", "Bytes served per job and operation.");
        for j in &jobs {
            let n = label(&j.job);
            let _ = writeln!(o, "tessera_ds_job_bytes_total{{ds=\"{ds}\",job=\"{n}\",op=\"read\"}} {}", j.read_bytes);
            let _ = writeln!(o, "tessera_ds_job_bytes_total{{ds=\"{ds}\",job=\"{n}\",op=\"write\"}} {}", j.write_bytes);
        }
        let loc = self.locality.report(false);
        head(&mut o, "tessera_ds_sl_bytes", "gauge", "SL_i: EWMA of the address gap between consecutive requests.");
        let _ = writeln!(o, "tessera_ds_sl_bytes{{ds=\"{ds}\"}} {}", loc.sl);
        head(&mut o, "tessera_ds_seek_time_seconds", "gauge", "SeekTime_i: expected cost of leaving to serve others.");
        let _ = writeln!(o, "tessera_ds_seek_time_seconds{{ds=\"{ds}\"}} {}", loc.seek_time_us / 1e6);
        head(&mut o, "tessera_ds_job_sl_bytes", "gauge", "SL_ij: EWMA of the address gap between a job's requests.");
        for j in &loc.jobs {
            let _ = writeln!(o, "tessera_ds_job_sl_bytes{{ds=\"{ds}\",job=\"{}\"}} {}", label(&j.job), j.sl);
        }
        head(&mut o, "tessera_ds_job_rd_seconds", "gauge", "RD_ij: EWMA of a job's reuse distance while served.");
        for j in loc.jobs.iter().filter(|j| j.rd_valid) {
            let _ = writeln!(o, "tessera_ds_job_rd_seconds{{ds=\"{ds}\",job=\"{}\"}} {}", label(&j.job), j.rd_us / 1e6);
        }
        if let Some(rd) = loc.others_rd_us {
            head(&mut o, "tessera_ds_others_rd_seconds", "gauge", "Reuse distance of the others object while served.");
            let _ = writeln!(o, "tessera_ds_others_rd_seconds{{ds=\"{ds}\"}} {}", rd / 1e6);
        }
        head(
            &mut o,
            "tessera_ds_direct_write_bytes_total",
            "counter",
            "Bytes written around the page cache (O_DIRECT).",
        );
        let _ = writeln!(o, "tessera_ds_direct_write_bytes_total{{ds=\"{ds}\"}} {}", self.store.direct_bytes());
        let cache = self.store.write_cache_stats();
        head(&mut o, "tessera_ds_write_cache_bytes", "gauge", "Recently written data kept in memory for reads.");
        let _ = writeln!(o, "tessera_ds_write_cache_bytes{{ds=\"{ds}\"}} {}", cache.bytes);
        head(&mut o, "tessera_ds_write_cache_reads_total", "counter", "Reads looked up in the write cache.");
        let _ = writeln!(o, "tessera_ds_write_cache_reads_total{{ds=\"{ds}\",result=\"hit\"}} {}", cache.hits);
        let _ = writeln!(o, "tessera_ds_write_cache_reads_total{{ds=\"{ds}\",result=\"miss\"}} {}", cache.misses);
        head(&mut o, "tessera_ds_queue_depth", "gauge", "Requests waiting or in service.");
        let _ = writeln!(o, "tessera_ds_queue_depth{{ds=\"{ds}\"}} {}", self.scheduler.depth());
        let serve = self.serve.snapshot();
        head(&mut o, "tessera_ds_serve_epoch", "gauge", "Epoch of the serve command in force (0 = work-conserving).");
        let _ = writeln!(o, "tessera_ds_serve_epoch{{ds=\"{ds}\"}} {}", serve.epoch);
        head(&mut o, "tessera_ds_serve_target", "gauge", "The scheduling object being served.");
        let (kind, job) = match &serve.target {
            ServeTarget::All => ("all", String::new()),
            ServeTarget::Job(j) => ("job", label(j)),
            ServeTarget::Others { eligible } => ("others", label(&eligible.join(","))),
        };
        let _ = writeln!(o, "tessera_ds_serve_target{{ds=\"{ds}\",kind=\"{kind}\",job=\"{job}\"}} 1");
        head(&mut o, "tessera_ds_serve_fallback", "gauge", "1 while fallen back to work-conserving service.");
        let _ = writeln!(o, "tessera_ds_serve_fallback{{ds=\"{ds}\"}} {}", u8::from(serve.fallen_back));
        head(&mut o, "tessera_ds_serve_fallbacks_total", "counter", "Fallbacks since start.");
        let _ = writeln!(o, "tessera_ds_serve_fallbacks_total{{ds=\"{ds}\"}} {}", serve.fallbacks);
        head(&mut o, "tessera_ds_device_busy_seconds_total", "counter", "Time with a request in service.");
        let _ = writeln!(o, "tessera_ds_device_busy_seconds_total{{ds=\"{ds}\"}} {}", self.scheduler.busy_seconds());
        if let Some(t) = &self.trace {
            head(&mut o, "tessera_ds_trace_dropped_total", "counter", "Trace lines dropped (writer behind).");
            let _ = writeln!(o, "tessera_ds_trace_dropped_total{{ds=\"{ds}\"}} {}", t.dropped());
        }
        o
    }
}

/// Serves `GET /metrics` on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, metrics: Metrics) {
    loop {
        let (conn, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            if let Err(e) = tokio::time::timeout(Duration::from_secs(10), answer(conn, &m)).await {
                tracing::debug!(%peer, "metrics request timed out: {e}");
            }
        });
    }
}

async fn answer(mut conn: TcpStream, m: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 16 * 1024 {
            break;
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => ("200 OK", m.render()),
        ("GET", _) => ("404 Not Found", "not found; try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "only GET\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceModel;
    use crate::scheduler::Orchestrated;
    use tessera_proto::msg::ServeCommand;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_over_http() {
        let locality = Locality::new(3, DeviceModel::None, Duration::from_secs(5));
        let ctl = ServeControl::new(locality.clone(), Duration::from_secs(5));
        let scheduler = Scheduler::start(2, Orchestrated::new(ctl.clone()));
        let counters = Arc::new(Counters::new());
        counters.record_read("job\"1", 4096);
        locality.on_arrival("job\"1");
        locality.on_served("job\"1", 0, 4096, Duration::from_micros(10));
        locality.on_served("job\"1", 1 << 20, 4096, Duration::from_micros(10));
        ctl.apply(&ServeCommand { epoch: 4, target: ServeTarget::Job("job\"1".into()), slice_ms: 100, fallback_ms: 0 });
        scheduler.submit("job\"1", async { Ok(()) }).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 3).unwrap();
        store.write(1, 0, bytes::Bytes::from(vec![1u8; 1 << 20]), false).await.unwrap();
        store.read(1, 0, 10).await.unwrap();
        let m = Metrics { ds: 3, counters, locality, serve: ctl, scheduler, trace: None, store };
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(serve(l, m));
        let r = get(addr, "/metrics").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        let body = r.split("\r\n\r\n").nth(1).unwrap();
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
            "# TYPE tessera_ds_device_busy_seconds_total counter",
        ] {
            assert!(body.contains(want), "missing {want} in\n{body}");
        }
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }
}
