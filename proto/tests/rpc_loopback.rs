//! RPC over real QUIC on loopback: correctness of payload round trips at several sizes, connections of
//! revoked peers, and (ignored, run by hand) a latency probe that prints quinn's loss and congestion
//! counters.

use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_ops::ca::CaDir;
use tessera_proto::rpc::{self, PeerInfo, RpcPeer, Service, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{FsResult, Role};
use tessera_test_support::TestCa;

/// Echoes the payload back; the header is the payload length it expects.
struct Echo;

impl Service for Echo {
    type Request = u32;
    type Reply = u32;
    fn accepts(&self, _role: Role) -> bool {
        true
    }
    async fn handle(&self, _peer: Arc<PeerInfo>, req: u32, payload: Bytes) -> (FsResult<u32>, Bytes) {
        if req as usize != payload.len() {
            return (Err(tessera_proto::FsError::invalid("length mismatch")), Bytes::new());
        }
        (Ok(req), payload)
    }
}

async fn setup(tuning: Tuning) -> (tempfile::TempDir, RpcPeer) {
    let ca = TestCa::new("t");
    let server = ca.identity(Role::Ds, "ds0");
    let client = ca.identity(Role::Client, "c");
    let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &server, &tuning).unwrap();
    let addr = ep.local_addr().unwrap();
    tokio::spawn(rpc::serve(ep, Arc::new(Echo), server.crl.clone()));
    let peer = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client, Role::Ds, addr, tuning).unwrap();
    (ca.dir, peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_round_trip_at_all_sizes() {
    let (_dir, peer) = setup(Tuning::default()).await;
    for len in [0usize, 1, 1199, 4096, 64 << 10, (64 << 10) + 1, 1 << 20, 4 << 20] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let (n, back) = peer.call::<u32, u32>(&(len as u32), Bytes::from(data.clone())).await.unwrap();
        assert_eq!(n as usize, len);
        assert!(back[..] == data[..], "payload of {len} bytes changed");
    }
}

/// `cargo test -p tessera-proto --release --test rpc_loopback -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn latency_probe() {
    let mtus: Vec<u16> = std::env::var("PROBE_MTUS")
        .unwrap_or_else(|_| "1200,8952,16384,32768,65000".into())
        .split(',')
        .filter_map(|m| m.parse().ok())
        .collect();
    for (mtu, gso) in mtus.iter().flat_map(|&m| [(m, true), (m, false)]) {
        println!("-- gso {gso}");
        let (_dir, peer) = setup(Tuning { mtu, gso, ..Tuning::default() }).await;
        for len in [4096usize, 64 << 10, 1 << 20] {
            let data = Bytes::from(vec![7u8; len]);
            let n = 100;
            let t = Instant::now();
            for _ in 0..n {
                peer.call::<u32, u32>(&(len as u32), data.clone()).await.unwrap();
            }
            let dt = t.elapsed();
            let stats = peer.connection().await.unwrap().stats();
            println!(
                "mtu {mtu:>5} len {len:>8}: {:>8.1} us/call {:>8.1} MiB/s  lost {} congestion events {} cwnd {} rtt {:?}",
                dt.as_secs_f64() * 1e6 / n as f64,
                (len * 2 * n) as f64 / dt.as_secs_f64() / (1 << 20) as f64,
                stats.path.lost_packets,
                stats.path.congestion_events,
                stats.path.cwnd,
                stats.path.rtt
            );
        }
    }
}

/// `cargo test -p tessera-proto --release --test rpc_loopback small_call_probe -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn small_call_probe() {
    let (_dir, peer) = setup(Tuning::default()).await;
    peer.call::<u32, u32>(&0, Bytes::new()).await.unwrap();
    let before = peer.connection().await.unwrap().stats();
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        peer.call::<u32, u32>(&0, Bytes::new()).await.unwrap();
    }
    let dt = t.elapsed();
    let after = peer.connection().await.unwrap().stats();
    println!(
        "{:.1} us/call; per call: {:.2} datagrams sent, {:.2} received, {:.2} ack frames sent, {:.2} stream frames sent, max_streams {:.2}",
        dt.as_secs_f64() * 1e6 / n as f64,
        (after.udp_tx.datagrams - before.udp_tx.datagrams) as f64 / n as f64,
        (after.udp_rx.datagrams - before.udp_rx.datagrams) as f64 / n as f64,
        (after.frame_tx.acks - before.frame_tx.acks) as f64 / n as f64,
        (after.frame_tx.stream - before.frame_tx.stream) as f64 / n as f64,
        (after.frame_rx.max_streams_bidi - before.frame_rx.max_streams_bidi) as f64 / n as f64,
    );
}

