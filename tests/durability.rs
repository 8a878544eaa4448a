//! Crash durability: `kill -9` of the MDS and of data servers after fsync'ed writes; after restart,
//! everything acknowledged is there and the namespace is consistent.

use bytes::Bytes;
use tessera_client::{LayoutSpec, OpenOptions};
use tessera_test_support::{pattern, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_after_fsync_loses_nothing() {
    let mut cluster = Cluster::start(3);
    {
        let c = cluster.client().await;
        c.mkdir("/proj", 0o755).await.unwrap();
        c.mkdir("/proj/run1", 0o755).await.unwrap();
        for i in 0..50 {
            c.create(&format!("/proj/run1/empty{i}"), 0o644, None).await.unwrap().close().await.unwrap();
        }
        let spec = LayoutSpec { stripe_size: Some(256 << 10), stripe_count: Some(3), mirrors: None };
        let f = c.create("/proj/data", 0o644, Some(spec)).await.unwrap();
        f.write_at(0, Bytes::from(pattern(42, 5 << 20))).await.unwrap();
        f.fsync().await.unwrap();
        // Not closed: the crash happens with the file open. The rename and unlink are acknowledged
        // but nobody fsync'ed them: they come back from the MDS's journal.
        c.rename("/proj/run1/empty0", "/proj/renamed").await.unwrap();
        c.unlink("/proj/run1/empty1").await.unwrap();
        cluster.kill9_mds();
        cluster.kill9_ds(0);
        cluster.kill9_ds(2);
        drop(f);
    }
    cluster.start_ds(0);
    cluster.start_ds(2);
    cluster.start_mds();
    let c = cluster.client().await;
    let st = c.stat("/proj/data").await.unwrap();
    assert_eq!(st.size, 5 << 20, "fsync'ed size lost");
    assert!(c.read_file("/proj/data").await.unwrap() == pattern(42, 5 << 20), "fsync'ed data lost");
    let names: Vec<String> = c.readdir("/proj/run1").await.unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names.len(), 48, "{names:?}");
    assert!(!names.contains(&"empty0".to_string()) && !names.contains(&"empty1".to_string()));
    assert!(c.stat("/proj/renamed").await.is_ok());
    assert_eq!(c.stat("/proj").await.unwrap().nlink, 3);
    // The cluster keeps working after the restart.
    let f = c.open("/proj/data", OpenOptions { write: true, read: true, ..Default::default() }).await.unwrap();
    f.write_at(5 << 20, Bytes::from_static(b"more")).await.unwrap();
    f.close().await.unwrap();
    assert_eq!(c.stat("/proj/data").await.unwrap().size, (5 << 20) + 4);
}

/// A file opened with the engine's cache (write-behind): what its fsync acknowledged survives `kill -9`
/// of the MDS and the data servers; a buffered write its data server never got fails the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_writes_are_durable_after_fsync_and_their_errors_reach_close() {
    let mut cluster = Cluster::start(3);
    let spec = LayoutSpec { stripe_size: Some(256 << 10), stripe_count: Some(3), mirrors: None };
    let data = pattern(43, 5 << 20);
    {
        let c = cluster.client().await;
        let opts = OpenOptions { read: true, write: true, create: true, exclusive: true, ..Default::default() };
        let f = c.create_with("/cached", opts.with_cache(), Some(spec)).await.unwrap();
        // 5 MiB in 64 KiB writes: buffered, sent in the background.
        for (i, piece) in data.chunks(64 << 10).enumerate() {
            f.write_at(i as u64 * (64 << 10), Bytes::copy_from_slice(piece)).await.unwrap();
        }
        f.fsync().await.unwrap();
        cluster.kill9_mds();
        for i in 0..3 {
            cluster.kill9_ds(i);
        }
        drop(f);
    }
    for i in 0..3 {
        cluster.start_ds(i);
    }
    cluster.start_mds();
    let c = cluster.client().await;
    assert_eq!(c.stat("/cached").await.unwrap().size, 5 << 20, "fsync'ed size lost");
    assert!(c.read_file("/cached").await.unwrap() == data, "fsync'ed data lost");
    // A write over every stripe stays buffered while its data server dies: the close says so.
    let f = c.open("/cached", OpenOptions { write: true, ..Default::default() }.with_cache()).await.unwrap();
    f.write_at(0, Bytes::from(pattern(44, 768 << 10))).await.unwrap();
    cluster.kill9_ds(1);
    assert!(f.close().await.is_err(), "a buffered write that never landed must fail the close");
}

