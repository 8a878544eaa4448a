//! Harness for the cross-process tests: a real cluster of `tessera-mds`, `tessera-ds` (and `tessera-ion`) processes on
//! loopback, with certificates and configs made by [`tessera_ops::clusterdir::prepare`] (what
//! `tessera up` uses), started and stopped through [`tessera_ops::child`].

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_ops::child::{self, Child, READY_TIMEOUT};
use tessera_ops::clusterdir::{prepare, ClusterFiles, Server, Shape};
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

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub files: ClusterFiles,
    pub mds: Option<Child>,
    pub ds: Vec<Option<Child>>,
    /// Forwarding nodes.
    pub ion: Vec<Option<Child>>,
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
        let files = prepare(dir.path(), shape, 0, defaults).expect("prepare cluster");
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        Cluster {
            dir,
            files,
            mds: None,
            ds: (0..shape.ds).map(|_| None).collect(),
            ion: (0..shape.ion).map(|_| None).collect(),
        }
    }

    /// Changes the MDS's configuration file (before it starts).
    pub fn edit_mds_config(&self, edit: impl FnOnce(&mut ClusterConfig)) {
        let path = &self.files.mds_config;
        let mut cfg = ClusterConfig::load(path).expect("mds config");
        edit(&mut cfg);
        cfg.save(path).expect("save mds config");
    }

    pub fn boot(&mut self) {
        for i in 0..self.ds.len() {
            self.start_ds(i);
        }
        self.start_mds();
        for i in 0..self.ion.len() {
            self.start_ion(i);
        }
    }

    pub fn start_ion(&mut self, i: usize) {
        self.ion[i] = Some(self.spawn(self.files.ion_server(i)));
    }

    /// Starts `server` and waits for its READY line.
    fn spawn(&self, server: Server) -> Child {
        spawn_ready(
            &server.name,
            Command::new(bin(server.binary)).args(&server.args),
            &self.files.log_path(&server.name),
        )
    }

    pub fn kill9_ion(&mut self, i: usize) {
        if let Some(mut c) = self.ion[i].take() {
            c.kill();
        }
    }

    pub fn ds_data_dir(&self, i: usize) -> PathBuf {
        let cfg = ClusterConfig::load(&self.files.ds_configs[i]).expect("ds config");
        cfg.ds_node(i as u32).and_then(|d| d.data_dir.clone()).expect("ds data dir")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join("logs").join(format!("{name}.log"))
    }

    pub fn start_mds(&mut self) {
        self.mds = Some(self.spawn(self.files.mds_server()));
    }

    pub fn start_ds(&mut self, i: usize) {
        self.ds[i] = Some(self.spawn(self.files.ds_server(i)));
    }

    /// SIGKILL, like a crash.
    pub fn kill9_mds(&mut self) {
        if let Some(mut c) = self.mds.take() {
            c.kill();
        }
    }

    pub fn kill9_ds(&mut self, i: usize) {
        if let Some(mut c) = self.ds[i].take() {
            c.kill();
        }
    }

    /// True while every server process is still running (none crashed).
    pub fn all_alive(&mut self) -> bool {
        let mut ok = true;
        for c in self.mds.iter_mut().chain(self.ds.iter_mut().flatten()).chain(self.ion.iter_mut().flatten()) {
            if let Some(status) = c.try_wait() {
                eprintln!("server {} exited: {status}", c.name());
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
        // Before the directory goes: the servers are killed (as before, no grace: tests end abruptly).
        for c in self.mds.iter_mut().chain(self.ds.iter_mut().flatten()).chain(self.ion.iter_mut().flatten()) {
            c.kill();
        }
    }
}
