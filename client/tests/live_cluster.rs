//! Library checks against a running cluster (`tessera up --dir D`, then
//! `TESSERA_CONFIG=D/client.toml cargo test -p tessera-client --test live_cluster -- --ignored`).
//! Ignored by default: the cross-process tests in the root `tests/` start their own servers.

use bytes::Bytes;
use tessera_client::{Client, ClusterConfig, ErrorCode, FileKind, LayoutSpec, OpenOptions};

async fn client() -> Client {
    let cfg = ClusterConfig::locate(None).expect("set TESSERA_CONFIG to a running cluster's client.toml");
    Client::connect(&cfg).await.expect("connect").with_job("live-test")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn files_holes_appends_and_close_to_open() {
    let c = client().await;
    assert_eq!(c.job(), "live-test");
    let dir = format!("/live-{}", std::process::id());
    c.remove_all(&dir).await.unwrap();
    c.mkdir_all(&format!("{dir}/sub"), 0o755).await.unwrap();

    // Small stripes over 2 servers; a write past a hole, then reads across the hole and the end.
    let spec = LayoutSpec { stripe_size: Some(4096), stripe_count: Some(2), mirrors: None };
    let path = format!("{dir}/f");
    let f = c.create(&path, 0o600, Some(spec)).await.unwrap();
    assert_eq!(f.layout().stripe_size, 4096);
    assert_eq!(f.layout().targets.len(), 2);
    let data = pattern(10_000, 7);
    f.write_at(20_000, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(f.size().await.unwrap(), 30_000);
    let r = f.read_at(19_000, 20_000).await.unwrap();
    assert_eq!(r.len(), 11_000, "short only at the end of the file");
    assert!(r[..1000].iter().all(|&b| b == 0), "hole reads as zeros");
    assert_eq!(&r[1000..], &data[..]);
    assert!(f.read_at(30_000, 10).await.unwrap().is_empty());

    // Another open does not see the size before close... but does after.
    f.close().await.unwrap();
    let g = c.open(&path, OpenOptions::read_write()).await.unwrap();
    assert_eq!(g.attr().size, 30_000);
    assert_eq!(g.append(Bytes::from_static(b"tail")).await.unwrap(), 30_000);
    g.fsync().await.unwrap();
    assert_eq!(c.stat(&path).await.unwrap().size, 30_004, "fsync reports the size");
    g.close().await.unwrap();

    // Parallel disjoint writes through one File.
    let big = format!("{dir}/sub/big");
    let f = std::sync::Arc::new(c.create(&big, 0o644, None).await.unwrap());
    let chunk = 3 << 20;
    let tasks: Vec<_> = (0..4u8)
        .map(|i| {
            let f = f.clone();
            tokio::spawn(async move { f.write_at(i as u64 * chunk as u64, Bytes::from(pattern(chunk, i))).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let f = std::sync::Arc::try_unwrap(f).ok().unwrap();
    f.close().await.unwrap();
    let all = c.read_file(&big).await.unwrap();
    assert_eq!(all.len(), 4 * chunk);
    for i in 0..4u8 {
        assert_eq!(&all[i as usize * chunk..(i as usize + 1) * chunk], &pattern(chunk, i)[..]);
    }

    // Namespace calls.
    c.write_file(&format!("{dir}/w"), b"hello").await.unwrap();
    assert_eq!(c.read_file(&format!("{dir}/w")).await.unwrap(), b"hello");
    c.write_file(&format!("{dir}/w"), b"hi").await.unwrap();
    assert_eq!(c.read_file(&format!("{dir}/w")).await.unwrap(), b"hi", "write_file truncates");
    c.symlink(&format!("{dir}/w"), &format!("{dir}/l")).await.unwrap();
    assert_eq!(c.readlink(&format!("{dir}/l")).await.unwrap(), format!("{dir}/w"));
    assert_eq!(c.lstat(&format!("{dir}/l")).await.unwrap().kind, FileKind::Symlink);
    assert_eq!(c.stat(&format!("{dir}/l")).await.unwrap().kind, FileKind::File);
    c.rename(&format!("{dir}/w"), &format!("{dir}/sub/w2")).await.unwrap();
    let names: Vec<String> = c.readdir(&format!("{dir}/sub")).await.unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"w2".to_string()) && names.contains(&"big".to_string()));
    let e = c.create(&format!("{dir}/sub/w2"), 0o644, None).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::Exists);
    c.truncate(&format!("{dir}/sub/w2"), 1).await.unwrap();
    assert_eq!(c.read_file(&format!("{dir}/sub/w2")).await.unwrap(), b"h");
    c.set_layout(&format!("{dir}/sub"), LayoutSpec { stripe_size: Some(65536), stripe_count: Some(1), mirrors: None })
        .await
        .unwrap();
    assert_eq!(
        c.get_dir_layout(&format!("{dir}/sub")).await.unwrap(),
        Some(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(1), mirrors: None })
    );
    assert_eq!(c.get_dir_layout(&dir).await.unwrap(), None);
    assert!(c.statfs().await.unwrap().blocks > 0);
    assert!(!c.cluster_status().await.unwrap().is_empty());
    c.remove_all(&dir).await.unwrap();
    assert_eq!(c.stat(&dir).await.unwrap_err().code, ErrorCode::NotFound);
}
