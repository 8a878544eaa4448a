//! One local cluster: the servers of a prepared cluster directory ([`crate::clusterdir`]) as child
//! processes of this one, started stage by stage (the MDS, then the data servers, then the forwarding
//! nodes), each waited for until it says `READY`, killed or started again by name, stopped cleanly or
//! killed with the cluster. `tessera up` (its supervisor adds the restart policy and the status file),
//! `tessera-bench` (its experiments, soak and fuzzer) and the cross-process tests run their clusters with it.
//!
//! Processes only: connecting clients to the cluster is the caller's (this crate is below the client
//! library).

use crate::child::{self, Child, READY_TIMEOUT, STOP_GRACE};
use crate::clusterdir::{prepare, ClusterFiles, Server, Shape};
use std::io::{Error, ErrorKind, Result};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use tessera_proto::config::{ClusterConfig, Defaults};

/// Where a server's binary is, given its name (`tessera-mds`, ...).
pub type Locate = fn(&str) -> Result<PathBuf>;

/// The servers of one cluster directory and the processes running them.
pub struct LocalCluster {
    pub files: ClusterFiles,
    /// Running servers (and ones that ended and were not looked at yet), in start order.
    children: Vec<Child>,
    locate: Locate,
    /// Each server in a process group of its own (`tessera up`: a Ctrl-C on the terminal reaches only the
    /// supervisor, which stops the servers in order).
    own_groups: bool,
}

/// `e` as an I/O error of kind `Other`, kept whole (its sources too: `tessera_proto::error::chain` prints them).
fn other(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::other(e)
}

impl LocalCluster {
    /// The servers of `files`, none started; binaries are found with [`child::server_binary`].
    pub fn new(files: ClusterFiles) -> LocalCluster {
        LocalCluster { files, children: Vec::new(), locate: child::server_binary, own_groups: false }
    }

    /// Writes a fresh cluster directory into `dir` ([`prepare`]; its `logs/` made) and returns its servers,
    /// none started.
    pub fn prepare(dir: &Path, shape: Shape, port_base: u16, defaults: Defaults) -> Result<LocalCluster> {
        let files = prepare(dir, shape, port_base, defaults).map_err(other)?;
        std::fs::create_dir_all(dir.join("logs"))?;
        Ok(LocalCluster::new(files))
    }

    /// Finds the binaries with `locate` instead.
    pub fn with_binaries(mut self, locate: Locate) -> LocalCluster {
        self.locate = locate;
        self
    }

    /// Starts each server in a process group of its own, so that a signal to this process's group (a
    /// Ctrl-C on its terminal) does not reach the servers.
    pub fn with_own_process_groups(mut self) -> LocalCluster {
        self.own_groups = true;
        self
    }

    /// Finds every server's binary, so that a missing one is reported before anything starts.
    pub fn locate_binaries(&self) -> Result<()> {
        self.servers().iter().try_for_each(|s| (self.locate)(s.binary).map(drop))
    }

    /// Every server, in start order.
    pub fn servers(&self) -> Vec<Server> {
        self.files.start_stages().into_iter().flatten().collect()
    }

    /// The servers' names (`mds`, `ds0`, ..., `ion0`, ...), in start order.
    pub fn server_names(&self) -> Vec<String> {
        self.servers().into_iter().map(|s| s.name).collect()
    }

