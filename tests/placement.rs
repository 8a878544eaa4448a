//! Storage targets and placement on a cluster of real processes: layouts name targets, `tessera df`
//! lists every target with its configured capacity and the OST cost, a full target gets no new stripes,
//! a file that cannot be placed fails with ENOSPC and the files already there are unaffected.

use bytes::Bytes;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_client::{Client, LayoutSpec};
use tessera_ops::clusterdir::Shape;
use tessera_proto::config::{ClusterConfig, Defaults};
use tessera_proto::error::ErrorCode;
use tessera_test_support::{bin, connect, pattern, Cluster};

const CAP: u64 = 1 << 20;

fn df_json(cluster: &Cluster) -> serde_json::Value {
    let out = Command::new(bin("tessera"))
        .arg("--config")
        .arg(&cluster.files.client_config)
        .args(["df", "--json", "--policy"])
        .output()
        .expect("run tessera df");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("df --json prints JSON")
}

/// Used bytes per (server, target), once every target has reported at least `min_total` bytes in all.
async fn used(c: &Client, min_total: u64) -> Vec<((u32, u16), u64)> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = c.cluster_status().await.unwrap();
        let v: Vec<((u32, u16), u64)> = status
            .iter()
            .flat_map(|s| s.target_reports().into_iter().map(move |t| ((s.ds, t.target), t.used)))
            .collect();
        if v.len() == 6 && v.iter().map(|x| x.1).sum::<u64>() >= min_total {
            return v;
        }
        assert!(Instant::now() < deadline, "targets never reported {min_total} bytes: {v:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_placed_on_reported_and_a_full_cluster_refuses_new_files_only() {
    let shape = Shape { ds: 2, targets: 3, target_capacity: Some(CAP), ..Shape::default() };
    let defaults = Defaults {
        stripe_size: 64 << 10,
        stripe_count: 1,
        placement: tessera_proto::config::Placement::Balanced,
        mirrors: 1,
    };
    let cluster = Cluster::start_shape(shape, defaults);
    let c = connect(&ClusterConfig::load(&cluster.files.client_config).unwrap()).await;
    used(&c, 0).await;
    let json = df_json(&cluster);
    let targets = json["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 6, "{json}");
    assert!(targets.iter().all(|t| t["capacity"] == CAP && t["used"] == 0), "{json}");
    assert_eq!(json["placement"]["policy"], "balanced", "{json}");

    // Six files of a whole target each, one stripe: one per target, as the reports come in.
    let mut written = Vec::new();
    let mut homes = std::collections::HashSet::new();
    for k in 0..6u64 {
        let path = format!("/f{k}");
        let f = c.create(&path, 0o644, None).await.unwrap();
        let t = f.layout().targets[0];
        let home = (t.ds, tessera_proto::target_of(t.object));
        assert!(home.1 < 3, "object {:#x} names target {}", t.object, home.1);
        assert!(homes.insert(home), "file {k} placed on {home:?}, already full: {homes:?}");
        let data = pattern(k, CAP as usize);
        f.write_at(0, Bytes::from(data.clone())).await.unwrap();
        // A target at its capacity refuses one byte more, on the data server itself.
        let e = f.write_at(CAP, Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::NoSpace, "{e}");
        f.close().await.unwrap();
        written.push((path, data));
        used(&c, (k + 1) * CAP).await;
    }
    let json = df_json(&cluster);
    assert!((json["ost_cost"].as_f64().unwrap() - 1.0).abs() < 1e-9, "every target full: {json}");
    // Each target reports the requests it served, their latency and the job that wrote it.
    for t in json["targets"].as_array().unwrap() {
        assert!(t["requests"].as_u64().unwrap() > 0 && t["latency_p50_us"].as_u64().is_some(), "{t}");
        let written: u64 = t["jobs"].as_array().unwrap().iter().map(|j| j["write_bytes"].as_u64().unwrap()).sum();
        assert_eq!(written, CAP, "{t}");
    }

    // Nothing has room: a new file cannot be placed, and says so.
    let e = c
        .create("/one-too-many", 0o644, Some(LayoutSpec { stripe_size: None, stripe_count: Some(1), mirrors: None }))
        .await;
    assert_eq!(e.err().map(|e| e.code), Some(ErrorCode::NoSpace));
    assert!(c.stat("/one-too-many").await.is_err(), "no entry left behind");
    // What was there is whole.
    for (path, data) in &written {
        assert_eq!(&c.read_file(path).await.unwrap(), data, "{path}");
    }
    // Freeing a target makes room again, and the next file goes there.
    c.unlink("/f3").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let f = loop {
        match c.create("/again", 0o644, None).await {
            Ok(f) => break f,
            Err(e) if e.code == ErrorCode::NoSpace && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await
            }
            Err(e) => panic!("no room after an unlink: {e}"),
        }
    };
    f.write_at(0, Bytes::from(vec![7u8; 4096])).await.unwrap();
    f.close().await.unwrap();
}
