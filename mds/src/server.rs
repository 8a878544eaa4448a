//! The RPC service (`MdsCall` → `MdsResponse`) and the `tessera-mds` process: config, TLS identity,
//! database, data-server clients, destroy worker, orchestrator driver, metrics endpoint, serving until
//! SIGINT/SIGTERM.

use crate::dsclient::{DataServers, RpcDataServers};
use crate::jobs::Jobs;
use crate::metrics::RequestCounters;
use crate::namespace::Namespace;
use crate::orchestrator::{Orchestrator, Params};
use crate::persched::shared::Shared;
use crate::raft::replica::{Network, Replica};
use crate::stats::StatsView;
use crate::store::{JournalRecovery, Store, COMMIT_INTERVAL};
use bytes::Bytes;
use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tessera_proto::msg::{MdsCall, MdsReply, OrchestratorMode};
use tessera_proto::rpc::{self, PeerInfo, Service};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{FsResult, Role};
use tracing::info;

/// The RPC service: every request goes through the one dispatch (`crate::dispatch`).
pub struct MdsService {
    pub(crate) ns: Arc<Namespace>,
    /// The data server each data-server certificate name reported as (to cut one off when revoked).
    ds_names: std::sync::Mutex<std::collections::HashMap<String, tessera_proto::DsId>>,
    /// Answers the orchestrator's requests (without one they are unsupported).
    pub(crate) orch: Option<Arc<Orchestrator>>,
    pub(crate) counters: Arc<RequestCounters>,
    /// PerSched's registry of periodic jobs and their pattern.
    pub(crate) persched: Arc<Shared>,
    /// The job registry and per-job counters.
    pub(crate) jobs: Arc<Jobs>,
    /// Whether metadata calls are counted per job (`[metrics] job_counters`).
    pub(crate) job_counters: bool,
}

impl MdsService {
    pub fn new(ns: Arc<Namespace>) -> MdsService {
        let persched = crate::persched::live::Registry::new(crate::persched::live::LiveConfig::from_options(
            &tessera_proto::config::PerschedOptions::default(),
        ));
        let jobs = Jobs::open(ns.store(), JOB_WINDOW).unwrap_or_else(|e| {
            tracing::warn!("job registry not readable, starting an empty one in memory: {e}");
            Jobs::in_memory(JOB_WINDOW)
        });
        MdsService {
            jobs: Arc::new(jobs),
            job_counters: true,
            ns,
            ds_names: Default::default(),
            orch: None,
            counters: Arc::new(RequestCounters::default()),
            persched: Arc::new(Shared::new(persched)),
        }
    }

    /// PerSched's platform from `[persched]`.
    pub fn with_persched(self, o: &tessera_proto::config::PerschedOptions) -> MdsService {
        let r = crate::persched::live::Registry::new(crate::persched::live::LiveConfig::from_options(o));
        MdsService { persched: Arc::new(Shared::new(r)), ..self }
    }

    /// The job registry's series in windows of `dt` instead of [`JOB_WINDOW`] (before any request).
    pub fn with_job_window(self, dt: std::time::Duration) -> MdsService {
        let jobs = Jobs::open(self.ns.store(), dt).unwrap_or_else(|_| Jobs::in_memory(dt));
        MdsService { jobs: Arc::new(jobs), ..self }
    }

    /// PerSched's registry (for the metrics endpoint).
    pub fn persched(&self) -> Arc<Shared> {
        self.persched.clone()
    }

    /// Counts metadata calls per job only if `on` (`[metrics] job_counters`).
    pub fn with_job_counters(self, on: bool) -> MdsService {
        MdsService { job_counters: on, ..self }
    }

    /// The job registry.
    pub fn jobs(&self) -> Arc<Jobs> {
        self.jobs.clone()
    }

    pub fn with_orchestrator(self, orch: Arc<Orchestrator>) -> MdsService {
        MdsService { orch: Some(orch), ..self }
    }

    /// Requests served, by type (for the metrics endpoint).
    pub fn counters(&self) -> Arc<RequestCounters> {
        self.counters.clone()
    }

