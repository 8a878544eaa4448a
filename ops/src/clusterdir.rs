//! A cluster directory on loopback, as `tessera up`, the benchmark's experiments and the cross-process
//! tests use it: [`prepare`] writes (or reuses) the certificates and config files of every node.
//! Running the servers is the launchers' business (`tessera up` in tessera-cli, [`crate::child`]).
//!
//! Directory layout: `tls/` (CA and node certificates), `mds.toml`, `ds<i>.toml`, `ion<i>.toml`,
//! `client.toml`, `admin.toml` (the same cluster, each with its own `[tls]`), data dirs `mds/`, `ds<i>/`,
//! `logs/`, and while `tessera up` runs there, its servers' state in `status.json` ([`STATUS_FILE`]).

use crate::ca::{self, CaDir};
use crate::issue;
use std::path::{Path, PathBuf};
use tessera_proto::config::{ClusterConfig, Defaults, DsNode, IonNode, MdsNode};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::layout::LayoutSpec;
use tessera_proto::tls::{self, TlsFiles, Validity};
use tessera_proto::types::{format_utc, Role};

/// The files of a prepared cluster directory (all paths absolute).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterFiles {
    pub dir: PathBuf,
    pub mds_config: PathBuf,
    pub ds_configs: Vec<PathBuf>,
    pub ion_configs: Vec<PathBuf>,
    pub client_config: PathBuf,
    pub admin_config: PathBuf,
    /// Metadata replicas (1: one metadata server, `mds`; more: `mds0`, `mds1`, ...).
    pub mds_replicas: usize,
}

impl ClusterFiles {
    fn at(dir: &Path, shape: Shape) -> ClusterFiles {
        ClusterFiles {
            dir: dir.to_path_buf(),
            mds_config: dir.join("mds.toml"),
            ds_configs: (0..shape.ds).map(|i| dir.join(format!("ds{i}.toml"))).collect(),
            ion_configs: (0..shape.ion).map(|i| dir.join(format!("ion{i}.toml"))).collect(),
            client_config: dir.join("client.toml"),
            admin_config: dir.join("admin.toml"),
            mds_replicas: shape.mds.max(1),
        }
    }

    /// Log file of a server (`mds`, `ds0`, ...).
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    /// Where `tessera up` keeps its servers' state (`tessera status` reads it).
    pub fn status_path(&self) -> PathBuf {
        self.dir.join(STATUS_FILE)
    }

    fn server(name: String, binary: &'static str, config: &Path, flag: Option<(&str, usize)>) -> Server {
        let mut args = vec!["--config".to_string(), config.display().to_string()];
        if let Some((flag, k)) = flag {
            args.extend([flag.to_string(), k.to_string()]);
        }
        Server { name, binary, args, worker_threads: None }
    }

    /// The metadata server (the first replica, with several).
    pub fn mds_server(&self) -> Server {
        self.mds_servers().remove(0)
    }

    /// Every metadata server: `mds`, or the replicas `mds0`, `mds1`, ... (`--replica 1`, 2, ...).
    pub fn mds_servers(&self) -> Vec<Server> {
        if self.mds_replicas <= 1 {
            return vec![ClusterFiles::server("mds".into(), "tessera-mds", &self.mds_config, None)];
        }
        (0..self.mds_replicas)
            .map(|i| ClusterFiles::server(replica_name(i), "tessera-mds", &self.mds_config, Some(("--replica", i + 1))))
            .collect()
    }

    /// Data server `k`.
    pub fn ds_server(&self, k: usize) -> Server {
        ClusterFiles::server(format!("ds{k}"), "tessera-ds", &self.ds_configs[k], Some(("--id", k)))
    }

    /// Forwarding node `k`.
    pub fn ion_server(&self, k: usize) -> Server {
        ClusterFiles::server(format!("ion{k}"), "tessera-ion", &self.ion_configs[k], Some(("--index", k)))
    }

