//! The embedded default end to end: `tessera up` starts a cluster of real processes, the CLI uses it,
//! Ctrl-C (SIGINT) stops every child, and a second `up` on the same directory finds the data again.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_test_support::up::{tessera_ok, Up};
use tessera_test_support::{bin, pattern};

fn up(dir: &Path) -> Up {
    Up::start(dir, 3, 0)
}

fn stop(u: Up) {
    u.stop();
}

fn tessera(config: &Path, args: &[&str]) -> String {
    tessera_ok(config, args)
}

/// Server processes whose command line mentions `dir`.
fn servers_running_in(dir: &Path) -> usize {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| (c.contains("tessera-mds") || c.contains("tessera-ds")) && c.contains(&needle))
        .count()
}

#[test]
fn up_cli_roundtrip_stop_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.bin");
    let data = pattern(5, (9 << 20) + 12345);
    std::fs::write(&local, &data).unwrap();
    let fetched = dir.path().join("fetched.bin");
    let cdir = dir.path().join("cluster");

    let u = up(&cdir);
    assert_eq!(servers_running_in(&cdir), 4);
    tessera(&u.config, &["mkdir", "-p", "/demo/in"]);
    tessera(&u.config, &["setstripe", "-S", "256K", "-c", "2", "/demo/in"]);
    tessera(&u.config, &["--job", "cli-test", "put", "--quiet", local.to_str().unwrap(), "/demo/in/big.bin"]);
    let stripe = tessera(&u.config, &["getstripe", "/demo/in/big.bin"]);
    assert!(stripe.contains("262144") && stripe.contains('2'), "getstripe output: {stripe}");
    tessera(&u.config, &["mv", "/demo/in/big.bin", "/demo/big.bin"]);
    let ls = tessera(&u.config, &["ls", "-l", "/demo"]);
    assert!(ls.contains("big.bin") && ls.contains(&data.len().to_string()), "ls output: {ls}");
    let df = tessera(&u.config, &["df"]);
    assert!(
        df.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count() >= 3,
        "df output: {df}"
    );
    // Per-job counters reach the MDS with the data servers' periodic reports.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let jobs = tessera(&u.config, &["df", "--jobs"]);
        if jobs.lines().any(|l| l.contains("cli-test") && l.contains("MiB")) {
            break;
        }
        assert!(Instant::now() < deadline, "per-job counters never showed the put: {jobs}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // The same counters as JSON, in exact bytes: the put wrote the whole file once over the servers
    // (every server's next report has its share).
    loop {
        let json: serde_json::Value = serde_json::from_str(&tessera(&u.config, &["df", "--json"])).unwrap();
        let servers = json["servers"].as_array().expect("df --json: servers, a list of data servers");
        let targets = json["targets"].as_array().expect("df --json: targets");
        assert!(targets.len() >= servers.len() && json["ost_cost"].as_f64().is_some_and(|c| c >= 1.0), "{json}");
        assert!(targets.iter().all(|t| t["capacity"].as_u64() >= t["used"].as_u64() && t["server"].is_u64()), "{json}");
        assert!(servers.len() >= 2 && servers.iter().all(|s| s["report"]["capacity"].as_u64().is_some()), "{json}");
        let written: u64 = servers
            .iter()
            .flat_map(|s| s["report"]["jobs"].as_array().cloned().unwrap_or_default())
            .filter(|j| j["job"] == "cli-test")
            .map(|j| j["write_bytes"].as_u64().unwrap())
            .sum();
        assert!(written <= data.len() as u64, "{json}");
        if written == data.len() as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "df --json never showed the whole put: {json}");
        std::thread::sleep(Duration::from_millis(300));
    }
    stop(u);
    assert_eq!(servers_running_in(&cdir), 0, "children left running after SIGINT");

    // Restart on the same directory: same data.
    let u = up(&cdir);
    tessera(&u.config, &["get", "--quiet", "/demo/big.bin", fetched.to_str().unwrap()]);
    assert!(std::fs::read(&fetched).unwrap() == data, "data changed across restart");
    let cat =
        Command::new(bin("tessera")).arg("--config").arg(&u.config).args(["cat", "/demo/big.bin"]).output().unwrap();
    assert!(cat.stdout == data);
    // Errors are clear and non-zero.
    let out = Command::new(bin("tessera")).arg("--config").arg(&u.config).args(["stat", "/missing"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"), "{}", String::from_utf8_lossy(&out.stderr));
    tessera(&u.config, &["rm", "-r", "/demo"]);
    stop(u);
}
