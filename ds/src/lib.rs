//! Tessera data server (`tessera-ds`): stores objects on the local file system and serves the data
//! service (`DsRequest`) over QUIC.
//!
//! - [`store`]: the object store, one file per object in sharded directories, positional I/O.
//! - [`scheduler`]: per-job queues between the network and the device, served by a pluggable policy.
//! - [`counters`]: per-job read/write operation and byte counters.
//! - [`report`]: the data server's report and the task sending it to the MDS.
//! - [`device`]: the device model (`none`; room for an emulated disk).
//! - [`server`]: the RPC service: role and request checks, dispatch to store and scheduler.

pub mod counters;
pub mod device;
pub mod report;
pub mod scheduler;
pub mod server;
pub mod store;

use clap::Parser;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::config::ClusterConfig;
use tessera_proto::rpc;
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{DsId, Role};
use tracing::info;

#[derive(Parser, Debug)]
#[command(name = "tessera-ds", about = "Tessera data server", version)]
struct Args {
    /// Cluster configuration (TOML).
    #[arg(long, env = tessera_proto::config::CONFIG_ENV)]
    config: Option<PathBuf>,
    /// This data server's id (its [[ds]] entry in the configuration).
    #[arg(long)]
    id: DsId,
    /// Object store directory (overrides the configuration's data_dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on (overrides the configuration's addr).
    #[arg(long)]
    listen: Option<String>,
}

/// Entry point of the `tessera-ds` binary.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tessera-ds: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let res = rt.block_on(run(args));
    // Blocking store calls still running finish on their own; do not wait for them forever.
    rt.shutdown_timeout(Duration::from_secs(5));
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-ds: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let config = ClusterConfig::locate(args.config.as_deref()).map_err(|e| e.detail)?;
    let node =
        config.ds_node(args.id).ok_or_else(|| format!("no [[ds]] entry with id {} in the configuration", args.id))?;
    let data_dir = args
        .data_dir
        .clone()
        .or_else(|| node.data_dir.clone())
        .ok_or_else(|| format!("data server {} has no data_dir in the configuration (pass --data-dir)", args.id))?;
    let listen = args.listen.clone().unwrap_or_else(|| node.addr.clone());
    let listen = rpc::resolve(&listen).map_err(|e| e.detail)?;
    let identity = NodeIdentity::load(&config.tls).map_err(|e| format!("TLS identity: {e}"))?;
    if identity.role != Role::Ds {
        return Err(format!(
            "certificate {} has role {}, a data server needs role ds",
            config.tls.cert.display(),
            identity.role
        ));
    }
    let opts = &config.ds_options;
    let device = device::DeviceModel::parse(&opts.device_model).map_err(|e| e.detail)?;
    let store = store::Store::open(&data_dir, args.id).map_err(|e| e.detail)?;
    let tuning = config.tuning();
    let endpoint = rpc::server_endpoint(listen, &identity, &tuning).map_err(|e| e.detail)?;
    let local = endpoint.local_addr().map_err(|e| format!("listening address: {e}"))?;

    let reporter = report::Reporter {
        ds: args.id,
        store,
        scheduler: scheduler::Scheduler::start(opts.device_queue_depth, scheduler::RoundRobin),
        counters: Arc::new(counters::Counters::new()),
    };
    let mds_addr = rpc::resolve(&config.mds.addr).map_err(|e| format!("MDS {}", e.detail))?;
    let report_task = report::spawn_report_task(
        reporter.clone(),
        &identity,
        mds_addr,
        tuning,
        Duration::from_millis(opts.report_interval_ms),
    )
    .map_err(|e| e.detail)?;
    let service = Arc::new(server::DsService::new(reporter, device, opts.sync_writes));
    let server = tokio::spawn(rpc::serve(endpoint.clone(), service));

    info!(ds = args.id, addr = %local, data_dir = %data_dir.display(), "data server ready");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {local}");
        let _ = out.flush();
    }

    wait_for_signal().await?;
    info!("shutting down");
    report_task.abort();
    endpoint.close(0u32.into(), b"data server shutting down");
    server.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    Ok(())
}

async fn wait_for_signal() -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
