//! QUIC endpoints with mutual TLS, the RPC client ([`RpcPeer`]) and the server loop ([`serve`]).
//!
//! One call = one bidirectional stream: request frame, response frame. A server checks the peer's role
//! at connect, answers a malformed frame with a protocol error (or resets just that stream), and keeps
//! serving the connection's other streams.

use crate::crl::CrlWatch;
use crate::error::{ErrorCode, FsError, FsResult};
use crate::frame::{self, FrameError, MAX_PAYLOAD};
use crate::tls::{self, CertInfo, NodeIdentity};
use crate::types::Role;
use crate::wire;
use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// Transport tuning shared by servers and clients.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Initial UDP payload size; `0` = automatic (large on loopback, 1200 + discovery elsewhere).
    pub mtu: u16,
    pub idle_timeout: Duration,
    /// Longest connection attempt (handshake included) on the client side.
    pub connect_timeout: Duration,
    /// Per-call deadline on the client side.
    pub call_timeout: Duration,
    /// Let quinn batch datagrams with UDP segmentation offload (GSO).
    pub gso: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            mtu: 0,
            idle_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(60),
            gso: true,
        }
    }
}

/// UDP payload used on loopback (its MTU is 64 KiB): fewer packets, far less per-packet crypto and
/// syscall overhead.
const LOOPBACK_MTU: u16 = 65_000;
/// Largest datagram that quinn may batch with GSO (Ethernet MTU minus IP/UDP headers).
const STANDARD_MTU: u16 = 1_472;

fn transport_config(t: &Tuning, loopback: bool) -> quinn::TransportConfig {
    let mut c = quinn::TransportConfig::default();
    c.max_concurrent_bidi_streams(4096u32.into());
    c.max_concurrent_uni_streams(0u32.into());
    c.stream_receive_window((32u32 << 20).into());
    c.receive_window((256u32 << 20).into());
    c.send_window(256 << 20);
    c.max_idle_timeout(t.idle_timeout.try_into().ok());
    c.keep_alive_interval(Some(t.idle_timeout / 3));
    let mtu = if t.mtu != 0 {
        t.mtu
    } else if loopback {
        LOOPBACK_MTU
    } else {
        1200
    };
    c.initial_mtu(mtu.max(1200));
    // Measured (proto/tests/rpc_loopback.rs, latency_probe): GSO batches of datagrams above ~1500 bytes
    // lose hundreds of packets per thousand on loopback (each loss costs a probe timeout, ~25 ms), while
    // the same datagrams sent one by one lose none. So GSO only with standard-size datagrams.
    let jumbo = mtu > STANDARD_MTU;
    c.enable_segmentation_offload(t.gso && !jumbo);
    if loopback || t.mtu != 0 {
        c.mtu_discovery_config(None);
    } else {
        // Discovery stays within standard Ethernet sizes, where GSO is safe.
        c.mtu_discovery_config(Some(quinn::MtuDiscoveryConfig::default()));
    }
    // quinn's default initial window (~14.7 KB) is smaller than one loopback-sized packet, which would
    // block the very first packet; start with ten packets' worth, as RFC 9002 intends.
    let mut cc = quinn::congestion::CubicConfig::default();
    cc.initial_window(10 * u64::from(mtu.max(1200)));
    c.congestion_controller_factory(Arc::new(cc));
    c
}

fn tls_err(e: impl std::fmt::Display) -> FsError {
    FsError::new(ErrorCode::Invalid, format!("TLS setup: {e}"))
}

/// A server endpoint bound to `bind`.
pub fn server_endpoint(bind: SocketAddr, id: &NodeIdentity, t: &Tuning) -> FsResult<quinn::Endpoint> {
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(id.server_config().map_err(tls_err)?).map_err(tls_err)?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport_config(t, bind.ip().is_loopback())));
    let socket = bind_udp(bind)?;
    let runtime = quinn::default_runtime().ok_or_else(|| FsError::io("no async runtime"))?;
    quinn::Endpoint::new(endpoint_config(), Some(sc), socket, runtime)
        .map_err(|e| FsError::io(format!("bind {bind}: {e}")))
}

