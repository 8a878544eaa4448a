//! Harness for the cross-process tests: a real cluster of `tessera-mds` and `tessera-ds` processes on
//! loopback, with certificates and configs made by `tessera_client::cluster::prepare` (what `tessera up` uses).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_proto::config::{ClusterConfig, Defaults};

pub fn bin(name: &str) -> PathBuf {
    // Cargo builds the root package's binaries for its integration tests and tells us where.
    let p = match name {
        "tessera" => env!("CARGO_BIN_EXE_tessera"),
        "tessera-mds" => env!("CARGO_BIN_EXE_tessera-mds"),
        "tessera-ds" => env!("CARGO_BIN_EXE_tessera-ds"),
        "tessera-bench" => env!("CARGO_BIN_EXE_tessera-bench"),
        other => panic!("unknown binary {other}"),
    };
    PathBuf::from(p)
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub files: tessera_client::cluster::ClusterFiles,
    pub mds: Option<Child>,
    pub ds: Vec<Option<Child>>,
}

/// Spawns a server and waits for its `READY` line (its stderr goes to `log`).
pub fn spawn_ready(cmd: &mut Command, log: &Path) -> Child {
    let logf = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::from(logf)).spawn().expect("spawn server");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut sent = false;
        while let Some(Ok(l)) = lines.next() {
            if !sent && l.starts_with("READY") {
                let _ = tx.send(l.clone());
                sent = true;
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(_) => child,
        Err(_) => {
            let _ = child.kill();
            panic!("server {:?} not READY in 30 s; log:\n{}", cmd, std::fs::read_to_string(log).unwrap_or_default());
        }
    }
}

impl Cluster {
    pub fn start(n_ds: usize) -> Cluster {
        Cluster::start_with(n_ds, Defaults::default())
    }

    pub fn start_with(n_ds: usize, defaults: Defaults) -> Cluster {
        let mut c = Cluster::prepared(n_ds, defaults);
        c.boot();
        c
    }

    /// Certificates, configs and data directories, but no process yet.
    pub fn prepared(n_ds: usize, defaults: Defaults) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = tessera_client::cluster::prepare(dir.path(), n_ds, 0, defaults).expect("prepare cluster");
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        Cluster { dir, files, mds: None, ds: (0..n_ds).map(|_| None).collect() }
    }

    pub fn boot(&mut self) {
        for i in 0..self.ds.len() {
            self.start_ds(i);
        }
        self.start_mds();
    }

    pub fn ds_data_dir(&self, i: usize) -> PathBuf {
        let cfg = ClusterConfig::load(&self.files.ds_configs[i]).expect("ds config");
        cfg.ds_node(i as u32).and_then(|d| d.data_dir.clone()).expect("ds data dir")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{name}.log"))
    }

    pub fn start_mds(&mut self) {
        let child =
            spawn_ready(Command::new(bin("tessera-mds")).arg("--config").arg(&self.files.mds_config), &self.log("mds"));
        self.mds = Some(child);
    }

    pub fn start_ds(&mut self, i: usize) {
        let child = spawn_ready(
            Command::new(bin("tessera-ds"))
                .arg("--config")
                .arg(&self.files.ds_configs[i])
                .arg("--id")
                .arg(i.to_string()),
            &self.log(&format!("ds{i}")),
        );
        self.ds[i] = Some(child);
    }

    /// SIGKILL, like a crash.
    pub fn kill9_mds(&mut self) {
        if let Some(mut c) = self.mds.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn kill9_ds(&mut self, i: usize) {
        if let Some(mut c) = self.ds[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// True while every server process is still running (none crashed).
    pub fn all_alive(&mut self) -> bool {
        let mut ok = true;
        for c in self.mds.iter_mut().chain(self.ds.iter_mut().flatten()) {
            if let Ok(Some(status)) = c.try_wait() {
                eprintln!("server exited: {status}");
                ok = false;
            }
        }
        ok
    }

    pub fn client_config(&self) -> ClusterConfig {
        ClusterConfig::load(&self.files.client_config).expect("client config")
    }

    pub async fn client(&self) -> Client {
        connect(&self.client_config()).await
    }
}

/// A client of `cfg`'s cluster, retrying for 30 s while the servers come up.
pub async fn connect(cfg: &ClusterConfig) -> Client {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match Client::connect(cfg).await {
            Ok(c) => return c,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot connect: {e}"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in self.mds.iter_mut().chain(self.ds.iter_mut().flatten()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), so failures are reproducible.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
