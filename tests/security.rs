//! Transport security and hostile input against real `tessera-mds` / `tessera-ds` processes:
//! missing, foreign-CA and wrong-role certificates are refused; random bytes, truncated, oversized and
//! wrong-version frames get an error or a closed stream, never a crash, and the server keeps serving.

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::config::ClusterConfig;
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::*;
use tessera_proto::rpc::{self, RpcPeer, Tuning};
use tessera_proto::tls::{self, NodeIdentity};
use tessera_proto::{Caller, IoTag, Role};
use tessera_test_support::Cluster;

fn tuning() -> Tuning {
    Tuning { call_timeout: Duration::from_secs(10), ..Tuning::default() }
}

fn issue(cluster: &Cluster, role: Role, name: &str) -> NodeIdentity {
    let tls_dir = cluster.files.dir.join("tls");
    let ca = tessera_ops::ca::read_ca(&tls_dir).expect("cluster CA");
    let files = tessera_ops::ca::issue_to_dir(&tls_dir, &ca, role, name, &[]).expect("issue");
    NodeIdentity::load(&files).expect("load identity")
}

fn addrs(cfg: &ClusterConfig) -> (SocketAddr, SocketAddr) {
    (rpc::resolve(&cfg.mds0().addr).unwrap(), rpc::resolve(&cfg.ds[0].addr).unwrap())
}

async fn mds_ping(peer: &RpcPeer) -> Result<MdsReply, tessera_proto::FsError> {
    peer.call::<MdsCall, MdsReply>(
        &MdsCall { caller: Caller::root(), origin: Default::default(), req: MdsRequest::Ping, seq: 0 },
        Bytes::new(),
    )
    .await
    .map(|r| r.0)
}

async fn ds_ping(peer: &RpcPeer) -> Result<DsReply, tessera_proto::FsError> {
    peer.call::<DsCall, DsReply>(&DsCall::new(0, DsRequest::Ping), Bytes::new()).await.map(|r| r.0)
}

/// Connects with a hand-made rustls client config; returns whether a call could complete.
async fn handshake_and_call(cfg: rustls::ClientConfig, addr: SocketAddr, server_name: &str) -> bool {
    let ep = rpc::client_endpoint(false).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(cfg).unwrap();
    let cc = quinn::ClientConfig::new(Arc::new(crypto));
    let Ok(connecting) = ep.connect_with(cc, addr, server_name) else { return false };
    let Ok(Ok(conn)) = tokio::time::timeout(Duration::from_secs(10), connecting).await else { return false };
    // With TLS 1.3 the client may finish before the server rejects its certificate: a stream must fail.
    let attempt = async {
        let (mut send, mut recv) = conn.open_bi().await.ok()?;
        let head = tessera_proto::frame::encode_head(&DsCall::new(0, DsRequest::Ping), 0).ok()?;
        send.write_all(&head).await.ok()?;
        send.finish().ok()?;
        let reply = recv.read_to_end(1 << 20).await.ok()?;
        (!reply.is_empty()).then_some(())
    };
    matches!(tokio::time::timeout(Duration::from_secs(10), attempt).await, Ok(Some(())))
}