/// A client endpoint (ephemeral port) for connecting to servers.
pub fn client_endpoint(v6: bool) -> FsResult<quinn::Endpoint> {
    let bind = if v6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0)
    };
    let socket = bind_udp(bind)?;
    let runtime = quinn::default_runtime().ok_or_else(|| FsError::io("no async runtime"))?;
    quinn::Endpoint::new(endpoint_config(), None, socket, runtime)
        .map_err(|e| FsError::io(format!("client endpoint: {e}")))
}

/// Endpoint settings: the largest UDP payload we accept is advertised to peers, and quinn's default
/// (1472) would cap the loopback MTU above no matter what the transport config asks for.
fn endpoint_config() -> quinn::EndpointConfig {
    let mut c = quinn::EndpointConfig::default();
    let _ = c.max_udp_payload_size(65_527);
    c
}

/// Kernel buffer asked for on every UDP socket. A client reading ahead has more in flight than 8 MiB
/// (4 MiB read-ahead units from every server at once): with 8 MiB, loopback dropped 300-400 datagrams of
/// 64 KiB per 512 MiB read (Udp RcvbufErrors), and each loss costs QUIC a retransmission, a smaller
/// congestion window and CPU on both ends (the slow mount reads of results/core). 64 MiB dropped none.
pub const UDP_BUFFER: usize = 64 << 20;

/// UDP socket with large kernel buffers (bursts of 64 KiB datagrams would otherwise be dropped).
fn bind_udp(addr: SocketAddr) -> FsResult<std::net::UdpSocket> {
    let sock = std::net::UdpSocket::bind(addr).map_err(|e| FsError::io(format!("bind {addr}: {e}")))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let size = UDP_BUFFER as libc::c_int;
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF, libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: valid fd, pointer to a c_int of the given length. Failure (e.g. not root for *FORCE) is fine.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &size as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
    }
    let got = receive_buffer(fd);
    if got < UDP_BUFFER {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "UDP receive buffer is {} KiB, not the {} KiB asked for: bursts may be dropped and retransmitted; \
                 run as root or raise net.core.rmem_max",
                got >> 10,
                UDP_BUFFER >> 10
            )
        });
    }
    Ok(sock)
}

/// The socket's receive buffer as the kernel grants it (it reports twice the usable size).
fn receive_buffer(fd: std::os::fd::RawFd) -> usize {
    let mut val: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid fd, pointers to a c_int and its length.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &mut val as *mut _ as *mut libc::c_void, &mut len)
    };
    if rc != 0 {
        return 0;
    }
    usize::try_from(val).unwrap_or(0) / 2
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
            match c.close_reason() {
                None => return Ok(c.clone()),
                // The server went silent for the idle timeout (killed, stopped, unreachable): as good as
                // a failed attempt, so the calls queued behind this one do not each try a handshake.
                Some(quinn::ConnectionError::TimedOut) => {
                    let e = FsError::unavailable(format!(
                        "{} {}: silent for {:?}, connection lost",
                        self.role,
                        self.target(),
                        self.tuning.idle_timeout
                    ));
                    *link = Link { conn: None, server: None, failed: Some((Instant::now(), e.clone())) };
                    return Err(e);
                }
                Some(_) => {}
            }
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
            Ok(Err(error)) => return Err(TransportFailure { sent: false, error }),
            Err(_) => {
                let error =
                    FsError::new(ErrorCode::TimedOut, format!("{} {}: connect timed out", self.role, self.target()));
                return Err(TransportFailure { sent: false, error });
            }
        };
        let fut = async {
            let (resp, mut recv, len) = self.exchange::<_, Rep>(&conn, req, payload).await?;
            let chunks = frame::read_payload_chunked(&mut recv, len).await.map_err(|e| self.frame_err(e))?;
            Ok(resp.map(|r| (r, chunks)))
        };
        let r = tokio::time::timeout(self.tuning.call_timeout, fut).await.unwrap_or_else(|_| Err(self.no_reply()));
        r.map_err(|error| TransportFailure { sent: true, error })
    }

    fn frame_err(&self, e: FrameError) -> FsError {
        match e {
            FrameError::Io(_) | FrameError::Closed | FrameError::Truncated(_) => {
                FsError::new(ErrorCode::Io, format!("{} {}: {e}", self.role, self.target()))
            }
            _ => FsError::protocol(format!("{} {}: {e}", self.role, self.target())),
        }
    }
}

