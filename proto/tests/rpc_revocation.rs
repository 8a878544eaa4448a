//! Revocation over real QUIC on loopback: connections that are up when a new revocation list is taken
//! into use are closed — by the server for a revoked client at once, by the client for a revoked
//! server at its next call — and the next connection is refused, saying why; other peers keep working.

use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::ca::CaDir;
use tessera_proto::rpc::{self, PeerInfo, RpcPeer, Service, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{FsResult, Role};
use tessera_test_support::TestCa;

struct Ping;

impl Service for Ping {
    type Request = u32;
    type Reply = u32;
    fn accepts(&self, _role: Role) -> bool {
        true
    }
    async fn handle(&self, _peer: Arc<PeerInfo>, req: u32, _payload: Bytes) -> (FsResult<u32>, Bytes) {
        (Ok(req + 1), Bytes::new())
    }
}

fn serve(server: &NodeIdentity) -> std::net::SocketAddr {
    let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), server, &Tuning::default()).unwrap();
    let addr = ep.local_addr().unwrap();
    tokio::spawn(rpc::serve(ep, Arc::new(Ping), server.crl.clone()));
    addr
}

fn peer(client: &NodeIdentity, addr: std::net::SocketAddr) -> RpcPeer {
    let tuning = Tuning { call_timeout: Duration::from_secs(10), ..Tuning::default() };
    RpcPeer::new(rpc::client_endpoint(false).unwrap(), client, Role::Ds, addr, tuning).unwrap()
}

async fn ping(p: &RpcPeer) -> FsResult<u32> {
    p.call::<u32, u32>(&1, Bytes::new()).await.map(|r| r.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_revoked_peers_are_closed_and_refused_again() {
    let ca = TestCa::new("t");
    let (server, alice, bob) =
        (ca.identity(Role::Ds, "ds0"), ca.identity(Role::Client, "alice"), ca.identity(Role::Client, "bob"));
    let addr = serve(&server);
    let (a, b) = (peer(&alice, addr), peer(&bob, addr));
    assert_eq!(ping(&a).await.unwrap(), 2);
    assert_eq!(ping(&b).await.unwrap(), 2);

    // The server closes alice's connection by itself, once it has taken the new list into use.
    CaDir::open(ca.path()).unwrap().revoke("alice", None).unwrap();
    let t = Instant::now();
    while a.is_connected().await {
        assert!(t.elapsed() < Duration::from_secs(5), "alice's connection still up {:?} after revoking", t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let err = ping(&a).await.unwrap_err();
    assert!(err.detail.contains("refused this node's certificate: certificate revoked"), "{err}");
    assert_eq!(ping(&b).await.unwrap(), 2, "bob keeps his connection");

    // The server revoked: bob's next call closes his connection and the new one is refused.
    CaDir::open(ca.path()).unwrap().revoke("ds0", None).unwrap();
    tokio::time::sleep(tessera_proto::crl::RECHECK + Duration::from_millis(200)).await;
    let err = ping(&b).await.unwrap_err();
    assert!(err.detail.contains("its certificate is refused: certificate revoked"), "{err}");
    assert!(!b.is_connected().await);
}
