//! `tessera up`: a whole cluster on loopback. The cluster directory (certificates and configs) is written
//! by [`tessera_proto::clusterdir::prepare`]; [`up`] runs its servers as child processes until Ctrl-C.

use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tessera_proto::child::{self, Child, Signals, READY_TIMEOUT, STOP_GRACE};
use tessera_proto::clusterdir::{existing_ds_count, prepare, ClusterFiles, Server, Shape};
use tessera_proto::config::{ClusterConfig, Defaults};

/// What `tessera up` was asked for.
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub dir: PathBuf,
    /// `None`: the existing cluster's count, else 4.
    pub n_ds: Option<usize>,
    /// Forwarding nodes; `None`: the existing cluster's count, else none.
    pub n_ion: Option<usize>,
    pub port_base: u16,
    pub stripe_size: Option<u64>,
    pub stripe_count: Option<u32>,
    /// Storage targets per data server, and each one's capacity (new clusters only).
    pub targets: u16,
    pub target_capacity: Option<u64>,
    /// Placement policy (new clusters only).
    pub placement: Option<String>,
}

/// Starts server `s` with its output going to its log.
fn start_server(files: &ClusterFiles, s: &Server, bin: &Path) -> anyhow::Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = s.command(bin);
    // Own process group: a Ctrl-C on the terminal reaches only us, and we stop the servers in order.
    cmd.process_group(0);
    child::die_with_parent(&mut cmd);
    Ok(child::spawn(&s.name, &mut cmd, Some(&files.log_path(&s.name)))?)
}

/// Starts the cluster's servers stage by stage ([`ClusterFiles::start_stages`]), each stage once the one
/// before is ready. Every binary is looked up first, so a missing one starts nothing.
async fn start_all(files: &ClusterFiles, servers: &mut Vec<Child>) -> anyhow::Result<()> {
    let stages = files.start_stages();
    let mut bins = std::collections::HashMap::new();
    for s in stages.iter().flatten() {
        if !bins.contains_key(s.binary) {
            bins.insert(s.binary, child::server_binary(s.binary)?);
        }
    }
    for stage in stages {
        let first = servers.len();
        for s in &stage {
            servers.push(start_server(files, s, &bins[s.binary])?);
        }
        for c in servers[first..].iter_mut() {
            c.ready(READY_TIMEOUT).await?;
        }
    }
    Ok(())
}

/// Runs `tessera up`; returns the process exit code.
pub async fn up(opts: UpOptions) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new().context("installing the SIGINT/SIGTERM handlers")?;

    let existing = existing_ds_count(&opts.dir)?;
    let n_ds = opts.n_ds.or(existing).unwrap_or(4);
    let n_ion = match opts.n_ion {
        Some(n) => n,
        None if existing.is_some() => ClusterConfig::load(&opts.dir.join("mds.toml"))?.ion.len(),
        None => 0,
    };
    let shaping = opts.stripe_size.is_some()
        || opts.stripe_count.is_some()
        || opts.targets > 1
        || opts.target_capacity.is_some()
        || opts.placement.is_some();
    if existing.is_some() && shaping {
        eprintln!(
            "tessera up: reusing the cluster in {}; --stripe-size/--stripe-count/--targets/--target-capacity/--placement are ignored",
            opts.dir.display()
        );
    }
    let mut defaults = Defaults::default();
    if let Some(s) = opts.stripe_size {
        defaults.stripe_size = s;
    }
    if let Some(c) = opts.stripe_count {
        defaults.stripe_count = c;
    }
    if let Some(p) = &opts.placement {
        defaults.placement = p.clone();
    }
    let shape = Shape { ds: n_ds, ion: n_ion, targets: opts.targets, target_capacity: opts.target_capacity };
    let files = prepare(&opts.dir, shape, opts.port_base, defaults)?;
    let cfg = ClusterConfig::load(&files.client_config)?;

    let mut servers: Vec<Child> = Vec::new();
    let outcome = tokio::select! {
        r = start_all(&files, &mut servers) => Some(r),
        _ = signals.recv() => None,
    };
    match outcome {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            child::stop_all_async(&mut servers, STOP_GRACE).await;
            return Err(e);
        }
        None => {
            eprintln!("tessera up: interrupted during startup; stopping");
            child::stop_all_async(&mut servers, STOP_GRACE).await;
            return Ok(ExitCode::SUCCESS);
        }
    }

    let client_cfg = files.client_config.display().to_string();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "Tessera cluster running in {}", files.dir.display());
    let _ = writeln!(out, "  MDS          {} (log {})", cfg.mds.addr, files.log_path("mds").display());
    for ds in &cfg.ds {
        let _ = writeln!(
            out,
            "  data server {} {} (log {})",
            ds.id,
            ds.addr,
            files.log_path(&format!("ds{}", ds.id)).display()
        );
    }
    for (k, ion) in cfg.ion.iter().enumerate() {
        let _ = writeln!(
            out,
            "  forwarding node {} {} (log {}; scheduler {})",
            ion.name,
            ion.addr,
            files.log_path(&format!("ion{k}")).display(),
            cfg.ion_options.scheduler
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Use it:");
    let _ = writeln!(out, "  export TESSERA_CONFIG={client_cfg}");
    let _ = writeln!(out, "  tessera put ./some-file /some-file");
    let _ = writeln!(out, "  tessera ls -l /");
    let _ = writeln!(out, "  tessera getstripe /some-file");
    let _ = writeln!(out, "  tessera df");
    if !cfg.ion.is_empty() {
        let _ = writeln!(
            out,
            "  tessera ion status        (clients go through the forwarding nodes; TESSERA_ION=none: direct)"
        );
    }
    let _ = writeln!(out, "  tessera-bench ior -w -r -t 1m -b 64m");
    let _ = writeln!(out, "Stop it with Ctrl-C.");
    let _ = writeln!(out, "TESSERA UP {client_cfg}");
    let _ = out.flush();
    drop(out);

    let code = tokio::select! {
        _ = signals.recv() => ExitCode::SUCCESS,
        (i, st) = child::any_exit(&mut servers) => {
            let s = &servers[i];
            let log = s.log().map(|l| l.display().to_string()).unwrap_or_default();
            eprintln!("tessera up: {} exited unexpectedly: {st}; see {log}", s.name());
            ExitCode::FAILURE
        }
    };
    eprintln!("tessera up: stopping the cluster");
    let stopped = child::stop_all_async(&mut servers, STOP_GRACE).await;
    for (s, st) in servers.iter().zip(stopped) {
        if st.killed {
            eprintln!("tessera up: {} did not stop within {STOP_GRACE:?}; killed it", s.name());
        }
    }
    Ok(code)
}
