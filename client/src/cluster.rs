//! `tessera up`: a whole cluster on loopback. [`prepare`] writes (or reuses) the certificates and config
//! files of a cluster directory; [`up`] runs its servers as child processes until Ctrl-C.
//!
//! Directory layout: `tls/` (CA and node certificates), `mds.toml`, `ds<i>.toml`, `client.toml`,
//! `admin.toml` (the same cluster, each with its own `[tls]`), data dirs `mds/`, `ds<i>/`, and `logs/`.

use anyhow::{anyhow, bail, Context};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;
use tessera_proto::config::{ClusterConfig, Defaults, DsNode, MdsNode, TransportOptions};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::layout::LayoutSpec;
use tessera_proto::tls::{self, TlsFiles};
use tessera_proto::types::Role;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

/// How long a server may take to print `READY`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long servers get to exit after SIGTERM before they are killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Environment variable overriding where the server binaries are looked for.
pub const BIN_DIR_ENV: &str = "TESSERA_BIN_DIR";

/// The files of a prepared cluster directory (all paths absolute).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFiles {
    pub dir: PathBuf,
    pub mds_config: PathBuf,
    pub ds_configs: Vec<PathBuf>,
    pub client_config: PathBuf,
    pub admin_config: PathBuf,
}

impl ClusterFiles {
    fn at(dir: &Path, n_ds: usize) -> ClusterFiles {
        ClusterFiles {
            dir: dir.to_path_buf(),
            mds_config: dir.join("mds.toml"),
            ds_configs: (0..n_ds).map(|i| dir.join(format!("ds{i}.toml"))).collect(),
            client_config: dir.join("client.toml"),
            admin_config: dir.join("admin.toml"),
        }
    }

    /// Log file of a server (`mds`, `ds0`, ...).
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }
}

fn io_err(what: &Path, e: impl std::fmt::Display) -> FsError {
    FsError::io(format!("{}: {e}", what.display()))
}

/// The number of data servers of the cluster already in `dir`, if there is one.
pub fn existing_ds_count(dir: &Path) -> FsResult<Option<usize>> {
    let mds = dir.join("mds.toml");
    if !mds.exists() {
        return Ok(None);
    }
    Ok(Some(ClusterConfig::load(&mds)?.ds.len()))
}

/// Writes a cluster of `n_ds` data servers into `dir`, or reuses the one already there (same ports and
/// data; an `n_ds` different from the existing cluster's is an error). Missing certificates are issued.
/// `port_base` 0 picks free ports; otherwise the MDS gets `port_base` and data server i `port_base+10+i`.
pub fn prepare(dir: &Path, n_ds: usize, port_base: u16, defaults: Defaults) -> FsResult<ClusterFiles> {
    if n_ds == 0 {
        return Err(FsError::invalid("a cluster needs at least one data server"));
    }
    LayoutSpec { stripe_size: Some(defaults.stripe_size), stripe_count: None }.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let dir = dir.canonicalize().map_err(|e| io_err(dir, e))?;
    let files = ClusterFiles::at(&dir, n_ds);

    let base = if let Some(existing) = existing_ds_count(&dir)? {
        if existing != n_ds {
            return Err(FsError::invalid(format!(
                "{} holds a cluster with {existing} data servers, not {n_ds}: use --ds {existing} or another --dir",
                dir.display()
            )));
        }
        Some(ClusterConfig::load(&files.mds_config)?)
    } else {
        None
    };

    let tls_dir = dir.join("tls");
    ensure_certificates(&tls_dir, n_ds)?;
    for sub in ["logs".to_string(), "mds".to_string()].into_iter().chain((0..n_ds).map(|i| format!("ds{i}"))) {
        let p = dir.join(sub);
        std::fs::create_dir_all(&p).map_err(|e| io_err(&p, e))?;
    }

    let tls_of = |name: &str| TlsFiles {
        ca: PathBuf::from("tls/ca.pem"),
        cert: PathBuf::from(format!("tls/{name}.pem")),
        key: PathBuf::from(format!("tls/{name}.key")),
    };
    let base = match base {
        Some(b) => b,
        None => {
            let ports = pick_ports(port_base, n_ds)?;
            ClusterConfig {
                mds: MdsNode {
                    addr: format!("127.0.0.1:{}", ports[0]),
                    data_dir: Some(PathBuf::from("mds")),
                    metadata_commit: Default::default(),
                },
                ds: (0..n_ds)
                    .map(|i| DsNode {
                        id: i as u32,
                        addr: format!("127.0.0.1:{}", ports[i + 1]),
                        data_dir: Some(PathBuf::from(format!("ds{i}"))),
                    })
                    .collect(),
                defaults,
                tls: tls_of("mds"),
                ds_options: Default::default(),
                client: Default::default(),
                transport: TransportOptions::default(),
                orchestrator: Default::default(),
                metrics: Default::default(),
            }
        }
    };
    // Node files that are missing are (re)written; mds.toml last, since it marks a complete cluster.
    let mut nodes: Vec<(PathBuf, String)> =
        (0..n_ds).map(|i| (files.ds_configs[i].clone(), format!("ds{i}"))).collect();
    nodes.push((files.client_config.clone(), "client".into()));
    nodes.push((files.admin_config.clone(), "admin".into()));
    nodes.push((files.mds_config.clone(), "mds".into()));
    for (path, name) in nodes {
        if !path.exists() {
            ClusterConfig { tls: tls_of(&name), ..base.clone() }.save(&path)?;
        }
    }
    Ok(files)
}

