//! The serving side of an RPC: server endpoints, the [`Service`] a server implements, and [`serve`],
//! the accept loop (the peer's role checked at connect, one task per stream, revoked peers closed).

use super::{
    bind_udp, certificate_refusal, endpoint_config, peer_certificate, tls_err, transport_config, Refusal, Tuning,
    CLOSE_REVOKED,
};
use crate::crl::CrlWatch;
use crate::error::{chain, FsError, FsResult};
use crate::frame::{self, FrameError, MAX_PAYLOAD};
use crate::tls::NodeIdentity;
use crate::types::Role;
use bytes::Bytes;
use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// A server endpoint bound to `bind`.
pub fn server_endpoint(bind: SocketAddr, id: &NodeIdentity, t: &Tuning) -> FsResult<quinn::Endpoint> {
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(id.server_config().map_err(tls_err)?).map_err(tls_err)?;
    let mut sc = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    sc.transport_config(Arc::new(transport_config(t, bind.ip().is_loopback())));
    let socket = bind_udp(bind)?;
    let runtime = quinn::default_runtime().ok_or_else(|| FsError::io("no async runtime"))?;
    quinn::Endpoint::new(endpoint_config(Some(id.key.secret_der())), Some(sc), socket, runtime)
        .map_err(|e| FsError::io(format!("bind {bind}: {e}")))
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

    /// Largest request payload accepted from `peer`.
    fn max_payload(&self, _peer: &PeerInfo) -> usize {
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
    let frame = match tokio::time::timeout(
        REQUEST_READ_TIMEOUT,
        frame::read_frame(&mut recv, service.max_payload(&peer)),
    )
    .await
    {
        Ok(Ok(f)) => f,
        Ok(Err(FrameError::Closed)) => return,
        Ok(Err(e)) => {
            let e = chain(&e);
            debug!(addr = %peer.addr, "bad request frame: {e}");
            let reply: FsResult<S::Reply> = Err(FsError::protocol(e));
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
        Err(e) => (Err(FsError::protocol(chain(&e))), Payload::Whole(Bytes::new())),
    };
    let (len, mut chunks) = match payload {
        Payload::Whole(payload) => {
            if let Err(e) = frame::write_frame(&mut send, &reply, payload).await {
                debug!(addr = %peer.addr, "reply not delivered: {}", chain(&e));
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
            debug!(addr = %peer.addr, "reply not encodable: {}", chain(&e));
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
