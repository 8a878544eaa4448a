//! Per-job statistics against real processes: two IOR-like jobs, each tagged with its own job id
//! (`tessera-bench ior --job`), then `tessera report JOB --json -` and `tessera jobstats` on each; and
//! a job going through a forwarding node, which `tessera jobstats` shows as one of the job's nodes.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_ops::clusterdir::Shape;
use tessera_proto::config::Defaults;
use tessera_proto::msg::JobInfo;
use tessera_test_support::{bin, connect, pattern, Cluster};

fn run(binary: &str, args: &[&str], config: &Path) -> String {
    let o = Command::new(bin(binary)).args(args).arg("--config").arg(config).output().expect("run");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{binary} {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    stdout
}

/// The job's report once the data servers have reported `written` bytes for it.
fn report(config: &Path, job: &str, written: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r: Value = serde_json::from_str(&run("tessera", &["report", job, "--json", "-"], config)).expect("JSON");
        if r["bytes_written"].as_u64() == Some(written) || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn two_tagged_ior_jobs_get_their_own_reports() {
    let cl = Cluster::start(2);
    let cfg = cl.files.client_config.clone();
    let ior = |job: &str, extra: &[&str]| {
        // --direct: the data servers see each 32 KiB transfer as IOR issued it (through the write-behind they
        // would see its gathered chunks, whose order between the two tasks is the flushes', not IOR's).
        let mut a = vec!["ior", "-a", "tessera", "--direct", "-w", "-k", "-t", "32k", "-N", "2", "--job", job];
        a.extend_from_slice(extra);
        run("tessera-bench", &a, &cfg);
    };
    ior("fpp", &["-F", "-b", "1m", "-o", "/fpp/f"]);
    // The strided job is traced too.
    let started = run("tessera", &["trace", "start", "strided"], &cfg);
    assert!(started.contains("started on 2 data servers"), "{started}");
    ior("strided", &["--pattern", "strided", "-b", "256k", "-s", "4", "-o", "/strided/f"]);
    run("tessera", &["trace", "stop", "strided"], &cfg);

    let fpp = report(&cfg, "fpp", 2 << 20);
    assert_eq!(fpp["job"], "fpp");
    assert_eq!(fpp["bytes_written"], 2 << 20, "{fpp}");
    assert_eq!(fpp["bytes_read"], 0);
    assert_eq!(fpp["read_share_bytes"], 0.0);
    assert_eq!(fpp["small_request_fraction"], 0.0);
    let files = fpp["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{fpp}");
    for f in files {
        assert_eq!(f["access"], "task-local", "{f}");
        assert_eq!(f["processes"], 1);
        assert_eq!(f["spatial"], "contiguous", "{f}");
        assert!(f["path"].as_str().unwrap().starts_with("/fpp/f"), "{f}");
    }
    assert_eq!(fpp["processes"], 2);

    let st = report(&cfg, "strided", 2 << 20);
    assert_eq!(st["bytes_written"], 2 << 20, "{st}");
    let files = st["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{st}");
    let f = &files[0];
    assert_eq!((f["access"].as_str(), f["processes"].as_u64()), (Some("shared"), Some(2)), "{f}");
    assert_eq!(f["spatial"], "strided", "{f}");
    assert_eq!(f["stride_bytes"], 2 * 32768, "stride = P × transfer size: {f}");
    assert_eq!(f["path"], "/strided/f");
    assert_eq!(st["spatial_source"], "trace", "the traced job's classes come from its trace");
    assert!(f["concurrency_max"].as_f64().unwrap() > 0.0, "{f}");
    assert_eq!(fpp["spatial_source"], "counters");
    let csv = run("tessera", &["trace", "export", "strided"], &cfg);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "job,client,pid,file,offset,size,op,t_start_us,t_end_us,ds,object,object_offset");
    assert!(lines.len() > 64 && lines[1].starts_with("strided,") && lines[1].contains(",/strided/f,"), "{csv}");
    assert!(st["requests_written"].as_u64().unwrap() >= 64, "32 KiB requests: {st}");
    assert!(st["bandwidth_max_mib_s"].as_f64().unwrap() > 0.0);

    // The text page, and the JSON and plots written into a directory.
    let out = cl.dir.path().join("report");
    let text = run("tessera", &["report", "strided", "--out", out.to_str().unwrap()], &cfg);
    assert!(text.contains("1 shared") && text.contains("strided stride 64 KiB"), "{text}");
    for f in ["strided.json", "strided-bandwidth.png", "strided-sizes.png", "strided-files.png"] {
        assert!(std::fs::metadata(out.join(f)).map(|m| m.len() > 0).unwrap_or(false), "{f} missing: {text}");
    }

    // Coarser windows and another threshold.
    let coarse: Value = serde_json::from_str(&run(
        "tessera",
        &["report", "fpp", "--dt", "2", "--threshold", "64m", "--json", "-"],
        &cfg,
    ))
    .unwrap();
    assert_eq!((coarse["dt_s"].as_f64(), coarse["threshold_bytes"].as_u64()), (Some(2.0), Some(64 << 20)));
    assert_eq!(coarse["intensity"], 0.0, "no process moved more than 64 MiB in a window: {coarse}");

    // jobstats: both jobs, the MDS's counters and the data servers'.
    let text = run("tessera", &["jobstats"], &cfg);
    assert!(text.contains("job_id: fpp") && text.contains("job_id: strided"), "{text}");
    let one: Value = serde_json::from_str(&run("tessera", &["jobstats", "--job", "fpp", "--json"], &cfg)).unwrap();
    let meta = &one[0]["meta"];
    assert!(meta["creates"].as_u64().unwrap() >= 2 && meta["closes"].as_u64().unwrap() >= 2, "{meta}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_node_is_a_node_of_the_job() {
    let cl = Cluster::start_shape(Shape { ds: 1, ion: 1, ..Shape::default() }, Defaults::default());
    let mut cfg = cl.client_config();
    cfg.client.ion = Some("ion0".into());
    let c = connect(&cfg).await.with_job("fwd");
    let data = pattern(3, 1 << 20);
    c.write_file("/fwd", &data).await.unwrap();
    assert_eq!(c.read_file("/fwd").await.unwrap(), data);
    // The forwarding node and the data server report within a report interval (1 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    let moved = |i: &JobInfo| {
        let ion = i.ions.iter().map(|(_, d)| (d.write_bytes, d.read_bytes)).next();
        let ds = i.nodes.iter().map(|(_, d)| (d.write_bytes, d.read_bytes)).next();
        ion.is_some_and(|(w, r)| w == 1 << 20 && r >= 1 << 20) && ds.is_some_and(|(w, r)| w == 1 << 20 && r >= 1 << 20)
    };
    let info = loop {
        let jobs = c.mds().job_stats(Some("fwd")).await.unwrap();
        match jobs.into_iter().next() {
            Some(i) if moved(&i) => break i,
            other => assert!(Instant::now() < deadline, "no counters from ion0 and ds0: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (ion, d) = &info.ions[0];
    assert_eq!((*ion, info.ions.len()), (0, 1));
    assert!(d.write_ops > 0 && d.read_ops > 0 && d.write_sizes.total() == d.write_ops, "{d:?}");
    assert!(!d.streams.is_empty(), "one job asked for: with its streams");
    let written: u64 = info.series.iter().map(|p| p.window.write_bytes).sum();
    assert_eq!(written, 1 << 20, "the job's windows count the data servers' bytes, not the forwarded ones again");
    let text = run("tessera", &["jobstats", "--job", "fwd"], &cl.files.client_config);
    assert!(text.contains("  ds0:") && text.contains("  ion0:"), "{text}");
}