/// Issues the CA and every node certificate that is missing (all of them when the CA is new).
fn ensure_certificates(tls_dir: &Path, n_ds: usize) -> FsResult<()> {
    let tls_err = |e: &dyn std::fmt::Display| FsError::io(format!("certificates in {}: {e}", tls_dir.display()));
    let have_ca = tls_dir.join("ca.pem").exists() && tls_dir.join("ca.key").exists();
    let ca = if have_ca {
        tls::read_ca(tls_dir).map_err(|e| tls_err(&e))?
    } else {
        let ca = tls::generate_ca("local").map_err(|e| tls_err(&e))?;
        tls::write_ca(tls_dir, &ca).map_err(|e| tls_err(&e))?;
        ca
    };
    let mut nodes = vec![(Role::Mds, "mds".to_string())];
    nodes.extend((0..n_ds).map(|i| (Role::Ds, format!("ds{i}"))));
    nodes.push((Role::Client, "client".into()));
    nodes.push((Role::Admin, "admin".into()));
    for (role, name) in nodes {
        let present = tls_dir.join(format!("{name}.pem")).exists() && tls_dir.join(format!("{name}.key")).exists();
        if !have_ca || !present {
            tls::issue_to_dir(tls_dir, &ca, role, &name, &["127.0.0.1".to_string()]).map_err(|e| tls_err(&e))?;
        }
    }
    Ok(())
}

/// Ports for the MDS and `n_ds` data servers.
fn pick_ports(port_base: u16, n_ds: usize) -> FsResult<Vec<u16>> {
    if port_base != 0 {
        let last = port_base as usize + 10 + n_ds;
        if last > u16::MAX as usize {
            return Err(FsError::invalid(format!("--port-base {port_base} leaves no room for {n_ds} data servers")));
        }
        let mut v = vec![port_base];
        v.extend((0..n_ds).map(|i| port_base + 10 + i as u16));
        return Ok(v);
    }
    // Below the kernel's ephemeral range: a port the kernel may hand to any client socket (every QUIC
    // client binds one) could be taken between this pick and the server's start. Randomly placed, so
    // clusters prepared at the same time rarely probe the same ports; every socket is held until all are
    // bound, so the ports are distinct.
    let high = ephemeral_ports_start();
    if high < PICK_LOW + 1024 {
        return Err(FsError::invalid(format!("no port range below the ephemeral ports (they start at {high})")));
    }
    let span = u64::from(high - PICK_LOW);
    let seed = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    };
    let mut socks = Vec::with_capacity(n_ds + 1);
    for i in 0..span {
        if socks.len() == n_ds + 1 {
            break;
        }
        let port = PICK_LOW + ((seed.wrapping_add(i)) % span) as u16;
        if let Ok(s) = std::net::UdpSocket::bind(("127.0.0.1", port)) {
            socks.push(s);
        }
    }
    if socks.len() < n_ds + 1 {
        return Err(FsError::io(format!("picking free ports: fewer than {} free in {PICK_LOW}..{high}", n_ds + 1)));
    }
    socks
        .iter()
        .map(|s| s.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| FsError::io(format!("picking free ports: {e}")))
}