/// Streams `req` bytes in 7 KiB chunks as its reply, declaring `req` (or one more, when `req` is odd:
/// a reply that ends short).
struct Streamer;

impl Service for Streamer {
    type Request = u32;
    type Reply = u32;
    fn accepts(&self, _role: Role) -> bool {
        true
    }
    async fn handle(&self, _peer: Arc<PeerInfo>, _req: u32, _payload: Bytes) -> (FsResult<u32>, Bytes) {
        unreachable!("served by handle_streamed")
    }
    async fn handle_streamed(&self, _peer: Arc<PeerInfo>, req: u32, _payload: Bytes) -> (FsResult<u32>, rpc::Payload) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let len = req as usize;
        tokio::spawn(async move {
            let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            for c in data.chunks(7 << 10) {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                if tx.send(Bytes::copy_from_slice(c)).await.is_err() {
                    return;
                }
            }
        });
        let declared = if req % 2 == 1 { len + 1 } else { len };
        (Ok(req), rpc::Payload::Streamed { len: declared, chunks: rx })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_replies_arrive_whole_or_not_at_all() {
    let ca = TestCa::new("s");
    let server = ca.identity(Role::Ion, "ion0");
    let client = ca.identity(Role::Client, "c");
    let tuning = Tuning { call_timeout: std::time::Duration::from_secs(10), ..Tuning::default() };
    let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &server, &tuning).unwrap();
    let addr = ep.local_addr().unwrap();
    tokio::spawn(rpc::serve(ep, Arc::new(Streamer), server.crl.clone()));
    let peer = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client, Role::Ion, addr, tuning).unwrap();
    for len in [0u32, 100 << 10, 1 << 20] {
        let (n, data) = peer.call::<u32, u32>(&len, Bytes::new()).await.unwrap();
        assert_eq!((n, data.len()), (len, len as usize));
        assert!(data.iter().enumerate().all(|(i, &b)| b == (i % 253) as u8), "content of {len} bytes");
        // The same through the streamed reader.
        let (_, mut s) = peer.call_streamed::<u32, u32>(&len, Bytes::new()).await.unwrap();
        let mut got = 0;
        while let Some(c) = s.next().await {
            got += c.unwrap().len();
        }
        assert_eq!(got, len as usize);
    }
    // Declared one byte more than it sends: the reply is broken, not short.
    let e = peer.call::<u32, u32>(&((64 << 10) + 1), Bytes::new()).await.unwrap_err();
    assert!(matches!(e.code, tessera_proto::error::ErrorCode::Io | tessera_proto::error::ErrorCode::Protocol), "{e}");
    assert_eq!(peer.call::<u32, u32>(&8, Bytes::new()).await.unwrap().0, 8, "the connection still serves");
}

/// A server that never answers (its socket takes the datagrams and nobody reads them, as a dead host
/// on a network without ICMP would): calls queued at once fail after about one connection timeout, not
/// one timeout each in turn ([`rpc::RECONNECT_HOLDOFF`]), and after the hold-off a call tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_silent_server_fail_after_one_connection_timeout() {
    let ca = TestCa::new("q");
    let client = ca.identity(Role::Client, "c");
    let hole = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tuning = Tuning { connect_timeout: Duration::from_millis(700), ..Tuning::default() };
    let peer = Arc::new(
        RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client, Role::Ds, hole.local_addr().unwrap(), tuning)
            .unwrap(),
    );
    let t = Instant::now();
    let calls: Vec<_> = (0..8u32)
        .map(|k| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.call::<u32, u32>(&k, Bytes::new()).await })
        })
        .collect();
    for c in calls {
        let e = c.await.unwrap().unwrap_err();
        assert_eq!(e.code, tessera_proto::error::ErrorCode::Unavailable, "{e}");
    }
    let took = t.elapsed();
    // One attempt (0.7 s) for all; eight in turn would be 5.6 s.
    assert!(took < Duration::from_millis(2500), "8 queued calls took {took:?}");
    tokio::time::sleep(rpc::RECONNECT_HOLDOFF).await;
    let t = Instant::now();
    let e = peer.call::<u32, u32>(&1, Bytes::new()).await.unwrap_err();
    assert!(e.detail.contains("no answer to a connection attempt"), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(600), "no new attempt after the hold-off: {:?}", t.elapsed());
    drop(hole);
}