    /// Remembers which data server a data-server certificate reports as.
    pub(crate) fn learn_name(&self, peer: &PeerInfo, ds: tessera_proto::DsId) {
        if peer.role == Role::Ds {
            self.ds_names.lock().unwrap_or_else(|p| p.into_inner()).insert(peer.name.clone(), ds);
        }
    }
}

impl Service for MdsService {
    type Request = MdsCall;
    type Reply = MdsReply;

    fn accepts(&self, role: Role) -> bool {
        matches!(role, Role::Client | Role::Admin | Role::Ion | Role::Mds | Role::Ds)
    }

    /// A data server whose certificate is revoked gets no new files from now on (not only once it has
    /// been silent for the silence period).
    fn peer_revoked(&self, peer: &PeerInfo) {
        if peer.role != Role::Ds {
            return;
        }
        // The name it reported under; else the name `tessera up` and `tessera ca` give data server N.
        let known = self.ds_names.lock().unwrap_or_else(|p| p.into_inner()).get(&peer.name).copied();
        let by_name =
            peer.name.strip_prefix("ds").and_then(|n| n.parse().ok()).filter(|&n| self.ns.stats().is_configured(n));
        if let Some(ds) = known.or(by_name) {
            self.ns.stats().cut(ds);
            tracing::warn!(ds, name = %peer.name, "data server's certificate revoked: no new files are placed on it");
        }
    }

    /// Metadata requests carry no payload.
    fn max_payload(&self, _peer: &PeerInfo) -> usize {
        0
    }

    async fn handle(&self, peer: Arc<PeerInfo>, req: MdsCall, _payload: Bytes) -> (FsResult<MdsReply>, Bytes) {
        (self.dispatch(&peer, req).await, Bytes::new())
    }
}

/// Jobs idle for longer leave the metrics (not the registry).
pub const METRICS_IDLE: std::time::Duration = std::time::Duration::from_secs(300);

/// Window length of the per-job time series (Δt).
pub const JOB_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// What the `tessera-mds` command line sets.
#[derive(Parser, Debug, Clone)]
#[command(name = "tessera-mds", about = "Tessera metadata server")]
pub struct Options {
    #[command(flatten)]
    pub config: tessera_ops::daemon::ConfigArgs,
    /// Database directory (overrides `mds.data_dir`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Listen address (overrides `mds.addr`).
    #[arg(long)]
    pub listen: Option<String>,
    /// Start even if a journal segment other than the newest is corrupt, dropping the rest of that
    /// segment (its acknowledged changes are lost; without this flag start-up refuses and names it).
    #[arg(long)]
    pub skip_corrupt_journal: bool,
    /// Which of the configuration's `[[mds]]` entries this server is (1, 2, ...): needed when it lists
    /// several (the replicated metadata service; see the README).
    #[arg(long)]
    pub replica: Option<usize>,
}

