//! The metadata server over real QUIC + mutual TLS: config loading, role checks, a data server
//! receiving truncates and removals from the MDS, and create throughput with two clients.

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::*;
use tessera_proto::rpc::{self, PeerInfo, RpcPeer, Service};
use tessera_proto::{Caller, FileKind, FsResult, Role, ROOT_INO};
use tessera_test_support::TestCa;

/// A minimal data server that records what the MDS asks of it.
#[derive(Default)]
struct RecordingDs {
    calls: Mutex<Vec<DsRequest>>,
}

impl Service for RecordingDs {
    type Request = DsCall;
    type Reply = DsReply;
    fn accepts(&self, role: Role) -> bool {
        role == Role::Mds
    }
    async fn handle(&self, _peer: Arc<PeerInfo>, call: DsCall, _p: Bytes) -> (FsResult<DsReply>, Bytes) {
        let req = call.req;
        self.calls.lock().unwrap().push(req);
        (Ok(DsReply::Ok), Bytes::new())
    }
}

struct Cluster {
    mds: SocketAddr,
    ds: Arc<RecordingDs>,
    ca: TestCa,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start() -> Cluster {
    let ca = TestCa::new("test");
    let dir = &ca.dir;
    let ds_id = ca.identity(Role::Ds, "ds0");
    let ds_ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &ds_id, &Default::default()).unwrap();
    let ds_addr = ds_ep.local_addr().unwrap();
    let ds = Arc::new(RecordingDs::default());
    tokio::spawn(rpc::serve(ds_ep, ds.clone(), ds_id.crl.clone()));
    ca.issue(Role::Mds, "mds");
    let cfg = format!(
        "[mds]\naddr = \"127.0.0.1:0\"\ndata_dir = \"db\"\n\n[[ds]]\nid = 0\naddr = \"{ds_addr}\"\n\n[[ds]]\nid = 1\naddr = \"127.0.0.1:9\"\n\n[defaults]\nstripe_size = 65536\nstripe_count = 1\n\n[tls]\nca = \"ca.pem\"\ncert = \"mds.pem\"\nkey = \"mds.key\"\n"
    );
    std::fs::write(dir.path().join("mds.toml"), cfg).unwrap();
    let opts = tessera_mds::Options {
        config: tessera_ops::daemon::ConfigArgs::file(dir.path().join("mds.toml")),
        data_dir: None,
        listen: None,
        skip_corrupt_journal: false,
        replica: None,
    };
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tessera_mds::run(
        opts,
        move |addr| {
            let _ = ready_tx.send(addr);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let mds = tokio::time::timeout(Duration::from_secs(20), ready_rx).await.unwrap().unwrap();
    Cluster { mds, ds, ca, stop: Some(stop_tx), server }
}

fn client(c: &Cluster, role: Role, name: &str) -> RpcPeer {
    let id = c.ca.identity(role, name);
    let ep = rpc::client_endpoint(false).unwrap();
    RpcPeer::new(ep, &id, Role::Mds, c.mds, Default::default()).unwrap()
}

async fn call(p: &RpcPeer, caller: &Caller, req: MdsRequest) -> FsResult<MdsReply> {
    p.call::<MdsCall, MdsReply>(
        &MdsCall { caller: caller.clone(), origin: Default::default(), req, seq: 0 },
        Bytes::new(),
    )
    .await
    .map(|(r, _)| r)
}

fn create(name: String) -> MdsRequest {
    MdsRequest::Create {
        parent: ROOT_INO,
        name,
        kind: FileKind::File,
        perm: 0o644,
        umask: 0,
        rdev: 0,
        exclusive: true,
        layout: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_clients_reaches_data_servers_and_shuts_down() {
    let mut c = start().await;
    let me = Caller::current_process();
    let cl = client(&c, Role::Client, "c1");
    assert_eq!(
        call(&cl, &me, MdsRequest::Ping).await.unwrap(),
        MdsReply::Pong { version: tessera_proto::PROTOCOL_VERSION }
    );

    // Only data servers report; data servers may do nothing else.
    let rep = DsReport { ds: 0, capacity: 1 << 30, free: 1 << 29, ..Default::default() };
    assert_eq!(call(&cl, &me, MdsRequest::DsReport(Box::new(rep.clone()))).await.unwrap_err().code, ErrorCode::Perm);
    let dsc = client(&c, Role::Ds, "ds0-as-client");
    call(&dsc, &me, MdsRequest::DsReport(Box::new(rep))).await.unwrap();
    assert_eq!(call(&dsc, &me, MdsRequest::StatFs).await.unwrap_err().code, ErrorCode::Perm);
    match call(&cl, &me, MdsRequest::StatFs).await.unwrap() {
        MdsReply::StatFs(s) => assert_eq!(s.blocks, (1 << 30) / 4096),
        o => panic!("{o:?}"),
    }

    // Truncate goes to the data server holding the stripe; unlink destroys the objects.
    let mut on_ds0 = None;
    for i in 0..2 {
        let (attr, layout) = match call(&cl, &me, create(format!("t{i}"))).await.unwrap() {
            MdsReply::Entry { attr, layout } => (attr, layout.unwrap()),
            o => panic!("{o:?}"),
        };
        if layout.targets[0].ds == 0 {
            on_ds0 = Some((format!("t{i}"), attr, layout));
        }
    }
    let (name, attr, layout) = on_ds0.expect("round-robin puts one of two files on ds 0");
    let set = SetAttrs { size: Some(100_000), ..Default::default() };
    let a = call(&cl, &me, MdsRequest::SetAttr { ino: attr.ino, set }).await.unwrap();
    assert!(matches!(a, MdsReply::Attr(a) if a.size == 100_000));
    let obj = layout.targets[0].object;
    assert!(c.ds.calls.lock().unwrap().contains(&DsRequest::Truncate { object: obj, size: 100_000 }));
    call(&cl, &me, MdsRequest::Unlink { parent: ROOT_INO, name }).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.ds.calls.lock().unwrap().contains(&DsRequest::Remove { objects: vec![obj] }) {
        assert!(Instant::now() < deadline, "objects never removed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The other data server is down: a truncate there fails cleanly.
    let other = call(&cl, &me, MdsRequest::LookupPath { path: "/t0".into(), follow: true }).await;
    if let Ok(MdsReply::Entry { attr, layout: Some(l) }) = other {
        if l.targets[0].ds == 1 {
            let set = SetAttrs { size: Some(1), ..Default::default() };
            let e = call(&cl, &me, MdsRequest::SetAttr { ino: attr.ino, set }).await.unwrap_err();
            assert!(matches!(e.code, ErrorCode::Unavailable | ErrorCode::TimedOut | ErrorCode::Io), "{e}");
        }
    }

    // Two clients creating concurrently.
    let n = 1000;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..2 {
        let p = Arc::new(client(&c, Role::Client, &format!("bench{k}")));
        let me = me.clone();
        tasks.push(tokio::spawn(async move {
            let mut inner = Vec::new();
            for lane in 0..16 {
                let p = p.clone();
                let me = me.clone();
                inner.push(tokio::spawn(async move {
                    for i in (lane..n / 2).step_by(16) {
                        call(&p, &me, create(format!("c{k}-{i}"))).await.unwrap();
                    }
                }));
            }
            for t in inner {
                t.await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    eprintln!("{n} creates from 2 clients in {secs:.2}s = {:.0}/s", n as f64 / secs);
    match call(&cl, &me, MdsRequest::GetAttr { ino: ROOT_INO }).await.unwrap() {
        MdsReply::Attr(a) => assert_eq!(a.size, n as u64 + 1),
        o => panic!("{o:?}"),
    }

    let _ = c.stop.take().unwrap().send(());
    tokio::time::timeout(Duration::from_secs(10), &mut c.server).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn refuses_a_certificate_without_role_mds() {
    let ca = TestCa::new("test");
    let dir = &ca.dir;
    ca.issue(Role::Client, "mds");
    let cfg = "[mds]\naddr = \"127.0.0.1:0\"\ndata_dir = \"db\"\n[tls]\nca = \"ca.pem\"\ncert = \"mds.pem\"\nkey = \"mds.key\"\n";
    std::fs::write(dir.path().join("c.toml"), cfg).unwrap();
    let opts = tessera_mds::Options {
        config: tessera_ops::daemon::ConfigArgs::file(dir.path().join("c.toml")),
        data_dir: None,
        listen: None,
        skip_corrupt_journal: false,
        replica: None,
    };
    let e = tessera_mds::run(opts, |_| panic!("must not start"), async {}).await.unwrap_err();
    assert!(e.to_string().contains("role client"), "{e}");
}

/// Over the network: a create sent twice with one client number (`MdsCall::seq`), as a client resends
/// after a lost reply, is applied once and answered twice with the first answer; without a number the
/// second is EEXIST. Numbers only count for the request kinds whose replies are kept (a lookup's is not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numbered_create_sent_twice_is_applied_once() {
    let mut c = start().await;
    let me = Caller::current_process();
    let cl = client(&c, Role::Client, "c1");
    let origin = tessera_proto::Origin { job: "j".into(), client: 0x5eed, pid: 1 };
    let send = |req: MdsRequest, seq: u64| {
        let call = MdsCall { caller: me.clone(), origin: origin.clone(), req, seq };
        let cl = &cl;
        async move { cl.call::<MdsCall, MdsReply>(&call, Bytes::new()).await.map(|(r, _)| r) }
    };
    let first = send(create("once".into()), 1).await.unwrap();
    assert!(matches!(first, MdsReply::Entry { .. }), "{first:?}");
    assert_eq!(send(create("once".into()), 1).await.unwrap(), first);
    assert_eq!(send(create("once".into()), 0).await.unwrap_err().code, ErrorCode::Exists);
    assert_eq!(send(create("once".into()), 2).await.unwrap_err().code, ErrorCode::Exists);
    let _ = c.stop.take().unwrap().send(());
}
