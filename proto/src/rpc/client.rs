//! The calling side of an RPC: client endpoints, [`RpcPeer`] (one server, reconnecting, one stream per
//! call) and the payload of a reply read as it arrives ([`ReplyStream`]).

use super::{
    bind_udp, certificate_refusal, endpoint_config, peer_certificate, tls_err, transport_config, Refusal, Tuning,
    CLOSE_REVOKED,
};
use crate::crl::CrlWatch;
use crate::error::{chain, ErrorCode, FsError, FsResult};
use crate::frame::{self, FrameError, MAX_PAYLOAD};
use crate::tls::{self, CertInfo, NodeIdentity};
use crate::types::Role;
use crate::wire;
use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::warn;

/// A client endpoint (ephemeral port) for connecting to servers.
pub fn client_endpoint(v6: bool) -> FsResult<quinn::Endpoint> {
    let bind = if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    };
    let socket = bind_udp(bind)?;
    let runtime = quinn::default_runtime().ok_or_else(|| FsError::io("no async runtime"))?;
    quinn::Endpoint::new(endpoint_config(None), None, socket, runtime)
        .map_err(|e| FsError::io(format!("client endpoint: {e}")))
}

/// Resolves `host:port` (one address).
pub fn resolve(addr: &str) -> FsResult<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| FsError::invalid(format!("address '{addr}': {e}")))?
        .next()
        .ok_or_else(|| FsError::invalid(format!("address '{addr}' resolves to nothing")))
}

/// A connection to one server that reconnects when the server went away, with one call per stream.
pub struct RpcPeer {
    endpoint: quinn::Endpoint,
    /// Host name re-resolved at every (re)connect (a restarted container may have a new address).
    host: Option<String>,
    addr: std::sync::Mutex<SocketAddr>,
    role: Role,
    crypto: Arc<quinn::crypto::rustls::QuicClientConfig>,
    /// The revocation list the server's certificate is checked against, also while connected.
    crl: Arc<CrlWatch>,
    /// The last connection was refused over a certificate (either side's): not worth retrying.
    refused: std::sync::atomic::AtomicBool,
    tuning: Tuning,
    link: tokio::sync::Mutex<Link>,
}

/// The connection to a server and the last failed attempt to make one, under one lock: connecting is
/// serialised by it.
#[derive(Default)]
struct Link {
    conn: Option<quinn::Connection>,
    /// The server's certificate on `conn`, and the revocation list's generation it was checked with.
    server: Option<(CertInfo, u64)>,
    /// The last connection attempt's failure and when it ended (see [`RECONNECT_HOLDOFF`]).
    failed: Option<(Instant, FsError)>,
}

/// After a connection attempt failed, calls for this long fail at once with its error. Calls queue on
/// the connection lock, so without it every call in flight to a dead server waited for a handshake
/// timeout of its own, one after the other: a mount's writes to a killed data server failed after
/// 105 s (issue 18), not after one timeout.
pub const RECONNECT_HOLDOFF: Duration = Duration::from_secs(1);

impl RpcPeer {
    /// A peer for the server of `role` at `addr`; nothing is sent until the first call.
    pub fn new(
        endpoint: quinn::Endpoint,
        id: &NodeIdentity,
        role: Role,
        addr: SocketAddr,
        tuning: Tuning,
    ) -> FsResult<RpcPeer> {
        let crypto =
            quinn::crypto::rustls::QuicClientConfig::try_from(id.client_config().map_err(tls_err)?).map_err(tls_err)?;
        Ok(RpcPeer {
            endpoint,
            host: None,
            addr: std::sync::Mutex::new(addr),
            role,
            crypto: Arc::new(crypto),
            crl: id.crl.clone(),
            refused: Default::default(),
            tuning,
            link: tokio::sync::Mutex::new(Link::default()),
        })
    }

    /// A peer for `host:port`, resolved when connecting (and again at every reconnect), so a server
    /// that is not resolvable yet, or comes back at another address, is found when it is there.
    pub fn to_host(
        endpoint: quinn::Endpoint,
        id: &NodeIdentity,
        role: Role,
        host_port: &str,
        tuning: Tuning,
    ) -> FsResult<RpcPeer> {
        let unresolved = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
        let mut peer = RpcPeer::new(endpoint, id, role, unresolved, tuning)?;
        match host_port.parse::<SocketAddr>() {
            Ok(a) => peer.addr = std::sync::Mutex::new(a),
            Err(_) => peer.host = Some(host_port.to_string()),
        }
        Ok(peer)
    }