fn serve_echo(server: &NodeIdentity) -> std::net::SocketAddr {
    let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), server, &Tuning::default()).unwrap();
    let addr = ep.local_addr().unwrap();
    tokio::spawn(rpc::serve(ep, Arc::new(Echo), server.crl.clone()));
    addr
}

fn peer(client: &NodeIdentity, addr: std::net::SocketAddr) -> RpcPeer {
    let tuning = Tuning { call_timeout: Duration::from_secs(10), ..Tuning::default() };
    RpcPeer::new(rpc::client_endpoint(false).unwrap(), client, Role::Ds, addr, tuning).unwrap()
}

async fn ping(p: &RpcPeer) -> FsResult<u32> {
    p.call::<u32, u32>(&1, Bytes::from_static(b"x")).await.map(|r| r.0)
}

/// Revocation over real QUIC: connections that are up when a new revocation list is taken into use are
/// closed — by the server for a revoked client at once, by the client for a revoked server at its next
/// call — and the next connection is refused, saying why; other peers keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_of_revoked_peers_are_closed_and_refused_again() {
    let ca = TestCa::new("t");
    let (server, alice, bob) =
        (ca.identity(Role::Ds, "ds0"), ca.identity(Role::Client, "alice"), ca.identity(Role::Client, "bob"));
    let addr = serve_echo(&server);
    let (a, b) = (peer(&alice, addr), peer(&bob, addr));
    assert_eq!(ping(&a).await.unwrap(), 1);
    assert_eq!(ping(&b).await.unwrap(), 1);

    // The server closes alice's connection by itself, once it has taken the new list into use.
    CaDir::open(ca.path()).unwrap().revoke("alice", None).unwrap();
    let t = Instant::now();
    while a.is_connected().await {
        assert!(t.elapsed() < Duration::from_secs(5), "alice's connection still up {:?} after revoking", t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let err = ping(&a).await.unwrap_err();
    assert!(err.detail.contains("refused this node's certificate: certificate revoked"), "{err}");
    assert_eq!(ping(&b).await.unwrap(), 1, "bob keeps his connection");

    // The server revoked: bob's next call closes his connection and the new one is refused.
    CaDir::open(ca.path()).unwrap().revoke("ds0", None).unwrap();
    tokio::time::sleep(tessera_proto::crl::RECHECK + Duration::from_millis(200)).await;
    let err = ping(&b).await.unwrap_err();
    assert!(err.detail.contains("its certificate is refused: certificate revoked"), "{err}");
    assert!(!b.is_connected().await);
}

/// A server killed (its process gone with nothing sent) and started again on its port with its
/// identity: a peer still holding the old process's connection is answered with a stateless reset it
/// can check (the reset key comes from the server's private key, the same in both processes), so the
/// call fails at once saying the server restarted, instead of waiting out the idle timeout on a dead
/// connection; the next try goes through on a new connection. With a reset key of the process's own
/// (quinn's default) the reset is ignored as forged and `reset` is false.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_resets_the_connections_of_its_previous_process() {
    let ca = TestCa::new("r");
    let (server, client) = (ca.identity(Role::Ds, "ds0"), ca.identity(Role::Client, "c"));
    // The first process: a runtime of its own, so that it can die without closing anything.
    let first = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let addr = {
        let _in = first.enter();
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &server, &Tuning::default()).unwrap();
        let addr = ep.local_addr().unwrap();
        first.spawn(rpc::serve(ep, Arc::new(Echo), server.crl.clone()));
        addr
    };
    let p = peer(&client, addr);
    assert_eq!(ping(&p).await.unwrap(), 1);
    first.shutdown_background();

    serve_again(addr, &server, Tuning::default()).await;
    assert!(p.is_connected().await, "the old connection looks alive until a packet is answered");

    let failed = p.try_call_chunked::<u32, u32>(&1, Bytes::from_static(b"x")).await.expect_err("a dead connection");
    assert!(failed.reset, "the restarted server's reset was not taken: {}", failed.error);
    let (n, _) = p.call_chunked_resent::<u32, u32>(&1, Bytes::from_static(b"x")).await.unwrap();
    assert_eq!(n, 1);
}