/// A TLS handshake that failed over a certificate, with the reason in words.
enum Refusal {
    /// This side refused the peer's certificate.
    OfPeer(String),
    /// The peer refused this side's certificate.
    OfOurs(String),
}

/// QUIC carries a TLS alert as error code 0x100 + alert, with rustls's error text as the reason.
fn certificate_refusal(e: &quinn::ConnectionError) -> Option<Refusal> {
    let alert = |code: quinn::TransportErrorCode| {
        let c = u64::from(code);
        (0x100..0x200).contains(&c).then_some((c - 0x100) as u8)
    };
    match e {
        quinn::ConnectionError::TransportError(t) => {
            alert(t.code).filter(|a| is_certificate_alert(*a)).map(|a| Refusal::OfPeer(explain_tls(a, &t.reason)))
        }
        quinn::ConnectionError::ConnectionClosed(c) => alert(c.error_code)
            .filter(|a| is_certificate_alert(*a))
            .map(|a| Refusal::OfOurs(explain_tls(a, &String::from_utf8_lossy(&c.reason)))),
        // Closed by a server that took a list revoking this node's certificate into use.
        quinn::ConnectionError::ApplicationClosed(c) if c.error_code == CLOSE_REVOKED.into() => {
            Some(Refusal::OfOurs("certificate revoked".into()))
        }
        _ => None,
    }
}

/// bad_certificate (42) to unknown_ca (48), and certificate_required (116).
fn is_certificate_alert(alert: u8) -> bool {
    (42..=48).contains(&alert) || alert == 116
}

/// rustls's text for a refused certificate, with times as dates: `certificate revoked`, `certificate
/// expired at 2026-01-02 03:04:05 UTC`, `certificate not valid before ... (is a clock wrong?)`.
fn explain_tls(alert: u8, reason: &str) -> String {
    let reason = reason.trim_start_matches("invalid peer certificate: ");
    let time_after = |marker: &str| {
        let rest = &reason[reason.find(marker)? + marker.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<i64>().ok().map(crate::types::format_utc)
    };
    if alert == 44 {
        return "certificate revoked".into();
    }
    if let Some(t) = time_after("not valid after ") {
        return format!("certificate expired at {t} UTC");
    }
    if let Some(t) = time_after("not valid before ") {
        return format!("certificate not valid before {t} UTC (is a clock wrong?)");
    }
    if reason.is_empty() {
        return format!("TLS alert {alert}");
    }
    reason.to_string()
}

/// A call that did not get the server's answer.
#[derive(Debug)]
pub struct TransportFailure {
    /// The request may have reached the server (false: no connection was made, it was not sent).
    pub sent: bool,
    pub error: FsError,
}

/// Who is on the other end of a server connection, from its certificate.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    pub role: Role,
    pub name: String,
    pub addr: SocketAddr,
    /// This connection, unique in the server process (a reconnecting peer gets a new one).
    pub conn: u64,
}

static NEXT_CONN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A service served over [`serve`]. Replies are `FsResult<Self::Reply>` on the wire.
pub trait Service: Send + Sync + 'static {
    type Request: DeserializeOwned + Send + 'static;
    type Reply: Serialize + Send + 'static;

    /// Roles allowed to connect at all.
    fn accepts(&self, role: Role) -> bool;

    /// Largest request payload accepted.
    fn max_payload(&self) -> usize {
        MAX_PAYLOAD
    }

    fn handle(
        &self,
        peer: Arc<PeerInfo>,
        req: Self::Request,
        payload: Bytes,
    ) -> impl Future<Output = (FsResult<Self::Reply>, Bytes)> + Send;

    /// Called when a connected peer's certificate is revoked, before its connection is closed.
    fn peer_revoked(&self, _peer: &PeerInfo) {}

    /// [`Service::handle`] for services that may answer with a payload still arriving (a forwarding
    /// node passing a data server's reply on as it comes). The default answers with `handle`'s.
    fn handle_streamed(
        &self,
        peer: Arc<PeerInfo>,
        req: Self::Request,
        payload: Bytes,
    ) -> impl Future<Output = (FsResult<Self::Reply>, Payload)> + Send {
        async move {
            let (reply, payload) = self.handle(peer, req, payload).await;
            (reply, Payload::Whole(payload))
        }
    }
}