/// Lowest port picked for servers when none is given.
const PICK_LOW: u16 = 10_000;

/// First port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// Path of a server binary: next to the running executable (or in `$TESSERA_BIN_DIR`).
pub fn server_binary(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os(BIN_DIR_ENV) {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe().context("cannot find the running executable")?;
            exe.parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| anyhow!("executable {} has no directory", exe.display()))?
        }
    };
    let bin = dir.join(name);
    if !bin.is_file() {
        bail!(
            "{name} not found in {} (build it with `cargo build --bins`, or set {BIN_DIR_ENV} to its directory)",
            dir.display()
        );
    }
    Ok(bin)
}

/// What `tessera up` was asked for.
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub dir: PathBuf,
    /// `None`: the existing cluster's count, else 4.
    pub n_ds: Option<usize>,
    pub port_base: u16,
    pub stripe_size: Option<u64>,
    pub stripe_count: Option<u32>,
}

/// A started server.
struct Server {
    name: String,
    pid: u32,
    log: PathBuf,
    exited: Option<ExitStatus>,
}

/// Starts one server with its stdout piped (for `READY`) and stderr appended to its log.
fn spawn(bin: &Path, args: &[String], log: &Path) -> anyhow::Result<tokio::process::Child> {
    use std::os::unix::process::CommandExt;
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(logf));
    // Own process group: a Ctrl-C on the terminal reaches only us, and we stop the servers in order.
    cmd.process_group(0);
    // SAFETY: prctl is async-signal-safe; it makes the kernel SIGTERM the server if `up` itself dies
    // (the spawning thread is the runtime's main thread, which lives as long as the process).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = tokio::process::Command::from(cmd).spawn().with_context(|| format!("starting {}", bin.display()))?;
    Ok(child)
}

/// Spawns server `name` and records it.
fn start_server(
    servers: &mut Vec<Server>,
    children: &mut Vec<tokio::process::Child>,
    files: &ClusterFiles,
    name: &str,
    bin: &Path,
    args: Vec<String>,
) -> anyhow::Result<()> {
    let log = files.log_path(name);
    let child = spawn(bin, &args, &log).with_context(|| format!("starting {name}"))?;
    let pid = child.id().ok_or_else(|| anyhow!("{name} exited at once"))?;
    servers.push(Server { name: name.to_string(), pid, log, exited: None });
    children.push(child);
    Ok(())
}

/// Waits for `READY` on the child's stdout, then keeps copying its stdout into the log.
async fn wait_ready(name: &str, child: &mut tokio::process::Child, log: &Path) -> anyhow::Result<String> {
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("{name}: no stdout pipe"))?;
    let mut lines = BufReader::new(stdout).lines();
    let found = tokio::time::timeout(READY_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(rest) = line.strip_prefix("READY") {
                return Ok::<_, std::io::Error>(Some(rest.trim().to_string()));
            }
        }
        Ok(None)
    })
    .await;
    match found {
        Ok(Ok(Some(addr))) => {
            let log = log.to_path_buf();
            tokio::spawn(async move {
                // Anything else the server prints goes to its log; reading also keeps its pipe from filling.
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log) {
                        let _ = writeln!(f, "{line}");
                    }
                }
            });
            Ok(addr)
        }
        Ok(Ok(None)) | Ok(Err(_)) => {
            let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
            let how = match status {
                Ok(Ok(s)) => format!("exited ({s})"),
                _ => "closed its output".to_string(),
            };
            bail!("{name} {how} before printing READY; see {}", log.display())
        }
        Err(_) => bail!("{name} did not print READY within {READY_TIMEOUT:?}; see {}", log.display()),
    }
}