fn roots_of(id: &NodeIdentity) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(id.ca.clone()).unwrap();
    roots
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_checked() {
    let cluster = Cluster::start(1);
    let cfg = cluster.client_config();
    let (mds_addr, ds_addr) = addrs(&cfg);
    let good = NodeIdentity::load(&cfg.tls).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    // The proper client certificate works.
    let ep = rpc::client_endpoint(false).unwrap();
    let peer = RpcPeer::new(ep.clone(), &good, Role::Mds, mds_addr, tuning()).unwrap();
    assert!(matches!(mds_ping(&peer).await, Ok(MdsReply::Pong { .. })));

    // No client certificate at all.
    let no_cert = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots_of(&good))
        .with_no_client_auth();
    let mut no_cert = no_cert;
    no_cert.alpn_protocols = vec![tls::ALPN.to_vec()];
    assert!(
        !handshake_and_call(no_cert.clone(), mds_addr, "mds.tessera").await,
        "MDS accepted a client without certificate"
    );
    assert!(!handshake_and_call(no_cert, ds_addr, "ds.tessera").await, "DS accepted a client without certificate");

    // A certificate from another CA (trusting the cluster CA for the server side).
    let other_dir = tempfile::tempdir().unwrap();
    let other_ca = tessera_ops::issue::generate_ca("evil").unwrap();
    tessera_ops::ca::write_ca(other_dir.path(), &other_ca).unwrap();
    let other_files = tessera_ops::ca::issue_to_dir(other_dir.path(), &other_ca, Role::Client, "mallory", &[]).unwrap();
    let mut foreign = NodeIdentity::load(&other_files).unwrap();
    foreign.ca = good.ca.clone();
    let foreign_cfg = foreign.client_config().unwrap();
    assert!(!handshake_and_call(foreign_cfg.clone(), mds_addr, "mds.tessera").await, "MDS accepted a foreign-CA cert");
    assert!(!handshake_and_call(foreign_cfg, ds_addr, "ds.tessera").await, "DS accepted a foreign-CA cert");

    // A server that is not what the client asked for: the DS's certificate is not valid as an MDS.
    let wrong_server = RpcPeer::new(ep.clone(), &good, Role::Mds, ds_addr, tuning()).unwrap();
    let err = mds_ping(&wrong_server).await.expect_err("client accepted a DS posing as MDS");
    assert_eq!(err.code, ErrorCode::Unavailable, "{err}");

    // Wrong role: a data server's certificate may ping a data server (a mirrored stripe's primary tells a
    // slow replica from a dead one) and pass a primary's writes on, but not read or write as a client.
    let ds_identity = issue(&cluster, Role::Ds, "ds-impostor");
    let as_ds = RpcPeer::new(ep.clone(), &ds_identity, Role::Ds, ds_addr, tuning()).unwrap();
    assert!(ds_ping(&as_ds).await.is_ok(), "DS refused a ping from a peer with role ds");
    let tag = IoTag { origin: tessera_proto::Origin { job: "j".into(), client: 1, pid: 1 }, ino: 1 };
    let read = DsRequest::Read { tag, object: 1, offset: 0, len: 1 };
    let err = as_ds.call::<DsCall, DsReply>(&DsCall::new(0, read), Bytes::new()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Perm, "DS served a read to a peer with role ds: {err}");

    // Role-restricted requests: a client may not remove objects nor pose as a data server reporting.
    let client_ds = RpcPeer::new(ep.clone(), &good, Role::Ds, ds_addr, tuning()).unwrap();
    let err = client_ds
        .call::<DsCall, DsReply>(&DsCall::new(0, DsRequest::Remove { objects: vec![1, 2] }), Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Perm, "{err}");
    let err = peer
        .call::<MdsCall, MdsReply>(
            &MdsCall {
                caller: Caller::root(),
                origin: Default::default(),
                req: MdsRequest::DsReport(Box::new(DsReport { ds: 0, ..Default::default() })),
                seq: 0,
            },
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Perm, "{err}");

    // Everyone legitimate is still served.
    assert!(matches!(ds_ping(&client_ds).await, Ok(DsReply::Pong { .. })));
    assert!(matches!(mds_ping(&peer).await, Ok(MdsReply::Pong { .. })));
}

enum RawOutcome {
    /// The server answered with a frame carrying this error.
    Error(tessera_proto::FsError),
    /// The server answered with a success (unexpected for garbage).
    Success,
    /// The server closed or reset the stream without a frame.
    Closed,
}

