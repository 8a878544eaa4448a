//! Data path through real processes: striping round trips at every stripe size and count, unaligned
//! ranges, sparse files, truncate, appends, and concurrent writers to one shared file (IOR shared mode).

use bytes::Bytes;
use tessera_client::{LayoutSpec, OpenOptions};
use tessera_test_support::{check_batched_writes, pattern, Cluster};

fn rw() -> OpenOptions {
    OpenOptions { read: true, write: true, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_over_stripe_sizes_and_counts() {
    let cluster = Cluster::start(4);
    let client = cluster.client().await;
    let mut case = 0u64;
    for stripe_size in [64u64 << 10, 256 << 10, 1 << 20, 4 << 20] {
        for count in [1u32, 2, 3, 4] {
            case += 1;
            let path = format!("/rt-{stripe_size}-{count}");
            let spec = LayoutSpec { stripe_size: Some(stripe_size), stripe_count: Some(count), mirrors: None };
            let f = client.create(&path, 0o644, Some(spec)).await.unwrap();
            assert_eq!(f.layout().stripe_size, stripe_size);
            assert_eq!(f.layout().targets.len(), count as usize);
            // Unaligned start and length spanning more than one full stripe row.
            let off = 12_345 + case * 7;
            let len = (stripe_size * count as u64 * 2 + 54_321) as usize;
            let data = pattern(case, len);
            f.write_at(off, Bytes::from(data.clone())).await.unwrap();
            f.close().await.unwrap();

            let f = client.open(&path, rw()).await.unwrap();
            assert_eq!(f.size().await.unwrap(), off + len as u64);
            let all = f.read_at(0, off + len as u64 + 1000).await.unwrap();
            assert_eq!(all.len() as u64, off + len as u64, "read past EOF must be short");
            assert!(all[..off as usize].iter().all(|&b| b == 0), "hole before data must read as zeros");
            assert!(all[off as usize..] == data[..], "data mismatch for stripe {stripe_size} x {count}");
            // A few odd sub-ranges crossing stripe boundaries.
            for (o, l) in [(off + 1, 4095u64), (off + stripe_size - 3, 7), (off + len as u64 - 10, 10)] {
                let got = f.read_at(o, l).await.unwrap();
                let s = (o - off) as usize;
                assert!(got[..] == data[s..s + l as usize], "sub-range {o}+{l}");
            }
            f.close().await.unwrap();
        }
    }
}

/// A mount's batch of scattered small writes: vectored requests, one per object, land every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_scattered_writes_land_every_run() {
    let cluster = Cluster::start(3);
    let client = cluster.client().await;
    check_batched_writes(&client, "/batched", 5).await;
    let (mut requests, mut runs) = (0, 0);
    for ds in client.ds_ids() {
        let r = client.data().report(ds).await.unwrap();
        requests += r.sizes.total();
        runs += r.jobs.iter().map(|j| j.write_ops).sum::<u64>();
    }
    // 303 runs (more pieces: some cross stripes), read back twice (before and after a punched hole) with
    // one read per 64 KiB piece.
    assert!(runs >= 303, "each run is a write at its server: {runs}");
    let reads = 2 * (4_500_000 / 65536 + 3);
    assert!(requests < reads + 30, "a few vectored requests per object, not one per run: {requests}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_files_truncate_and_append() {
    let cluster = Cluster::start(3);
    let client = cluster.client().await;
    let spec = LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(3), mirrors: None };

    // Sparse: a small write far out.
    let f = client.create("/sparse", 0o644, Some(spec)).await.unwrap();
    let tail = pattern(1, 1000);
    f.write_at(10 << 20, Bytes::from(tail.clone())).await.unwrap();
    f.close().await.unwrap();
    assert_eq!(client.stat("/sparse").await.unwrap().size, (10 << 20) + 1000);
    let f = client.open("/sparse", rw()).await.unwrap();
    let hole = f.read_at(5 << 20, 300_000).await.unwrap();
    assert_eq!(hole.len(), 300_000);
    assert!(hole.iter().all(|&b| b == 0));
    assert_eq!(f.read_at(10 << 20, 5000).await.unwrap()[..], tail[..]);
    assert!(f.read_at(20 << 20, 10).await.unwrap().is_empty());
    f.close().await.unwrap();

    // Truncate down then up: the cut part must come back as zeros, not old data.
    let data = pattern(2, 3 << 20);
    client.write_file("/trunc", &data).await.unwrap();
    client.truncate("/trunc", 1_500_001).await.unwrap();
    assert_eq!(client.stat("/trunc").await.unwrap().size, 1_500_001);
    assert_eq!(client.read_file("/trunc").await.unwrap()[..], data[..1_500_001]);
    client.truncate("/trunc", 5 << 20).await.unwrap();
    let grown = client.read_file("/trunc").await.unwrap();
    assert_eq!(grown.len(), 5 << 20);
    assert_eq!(grown[..1_500_001], data[..1_500_001]);
    assert!(grown[1_500_001..].iter().all(|&b| b == 0), "truncated-away data reappeared");
    client.truncate("/trunc", 0).await.unwrap();
    assert!(client.read_file("/trunc").await.unwrap().is_empty());

    // ftruncate on an open handle that wrote further: closing must not grow the file back.
    let f = client.create("/ftrunc", 0o644, Some(spec)).await.unwrap();
    f.write_at(0, Bytes::from(pattern(4, 100_000))).await.unwrap();
    f.set_len(10).await.unwrap();
    f.close().await.unwrap();
    assert_eq!(client.stat("/ftrunc").await.unwrap().size, 10);
    assert_eq!(client.read_file("/ftrunc").await.unwrap()[..], pattern(4, 10)[..]);

    // Appends.
    let f = client.create("/app", 0o644, Some(spec)).await.unwrap();
    let mut expect = Vec::new();
    for i in 0..20u64 {
        let piece = pattern(100 + i, 10_000 + i as usize * 999);
        let at = f.append(Bytes::from(piece.clone())).await.unwrap();
        assert_eq!(at, expect.len() as u64);
        expect.extend_from_slice(&piece);
    }
    f.close().await.unwrap();
    assert_eq!(client.read_file("/app").await.unwrap(), expect);

    // O_TRUNC on open.
    let f = client.open("/app", OpenOptions { write: true, truncate: true, ..Default::default() }).await.unwrap();
    f.close().await.unwrap();
    assert_eq!(client.stat("/app").await.unwrap().size, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_write_disjoint_ranges_of_a_shared_file() {
    let cluster = Cluster::start(4);
    let creator = cluster.client().await;
    let spec = LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(4), mirrors: None };
    creator.create("/shared", 0o666, Some(spec)).await.unwrap().close().await.unwrap();

    // IOR shared-file layout: 4 tasks, 3 segments, 300 KiB blocks (unaligned to stripes), 100 KiB transfers.
    let tasks = 4u64;
    let segments = 3u64;
    let block = 300u64 << 10;
    let xfer = 100u64 << 10;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let client = cluster.client().await.with_job(format!("writer-{t}"));
        handles.push(tokio::spawn(async move {
            let f = client.open("/shared", OpenOptions { write: true, ..Default::default() }).await.unwrap();
            for s in 0..segments {
                let base = (s * tasks + t) * block;
                for i in 0..block / xfer {
                    let off = base + i * xfer;
                    f.write_at(off, Bytes::from(pattern(off, xfer as usize))).await.unwrap();
                }
            }
            f.fsync().await.unwrap();
            f.close().await.unwrap();
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let reader = cluster.client().await;
    let total = tasks * segments * block;
    assert_eq!(reader.stat("/shared").await.unwrap().size, total);
    let all = reader.read_file("/shared").await.unwrap();
    assert_eq!(all.len() as u64, total);
    for off in (0..total).step_by(xfer as usize) {
        let expect = pattern(off, xfer as usize);
        assert!(all[off as usize..(off + xfer) as usize] == expect[..], "wrong data at {off}");
    }
}

/// Files opened with the engine's cache (write-behind, read-ahead), as the mount's handles: two of one
/// inode in one client share its state, so each reads the other's writes (and size) before any flush, and
/// so does a write-through file of the same inode in a clone of the client; after the closes another
/// client reads everything, and the inode's state is gone with its last handle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_files_of_one_inode_in_one_client_see_each_others_writes() {
    let cluster = Cluster::start(3);
    let client = cluster.client().await;
    let spec = LayoutSpec { stripe_size: Some(256 << 10), stripe_count: Some(3), mirrors: None };
    let cached = rw().with_cache();
    let a = client.create_with("/cached", OpenOptions { create: true, exclusive: true, ..cached }, Some(spec));
    let a = a.await.unwrap();
    let b = client.open("/cached", cached).await.unwrap();
    assert!(a.write_behind() && a.read_ahead() && b.write_behind() && b.read_ahead());
    // 3 MiB in 64 KiB writes, into a's write-behind.
    let data = pattern(7, 3 << 20);
    for (i, piece) in data.chunks(64 << 10).enumerate() {
        a.write_at(i as u64 * (64 << 10), Bytes::copy_from_slice(piece)).await.unwrap();
    }
    assert_eq!(b.size().await.unwrap(), 3 << 20, "b knows a's size");
    assert!(b.read_at(0, 4 << 20).await.unwrap() == data[..], "b reads a's writes");
    b.write_at(100, Bytes::from_static(b"from b")).await.unwrap();
    assert_eq!(&a.read_at(98, 10).await.unwrap()[..], &[&data[98..100], b"from b", &data[106..108]].concat()[..]);
    // Without the cache, through a clone of the client (another job): the same inode state.
    let c = client.clone().with_job("other-job").open("/cached", rw()).await.unwrap();
    assert!(!c.write_behind() && !c.read_ahead());
    assert_eq!(&c.read_at(100, 6).await.unwrap()[..], b"from b");
    c.write_at((3 << 20) - 4, Bytes::from_static(b"tail")).await.unwrap();
    assert_eq!(&b.read_at((3 << 20) - 4, 100).await.unwrap()[..], b"tail");
    assert_eq!(client.engine().open_inodes(), 1);
    for f in [a, b, c] {
        f.close().await.unwrap();
    }
    assert_eq!(client.engine().open_inodes(), 0, "the last close drops the inode's state");
    let mut want = data;
    want[100..106].copy_from_slice(b"from b");
    want[(3 << 20) - 4..].copy_from_slice(b"tail");
    let other = cluster.client().await;
    assert_eq!(other.stat("/cached").await.unwrap().size, 3 << 20);
    assert!(other.read_file("/cached").await.unwrap() == want, "another client after the closes");
    // A cached file dropped without close is flushed and closed in the background.
    let d = client.open("/cached", cached).await.unwrap();
    d.write_at(3 << 20, Bytes::from_static(b"dropped")).await.unwrap();
    drop(d);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while other.stat("/cached").await.unwrap().size != (3 << 20) + 7 {
        assert!(std::time::Instant::now() < deadline, "a dropped file's buffered write never landed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(&other.read_file("/cached").await.unwrap()[3 << 20..], b"dropped");
    // A write of a whole write-behind chunk (8 MiB) goes out as it is; a small write over it waits for
    // it in the write-behind and lands after it.
    let e = client.open("/cached", cached).await.unwrap();
    let mut big = pattern(8, 8 << 20);
    e.write_at(4 << 20, Bytes::from(big.clone())).await.unwrap();
    e.write_at((4 << 20) + 10, Bytes::from_static(b"over")).await.unwrap();
    e.close().await.unwrap();
    big[10..14].copy_from_slice(b"over");
    let all = other.read_file("/cached").await.unwrap();
    assert_eq!(all.len(), 12 << 20);
    assert!(all[(3 << 20) + 7..4 << 20].iter().all(|&b| b == 0) && all[4 << 20..] == big[..]);
}
