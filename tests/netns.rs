//! Nothing assumes one host (issue 37): three metadata replicas and a data server, each in a network
//! namespace of its own with its own address on a bridge this test makes (no loopback between them), from
//! the files `tessera cluster init --hosts` writes; a client in a fifth namespace writes and lists a file,
//! the leading replica is killed (-9), and the client writes and reads again through the new leader.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_test_support::bin;

/// Runs `cmd`; panics with its output if it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// The bridge, the namespaces and the processes in them; removed when dropped.
struct Net {
    tag: String,
    n: usize,
    procs: Vec<(String, Child)>,
}

impl Net {
    fn ns(&self, i: usize) -> String {
        format!("tsn{}-{i}", self.tag)
    }

    /// `program` run in namespace `i`.
    fn exec(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(i)]).arg(program);
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (_, p) in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        for i in 1..=self.n {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(i)]).status();
        }
        let _ = Command::new("ip").args(["link", "del", &format!("tsbr{}", self.tag)]).status();
    }
}

#[test]
#[cfg_attr(not(tessera_root), ignore = "needs root (network namespaces)")]
fn replicas_in_separate_network_namespaces_serve_and_fail_over() {
    let tag = format!("{}", std::process::id() % 100_000);
    let mut net = Net { tag: tag.clone(), n: 5, procs: Vec::new() };
    let br = format!("tsbr{tag}");
    ip(&["link", "add", &br, "type", "bridge"]);
    ip(&["link", "set", &br, "up"]);
    for i in 1..=net.n {
        let (ns, veth) = (net.ns(i), format!("tv{tag}{i}"));
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
        ip(&["link", "set", &veth, "master", &br, "up"]);
        ip(&["-n", &ns, "addr", "add", &format!("10.77.{}.{i}/24", tag.parse::<u32>().unwrap() % 200), "dev", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
    }
    let subnet = tag.parse::<u32>().unwrap() % 200;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let hosts = format!(
        "mds mds0 10.77.{subnet}.1:7400 {d}/m0\nmds mds1 10.77.{subnet}.2:7400 {d}/m1\n\
         mds mds2 10.77.{subnet}.3:7400 {d}/m2\nds ds0 10.77.{subnet}.4:7410 {d}/d0\nclient c1 -\n",
        d = d.display()
    );
    std::fs::write(d.join("hosts"), hosts).unwrap();
    let c = d.join("c");
    run(Command::new(bin("tessera")).args(["cluster", "init", "--hosts"]).arg(d.join("hosts")).arg("--out").arg(&c));
    let start = |net: &mut Net, name: &str, i: usize, args: &[&str]| {
        let log = std::fs::File::create(c.join(format!("{name}.log"))).unwrap();
        let mut cmd = net.exec(i, &bin(if name.starts_with("mds") { "tessera-mds" } else { "tessera-ds" }));
        cmd.args(["--config", c.join(format!("{name}.toml")).to_str().unwrap()]).args(args);
        let child = cmd.stdout(Stdio::null()).stderr(log).spawn().unwrap();
        net.procs.push((name.to_string(), child));
    };
    for r in 0..3 {
        start(&mut net, &format!("mds{r}"), r + 1, &["--replica", &(r + 1).to_string()]);
    }
    start(&mut net, "ds0", 4, &["--id", "0"]);
    let cfg = c.join("c1.toml");
    let tessera = bin("tessera");
    let ns5 = net.ns(5);
    let client = |args: &[&str]| {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns5, "env"]).arg(format!("TESSERA_CONFIG={}", cfg.display())).arg(&tessera);
        cmd.args(args);
        cmd
    };
    let data = d.join("f");
    std::fs::write(&data, b"across hosts").unwrap();
    // The servers come up and elect (the client's calls wait for a leader).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client(&["mds", "status"]).output().unwrap().stdout.windows(6).any(|w| w == b"leader") {
        assert!(Instant::now() < deadline, "no leader within a minute");
        std::thread::sleep(Duration::from_millis(200));
    }
    run(&mut client(&["put", data.to_str().unwrap(), "/f"]));
    assert!(run(&mut client(&["ls", "/"])).contains('f'));
    // Kill the leader; the client goes on with the new one.
    let status = run(&mut client(&["mds", "status", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let leader =
        v.as_array().unwrap().iter().find(|r| r["role"] == "leader").unwrap()["name"].as_str().unwrap().to_string();
    let k = net.procs.iter().position(|(n, _)| *n == leader).unwrap();
    net.procs[k].1.kill().unwrap();
    net.procs[k].1.wait().unwrap();
    run(&mut client(&["put", data.to_str().unwrap(), "/g"]));
    let listing = run(&mut client(&["ls", "/"]));
    assert!(listing.contains('f') && listing.contains('g'), "{listing}");
    let back = d.join("back");
    run(&mut client(&["get", "/f", back.to_str().unwrap()]));
    assert_eq!(std::fs::read(&back).unwrap(), b"across hosts");
    let after: serde_json::Value = serde_json::from_str(&run(&mut client(&["mds", "status", "--json"]))).unwrap();
    let new_leader = after.as_array().unwrap().iter().find(|r| r["role"] == "leader").unwrap()["name"].clone();
    assert_ne!(new_leader.as_str(), Some(leader.as_str()), "{after}");
}