/// Sends raw bytes on a new stream of `conn` and interprets what comes back.
async fn raw(conn: &quinn::Connection, bytes: &[u8]) -> RawOutcome {
    let (mut send, mut recv) = conn.open_bi().await.expect("open stream");
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    let reply = match tokio::time::timeout(Duration::from_secs(15), recv.read_to_end(1 << 20)).await {
        Ok(Ok(r)) => r,
        _ => return RawOutcome::Closed,
    };
    if reply.len() < 12 {
        return RawOutcome::Closed;
    }
    let prefix: [u8; 12] = reply[..12].try_into().unwrap();
    let (hlen, _) = tessera_proto::frame::parse_prefix(&prefix, 1 << 20).expect("server reply has a valid prefix");
    // Both services reply with FsResult<_>: decode the error side generically.
    match tessera_proto::wire::decode::<Result<DsReply, tessera_proto::FsError>>(&reply[12..12 + hlen]) {
        Ok(Err(e)) => RawOutcome::Error(e),
        Ok(Ok(_)) => RawOutcome::Success,
        Err(_) => {
            match tessera_proto::wire::decode::<Result<MdsReply, tessera_proto::FsError>>(&reply[12..12 + hlen]) {
                Ok(Err(e)) => RawOutcome::Error(e),
                _ => RawOutcome::Success,
            }
        }
    }
}

fn prefix(version: u16, hlen: u32, plen: u32) -> Vec<u8> {
    let mut v = b"TS".to_vec();
    v.extend_from_slice(&version.to_be_bytes());
    v.extend_from_slice(&hlen.to_be_bytes());
    v.extend_from_slice(&plen.to_be_bytes());
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_never_crash_servers() {
    let mut cluster = Cluster::start(1);
    let cfg = cluster.client_config();
    let (mds_addr, ds_addr) = addrs(&cfg);
    let good = NodeIdentity::load(&cfg.tls).unwrap();
    let ep = rpc::client_endpoint(false).unwrap();
    let v = tessera_proto::PROTOCOL_VERSION;
    let valid_ping = tessera_proto::frame::encode_head(&DsCall::new(0, DsRequest::Ping), 0).unwrap();

    for (role, addr) in [(Role::Mds, mds_addr), (Role::Ds, ds_addr)] {
        let peer = RpcPeer::new(ep.clone(), &good, role, addr, tuning()).unwrap();
        let conn = peer.connection().await.expect("connect");
        let mut rng_state = 0x1234_5678_u64;
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty-then-fin", vec![]),
            ("bad magic", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
            ("wrong version", [prefix(v.wrapping_add(7), 1, 0), vec![0]].concat()),
            ("truncated header", [prefix(v, 100, 0), vec![1, 2, 3]].concat()),
            ("valid frame cut short", valid_ping[..valid_ping.len() - 1].to_vec()),
            ("oversized header", prefix(v, u32::MAX, 0)),
            ("oversized payload", prefix(v, 1, u32::MAX)),
            ("garbage header", [prefix(v, 8, 0), vec![0xff; 8]].concat()),
        ];
        // A frame that declares a 1 KiB payload but sends 10 bytes of it.
        let mut short = tessera_proto::frame::encode_head(&DsCall::new(0, DsRequest::Ping), 1024).unwrap();
        short.extend_from_slice(&[0u8; 10]);
        cases.push(("short payload", short));
        for i in 0..40 {
            let n = 1 + (i * 37) % 300;
            let junk: Vec<u8> = (0..n)
                .map(|_| {
                    rng_state ^= rng_state << 13;
                    rng_state ^= rng_state >> 7;
                    rng_state ^= rng_state << 17;
                    rng_state as u8
                })
                .collect();
            cases.push(("random bytes", junk));
        }
        for (what, bytes) in &cases {
            match raw(&conn, bytes).await {
                RawOutcome::Error(e) => {
                    if *what == "wrong version" {
                        assert!(e.detail.contains("version"), "{role} {what}: unclear error {e}");
                    }
                }
                RawOutcome::Closed => {}
                RawOutcome::Success => {
                    // Random bytes could in theory form a valid Ping; anything else must not succeed.
                    assert!(*what == "random bytes" || *what == "empty-then-fin", "{role}: {what} was accepted");
                }
            }
        }
        // The same connection and a fresh one still work.
        match role {
            Role::Mds => {
                assert!(matches!(mds_ping(&peer).await, Ok(MdsReply::Pong { .. })));
                let fresh = RpcPeer::new(ep.clone(), &good, role, addr, tuning()).unwrap();
                assert!(matches!(mds_ping(&fresh).await, Ok(MdsReply::Pong { .. })));
            }
            _ => {
                assert!(matches!(ds_ping(&peer).await, Ok(DsReply::Pong { .. })));
                let fresh = RpcPeer::new(ep.clone(), &good, role, addr, tuning()).unwrap();
                assert!(matches!(ds_ping(&fresh).await, Ok(DsReply::Pong { .. })));
                // A valid header with a nonsense request field values is an error reply, not a crash.
                let tag =
                    IoTag { origin: tessera_proto::Origin { job: "x".repeat(10_000), client: 1, pid: 1 }, ino: 1 };
                let err = fresh
                    .call::<DsCall, DsReply>(
                        &DsCall::new(0, DsRequest::Read { tag, object: 1, offset: u64::MAX, len: u32::MAX }),
                        Bytes::new(),
                    )
                    .await
                    .unwrap_err();
                assert_eq!(err.code, ErrorCode::Invalid, "{err}");
            }
        }
    }
    assert!(cluster.all_alive(), "a server died on malformed input");
}

/// `VmRSS` and `VmSize` of a process, bytes.
fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).expect(name);
        line.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()).expect("a number of kB") * 1024
    };
    (field("VmRSS:"), field("VmSize:"))
}