/// A server that dies, whose connection then times out at the client (nothing sent for the idle
/// timeout), and that is back by the next call: the call is made on a new connection, not failed over
/// the connection that was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_the_connection_timed_out_tries_the_server_again() {
    let ca = TestCa::new("t");
    let (server, client) = (ca.identity(Role::Ds, "ds0"), ca.identity(Role::Client, "c"));
    let tuning = Tuning { idle_timeout: Duration::from_millis(300), ..Tuning::default() };
    let first = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let addr = {
        let _in = first.enter();
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &server, &tuning).unwrap();
        let addr = ep.local_addr().unwrap();
        first.spawn(rpc::serve(ep, Arc::new(Echo), server.crl.clone()));
        addr
    };
    let p = RpcPeer::new(rpc::client_endpoint(false).unwrap(), &client, Role::Ds, addr, tuning).unwrap();
    assert_eq!(ping(&p).await.unwrap(), 1);
    first.shutdown_background();
    let t = Instant::now();
    while p.is_connected().await {
        assert!(t.elapsed() < Duration::from_secs(10), "the connection never timed out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serve_again(addr, &server, tuning).await;
    assert_eq!(ping(&p).await.unwrap(), 1, "the server is back");
}

/// The echo server started again on `addr` (a new process of it, once the old one's port is free).
async fn serve_again(addr: std::net::SocketAddr, server: &NodeIdentity, tuning: Tuning) {
    let mut tries = 0;
    let ep = loop {
        match rpc::server_endpoint(addr, server, &tuning) {
            Ok(ep) => break ep,
            Err(e) if tries < 100 => {
                tries += 1;
                tracing::debug!("port not free yet: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("port {addr} still taken: {e}"),
        }
    };
    tokio::spawn(rpc::serve(ep, Arc::new(Echo), server.crl.clone()));
}

/// A metadata replica for [`MdsPeers`]: the leader answers every call, a follower answers NotLeader
/// naming the leader (or nobody); each counts the calls it got.
struct Replica {
    leader: Option<String>,
    calls: std::sync::atomic::AtomicU32,
}

impl Service for Replica {
    type Request = tessera_proto::msg::MdsCall;
    type Reply = tessera_proto::msg::MdsReply;
    fn accepts(&self, _role: Role) -> bool {
        true
    }
    async fn handle(
        &self,
        _peer: Arc<PeerInfo>,
        _req: tessera_proto::msg::MdsCall,
        _payload: Bytes,
    ) -> (FsResult<tessera_proto::msg::MdsReply>, Bytes) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let r = match &self.leader {
            None => Ok(tessera_proto::msg::MdsReply::Pong { version: tessera_proto::PROTOCOL_VERSION }),
            Some(hint) => Err(tessera_proto::FsError::new(
                tessera_proto::error::ErrorCode::NotLeader,
                format!("a follower; {}{hint}", tessera_proto::error::LEADER_HINT),
            )),
        };
        (r, Bytes::new())
    }
}

fn serve_replica(server: &NodeIdentity, leader: Option<String>) -> (std::net::SocketAddr, Arc<Replica>) {
    let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), server, &Tuning::default()).unwrap();
    let addr = ep.local_addr().unwrap();
    let r = Arc::new(Replica { leader, calls: Default::default() });
    tokio::spawn(rpc::serve(ep, r.clone(), server.crl.clone()));
    (addr, r)
}

