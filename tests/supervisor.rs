//! `tessera up` as a supervisor, with real processes: a data server killed with `kill -9` is started again
//! on its own while the MDS and the other servers keep serving, and SIGTERM stops everything, the MDS
//! last; a server that keeps failing at start makes `up` give up with its log's tail, stopping the
//! forwarding node first and the MDS last.

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_test_support::up::{tessera_ok, Up};
use tessera_test_support::{bin, pattern};

fn child_of<'a>(st: &'a Value, name: &str) -> &'a Value {
    st["children"].as_array().unwrap().iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name}: {st}"))
}

fn pid_of(st: &Value, name: &str) -> i32 {
    child_of(st, name)["pid"].as_u64().unwrap_or_else(|| panic!("{name} has no pid: {st}")) as i32
}

/// Whether process `pid` exists (a zombie counts).
fn exists(pid: i32) -> bool {
    // SAFETY: signal 0 only checks.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether `pid` runs (exists and is not a zombie).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The data servers of a file's stripes (`getstripe`'s table: stripe, ds, target, object).
fn stripe_servers(config: &Path, path: &str) -> Vec<u64> {
    let text = tessera_ok(config, &["getstripe", path]);
    text.lines()
        .skip_while(|l| !l.split_whitespace().eq(["stripe", "ds", "target", "object"]))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

#[test]
fn a_killed_data_server_comes_back_while_the_rest_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let mut up = Up::start(&tmp.path().join("cluster"), 3, 0);
    let st = up.status();
    assert_eq!(st["state"], "running", "{st}");
    let names: Vec<&str> = st["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["mds", "ds0", "ds1", "ds2"]);
    assert!(st["children"].as_array().unwrap().iter().all(|c| c["state"] == "running" && c["restarts"] == 0), "{st}");
    let out = Command::new(bin("tessera")).args(["status", "--config"]).arg(&up.config).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tessera status: all running, exit 0: {table}");
    assert!(
        table.contains("SERVER") && table.lines().any(|l| l.starts_with("ds1 ") && l.contains("running")),
        "{table}"
    );

    // Files with one stripe each: round-robin puts them on different data servers.
    let local = tmp.path().join("small.bin");
    std::fs::write(&local, pattern(3, 300_000)).unwrap();
    tessera_ok(&up.config, &["mkdir", "/one"]);
    tessera_ok(&up.config, &["setstripe", "-c", "1", "/one"]);
    let mut on_live = None;
    for i in 0..3 {
        let path = format!("/one/f{i}");
        tessera_ok(&up.config, &["put", "-q", local.to_str().unwrap(), &path]);
        if stripe_servers(&up.config, &path) != [1] {
            on_live = Some(path);
        }
    }
    let on_live = on_live.expect("a one-stripe file on a data server other than ds1");

    let victim = pid_of(&st, "ds1");
    let others: Vec<(&str, i32)> = ["mds", "ds0", "ds2"].iter().map(|n| (*n, pid_of(&st, n))).collect();
    // SAFETY: kill(2) of a server `tessera up` started for this test.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let killed = Instant::now();

    // The rest keeps serving: the metadata, a file on a live server.
    for (n, p) in &others {
        assert!(running(*p), "{n} (pid {p}) died with ds1");
    }
    tessera_ok(&up.config, &["ls", "-l", "/"]);
    let copy = tmp.path().join("copy.bin");
    tessera_ok(&up.config, &["get", "-q", &on_live, copy.to_str().unwrap()]);
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&local).unwrap(), "{on_live} read back wrong");

    // ds1 is back on its own, with a new pid.
    let back = loop {
        let st = up.status();
        let ds1 = child_of(&st, "ds1");
        if ds1["state"] == "running" && ds1["restarts"].as_u64() >= Some(1) {
            assert_ne!(ds1["pid"].as_u64(), Some(victim as u64), "{st}");
            assert!(ds1["last_exit"].as_str().is_some_and(|e| e.contains("SIGKILL") || e.contains('9')), "{st}");
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(15), "ds1 not back 15 s after kill -9: {st}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("ds1 back (READY) {back:?} after kill -9");
    for (n, p) in &others {
        assert!(running(*p), "{n} (pid {p}) was restarted or died: only ds1 was killed");
    }
    let st = up.status();
    assert!(["mds", "ds0", "ds2"].iter().all(|n| child_of(&st, n)["restarts"] == 0), "only ds1 was restarted: {st}");
    let log = std::fs::read_to_string(up.dir.join("logs/ds1.log")).unwrap();
    assert!(log.contains("=== tessera up: restart 1 of ds1"), "the restart is noted in ds1's log:\n{log}");
    assert!(up.stderr_text().contains("ds1 (pid"), "up says what happened:\n{}", up.stderr_text());

    // A new write over every data server, ds1 included, works.
    let big = tmp.path().join("big.bin");
    std::fs::write(&big, pattern(9, (3 << 20) + 777)).unwrap();
    tessera_ok(&up.config, &["put", "-q", "-c", "0", "-S", "64K", big.to_str().unwrap(), "/after.bin"]);
    let mut servers = stripe_servers(&up.config, "/after.bin");
    servers.sort_unstable();
    assert_eq!(servers, [0, 1, 2], "striped over all three");
    let copy = tmp.path().join("after-copy.bin");
    tessera_ok(&up.config, &["get", "-q", "/after.bin", copy.to_str().unwrap()]);
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&big).unwrap(), "/after.bin read back wrong");

    // SIGTERM: every server stops, the MDS last.
    let st = up.status();
    let pids: Vec<i32> = ["mds", "ds0", "ds1", "ds2"].iter().map(|n| pid_of(&st, n)).collect();
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(up.child.id() as i32, libc::SIGTERM) };
    let status = up.wait(Duration::from_secs(40));
    assert!(status.success(), "tessera up exited with {status} after SIGTERM:\n{}", up.stderr_text());
    for p in &pids {
        assert!(!exists(*p), "server pid {p} left behind");
    }
    let err = up.stderr_text();
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("no '{what}' in:\n{err}"));
    assert!(at("stopped ds0, ds1, ds2") < at("stopped mds"), "{err}");
    let st = up.status();
    assert_eq!(st["state"], "stopped", "{st}");
    assert!(st["children"].as_array().unwrap().iter().all(|c| c["state"] == "stopped" && c["pid"].is_null()), "{st}");
    let out = Command::new(bin("tessera")).args(["status", "--dir"]).arg(&up.dir).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "tessera status of a stopped cluster: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_server_that_keeps_failing_at_start_stops_up_with_its_log_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let mut up = Up::start(&tmp.path().join("cluster"), 2, 1);
    let st = up.status();
    let pids: Vec<i32> = ["mds", "ds0", "ds1", "ion0"].iter().map(|n| pid_of(&st, n)).collect();
    // ds1's configuration becomes unreadable, then ds1 dies: every start fails.
    std::fs::write(up.dir.join("ds1.toml"), "this is [not toml\n").unwrap();
    // SAFETY: kill(2) of a server `tessera up` started for this test.
    assert_eq!(unsafe { libc::kill(pids[2], libc::SIGKILL) }, 0);
    let t = Instant::now();
    let status = up.wait(Duration::from_secs(90));
    let err = up.stderr_text();
    eprintln!("tessera up gave up {:?} after the kill", t.elapsed());
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("ds1 failed to start 5 times in a row"), "{err}");
    assert!(err.contains("tessera-ds: config") && err.contains("ds1.toml"), "the log's tail is quoted:\n{err}");
    assert!(err.matches("failed to start (").count() == 4, "each failed start is reported:\n{err}");
    // It stops the cluster in order: the forwarding node, the data servers (ds1 has no process), the MDS.
    let at = |what: &str| err.find(what).unwrap_or_else(|| panic!("no '{what}' in:\n{err}"));
    assert!(at("stopped ion0") < at("stopped ds0") && at("stopped ds0") < at("stopped mds"), "{err}");
    for p in &pids {
        assert!(!exists(*p), "server pid {p} left behind");
    }
    let st = up.status();
    assert_eq!(st["state"], "failed", "{st}");
    assert_eq!(child_of(&st, "ds1")["state"], "failed", "{st}");
    assert!(st["message"].as_str().is_some_and(|m| m.contains("ds1 failed to start")), "{st}");
}