    /// The server's address (the last one resolved, for a host name).
    /// How long one call may take before it fails.
    pub fn call_timeout(&self) -> std::time::Duration {
        self.tuning.call_timeout
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr.lock().map(|a| *a).unwrap_or_else(|p| *p.into_inner())
    }

    fn target(&self) -> String {
        match &self.host {
            Some(h) => h.clone(),
            None => self.addr().to_string(),
        }
    }

    /// The live connection, connecting (again) if there is none — unless the last attempt failed less
    /// than [`RECONNECT_HOLDOFF`] ago: then its error, at once.
    pub async fn connection(&self) -> FsResult<quinn::Connection> {
        let mut link = self.link.lock().await;
        self.drop_if_revoked(&mut link);
        if let Some(c) = &link.conn {
            if c.close_reason().is_none() {
                return Ok(c.clone());
            }
            // Lost (the server went silent for the idle timeout, or reset it): one new attempt, under
            // the lock, so the calls queued behind this one wait for its outcome instead of each trying
            // a handshake. A server that is back by now is simply used: failing this call without trying
            // (as before) gave an application an error from a server that was up again (an unmirrored
            // file read 2 s after its server's restart, results/mirror).
            link.conn = None;
            link.server = None;
        }
        if let Some((at, e)) = link.failed.as_ref().filter(|(at, _)| at.elapsed() < RECONNECT_HOLDOFF) {
            let mut e = e.clone();
            e.detail = format!("{} ({:.1} s ago)", e.detail, at.elapsed().as_secs_f64());
            return Err(e);
        }
        let generation = self.crl.generation();
        let r = self.connect().await;
        *link = match &r {
            Ok(conn) => {
                Link { conn: Some(conn.clone()), server: peer_certificate(conn).map(|c| (c, generation)), failed: None }
            }
            Err(e) => Link { conn: None, server: None, failed: Some((Instant::now(), e.clone())) },
        };
        r
    }

    /// Closes the connection if a revocation list taken into use since it was made revokes the
    /// server's certificate (the next attempt is then refused at the handshake, saying so).
    fn drop_if_revoked(&self, link: &mut Link) {
        let Some((cert, checked)) = link.server.as_mut() else { return };
        let generation = self.crl.generation();
        if generation == *checked {
            return;
        }
        *checked = generation;
        let list = self.crl.snapshot();
        if !list.revoked.contains(&cert.serial) {
            return;
        }
        warn!(
            "{} {}: closing the connection to {}: certificate revoked (revocation list number {})",
            self.role,
            self.target(),
            cert.who(),
            list.number()
        );
        if let Some(c) = link.conn.take() {
            c.close(CLOSE_REVOKED.into(), b"server certificate revoked");
        }
        link.server = None;
    }

    /// One connection attempt, at most [`Tuning::connect_timeout`] (and the call timeout) long.
    async fn connect(&self) -> FsResult<quinn::Connection> {
        let addr = match &self.host {
            Some(h) => {
                let found = tokio::net::lookup_host(h.as_str())
                    .await
                    .map_err(|e| FsError::unavailable(format!("{} {h}: cannot resolve: {e}", self.role)))?
                    .next()
                    .ok_or_else(|| FsError::unavailable(format!("{} {h}: resolves to nothing", self.role)))?;
                if let Ok(mut a) = self.addr.lock() {
                    *a = found;
                }
                found
            }
            None => self.addr(),
        };
        let mut cc = quinn::ClientConfig::new(self.crypto.clone());
        cc.transport_config(Arc::new(transport_config(&self.tuning, addr.ip().is_loopback())));
        let connecting = self
            .endpoint
            .connect_with(cc, addr, &tls::server_name(self.role))
            .map_err(|e| FsError::unavailable(format!("{} {}: {e}", self.role, self.target())))?;
        let limit = self.tuning.connect_timeout.min(self.tuning.call_timeout);
        tokio::time::timeout(limit, connecting)
            .await
            .map_err(|_| {
                FsError::new(
                    ErrorCode::Unavailable,
                    format!("{} {}: no answer to a connection attempt within {limit:?}", self.role, self.target()),
                )
            })?
            .map_err(|e| self.connection_err(&e))
    }