/// Issue 37's leader discovery over real QUIC: a call tried at a dead replica, then at a follower that
/// names the leader, reaches the leader and stays there; a namespace change (sent once when a transport
/// failure may have delivered it) is still sent again after a NotLeader, which applies nothing; a
/// periodic call (send_once) follows the hint too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mds_peers_find_the_leader_and_send_calls_again() {
    use std::sync::atomic::Ordering::Relaxed;
    use tessera_proto::msg::{MdsCall, MdsReply, MdsRequest};
    let ca = TestCa::new("t");
    let (server, client) = (ca.identity(Role::Mds, "mds"), ca.identity(Role::Client, "c"));
    let (leader_addr, leader) = serve_replica(&server, None);
    let (follower_addr, follower) = serve_replica(&server, Some(leader_addr.to_string()));
    // Nothing answers here.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    let tuning = Tuning {
        call_timeout: Duration::from_millis(800),
        connect_timeout: Duration::from_millis(300),
        ..Tuning::default()
    };
    let ep = rpc::client_endpoint(false).unwrap();
    let peers = rpc::MdsPeers::to_addrs(&ep, &client, &[dead_addr, follower_addr, leader_addr], tuning).unwrap();
    let call = |req| MdsCall { caller: Default::default(), origin: Default::default(), req, seq: 0 };
    let ping = call(MdsRequest::Ping);
    assert!(matches!(peers.send(&ping).await.unwrap(), MdsReply::Pong { .. }));
    assert_eq!(peers.leader().addr(), leader_addr);
    assert_eq!((follower.calls.load(Relaxed), leader.calls.load(Relaxed)), (1, 1));
    peers.send(&ping).await.unwrap();
    assert_eq!((follower.calls.load(Relaxed), leader.calls.load(Relaxed)), (1, 2), "straight to the leader");

    // A change not numbered, starting at the follower: NotLeader applied nothing, so it goes on.
    let peers = rpc::MdsPeers::to_addrs(&ep, &client, &[follower_addr, leader_addr], tuning).unwrap();
    let mkdir = call(MdsRequest::Mkdir { parent: 1, name: "d".into(), perm: 0o755, umask: 0 });
    assert!(!mkdir.resendable());
    peers.send(&mkdir).await.unwrap();
    assert_eq!((follower.calls.load(Relaxed), leader.calls.load(Relaxed)), (2, 3));
    // One try for periodic calls, following the hint.
    let peers = rpc::MdsPeers::to_addrs(&ep, &client, &[follower_addr, leader_addr], tuning).unwrap();
    peers.send_once(&ping).await.unwrap();
    assert_eq!((follower.calls.load(Relaxed), leader.calls.load(Relaxed)), (3, 4));
    assert_eq!(peers.leader().addr(), leader_addr);
    // No leader anywhere (a follower that knows of none): the call fails within the patience, saying so.
    let (lone_addr, _lone) = serve_replica(&server, Some(String::new()));
    let lost = rpc::MdsPeers::to_addrs(&ep, &client, &[dead_addr, lone_addr], tuning)
        .unwrap()
        .with_patience(Duration::from_secs(2));
    let t = Instant::now();
    let e =
        lost.send(&call(MdsRequest::Mkdir { parent: 1, name: "e".into(), perm: 0o755, umask: 0 })).await.unwrap_err();
    assert_eq!(e.code, tessera_proto::error::ErrorCode::NotLeader, "{e}");
    assert!(e.detail.contains("no metadata replica leads"), "{e}");
    assert!(t.elapsed() >= Duration::from_secs(1) && t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    drop(dead);
}

/// A leader at an address the client was not configured with (a replica added at run time): a follower
/// that names it makes it one more replica the client knows, calls go there and stay there, and the
/// replicas the client knows are the configured ones, then the learnt one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mds_peers_learn_a_leader_no_configuration_lists() {
    use std::sync::atomic::Ordering::Relaxed;
    use tessera_proto::msg::{MdsCall, MdsReply, MdsRequest};
    let ca = TestCa::new("t");
    let (server, client) = (ca.identity(Role::Mds, "mds"), ca.identity(Role::Client, "c"));
    let (leader_addr, leader) = serve_replica(&server, None);
    let (follower_addr, follower) = serve_replica(&server, Some(leader_addr.to_string()));
    let ep = rpc::client_endpoint(false).unwrap();
    let peers = rpc::MdsPeers::to_addrs(&ep, &client, &[follower_addr], Tuning::default()).unwrap();
    assert_eq!(peers.each().len(), 1);
    // One configured replica is a single metadata server: its NotLeader reaches the caller.
    let ping = MdsCall { caller: Default::default(), origin: Default::default(), req: MdsRequest::Ping, seq: 0 };
    assert!(peers.send(&ping).await.is_err());
    // Two configured, neither leading: the leader is learnt from the hint.
    let (other_addr, _other) = serve_replica(&server, Some(leader_addr.to_string()));
    let peers = rpc::MdsPeers::to_addrs(&ep, &client, &[follower_addr, other_addr], Tuning::default()).unwrap();
    assert!(matches!(peers.send(&ping).await.unwrap(), MdsReply::Pong { .. }));
    assert_eq!(peers.leader().addr(), leader_addr);
    let known: Vec<String> = peers.each().into_iter().map(|(a, _)| a).collect();
    assert_eq!(known, vec![follower_addr.to_string(), other_addr.to_string(), leader_addr.to_string()]);
    assert_eq!(peers.configured(), 2);
    peers.send(&ping).await.unwrap();
    assert_eq!(leader.calls.load(Relaxed), 2, "straight to the learnt leader");
    assert_eq!(follower.calls.load(Relaxed), 2);
    // Learning the same address again adds nothing.
    assert_eq!(peers.learn(&leader_addr.to_string()), Some(2));
    assert_eq!(peers.each().len(), 3);
}
