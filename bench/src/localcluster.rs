//! A local cluster for experiments: the cluster type of `tessera-ops` (certificates, configs, the servers
//! as child processes found next to the running executable), its configs edited for the experiment
//! (device model, object reservation, trace, orchestrator), and the clients experiments use.

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use tessera_client::proto::msg::{MdsReply, MdsRequest, OrchestratorMode, OrchestratorStatus, SchedulerSetting};
use tessera_client::{Client, ClusterConfig, Defaults, ErrorCode};
use tessera_ops::child::{self, Child};
use tessera_ops::clusterdir::ClusterFiles;
use tessera_proto::config::{DeviceKind, Elevator};

/// What the experiment needs from the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterOptions {
    /// Metadata replicas (1: one metadata server).
    pub n_mds: usize,
    pub n_ds: usize,
    pub stripe_size: u64,
    pub device_model: DeviceKind,
    /// Address space per object on each server (sets on-disk distances between files); None: default.
    pub reservation: Option<u64>,
    /// Capacity of the emulated disk in GB (the seek curve is over this span); None: the config default.
    pub disk_gb: Option<f64>,
    pub trace: bool,
    pub window_ms: u32,
    /// The mode the MDS starts in (switched at run time per configuration).
    pub mode: OrchestratorMode,
    /// Forwarding nodes (their scheduler is switched at run time per configuration).
    pub n_ion: usize,
    /// `ion_options.dispatch_depth` (None: the default).
    pub ion_dispatch_depth: Option<u32>,
    /// `ds_options.hdd.elevator` (None: the default, clook).
    pub hdd_elevator: Option<Elevator>,
}

impl ClusterOptions {
    /// A cluster with defaults only: `n_ds` data servers and `n_ion` forwarding nodes, 1 MiB stripes, no
    /// device model, no trace, the orchestrator off (the soak and the fuzzer).
    pub fn plain(n_ds: usize, n_ion: usize) -> ClusterOptions {
        ClusterOptions {
            n_mds: 1,
            n_ds,
            stripe_size: 1 << 20,
            device_model: DeviceKind::None,
            reservation: None,
            disk_gb: None,
            trace: false,
            window_ms: 500,
            mode: OrchestratorMode::Off,
            n_ion,
            ion_dispatch_depth: None,
            hdd_elevator: None,
        }
    }
}

/// A cluster directory written and not started yet.
pub struct PreparedCluster(LocalCluster);

impl PreparedCluster {
    pub fn files(&self) -> &ClusterFiles {
        &self.0.procs.files
    }

    /// Starts the servers, stage by stage.
    pub async fn boot(self) -> Result<LocalCluster> {
        let mut lc = self.0;
        let res = lc.procs.start_all().await;
        if let Err(e) = res {
            lc.stop().await;
            return Err(e.into());
        }
        Ok(lc)
    }
}

/// Running servers of a cluster directory (their processes: [`tessera_ops::cluster::LocalCluster`]) and
/// the clients an experiment uses.
pub struct LocalCluster {
    pub procs: tessera_ops::cluster::LocalCluster,
    pub client_cfg: ClusterConfig,
    pub admin_cfg: ClusterConfig,
    admin: Option<Client>,
}

/// Applies the experiment's settings to one node config.
pub fn edit_config(cfg: &mut ClusterConfig, o: &ClusterOptions) {
    cfg.ds_options.device_model = o.device_model;
    if let Some(r) = o.reservation {
        cfg.ds_options.object_reservation_bytes = r;
    }
    if let Some(gb) = o.disk_gb {
        cfg.ds_options.hdd.capacity_gb = gb;
    }
    cfg.ds_options.trace = o.trace;
    // Statistics often enough for the orchestrator to see load.
    cfg.ds_options.report_interval_ms = cfg.ds_options.report_interval_ms.min(500);
    cfg.orchestrator.mode = o.mode;
    if let Some(d) = o.ion_dispatch_depth {
        cfg.ion_options.dispatch_depth = d;
    }
    if let Some(e) = o.hdd_elevator {
        cfg.ds_options.hdd.elevator = e;
    }
    cfg.orchestrator.window_ms = o.window_ms;
}