    /// Every server, in the stages a launcher starts them: the MDS; the data servers (they report to
    /// it); the forwarding nodes (they connect to both). A stage starts once the one before is ready.
    /// All of them run on this machine, so each gets its share of its cores ([`shared_worker_threads`]).
    pub fn start_stages(&self) -> Vec<Vec<Server>> {
        let mut stages = vec![self.mds_servers(), (0..self.ds_configs.len()).map(|k| self.ds_server(k)).collect()];
        if !self.ion_configs.is_empty() {
            stages.push((0..self.ion_configs.len()).map(|k| self.ion_server(k)).collect());
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let processes = stages.iter().map(Vec::len).sum();
        let workers = std::env::var_os(WORKER_THREADS_ENV).is_none().then(|| shared_worker_threads(cores, processes));
        for s in stages.iter_mut().flatten() {
            s.worker_threads = workers;
        }
        stages
    }
}

/// The file in a cluster directory where `tessera up` keeps the state of the servers it runs.
pub const STATUS_FILE: &str = "status.json";

/// A server of a prepared cluster as a launcher starts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    /// Its name in logs and messages (`mds`, `ds0`, `ion1`); its log is [`ClusterFiles::log_path`] of it.
    pub name: String,
    /// The binary (found with [`crate::child::server_binary`]).
    pub binary: &'static str,
    pub args: Vec<String>,
    /// Threads of its async runtime (`None`: tokio's default, one per core, or the launcher's
    /// `TOKIO_WORKER_THREADS`).
    pub worker_threads: Option<usize>,
}

/// The environment variable tokio's runtime takes its worker-thread count from.
pub const WORKER_THREADS_ENV: &str = "TOKIO_WORKER_THREADS";

/// Worker threads for each of `processes` servers sharing `cores`: their share, at least one. With a
/// runtime per core in every process, a 4-data-server cluster on 2 cores paid for cross-thread wake-ups
/// on every request: one worker each served 4 KiB random reads 18% faster and large I/O no slower
/// (issue 19, `results/small-io/worker-threads`).
pub fn shared_worker_threads(cores: usize, processes: usize) -> usize {
    (cores / processes.max(1)).max(1)
}

