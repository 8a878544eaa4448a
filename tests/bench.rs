//! `tessera-bench` against real processes: IOR runs through the library repeated on the files they kept,
//! and the transport benchmark (`net`) between its own server processes.

use std::path::Path;
use std::process::Command;
use tessera_test_support::{bin, Cluster};

fn bench(args: &[&str], config: Option<&Path>) -> String {
    let mut cmd = Command::new(bin("tessera-bench"));
    cmd.args(args);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let o = cmd.output().expect("run tessera-bench");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "tessera-bench {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    stdout
}

#[test]
fn ior_through_the_library_rewrites_the_files_it_kept() {
    let cl = Cluster::start(2);
    let cfg = cl.files.client_config.clone();
    for layout in [&["-F"][..], &[][..]] {
        for _ in 0..2 {
            // Write and keep (-k), twice: the second run finds the files and rewrites them.
            let mut args = vec!["ior", "-a", "tessera", "-w", "-k", "--verify", "-t", "64k", "-b", "1m", "-N", "2"];
            args.extend_from_slice(&["-o", "/rewrite/f"]);
            args.extend_from_slice(layout);
            bench(&args, Some(&cfg));
        }
        let mut args = vec!["ior", "-a", "tessera", "-r", "-k", "--verify", "-t", "64k", "-b", "1m", "-N", "2"];
        args.extend_from_slice(&["-o", "/rewrite/f"]);
        args.extend_from_slice(layout);
        let out = bench(&args, Some(&cfg));
        assert!(out.contains("read"), "{out}");
        // Through the engine's read-ahead (checked), and without --verify (the reads' pieces, ungathered).
        for extra in [&["--verify", "--read-ahead"][..], &[][..]] {
            let mut args = vec!["ior", "-a", "tessera", "-r", "-k", "-t", "64k", "-b", "1m", "-N", "2"];
            args.extend_from_slice(&["-o", "/rewrite/f"]);
            args.extend_from_slice(extra);
            args.extend_from_slice(layout);
            let out = bench(&args, Some(&cfg));
            assert!(out.contains("read"), "{out}");
        }
    }
}

#[test]
fn net_moves_payloads_between_server_processes_and_reports_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("net.json");
    let json_arg = json.to_string_lossy().into_owned();
    let out =
        bench(&["net", "--servers", "2", "-N", "1", "--depth", "2", "-s", "8m", "-i", "2", "--json", &json_arg], None);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let phases = v["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(names, ["write", "read", "write", "read"], "{out}");
    for p in phases {
        assert!(p["mib_s"].as_f64().unwrap() > 0.0, "{p}");
        // 8 MiB cannot move without CPU on both ends (ticks are 10 ms: summed over the client's run).
        assert!(p["client_cpu_ms_per_mib"].as_f64().unwrap() >= 0.0, "{p}");
    }
    let cpu: f64 = phases
        .iter()
        .map(|p| p["client_cpu_ms_per_mib"].as_f64().unwrap() + p["servers_cpu_ms_per_mib"].as_f64().unwrap())
        .sum();
    assert!(cpu > 0.0, "no CPU measured at all: {out}");
    let medians: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("med"))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(medians, ["write", "read"], "{out}");
}

/// The crash soak, short: three kills of random servers under fsync'ed writers, every byte read back,
/// fsck after each round; as root (CI) also the full target on a small tmpfs.
#[test]
fn chaos_survives_kills_loses_nothing_and_fsck_finds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("chaos.json");
    let dir = tmp.path().join("work");
    let (json_arg, dir_arg) = (json.to_string_lossy().into_owned(), dir.to_string_lossy().into_owned());
    let args = ["chaos", "--kills", "3", "--round-s", "1.5", "--seed", "7", "--full-size", "64M"];
    let out = bench(&[&args[..], &["--dir", &dir_arg, "--json", &json_arg]].concat(), None);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["kills"], 3, "{out}");
    assert_eq!(v["rounds"], 3, "{out}");
    assert_eq!(v["bytes_lost"], 0, "{out}");
    assert_eq!(v["fsck_findings"], 0, "{out}");
    assert_eq!(v["stuck_writers"], 0, "{out}");
    assert!(v["bytes_verified"].as_u64().unwrap() > 0, "{out}");
    assert_eq!(v["bytes_verified"], v["bytes_fsynced"], "{out}");
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let full = &v["full_target"];
        assert!(full["filler_error"].as_str().unwrap().contains("No space"), "{out}");
        assert!(full["striped_write_error"].as_str().unwrap().contains("No space"), "{out}");
        assert_eq!(full["kept_files_verified"], true, "{out}");
        assert_eq!(full["fsck_findings"], 0, "{out}");
    }
}