impl LocalCluster {
    /// Starts a fresh cluster in `dir` (anything there before is removed).
    pub async fn start(dir: &Path, o: &ClusterOptions) -> Result<LocalCluster> {
        LocalCluster::start_edited(dir, o, |_| {}).await
    }

    /// [`LocalCluster::start`], with `edit` applied to every node's configuration after the options.
    pub async fn start_edited(
        dir: &Path,
        o: &ClusterOptions,
        edit: impl Fn(&mut ClusterConfig),
    ) -> Result<LocalCluster> {
        LocalCluster::prepare_edited(dir, o, edit)?.boot().await
    }

    /// Writes a fresh cluster's certificates and configurations (with `edit` applied after the options)
    /// into `dir` without starting it, so that its data directories can be seeded first.
    pub fn prepare_edited(
        dir: &Path,
        o: &ClusterOptions,
        edit: impl Fn(&mut ClusterConfig),
    ) -> Result<PreparedCluster> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing the old cluster in {}", dir.display()))?;
        }
        let defaults = Defaults { stripe_size: o.stripe_size, stripe_count: 0, ..Defaults::default() };
        let shape = tessera_ops::clusterdir::Shape { mds: o.n_mds, ds: o.n_ds, ion: o.n_ion, ..Default::default() };
        let procs = tessera_ops::cluster::LocalCluster::prepare(dir, shape, 0, defaults)
            .map_err(|e| anyhow!("preparing the cluster: {e}"))?;
        procs.edit_configs(|c| {
            edit_config(c, o);
            edit(c);
        })?;
        let client_cfg = ClusterConfig::load(&procs.files.client_config)?;
        let admin_cfg = ClusterConfig::load(&procs.files.admin_config)?;
        Ok(PreparedCluster(LocalCluster { procs, client_cfg, admin_cfg, admin: None }))
    }

    /// The cluster's directory: certificates, configs, logs.
    pub fn files(&self) -> &ClusterFiles {
        &self.procs.files
    }

    /// The servers' names (`mds`, `ds0`, ..., `ion0`, ...), in start order.
    pub fn server_names(&self) -> Vec<String> {
        self.procs.server_names()
    }

    /// The process id of server `name` (`mds`, `ds0`, `ion0`...), if it runs.
    pub fn pid(&mut self, name: &str) -> Option<u32> {
        self.procs.pid(name)
    }

    /// Kills a server with SIGKILL and reaps it.
    pub fn kill9(&mut self, name: &str) -> Result<()> {
        Ok(self.procs.kill9(name)?)
    }

    /// Starts a server again (after [`LocalCluster::kill9`]) and waits until it is ready.
    pub async fn restart(&mut self, name: &str) -> Result<()> {
        Ok(self.procs.restart(name).await?)
    }

    /// A client tagging its I/O with `job`, going through forwarding node `ion` (`None`: directly).
    pub async fn client_via(&self, ion: Option<usize>, job: &str) -> Result<Client> {
        let mut cfg = self.client_cfg.clone();
        cfg.client.ion = Some(ion.map_or_else(|| "none".to_string(), |k| k.to_string()));
        Ok(Client::connect(&cfg).await.context("connecting to the local cluster")?.with_job(job))
    }

    /// Switches every forwarding node's scheduler.
    pub async fn set_ion_scheduler(&mut self, setting: &SchedulerSetting) -> Result<()> {
        let admin = self.admin().await?;
        for k in 0..self.procs.files.ion_configs.len() {
            admin
                .set_ion_scheduler(k, setting.clone())
                .await
                .map_err(|e| anyhow!("ion{k}: scheduler {}: {e}", setting.name))?;
        }
        Ok(())
    }

    /// Every forwarding node's status.
    pub async fn ion_status(&mut self) -> Result<Vec<tessera_client::proto::msg::IonStatus>> {
        let admin = self.admin().await?;
        let mut v = Vec::new();
        for k in 0..self.procs.files.ion_configs.len() {
            v.push(admin.ion_status(k).await.map_err(|e| anyhow!("ion{k}: {e}"))?);
        }
        Ok(v)
    }

    /// A client tagging its I/O with `job`.
    pub async fn client(&self, job: &str) -> Result<Client> {
        Ok(Client::connect(&self.client_cfg).await.context("connecting to the local cluster")?.with_job(job))
    }

    /// A client with the admin certificate (kept).
    pub async fn admin(&mut self) -> Result<Client> {
        if let Some(a) = &self.admin {
            return Ok(a.clone());
        }
        let a = Client::connect(&self.admin_cfg).await.context("connecting as admin")?;
        self.admin = Some(a.clone());
        Ok(a)
    }

    /// Switches the orchestrator.
    pub async fn set_mode(&mut self, mode: OrchestratorMode) -> Result<()> {
        let admin = self.admin().await?;
        admin
            .mds()
            .call(MdsRequest::SetOrchestratorMode { mode })
            .await
            .map_err(|e| anyhow!("setting orchestrator mode {mode}: {e}"))?;
        Ok(())
    }

    /// What the orchestrator currently sees, if it exists.
    pub async fn status(&mut self) -> Result<Option<OrchestratorStatus>> {
        let admin = self.admin().await?;
        match admin.mds().call(MdsRequest::OrchestratorStatus).await {
            Ok(MdsReply::Orchestrator(s)) => Ok(Some(s)),
            Ok(other) => bail!("unexpected reply to OrchestratorStatus: {other:?}"),
            Err(e) if e.code == ErrorCode::Unsupported => Ok(None),
            Err(e) => Err(anyhow!("orchestrator status: {e}")),
        }
    }

    /// The data servers' request traces (`ds_options.trace`), one per server.
    pub fn trace_paths(&self) -> Vec<PathBuf> {
        self.ds_data_dirs().iter().map(|d| d.join(tessera_proto::config::TRACE_FILE)).collect()
    }

    /// Data directories of the data servers.
    pub fn ds_data_dirs(&self) -> Vec<PathBuf> {
        self.client_cfg.ds.iter().filter_map(|d| d.data_dir.clone()).collect()
    }

    /// Asks the kernel to drop cached pages of every object file (so reads hit the store, not memory).
    pub fn drop_caches(&self) {
        for d in self.ds_data_dirs() {
            drop_dir_cache(&d);
        }
    }

    /// SIGTERMs every server, waits for them, SIGKILLs stragglers.
    pub async fn stop(&mut self) {
        self.procs.stop().await;
    }
}

