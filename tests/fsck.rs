//! `tessera fsck` against a running cluster of real processes: corruptions made by hand in a data
//! server's object store are found, `--repair` fixes them, and a second run is clean.

use bytes::Bytes;
use std::time::{Duration, Instant};
use tessera_client::LayoutSpec;
use tessera_proto::config::{ClusterConfig, Defaults};
use tessera_test_support::{connect, pattern, Cluster};

fn kinds(report: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> =
        report["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect();
    k.sort();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_finds_hand_made_corruptions_repairs_them_and_runs_clean_after() {
    let mut cluster = Cluster::start_with(2, Defaults::default());
    let admin = connect(&ClusterConfig::load(&cluster.files.admin_config).unwrap()).await;
    let spec = LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(2), mirrors: None };
    let data = pattern(7, 300_000);
    let f = admin.create("/f", 0o644, Some(spec)).await.unwrap();
    let layout = f.layout().clone();
    f.write_at(0, Bytes::from(data.clone())).await.unwrap();
    f.close().await.unwrap();
    admin.mkdir("/d", 0o755).await.unwrap();
    let g = admin.create("/d/g", 0o644, None).await.unwrap();
    g.write_at(0, Bytes::from_static(b"small")).await.unwrap();
    g.close().await.unwrap();

    let (code, clean) = cluster.fsck(&[]);
    assert_eq!((code, kinds(&clean)), (0, vec![]), "{clean:#}");
    assert_eq!(clean["servers"], 2);
    assert!(clean["objects"].as_u64().unwrap() >= 3, "{clean:#}");

    // By hand: an object file no layout names (given the number of an inode, an id never used for an
    // object), and 1000 bytes appended to /f's last stripe object behind the MDS's back.
    let ino = admin.stat("/d/g").await.unwrap().ino;
    let t0 = &layout.targets[0];
    let store = |ds: u32| cluster.ds_data_dir(ds as usize).join("objects");
    let orphan = store(t0.ds).join(format!("{:02x}", ino & 0xff)).join(format!("{ino:016x}"));
    std::fs::create_dir_all(orphan.parent().unwrap()).unwrap();
    std::fs::write(&orphan, b"nobody's").unwrap();
    // 300000 bytes over 2 stripes of 64 KiB end in stripe 0's third row (row 2 holds bytes 262144..):
    // growing that object grows the data past the file's size.
    let obj = store(t0.ds).join(format!("{:02x}", t0.object & 0xff)).join(format!("{:016x}", t0.object));
    let len = std::fs::metadata(&obj).unwrap().len();
    let grown = len + 1000;
    std::fs::OpenOptions::new().write(true).open(&obj).unwrap().set_len(grown).unwrap();
    let want_size = layout.file_size_from_object(0, grown);
    assert!(want_size > data.len() as u64);

    let (code, found) = cluster.fsck(&[]);
    assert_eq!(code, 4, "findings left: {found:#}");
    assert_eq!(kinds(&found), vec!["orphan-object", "size"], "{found:#}");
    assert_eq!(found["repaired"], 0);
    assert!(orphan.exists(), "checking alone changes nothing");
    assert_eq!(admin.stat("/f").await.unwrap().size, data.len() as u64);

    let (code, repaired) = cluster.fsck(&["--repair"]);
    assert_eq!(code, 1, "all repaired: {repaired:#}");
    assert_eq!(repaired["repaired"], 2, "{repaired:#}");
    assert!(repaired["findings"].as_array().unwrap().iter().all(|f| f["repaired"] == true), "{repaired:#}");
    assert_eq!(admin.stat("/f").await.unwrap().size, want_size);
    let deadline = Instant::now() + Duration::from_secs(20);
    while orphan.exists() {
        assert!(Instant::now() < deadline, "the orphan object was not destroyed within 20 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, after) = cluster.fsck(&[]);
    assert_eq!((code, kinds(&after)), (0, vec![]), "{after:#}");
    // The data is untouched, and the file reads to its new end (the grown part as zeros).
    let f = admin.open("/f", Default::default()).await.unwrap();
    let back = f.read_at(0, want_size).await.unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    assert!(back[data.len()..].iter().all(|&b| b == 0));
    assert!(cluster.all_alive());
}
