//! Corrupts a stopped MDS's database on purpose, for trying `tessera fsck` (bench/scripts/fsck.sh):
//!
//!     cargo run --release -p tessera-mds --example fsck_inject -- DB_DIR INJECTION...
//!
//! DB_DIR is the MDS's `data_dir` (the MDS must be stopped: sled locks it). Each INJECTION is one of:
//! `dangling:PATH` (delete PATH's inode, keep its entry), `unreachable:PATH` (delete PATH's entry, keep
//! its inode), `nlink:PATH` (set its link count to 5), `kind:PATH` (its entry says symlink),
//! `readdir:PATH` (delete its readdir position), `dirsize:DIR` (set a directory's size to 99),
//! `dotdot:DIR` (point a directory's '..' at itself), `unknown-server:PATH` (move stripe 0 of PATH's
//! layout to data server 99), `destroy-log` (queue an object of data server 99 for destruction),
//! `stale-xattr` (an xattr record of an inode that does not exist).

use anyhow::{bail, Context};
use std::path::Path;
use tessera_mds::store::{dirseq_key, ino_key, xattr_key, Store, Txn, T};
use tessera_proto::{FileKind, Ino, ROOT_INO};

fn resolve(tx: &Txn<'_>, path: &str) -> anyhow::Result<(Ino, String, Ino)> {
    let mut parent = ROOT_INO;
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let (last, dirs) = parts.split_last().with_context(|| format!("{path}: not below the root"))?;
    for p in dirs {
        parent = tx.dentry(parent, p)?.with_context(|| format!("{path}: no {p}"))?.ino;
    }
    let d = tx.dentry(parent, last)?.with_context(|| format!("{path}: not found"))?;
    Ok((parent, last.to_string(), d.ino))
}

fn inject(tx: &mut Txn<'_>, what: &str) -> anyhow::Result<String> {
    let (kind, path) = what.split_once(':').unwrap_or((what, ""));
    let target = || resolve(tx, path);
    Ok(match kind {
        "dangling" => {
            let (_, _, ino) = target()?;
            tx.del(T::Inodes, &ino_key(ino));
            format!("deleted inode {ino} of {path}, kept its entry")
        }
        "unreachable" => {
            let (parent, name, ino) = target()?;
            let d = tx.dentry(parent, &name)?.context("gone")?;
            tx.del_dentry(parent, &name, &d);
            format!("deleted the entry {path}, kept inode {ino}")
        }
        "nlink" => {
            let (_, _, ino) = target()?;
            tx.update_inode(ino, |i| i.attr.nlink = 5)?;
            format!("set the link count of {path} to 5")
        }
        "kind" => {
            let (parent, name, _) = target()?;
            let mut d = tx.dentry(parent, &name)?.context("gone")?;
            d.kind = FileKind::Symlink;
            tx.put_dentry(parent, &name, d)?;
            format!("made the entry {path} say symlink")
        }
        "readdir" => {
            let (parent, name, _) = target()?;
            let d = tx.dentry(parent, &name)?.context("gone")?;
            tx.del(T::Dirseq, &dirseq_key(parent, d.seq));
            format!("deleted the readdir position of {path}")
        }
        "dirsize" => {
            let (_, _, ino) = target()?;
            tx.update_inode(ino, |i| i.attr.size = 99)?;
            format!("set the size of directory {path} to 99")
        }
        "dotdot" => {
            let (_, _, ino) = target()?;
            tx.update_inode(ino, |i| i.parent = ino)?;
            format!("pointed '..' of {path} at itself")
        }
        "unknown-server" => {
            let (_, _, ino) = target()?;
            tx.update_inode(ino, |i| {
                if let Some(l) = i.layout.as_mut() {
                    l.targets[0].ds = 99;
                }
            })?;
            format!("moved stripe 0 of {path} to data server 99")
        }
        "destroy-log" => {
            tx.destroy_objects(99, vec![0xdead])?;
            "queued object 0xdead of data server 99 for destruction".to_string()
        }
        "stale-xattr" => {
            tx.put(T::Xattrs, &xattr_key(0xbad1d, "user.stale"), b"x".to_vec());
            "wrote an xattr of inode 0xbad1d, which does not exist".to_string()
        }
        other => bail!("unknown injection {other}"),
    })
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((db, injections)) = args.split_first() else {
        eprintln!("usage: fsck_inject DB_DIR INJECTION... (see the source's first lines)");
        return std::process::ExitCode::from(2);
    };
    let store = match Store::open(Path::new(db), Default::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{db}: {}", tessera_proto::error::chain(&e));
            return std::process::ExitCode::from(1);
        }
    };
    let mut tx = store.begin();
    for what in injections {
        match inject(&mut tx, what) {
            Ok(done) => println!("{what}: {done}"),
            Err(e) => {
                eprintln!("{what}: {e:#}");
                return std::process::ExitCode::from(1);
            }
        }
    }
    let committed = tx.commit().map_err(anyhow::Error::from).and_then(|()| Ok(store.flush_sync()?));
    match committed {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("commit: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
