//! Prometheus metrics of the MDS over plain HTTP (`GET /metrics`, text format 0.0.4): requests by
//! type, and what the orchestrator sees and decides. A tiny responder on a tokio `TcpListener`.

use crate::orchestrator::Orchestrator;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::msg::{MdsRequest, OrchestratorMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

/// Request type names, in [`kind`] order.
pub const KINDS: [&str; 34] = [
    "Ping",
    "Lookup",
    "LookupPath",
    "GetAttr",
    "SetAttr",
    "Create",
    "Mkdir",
    "Symlink",
    "Readlink",
    "Link",
    "Unlink",
    "Rmdir",
    "Rename",
    "ReadDir",
    "Open",
    "Close",
    "ReportWrite",
    "StatFs",
    "Access",
    "GetXattr",
    "SetXattr",
    "ListXattr",
    "RemoveXattr",
    "GetLayout",
    "SetLayout",
    "DsReport",
    "ClusterStatus",
    "LocalityReport",
    "SetOrchestratorMode",
    "OrchestratorStatus",
    "CreateOpen",
    "Sync",
    "LeaseDir",
    "CreateBatch",
];

/// Index of a request's type in [`KINDS`].
pub fn kind(req: &MdsRequest) -> usize {
    use MdsRequest as Q;
    match req {
        Q::Ping => 0,
        Q::Lookup { .. } => 1,
        Q::LookupPath { .. } => 2,
        Q::GetAttr { .. } => 3,
        Q::SetAttr { .. } => 4,
        Q::Create { .. } => 5,
        Q::Mkdir { .. } => 6,
        Q::Symlink { .. } => 7,
        Q::Readlink { .. } => 8,
        Q::Link { .. } => 9,
        Q::Unlink { .. } => 10,
        Q::Rmdir { .. } => 11,
        Q::Rename { .. } => 12,
        Q::ReadDir { .. } => 13,
        Q::Open { .. } => 14,
        Q::Close { .. } => 15,
        Q::ReportWrite { .. } => 16,
        Q::StatFs => 17,
        Q::Access { .. } => 18,
        Q::GetXattr { .. } => 19,
        Q::SetXattr { .. } => 20,
        Q::ListXattr { .. } => 21,
        Q::RemoveXattr { .. } => 22,
        Q::GetLayout { .. } => 23,
        Q::SetLayout { .. } => 24,
        Q::DsReport(_) => 25,
        Q::ClusterStatus => 26,
        Q::LocalityReport(_) => 27,
        Q::SetOrchestratorMode { .. } => 28,
        Q::OrchestratorStatus => 29,
        Q::CreateOpen { .. } => 30,
        Q::Sync => 31,
        Q::LeaseDir { .. } => 32,
        Q::CreateBatch { .. } => 33,
    }
}

/// Namespace counters: requests and failed requests by type.
pub struct RequestCounters {
    requests: [AtomicU64; KINDS.len()],
    errors: [AtomicU64; KINDS.len()],
}

impl Default for RequestCounters {
    fn default() -> Self {
        RequestCounters {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl RequestCounters {
    pub fn count(&self, kind: usize, ok: bool) {
        if let Some(c) = self.requests.get(kind) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if !ok {
            if let Some(c) = self.errors.get(kind) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn get(&self, kind: usize) -> (u64, u64) {
        (
            self.requests.get(kind).map_or(0, |c| c.load(Ordering::Relaxed)),
            self.errors.get(kind).map_or(0, |c| c.load(Ordering::Relaxed)),
        )
    }
}

/// A label value escaped for the text format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The whole metrics page.
pub fn render(orch: &Orchestrator, counters: &RequestCounters) -> String {
    let mut o = String::new();
    head(&mut o, "tessera_mds_requests_total", "counter", "Metadata requests served, by type.");
    for (i, name) in KINDS.iter().enumerate() {
        let _ = writeln!(o, "tessera_mds_requests_total{{type=\"{name}\"}} {}", counters.get(i).0);
    }
    head(&mut o, "tessera_mds_request_errors_total", "counter", "Metadata requests answered with an error, by type.");
    for (i, name) in KINDS.iter().enumerate() {
        let _ = writeln!(o, "tessera_mds_request_errors_total{{type=\"{name}\"}} {}", counters.get(i).1);
    }

    let st = orch.status(Instant::now());
    head(&mut o, "tessera_orchestrator_mode", "gauge", "1 for the orchestrator's current mode.");
    for m in [OrchestratorMode::Off, OrchestratorMode::Even, OrchestratorMode::IOrchestrator] {
        let _ = writeln!(o, "tessera_orchestrator_mode{{mode=\"{m}\"}} {}", u8::from(st.mode == m));
    }
    head(&mut o, "tessera_orchestrator_window_seconds", "gauge", "Scheduling window length.");
    let _ = writeln!(o, "tessera_orchestrator_window_seconds {}", f64::from(st.window_ms) / 1e3);
    head(&mut o, "tessera_orchestrator_windows_total", "counter", "Scheduling windows run.");
    let _ = writeln!(o, "tessera_orchestrator_windows_total {}", st.windows_run);
    head(
        &mut o,
        "tessera_orchestrator_switch_skew_seconds",
        "gauge",
        "Spread of the data servers' switch times (last, median of recent).",
    );
    if let Some(s) = st.last_switch_skew_us {
        let _ = writeln!(o, "tessera_orchestrator_switch_skew_seconds{{stat=\"last\"}} {}", s as f64 / 1e6);
    }
    if let Some(s) = st.median_switch_skew_us {
        let _ = writeln!(o, "tessera_orchestrator_switch_skew_seconds{{stat=\"median\"}} {}", s as f64 / 1e6);
    }
    head(
        &mut o,
        "tessera_orchestrator_plan_slice_seconds",
        "gauge",
        "Slice of each scheduling object in the current window.",
    );
    for s in &st.plan {
        let _ =
            writeln!(o, "tessera_orchestrator_plan_slice_seconds{{object=\"{}\"}} {}", esc(&s.label), s.slice_ms / 1e3);
    }
    head(
        &mut o,
        "tessera_orchestrator_server_sl_bytes",
        "gauge",
        "SL_i: EWMA address gap between consecutive requests at a data server.",
    );
    for (ds, sl, _, _) in &st.servers {
        let _ = writeln!(o, "tessera_orchestrator_server_sl_bytes{{ds=\"{ds}\"}} {sl}");
    }
    head(
        &mut o,
        "tessera_orchestrator_server_seek_seconds",
        "gauge",
        "SeekTime_i: expected cost of leaving to serve others.",
    );
    for (ds, _, seek, _) in &st.servers {
        let _ = writeln!(o, "tessera_orchestrator_server_seek_seconds{{ds=\"{ds}\"}} {}", seek / 1e6);
    }
    head(
        &mut o,
        "tessera_orchestrator_server_report_age_seconds",
        "gauge",
        "Age of a data server's last locality report.",
    );
    for (ds, _, _, age) in &st.servers {
        let _ = writeln!(o, "tessera_orchestrator_server_report_age_seconds{{ds=\"{ds}\"}} {}", *age as f64 / 1e3);
    }
    head(&mut o, "tessera_orchestrator_job_eligible", "gauge", "1 if the program is eligible for dedicated service.");
    for j in &st.jobs {
        let _ = writeln!(o, "tessera_orchestrator_job_eligible{{job=\"{}\"}} {}", esc(&j.job), u8::from(j.eligible));
    }
    head(&mut o, "tessera_orchestrator_job_slice_share", "gauge", "Share of the window dedicated to the program.");
    for j in &st.jobs {
        let _ = writeln!(o, "tessera_orchestrator_job_slice_share{{job=\"{}\"}} {}", esc(&j.job), j.slice_share);
    }
    head(
        &mut o,
        "tessera_orchestrator_job_sl_bytes",
        "gauge",
        "SL_ij: EWMA address gap between consecutive requests of a program at a data server.",
    );
    for j in &st.jobs {
        for (ds, sl, _) in &j.servers {
            let _ = writeln!(o, "tessera_orchestrator_job_sl_bytes{{ds=\"{ds}\",job=\"{}\"}} {sl}", esc(&j.job));
        }
    }
    head(
        &mut o,
        "tessera_orchestrator_job_rd_seconds",
        "gauge",
        "RD_ij: EWMA reuse distance of a program at a data server under dedicated service.",
    );
    for j in &st.jobs {
        for (ds, _, rd) in &j.servers {
            if let Some(rd) = rd {
                let _ = writeln!(
                    o,
                    "tessera_orchestrator_job_rd_seconds{{ds=\"{ds}\",job=\"{}\"}} {}",
                    esc(&j.job),
                    rd / 1e6
                );
            }
        }
    }
    o
}

/// Binds the metrics endpoint.
pub async fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("metrics endpoint {addr}: {e}"))
}

/// Serves `GET /metrics` on `listener` until the task is aborted.
pub fn spawn(
    listener: TcpListener,
    orch: Arc<Orchestrator>,
    counters: Arc<RequestCounters>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    debug!("metrics accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (orch, counters) = (orch.clone(), counters.clone());
            tokio::spawn(async move {
                if let Err(e) = respond(stream, &orch, &counters).await {
                    debug!(%peer, "metrics request: {e}");
                }
            });
        }
    })
}

const MAX_HEAD: usize = 8192;

/// One request, one response, then the connection is closed.
async fn respond(mut s: TcpStream, orch: &Orchestrator, counters: &RequestCounters) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let read_head = async {
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_HEAD {
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(5), read_head)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head not received"))??;
    let line = String::from_utf8_lossy(buf.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render(orch, counters)),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", "not found: try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n".to_string()),
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        resp.extend_from_slice(body.as_bytes());
    }
    s.write_all(&resp).await?;
    s.shutdown().await
}

/// The address a listener ended up on (for logs).
pub fn local(l: &TcpListener) -> Option<SocketAddr> {
    l.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::Params;
    use tessera_proto::msg::{JobLocality, LocalityReport};

    async fn get(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_over_http() {
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
        let counters = Arc::new(RequestCounters::default());
        counters.count(kind(&MdsRequest::Ping), true);
        counters.count(kind(&MdsRequest::StatFs), false);
        let l = bind("127.0.0.1:0").await.unwrap();
        let addr = local(&l).unwrap();
        let task = spawn(l, orch, counters);

        let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        let body = r.split("\r\n\r\n").nth(1).unwrap();
        let len: usize = r.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().trim().parse().unwrap();
        assert_eq!(body.len(), len);
        for line in [
            "tessera_mds_requests_total{type=\"Ping\"} 1",
            "tessera_mds_request_errors_total{type=\"StatFs\"} 1",
            "tessera_orchestrator_mode{mode=\"even\"} 1",
            "tessera_orchestrator_mode{mode=\"off\"} 0",
            "tessera_orchestrator_windows_total 1",
            "tessera_orchestrator_switch_skew_seconds{stat=\"last\"} 0.00012",
            "tessera_orchestrator_job_eligible{job=\"seq\\\"1\"} 1",
            "tessera_orchestrator_job_eligible{job=\"rnd\"} 0",
            "tessera_orchestrator_job_slice_share{job=\"seq\\\"1\"} 0.5",
            "tessera_orchestrator_job_sl_bytes{ds=\"1\",job=\"rnd\"} 2000000000",
            "tessera_orchestrator_server_sl_bytes{ds=\"0\"} 2000000000",
            "tessera_orchestrator_server_seek_seconds{ds=\"1\"} 0.008",
        ] {
            assert!(body.lines().any(|l| l == line), "missing {line}\n{body}");
        }
        let r = get(addr, "GET /nope HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let r = get(addr, "POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        task.abort();
    }
}