/// A reply's payload: whole, or `len` bytes still arriving as chunks.
pub enum Payload {
    Whole(Bytes),
    Streamed { len: usize, chunks: tokio::sync::mpsc::Receiver<Bytes> },
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

/// Serves `service` on `endpoint` until the endpoint is closed. `crl` is the revocation list of the
/// identity the endpoint was made with: a peer whose certificate it revokes loses its connections as
/// soon as the list is in force.
pub async fn serve<S: Service>(endpoint: quinn::Endpoint, service: Arc<S>, crl: Arc<CrlWatch>) {
    info!("{}", crl.describe());
    crl.keep_looking();
    while let Some(incoming) = endpoint.accept().await {
        let service = service.clone();
        let crl = crl.clone();
        tokio::spawn(async move {
            let addr = incoming.remote_address();
            match incoming.await {
                Ok(conn) => serve_connection(conn, service, crl).await,
                // The verifier has logged who and why; this says where from.
                Err(e) => match certificate_refusal(&e) {
                    Some(Refusal::OfPeer(why)) => info!(%addr, "connection refused: {why}"),
                    Some(Refusal::OfOurs(why)) => info!(%addr, "peer refused this server's certificate: {why}"),
                    None => debug!(%addr, "handshake failed: {e}"),
                },
            }
        });
    }
}

/// What the peer's certificate says (the handshake checked it).
fn peer_certificate(conn: &quinn::Connection) -> Option<CertInfo> {
    conn.peer_identity()
        .and_then(|any| any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
        .and_then(|chain| chain.first().and_then(|c| CertInfo::parse(c)))
}

/// Application close code of a connection whose peer's certificate was revoked while it was up.
pub const CLOSE_REVOKED: u32 = 7;

async fn serve_connection<S: Service>(conn: quinn::Connection, service: Arc<S>, crl: Arc<CrlWatch>) {
    let addr = conn.remote_address();
    let Some(cert) = peer_certificate(&conn) else {
        warn!(%addr, "refusing peer without a Tessera role certificate");
        conn.close(1u32.into(), b"certificate carries no Tessera role");
        return;
    };
    let (role, name) = (cert.role, cert.name.clone());
    if !service.accepts(role) {
        warn!(%addr, %role, %name, "refusing peer: role not allowed here");
        conn.close(2u32.into(), format!("role {role} is not allowed on this server").as_bytes());
        return;
    }
    debug!(%addr, %role, %name, "peer connected");
    let conn_id = NEXT_CONN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let peer = Arc::new(PeerInfo { role, name, addr, conn: conn_id });
    let mut lists = crl.subscribe();
    loop {
        tokio::select! {
            accepted = conn.accept_bi() => match accepted {
                Ok((send, recv)) => {
                    let service = service.clone();
                    let peer = peer.clone();
                    tokio::spawn(serve_stream(service, peer, send, recv));
                }
                Err(e) => {
                    debug!(%addr, "connection ended: {e}");
                    return;
                }
            },
            Ok(()) = lists.changed() => {
                let list = crl.snapshot();
                if list.revoked.contains(&cert.serial) {
                    warn!(
                        %addr,
                        "closing the connection of {}: certificate revoked (revocation list number {})",
                        cert.who(),
                        list.number()
                    );
                    service.peer_revoked(&peer);
                    conn.close(CLOSE_REVOKED.into(), b"certificate revoked");
                    return;
                }
            }
        }
    }
}

/// How long a peer may take to send one request frame.
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(60);

async fn serve_stream<S: Service>(
    service: Arc<S>,
    peer: Arc<PeerInfo>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
) {
    let frame =
        match tokio::time::timeout(REQUEST_READ_TIMEOUT, frame::read_frame(&mut recv, service.max_payload())).await {
            Ok(Ok(f)) => f,
            Ok(Err(FrameError::Closed)) => return,
            Ok(Err(e)) => {
                debug!(addr = %peer.addr, "bad request frame: {e}");
                let reply: FsResult<S::Reply> = Err(FsError::protocol(e.to_string()));
                // The prefix may be garbage (bad magic/version): still answer in our framing, then stop reading.
                let _ = frame::write_frame(&mut send, &reply, Bytes::new()).await;
                let _ = send.finish();
                let _ = recv.stop(3u32.into());
                return;
            }
            Err(_) => {
                let _ = recv.stop(4u32.into());
                let _ = send.reset(4u32.into());
                return;
            }
        };
    let (reply, payload) = match frame.decode::<S::Request>() {
        Ok(req) => service.handle_streamed(peer.clone(), req, frame.payload).await,
        Err(e) => (Err(FsError::protocol(e.to_string())), Payload::Whole(Bytes::new())),
    };
    let (len, mut chunks) = match payload {
        Payload::Whole(payload) => {
            if let Err(e) = frame::write_frame(&mut send, &reply, payload).await {
                debug!(addr = %peer.addr, "reply not delivered: {e}");
                return;
            }
            let _ = send.finish();
            return;
        }
        Payload::Streamed { len, chunks } => (len, chunks),
    };
    // The header declares the length; the chunks follow as they come. Fewer or more bytes than declared
    // reset the stream (the caller sees a broken reply, never a wrong one).
    let head = match frame::encode_head(&reply, len) {
        Ok(h) => h,
        Err(e) => {
            debug!(addr = %peer.addr, "reply not encodable: {e}");
            let _ = send.reset(5u32.into());
            return;
        }
    };
    if send.write_all(&head).await.is_err() {
        return;
    }
    let mut sent = 0;
    while let Some(chunk) = chunks.recv().await {
        sent += chunk.len();
        if sent > len || send.write_chunk(chunk).await.is_err() {
            let _ = send.reset(6u32.into());
            return;
        }
    }
    if sent != len {
        let _ = send.reset(6u32.into());
        return;
    }
    let _ = send.finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_refusals_are_explained() {
        assert_eq!(explain_tls(44, "invalid peer certificate: Revoked"), "certificate revoked");
        let expired = "invalid peer certificate: certificate expired: verification time 1767225600 (UNIX), but \
                       certificate is not valid after 1767139200 (86400 seconds ago)";
        assert_eq!(explain_tls(45, expired), "certificate expired at 2025-12-31 00:00:00 UTC");
        let future =
            "certificate not valid yet: verification time 0 (UNIX), but certificate is not valid before 86400 \
                      (86400 seconds in future)";
        assert_eq!(explain_tls(45, future), "certificate not valid before 1970-01-02 00:00:00 UTC (is a clock wrong?)");
        assert_eq!(explain_tls(48, "invalid peer certificate: UnknownIssuer"), "UnknownIssuer");
        let closed = quinn::ConnectionError::ConnectionClosed(quinn::ConnectionClose {
            error_code: quinn::TransportErrorCode::crypto(44),
            frame_type: None,
            reason: Bytes::from_static(b"invalid peer certificate: Revoked"),
        });
        assert!(matches!(certificate_refusal(&closed), Some(Refusal::OfOurs(r)) if r == "certificate revoked"));
        assert!(certificate_refusal(&quinn::ConnectionError::TimedOut).is_none());
    }

    #[test]
    fn udp_sockets_get_the_large_buffer_as_root() {
        let sock = bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let got = receive_buffer(std::os::fd::AsRawFd::as_raw_fd(&sock));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(got >= UDP_BUFFER, "receive buffer {got} < {UDP_BUFFER}");
        } else {
            assert!(got > 0, "the buffer size is readable");
        }
    }
}
