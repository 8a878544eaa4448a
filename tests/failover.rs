//! Metadata failover (issue 37) with real processes: three metadata replicas, the leader killed with
//! SIGKILL (or paused with SIGSTOP) while mdtest iterations and a probe run (`tessera-bench failover`):
//! no mdtest error (a create lost, or applied twice by a resend, fails it), no probe error, fsck clean,
//! and a paused old leader refuses a write sent straight to it after SIGCONT and ends by itself; files
//! held open and unlinked across the kills read back intact and go at their last close.

use std::process::Command;
use tessera_test_support::bin;

/// Runs `tessera-bench failover ARGS` in a temporary directory; its JSON results and its output.
fn failover(args: &[&str]) -> (serde_json::Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("failover.json");
    let dir = tmp.path().join("work");
    let out = Command::new(bin("tessera-bench"))
        .arg("failover")
        .args(args)
        .args(["--dir", dir.to_str().unwrap(), "--json", json.to_str().unwrap()])
        .args(["--every-s", "2", "--down-s", "1", "--tasks", "2", "--files", "300", "--seed", "5"])
        .output()
        .expect("tessera-bench runs");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tessera-bench failover failed:\n{text}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, text)
}

/// What every run must show: each kill answered by another replica serving, nothing lost or doubled.
fn check(v: &serde_json::Value, kills: usize, out: &str) {
    let k = v["kills"].as_array().unwrap();
    assert_eq!(k.len(), kills, "{out}");
    for kill in k {
        assert_ne!(kill["victim"], kill["new_leader"], "{out}");
        assert!(kill["gap_s"].as_f64().unwrap() < 30.0, "{out}");
    }
    assert!(v["mdtest_iterations"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(v["mdtest_errors"].as_array().unwrap().len(), 0, "{out}");
    assert_eq!(v["probe_errors"], 0, "{out}");
    assert!(v["probe_ops"].as_u64().unwrap() > 10, "{out}");
    assert_eq!(v["probe_left"], 0, "{out}");
    assert_eq!(v["fsck_findings"], 0, "{out}");
    // A file held open and unlinked before each kill lives on through the failovers (its holder
    // reasserted the handle within the new leader's grace period) and goes at its last close.
    assert_eq!(v["held_files"], kills, "{out}");
    assert_eq!(v["held_files_lost"], 0, "{out}");
    assert_eq!(v["held_files_leaked"], 0, "{out}");
}

#[test]
fn killing_the_metadata_leader_under_mdtest_loses_nothing() {
    let (v, out) = failover(&["--kills", "2"]);
    check(&v, 2, &out);
}

#[test]
fn a_paused_metadata_leader_refuses_writes_once_another_leads() {
    let (v, out) = failover(&["--kills", "1", "--pause"]);
    check(&v, 1, &out);
    let k = &v["kills"][0];
    assert_eq!(k["stale_write_accepted"], false, "{out}");
    assert!(k["deposed_exit_s"].as_f64().is_some_and(|s| s < 30.0), "the old leader did not end by itself: {out}");
    assert_eq!(v["stale_writes_accepted"], 0, "{out}");
}

#[test]
#[cfg_attr(not(all(tessera_fuse, tessera_root)), ignore = "needs /dev/fuse and root")]
fn killing_the_metadata_leader_under_mdtest_through_a_mount_loses_nothing() {
    let (v, out) = failover(&["--kills", "1", "--mount"]);
    check(&v, 1, &out);
    assert_eq!(v["api"], "posix (FUSE mount)", "{out}");
}
