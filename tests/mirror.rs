//! Mirrored files (issue 36) on a cluster of real processes: `tessera setstripe -N 2` on a directory,
//! every stripe of a new file placed on two distinct data servers, `getstripe` and the `tessera.layout`
//! attribute listing each replica (in-sync), a file written through the library landing identically on
//! both replicas, and reads that go on, bytes intact, after `kill -9` of a replica's data server — the
//! reader skips the dead replica. A one-copy file beside it keeps today's layout.

use bytes::Bytes;
use std::io::Write;
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_client::OpenOptions;
use tessera_proto::config::Defaults;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::ReplicaState;
use tessera_proto::layout::{Layout, StripeTarget};
use tessera_proto::msg::MirrorCall;
use tessera_proto::msg::{DsCall, DsReply, DsRequest};
use tessera_test_support::mount::{require_fuse, Mount};
use tessera_test_support::{pattern, Cluster};

fn tessera(cluster: &Cluster, args: &[&str]) -> String {
    tessera_test_support::up::tessera_ok(&cluster.files.client_config, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirrored_file_is_written_to_every_replica_and_read_through_a_dead_one() {
    let defaults = Defaults {
        stripe_size: 64 << 10,
        stripe_count: 2,
        placement: tessera_proto::config::Placement::RoundRobin,
        mirrors: 1,
    };
    let mut cluster = Cluster::start_with(3, defaults);
    let c = cluster.client().await;
    c.mkdir("/m", 0o755).await.unwrap();
    tessera(&cluster, &["setstripe", "-N", "2", "/m"]);
    let dir = tessera(&cluster, &["getstripe", "/m"]);
    assert!(dir.contains("mirror_count: 2"), "{dir}");

    // Written through the library (write-through), several stripe rows.
    let data = pattern(7, (1 << 20) + 12345);
    let f = c.create("/m/f", 0o644, None).await.unwrap();
    for (k, piece) in data.chunks(100_000).enumerate() {
        f.write_at((k * 100_000) as u64, Bytes::copy_from_slice(piece)).await.unwrap();
    }
    f.fsync().await.unwrap();
    f.close().await.unwrap();
    let l = c.get_layout("/m/f").await.unwrap();
    assert_eq!((l.mirror_count, l.targets.len()), (2, 2), "{l:?}");
    for k in 0..l.stripe_count() {
        let reps = l.replicas(k);
        assert_eq!(reps.len(), 2);
        assert_ne!(reps[0].target.ds, reps[1].target.ds, "stripe {k}: both replicas on one server");
        assert!(reps.iter().all(|r| r.state == ReplicaState::InSync));
    }
    let shown = tessera(&cluster, &["getstripe", "/m/f"]);
    assert!(shown.contains("mirror_count: 2") && shown.contains("replica"), "{shown}");
    assert_eq!(shown.matches("in-sync").count(), 4, "{shown}");
    let attr = c.stat("/m/f").await.unwrap();
    let text = String::from_utf8(c.mds().getxattr(attr.ino, "tessera.layout").await.unwrap()).unwrap();
    assert!(text.contains("mirrors=2") && text.contains('|'), "{text}");

    // Every replica of every stripe holds the same bytes: read each one directly.
    let tag = tessera_proto::IoTag { origin: c.mds().origin().clone(), ino: attr.ino };
    for k in 0..l.stripe_count() {
        let mut copies = Vec::new();
        for r in l.replicas(k) {
            let req = DsRequest::Read { tag: tag.clone(), object: r.target.object, offset: 0, len: 1 << 20 };
            let (reply, bytes) = c.data().route().call(r.target.ds, req, Bytes::new()).await.unwrap();
            assert!(matches!(reply, DsReply::Data { .. }), "{reply:?}");
            copies.push(bytes);
        }
        assert!(!copies[0].is_empty());
        assert_eq!(copies[0], copies[1], "stripe {k}: the replicas differ");
    }
    // A client may not pose as a primary passing a write on.
    let r = &l.mirrors_of(0)[0].target;
    let forged = DsCall {
        mirror: Some(tessera_proto::msg::MirrorCall {
            gen: 0,
            stripe: 0,
            replicas: vec![],
            from_primary: true,
            failed: vec![],
        }),
        ..DsCall::new(r.ds, DsRequest::Write { tag: tag.clone(), object: r.object, offset: 0, sync: false })
    };
    let e = c.data().route().send(forged, Bytes::from_static(b"evil"), 4).await.unwrap_err();
    assert_eq!(e.code, tessera_proto::error::ErrorCode::Perm, "{e}");

    // A one-copy file beside it: today's layout.
    let plain = pattern(8, 300_000);
    c.mkdir("/p", 0o755).await.unwrap();
    c.write_file("/p/g", &plain).await.unwrap();
    let pl = c.get_layout("/p/g").await.unwrap();
    assert!(!pl.is_mirrored() && pl.mirrors.is_empty(), "{pl:?}");

    // kill -9 of the server holding stripe 0's primary: every byte still reads, from the other replica.
    let victim = l.targets[0].ds;
    cluster.kill9_ds(victim as usize);
    let reader = cluster.client().await;
    let got = reader.read_file("/m/f").await.unwrap();
    assert!(got == data, "read {} bytes through the dead replica, not the file", got.len());
    let h = reader.open("/m/f", OpenOptions::read_only()).await.unwrap();
    let part = h.read_at(70_000, 200_000).await.unwrap();
    assert!(part[..] == data[70_000..270_000]);
    h.close().await.unwrap();
    // The one-copy file on the dead server has no other copy: its read fails rather than lies.
    if pl.all_targets().any(|t| t.ds == victim) {
        assert!(reader.read_file("/p/g").await.is_err());
    }
}

/// One replica's object bytes (up to 8 MiB), read directly (no mirror envelope: no fence applies).
async fn object_bytes(c: &Client, tag: &tessera_proto::IoTag, t: StripeTarget) -> Bytes {
    let req = DsRequest::Read { tag: tag.clone(), object: t.object, offset: 0, len: 8 << 20 };
    // A connection lost to a server killed earlier fails once; the next call connects again.
    let mut r = c.data().route().call(t.ds, req.clone(), Bytes::new()).await;
    if r.as_ref().is_err_and(|e| e.code != ErrorCode::NotFound) {
        r = c.data().route().call(t.ds, req, Bytes::new()).await;
    }
    match r {
        Ok((_, b)) => b,
        Err(e) if e.code == ErrorCode::NotFound => Bytes::new(),
        Err(e) => panic!("reading {t:?}: {e}"),
    }
}

/// A read of replica `t` as a client of the mirrored file makes it: refused while `t` is not in sync,
/// else the primary's bytes. Fails the test if a stale replica's bytes are ever served.
async fn check_never_stale(c: &Client, tag: &tessera_proto::IoTag, l: &Layout, stripe: usize, t: StripeTarget) {
    let m =
        MirrorCall { gen: l.mirror_gen, stripe: stripe as u32, replicas: vec![], from_primary: false, failed: vec![] };
    let call = DsCall {
        mirror: Some(m),
        ..DsCall::new(t.ds, DsRequest::Read { tag: tag.clone(), object: t.object, offset: 0, len: 8 << 20 })
    };
    match c.data().route().send(call, Bytes::new(), 0).await {
        Err(e) => assert!(
            matches!(e.code, ErrorCode::Stale | ErrorCode::Busy | ErrorCode::Unavailable | ErrorCode::TimedOut),
            "{e}"
        ),
        Ok((_, chunks)) => {
            let served = tessera_proto::frame::concat(chunks);
            // The primary now (the layout may have moved on): what every in-sync replica holds.
            let now = c.get_layout("/f").await.unwrap();
            let primary = now.target(stripe).unwrap();
            let truth = object_bytes(c, tag, primary).await;
            assert!(
                served == truth,
                "replica {t:?} of stripe {stripe} served {} bytes that are not the primary's {}",
                served.len(),
                truth.len()
            );
        }
    }
}

/// Polls `tessera mirror status --json` until no replica is degraded.
fn wait_in_sync(cluster: &Cluster, within: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let s = tessera(cluster, &["mirror", "status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("{e}: {s}"));
        if v["degraded_objects"] == 0 && v["bytes_to_resync"] == 0 {
            return t.elapsed();
        }
        assert!(t.elapsed() < within, "replicas still not in sync after {within:?}: {s}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every replica of every stripe holds the same bytes, and all are in sync.
async fn assert_replicas_identical(c: &Client, tag: &tessera_proto::IoTag) {
    let l = c.get_layout("/f").await.unwrap();
    for k in 0..l.stripe_count() {
        let reps = l.replicas(k);
        assert!(reps.iter().all(|r| r.state == ReplicaState::InSync), "stripe {k}: {reps:?}");
        let first = object_bytes(c, tag, reps[0].target).await;
        for r in &reps[1..] {
            assert!(object_bytes(c, tag, r.target).await == first, "stripe {k}: replica {:?} differs", r.target);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
async fn a_mount_writes_through_a_killed_replica_then_it_resyncs_and_a_wiped_store_is_rebuilt() {
    require_fuse();
    let defaults = Defaults {
        stripe_size: 64 << 10,
        stripe_count: 2,
        placement: tessera_proto::config::Placement::RoundRobin,
        mirrors: 2,
    };
    let mut cluster = Cluster::start_with(3, defaults);
    let mount = Mount::new(&cluster, "w");
    let c = cluster.client().await;
    let data = pattern(11, 4 << 20);
    let first = 1 << 20;

    // The first MiB with every replica up.
    let path = mount.p("f");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&data[..first]).unwrap();
    f.sync_all().unwrap();
    let l = c.get_layout("/f").await.unwrap();
    assert_eq!(l.mirror_count, 2, "{l:?}");
    let ino = c.stat("/f").await.unwrap().ino;
    let tag = tessera_proto::IoTag { origin: c.mds().origin().clone(), ino };

    // kill -9 of the server of stripe 0's second replica, mid-file: the rest is written, no error.
    let victim = l.mirrors_of(0)[0].target.ds;
    cluster.kill9_ds(victim as usize);
    let t = Instant::now();
    let mut longest = Duration::ZERO;
    for piece in data[first..].chunks(256 << 10) {
        let w = Instant::now();
        f.write_all(piece).unwrap();
        f.sync_all().unwrap();
        longest = longest.max(w.elapsed());
    }
    drop(f);
    eprintln!("wrote 3 MiB with data server {victim} killed in {:?}, longest write+fsync {longest:?}", t.elapsed());
    let reader = cluster.client().await;
    assert!(reader.read_file("/f").await.unwrap() == data, "the file read back is not what was written");
    let shown = tessera(&cluster, &["getstripe", "/f"]);
    assert!(shown.contains("stale"), "{shown}");
    let status = tessera(&cluster, &["mirror", "status", "--json"]);
    assert!(!status.contains("\"degraded_objects\":0"), "{status}");

    // The server comes back: its replicas are refused to readers until resynced, then identical.
    cluster.start_ds(victim as usize);
    let stale = c.get_layout("/f").await.unwrap();
    for k in 0..stale.stripe_count() {
        for r in stale.mirrors_of(k).iter().filter(|r| r.state != ReplicaState::InSync) {
            check_never_stale(&c, &tag, &l, k, r.target).await;
        }
    }
    let took = wait_in_sync(&cluster, Duration::from_secs(60));
    eprintln!("resynced in {took:?}");
    assert_replicas_identical(&c, &tag).await;
    assert!(!tessera(&cluster, &["getstripe", "/f"]).contains("stale"));
    // Stripe 0's replica there missed only the last 3 MiB's share, and its primary (up throughout)
    // logged it: that resync copies the 1.5 MiB it missed, not its 2 MiB object (a replica there that
    // was a primary, taken over, is copied whole).
    let st: serde_json::Value = serde_json::from_str(&tessera(&cluster, &["mirror", "status", "--json"])).unwrap();
    let object = (data.len() / l.stripe_count()) as u64;
    let there = (0..l.stripe_count()).filter(|&k| l.replicas(k).iter().any(|r| r.target.ds == victim)).count();
    let whole = object * there as u64;
    let resynced = st["resynced_bytes"].as_u64().unwrap();
    eprintln!("resync copied {resynced} bytes of {whole} in the objects there");
    assert!(resynced < whole, "whole objects copied: {resynced} of {whole} bytes");

    // A lost disk: another server killed, its store wiped, started empty. Every byte still reads, and
    // the file returns to two copies.
    let l = c.get_layout("/f").await.unwrap();
    let wiped = l.targets[0].ds;
    cluster.kill9_ds(wiped as usize);
    let dir = cluster.ds_data_dir(wiped as usize);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    cluster.start_ds(wiped as usize);
    let reader = cluster.client().await;
    assert!(reader.read_file("/f").await.unwrap() == data, "read after the wipe is not the file");
    for k in 0..l.stripe_count() {
        for r in l.replicas(k).iter().filter(|r| r.target.ds == wiped) {
            check_never_stale(&reader, &tag, &l, k, r.target).await;
        }
    }
    let took = wait_in_sync(&cluster, Duration::from_secs(60));
    eprintln!("wiped store rebuilt in {took:?}");
    assert_replicas_identical(&reader, &tag).await;
    let got = std::fs::read(mount.p("f")).unwrap();
    assert!(got == data, "the mount reads back {} bytes, not the file", got.len());

    // fsck --verify-mirrors: clean now; a replica changed behind the file's back (same size, other
    // bytes) is found by checksum only, and --repair resyncs it from the primary.
    let fsck = |args: &[&str]| tessera_test_support::up::tessera(&cluster.files.client_config, args);
    let clean = fsck(&["fsck", "--verify-mirrors", "--json"]);
    assert!(clean.status.success(), "{}", String::from_utf8_lossy(&clean.stdout));
    let l = reader.get_layout("/f").await.unwrap();
    let r = l.mirrors_of(0)[0].target;
    let req = DsRequest::Write { tag: tag.clone(), object: r.object, offset: 10, sync: true };
    reader.data().route().call(r.ds, req, Bytes::from_static(b"evil")).await.unwrap();
    assert!(fsck(&["fsck"]).status.success(), "sizes alone cannot see it");
    let found = fsck(&["fsck", "--verify-mirrors", "--json"]);
    let out = String::from_utf8_lossy(&found.stdout).to_string();
    assert_eq!(found.status.code(), Some(4), "{out}");
    assert!(out.contains("mirror-checksum"), "{out}");
    let fixed = fsck(&["fsck", "--verify-mirrors", "--repair"]);
    assert_eq!(fixed.status.code(), Some(1), "{}", String::from_utf8_lossy(&fixed.stdout));
    wait_in_sync(&cluster, Duration::from_secs(60));
    assert_replicas_identical(&reader, &tag).await;
    assert!(fsck(&["fsck", "--verify-mirrors"]).status.success());
    assert!(cluster.all_alive());
}