    /// A lost or refused connection in words; a certificate refused by either side says whose and why.
    fn connection_err(&self, e: &quinn::ConnectionError) -> FsError {
        let (role, target) = (self.role, self.target());
        let refusal = certificate_refusal(e);
        self.refused.store(refusal.is_some(), std::sync::atomic::Ordering::Relaxed);
        match refusal {
            Some(Refusal::OfPeer(why)) => {
                FsError::unavailable(format!("{role} {target}: its certificate is refused: {why}"))
            }
            Some(Refusal::OfOurs(why)) => {
                FsError::unavailable(format!("{role} {target} refused this node's certificate: {why}"))
            }
            None => FsError::unavailable(format!("{role} {target}: {e}")),
        }
    }

    /// Sends `req` and returns the reply's header as soon as it arrives, with its payload still to be
    /// read from the returned stream (a forwarding node passes it on chunk by chunk). No retry.
    pub async fn call_streamed<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> FsResult<(Rep, ReplyStream)> {
        let fut = async {
            let conn = self.connection().await?;
            let (resp, recv, len) = self.exchange::<_, Rep>(&conn, req, payload).await?;
            Ok(resp.map(|r| (r, ReplyStream { recv, left: len })))
        };
        tokio::time::timeout(self.tuning.call_timeout, fut).await.unwrap_or_else(|_| Err(self.no_reply()))?
    }