/// Entry point of the `tessera-mds` binary.
pub fn main_entry() -> ExitCode {
    let opts = Options::parse();
    let Some(rt) = tessera_ops::daemon::start("tessera-mds") else { return ExitCode::from(1) };
    let ready = |addr: SocketAddr| tessera_ops::child::announce_ready(addr);
    let result = rt.block_on(async {
        let shutdown = signals()?;
        run(opts, ready, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-mds: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs a metadata server: calls `ready` once listening, serves until `shutdown` completes, then
/// closes connections and flushes the database. With several `[[mds]]` entries it runs replica
/// `--replica N` of the replicated metadata service (`crate::raft::replica`): it serves while it leads,
/// and returns an error once it no longer does (its supervisor starts it again, as a follower).
pub async fn run(
    opts: Options,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let cfg = opts.config.load()?;
    let identity = NodeIdentity::load(&cfg.tls).map_err(|e| anyhow::Error::new(e).context("TLS identity"))?;
    if identity.role != Role::Mds {
        anyhow::bail!(
            "certificate {} has role {}, the metadata server needs a certificate with role mds",
            cfg.tls.cert.display(),
            identity.role
        );
    }
    let me = match (cfg.mds.len(), opts.replica) {
        (1, None | Some(1)) => 0,
        (n, Some(r)) if (1..=n).contains(&r) => r - 1,
        (n, r) => anyhow::bail!(
            "the configuration lists {n} metadata servers ([[mds]] entries): say which one this is with \
             --replica N (1 to {n}){}",
            r.map(|r| format!("; {r} is not one of them")).unwrap_or_default()
        ),
    };
    let node = &cfg.mds[me];
    let data_dir = opts
        .data_dir
        .or_else(|| node.data_dir.clone())
        .ok_or_else(|| anyhow::anyhow!("no database directory: set mds.data_dir in the config or pass --data-dir"))?;
    let listen = opts.listen.unwrap_or_else(|| node.addr.clone());
    let addr = rpc::resolve(&listen)?;
    if node.eviction_timeout_s == 0 {
        anyhow::bail!("mds.eviction_timeout_s in the config must be at least 1");
    }
    let endpoint = rpc::server_endpoint(addr, &identity, &cfg.tuning())?;
    let local = endpoint.local_addr().map_err(|e| anyhow::anyhow!("listening address: {e}"))?;
    tokio::pin!(shutdown);

    if cfg.mds.len() == 1 {
        let recovery = if opts.skip_corrupt_journal { JournalRecovery::SkipCorrupt } else { JournalRecovery::Refuse };
        let store = Arc::new(Store::open_with(&data_dir, node.metadata_commit, COMMIT_INTERVAL, recovery)?);
        let serving = Serving::start(&cfg, node, store, &endpoint, &identity).await?;
        info!(%local, db = %data_dir.display(), data_servers = cfg.ds.len(), eviction_timeout_s = node.eviction_timeout_s, placement = %cfg.defaults.placement, orchestrator = %cfg.orchestrator.mode, window_ms = cfg.orchestrator.window_ms, "metadata server ready");
        let server = tokio::spawn(rpc::serve(endpoint.clone(), serving.service.clone(), identity.crl.clone()));
        ready(local);
        shutdown.await;
        info!("shutting down");
        serving.stop(&endpoint, server).await?;
        info!("metadata flushed; bye");
        return Ok(());
    }

    // A replica of the replicated metadata service.
    let id = me as u64 + 1;
    let store = Arc::new(Store::open_replicated(&data_dir, COMMIT_INTERVAL)?);
    let addrs = cfg.mds.iter().enumerate().map(|(i, m)| (i as u64 + 1, m.addr.clone())).collect();
    let sync = node.metadata_commit == tessera_proto::config::MetadataCommit::Fsync;
    let replica = Replica::start(
        id,
        addrs,
        store.clone(),
        &data_dir.join("raft"),
        sync,
        Network::new(endpoint.clone(), identity.clone(), cfg.tuning()),
    )
    .await?;
    let server = tokio::spawn(rpc::serve(endpoint.clone(), replica.clone(), identity.crl.clone()));
    info!(%local, replica = id, replicas = cfg.mds.len(), db = %data_dir.display(), "metadata replica ready");
    ready(local);
    let term = tokio::select! {
        t = replica.take_lead() => t?,
        _ = &mut shutdown => {
            info!("shutting down");
            replica.shutdown().await;
            endpoint.close(0u32.into(), b"server shutting down");
            server.abort();
            store.flush().await?;
            return Ok(());
        }
    };
    let serving = Serving::start(&cfg, node, store, &endpoint, &identity).await?;
    replica.serve(serving.service.clone());
    let deposed = tokio::select! {
        why = replica.deposed(term) => Some(why),
        _ = &mut shutdown => None,
    };
    info!("shutting down");
    replica.shutdown().await;
    serving.stop(&endpoint, server).await?;
    match deposed {
        Some(why) => anyhow::bail!("{why}: stopping, to start again as a follower"),
        None => Ok(()),
    }
}

/// The metadata service and the tasks that run beside it (only on the leader, with replicas).
struct Serving {
    service: Arc<MdsService>,
    store: Arc<Store>,
    orch: Arc<Orchestrator>,
    rpc_data: Arc<RpcDataServers>,
    jobs: Arc<Jobs>,
    driver: crate::driver::DriverTask,
    metrics: Option<tessera_metrics::Endpoint>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Builds the namespace over `store` and starts the data-server clients, the destroy worker, the
    /// evictor, the resyncer, the job registry's flusher and detector, the orchestrator's driver and the
    /// metrics endpoint.
    async fn start(
        cfg: &tessera_proto::config::ClusterConfig,
        node: &tessera_proto::config::MdsNode,
        store: Arc<Store>,
        endpoint: &quinn::Endpoint,
        identity: &NodeIdentity,
    ) -> anyhow::Result<Serving> {
        // The server endpoint also connects out to the data servers (quinn endpoints do both).
        let rpc_data = Arc::new(RpcDataServers::new(cfg, endpoint, identity)?);
        let data: Arc<dyn DataServers> = rpc_data.clone();
        let stats = Arc::new(
            StatsView::new(cfg.ds.iter().map(|d| (d.id, d.addr.clone())).collect())
                .with_target_counts(cfg.ds.iter().map(|d| (d.id, d.target_count())).collect())
                .with_domains(cfg.ds.iter().filter_map(|d| Some((d.id, d.domain.clone()?))).collect())
                .with_report_interval(std::time::Duration::from_millis(cfg.ds_options.report_interval_ms)),
        );
        let ns = Arc::new(Namespace::new(store.clone(), &cfg.defaults, stats, data.clone())?);
        ns.set_eviction_timeout(std::time::Duration::from_secs(node.eviction_timeout_s));
        ns.fences.set_lease(cfg.mirror.fence_lease());
        let mut tasks = vec![
            spawn_evictor(ns.clone()),
            spawn_usage_measurer(ns.clone()),
            spawn_resyncer(ns.clone(), cfg.mirror.resync_parallel as usize),
            crate::destroy::spawn(store.clone(), data, ns.destroy_wake()),
        ];
        let mode: OrchestratorMode = cfg.orchestrator.mode;
        let orch = Arc::new(Orchestrator::new(
            Params::from_options(&cfg.orchestrator),
            mode,
            cfg.ds.iter().map(|d| d.id).collect(),
        ));
        let placer = ns.placer().clone();
        let service = MdsService::new(ns.clone())
            .with_orchestrator(orch.clone())
            .with_persched(&cfg.persched)
            .with_job_window(std::time::Duration::from_millis(node.job_window_ms.max(1)))
            .with_job_counters(cfg.metrics.job_counters);
        let jobs = service.jobs();
        tasks.push(crate::jobs::spawn_flusher(jobs.clone()));
        if cfg.persched.detect {
            let every = std::time::Duration::from_millis(cfg.persched.detect_interval_ms.max(100));
            tasks.push(crate::persched::detect_task::spawn_detector(service.persched(), jobs.clone(), every));
        }
        let metrics = match &cfg.metrics.mds_addr {
            Some(addr) => {
                let mut registry = crate::metrics::registry(orch.clone(), &service.counters());
                crate::metrics::add_persched(&mut registry, service.persched());
                crate::metrics::add_placement(&mut registry, placer.clone());
                crate::metrics::add_mirror(&mut registry, ns.clone());
                let j = jobs.clone();
                registry.register_collector(tessera_metrics::collector(move |s| j.scrape(s, METRICS_IDLE)));
                let endpoint = tessera_metrics::Endpoint::bind(addr.as_str(), registry).await?;
                info!("metrics at http://{}/metrics", endpoint.local_addr());
                Some(endpoint)
            }
            None => None,
        };
        let driver = crate::driver::spawn(orch.clone(), rpc_data.clone());
        Ok(Serving { service: Arc::new(service), store, orch, rpc_data, jobs, driver, metrics, tasks })
    }

    /// Stops serving: the orchestrator's grants released, connections closed, the tasks stopped, the
    /// job registry written and the database flushed.
    async fn stop(self, endpoint: &quinn::Endpoint, server: tokio::task::JoinHandle<()>) -> anyhow::Result<()> {
        self.driver.stop().await;
        if let Some(m) = self.metrics {
            m.shutdown().await;
        }
        crate::driver::release_all(&self.orch, self.rpc_data).await;
        endpoint.close(0u32.into(), b"server shutting down");
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), endpoint.wait_idle()).await;
        server.abort();
        for t in self.tasks {
            t.abort();
        }
        if let Err(e) = self.jobs.flush() {
            tracing::warn!("writing the job registry: {e}");
        }
        self.store.flush().await?;
        Ok(())
    }
}

/// Runs `round` once a second, in a task of its own (a round that runs late delays the next one; none are
/// bunched to catch up).
fn spawn_each_second<F, Fut>(mut round: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            round().await;
        }
    })
}

