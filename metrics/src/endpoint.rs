//! The metrics endpoint: hyper's HTTP/1 server on a TCP listener, answering `GET /metrics` (and `HEAD`)
//! with the registry rendered at that moment; other paths get 404, other methods 405. One request per
//! connection, a bounded wait for the request head, and a clean stop with the server.

use crate::scrape::{render, CONTENT_TYPE};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE as CONTENT_TYPE_HEADER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::fmt::Display;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::debug;

/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last in all.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`Endpoint::shutdown`] waits for scrapes in progress.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A running metrics endpoint. [`Endpoint::shutdown`] stops it; dropping it stops it at once.
pub struct Endpoint {
    local: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Binds `addr` and serves `registry` there.
    pub async fn bind(addr: impl ToSocketAddrs + Display, registry: Registry) -> std::io::Result<Endpoint> {
        let context = |e: std::io::Error| std::io::Error::new(e.kind(), format!("metrics endpoint {addr}: {e}"));
        let listener = TcpListener::bind(&addr).await.map_err(context)?;
        let local = listener.local_addr().map_err(context)?;
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(serve(listener, Arc::new(registry), stopped));
        Ok(Endpoint { local, stop: Some(stop), task: Some(task) })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Stops accepting, and lets the scrapes in progress finish (for up to two seconds).
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn serve(listener: TcpListener, registry: Arc<Registry>, mut stopped: oneshot::Receiver<()>) {
    let mut http = http1::Builder::new();
    // One scrape per connection (scrapers that read to the end of the stream work too), and the header
    // names as the old responder wrote them.
    http.keep_alive(false).title_case_headers(true).timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT);
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut stopped => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                debug!("metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let registry = registry.clone();
        let service = service_fn(move |req| {
            let response = respond(&registry, &req);
            async move { Ok::<_, Infallible>(response) }
        });
        let conn = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECTION_TIMEOUT, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, "metrics request: {e}"),
                Err(_) => debug!(%peer, "metrics connection timed out"),
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        debug!("metrics endpoint: scrapes still running at shutdown");
    }
}

fn respond(registry: &Registry, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let text = |status, body: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *r.status_mut() = status;
        r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found: try /metrics\n");
    }
    match render(registry) {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
            r
        }
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be rendered\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::collector;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// One request as raw bytes, the whole response back (the endpoint closes the connection).
    async fn request(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out)).await.unwrap().unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_registry_over_http() {
        let mut registry = Registry::default();
        let jobs = Family::<[(&'static str, &'static str); 1], Counter>::default();
        registry.register("t_job_requests", "Requests by job", jobs.clone());
        jobs.get_or_create(&[("job", "a\"b\\c\nd")]).inc_by(3);
        registry.register_collector(collector(|s| s.gauge("t_depth", "Queue depth")?.sample(&[("kind", "x")], 0.5)));
        let ep = Endpoint::bind("127.0.0.1:0", registry).await.unwrap();
        let addr = ep.local_addr();

        // No `Connection: close`: the endpoint closes after one response anyway.
        let r = request(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.lines().any(|l| l == format!("Content-Type: {CONTENT_TYPE}")), "{head}");
        let len: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
        assert_eq!(body.len(), len);
        for line in [
            "# TYPE t_job_requests counter",
            "t_job_requests_total{job=\"a\\\"b\\\\c\\nd\"} 3",
            "t_depth{kind=\"x\"} 0.5",
            "# EOF",
        ] {
            assert!(body.lines().any(|l| l == line), "missing {line}\n{body}");
        }
        assert!(body.ends_with("# EOF\n"), "{body}");
        // The query string does not matter; the values are read at each scrape.
        jobs.get_or_create(&[("job", "a\"b\\c\nd")]).inc();
        let r = request(addr, "GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(r.contains("t_job_requests_total{job=\"a\\\"b\\\\c\\nd\"} 4\n"), "{r}");

        let r = request(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"), "{r}");
        let r = request(addr, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        let r = request(addr, "GET /metrics/x HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        let r = request(addr, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("Allow: GET, HEAD\r\n"), "{r}");

        ep.shutdown().await;
        assert!(TcpStream::connect(addr).await.is_err(), "still listening after shutdown");
    }

    #[tokio::test]
    async fn a_busy_address_is_an_error_naming_it() {
        let first = Endpoint::bind("127.0.0.1:0", Registry::default()).await.unwrap();
        let addr = first.local_addr();
        let e = Endpoint::bind(addr, Registry::default()).await.err().expect("second bind must fail");
        assert!(e.to_string().contains(&addr.to_string()), "{e}");
    }
}