/// A declared payload length costs nothing until the bytes are there: one authenticated peer opening
/// a thousand streams that each declare the largest payload (64 MiB) and send none of it must not make
/// the data server reserve 64 GiB, and the server keeps serving its other clients (and this one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_payloads_cost_nothing_until_they_arrive() {
    const STREAMS: usize = 1000;
    let mut cluster = Cluster::start(1);
    let cfg = cluster.client_config();
    let (_, ds_addr) = addrs(&cfg);
    let good = NodeIdentity::load(&cfg.tls).unwrap();
    let ep = rpc::client_endpoint(false).unwrap();
    let pid = cluster.pid("ds0").expect("data server running");
    let attacker = RpcPeer::new(ep.clone(), &good, Role::Ds, ds_addr, tuning()).unwrap();
    assert!(matches!(ds_ping(&attacker).await, Ok(DsReply::Pong { .. })));
    let conn = attacker.connection().await.expect("connect");
    let (rss0, vm0) = memory_of(pid);

    let tag = IoTag { origin: tessera_proto::Origin { job: "hog".into(), client: 7, pid: 1 }, ino: 1 };
    let write = DsCall::new(0, DsRequest::Write { tag, object: 1, offset: 0, sync: false });
    let head = tessera_proto::frame::encode_head(&write, tessera_proto::frame::MAX_PAYLOAD).unwrap();
    let mut held = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let (mut send, recv) = conn.open_bi().await.expect("open stream");
        send.write_all(&head).await.expect("send a header");
        held.push((send, recv));
    }
    // Let the server read every header and start waiting for the payloads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss1, vm1) = memory_of(pid);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "{STREAMS} streams declaring 64 MiB each: RSS {:.0} -> {:.0} MiB, VmSize {:.0} -> {:.0} MiB",
        mib(rss0),
        mib(rss1),
        mib(vm0),
        mib(vm1)
    );
    assert!(rss1.saturating_sub(rss0) < 128 << 20, "RSS grew by {:.0} MiB", mib(rss1.saturating_sub(rss0)));
    assert!(vm1.saturating_sub(vm0) < 1 << 30, "VmSize grew by {:.0} MiB", mib(vm1.saturating_sub(vm0)));

    // Other clients, and this connection's other streams, are still served.
    let fresh = RpcPeer::new(ep.clone(), &good, Role::Ds, ds_addr, tuning()).unwrap();
    assert!(matches!(ds_ping(&fresh).await, Ok(DsReply::Pong { .. })));
    assert!(matches!(ds_ping(&attacker).await, Ok(DsReply::Pong { .. })));
    drop(held);
    assert!(cluster.all_alive(), "the data server died");
}