/// Evicts silent clients, looking once a second (and tidies locks, ends recovery).
fn spawn_evictor(ns: Arc<Namespace>) -> tokio::task::JoinHandle<()> {
    spawn_each_second(move || {
        let ns = ns.clone();
        async move {
            ns.evict_silent().await;
            ns.tidy_locks().await;
            ns.end_recovery().await;
        }
    })
}

/// Measures the space of files written lately, once a second (a task of its own: a data server slow to
/// answer holds up only this, never eviction).
fn spawn_usage_measurer(ns: Arc<Namespace>) -> tokio::task::JoinHandle<()> {
    spawn_each_second(move || {
        let ns = ns.clone();
        async move { ns.measure_usage().await }
    })
}

/// Resyncs mirrored files' replicas that are not in sync, looking once a second (`[mirror]
/// resync_parallel` copies at once).
fn spawn_resyncer(ns: Arc<Namespace>, parallel: usize) -> tokio::task::JoinHandle<()> {
    spawn_each_second(move || {
        let ns = ns.clone();
        // Passes back to back while they find work.
        async move { while ns.resync_pass(parallel).await > 0 {} }
    })
}

/// Completes on SIGINT or SIGTERM.
fn signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

#[cfg(test)]
mod job_counter_tests {
    use super::*;
    use tessera_proto::error::ErrorCode;
    use tessera_proto::msg::{IonJobReport, JobDetail, MdsRequest};
    use tessera_proto::{Caller, Origin};

