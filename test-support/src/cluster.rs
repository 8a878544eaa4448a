//! Harness for the cross-process tests: a real cluster of `tessera-mds`, `tessera-ds` (and `tessera-ion`)
//! processes on loopback: the local-cluster type of `tessera-ops` (what `tessera-bench` uses; its
//! certificates and configs are what `tessera up` writes), blocking, panicking with the log's tail when
//! a server does not start.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_ops::child::{self, Child, READY_TIMEOUT};
use tessera_ops::cluster::LocalCluster;
use tessera_ops::clusterdir::{ClusterFiles, Shape};
use tessera_proto::config::{ClusterConfig, Defaults};

/// Path of a Tessera binary (`tessera`, `tessera-mds`, ...): in `$TESSERA_BIN_DIR`, next to the running
/// executable, or — for a test executable in `target/<profile>/deps/` — in `target/<profile>/`, where
/// cargo puts the root package's binaries it builds for the integration tests.
pub fn bin(name: &str) -> PathBuf {
    if let Ok(p) = child::server_binary(name) {
        return p;
    }
    let exe = std::env::current_exe().expect("current exe");
    let p = exe.parent().and_then(|d| d.parent()).expect("target directory").join(name);
    assert!(p.is_file(), "{} is missing: build it (`cargo build --bins`) or set TESSERA_BIN_DIR", p.display());
    p
}

/// Spawns a server and waits for its `READY` line (its stderr goes to `log`); panics with the log's tail if
/// it does not become ready.
pub fn spawn_ready(name: &str, cmd: &mut Command, log: &std::path::Path) -> Child {
    let mut c = child::spawn(name, cmd, Some(log)).expect("spawn server");
    if let Err(e) = c.wait_ready(READY_TIMEOUT) {
        panic!("{e}");
    }
    c
}

/// A cluster of real server processes for one test ([`LocalCluster`]), in a temporary directory, killed
/// when the test ends.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub files: ClusterFiles,
    procs: LocalCluster,
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
        Cluster::prepared_shape(Shape::ds(n_ds), defaults)
    }

    /// A cluster of `shape.ds` data servers and `shape.ion` forwarding nodes, started.
    pub fn start_shape(shape: Shape, defaults: Defaults) -> Cluster {
        let mut c = Cluster::prepared_shape(shape, defaults);
        c.boot();
        c
    }

    /// [`Cluster::prepared`] with forwarding nodes.
    pub fn prepared_shape(shape: Shape, defaults: Defaults) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let procs =
            LocalCluster::prepare(dir.path(), shape, 0, defaults).expect("prepare cluster").with_binaries(locate);
        Cluster { files: procs.files.clone(), dir, procs }
    }

    /// Changes the MDS's configuration file (before it starts).
    pub fn edit_mds_config(&self, edit: impl FnOnce(&mut ClusterConfig)) {
        LocalCluster::edit_config(&self.files.mds_config, edit).expect("edit the mds config");
    }

    /// Starts every server, stage by stage (the MDS, the data servers, the forwarding nodes).
    pub fn boot(&mut self) {
        self.procs.start_all_blocking().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts server `name` (`mds`, `ds0`, `ion1`) and waits for its READY line; panics with its log's
    /// tail if it does not become ready.
    pub fn start_server(&mut self, name: &str) {
        self.procs.start(name).unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn start_mds(&mut self) {
        self.start_server("mds");
    }

    pub fn start_ds(&mut self, i: usize) {
        self.start_server(&format!("ds{i}"));
    }

    pub fn start_ion(&mut self, i: usize) {
        self.start_server(&format!("ion{i}"));
    }

    /// SIGKILL, like a crash (nothing if it does not run).
    pub fn kill9(&mut self, name: &str) {
        let _ = self.procs.kill9(name);
    }

    pub fn kill9_mds(&mut self) {
        self.kill9("mds");
    }

    pub fn kill9_ds(&mut self, i: usize) {
        self.kill9(&format!("ds{i}"));
    }

    pub fn kill9_ion(&mut self, i: usize) {
        self.kill9(&format!("ion{i}"));
    }

    /// The process id of server `name`, if it runs.
    pub fn pid(&mut self, name: &str) -> Option<u32> {
        self.procs.pid(name)
    }

    pub fn ds_data_dir(&self, i: usize) -> PathBuf {
        let cfg = ClusterConfig::load(&self.files.ds_configs[i]).expect("ds config");
        cfg.ds_node(i as u32).and_then(|d| d.data_dir.clone()).expect("ds data dir")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.files.log_path(name)
    }

    /// Runs `tessera fsck ARGS --json` with the admin configuration: its exit code and report.
    pub fn fsck(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let out = Command::new(bin("tessera"))
            .arg("--config")
            .arg(&self.files.admin_config)
            .arg("fsck")
            .args(args)
            .arg("--json")
            .output()
            .expect("run tessera fsck");
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("fsck printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap_or(-1), report)
    }

    /// True while every server process started is still running (none crashed).
    pub fn all_alive(&mut self) -> bool {
        let exited = self.procs.exited();
        for (name, status) in &exited {
            eprintln!("server {name} exited: {status}");
        }
        exited.is_empty()
    }

    pub fn client_config(&self) -> ClusterConfig {
        ClusterConfig::load(&self.files.client_config).expect("client config")
    }

    pub async fn client(&self) -> Client {
        connect(&self.client_config()).await
    }
}

/// Where the tests find the servers: [`bin`].
fn locate(name: &str) -> std::io::Result<PathBuf> {
    Ok(bin(name))
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
