//! Smoke test of the IOrchestrator experiment runner: `tessera-bench experiment` starts its own 3-server
//! cluster from the real binaries, runs mpi-io-test x2 with orchestration off and on at tiny sizes, and
//! writes a JSON with one record per mode in the agreed shape.

use std::process::Command;
use std::time::Instant;
use tessera_test_support::bin;

#[test]
fn homogeneous_experiment_writes_records_for_both_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let t0 = Instant::now();
    let o = Command::new(bin("tessera-bench"))
        .args(["experiment", "iorch-homogeneous", "--quick", "--device-model", "none", "--n-ds", "3"])
        .args(["--seconds", "0.5", "--file-size", "4m", "--benchmarks", "mpi-io-test", "--ops", "read", "--out"])
        .arg(&out)
        .output()
        .expect("run tessera-bench");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "experiment failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    eprintln!("experiment took {:?}", t0.elapsed());
    let text = std::fs::read_to_string(out.join("iorch-homogeneous.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let recs = v.as_array().unwrap();
    let mut modes: Vec<&str> = recs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    modes.sort_unstable();
    assert_eq!(modes, ["iorchestrator", "off"], "{text}");
    for r in recs {
        assert_eq!(r.as_object().unwrap().len(), 7, "{r}");
        assert_eq!(r["benchmark"], "mpi-io-test");
        assert_eq!(r["op"], "read");
        assert!(r["param"].is_null());
        assert_eq!(r["device_model"], "none");
        assert!(r["throughput_mib_s"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["runs"], 1);
    }
    assert!(out.join("iorch-homogeneous.csv").exists());
    // One progress line per configuration.
    assert_eq!(stdout.lines().filter(|l| l.starts_with('[')).count(), 2, "{stdout}");
}