    async fn call(svc: &MdsService, role: Role, req: MdsRequest) -> FsResult<MdsReply> {
        let peer = Arc::new(PeerInfo { role, name: "p".into(), addr: "127.0.0.1:1".parse().unwrap(), conn: 1 });
        let origin = Origin { job: "j".into(), client: 1, pid: 2 };
        svc.handle(peer, MdsCall { caller: Caller::root(), origin, req, seq: 0 }, Bytes::new()).await.0
    }

    #[tokio::test]
    async fn metadata_calls_count_per_job_only_when_switched_on_and_ions_report() {
        for on in [true, false] {
            let d = tempfile::tempdir().unwrap();
            let ns = Arc::new(crate::namespace::tests::open_ns(d.path()).0);
            let svc = MdsService::new(ns.clone()).with_job_counters(on);
            call(&svc, Role::Client, MdsRequest::StatFs).await.unwrap();
            let jobs = svc.jobs().info(Some("j"), ns.store());
            assert_eq!(jobs.first().map(|i| i.meta.other), on.then_some(1), "counters on: {on}");
        }
        let d = tempfile::tempdir().unwrap();
        let ns = Arc::new(crate::namespace::tests::open_ns(d.path()).0);
        let svc = MdsService::new(ns.clone());
        let jobs = vec![JobDetail { job: "j".into(), write_ops: 1, write_bytes: 10, ..Default::default() }];
        let r = || {
            MdsRequest::IonJobReport(Box::new(IonJobReport {
                ion: 3,
                at_unix_us: 5,
                generation: 1,
                jobs: jobs.clone(),
            }))
        };
        let e = call(&svc, Role::Client, r()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Perm, "only forwarding nodes report: {e}");
        assert!(call(&svc, Role::Ds, r()).await.is_err());
        call(&svc, Role::Ion, r()).await.unwrap();
        let i = &svc.jobs().info(Some("j"), ns.store())[0];
        assert_eq!((i.ions.len(), i.ions[0].0, i.ions[0].1.write_bytes), (1, 3, 10));
    }
}
