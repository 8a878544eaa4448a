//! What Tessera's tests share (a dev-dependency only): certificates, data patterns, clusters of real
//! server processes.

/// A CA in a temporary directory and node identities issued by it.
pub mod certs;
/// A real cluster of `tessera-mds`, `tessera-ds` and `tessera-ion` processes on loopback.
pub mod cluster;
/// A real FUSE mount of a test cluster.
pub mod mount;
/// Deterministic test data.
pub mod pattern;
/// A real `tessera up`, and the `tessera` CLI against it.
pub mod up;

pub use certs::TestCa;
pub use cluster::{bin, connect, Cluster};
pub use pattern::pattern;

/// Writes a file as one batch of scattered runs ([`tessera_client::data::DataPlane::write_runs`]: small
/// runs in shuffled order, and long ones across stripes) with `client`, and checks that every byte
/// reads back, holes as zeros; then punches a hole across two stripes (`fallocate`) and checks it reads
/// as zeros. The file gets 64 KiB stripes over (up to) 3 servers.
pub async fn check_batched_writes(client: &tessera_client::Client, path: &str, seed: u64) {
    use tessera_client::data::WriteRun;
    let spec = tessera_client::LayoutSpec { stripe_size: Some(65536), stripe_count: Some(3), mirrors: None };
    let f = client.create(path, 0o644, Some(spec)).await.expect("create");
    let n = 300u64; // coprime with 37: i * 37 % n visits every run once
    let mut expect = vec![0u8; (n * 13_000 + 3 * 200_000) as usize];
    let mut runs = Vec::new();
    for k in 0..n + 3 {
        let i = if k < n { k * 37 % n } else { k };
        let (offset, len) = if i < n {
            (i * 13_000 + seed % 1000, 1 + (i * 7919 % 9000) as usize)
        } else {
            (n * 13_000 + (i - n) * 200_000, 150_000)
        };
        let data = pattern(seed * 1000 + i, len);
        expect[offset as usize..offset as usize + len].copy_from_slice(&data);
        runs.push(WriteRun { tag: f.io_tag().clone(), offset, data: data.into() });
    }
    let stripes = client.data().write_runs(&f.layout(), &runs).await.expect("batched write");
    assert_eq!(stripes, (0..f.layout().targets.len()).collect::<Vec<_>>(), "every object was written");
    let end = runs.iter().map(|r| r.offset + r.data.len() as u64).max().unwrap_or(0);
    let got = client.data().read(f.io_tag(), &f.layout(), 0, end).await.expect("read back");
    assert!(got[..] == expect[..end as usize], "batched runs read back differently");
    // A hole punched across two stripes (and a reservation) on the same path.
    let (hole, hole_len) = (65536 * 4 - 1000, 70_000u64);
    client.data().fallocate(f.io_tag(), &f.layout(), hole, hole_len, true).await.expect("punch");
    client.data().fallocate(f.io_tag(), &f.layout(), 0, end + (1 << 20), false).await.expect("reserve");
    expect[hole as usize..(hole + hole_len) as usize].fill(0);
    let got = client.data().read(f.io_tag(), &f.layout(), 0, end).await.expect("read back");
    assert!(got[..] == expect[..end as usize], "the punched range does not read as zeros");
    // Strided reads as vectored requests: blocks across stripe boundaries and the hole, and (100-byte
    // blocks every 1000) more runs per object than one request carries.
    for (block, stride) in [(9_000u64, 40_000u64), (100, 1000)] {
        let ranges: Vec<(u64, u64)> = (0..end / stride).map(|k| (k * stride + seed, block)).collect();
        let got = client.data().read_runs(f.io_tag(), &f.layout(), &ranges).await.expect("strided read");
        assert_eq!(got.len(), ranges.len());
        for (&(off, len), data) in ranges.iter().zip(&got) {
            let want = &expect[off as usize..(off + len) as usize];
            assert!(data.slice(off, off + len)[..] == want[..], "block at {off} of {len} bytes read differently");
        }
    }
    f.close().await.expect("close");
}
