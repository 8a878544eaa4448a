//! The orchestrator end to end over real QUIC + mutual TLS: six in-test data servers record the serve
//! commands the MDS sends them while a data-server identity feeds locality reports for two programs
//! (one sequential like mpi-io-test, one like ior-mpi-io whose own gaps are as large as the mixed
//! stream's). Checks eligibility, dedicated slices on all six, run-time mode switch, skew, metrics.

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::*;
use tessera_proto::rpc::{self, PeerInfo, RpcPeer, Service};
use tessera_proto::{Caller, FsResult, Role};
use tessera_test_support::TestCa;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A data server that applies nothing but answers serve commands like a real one.
#[derive(Default)]
struct SwitchingDs {
    serves: Mutex<Vec<ServeCommand>>,
}

impl Service for SwitchingDs {
    type Request = DsCall;
    type Reply = DsReply;
    fn accepts(&self, role: Role) -> bool {
        role == Role::Mds
    }
    async fn handle(&self, _peer: Arc<PeerInfo>, call: DsCall, _p: Bytes) -> (FsResult<DsReply>, Bytes) {
        let req = call.req;
        match req {
            DsRequest::Serve(cmd) => {
                let at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64;
                let epoch = cmd.epoch;
                self.serves.lock().unwrap().push(cmd);
                (Ok(DsReply::Switched { epoch, at_unix_us: at }), Bytes::new())
            }
            _ => (Ok(DsReply::Ok), Bytes::new()),
        }
    }
}

impl SwitchingDs {
    fn count(&self, f: impl Fn(&ServeTarget) -> bool) -> usize {
        self.serves.lock().unwrap().iter().filter(|c| f(&c.target)).count()
    }
}

fn peer(ca: &TestCa, mds: SocketAddr, role: Role, name: &str) -> RpcPeer {
    let id = ca.identity(role, name);
    RpcPeer::new(rpc::client_endpoint(false).unwrap(), &id, Role::Mds, mds, Default::default()).unwrap()
}

async fn call(p: &RpcPeer, caller: &Caller, req: MdsRequest) -> FsResult<MdsReply> {
    p.call::<MdsCall, MdsReply>(
        &MdsCall { caller: caller.clone(), origin: Default::default(), req, seq: 0 },
        Bytes::new(),
    )
    .await
    .map(|(r, _)| r)
}

