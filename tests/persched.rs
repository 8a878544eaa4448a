//! PerSched in the file system (specs/periodic.md): a job that registers a periodic profile at the MDS
//! gets intervals modulo T, and its writes wait for its interval; a job with no profile is not delayed.

use bytes::Bytes;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tessera_client::periodic::next_slot;
use tessera_proto::config::Defaults;
use tessera_proto::msg::PeriodicProfile;
use tessera_test_support::mount::Mount;
use tessera_test_support::Cluster;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// One data server; PerSched's platform N = 4, b = B = 100 MiB/s, a 5 s lease, `scheduler`, and detection on
/// or off.
fn platform_cluster(scheduler: &str, detect: bool) -> Cluster {
    let mut cluster = Cluster::prepared(1, Defaults::default());
    cluster.edit_mds_config(|c| {
        c.persched.nodes = 4;
        c.persched.node_bandwidth = 100 << 20;
        c.persched.total_bandwidth = 100 << 20;
        c.persched.lease_ms = 5_000;
        c.persched.scheduler = scheduler.parse().expect("a PerSched scheduler name");
        c.persched.detect = detect;
    });
    cluster.boot();
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_job_writes_in_its_interval_and_others_are_not_delayed() {
    let cluster = platform_cluster("persched", true);
    let periodic = cluster.client().await.with_job("periodic");
    let other = cluster.client().await.with_job("other");
    let fp = periodic.create("/p", 0o644, None).await.unwrap();
    let fo = other.create("/o", 0o644, None).await.unwrap();
    // Warm up both clients (connections to the data server, the files' first extents), so the timed writes
    // below are the gate and a small write, not a first connection on a loaded machine.
    fp.write_at(0, Bytes::from(vec![9u8; 4096])).await.unwrap();
    fo.write_at(0, Bytes::from(vec![9u8; 4096])).await.unwrap();
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
    // It ran in its interval (plus the write's own time, which a loaded machine may stretch), not a period
    // later: the slack stays well under the period.
    let pos = (at - g.origin_ms) % g.period_ms;
    let iv = g.intervals[0];
    let slack = 700;
    assert!(iv.end_ms + slack < g.period_ms, "{g:?}");
    assert!(
        took.as_millis() as u64 <= wait + iv.end_ms + slack,
        "the registered job's write took {took:?}, its interval was {wait} ms away: it waited too long"
    );
    assert!(pos >= iv.start_ms && pos <= iv.end_ms + slack, "written at {pos} ms of the period, interval {iv:?}");
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

/// Every config of `cluster` edited by `edit` (the data servers read their own files).
fn edit_all_configs(cluster: &Cluster, edit: impl Fn(&mut tessera_proto::config::ClusterConfig)) {
    let f = &cluster.files;
    let mut all = vec![f.mds_config.clone(), f.client_config.clone(), f.admin_config.clone()];
    all.extend(f.ds_configs.iter().cloned());
    for p in &all {
        let mut cfg = tessera_proto::config::ClusterConfig::load(p).unwrap();
        edit(&mut cfg);
        cfg.save(p).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_writing_in_bursts_is_detected_and_listed_as_detected() {
    let mut cluster = Cluster::prepared(1, Defaults::default());
    // Short windows and frequent reports, so four bursts take six seconds, not a minute.
    edit_all_configs(&cluster, |c| {
        c.ds_options.report_interval_ms = 100;
        c.mds[0].job_window_ms = 250;
        c.persched.detect = true;
        c.persched.detect_interval_ms = 250;
        // Clients without a grant poll every second.
        c.persched.lease_ms = 3_000;
    });
    cluster.boot();
    let bursty = cluster.client().await.with_job("bursty");
    let f = bursty.create("/b", 0o644, None).await.unwrap();
    let status = || async { bursty.mds().periodic_status().await.unwrap() };
    // 2 MiB every 1.5 s: bursts of one or two 250 ms windows, gaps of about 1.25 s.
    let mut detected = None;
    let t0 = Instant::now();
    for i in 0..8u64 {
        f.write_at(i << 21, Bytes::from(vec![7u8; 2 << 20])).await.unwrap();
        assert!(status().await.jobs.is_empty() || i >= 3, "detected after {i} bursts: {:?}", status().await);
        let next = t0 + std::time::Duration::from_millis(1_500 * (i + 1));
        while Instant::now() < next {
            let st = status().await;
            if let Some(j) = st.jobs.iter().find(|j| j.job == "bursty") {
                detected = Some(j.clone());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        if detected.is_some() {
            break;
        }
    }
    let Some(j) = detected else {
        let info = bursty.mds().job_stats(Some("bursty")).await.unwrap();
        let s: Vec<(u64, u64)> = info[0]
            .series
            .iter()
            .map(|p| (p.start_unix_us / 1000, p.window.write_bytes + p.window.read_bytes))
            .collect();
        let total: u64 = info[0].nodes.iter().map(|(_, d)| d.write_bytes).sum();
        panic!("the bursty job was not detected; windows of {} µs: {s:?}, {total} bytes written", info[0].dt_us);
    };
    assert_eq!(j.source, tessera_proto::msg::PeriodicSource::Detected);
    assert_eq!(j.profile.nodes, 1);
    let vol = j.profile.volume as f64 / (2 << 20) as f64;
    assert!((0.75..=1.25).contains(&vol), "volume {} for bursts of 2 MiB", j.profile.volume);
    assert!(
        (750..=1_500).contains(&j.profile.compute_ms),
        "compute {} ms for gaps of about 1.3 s",
        j.profile.compute_ms
    );
    // The job's library client follows the pattern it was given (detection is on in its config too).
    let t = Instant::now();
    while !bursty.periodic().active() && t.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(bursty.periodic().active(), "the detected job's client has no pattern");
    // The CLI lists it with its source.
    let out = std::process::Command::new(tessera_test_support::bin("tessera"))
        .arg("--config")
        .arg(&cluster.files.client_config)
        .args(["jobs", "--periodic"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find(|l| l.starts_with("bursty")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.ends_with("detected"), "{text}");
    assert!(text.contains("SOURCE"), "{text}");
    f.close().await.unwrap();
}

/// Runs `script` with `TESSERA_JOB=job` on a thread; the Unix ms at which it finished.
fn run_as_job(job: &str, script: String) -> std::thread::JoinHandle<u64> {
    let job = job.to_string();
    std::thread::spawn(move || {
        let out = std::process::Command::new("sh").arg("-c").arg(&script).env("TESSERA_JOB", &job).output().unwrap();
        let at = now_ms();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
        at
    })
}

#[test]
#[cfg_attr(not(all(tessera_fuse, tessera_root)), ignore = "needs /dev/fuse and root")]
fn the_mount_holds_a_patterned_jobs_write_until_its_interval_and_no_other() {
    tessera_test_support::mount::require_fuse();
    tessera_test_support::mount::require_root();
    let cluster = platform_cluster("persched", false);
    let m = Mount::new(&cluster, "persched");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The job registers through the library (its client keeps the lease); its processes write through the mount.
    let lib = rt.block_on(cluster.client()).with_job("pj");
    let profile = PeriodicProfile { nodes: 1, compute_ms: 3_000, volume: 1 << 20 };
    let g = rt.block_on(lib.periodic_register(profile)).unwrap();
    assert_eq!(g.intervals.len(), 1, "{g:?}");
    // Start when pj's next interval is more than 2 s away; both jobs write 256 KiB at once.
    let wait = loop {
        let (wait, _) = next_slot(&g, now_ms()).unwrap();
        if wait > 2_000 {
            break wait;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let interval_start = now_ms() + wait;
    let write = |name: &str| format!("dd if=/dev/zero of={} bs=256k count=1 2>/dev/null", m.path.join(name).display());
    let pj = run_as_job("pj", write("pj"));
    let free = run_as_job("free", write("free"));
    let (pj_done, free_done) = (pj.join().unwrap(), free.join().unwrap());
    assert!(
        pj_done >= interval_start,
        "pj's write finished at {pj_done}, before its interval began at {interval_start}"
    );
    assert!(
        free_done < interval_start,
        "a job without a pattern was held: finished at {free_done}, pj's interval began at {interval_start}"
    );
    assert!(free_done < pj_done);
    for name in ["pj", "free"] {
        assert_eq!(std::fs::metadata(m.path.join(name)).unwrap().len(), 262_144);
    }
    rt.block_on(lib.periodic_leave()).unwrap();
    drop(m);
}

/// The online baseline (`[persched] scheduler = "online-syseff"`): the MDS's arbiter gives the whole
/// bandwidth to the job its greedy rule prefers; the other job's write waits until that one's transfer ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_arbiter_holds_a_write_until_the_preferred_job_is_done() {
    let cluster = platform_cluster("online-syseff", true);
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