    /// Sends one request on a new stream of `conn` and reads the reply's header: the server's answer,
    /// the stream and the length of the payload still to read from it.
    async fn exchange<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        conn: &quinn::Connection,
        req: &Req,
        payload: Bytes,
    ) -> FsResult<(FsResult<Rep>, quinn::RecvStream, usize)> {
        let exchange = async {
            let (mut send, mut recv) = conn.open_bi().await.map_err(|e| self.connection_err(&e))?;
            frame::write_frame(&mut send, req, payload).await.map_err(|e| self.frame_err(e))?;
            let _ = send.finish();
            let (header, len) = frame::read_head(&mut recv, MAX_PAYLOAD).await.map_err(|e| self.frame_err(e))?;
            let resp: FsResult<Rep> = wire::decode(&header).map_err(|e| self.frame_err(FrameError::Decode(e)))?;
            Ok((resp, recv, len))
        };
        // With TLS 1.3 the client's handshake ends before the server has checked its certificate: a
        // refusal closes the connection after it was made, and shows here.
        exchange.await.map_err(|e| match conn.close_reason() {
            Some(reason) if certificate_refusal(&reason).is_some() => self.connection_err(&reason),
            _ => e,
        })
    }

    fn no_reply(&self) -> FsError {
        FsError::new(
            ErrorCode::TimedOut,
            format!("{} {}: no reply within {:?}", self.role, self.target(), self.tuning.call_timeout),
        )
    }

    /// Whether a connection is up right now (made and not closed: its keep-alives are answered).
    pub async fn is_connected(&self) -> bool {
        self.link.lock().await.conn.as_ref().is_some_and(|c| c.close_reason().is_none())
    }

    /// Sends `req` (+ raw `payload`) and returns the decoded reply and its payload.
    /// Transport failures become `Unavailable`/`Io`/`TimedOut` errors; the server's own error is passed on.
    pub async fn call<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> FsResult<(Rep, Bytes)> {
        self.call_chunked(req, payload).await.map(|(r, chunks)| (r, frame::concat(chunks)))
    }

    /// [`RpcPeer::call`] with the reply's payload left in the chunks it arrived in
    /// ([`frame::read_payload_chunked`]).
    pub async fn call_chunked<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> FsResult<(Rep, Vec<Bytes>)> {
        self.attempt(req, payload).await?
    }

    /// [`RpcPeer::call`] for a request that may safely be sent twice: a transport failure (the server
    /// died or restarted, the connection was lost) is retried on a new connection, with back-off, for
    /// up to `patience`. The server's own errors are never retried.
    pub async fn call_retrying<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
        patience: Duration,
    ) -> FsResult<(Rep, Bytes)> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.attempt(req, payload.clone()).await {
                Ok(reply) => return reply.map(|(r, chunks)| (r, frame::concat(chunks))),
                Err(e) if tokio::time::Instant::now() + pause >= deadline => return Err(e),
                // A certificate refused is refused again until someone acts (renew, restart).
                Err(e) if self.refused.load(std::sync::atomic::Ordering::Relaxed) => return Err(e),
                Err(e) => {
                    tracing::debug!("{} {}: {e}; retrying", self.role, self.target());
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One try: `Err` is a transport failure; `Ok` holds the server's answer, success or error. (A lost
    /// connection is replaced by the next call: [`RpcPeer::connection`] checks it is still open.)
    async fn attempt<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> Result<FsResult<(Rep, Vec<Bytes>)>, FsError> {
        self.try_call_chunked(req, payload).await.map_err(|f| f.error)
    }

    /// One try that tells a transport failure (`Err`, saying whether the request may have reached
    /// the server) from the server's answer (`Ok`, success or error): for callers that fail over to
    /// another server.
    pub async fn try_call_chunked<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> Result<FsResult<(Rep, Vec<Bytes>)>, TransportFailure> {
        let conn = match tokio::time::timeout(self.tuning.call_timeout, self.connection()).await {
            Ok(Ok(c)) => c,
            Ok(Err(error)) => return Err(TransportFailure { sent: false, error, reset: false }),
            Err(_) => {
                let error =
                    FsError::new(ErrorCode::TimedOut, format!("{} {}: connect timed out", self.role, self.target()));
                return Err(TransportFailure { sent: false, error, reset: false });
            }
        };
        let fut = async {
            let (resp, mut recv, len) = self.exchange::<_, Rep>(&conn, req, payload).await?;
            let chunks = frame::read_payload_chunked(&mut recv, len).await.map_err(|e| self.frame_err(e))?;
            Ok(resp.map(|r| (r, chunks)))
        };
        let r = tokio::time::timeout(self.tuning.call_timeout, fut).await.unwrap_or_else(|_| Err(self.no_reply()));
        // A stateless reset: the server's process is new since this connection was made.
        let reset = matches!(conn.close_reason(), Some(quinn::ConnectionError::Reset));
        r.map_err(|error| TransportFailure { sent: true, error, reset })
    }

    /// [`RpcPeer::call_chunked`] for a request that may safely be sent twice (data requests: the same
    /// bytes to the same offsets, reads): when the server turns out to have restarted since the
    /// connection was made (its new process answers the old connection with a stateless reset), once
    /// more on a new connection, so a restart the caller slept through is not taken for a failure.
    pub async fn call_chunked_resent<Req: Serialize, Rep: DeserializeOwned>(
        &self,
        req: &Req,
        payload: Bytes,
    ) -> FsResult<(Rep, Vec<Bytes>)> {
        match self.try_call_chunked(req, payload.clone()).await {
            Ok(r) => r,
            Err(f) if f.reset => {
                tracing::debug!("{} {}: {}; the server restarted: once more", self.role, self.target(), f.error);
                self.call_chunked(req, payload).await
            }
            Err(f) => Err(f.error),
        }
    }

    fn frame_err(&self, e: FrameError) -> FsError {
        match e {
            FrameError::Io(_) | FrameError::Closed | FrameError::Truncated(_) => {
                FsError::new(ErrorCode::Io, format!("{} {}: {}", self.role, self.target(), chain(&e)))
            }
            _ => FsError::protocol(format!("{} {}: {}", self.role, self.target(), chain(&e))),
        }
    }
}

/// A call that did not get the server's answer.
#[derive(Debug)]
pub struct TransportFailure {
    /// The request may have reached the server (false: no connection was made, it was not sent).
    pub sent: bool,
    pub error: FsError,
    /// The connection was reset by the server: a new process of it is up (it restarted).
    pub reset: bool,
}

/// The payload of a reply read as it arrives ([`RpcPeer::call_streamed`]).
pub struct ReplyStream {
    recv: quinn::RecvStream,
    left: usize,
}

impl ReplyStream {
    /// Bytes still to come.
    pub fn left(&self) -> usize {
        self.left
    }

    /// The next chunk; `None` once all of it arrived. A stream that ends early is an error.
    pub async fn next(&mut self) -> Option<FsResult<Bytes>> {
        if self.left == 0 {
            return None;
        }
        match self.recv.read_chunk(self.left, true).await {
            Ok(Some(c)) => {
                self.left -= c.bytes.len();
                Some(Ok(c.bytes))
            }
            Ok(None) => Some(Err(FsError::io(format!("reply ended {} bytes short", self.left)))),
            Err(e) => Some(Err(FsError::io(format!("reading a reply: {e}")))),
        }
    }
}
