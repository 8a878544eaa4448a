//! `tessera-ds`: command line, start-up (config, identity, store, report tasks, metrics), the `READY`
//! line, and shutdown on SIGINT/SIGTERM.

use crate::{device, fence, metrics, replicate, report, server, store};
use anyhow::{anyhow, bail, Context};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tessera_ops::child::Signals;
use tessera_proto::config::DeviceKind;
use tessera_proto::rpc;
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{DsId, Role};
use tracing::info;

#[derive(Parser, Debug)]
#[command(name = "tessera-ds", about = "Tessera data server", version)]
struct Args {
    #[command(flatten)]
    config: tessera_ops::daemon::ConfigArgs,
    /// This data server's id (its [[ds]] entry in the configuration).
    #[arg(long)]
    id: DsId,
    /// Object store directory (overrides the configuration's data_dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on (overrides the configuration's addr).
    #[arg(long)]
    listen: Option<String>,
    /// Device model: none (real device) or hdd (emulated rotating disk); overrides ds_options.device_model.
    #[arg(long)]
    device_model: Option<DeviceKind>,
}

/// Entry point of the `tessera-ds` binary.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    let Some(rt) = tessera_ops::daemon::start("tessera-ds") else { return ExitCode::from(1) };
    let res = rt.block_on(run(args));
    // Blocking store calls still running finish on their own; do not wait for them forever.
    rt.shutdown_timeout(Duration::from_secs(5));
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-ds: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config.load()?;
    let node =
        config.ds_node(args.id).with_context(|| format!("no [[ds]] entry with id {} in the configuration", args.id))?;
    let data_dir =
        args.data_dir.clone().or_else(|| node.data_dir.clone()).with_context(|| {
            format!("data server {} has no data_dir in the configuration (pass --data-dir)", args.id)
        })?;
    let listen = args.listen.clone().unwrap_or_else(|| node.addr.clone());
    let listen = rpc::resolve(&listen)?;
    let identity = NodeIdentity::load(&config.tls).context("TLS identity")?;
    if identity.role != Role::Ds {
        bail!("certificate {} has role {}, a data server needs role ds", config.tls.cert.display(), identity.role);
    }
    let opts = &config.ds_options;
    let kind = args.device_model.unwrap_or(opts.device_model);
    let model = device::DeviceModel::of(kind, &opts.hdd)?;
    let count = node.target_count();
    let mut stores = Vec::with_capacity(usize::from(count));
    for k in 0..count {
        let root = store::target_dir(&data_dir, k);
        let store = store::Store::open_target(&root, args.id, store::DEFAULT_OPEN_FILES, node.capacity)?;
        store.set_direct_writes(opts.direct_writes);
        // The write cache's memory is shared out among the targets.
        store.set_write_cache(opts.write_cache_mb.saturating_mul(1 << 20) / u64::from(count));
        stores.push(store);
    }
    let store_handles = stores.clone();
    let tuning = config.tuning();
    let endpoint = rpc::server_endpoint(listen, &identity, &tuning)?;
    let local = endpoint.local_addr().context("listening address")?;

    let setup = server::Setup {
        job_counters: config.metrics.job_counters,
        ..server::Setup::from_options(args.id, opts, &config.orchestrator, model)
    };
    let (reporter, data_path) = server::assemble(stores, &setup)?;
    let metrics = match config.metrics.ds_base_port {
        Some(base) => {
            let port = u16::try_from(u32::from(base) + args.id)
                .map_err(|_| anyhow!("metrics port {base} + {} is out of range", args.id))?;
            let addr = std::net::SocketAddr::new(listen.ip(), port);
            let m = metrics::Metrics {
                ds: args.id,
                counters: reporter.counters.clone(),
                locality: data_path.locality.clone(),
                serve: data_path.serve.clone(),
                scheduler: reporter.scheduler.clone(),
                trace: data_path.trace.clone(),
                stores: store_handles.clone(),
                target_stats: reporter.target_stats.clone(),
            };
            let endpoint = tessera_metrics::Endpoint::bind(addr, m.registry()).await?;
            info!(addr = %endpoint.local_addr(), "metrics on http://{}/metrics", endpoint.local_addr());
            Some(endpoint)
        }
        None => None,
    };
    let mds_addrs = config.mds.iter().map(|m| rpc::resolve(&m.addr)).collect::<Result<Vec<_>, _>>().context("MDS")?;
    let report_task = report::spawn_report_task(
        reporter.clone(),
        &identity,
        &mds_addrs,
        tuning,
        Duration::from_millis(opts.report_interval_ms),
    )?;
    let locality_task = report::spawn_locality_task(
        data_path.locality.clone(),
        &identity,
        &mds_addrs,
        tuning,
        Duration::from_millis(config.orchestrator.report_interval_ms),
    )?;
    let trace = data_path.trace.clone();
    // Mirrored stripes: as a primary, this server passes writes on to the other data servers.
    let peer_endpoint = rpc::client_endpoint(listen.is_ipv6())?;
    let mut peers = std::collections::HashMap::new();
    for d in config.ds.iter().filter(|d| d.id != args.id) {
        peers.insert(d.id, rpc::RpcPeer::to_host(peer_endpoint.clone(), &identity, Role::Ds, &d.addr, tuning)?);
    }
    let mds_peer = rpc::MdsPeers::to_addrs(&peer_endpoint, &identity, &mds_addrs, tuning)?;
    let marker = Arc::new(replicate::MdsMarker { peer: mds_peer });
    let replicator = Arc::new(replicate::Replicator::new(Arc::new(replicate::Peers::new(peers))).with_marker(
        args.id,
        marker,
        config.mirror.grace(),
    ));
    // Mirrored client calls wait for the first list of this server's replicas not in sync.
    let fences = Arc::new(fence::Fences::new(config.mirror.fence_lease()));
    let store_id =
        fence::store_identity(&data_dir).with_context(|| format!("store identity in {}", data_dir.display()))?;
    let fence_task = fence::spawn_fence_task(
        fences.clone(),
        args.id,
        store_id,
        &identity,
        &mds_addrs,
        tuning,
        config.mirror.fence_lease(),
    )?;
    let service = Arc::new(
        server::DsService::new(reporter, data_path, opts.sync_writes)
            .with_replicator(replicator)
            .with_fences(fences, config.mirror.resync_mib_per_s.saturating_mul(1 << 20)),
    );
    let server = tokio::spawn(rpc::serve(endpoint.clone(), service, identity.crl.clone()));

    let capacity = node.capacity.map(tessera_proto::units::format_size).unwrap_or_else(|| "the disk's".into());
    info!(
        ds = args.id,
        addr = %local,
        data_dir = %data_dir.display(),
        device = model.name(),
        targets = count,
        capacity,
        "data server ready"
    );
    tessera_ops::child::announce_ready(local);

    wait_for_signal().await?;
    info!("shutting down");
    report_task.abort();
    locality_task.abort();
    fence_task.abort();
    if let Some(m) = metrics {
        m.shutdown().await;
    }
    endpoint.close(0u32.into(), b"data server shutting down");
    server.abort();
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    if let Some(t) = trace {
        tokio::task::spawn_blocking(move || t.flush(Duration::from_secs(2))).await.ok();
    }
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut signals = Signals::new().context("SIGINT/SIGTERM handlers")?;
    signals.recv().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_model_flag() {
        let a = Args::try_parse_from(["tessera-ds", "--id", "3", "--device-model", "hdd"]).unwrap();
        assert_eq!((a.id, a.device_model), (3, Some(DeviceKind::Hdd)));
        let e = Args::try_parse_from(["tessera-ds", "--id", "3", "--device-model", "ssd"]).unwrap_err().to_string();
        assert!(e.contains("ssd") && e.contains("none, hdd"), "{e}");
        let a = Args::try_parse_from(["tessera-ds", "--id", "0"]).unwrap();
        assert_eq!(a.device_model, None);
    }
}