async fn status(p: &RpcPeer) -> OrchestratorStatus {
    match call(p, &Caller::current_process(), MdsRequest::OrchestratorStatus).await.unwrap() {
        MdsReply::Orchestrator(s) => s,
        r => panic!("{r:?}"),
    }
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What data server `ds` would report: a 2 GiB mixed-stream gap, a sequential and a strided program.
fn report(ds: u32) -> LocalityReport {
    let wobble = 1.0 + 0.02 * f64::from(ds % 3);
    LocalityReport {
        ds,
        sl: 2e9 * wobble,
        seek_time_us: 8500.0,
        jobs: vec![
            JobLocality {
                job: "mpi-io-test".into(),
                sl: 4096.0 * f64::from(ds % 2),
                requests: 40,
                bytes: 40 << 16,
                ..Default::default()
            },
            JobLocality {
                job: "ior-mpi-io".into(),
                sl: 1.9e9 * wobble,
                requests: 40,
                bytes: 40 << 16,
                ..Default::default()
            },
        ],
        others_rd_us: None,
        epoch: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eligible_program_gets_dedicated_slices_on_all_servers() {
    let ca = TestCa::new("test");
    let dir = &ca.dir;
    let mut servers = Vec::new();
    let mut ds_cfg = String::new();
    for i in 0..6 {
        let id = ca.identity(Role::Ds, &format!("ds{i}"));
        let ep = rpc::server_endpoint("127.0.0.1:0".parse().unwrap(), &id, &Default::default()).unwrap();
        ds_cfg.push_str(&format!("[[ds]]\nid = {i}\naddr = \"{}\"\n\n", ep.local_addr().unwrap()));
        let ds = Arc::new(SwitchingDs::default());
        tokio::spawn(rpc::serve(ep, ds.clone(), id.crl.clone()));
        servers.push(ds);
    }
    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    ca.issue(Role::Mds, "mds");
    let cfg = format!(
        "[mds]\naddr = \"127.0.0.1:0\"\ndata_dir = \"db\"\n\n{ds_cfg}[orchestrator]\nwindow_ms = 200\nreport_interval_ms = 100\n\n[metrics]\nmds_addr = \"{metrics_addr}\"\n\n[tls]\nca = \"ca.pem\"\ncert = \"mds.pem\"\nkey = \"mds.key\"\n"
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
    let mut server = tokio::spawn(tessera_mds::run(
        opts,
        move |addr| {
            let _ = ready_tx.send(addr);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let mds = tokio::time::timeout(Duration::from_secs(20), ready_rx).await.unwrap().unwrap();
    let user = Caller { uid: 1000, gid: 1000, groups: vec![] };
    let cl = peer(&ca, mds, Role::Client, "c1");

    // Only data servers report locality.
    let e = call(&cl, &user, MdsRequest::LocalityReport(report(0))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Perm);

    // Locality monitors report every 100 ms.
    let reporter = Arc::new(peer(&ca, mds, Role::Ds, "ds-reporter"));
    let feeding = {
        let reporter = reporter.clone();
        tokio::spawn(async move {
            loop {
                for ds in 0..6 {
                    let r = call(&reporter, &Caller::root(), MdsRequest::LocalityReport(report(ds))).await;
                    assert_eq!(r.unwrap(), MdsReply::Ok);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // The sequential program gets dedicated slices on all six servers; the other one never does.
    let seq = ServeTarget::Job("mpi-io-test".into());
    wait_for("dedicated slices on every server", || servers.iter().all(|s| s.count(|t| *t == seq) >= 3)).await;
    let others = ServeTarget::Others { eligible: vec!["mpi-io-test".into()] };
    for s in &servers {
        assert!(s.count(|t| *t == others) >= 2);
        assert_eq!(s.count(|t| *t == ServeTarget::Job("ior-mpi-io".into())), 0);
        let cmds = s.serves.lock().unwrap();
        assert!(cmds.windows(2).all(|w| w[0].epoch < w[1].epoch), "epochs increase");
        assert!(cmds.iter().all(|c| c.fallback_ms == 400));
    }
    let st = status(&cl).await;
    assert_eq!((st.mode, st.window_ms), (OrchestratorMode::IOrchestrator, 200));
    assert_eq!(st.servers.len(), 6);
    let job = |name: &str| st.jobs.iter().find(|j| j.job == name).unwrap().clone();
    let (a, b) = (job("mpi-io-test"), job("ior-mpi-io"));
    assert!(a.eligible && a.slice_share > 0.0 && a.servers.len() == 6, "{a:?}");
    assert!(!b.eligible && b.slice_share == 0.0 && b.reason.contains("(2:"), "{b:?}");
    assert_eq!(st.plan.len(), 2);
    assert!((st.plan.iter().map(|s| s.slice_ms).sum::<f64>() - 200.0).abs() < 1e-6);
    assert!(st.last_switch_skew_us.is_some() && st.median_switch_skew_us.is_some(), "{st:?}");
    eprintln!("switch skew: last {:?} µs, median {:?} µs", st.last_switch_skew_us, st.median_switch_skew_us);
    assert!(st.windows_run >= 3);

    // Prometheus endpoint.
    let mut s = tokio::net::TcpStream::connect(metrics_addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: mds\r\n\r\n").await.unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).await.unwrap();
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("tessera_orchestrator_job_eligible{job=\"mpi-io-test\"} 1"), "{page}");
    assert!(page.contains("tessera_orchestrator_job_eligible{job=\"ior-mpi-io\"} 0"), "{page}");
    assert!(page.lines().any(|l| l.starts_with("tessera_mds_requests_total{type=\"LocalityReport\"} ")), "{page}");

    // Mode switch: a plain user may not; the admin may. Then every server is told `All`.
    let set = |mode| MdsRequest::SetOrchestratorMode { mode };
    let e = call(&cl, &user, set(OrchestratorMode::Off)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Perm);
    let admin = peer(&ca, mds, Role::Admin, "admin");
    assert_eq!(call(&admin, &user, set(OrchestratorMode::Off)).await.unwrap(), MdsReply::Ok);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let marks: Vec<usize> = servers.iter().map(|s| s.serves.lock().unwrap().len()).collect();
    wait_for("All commands after the switch", || {
        servers.iter().zip(&marks).all(|(s, m)| s.serves.lock().unwrap().len() >= m + 2)
    })
    .await;
    for (s, m) in servers.iter().zip(&marks) {
        let cmds = s.serves.lock().unwrap();
        assert!(cmds[*m..].iter().all(|c| c.target == ServeTarget::All), "{:?}", &cmds[*m..]);
    }
    let st = status(&cl).await;
    assert_eq!(st.mode, OrchestratorMode::Off);
    assert_eq!(st.plan.len(), 1);
    assert!(st.jobs.iter().all(|j| j.slice_share == 0.0));

    // Back on, by a root caller with a client certificate.
    assert_eq!(call(&cl, &Caller::root(), set(OrchestratorMode::Even)).await.unwrap(), MdsReply::Ok);
    let before = servers[0].count(|t| *t == seq);
    wait_for("dedicated slices again", || servers[0].count(|t| *t == seq) > before).await;

    feeding.abort();
    let _ = stop_tx.send(());
    tokio::time::timeout(Duration::from_secs(10), &mut server).await.unwrap().unwrap().unwrap();
    // At shutdown the servers are released to work-conserving service.
    for s in &servers {
        assert_eq!(s.serves.lock().unwrap().last().unwrap().target, ServeTarget::All);
    }
}
