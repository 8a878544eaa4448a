//! Metadata failover (issue 37) with real processes: three metadata replicas, the leader killed with
//! SIGKILL (or paused with SIGSTOP) while mdtest iterations and a probe run (`tessera-bench failover`):
//! no mdtest error (a create lost, or applied twice by a resend, fails it), no probe error, fsck clean,
//! and a paused old leader refuses a write sent straight to it after SIGCONT and ends by itself; files
//! held open and unlinked across the kills read back intact and go at their last close.

use std::process::Command;
use tessera_test_support::bin;

/// Runs `tessera-bench failover ARGS` in a temporary directory; its JSON results and its output.
fn failover(args: &[&str]) -> (serde_json::Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("failover.json");
    let dir = tmp.path().join("work");
    let out = Command::new(bin("tessera-bench"))
        .arg("failover")
        .args(args)
        .args(["--dir", dir.to_str().unwrap(), "--json", json.to_str().unwrap()])
        .args(["--every-s", "2", "--down-s", "1", "--tasks", "2", "--files", "300", "--seed", "5"])
        .output()
        .expect("tessera-bench runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tessera-bench failover failed:\n{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, text)
}

/// What every run must show: each kill answered by another replica serving, nothing lost or doubled.
fn check(v: &serde_json::Value, kills: usize, out: &str) {
    let k = v["kills"].as_array().unwrap();
    assert_eq!(k.len(), kills, "{out}");
    for kill in k {
        assert_ne!(kill["victim"], kill["new_leader"], "{out}");
        assert!(kill["gap_s"].as_f64().unwrap() < 30.0, "{out}");
    }
    assert!(v["mdtest_iterations"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(v["mdtest_errors"].as_array().unwrap().len(), 0, "{out}");
    assert_eq!(v["probe_errors"], 0, "{out}");
    assert!(v["probe_ops"].as_u64().unwrap() > 10, "{out}");
    assert_eq!(v["probe_left"], 0, "{out}");
    assert_eq!(v["fsck_findings"], 0, "{out}");
    // A file held open and unlinked before each kill lives on through the failovers (its holder
    // reasserted the handle within the new leader's grace period) and goes at its last close.
    assert_eq!(v["held_files"], kills, "{out}");
    assert_eq!(v["held_files_lost"], 0, "{out}");
    assert_eq!(v["held_files_leaked"], 0, "{out}");
}

#[test]
fn killing_the_metadata_leader_under_mdtest_loses_nothing() {
    let (v, out) = failover(&["--kills", "2"]);
    check(&v, 2, &out);
}

#[test]
fn a_paused_metadata_leader_refuses_writes_once_another_leads() {
    let (v, out) = failover(&["--kills", "1", "--pause"]);
    check(&v, 1, &out);
    let k = &v["kills"][0];
    assert_eq!(k["stale_write_accepted"], false, "{out}");
    assert!(k["deposed_exit_s"].as_f64().is_some_and(|s| s < 30.0), "the old leader did not end by itself: {out}");
    assert_eq!(v["stale_writes_accepted"], 0, "{out}");
}

#[test]
#[cfg_attr(not(all(tessera_fuse, tessera_root)), ignore = "needs /dev/fuse and root")]
fn killing_the_metadata_leader_under_mdtest_through_a_mount_loses_nothing() {
    let (v, out) = failover(&["--kills", "1", "--mount"]);
    check(&v, 1, &out);
    assert_eq!(v["api"], "posix (FUSE mount)", "{out}");
}

/// `tessera --config CFG ARGS`: its stdout; fails the test if it fails.
fn tessera(cfg: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(bin("tessera")).arg("--config").arg(cfg).args(args).output().expect("tessera runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tessera {args:?} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tessera mds status --json`'s rows.
fn replica_rows(admin: &std::path::Path) -> Vec<serde_json::Value> {
    serde_json::from_str::<serde_json::Value>(&tessera(admin, &["mds", "status", "--json"]))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Replacing a lost replica without stopping the service (issue 37's membership): of three replicas,
/// one is killed (-9) and its directory wiped; a new replica at an address no configuration of the
/// others lists joins (`tessera mds add`: a learner that catches up, then a voter) and the lost one is
/// removed (`tessera mds remove`), while a client keeps creating files. The new replica then counts:
/// the leader is killed too, and the two left of the three members (one of them the new one) elect a
/// leader the client finds, although its configuration names only the original three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_replica_is_replaced_by_a_new_one_at_another_address_while_the_service_runs() {
    use tessera_client::{Client, ClusterConfig, Defaults};
    use tessera_ops::cluster::LocalCluster;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let shape = tessera_ops::clusterdir::Shape { mds: 3, ds: 1, ..Default::default() };
    let mut lc = LocalCluster::prepare(&dir, shape, 0, Defaults::default()).unwrap().with_binaries(|n| Ok(bin(n)));
    lc.start_all().await.unwrap();
    let files = lc.files.clone();
    let c = Client::connect(&ClusterConfig::load(&files.client_config).unwrap()).await.unwrap();
    c.mkdir("/d", 0o755).await.unwrap();
    let mut made = 0usize;
    let mut create = |n: usize| {
        let c = &c;
        let from = made;
        made += n;
        async move {
            for i in from..from + n {
                let f = c.create(&format!("/d/f{i}"), 0o644, None).await.unwrap();
                f.write_at(0, bytes::Bytes::from(format!("file {i}"))).await.unwrap();
                f.close().await.unwrap();
            }
        }
    };
    create(50).await;

    // Replica 3 is lost with its disk.
    lc.kill9("mds2").unwrap();
    std::fs::remove_dir_all(dir.join("mds2")).unwrap();
    create(20).await;

    // Its replacement: replica 4, at a new address, in a configuration only it has.
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut cfg = ClusterConfig::load(&files.mds_config).unwrap();
    cfg.mds.push(tessera_proto::config::MdsNode::new(Some("mds3".into()), addr.clone(), Some("mds3".into())));
    let new_cfg = dir.join("mds3.toml");
    cfg.save(&new_cfg).unwrap();
    std::fs::create_dir_all(dir.join("mds3")).unwrap();
    let mut cmd = Command::new(bin("tessera-mds"));
    cmd.arg("--config").arg(&new_cfg).args(["--replica", "4"]);
    let mut new = tessera_ops::child::spawn("mds3", &mut cmd, Some(&dir.join("logs/mds3.log"))).unwrap();
    new.ready(std::time::Duration::from_secs(60)).await.unwrap();

    // Added while the client goes on creating.
    let admin = files.admin_config.clone();
    let (a, add_out) = (admin.clone(), addr.clone());
    let adding = std::thread::spawn(move || tessera(&a, &["mds", "add", "4", &add_out]));
    create(100).await;
    let out = adding.join().unwrap();
    assert!(out.contains("metadata replica 4 votes now"), "{out}");
    let out = tessera(&admin, &["mds", "remove", "3"]);
    assert!(out.contains("removed"), "{out}");
    create(20).await;

    // The status shows the new member (an address the admin configuration does not list) as a voter,
    // holding the leader's log, and the lost one gone from the membership.
    let rows = replica_rows(&admin);
    let new_row = rows.iter().find(|r| r["addr"] == addr.as_str()).unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(new_row["id"], 4, "{rows:?}");
    assert_eq!(new_row["voter"], true, "{rows:?}");
    assert!(new_row["role"] == "follower" || new_row["role"] == "leader", "{rows:?}");
    let lost = rows.iter().find(|r| r["name"] == "mds2").unwrap();
    assert_eq!(lost["role"], "unreachable", "{rows:?}");
    assert!(lost["voter"].is_null(), "still a member: {rows:?}");

    // The leader is killed: of the members {1, 2, 4} the two left elect one.
    let leader = rows.iter().find(|r| r["role"] == "leader").unwrap_or_else(|| panic!("no leader: {rows:?}"));
    match leader["id"].as_u64() {
        Some(4) => drop(new.kill()),
        Some(id) => lc.kill9(&format!("mds{}", id - 1)).unwrap(),
        None => panic!("{rows:?}"),
    }
    create(20).await;
    for i in 0..made {
        let got = c.read_file(&format!("/d/f{i}")).await.unwrap();
        assert_eq!(got, format!("file {i}").into_bytes(), "/d/f{i}");
    }
    assert_eq!(c.readdir("/d").await.unwrap().len(), made);
    drop(new);
    lc.stop().await;
}

/// File locks (issue 42) across a failover: client A holds a lock; the leading replica is killed; the
/// replica that leads next has an empty lock table, so until A has reasserted its lock (at its next
/// keep-alive) no new lock is granted, and afterwards A's lock is there: client B never gets it, before,
/// during or after the failover. Then A's close releases it at the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_locks_survive_a_failover_without_being_granted_twice() {
    use tessera_client::proto::locks::{LockKind, LockType};
    use tessera_client::{Client, ClusterConfig, Defaults, ErrorCode, OpenOptions};
    use tessera_ops::cluster::LocalCluster;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let shape = tessera_ops::clusterdir::Shape { mds: 3, ds: 1, ..Default::default() };
    let mut lc = LocalCluster::prepare(&dir, shape, 0, Defaults::default()).unwrap().with_binaries(|n| Ok(bin(n)));
    let mut cfg = ClusterConfig::load(&lc.files.mds_config).unwrap();
    for m in &mut cfg.mds {
        m.eviction_timeout_s = 3;
    }
    cfg.save(&lc.files.mds_config).unwrap();
    lc.start_all().await.unwrap();
    let client_cfg = ClusterConfig::load(&lc.files.client_config).unwrap();
    let a = Client::connect(&client_cfg).await.unwrap();
    let b = Client::connect(&client_cfg).await.unwrap();
    a.write_file("/f", b"locked").await.unwrap();
    let fa = a.open("/f", OpenOptions::read_write()).await.unwrap();
    let fb = b.open("/f", OpenOptions::read_write()).await.unwrap();
    fa.lock(LockKind::Posix, LockType::Write, 0, 9, false).await.unwrap();
    let refused = |r: tessera_client::FsResult<()>| matches!(r, Err(e) if e.code == ErrorCode::WouldBlock);
    assert!(refused(fb.lock(LockKind::Posix, LockType::Write, 5, 5, false).await));

    let rows = replica_rows(&lc.files.admin_config);
    let leader = rows.iter().find(|r| r["role"] == "leader").unwrap_or_else(|| panic!("no leader: {rows:?}"));
    let id = leader["id"].as_u64().unwrap();
    lc.kill9(&format!("mds{}", id - 1)).unwrap();
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(10) {
        let r = fb.lock(LockKind::Posix, LockType::Write, 5, 5, false).await;
        assert!(refused(r), "B was granted A's lock {:?} after the leader was killed", t.elapsed());
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    fb.lock(LockKind::Posix, LockType::Write, 10, 19, false).await.expect("bytes A never locked, after the grace");
    let theirs = fb.test_lock(LockType::Write, 0, u64::MAX).await.unwrap().expect("A's lock, reasserted");
    assert_eq!((theirs.start, theirs.end, theirs.write), (0, 9, true));
    fa.close().await.unwrap();
    fb.lock(LockKind::Posix, LockType::Write, 0, 9, false).await.expect("A's close released its lock");
    fb.close().await.unwrap();
    lc.stop().await;
}
