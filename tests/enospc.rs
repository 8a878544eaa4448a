//! A data server whose disk is full answers ENOSPC cleanly, keeps serving, and recovers once space is freed.
//! Needs root (mounts a small tmpfs under the data server's data directory), as in CI.

use bytes::Bytes;
use std::process::Command;
use tessera_client::LayoutSpec;
use tessera_proto::config::Defaults;
use tessera_proto::error::ErrorCode;
use tessera_test_support::{pattern, Cluster};

struct Unmount(std::path::PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(not(tessera_root), ignore = "needs root to mount a small tmpfs (CI runs as root)")]
async fn full_disk_gives_enospc_and_recovers() {
    tessera_test_support::mount::require_root();
    let mut cluster = Cluster::prepared(2, Defaults::default());
    let dir = cluster.ds_data_dir(1);
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"]).arg(&dir).status().unwrap();
    assert!(ok.success(), "mount tmpfs");
    let _guard = Unmount(dir.clone());
    cluster.boot();
    let c = cluster.client().await;

    // Stripe count 1 on each server in turn: the file on server 1 cannot fit.
    let one = LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(1), mirrors: None };
    let mut on_full = None;
    for i in 0..4 {
        let f = c.create(&format!("/f{i}"), 0o644, Some(one)).await.unwrap();
        if f.layout().targets[0].ds == 1 {
            on_full = Some((format!("/f{i}"), f));
            break;
        }
        f.close().await.unwrap();
    }
    let (path, f) = on_full.expect("round-robin never chose server 1");
    let mut failure = None;
    for mb in 0..16u64 {
        if let Err(e) = f.write_at(mb << 20, Bytes::from(pattern(mb, 1 << 20))).await {
            failure = Some(e);
            break;
        }
    }
    let e = failure.expect("writing 16 MiB into an 8 MiB disk succeeded");
    assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
    f.close().await.unwrap();
    assert!(cluster.all_alive());

    // Other servers are unaffected, and server 1 still serves reads.
    c.write_file("/other", &pattern(7, 1 << 20)).await.unwrap();
    assert_eq!(c.read_file("/other").await.unwrap(), pattern(7, 1 << 20));
    assert!(!c.read_file(&path).await.unwrap().is_empty());

    // Freeing the space (unlink → destroy log → objects removed) makes writes work again.
    c.unlink(&path).await.unwrap();
    let mut recovered = false;
    for _ in 0..50 {
        let f = c
            .create(
                "/retry",
                0o644,
                Some(LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(2), mirrors: None }),
            )
            .await
            .unwrap();
        let r = f.write_at(0, Bytes::from(pattern(3, 4 << 20))).await;
        f.close().await.unwrap();
        if r.is_ok() {
            recovered = true;
            break;
        }
        c.unlink("/retry").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(recovered, "space was never reclaimed after unlink");
    assert_eq!(c.read_file("/retry").await.unwrap(), pattern(3, 4 << 20));
}