/// Runs `tessera up`; returns the process exit code.
pub async fn up(opts: UpOptions) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    let existing = existing_ds_count(&opts.dir)?;
    let n_ds = opts.n_ds.or(existing).unwrap_or(4);
    if existing.is_some() && (opts.stripe_size.is_some() || opts.stripe_count.is_some()) {
        eprintln!(
            "tessera up: reusing the cluster in {}; --stripe-size/--stripe-count are ignored",
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
    let files = prepare(&opts.dir, n_ds, opts.port_base, defaults)?;
    let cfg = ClusterConfig::load(&files.client_config)?;
    let mds_bin = server_binary("tessera-mds")?;
    let ds_bin = server_binary("tessera-ds")?;

    let (tx, mut rx) = mpsc::unbounded_channel::<(usize, std::io::Result<ExitStatus>)>();
    let mut servers: Vec<Server> = Vec::new();
    // Index-aligned with `servers`.
    let mut children: Vec<tokio::process::Child> = Vec::new();

    // Startup: the MDS first (data servers report to it), then all data servers at once.
    let startup = async {
        let mds_args = vec!["--config".to_string(), files.mds_config.display().to_string()];
        start_server(&mut servers, &mut children, &files, "mds", &mds_bin, mds_args)?;
        wait_ready("mds", &mut children[0], &files.log_path("mds")).await?;
        for (k, conf) in files.ds_configs.iter().enumerate() {
            let args = vec!["--config".to_string(), conf.display().to_string(), "--id".to_string(), k.to_string()];
            start_server(&mut servers, &mut children, &files, &format!("ds{k}"), &ds_bin, args)?;
        }
        let waits = futures::future::join_all(children[1..].iter_mut().enumerate().map(|(k, child)| {
            let name = format!("ds{k}");
            let log = files.log_path(&name);
            async move { wait_ready(&name, child, &log).await }
        }))
        .await;
        waits.into_iter().collect::<anyhow::Result<Vec<String>>>()?;
        Ok::<(), anyhow::Error>(())
    };
    let outcome = tokio::select! {
        r = startup => Some(r),
        _ = sigint.recv() => None,
        _ = sigterm.recv() => None,
    };
    // From here on each child is watched by its own task; we only signal by pid.
    for (i, mut child) in children.into_iter().enumerate() {
        let tx = tx.clone();
        tokio::spawn(async move {
            let st = child.wait().await;
            let _ = tx.send((i, st));
        });
    }
    match outcome {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            stop_all(&mut servers, &mut rx).await;
            return Err(e);
        }
        None => {
            eprintln!("tessera up: interrupted during startup; stopping");
            stop_all(&mut servers, &mut rx).await;
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
    let _ = writeln!(out);
    let _ = writeln!(out, "Use it:");
    let _ = writeln!(out, "  export TESSERA_CONFIG={client_cfg}");
    let _ = writeln!(out, "  tessera put ./some-file /some-file");
    let _ = writeln!(out, "  tessera ls -l /");
    let _ = writeln!(out, "  tessera getstripe /some-file");
    let _ = writeln!(out, "  tessera df");
    let _ = writeln!(out, "  tessera-bench ior -w -r -t 1m -b 64m");
    let _ = writeln!(out, "Stop it with Ctrl-C.");
    let _ = writeln!(out, "TESSERA UP {client_cfg}");
    let _ = out.flush();
    drop(out);

    let code = tokio::select! {
        _ = sigint.recv() => ExitCode::SUCCESS,
        _ = sigterm.recv() => ExitCode::SUCCESS,
        Some((i, st)) = rx.recv() => {
            let s = &mut servers[i];
            let how = match &st {
                Ok(status) => {
                    s.exited = Some(*status);
                    format!("{status}")
                }
                Err(e) => format!("unknown status ({e})"),
            };
            if s.exited.is_none() {
                // The wait itself failed; treat the server as gone rather than signal a stale pid.
                s.exited = Some(std::os::unix::process::ExitStatusExt::from_raw(0));
            }
            eprintln!("tessera up: {} exited unexpectedly: {how}; see {}", s.name, s.log.display());
            ExitCode::FAILURE
        }
    };
    eprintln!("tessera up: stopping the cluster");
    stop_all(&mut servers, &mut rx).await;
    Ok(code)
}

/// Records exits reported by the watcher tasks until every server has exited or `grace` is over.
async fn collect_exits(
    servers: &mut [Server],
    rx: &mut mpsc::UnboundedReceiver<(usize, std::io::Result<ExitStatus>)>,
    grace: Duration,
) {
    let deadline = tokio::time::Instant::now() + grace;
    while servers.iter().any(|s| s.exited.is_none()) {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((i, st))) => {
                servers[i].exited = Some(st.unwrap_or_else(|_| std::os::unix::process::ExitStatusExt::from_raw(0)));
            }
            Ok(None) | Err(_) => break,
        }
    }
}

