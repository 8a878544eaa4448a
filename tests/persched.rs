//! PerSched in the file system (specs/periodic.md): a job that registers a periodic profile at the MDS
//! gets intervals modulo T, and its writes wait for its interval; a job with no profile is not delayed.

use bytes::Bytes;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tessera_client::periodic::next_slot;
use tessera_proto::config::Defaults;
use tessera_proto::msg::PeriodicProfile;
use tessera_test_support::Cluster;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_job_writes_in_its_interval_and_others_are_not_delayed() {
    let mut cluster = Cluster::prepared(1, Defaults::default());
    cluster.edit_mds_config(|c| {
        c.persched.nodes = 4;
        c.persched.node_bandwidth = 100 << 20;
        c.persched.total_bandwidth = 100 << 20;
        c.persched.lease_ms = 5_000;
    });
    cluster.boot();
    let periodic = cluster.client().await.with_job("periodic");
    let other = cluster.client().await.with_job("other");
    let fp = periodic.create("/p", 0o644, None).await.unwrap();
    let fo = other.create("/o", 0o644, None).await.unwrap();
    // One node, 1.5 s of compute, then 1 MiB at 100 MiB/s (about 10 ms): T is about 1.51 s.
    let profile = PeriodicProfile { nodes: 1, compute_ms: 1_500, volume: 1 << 20 };
    let g = periodic.periodic_register(profile).await.unwrap();
    assert!(g.period_ms >= 1_500 && g.period_ms < 1_600, "{g:?}");
    assert_eq!(g.intervals.len(), 1, "{g:?}");
    assert!(periodic.periodic().active());
    assert!(!other.periodic().active(), "a job without a profile has no pattern");
    // Leave the interval (about 10 ms wide): the next write must wait for the next period.
    loop {
        let (wait, _) = next_slot(&g, now_ms()).unwrap();
        if wait > 500 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (wait, _) = next_slot(&g, now_ms()).unwrap();
    let t0 = Instant::now();
    fo.write_at(0, Bytes::from(vec![1u8; 4096])).await.unwrap();
    let other_took = t0.elapsed();
    let t0 = Instant::now();
    fp.write_at(0, Bytes::from(vec![2u8; 4096])).await.unwrap();
    let took = t0.elapsed();
    let at = now_ms();
    assert!(
        took.as_millis() as u64 + 50 >= wait,
        "the registered job's write took {took:?}, its interval was {wait} ms away"
    );
    // It ran in its interval (plus the write's own time).
    let pos = (at - g.origin_ms) % g.period_ms;
    let iv = g.intervals[0];
    assert!(pos >= iv.start_ms && pos <= iv.end_ms + 400, "written at {pos} ms of the period, interval {iv:?}");
    assert!(
        other_took.as_millis() < 400 && (other_took.as_millis() as u64) < wait / 2,
        "other job took {other_took:?}"
    );
    // The status lists the job with its planned efficiency; leaving clears the pattern.
    let st = other.mds().periodic_status().await.unwrap();
    assert_eq!(st.jobs.len(), 1);
    assert_eq!(st.jobs[0].job, "periodic");
    assert!(st.jobs[0].planned_rho > 0.9 && st.syseff > 0.0);
    periodic.periodic_leave().await.unwrap();
    assert!(!periodic.periodic().active());
    assert!(other.mds().periodic_status().await.unwrap().jobs.is_empty());
    fp.close().await.unwrap();
    fo.close().await.unwrap();
}

/// The online baseline (`[persched] scheduler = "online-syseff"`): the MDS's arbiter gives the whole
/// bandwidth to the job its greedy rule prefers; the other job's write waits until that one's transfer ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_arbiter_holds_a_write_until_the_preferred_job_is_done() {
    let mut cluster = Cluster::prepared(1, Defaults::default());
    cluster.edit_mds_config(|c| {
        c.persched.nodes = 4;
        c.persched.node_bandwidth = 100 << 20;
        c.persched.total_bandwidth = 100 << 20;
        c.persched.lease_ms = 5_000;
        c.persched.scheduler = "online-syseff".into();
    });
    cluster.boot();
    let high = cluster.client().await.with_job("high");
    let low = cluster.client().await.with_job("low");
    // β w / vol: high 2 × 10 s / 1 MiB, low 1 × 1 s / 100 MiB — online-syseff serves high first.
    let g = high.periodic_register(PeriodicProfile { nodes: 2, compute_ms: 10_000, volume: 1 << 20 }).await.unwrap();
    assert!(g.online && g.intervals.is_empty(), "online: no pattern, {g:?}");
    low.periodic_register(PeriodicProfile { nodes: 1, compute_ms: 1_000, volume: 100 << 20 }).await.unwrap();
    assert!(low.periodic().active());
    let f = low.create("/low", 0o644, None).await.unwrap();
    assert_eq!(high.mds().periodic_io(true, 0).await.unwrap(), 100 << 20, "high alone gets all of B");
    let writer = tokio::spawn(async move {
        f.write_at(0, Bytes::from(vec![3u8; 4096])).await.unwrap();
        f
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "low's write must wait while high transfers");
    assert_eq!(high.mds().periodic_io(true, 0).await.unwrap(), 100 << 20, "high keeps B while low waits");
    high.mds().periodic_io(false, 1).await.unwrap();
    let f = tokio::time::timeout(std::time::Duration::from_secs(10), writer).await.expect("low's write went").unwrap();
    assert_eq!(f.read_at(0, 4096).await.unwrap().as_ref(), &[3u8; 4096][..]);
    f.close().await.unwrap();
    // A job that is not registered is refused a rate, and its I/O is not gated at all.
    let other = cluster.client().await.with_job("other");
    assert!(other.mds().periodic_io(true, 0).await.is_err());
    assert!(!other.periodic().active());
}