impl Server {
    /// The command that starts it from `bin` (its binary's path).
    pub fn command(&self, bin: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(&self.args);
        if let Some(n) = self.worker_threads {
            cmd.env(WORKER_THREADS_ENV, n.to_string());
        }
        cmd
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

/// The name (and data directory) of metadata replica `i` (from 0) of a cluster with several.
pub fn replica_name(i: usize) -> String {
    format!("mds{i}")
}

/// Most metadata replicas `tessera up` runs.
pub const MAX_MDS_REPLICAS: usize = 9;

/// How many servers of each kind a cluster has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Metadata replicas (0 or 1: one metadata server).
    pub mds: usize,
    pub ds: usize,
    /// Forwarding nodes.
    pub ion: usize,
    /// Storage targets per data server (0 or 1: one).
    pub targets: tessera_proto::types::TargetIdx,
    /// Capacity of each target (default: the host file system's).
    pub target_capacity: Option<u64>,
}

impl Shape {
    pub fn ds(n: usize) -> Shape {
        Shape { ds: n, ..Shape::default() }
    }
}

/// Writes a cluster of `shape.ds` data servers and `shape.ion` forwarding nodes into `dir`, or reuses
/// the one already there (same ports and data; a data-server count different from the existing
/// cluster's is an error, a different number of forwarding nodes rewrites the configs). Missing
/// certificates are issued. `port_base` 0 picks free ports; otherwise the MDS gets `port_base`, data
/// server i `port_base+10+i` and forwarding node i `port_base+100+i`.
pub fn prepare(dir: &Path, shape: Shape, port_base: u16, defaults: Defaults) -> FsResult<ClusterFiles> {
    let n_ds = shape.ds;
    if n_ds == 0 {
        return Err(FsError::invalid("a cluster needs at least one data server"));
    }
    let n_mds = shape.mds.max(1);
    if n_mds > MAX_MDS_REPLICAS {
        return Err(FsError::invalid(format!("at most {MAX_MDS_REPLICAS} metadata replicas, not {n_mds}")));
    }
    LayoutSpec { stripe_size: Some(defaults.stripe_size), stripe_count: None, mirrors: None }.validate()?;
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let dir = dir.canonicalize().map_err(|e| io_err(dir, e))?;
    let files = ClusterFiles::at(&dir, shape);

    let base = if let Some(existing) = existing_ds_count(&dir)? {
        if existing != n_ds {
            return Err(FsError::invalid(format!(
                "{} holds a cluster with {existing} data servers, not {n_ds}: use --ds {existing} or another --dir",
                dir.display()
            )));
        }
        let b = ClusterConfig::load(&files.mds_config)?;
        if b.mds.len() != n_mds {
            return Err(FsError::invalid(format!(
                "{} holds a cluster with {} metadata servers, not {n_mds}: use --mds {} or another --dir",
                dir.display(),
                b.mds.len(),
                b.mds.len()
            )));
        }
        Some(b)
    } else {
        None
    };

    let tls_dir = dir.join("tls");
    ensure_certificates(&tls_dir, shape)?;
    let mds_dirs: Vec<String> = if n_mds == 1 { vec!["mds".into()] } else { (0..n_mds).map(replica_name).collect() };
    for sub in
        ["logs".to_string()].into_iter().chain(mds_dirs.iter().cloned()).chain((0..n_ds).map(|i| format!("ds{i}")))
    {
        let p = dir.join(sub);
        std::fs::create_dir_all(&p).map_err(|e| io_err(&p, e))?;
    }

    let tls_of = |name: &str| TlsFiles::in_dir(Path::new("tls"), name);
    let mut rewrite = false;
    let base = match base {
        Some(mut b) if b.ion.len() != shape.ion => {
            b.ion = ion_nodes(port_base, shape.ion)?;
            rewrite = true;
            b
        }
        Some(b) => b,
        None => {
            // The first metadata server, the data servers, the forwarding nodes, the other replicas.
            let (ports, ion, replica_ports) = if port_base != 0 {
                // Replicas after the first at port_base+1, +2, ... (data servers start at +10).
                let extra = (1..n_mds).map(|i| port_base.checked_add(i as u16)).collect::<Option<Vec<_>>>();
                let extra = extra.ok_or_else(|| FsError::invalid(format!("--port-base {port_base} is too high")))?;
                (pick_ports(port_base, n_ds)?, ion_nodes(port_base, shape.ion)?, extra)
            } else {
                // All at once, so they are distinct.
                let ports = pick_ports(0, n_ds + shape.ion + n_mds - 1)?;
                let ion =
                    ports[n_ds + 1..n_ds + 1 + shape.ion].iter().enumerate().map(|(i, p)| ion_node(i, *p)).collect();
                let extra = ports[n_ds + 1 + shape.ion..].to_vec();
                (ports, ion, extra)
            };
            let mds_ports = std::iter::once(ports[0]).chain(replica_ports);
            let mds = mds_ports
                .zip(&mds_dirs)
                .map(|(port, d)| {
                    MdsNode::new((n_mds > 1).then(|| d.clone()), format!("127.0.0.1:{port}"), Some(PathBuf::from(d)))
                })
                .collect();
            let ds = (0..n_ds)
                .map(|i| DsNode {
                    targets: (shape.targets > 1).then_some(shape.targets),
                    capacity: shape.target_capacity,
                    ..DsNode::new(
                        i as u32,
                        format!("127.0.0.1:{}", ports[i + 1]),
                        Some(PathBuf::from(format!("ds{i}"))),
                    )
                })
                .collect();
            ClusterConfig::of_nodes(mds, ds, ion, defaults, tls_of("mds"))
        }
    };
    // Node files that are missing are (re)written; mds.toml last, since it marks a complete cluster.
    let mut nodes: Vec<(PathBuf, String)> =
        (0..n_ds).map(|i| (files.ds_configs[i].clone(), format!("ds{i}"))).collect();
    nodes.extend((0..shape.ion).map(|i| (files.ion_configs[i].clone(), format!("ion{i}"))));
    nodes.push((files.client_config.clone(), "client".into()));
    nodes.push((files.admin_config.clone(), "admin".into()));
    nodes.push((files.mds_config.clone(), "mds".into()));
    for (path, name) in nodes {
        if rewrite || !path.exists() {
            ClusterConfig { tls: tls_of(&name), ..base.clone() }.save(&path)?;
        }
    }
    Ok(files)
}

/// Issues the CA and every node certificate that is missing (all of them when the CA is new).
fn ensure_certificates(tls_dir: &Path, shape: Shape) -> FsResult<()> {
    let tls_err = |e: &(dyn std::error::Error + 'static)| {
        FsError::io(format!("certificates in {}: {}", tls_dir.display(), tessera_proto::error::chain(e)))
    };
    let have_ca = tls_dir.join("ca.pem").exists() && tls_dir.join("ca.key").exists();
    let ca = if have_ca {
        ca::read_ca(tls_dir).map_err(|e| tls_err(&e))?
    } else {
        let ca = issue::generate_ca("local").map_err(|e| tls_err(&e))?;
        ca::write_ca(tls_dir, &ca).map_err(|e| tls_err(&e))?;
        ca
    };
    let mut nodes = vec![(Role::Mds, "mds".to_string())];
    nodes.extend((0..shape.ds).map(|i| (Role::Ds, format!("ds{i}"))));
    nodes.extend((0..shape.ion).map(|i| (Role::Ion, format!("ion{i}"))));
    nodes.push((Role::Client, "client".into()));
    nodes.push((Role::Admin, "admin".into()));
    for (role, name) in nodes {
        let files = TlsFiles::in_dir(tls_dir, &name);
        let present = files.cert.exists() && files.key.exists();
        if !have_ca || !present {
            ca::issue_to_dir(tls_dir, &ca, role, &name, &["127.0.0.1".to_string()]).map_err(|e| tls_err(&e))?;
        } else if expiring(&files.cert) {
            // A cluster directory used again after a long time: its certificates would be refused.
            let (old, new) = CaDir::open(tls_dir)
                .and_then(|mut d| d.renew(&name, Validity::days(issue::NODE_DAYS)))
                .map_err(|e| tls_err(&e))?;
            tracing::info!(
                "certificate of {name} renewed: it was valid until {} UTC, now until {} UTC",
                format_utc(old.validity.not_after),
                format_utc(new.validity.not_after)
            );
        }
    }
    Ok(())
}

/// Whether the certificate in `path` has expired, is not valid yet or expires within [`RENEW_DAYS`].
fn expiring(path: &Path) -> bool {
    let info = std::fs::read_to_string(path).ok().and_then(|p| tls::CertInfo::from_pem(&p));
    let now = tls::unix_now();
    info.is_none_or(|i| now < i.validity.not_before || now + RENEW_DAYS * 86_400 > i.validity.not_after)
}

/// `tessera up` renews the certificates of a cluster directory that expire within this many days.
const RENEW_DAYS: i64 = 30;

/// Forwarding nodes on loopback: at `port_base+100+i`, or on free ports.
fn ion_nodes(port_base: u16, n: usize) -> FsResult<Vec<IonNode>> {
    let ports: Vec<u16> = if port_base != 0 {
        (0..n).map(|i| port_base.checked_add(100 + i as u16)).collect::<Option<_>>().ok_or_else(|| {
            FsError::invalid(format!("--port-base {port_base} leaves no room for {n} forwarding nodes"))
        })?
    } else if n == 0 {
        Vec::new()
    } else {
        pick_ports(0, n - 1)?
    };
    Ok(ports.into_iter().enumerate().map(|(i, p)| ion_node(i, p)).collect())
}

fn ion_node(i: usize, port: u16) -> IonNode {
    IonNode { name: format!("ion{i}"), addr: format!("127.0.0.1:{port}") }
}

/// Ports for the MDS and `n_ds` data servers (and, with a base, forwarding nodes: see [`ion_nodes`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_renews_certificates_about_to_expire() {
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path(), Shape::ds(1), 0, Defaults::default()).unwrap();
        let tls_dir = dir.path().canonicalize().unwrap().join("tls");
        let now = tls::unix_now();
        let soon = Validity { not_before: now - 86_400, not_after: now + 86_400 };
        CaDir::open(&tls_dir).unwrap().issue(Role::Ds, "ds0", &["127.0.0.1".into()], soon, true).unwrap();
        let serial = |name: &str| {
            tls::CertInfo::from_pem(&std::fs::read_to_string(tls_dir.join(format!("{name}.pem"))).unwrap()).unwrap()
        };
        let (ds0, mds) = (serial("ds0"), serial("mds"));
        prepare(dir.path(), Shape::ds(1), 0, Defaults::default()).unwrap();
        let renewed = serial("ds0");
        assert_ne!(renewed.serial, ds0.serial);
        assert!(renewed.validity.not_after > now + 300 * 86_400);
        assert_eq!(renewed.sans, ds0.sans);
        assert_eq!(serial("mds"), mds, "certificates far from their end are kept");
    }

    #[test]
    fn prepare_writes_and_reuses_a_cluster() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("c");
        let files = prepare(&dir, Shape::ds(3), 0, Defaults { stripe_size: 65536, ..Default::default() }).unwrap();
        assert_eq!(files.ds_configs.len(), 3);
        let mds = ClusterConfig::load(&files.mds_config).unwrap();
        let client = ClusterConfig::load(&files.client_config).unwrap();
        let admin = ClusterConfig::load(&files.admin_config).unwrap();
        assert_eq!(mds.ds, client.ds);
        assert_eq!(mds.mds, admin.mds);
        assert_eq!(client.defaults.stripe_size, 65536);
        assert!(client.tls.cert.ends_with("tls/client.pem"));
        let ports: std::collections::HashSet<&str> =
            std::iter::once(mds.mds0().addr.as_str()).chain(mds.ds.iter().map(|d| d.addr.as_str())).collect();
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
        let again = prepare(&dir, Shape::ds(3), 7400, Defaults::default()).unwrap();
        assert_eq!(again, files);
        assert_eq!(ClusterConfig::load(&again.mds_config).unwrap().mds0().addr, mds.mds0().addr);
        let err = prepare(&dir, Shape::ds(2), 0, Defaults::default()).unwrap_err();
        assert!(err.detail.contains("3 data servers"), "{err}");
        assert_eq!(existing_ds_count(&dir).unwrap(), Some(3));

        // Forwarding nodes can be added to it: every config then lists them, each has its identity.
        let with_ions = prepare(&dir, Shape { ds: 3, ion: 2, ..Shape::default() }, 0, Defaults::default()).unwrap();
        assert_eq!(with_ions.ion_configs.len(), 2);
        let client = ClusterConfig::load(&with_ions.client_config).unwrap();
        assert_eq!(client.ion.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), ["ion0", "ion1"]);
        assert_eq!(client.mds, mds.mds, "the servers keep their ports");
        let ion1 = ClusterConfig::load(&with_ions.ion_configs[1]).unwrap();
        let id = tls::NodeIdentity::load(&ion1.tls).unwrap();
        assert_eq!((id.role, id.name.as_str()), (Role::Ion, "ion1"));
        assert_eq!(ClusterConfig::load(&with_ions.ds_configs[0]).unwrap().ion, client.ion);
        let stages = with_ions.start_stages();
        let names: Vec<Vec<&str>> = stages.iter().map(|st| st.iter().map(|s| s.name.as_str()).collect()).collect();
        assert_eq!(names, vec![vec!["mds"], vec!["ds0", "ds1", "ds2"], vec!["ion0", "ion1"]]);
        assert_eq!(stages[2][1].binary, "tessera-ion");
        let conf = with_ions.ion_configs[1].display().to_string();
        assert_eq!(stages[2][1].args, ["--config", conf.as_str(), "--index", "1"]);
        assert_eq!(files.start_stages().len(), 2, "no forwarding nodes, no third stage");
    }

    #[test]
    fn servers_share_the_cores() {
        assert_eq!(shared_worker_threads(2, 5), 1, "4 data servers and the MDS on 2 cores");
        assert_eq!(shared_worker_threads(16, 5), 3);
        assert_eq!(shared_worker_threads(8, 0), 8);
        assert_eq!(shared_worker_threads(1, 1), 1);
        let s = Server { name: "ds0".into(), binary: "tessera-ds", args: vec!["--id".into()], worker_threads: Some(2) };
        let cmd = s.command(Path::new("/bin/true"));
        let env: Vec<_> = cmd.get_envs().collect();
        assert_eq!(env, [(std::ffi::OsStr::new(WORKER_THREADS_ENV), Some(std::ffi::OsStr::new("2")))]);
        assert_eq!(cmd.get_args().collect::<Vec<_>>(), ["--id"]);
    }

    #[test]
    fn fixed_ports_follow_the_base() {
        assert_eq!(pick_ports(7400, 2).unwrap(), vec![7400, 7410, 7411]);
        let picked = pick_ports(0, 4).unwrap();
        assert_eq!(picked.iter().collect::<std::collections::HashSet<_>>().len(), 5, "distinct: {picked:?}");
        assert!(picked.iter().all(|&p| p >= PICK_LOW && p < ephemeral_ports_start()), "{picked:?}");
        assert!(pick_ports(65530, 2).is_err());
        assert!(prepare(tempfile::tempdir().unwrap().path(), Shape::ds(0), 0, Defaults::default()).is_err());
    }
}
