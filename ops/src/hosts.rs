//! A cluster on several real hosts (`tessera cluster init --hosts FILE`, issue 37): from a list of servers
//! with their roles and addresses, the CA, every node's certificate (naming its host) and one
//! configuration per node (and, for servers, `NAME.env`: the arguments `deploy/systemd`'s units pass), in
//! an output directory whose files are then copied to the hosts.
//!
//! The hosts file has one node per line, `ROLE NAME ADDRESS [DATA_DIR]` (`#` starts a comment):
//!
//! ```text
//! mds    mds0   10.0.0.1:7400  /var/lib/tessera/mds0
//! mds    mds1   10.0.0.2:7400
//! mds    mds2   10.0.0.3:7400
//! ds     ds0    10.0.0.4:7410  /srv/tessera/ds0
//! ds     ds1    10.0.0.5:7410
//! ion    ion0   10.0.0.6:7500
//! client login1 -
//! ```
//!
//! Roles: `mds` (one, or three or more replicas), `ds` (data server ids in file order, from 0), `ion`,
//! `client`, `admin` (these have no address: `-`). Without a `client` or `admin` line one of each is made,
//! named `client` and `admin`. A server's data directory defaults to `/var/lib/tessera/NAME`.

use crate::ca;
use crate::issue;
use std::path::{Path, PathBuf};
use tessera_proto::config::{ClusterConfig, Defaults, DsNode, IonNode, MdsNode};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::tls::TlsFiles;
use tessera_proto::types::Role;

/// One node of the hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostNode {
    pub role: Role,
    pub name: String,
    /// `host:port` (servers only).
    pub addr: Option<String>,
    pub data_dir: Option<PathBuf>,
}

/// Reads a hosts file's text (see the module doc); the error names the line.
pub fn parse(text: &str) -> FsResult<Vec<HostNode>> {
    let mut out: Vec<HostNode> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |what: String| FsError::invalid(format!("hosts file line {}: {what}", n + 1));
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 3 || w.len() > 4 {
            return Err(bad("expected ROLE NAME ADDRESS [DATA_DIR]".into()));
        }
        let role: Role = match w[0] {
            "mds" => Role::Mds,
            "ds" => Role::Ds,
            "ion" => Role::Ion,
            "client" => Role::Client,
            "admin" => Role::Admin,
            r => return Err(bad(format!("unknown role '{r}' (mds, ds, ion, client or admin)"))),
        };
        let name = w[1].to_string();
        if name.is_empty() || name.contains('/') || name.starts_with('.') || !name.is_ascii() {
            return Err(bad(format!("'{name}' cannot name a node")));
        }
        if out.iter().any(|h| h.name == name) {
            return Err(bad(format!("node '{name}' is listed twice")));
        }
        let server = matches!(role, Role::Mds | Role::Ds | Role::Ion);
        let addr = match (server, w[2]) {
            (false, "-") => None,
            (false, a) => return Err(bad(format!("a {} has no address ('-'), not '{a}'", w[0]))),
            (true, a) => {
                let (host, port) = a.rsplit_once(':').ok_or_else(|| bad(format!("'{a}' is not HOST:PORT")))?;
                if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                    return Err(bad(format!("'{a}' is not HOST:PORT")));
                }
                Some(a.to_string())
            }
        };
        if !server && w.len() == 4 {
            return Err(bad(format!("a {} has no data directory", w[0])));
        }
        out.push(HostNode { role, name, addr, data_dir: w.get(3).map(PathBuf::from) });
    }
    let count = |r: Role| out.iter().filter(|h| h.role == r).count();
    match count(Role::Mds) {
        0 => return Err(FsError::invalid("the hosts file lists no metadata server (mds)")),
        2 => {
            return Err(FsError::invalid(
                "two metadata replicas cannot outlive the loss of either: list one, or three or more",
            ))
        }
        _ => {}
    }
    if count(Role::Ds) == 0 {
        return Err(FsError::invalid("the hosts file lists no data server (ds)"));
    }
    let (clients, admins) = (count(Role::Client), count(Role::Admin));
    for (role, name, n) in [(Role::Client, "client", clients), (Role::Admin, "admin", admins)] {
        if n == 0 && !out.iter().any(|h| h.name == name) {
            out.push(HostNode { role, name: name.into(), addr: None, data_dir: None });
        }
    }
    Ok(out)
}

