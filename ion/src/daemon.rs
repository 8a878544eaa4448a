//! `tessera-ion`: command line, start-up (config, identity, connections, dispatcher, metrics), the
//! `READY` line, and shutdown on SIGINT/SIGTERM — or, with a non-zero exit, when the dispatch loop was
//! given up ([`Dispatcher::failed`]: it kept panicking), so that a supervisor starts the node afresh.

use crate::dispatch::Dispatcher;
use crate::sched::Params;
use crate::server::IonService;
use crate::stats::Stats;
use anyhow::{anyhow, bail, Context};
use clap::Parser;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tessera_ops::child::Signals;
use tessera_proto::config::IonScheduler;
use tessera_proto::rpc::{self, RpcPeer};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::Role;
use tracing::info;

#[derive(Parser, Debug)]
#[command(
    name = "tessera-ion",
    about = "Tessera forwarding node (ION): schedules and aggregates clients' I/O",
    version
)]
struct Args {
    #[command(flatten)]
    config: tessera_ops::daemon::ConfigArgs,
    /// This forwarding node's index in the configuration's [[ion]] list (TWINS starts at server k).
    #[arg(long)]
    index: usize,
    /// Address to listen on (overrides the configuration's addr).
    #[arg(long)]
    listen: Option<String>,
    /// Request scheduler: fifo, hbrr, to, to-agg, sjf, mlf, sw, twins (overrides ion_options.scheduler).
    #[arg(long)]
    scheduler: Option<IonScheduler>,
    /// TWINS's (and SW's) window in microseconds (overrides ion_options.window_us).
    #[arg(long)]
    window_us: Option<u64>,
    /// HBRR's (and MLF's) requests per queue visit (overrides ion_options.quantum).
    #[arg(long)]
    quantum: Option<u32>,
}

/// Entry point of the `tessera-ion` binary.
pub fn main_entry() -> ExitCode {
    let args = Args::parse();
    let Some(rt) = tessera_ops::daemon::start("tessera-ion") else { return ExitCode::from(1) };
    let res = rt.block_on(run(args));
    rt.shutdown_timeout(Duration::from_secs(2));
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-ion: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config.load()?;
    let node = config.ion.get(args.index).with_context(|| {
        format!("no forwarding node {} in the configuration (it lists {})", args.index, config.ion.len())
    })?;
    let listen = rpc::resolve(args.listen.as_deref().unwrap_or(&node.addr))?;
    let identity = NodeIdentity::load(&config.tls).context("TLS identity")?;
    if identity.role != Role::Ion {
        bail!("certificate {} has role {}, a forwarding node needs role ion", config.tls.cert.display(), identity.role);
    }
    let tuning = config.tuning();
    let endpoint = rpc::server_endpoint(listen, &identity, &tuning)?;
    let local = endpoint.local_addr().context("listening address")?;
    // Connections to the MDS and the data servers go out from the same socket.
    let mds = Arc::new(rpc::MdsPeers::to_hosts(&endpoint, &identity, &config.mds_addrs(), tuning)?);
    let mut servers = HashMap::new();
    for ds in &config.ds {
        let peer = RpcPeer::to_host(endpoint.clone(), &identity, Role::Ds, &ds.addr, tuning)?;
        servers.insert(ds.id, Arc::new(peer));
    }
    let o = &config.ion_options;
    let mut ids: Vec<_> = config.ds.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    let params = Params {
        window_us: args.window_us.unwrap_or(o.window_us),
        quantum: args.quantum.unwrap_or(o.quantum),
        servers: ids,
        ion_index: args.index,
        epoch_us: 0,
    };
    let scheduler = args.scheduler.unwrap_or(o.scheduler);
    let stats = Arc::new(Stats::switched(config.metrics.job_counters));
    let dispatcher =
        Dispatcher::new(args.index as u32, servers.clone(), scheduler.as_str(), params, o.dispatch_depth, stats)?;
    let interval = Duration::from_millis(config.ds_options.report_interval_ms);
    let report = crate::report::spawn(dispatcher.stats.clone(), args.index as u32, mds.clone(), interval);
    let watched = dispatcher.clone();
    let service = Arc::new(IonService { name: node.name.clone(), index: args.index as u32, mds, servers, dispatcher });
    let metrics = match config.metrics.ion_base_port {
        Some(base) => {
            let port = u16::try_from(usize::from(base) + args.index)
                .map_err(|_| anyhow!("metrics port {base} + {} is out of range", args.index))?;
            let addr = std::net::SocketAddr::new(listen.ip(), port);
            let endpoint = tessera_metrics::Endpoint::bind(addr, crate::metrics::registry(service.clone())).await?;
            info!(addr = %endpoint.local_addr(), "metrics on http://{}/metrics", endpoint.local_addr());
            Some(endpoint)
        }
        None => None,
    };
    let server = tokio::spawn(rpc::serve(endpoint.clone(), service, identity.crl.clone()));
    info!(ion = %node.name, addr = %local, scheduler = %scheduler, "forwarding node ready");
    tessera_ops::child::announce_ready(local);
    let mut signals = Signals::new().context("SIGINT/SIGTERM handlers")?;
    let failed = tokio::select! {
        _ = signals.recv() => None,
        why = watched.failed() => Some(why),
    };
    info!("shutting down");
    if let Some(m) = metrics {
        m.shutdown().await;
    }
    endpoint.close(0u32.into(), b"forwarding node shutting down");
    server.abort();
    if let Some(r) = report {
        r.abort();
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
    match failed {
        Some(why) => Err(anyhow!("forwarding stopped: {why}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        let a = Args::try_parse_from(["tessera-ion", "--index", "1", "--scheduler", "twins", "--window-us", "125"])
            .unwrap();
        assert_eq!((a.index, a.scheduler, a.window_us), (1, Some(IonScheduler::Twins), Some(125)));
        assert!(Args::try_parse_from(["tessera-ion"]).is_err(), "--index is required");
    }
}