/// SIGTERMs every running server, waits up to [`STOP_GRACE`], then SIGKILLs what is left.
async fn stop_all(servers: &mut [Server], rx: &mut mpsc::UnboundedReceiver<(usize, std::io::Result<ExitStatus>)>) {
    let signal_running = |servers: &[Server], sig: libc::c_int| {
        for s in servers.iter().filter(|s| s.exited.is_none()) {
            // SAFETY: plain syscall on the pid of our own unreaped child (its pid cannot be reused yet).
            unsafe {
                libc::kill(s.pid as libc::pid_t, sig);
            }
        }
    };
    signal_running(servers, libc::SIGTERM);
    collect_exits(servers, rx, STOP_GRACE).await;
    if servers.iter().any(|s| s.exited.is_none()) {
        for s in servers.iter().filter(|s| s.exited.is_none()) {
            eprintln!("tessera up: {} did not stop within {STOP_GRACE:?}; killing it", s.name);
        }
        signal_running(servers, libc::SIGKILL);
        collect_exits(servers, rx, Duration::from_secs(5)).await;
    }
    for s in servers.iter() {
        if let Some(st) = s.exited {
            if !st.success() {
                tracing::debug!(server = %s.name, "exited with {st}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_writes_and_reuses_a_cluster() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("c");
        let files = prepare(&dir, 3, 0, Defaults { stripe_size: 65536, ..Default::default() }).unwrap();
        assert_eq!(files.ds_configs.len(), 3);
        let mds = ClusterConfig::load(&files.mds_config).unwrap();
        let client = ClusterConfig::load(&files.client_config).unwrap();
        let admin = ClusterConfig::load(&files.admin_config).unwrap();
        assert_eq!(mds.ds, client.ds);
        assert_eq!(mds.mds, admin.mds);
        assert_eq!(client.defaults.stripe_size, 65536);
        assert!(client.tls.cert.ends_with("tls/client.pem"));
        let ports: std::collections::HashSet<&str> =
            std::iter::once(mds.mds.addr.as_str()).chain(mds.ds.iter().map(|d| d.addr.as_str())).collect();
        assert_eq!(ports.len(), 4);
        for (i, p) in files.ds_configs.iter().enumerate() {
            let c = ClusterConfig::load(p).unwrap();
            let id = tls::NodeIdentity::load(&c.tls).unwrap();
            assert_eq!(id.role, Role::Ds);
            assert_eq!(id.name, format!("ds{i}"));
            assert!(c.ds[i].data_dir.as_ref().unwrap().is_dir());
        }
        assert_eq!(tls::NodeIdentity::load(&admin.tls).unwrap().role, Role::Admin);

        // Reuse keeps the ports; another data-server count is refused.
        let again = prepare(&dir, 3, 7400, Defaults::default()).unwrap();
        assert_eq!(again, files);
        assert_eq!(ClusterConfig::load(&again.mds_config).unwrap().mds.addr, mds.mds.addr);
        let err = prepare(&dir, 2, 0, Defaults::default()).unwrap_err();
        assert!(err.detail.contains("3 data servers"), "{err}");
        assert_eq!(existing_ds_count(&dir).unwrap(), Some(3));
    }

    #[test]
    fn fixed_ports_follow_the_base() {
        assert_eq!(pick_ports(7400, 2).unwrap(), vec![7400, 7410, 7411]);
        let picked = pick_ports(0, 4).unwrap();
        assert_eq!(picked.iter().collect::<std::collections::HashSet<_>>().len(), 5, "distinct: {picked:?}");
        assert!(picked.iter().all(|&p| p >= PICK_LOW && p < ephemeral_ports_start()), "{picked:?}");
        assert!(pick_ports(65530, 2).is_err());
        assert!(prepare(tempfile::tempdir().unwrap().path(), 0, 0, Defaults::default()).is_err());
    }
}