/// The host part of `host:port` (an IPv6 address without its brackets).
fn host_of(addr: &str) -> String {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']').to_string()
}

/// What to do with one node's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlan {
    pub name: String,
    pub role: Role,
    /// Its configuration file in the output directory.
    pub config: PathBuf,
    /// The command that starts it (servers) or uses it.
    pub command: String,
}

/// Writes the CA (or reuses the one in `out/tls`), every node's certificate and `out/NAME.toml` for every
/// node of `nodes`; returns each node's plan.
pub fn init(nodes: &[HostNode], out: &Path) -> FsResult<Vec<NodePlan>> {
    let io = |p: &Path, e: &dyn std::fmt::Display| FsError::io(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(out).map_err(|e| io(out, &e))?;
    let tls_dir = out.join("tls");
    let tls_err = |e: &dyn std::fmt::Display| FsError::io(format!("certificates in {}: {e}", tls_dir.display()));
    let ca = if tls_dir.join("ca.pem").exists() && tls_dir.join("ca.key").exists() {
        ca::read_ca(&tls_dir).map_err(|e| tls_err(&e))?
    } else {
        let ca = issue::generate_ca("tessera").map_err(|e| tls_err(&e))?;
        ca::write_ca(&tls_dir, &ca).map_err(|e| tls_err(&e))?;
        ca
    };
    let servers = |r: Role| nodes.iter().filter(move |h| h.role == r);
    let data_dir =
        |h: &HostNode| h.data_dir.clone().unwrap_or_else(|| PathBuf::from(format!("/var/lib/tessera/{}", h.name)));
    let replicated = servers(Role::Mds).count() > 1;
    let mds = servers(Role::Mds)
        .map(|h| {
            MdsNode::new(replicated.then(|| h.name.clone()), h.addr.clone().unwrap_or_default(), Some(data_dir(h)))
        })
        .collect();
    let ds = servers(Role::Ds)
        .enumerate()
        .map(|(i, h)| DsNode::new(i as u32, h.addr.clone().unwrap_or_default(), Some(data_dir(h))))
        .collect();
    let ion = servers(Role::Ion)
        .map(|h| IonNode { name: h.name.clone(), addr: h.addr.clone().unwrap_or_default() })
        .collect();
    let tls_of = |name: &str| TlsFiles::in_dir(Path::new("tls"), name);
    let base = ClusterConfig::of_nodes(mds, ds, ion, Defaults::default(), tls_of("mds"));
    let mut plans = Vec::new();
    let (mut replica, mut ds, mut ion) = (0, 0, 0);
    for h in nodes {
        let sans: Vec<String> = h.addr.iter().map(|a| host_of(a)).collect();
        ca::issue_to_dir(&tls_dir, &ca, h.role, &h.name, &sans).map_err(|e| tls_err(&e))?;
        let config = out.join(format!("{}.toml", h.name));
        ClusterConfig { tls: tls_of(&h.name), ..base.clone() }.save(&config)?;
        let file = format!("{}.toml", h.name);
        // A server's arguments beyond its configuration (also for deploy/systemd's units: NAME.env).
        let (program, args) = match h.role {
            Role::Mds if replicated => {
                replica += 1;
                ("tessera-mds", Some(format!("--replica {replica}")))
            }
            Role::Mds => ("tessera-mds", None),
            Role::Ds => {
                ds += 1;
                ("tessera-ds", Some(format!("--id {}", ds - 1)))
            }
            Role::Ion => {
                ion += 1;
                ("tessera-ion", Some(format!("--index {}", ion - 1)))
            }
            _ => ("", None),
        };
        let command = match (program, &args) {
            ("", _) => format!("tessera-fuse /mnt/tessera --config {file}   (or TESSERA_CONFIG={file} tessera ...)"),
            (p, Some(args)) => format!("{p} --config {file} {args}"),
            (p, None) => format!("{p} --config {file}"),
        };
        if let Some(args) = &args {
            let env = out.join(format!("{}.env", h.name));
            std::fs::write(&env, format!("TESSERA_ARGS=\"{args}\"\n")).map_err(|e| io(&env, &e))?;
        }
        plans.push(NodePlan { name: h.name.clone(), role: h.role, config, command });
    }
    Ok(plans)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTS: &str = "# a test cluster\n\
        mds mds0 10.0.0.1:7400 /srv/m0\n\
        mds mds1 10.0.0.2:7400\n\
        mds mds2 node3.example:7400\n\
        ds ds0 10.0.0.4:7410\n\
        ds ds1 10.0.0.5:7410 /srv/d1   # with a comment\n\
        ion ion0 10.0.0.6:7500\n\
        client login1 -\n";

    #[test]
    fn a_hosts_file_is_read_and_checked() {
        let nodes = parse(HOSTS).unwrap();
        assert_eq!(nodes.len(), 8, "the admin is added: {nodes:?}");
        assert_eq!(nodes[0].data_dir, Some(PathBuf::from("/srv/m0")));
        assert_eq!(nodes[2].addr.as_deref(), Some("node3.example:7400"));
        assert_eq!(nodes.last().unwrap().role, Role::Admin);
        for (text, why) in [
            ("ds ds0 10.0.0.4:7410\n", "no metadata server"),
            ("mds m 10.0.0.1:7400\n", "no data server"),
            ("mds a 1.1.1.1:1\nmds b 1.1.1.2:1\nds d 1.1.1.3:1\n", "two metadata replicas"),
            ("mds a 1.1.1.1\nds d 1.1.1.3:1\n", "line 1: '1.1.1.1' is not HOST:PORT"),
            ("mds a 1.1.1.1:1\nds a 1.1.1.3:1\n", "line 2: node 'a' is listed twice"),
            ("mds a 1.1.1.1:1\nnfs d 1.1.1.3:1\n", "unknown role 'nfs'"),
            ("mds a 1.1.1.1:1\nds d 1.1.1.3:1\nclient c 1.1.1.4:5\n", "a client has no address"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.detail.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn init_writes_a_config_and_a_certificate_naming_its_host_per_node() {
        let dir = tempfile::tempdir().unwrap();
        let plans = init(&parse(HOSTS).unwrap(), dir.path()).unwrap();
        assert_eq!(plans.len(), 8);
        assert_eq!(plans[1].command, "tessera-mds --config mds1.toml --replica 2");
        assert_eq!(plans[4].command, "tessera-ds --config ds1.toml --id 1");
        let env = std::fs::read_to_string(dir.path().join("mds1.env")).unwrap();
        assert_eq!(env, "TESSERA_ARGS=\"--replica 2\"\n", "the systemd unit's arguments");
        let cfg = ClusterConfig::load(&dir.path().join("ds1.toml")).unwrap();
        assert_eq!(cfg.mds.len(), 3);
        assert_eq!(cfg.mds_name(2), "mds2");
        assert_eq!(cfg.ds[1].data_dir, Some(PathBuf::from("/srv/d1")));
        assert_eq!(cfg.ds[0].data_dir, Some(PathBuf::from("/var/lib/tessera/ds0")));
        assert_eq!(cfg.ion[0].addr, "10.0.0.6:7500");
        // Each node's own certificate, of its role, for its host.
        let id = tessera_proto::tls::NodeIdentity::load(&cfg.tls).unwrap();
        assert_eq!((id.role, id.name.as_str()), (Role::Ds, "ds1"));
        let pem = std::fs::read_to_string(dir.path().join("tls/mds2.pem")).unwrap();
        let info = tessera_proto::tls::CertInfo::from_pem(&pem).unwrap();
        assert_eq!(info.role, Role::Mds);
        let client = ClusterConfig::load(&dir.path().join("login1.toml")).unwrap();
        assert_eq!(tessera_proto::tls::NodeIdentity::load(&client.tls).unwrap().role, Role::Client);
        // Run again: the CA is kept, the files rewritten.
        let ca = std::fs::read(dir.path().join("tls/ca.pem")).unwrap();
        init(&parse(HOSTS).unwrap(), dir.path()).unwrap();
        assert_eq!(std::fs::read(dir.path().join("tls/ca.pem")).unwrap(), ca, "the CA is reused");
    }
}
