//! QUIC endpoints with mutual TLS, the RPC client ([`RpcPeer`]) and the server loop ([`serve`]).
//!
//! One call = one bidirectional stream: request frame, response frame. A server checks the peer's role
//! at connect, answers a malformed frame with a protocol error (or resets just that stream), and keeps
//! serving the connection's other streams.
//!
//! Here the transport both sides share (QUIC tuning, UDP sockets, why a certificate was refused); the
//! calling side in `client.rs` ([`RpcPeer`]), the serving side in `server.rs` ([`serve`], [`Service`]),
//! and in `leader.rs` the metadata replicas as one service ([`MdsPeers`]: the leader found, calls sent again).

mod client;
mod leader;
mod server;

pub use client::{client_endpoint, resolve, ReplyStream, RpcPeer, TransportFailure, RECONNECT_HOLDOFF};
pub use leader::{MdsPeers, FAILOVER_PATIENCE};
pub use server::{serve, server_endpoint, Payload, PeerInfo, Service};

use crate::error::{ErrorCode, FsError, FsResult};
use crate::tls::CertInfo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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

fn tls_err(e: impl std::error::Error + 'static) -> FsError {
    FsError::new(ErrorCode::Invalid, format!("TLS setup: {}", crate::error::chain(&e)))
}

/// Endpoint settings: the largest UDP payload we accept is advertised to peers, and quinn's default
/// (1472) would cap the loopback MTU above no matter what the transport config asks for.
///
/// A server's stateless-reset key (`reset_secret`) is derived from its private key, so it is the same in
/// every process of that server: a server restarted (kill -9, reboot) answers a peer still sending on a
/// connection of its previous process with a stateless reset the peer can check (RFC 9000 §10.3), and
/// the peer learns at once, one round trip, that the server is back and the connection is dead. With
/// quinn's default key (random per process) the reset is ignored as forged, and the peer took the
/// restarted server for silent until its idle timeout: a mirrored stripe's replica was marked stale
/// while its server was up (issue 36's chaos soak, results/mirror).
fn endpoint_config(reset_secret: Option<&[u8]>) -> quinn::EndpointConfig {
    let mut c = match reset_secret {
        Some(secret) => {
            let derived = ring::digest::digest(&ring::digest::SHA256, &[RESET_LABEL, secret].concat());
            let (reset, cids) = derived.as_ref().split_at(16);
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, reset);
            let mut c = quinn::EndpointConfig::new(Arc::new(key));
            // The new process must also take the old one's connection ids for its own (quinn drops a
            // packet whose id its generator did not make, before any reset): ids keyed the same way.
            let cid_key = u64::from_le_bytes(cids[..8].try_into().unwrap_or_default());
            c.cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key)));
            c
        }
        None => quinn::EndpointConfig::default(),
    };
    let _ = c.max_udp_payload_size(65_527);
    c
}

/// Keeps the reset key apart from any other use of the private key's bytes.
const RESET_LABEL: &[u8] = b"tessera stateless reset key v1\0";

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

/// What the peer's certificate says (the handshake checked it).
fn peer_certificate(conn: &quinn::Connection) -> Option<CertInfo> {
    conn.peer_identity()
        .and_then(|any| any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok())
        .and_then(|chain| chain.first().and_then(|c| CertInfo::parse(c)))
}

/// Application close code of a connection whose peer's certificate was revoked while it was up.
pub const CLOSE_REVOKED: u32 = 7;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

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
