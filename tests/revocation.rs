//! Certificate revocation and validity against real processes (issue 18): a client and a data server
//! revoked while the cluster runs lose their connections and are refused at their next one — the
//! client by the metadata server, the data server by the metadata server and by clients — while no
//! server is restarted and other clients keep working; an expired certificate is refused, saying so.

use std::path::Path;
use std::time::{Duration, Instant};
use tessera_client::{Client, LayoutSpec};
use tessera_ops::ca::CaDir;
use tessera_proto::config::ClusterConfig;
use tessera_proto::tls::{self, TlsFiles, Validity};
use tessera_proto::Role;
use tessera_test_support::{connect, pattern, Cluster};

/// Waits up to `limit` for `log` to contain a line with all of `words`; returns that line.
async fn wait_for_line(log: &Path, words: &[&str], limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| words.iter().all(|w| l.contains(w))) {
            eprintln!("{}: {line}", log.display());
            return Some(line.to_string());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The cluster's client configuration with `name`'s certificate.
fn config_of(cluster: &Cluster, name: &str) -> ClusterConfig {
    let mut cfg = cluster.client_config();
    cfg.tls = TlsFiles::in_dir(&cluster.files.dir.join("tls"), name);
    cfg
}

/// Lets every node look at the revocation list again (they do at most once a second).
async fn let_nodes_reload() {
    tokio::time::sleep(tessera_proto::crl::RECHECK + Duration::from_millis(300)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_client_and_data_server_are_refused_without_restarting_the_others() {
    let mut cluster = Cluster::start(2);
    let tls_dir = cluster.files.dir.join("tls");
    let mds_log = cluster.log("mds");
    let pids = |c: &mut Cluster| ["mds", "ds0", "ds1"].map(|name| c.pid(name).expect("running"));
    let before = pids(&mut cluster);
    {
        let mut ca = CaDir::open(&tls_dir).unwrap();
        for name in ["alice", "bob"] {
            ca.issue(Role::Client, name, &["127.0.0.1".into()], Validity::days(1), false).unwrap();
        }
    }
    let alice = connect(&config_of(&cluster, "alice")).await;
    let bob = connect(&config_of(&cluster, "bob")).await;
    let both = LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(2), mirrors: None };
    let f = bob.create("/shared", 0o644, Some(both)).await.unwrap();
    f.write_at(0, bytes::Bytes::from(pattern(1, 1 << 20))).await.unwrap();
    f.close().await.unwrap();
    assert_eq!(alice.read_file("/shared").await.unwrap(), pattern(1, 1 << 20));

    // Alice is revoked: the servers close her connections, and her next one is refused, with a log
    // line at the MDS naming her.
    let revoked = CaDir::open(&tls_dir).unwrap().revoke("alice", None).unwrap();
    assert_eq!(revoked.len(), 1);
    let_nodes_reload().await;
    let err = alice.read_file("/shared").await.expect_err("a revoked client kept reading");
    eprintln!("revoked client, connected before: {err}");
    assert!(err.detail.contains("certificate revoked"), "{err}");
    let err = Client::connect(&config_of(&cluster, "alice")).await.expect_err("a revoked client connected");
    eprintln!("revoked client: {err}");
    assert!(err.detail.contains("refused this node's certificate: certificate revoked"), "{err}");
    wait_for_line(&mds_log, &["closing the connection of client 'alice'", "certificate revoked"], secs(5))
        .await
        .expect("the MDS kept the revoked client's connection");
    let line = wait_for_line(&mds_log, &["refusing connection from client 'alice'", "certificate revoked"], secs(5))
        .await
        .expect("no log line at the MDS about the revoked client");
    assert!(line.contains(&revoked[0].serial), "{line}");
    // Bob keeps working, on his connections and on new ones.
    assert_eq!(bob.read_file("/shared").await.unwrap(), pattern(1, 1 << 20));
    let bob2 = Client::connect(&config_of(&cluster, "bob")).await.expect("bob connects again");
    bob2.write_file("/after-alice", &pattern(2, 200_000)).await.unwrap();
    assert_eq!(bob2.read_file("/after-alice").await.unwrap(), pattern(2, 200_000));

    // An expired certificate is refused, and both sides say so.
    let now = tls::unix_now();
    let past = Validity { not_before: now - 30 * 86_400, not_after: now - 86_400 };
    CaDir::open(&tls_dir).unwrap().issue(Role::Client, "carol", &[], past, false).unwrap();
    let err = Client::connect(&config_of(&cluster, "carol")).await.expect_err("an expired client connected");
    eprintln!("expired client: {err}");
    let expired_at = tessera_proto::types::format_utc(past.not_after);
    assert!(
        err.detail.contains(&format!("refused this node's certificate: certificate expired at {expired_at} UTC")),
        "{err}"
    );
    wait_for_line(
        &mds_log,
        &["refusing connection from client 'carol'", "certificate expired at", &expired_at],
        secs(5),
    )
    .await
    .expect("no log line at the MDS about the expired client");

    // Data server 1 is revoked: the MDS closes its connection and refuses the next; clients connected
    // to it drop their connection at their next call, and new connections to it are refused.
    CaDir::open(&tls_dir).unwrap().revoke("ds1", None).unwrap();
    let_nodes_reload().await;
    let err = bob.read_file("/shared").await.expect_err("a client kept reading from a revoked data server");
    eprintln!("client connected to the revoked data server before: {err}");
    assert!(err.detail.contains("its certificate is refused: certificate revoked"), "{err}");
    let bob3 = Client::connect(&config_of(&cluster, "bob")).await.unwrap();
    let err = bob3.read_file("/shared").await.expect_err("a client read from a revoked data server");
    eprintln!("client reading from the revoked data server: {err}");
    assert!(err.detail.contains("its certificate is refused: certificate revoked"), "{err}");
    wait_for_line(&mds_log, &["closing the connection of ds 'ds1'", "certificate revoked"], secs(5))
        .await
        .expect("the MDS kept the revoked data server's connection");
    wait_for_line(&mds_log, &["refusing connection from ds 'ds1'", "certificate revoked"], secs(10))
        .await
        .expect("the MDS accepted the revoked data server's new connection");
    // The MDS refuses to connect to it, for its own calls (here: the objects of a removed file are
    // destroyed on every server holding them).
    bob.unlink("/shared").await.unwrap();
    wait_for_line(&mds_log, &["refusing server ds 'ds1'", "certificate revoked"], secs(15))
        .await
        .expect("the MDS connected to the revoked data server");

    // Once the MDS has cut data server 1 off (it says so when it closes its connection), every new file
    // goes to data server 0 alone, without waiting for the 5 s silence rule.
    wait_for_line(&mds_log, &["certificate revoked: no new files are placed on it", "ds1"], secs(5))
        .await
        .unwrap_or_else(|| {
            let log = std::fs::read_to_string(&mds_log).unwrap_or_default();
            panic!("the MDS did not cut the revoked data server off from placement:\n{log}")
        });
    for i in 0..4 {
        let path = format!("/at-once{i}");
        bob.write_file(&path, &pattern(4, 10_000)).await.unwrap();
        let l = bob.get_layout(&path).await.unwrap();
        assert!(l.targets.iter().all(|t| t.ds == 0), "{path} placed on the revoked server: {l:?}");
    }
    // The other data server keeps serving.
    let mut placed = None;
    for i in 0..80 {
        let path = format!("/new{i}");
        if bob.write_file(&path, &pattern(3, 100_000)).await.is_ok()
            && bob.get_layout(&path).await.unwrap().targets.iter().all(|t| t.ds == 0)
        {
            placed = Some(path);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let placed = placed.expect("no new file placed on the live data server 20 s after the revocation");
    assert_eq!(bob3.read_file(&placed).await.unwrap(), pattern(3, 100_000));

    assert!(cluster.all_alive(), "a server died");
    assert_eq!(pids(&mut cluster), before, "a server was restarted");
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