/// Starts a child with its stderr (and stdout but `READY`) appended to `log`; it dies with us.
pub(crate) fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Child> {
    Ok(child::spawn(name, child::die_with_parent(&mut cmd), Some(log))?)
}

fn drop_dir_cache(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => drop_dir_cache(&p),
            Ok(t) if t.is_file() => {
                if let Ok(f) = std::fs::File::open(&p) {
                    use std::os::fd::AsRawFd;
                    // SAFETY: fd is valid for the life of `f`; fdatasync + fadvise only affect caching.
                    unsafe {
                        libc::fdatasync(f.as_raw_fd());
                        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_edited_for_the_experiment() {
        let tmp = tempfile::tempdir().unwrap();
        let files =
            tessera_ops::clusterdir::prepare(tmp.path(), tessera_ops::clusterdir::Shape::ds(2), 0, Defaults::default())
                .unwrap();
        let mut c = ClusterConfig::load(&files.ds_configs[1]).unwrap();
        let o = ClusterOptions {
            n_mds: 1,
            n_ds: 2,
            stripe_size: 65536,
            device_model: DeviceKind::Hdd,
            reservation: Some(10 << 30),
            disk_gb: Some(150.0),
            trace: true,
            window_ms: 250,
            mode: OrchestratorMode::Off,
            n_ion: 0,
            ion_dispatch_depth: None,
            hdd_elevator: Some(Elevator::Fifo),
        };
        edit_config(&mut c, &o);
        c.save(&files.ds_configs[1]).unwrap();
        let c = ClusterConfig::load(&files.ds_configs[1]).unwrap();
        assert_eq!(c.ds_options.device_model, DeviceKind::Hdd);
        assert_eq!(c.ds_options.object_reservation_bytes, 10 << 30);
        assert!(c.ds_options.trace);
        assert_eq!(c.ds_options.hdd.capacity_gb, 150.0);
        assert_eq!(c.ds_options.hdd.elevator, Elevator::Fifo);
        assert_eq!((c.orchestrator.mode, c.orchestrator.window_ms), (OrchestratorMode::Off, 250));
    }
}