    fn server(&self, name: &str) -> Result<Server> {
        self.servers()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("no server {name} in this cluster")))
    }

    /// The process of server `name` (running, or ended and not yet looked at): to poll its readiness or
    /// exit, or signal it.
    pub fn child(&mut self, name: &str) -> Result<&mut Child> {
        self.children
            .iter_mut()
            .find(|c| c.name() == name)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("{name} is not running")))
    }

    /// Starts server `name` (its stderr appended to its log; it dies with this process) without waiting
    /// for it to be ready.
    pub fn spawn(&mut self, name: &str) -> Result<()> {
        if self.pid(name).is_some() {
            return Err(Error::new(ErrorKind::AlreadyExists, format!("{name} is running")));
        }
        let s = self.server(name)?;
        let mut cmd = s.command(&(self.locate)(s.binary)?);
        if self.own_groups {
            std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        }
        let c = child::spawn(&s.name, child::die_with_parent(&mut cmd), Some(&self.files.log_path(&s.name)))?;
        self.children.push(c);
        Ok(())
    }

    /// Waits until server `name` is ready; the error quotes the end of its log.
    pub fn wait_ready(&mut self, name: &str) -> Result<()> {
        self.child(name)?.wait_ready(READY_TIMEOUT).map(drop)
    }

    /// [`LocalCluster::wait_ready`] for async callers.
    pub async fn ready(&mut self, name: &str) -> Result<()> {
        self.child(name)?.ready(READY_TIMEOUT).await.map(drop)
    }

    /// Starts server `name` and waits until it is ready (also after [`LocalCluster::kill9`]).
    pub fn start(&mut self, name: &str) -> Result<()> {
        self.spawn(name)?;
        self.wait_ready(name)
    }

    /// [`LocalCluster::start`] for async callers.
    pub async fn restart(&mut self, name: &str) -> Result<()> {
        self.spawn(name)?;
        self.ready(name).await
    }

    /// Starts every server stage by stage, each stage once the one before is ready.
    pub async fn start_all(&mut self) -> Result<()> {
        for stage in self.files.start_stages() {
            for s in &stage {
                self.spawn(&s.name)?;
            }
            for s in &stage {
                self.ready(&s.name).await?;
            }
        }
        Ok(())
    }

    /// [`LocalCluster::start_all`], blocking.
    pub fn start_all_blocking(&mut self) -> Result<()> {
        for stage in self.files.start_stages() {
            for s in &stage {
                self.spawn(&s.name)?;
            }
            for s in &stage {
                self.wait_ready(&s.name)?;
            }
        }
        Ok(())
    }

    /// The process id of server `name`, if it runs.
    pub fn pid(&mut self, name: &str) -> Option<u32> {
        let c = self.child(name).ok()?;
        c.running().then(|| c.id())
    }

    /// Kills server `name` with SIGKILL, like a crash, and reaps it.
    pub fn kill9(&mut self, name: &str) -> Result<()> {
        let k = self
            .children
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("{name} is not running")))?;
        let mut c = self.children.remove(k);
        c.kill();
        Ok(())
    }

    /// The process id of server `name`'s process while the cluster holds it (running, or ended and not yet
    /// forgotten: [`LocalCluster::forget`]).
    pub fn process_id(&self, name: &str) -> Option<u32> {
        self.children.iter().find(|c| c.name() == name).map(Child::id)
    }

    /// Forgets the process of server `name` (one that ended, or one whose end is not waited for): it is
    /// returned, and killed when dropped.
    pub fn forget(&mut self, name: &str) -> Option<Child> {
        let k = self.children.iter().position(|c| c.name() == name)?;
        Some(self.children.remove(k))
    }

    /// The servers that ended since started (each reported once, then forgotten).
    pub fn exited(&mut self) -> Vec<(String, ExitStatus)> {
        let mut out = Vec::new();
        self.children.retain_mut(|c| match c.try_wait() {
            Some(status) => {
                out.push((c.name().to_string(), status));
                false
            }
            None => true,
        });
        out
    }

    /// SIGTERMs every server, gives them [`STOP_GRACE`] to exit, SIGKILLs the rest.
    pub async fn stop(&mut self) {
        child::stop_all_async(&mut self.children, STOP_GRACE).await;
        self.children.clear();
    }

    /// SIGKILLs every server at once (a test ending, a failed start).
    pub fn kill_all(&mut self) {
        for c in &mut self.children {
            c.kill();
        }
        self.children.clear();
    }

    /// Every node's configuration file (MDS, data servers, forwarding nodes, client, admin).
    pub fn config_files(&self) -> Vec<PathBuf> {
        let f = &self.files;
        let mut all = vec![f.mds_config.clone(), f.client_config.clone(), f.admin_config.clone()];
        all.extend(f.ds_configs.iter().cloned());
        all.extend(f.ion_configs.iter().cloned());
        all
    }

    /// Applies `edit` to the configuration file `path` (before the servers that read it start).
    pub fn edit_config(path: &Path, edit: impl FnOnce(&mut ClusterConfig)) -> Result<()> {
        let mut c = ClusterConfig::load(path).map_err(other)?;
        edit(&mut c);
        c.save(path).map_err(other)
    }

    /// Applies `edit` to every node's configuration.
    pub fn edit_configs(&self, edit: impl Fn(&mut ClusterConfig)) -> Result<()> {
        self.config_files().iter().try_for_each(|p| LocalCluster::edit_config(p, &edit))
    }

    /// The data servers' data directories, by data server.
    pub fn ds_data_dirs(&self) -> Result<Vec<PathBuf>> {
        let cfg = ClusterConfig::load(&self.files.client_config).map_err(other)?;
        Ok(cfg.ds.iter().filter_map(|d| d.data_dir.clone()).collect())
    }
}

impl Drop for LocalCluster {
    /// The servers do not outlive their cluster (a test or a run that ends early).
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names, configs and the errors of a cluster whose servers are not started (processes are tested
    /// through tessera-bench and the cross-process tests, which need the binaries).
    #[test]
    fn servers_configs_and_errors_before_start() {
        let dir = tempfile::tempdir().unwrap();
        let shape = Shape { ds: 2, ion: 1, ..Shape::default() };
        let mut c = LocalCluster::prepare(dir.path(), shape, 0, Defaults::default())
            .unwrap()
            .with_binaries(|name| Err(Error::new(ErrorKind::NotFound, format!("no {name} here"))));
        assert_eq!(c.server_names(), ["mds", "ds0", "ds1", "ion0"]);
        assert_eq!(c.config_files().len(), 6);
        c.edit_configs(|cfg| cfg.orchestrator.window_ms = 123).unwrap();
        for p in c.config_files() {
            assert_eq!(ClusterConfig::load(&p).unwrap().orchestrator.window_ms, 123, "{}", p.display());
        }
        assert_eq!(c.ds_data_dirs().unwrap().len(), 2);
        assert_eq!(c.pid("ds0"), None);
        assert_eq!(c.kill9("ds0").unwrap_err().kind(), ErrorKind::NotFound);
        assert_eq!(c.spawn("ds9").unwrap_err().kind(), ErrorKind::NotFound, "no such server");
        let e = c.spawn("ds0").unwrap_err();
        assert!(e.to_string().contains("no tessera-ds here"), "{e}");
        assert!(c.exited().is_empty());
    }
}
