//! Forwarding nodes against real processes (`tessera-mds`, `tessera-ds`, `tessera-ion`): clients go
//! through their ION for metadata and data, the data servers see the programs (not the ION), an ION
//! refuses peers that are not clients and data servers refuse forwarded calls from anyone but an ION,
//! the scheduler switches at run time without losing data, and a client whose ION dies moves on.

use bytes::Bytes;
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_ops::clusterdir::Shape;
use tessera_proto::config::{ClusterConfig, Defaults};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{DsCall, DsReply, DsRequest, Forwarded, IonCall, IonReply, SchedulerSetting};
use tessera_proto::rpc::{self, RpcPeer, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{IoTag, Origin, Role};
use tessera_test_support::{check_batched_writes, connect, pattern, Cluster};

fn small_stripes() -> Defaults {
    Defaults { stripe_size: 65536, ..Defaults::default() }
}

/// A client going through forwarding node `ion` (by name), with `job`.
async fn client_via(cluster: &Cluster, ion: &str, job: &str) -> Client {
    let mut cfg = cluster.client_config();
    cfg.client.ion = Some(ion.to_string());
    connect(&cfg).await.with_job(job)
}

fn identity(cluster: &Cluster, role: Role, name: &str) -> NodeIdentity {
    let tls_dir = cluster.files.dir.join("tls");
    let ca = tessera_ops::ca::read_ca(&tls_dir).expect("cluster CA");
    NodeIdentity::load(&tessera_ops::ca::issue_to_dir(&tls_dir, &ca, role, name, &[]).expect("issue"))
        .expect("identity")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_go_through_their_forwarding_node_and_servers_see_the_programs() {
    let cluster = Cluster::start_shape(Shape { ds: 2, ion: 2, ..Shape::default() }, small_stripes());
    let c = client_via(&cluster, "ion1", "fwd-job").await;
    let data = pattern(7, 3 << 20);
    c.write_file("/through-ion", &data).await.unwrap();
    assert_eq!(c.read_file("/through-ion").await.unwrap(), data);
    c.mkdir("/d", 0o755).await.unwrap();
    assert_eq!(c.readdir("/").await.unwrap().iter().filter(|e| e.name == "d").count(), 1);

    let st = c.ion_status(1).await.unwrap();
    assert_eq!((st.name.as_str(), st.scheduler.as_str()), ("ion1", "fifo"));
    assert!(st.requests_forwarded >= 2 * 48, "3 MiB in 64 KiB stripes, written and read: {st:?}");
    assert!(st.bytes_forwarded >= 6 << 20, "{st:?}");
    assert!(st.metadata_calls > 0, "metadata goes through the ION too");
    assert_eq!(st.in_flight, 0, "nothing is at the data servers once every call returned");
    assert!(st.jobs.iter().any(|j| j.job == "fwd-job" && j.bytes >= 6 << 20), "{:?}", st.jobs);
    assert!(st.sizes_arriving.total() >= st.dispatched, "merging never adds requests");
    let idle = c.ion_status(0).await.unwrap();
    assert_eq!(idle.requests_forwarded, 0, "ion0 carried none of this client's requests");

    // The data servers count the program's job, and the requests as forwarded.
    let mut forwarded = 0;
    for ds in c.ds_ids() {
        let r = c.data().report(ds).await.unwrap();
        assert!(r.jobs.iter().any(|j| j.job == "fwd-job"), "ds {ds} sees the job: {:?}", r.jobs);
        forwarded += r.forwarded_client_requests;
    }
    assert_eq!(forwarded, st.requests_forwarded, "every client request reached a server through the ION");

    // Direct access still works beside it (TESSERA_ION=none's setting).
    let mut cfg = cluster.client_config();
    cfg.client.ion = Some("none".into());
    let direct = connect(&cfg).await;
    assert_eq!(direct.read_file("/through-ion").await.unwrap(), data);
    let after = c.ion_status(1).await.unwrap().requests_forwarded;
    assert_eq!(after, st.requests_forwarded, "the direct client's reads did not pass through ion1");

    // A batch of scattered writes: the ION schedules each run as a write of its own.
    let before = c.ion_status(1).await.unwrap().requests_forwarded;
    check_batched_writes(&c, "/batched-through-ion", 9).await;
    let after = c.ion_status(1).await.unwrap().requests_forwarded;
    assert!(after - before >= 300, "every run went through ion1's scheduler: {before} -> {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedulers_switch_at_run_time_without_losing_data() {
    let cluster = Cluster::start_shape(Shape { ds: 2, ion: 1, ..Shape::default() }, small_stripes());
    let c = client_via(&cluster, "ion0", "switching").await;
    let data = pattern(3, 4 << 20);
    let f = c.create("/switched", 0o644, None).await.unwrap();
    let names = ["hbrr", "to", "to-agg", "sjf", "mlf", "sw", "twins", "fifo"];
    let chunk = data.len() / names.len();
    for (i, name) in names.iter().enumerate() {
        let part = &data[i * chunk..(i + 1) * chunk];
        f.write_at((i * chunk) as u64, Bytes::copy_from_slice(part)).await.unwrap();
        let setting = SchedulerSetting { name: name.to_string(), window_us: Some(250), quantum: Some(4) };
        let st = c.set_ion_scheduler(0, setting).await.unwrap();
        assert_eq!(st.scheduler, *name);
    }
    f.close().await.unwrap();
    assert_eq!(c.read_file("/switched").await.unwrap(), data);
    let st = c
        .set_ion_scheduler(0, SchedulerSetting { name: "twins".into(), window_us: Some(125), ..Default::default() })
        .await
        .unwrap();
    assert_eq!((st.window_us, st.quantum), (125, 4), "unset values are kept");
    assert_eq!(c.read_file("/switched").await.unwrap(), data, "reads under TWINS");
    let e = c.set_ion_scheduler(0, SchedulerSetting { name: "lifo".into(), ..Default::default() }).await.unwrap_err();
    assert!(e.detail.contains("unknown scheduler"), "{e}");
    // A non-root caller with a client certificate may not switch.
    let user = client_via(&cluster, "ion0", "switching").await.with_caller(tessera_proto::Caller {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    });
    let e =
        user.set_ion_scheduler(0, SchedulerSetting { name: "fifo".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Perm, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarding_nodes_and_data_servers_check_roles() {
    let cluster = Cluster::start_shape(Shape { ds: 1, ion: 1, ..Shape::default() }, Defaults::default());
    let cfg: ClusterConfig = cluster.client_config();
    let ion_addr = rpc::resolve(&cfg.ion[0].addr).unwrap();
    let ds_addr = rpc::resolve(&cfg.ds[0].addr).unwrap();
    let tuning = Tuning { call_timeout: Duration::from_secs(10), ..Tuning::default() };
    let ep = rpc::client_endpoint(false).unwrap();
    // A data server's certificate is not a client's: the ION refuses it.
    let ds_id = identity(&cluster, Role::Ds, "rogue-ds");
    let peer = RpcPeer::new(ep.clone(), &ds_id, Role::Ion, ion_addr, tuning).unwrap();
    assert!(peer.call::<IonCall, IonReply>(&IonCall::Status, Bytes::new()).await.is_err());
    // A client may not pass a call on as if it were a forwarding node.
    let client_id = identity(&cluster, Role::Client, "sneaky");
    let peer = RpcPeer::new(ep.clone(), &client_id, Role::Ds, ds_addr, tuning).unwrap();
    let tag = IoTag { origin: Origin { job: "j".into(), client: 1, pid: 1 }, ino: 1 };
    let call = DsCall {
        via: Some(Forwarded { ion: 0, requests: 1 }),
        ..DsCall::new(0, DsRequest::Read { tag, object: 1, offset: 0, len: 10 })
    };
    let e = peer.call::<DsCall, DsReply>(&call, Bytes::new()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Perm, "{e}");
    // Bad input to the ION: an error reply, and it keeps serving.
    let peer = RpcPeer::new(ep.clone(), &client_id, Role::Ion, ion_addr, tuning).unwrap();
    let bad = IonCall::Ds { call: DsCall::new(7, DsRequest::Ping), app_len: 0 };
    let e = peer.call::<IonCall, IonReply>(&bad, Bytes::new()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid, "unknown data server: {e}");
    let tag = IoTag { origin: Origin { job: "x".repeat(4096), client: 1, pid: 1 }, ino: 1 };
    let long_job =
        IonCall::Ds { call: DsCall::new(0, DsRequest::Read { tag, object: 1, offset: 0, len: 1 }), app_len: 1 };
    assert_eq!(peer.call::<IonCall, IonReply>(&long_job, Bytes::new()).await.unwrap_err().code, ErrorCode::Invalid);
    let tag = IoTag { origin: Origin::default(), ino: 1 };
    let past_end = DsRequest::Read { tag, object: 1, offset: u64::MAX, len: 10 };
    let past_end = IonCall::Ds { call: DsCall::new(0, past_end), app_len: 0 };
    assert_eq!(peer.call::<IonCall, IonReply>(&past_end, Bytes::new()).await.unwrap_err().code, ErrorCode::Invalid);
    let remove = IonCall::Ds { call: DsCall::new(0, DsRequest::Remove { objects: vec![1] }), app_len: 0 };
    assert_eq!(peer.call::<IonCall, IonReply>(&remove, Bytes::new()).await.unwrap_err().code, ErrorCode::Perm);
    assert!(matches!(
        peer.call::<IonCall, IonReply>(&IonCall::Status, Bytes::new()).await,
        Ok((IonReply::Status(_), _))
    ));
    let mut cluster = cluster;
    assert!(cluster.all_alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_forwarding_node_dies_moves_on() {
    let mut cluster = Cluster::start_shape(Shape { ds: 2, ion: 2, ..Shape::default() }, small_stripes());
    let c = client_via(&cluster, "ion0", "failover").await;
    let data = pattern(5, 1 << 20);
    c.write_file("/before", &data).await.unwrap();
    assert!(c.ion_status(0).await.unwrap().requests_forwarded > 0);
    cluster.kill9_ion(0);
    let t = Instant::now();
    assert_eq!(c.read_file("/before").await.unwrap(), data, "read after the ION died");
    let took = t.elapsed();
    assert!(took < Duration::from_secs(15), "failover took {took:?}");
    c.write_file("/after", &data).await.unwrap();
    assert_eq!(c.read_file("/after").await.unwrap(), data);
    let st = c.ion_status(1).await.unwrap();
    assert!(st.requests_forwarded > 0, "the client moved to ion1: {st:?}");
    assert_eq!(c.data().route().forwarding().and_then(|f| f.current_name()), Some("ion1"));
    // With both gone, the configuration allows direct access (the default).
    cluster.kill9_ion(1);
    assert_eq!(c.read_file("/after").await.unwrap(), data, "direct after both died");
    assert_eq!(c.data().route().forwarding().and_then(|f| f.current_name()), None);
}

/// The mount works through a forwarding node unchanged: files written and read back through it, the
/// metadata and the data visible in the ION's counters.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn a_mount_goes_through_its_forwarding_node() {
    use std::process::Command;
    tessera_test_support::mount::require_fuse();
    let cluster = Cluster::start_shape(Shape { ds: 2, ion: 2, ..Shape::default() }, small_stripes());
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut fuse = tessera_test_support::cluster::spawn_ready(
        "tessera-fuse via ion1",
        Command::new(tessera_test_support::bin("tessera-fuse"))
            .arg(&mnt)
            .arg("--config")
            .arg(&cluster.files.client_config)
            .env("TESSERA_ION", "ion1"),
        &cluster.log("fuse-ion1"),
    );
    let data = pattern(11, 5 << 20);
    std::fs::create_dir(mnt.join("sub")).unwrap();
    std::fs::write(mnt.join("sub/f"), &data).unwrap();
    assert_eq!(std::fs::read(mnt.join("sub/f")).unwrap(), data);
    assert_eq!(std::fs::read_dir(mnt.join("sub")).unwrap().count(), 1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (st0, st1) = rt.block_on(async {
        let c = client_via(&cluster, "ion0", "probe").await;
        let st = (c.ion_status(0).await.unwrap(), c.ion_status(1).await.unwrap());
        // What the mount wrote is there for a direct client too.
        let mut cfg = cluster.client_config();
        cfg.client.ion = Some("none".into());
        assert_eq!(connect(&cfg).await.read_file("/sub/f").await.unwrap(), data);
        st
    });
    assert!(st1.metadata_calls > 0 && st1.bytes_forwarded >= 5 << 20, "the mount went through ion1: {st1:?}");
    assert_eq!(st0.requests_forwarded, 0, "and not through ion0");
    let st = fuse.stop(Duration::from_secs(15));
    assert!(!st.killed, "tessera-fuse exited on SIGTERM");
    if let Ok(c) = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()) {
        // SAFETY: a valid path; failure (not mounted any more) is fine.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}