/// A client keeps working through an MDS restart: a stat, a close and a directory listing issued while
/// the MDS is dead wait for it and complete once it is back (with the default transport settings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_a_restarting_mds() {
    let mut cluster = Cluster::start(2);
    let c = cluster.client().await;
    c.mkdir("/d", 0o755).await.unwrap();
    let f = c.create("/d/f", 0o644, None).await.unwrap();
    f.write_at(0, Bytes::from(pattern(7, 100_000))).await.unwrap();
    f.fsync().await.unwrap();
    cluster.kill9_mds();
    let pending = {
        let c = c.clone();
        tokio::spawn(async move {
            let st = c.stat("/d/f").await;
            let closed = f.close().await;
            let names = c.readdir("/d").await;
            (st, closed, names)
        })
    };
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(!pending.is_finished(), "requests answered while the MDS was dead");
    cluster.start_mds();
    let (st, closed, names) = tokio::time::timeout(std::time::Duration::from_secs(60), pending)
        .await
        .expect("requests still waiting 60 s after the MDS came back")
        .unwrap();
    assert_eq!(st.expect("stat through the restart").size, 100_000);
    closed.expect("close through the restart");
    assert_eq!(names.expect("readdir through the restart").len(), 1);
    // A namespace change is not repeated blindly, but works on the new connection.
    c.mkdir("/d/after", 0o755).await.unwrap();
}

/// Fail fast, recover by itself (issue 18): with the default transport settings, a write and a read that
/// need a killed data server return an error within seconds — not after a minute, and without each
/// queued request waiting for a handshake timeout of its own — while the other server's files stay
/// readable, and new files are placed on the live server; once the server is back, the same client writes and
/// reads again without reconnecting by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_data_server_fails_calls_fast_and_is_used_again_after_restart() {
    use std::time::{Duration, Instant};
    let mut cluster = Cluster::start(2);
    let c = cluster.client().await;
    let both = LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(2), mirrors: None };
    let f = std::sync::Arc::new(c.create("/both", 0o644, Some(both)).await.unwrap());
    f.write_at(0, Bytes::from(pattern(1, 1 << 20))).await.unwrap();
    f.fsync().await.unwrap();
    // A file on data server 1 only (placement is round-robin from where the last file started).
    let mut other = None;
    for i in 0..4 {
        let one = LayoutSpec { stripe_size: None, stripe_count: Some(1), mirrors: None };
        let g = c.create(&format!("/one{i}"), 0o644, Some(one)).await.unwrap();
        g.write_at(0, Bytes::from(pattern(2, 4096))).await.unwrap();
        g.close().await.unwrap();
        if c.get_layout(&format!("/one{i}")).await.unwrap().targets.iter().all(|t| t.ds == 1) {
            other = Some(format!("/one{i}"));
        }
    }
    let other = other.expect("no single-stripe file landed on data server 1");
    cluster.kill9_ds(0);
    let t = Instant::now();
    // Many writes in flight at once, as a mount's write-behind sends them.
    let writes: Vec<_> = (0..16u64)
        .map(|k| {
            let f = f.clone();
            tokio::spawn(async move { f.write_at(k << 16, Bytes::from(pattern(3, 64 << 10))).await })
        })
        .collect();
    let mut failed = 0;
    for w in writes {
        failed += usize::from(tokio::time::timeout(Duration::from_secs(60), w).await.unwrap().unwrap().is_err());
    }
    let took = t.elapsed();
    assert!(failed >= 8, "only {failed} of 16 writes to a dead data server failed");
    assert!(took < Duration::from_secs(12), "the writes' errors took {took:?} (default transport: about 5 s)");
    assert!(c.read_file("/both").await.is_err(), "a read that needs the dead server succeeded");
    assert_eq!(c.read_file(&other).await.unwrap(), pattern(2, 4096), "the live server's file");
    // Once the MDS has not heard from it for 5 s, new files are placed on the live server only, and work.
    let mut placed = None;
    for i in 0..60 {
        let path = format!("/new{i}");
        c.write_file(&path, &pattern(5, 100_000)).await.unwrap_or_else(|e| {
            assert!(
                t.elapsed() < Duration::from_secs(8),
                "a new file still fails {:?} after the kill: {e}",
                t.elapsed()
            )
        });
        if c.get_layout(&path).await.unwrap().targets.iter().all(|t| t.ds == 1) {
            placed = Some(path);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let placed = placed.expect("new files are still placed on the dead data server 15 s after its kill");
    assert_eq!(c.read_file(&placed).await.unwrap(), pattern(5, 100_000));
    cluster.start_ds(0);
    let mut back = None;
    for _ in 0..100 {
        if f.write_at(0, Bytes::from(pattern(4, 1 << 20))).await.is_ok() {
            back = Some(());
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    back.expect("writes still fail 20 s after the data server came back");
    f.fsync().await.unwrap();
    assert_eq!(c.read_file("/both").await.unwrap(), pattern(4, 1 << 20));
}
