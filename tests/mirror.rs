//! Mirrored files (issue 36) on a cluster of real processes: `tessera setstripe -N 2` on a directory,
//! every stripe of a new file placed on two distinct data servers, `getstripe` and the `tessera.layout`
//! attribute listing each replica (in-sync), a file written through the library landing identically on
//! both replicas, and reads that go on, bytes intact, after `kill -9` of a replica's data server — the
//! reader skips the dead replica. A one-copy file beside it keeps today's layout.

use bytes::Bytes;
use tessera_client::OpenOptions;
use tessera_proto::config::Defaults;
use tessera_proto::layout::ReplicaState;
use tessera_proto::msg::{DsCall, DsReply, DsRequest};
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
        mirror: Some(tessera_proto::msg::MirrorCall { gen: 0, stripe: 0, replicas: vec![], from_primary: true }),
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
