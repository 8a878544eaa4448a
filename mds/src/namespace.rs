//! Every metadata operation with POSIX/Linux semantics: lookups, creation, removal, rename, readdir,
//! attributes, open/close bookkeeping, xattrs, layouts and statfs.
//!
//! Mutations run under one short mutex (never held across I/O or the flush): they read through a
//! [`Txn`] overlay, commit as one sled transaction plus its journal record, release the lock, and
//! (in `fsync` commit mode only) wait for durability, concurrent flushes sharing one fsync. The
//! mutex also keeps the journal in the order the changes were applied. Reads take no lock.

use crate::dsclient::DataServers;
use crate::lease::{Leases, Renewal, LEASE_TIME, RESERVED_INOS};
use crate::perm::{self, R, W, X};
use crate::placement::{self, Placement};
use crate::stats::StatsView;
use crate::store::{dirseq_key, xattr_key, xattr_prefix, Dentry, Inode, Store, Txn, T};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tessera_proto::config::Defaults;
use tessera_proto::error::ErrorCode;
use tessera_proto::layout::{Layout, LayoutSpec, StripeTarget};
use tessera_proto::msg::*;
use tessera_proto::*;
use tokio::sync::Notify;
use tracing::info;

/// Symlinks followed in one path walk before ELOOP (Linux's MAXSYMLINKS).
const MAX_SYMLINK_HOPS: usize = 40;
const STATFS_BLOCK: u64 = 4096;
/// Reported free inodes: there is no fixed inode table.
const FILES_FREE: u64 = 1 << 40;
const LAYOUT_XATTR: &str = "tessera.layout";
const READDIR_MAX: usize = 8192;
/// Meta key: when a lease was last granted or renewed (milliseconds since the epoch, big-endian).
const LEASE_ACTIVITY_KEY: &[u8] = b"lease-activity";

fn epoch_ms() -> u64 {
    let t = Timestamp::now();
    (t.secs.max(0) as u64) * 1000 + u64::from(t.nanos / 1_000_000)
}

fn err(code: ErrorCode, detail: impl Into<String>) -> FsError {
    FsError::new(code, detail)
}

/// A component name: not empty, `.`, `..`, no `/` or NUL, at most 255 bytes.
pub fn validate_name(name: &str) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(err(ErrorCode::NameTooLong, format!("name of {} bytes (max {NAME_MAX})", name.len())));
    }
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(FsError::invalid(format!("invalid name '{}'", name.escape_debug())));
    }
    Ok(())
}

fn entry(i: Inode) -> MdsReply {
    MdsReply::Entry { attr: i.attr, layout: i.layout }
}

/// `tessera.layout` text of a file layout.
pub fn layout_text(l: &Layout) -> String {
    let objects: Vec<String> = l.targets.iter().map(|t| format!("{}:{}", t.ds, t.object)).collect();
    format!("stripe_size={} stripe_count={} objects={}", l.stripe_size, l.targets.len(), objects.join(","))
}

/// `tessera.layout` text of a directory default.
pub fn spec_text(s: &LayoutSpec) -> String {
    let mut parts = Vec::new();
    if let Some(v) = s.stripe_size {
        parts.push(format!("stripe_size={v}"));
    }
    if let Some(v) = s.stripe_count {
        parts.push(format!("stripe_count={v}"));
    }
    parts.join(" ")
}

fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1u64 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Parses `stripe_size=N stripe_count=M` (either may be missing; `objects=` is ignored).
pub fn parse_spec(text: &[u8]) -> FsResult<LayoutSpec> {
    let text = std::str::from_utf8(text).map_err(|_| FsError::invalid("layout text is not UTF-8"))?;
    let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    let mut spec = LayoutSpec::default();
    for tok in text.split_whitespace() {
        let (k, v) =
            tok.split_once('=').ok_or_else(|| FsError::invalid(format!("layout: '{tok}' is not key=value")))?;
        match k {
            "stripe_size" | "size" => {
                spec.stripe_size =
                    Some(parse_size(v).ok_or_else(|| FsError::invalid(format!("layout: bad stripe_size '{v}'")))?)
            }
            "stripe_count" | "count" => {
                spec.stripe_count =
                    Some(v.parse().map_err(|_| FsError::invalid(format!("layout: bad stripe_count '{v}'")))?)
            }
            "objects" => {}
            _ => return Err(FsError::invalid(format!("layout: unknown key '{k}'"))),
        }
    }
    spec.validate()?;
    Ok(spec)
}

enum XattrNs {
    User,
    Trusted,
    Security,
    Layout,
}

fn xattr_ns(name: &str) -> FsResult<XattrNs> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(err(ErrorCode::Range, format!("xattr name of {} bytes", name.len())));
    }
    if name.contains('\0') {
        return Err(FsError::invalid("xattr name contains NUL"));
    }
    if name == LAYOUT_XATTR {
        Ok(XattrNs::Layout)
    } else if name.starts_with("user.") {
        Ok(XattrNs::User)
    } else if name.starts_with("trusted.") {
        Ok(XattrNs::Trusted)
    } else if name.starts_with("security.") {
        Ok(XattrNs::Security)
    } else {
        Err(err(ErrorCode::Unsupported, format!("xattr namespace of '{name}' not supported")))
    }
}

/// Written with every grant and batch, so a restarted MDS knows whether a lease may still be in use: its
/// holder keeps answering for the directory until its lease would have expired.
fn note_lease_activity(tx: &mut Txn<'_>) {
    tx.put(T::Meta, LEASE_ACTIVITY_KEY, epoch_ms().to_be_bytes().to_vec());
}

/// How long after this start requests on directories must wait: until the leases the previous run may
/// have granted have certainly expired at their holders.
fn lease_grace(store: &Store) -> FsResult<Duration> {
    let Some(v) = store.read(T::Meta, LEASE_ACTIVITY_KEY)? else { return Ok(Duration::ZERO) };
    let last = v.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(0);
    let until = last.saturating_add(LEASE_TIME.as_millis() as u64);
    Ok(Duration::from_millis(until.saturating_sub(epoch_ms())).min(LEASE_TIME))
}

pub struct Namespace {
    store: Arc<Store>,
    /// Serialises mutations (reads never take it).
    mutate: Mutex<()>,
    /// Open handles per inode (in memory: they do not survive a restart).
    opens: Mutex<HashMap<Ino, HashSet<u64>>>,
    next_handle: AtomicU64,
    placement: Box<dyn Placement>,
    stats: Arc<StatsView>,
    defaults: LayoutSpec,
    data: Arc<dyn DataServers>,
    destroy_wake: Arc<Notify>,
    destroy_pending: AtomicBool,
    leases: Leases,
    /// The first inode number of this run: lower ones were handed out before (sled's ids only grow,
    /// across restarts too), so a batch may use one a lease reserved before an MDS restart.
    boot_ino: Ino,
}

impl Namespace {
    /// Creates the root on first start and destroys orphans a previous run left.
    pub fn new(
        store: Arc<Store>,
        defaults: &Defaults,
        stats: Arc<StatsView>,
        data: Arc<dyn DataServers>,
    ) -> FsResult<Namespace> {
        let placement = placement::by_name(&defaults.placement)?;
        let spec = LayoutSpec { stripe_size: Some(defaults.stripe_size), stripe_count: Some(defaults.stripe_count) };
        spec.validate()?;
        let boot_ino = store.new_ino()?;
        let leases = Leases::with_grace(lease_grace(&store)?);
        let ns = Namespace {
            store,
            mutate: Mutex::new(()),
            opens: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            placement,
            stats,
            defaults: spec,
            data,
            destroy_wake: Arc::new(Notify::new()),
            destroy_pending: AtomicBool::new(false),
            leases,
            boot_ino,
        };
        ns.init()?;
        Ok(ns)
    }

    fn init(&self) -> FsResult<()> {
        let mut tx = self.store.begin();
        if tx.get_inode(ROOT_INO)?.is_none() {
            let c = Caller::current_process();
            let attr = Attr::new(ROOT_INO, FileKind::Dir, 0o755, c.uid, c.gid, Timestamp::now());
            tx.add_inode(&Inode { attr, layout: None, target: None, parent: ROOT_INO })?;
            info!(uid = c.uid, gid = c.gid, "created the root directory");
        }
        let mut orphans = 0;
        for ino in self.store.orphans()? {
            match tx.get_inode(ino)? {
                Some(i) if i.attr.nlink == 0 => {
                    tx.remove_inode(&i)?;
                    orphans += 1;
                }
                _ => tx.set_orphan(ino, false),
            }
        }
        if orphans > 0 {
            info!(orphans, "destroyed files unlinked while open before the restart");
        }
        tx.commit()?;
        self.store.flush_sync()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn stats(&self) -> &Arc<StatsView> {
        &self.stats
    }

    /// Notified whenever destroy-log entries were made durable.
    pub fn destroy_wake(&self) -> Arc<Notify> {
        self.destroy_wake.clone()
    }

    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    pub fn data_servers(&self) -> Arc<dyn DataServers> {
        self.data.clone()
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.mutate.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn opens(&self) -> MutexGuard<'_, HashMap<Ino, HashSet<u64>>> {
        self.opens.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_open(&self, ino: Ino) -> bool {
        self.opens().get(&ino).is_some_and(|h| !h.is_empty())
    }

    fn commit(&self, tx: Txn<'_>) -> FsResult<()> {
        let destroys = tx.has_destroys();
        tx.commit()?;
        if destroys {
            self.destroy_pending.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Waits until a mutation's result is durable (journaled already, or fsync'ed in `fsync` commit
    /// mode), then wakes the destroyer if it has work.
    async fn durable<V>(&self, r: FsResult<V>) -> FsResult<V> {
        let v = r?;
        if self.store.sync_commits() {
            self.store.flush().await?;
        }
        if self.destroy_pending.swap(false, Ordering::SeqCst) {
            self.destroy_wake.notify_one();
        }
        Ok(v)
    }

    /// Serves one request (everything except the data-server report, which needs the peer's role).
    pub async fn handle(&self, c: &Caller, req: MdsRequest) -> FsResult<MdsReply> {
        use MdsRequest as Q;
        match req {
            Q::Ping => Ok(MdsReply::Pong { version: PROTOCOL_VERSION }),
            Q::Lookup { parent, name } => self.lookup(c, parent, &name),
            Q::LookupPath { path, follow } => self.resolve(c, &path, follow).map(entry),
            Q::GetAttr { ino } => Ok(MdsReply::Attr(self.store.begin().inode(ino)?.attr)),
            Q::SetAttr { ino, set } => self.setattr(c, ino, set).await,
            Q::Create { parent, name, kind, perm, rdev, exclusive, layout } => {
                let r = self.create_sync(c, parent, &name, kind, perm, rdev, exclusive, layout, false);
                self.durable(r.map(|(i, _)| entry(i))).await
            }
            Q::CreateOpen { parent, name, perm, exclusive, layout, flags } => {
                let r = self.create_sync(c, parent, &name, FileKind::File, perm, 0, exclusive, layout, true);
                match self.durable(r).await? {
                    (i, Some((handle, parent))) => {
                        Ok(MdsReply::Opened { attr: i.attr, layout: i.layout, handle, parent: Some(parent) })
                    }
                    // It existed: an ordinary open, with its permission checks and O_TRUNC.
                    (i, None) => self.open(c, i.attr.ino, flags).await,
                }
            }
            Q::Sync => self.store.flush().await.map(|_| MdsReply::Ok),
            Q::Mkdir { parent, name, perm } => self.durable(self.mkdir_sync(c, parent, &name, perm)).await,
            Q::Symlink { parent, name, target } => self.durable(self.symlink_sync(c, parent, &name, &target)).await,
            Q::Readlink { ino } => {
                let i = self.store.begin().inode(ino)?;
                match i.target {
                    Some(t) if i.attr.kind == FileKind::Symlink => Ok(MdsReply::Target(t)),
                    _ => Err(FsError::invalid(format!("inode {ino} is not a symlink"))),
                }
            }
            Q::Link { ino, new_parent, new_name } => self.durable(self.link_sync(c, ino, new_parent, &new_name)).await,
            Q::Unlink { parent, name } => self.durable(self.unlink_sync(c, parent, &name)).await,
            Q::Rmdir { parent, name } => self.durable(self.rmdir_sync(c, parent, &name)).await,
            Q::Rename { parent, name, new_parent, new_name, flags } => {
                self.durable(self.rename_sync(c, parent, &name, new_parent, &new_name, flags)).await
            }
            Q::ReadDir { ino, offset, max } => self.readdir(c, ino, offset, max),
            Q::Open { ino, flags } => self.open(c, ino, flags).await,
            Q::Close { ino, handle, size, wrote } => {
                // A close that changed nothing (no write, no orphan removed) has nothing to make durable.
                match self.close_sync(ino, handle, size, wrote) {
                    Ok((reply, true)) => self.durable(Ok(reply)).await,
                    other => other.map(|(reply, _)| reply),
                }
            }
            Q::ReportWrite { ino, size } => self.durable(self.report_write_sync(c, ino, size)).await,
            Q::StatFs => Ok(self.statfs()),
            Q::Access { ino, mask } => {
                let i = self.store.begin().inode(ino)?;
                if mask & 7 != 0 {
                    perm::check(c, &i.attr, mask & 7)?;
                }
                Ok(MdsReply::Ok)
            }
            Q::GetXattr { ino, name } => self.get_xattr(c, ino, &name),
            Q::SetXattr { ino, name, value, mode } => {
                self.durable(self.set_xattr_sync(c, ino, &name, &value, mode)).await
            }
            Q::ListXattr { ino } => self.list_xattr(c, ino),
            Q::RemoveXattr { ino, name } => self.durable(self.remove_xattr_sync(c, ino, &name)).await,
            Q::GetLayout { ino } => self.get_layout(ino),
            Q::SetLayout { ino, spec } => self.durable(self.set_layout_sync(c, ino, spec)).await,
            Q::ClusterStatus => Ok(MdsReply::Cluster(self.stats.cluster_status())),
            Q::LocalityReport(_) | Q::SetOrchestratorMode { .. } | Q::OrchestratorStatus => {
                Err(FsError::new(tessera_proto::error::ErrorCode::Unsupported, "orchestrator not available"))
            }
            Q::DsReport(r) => {
                self.stats.record(r);
                Ok(MdsReply::Ok)
            }
            Q::LeaseDir { .. } | Q::CreateBatch { .. } => {
                Err(FsError::new(ErrorCode::Unsupported, "lease requests need the caller's connection"))
            }
        }
    }

    /// The requests that belong to a connection: directory leases and their batches of creates.
    pub async fn handle_lease(&self, c: &Caller, conn: u64, req: MdsRequest) -> FsResult<MdsReply> {
        match req {
            MdsRequest::LeaseDir { dir } => self.lease_dir(c, conn, dir).map(MdsReply::Lease),
            MdsRequest::CreateBatch { dir, token, entries, keep } => {
                self.create_batch(conn, dir, token, entries, keep).await
            }
            other => self.handle(c, other).await,
        }
    }

    fn new_lease(&self, dir: Ino, token: u64, count: usize, attr: Attr) -> FsResult<DirLease> {
        let inos = (0..count).map(|_| self.store.new_ino()).collect::<FsResult<Vec<_>>>()?;
        self.leases.reserve(dir, &inos);
        Ok(DirLease { dir, token, valid_ms: LEASE_TIME.as_millis() as u32, inos, attr })
    }

    /// Grants `conn` the lease on the empty directory `dir` if `c` may create in it.
    fn lease_dir(&self, c: &Caller, conn: u64, dir: Ino) -> FsResult<DirLease> {
        // Under the mutation lock: no entry can appear between the check and the grant.
        let _g = self.lock();
        let mut tx = self.store.begin();
        let d = tx.dir(dir)?;
        perm::check(c, &d.attr, W | X)?;
        if tx.dir_has_entries(dir)? {
            return Err(err(ErrorCode::Busy, "only an empty directory is leased"));
        }
        let token = self.leases.grant(dir, conn).ok_or_else(|| err(ErrorCode::Busy, "another client holds it"))?;
        note_lease_activity(&mut tx);
        self.commit(tx)?;
        self.new_lease(dir, token, RESERVED_INOS, d.attr)
    }

    /// Applies a lease holder's batch of creates, then renews or ends its lease.
    async fn create_batch(
        &self,
        conn: u64,
        dir: Ino,
        token: u64,
        entries: Vec<AsyncCreate>,
        keep: bool,
    ) -> FsResult<MdsReply> {
        if self.leases.holds(dir, token, conn) {
            // Others keep waiting while this batch is applied, however long that takes.
            self.leases.extend(dir, token);
        } else {
            // Lost (expired, or the MDS restarted): whoever holds it now goes first.
            self.leases.wait_for(conn, Some(dir)).await;
        }
        let used = entries.len();
        let r = self.create_batch_sync(dir, entries);
        let (results, dir_attr) = self.durable(r).await?;
        let lease = match self.leases.renew(dir, token, keep) {
            Renewal::Renewed => Some(self.new_lease(dir, token, used, dir_attr.clone())?),
            Renewal::Recalled | Renewal::Ended => None,
        };
        Ok(MdsReply::Batch { results, dir_attr, lease })
    }

    /// Whether `ino` may have been reserved for a lease before this MDS restarted (its reservations are
    /// in memory): handed out by an earlier run and not in use.
    fn reserved_before_restart(&self, tx: &Txn<'_>, ino: Ino) -> FsResult<bool> {
        Ok(ino < self.boot_ino && ino > ROOT_INO && tx.get_inode(ino)?.is_none())
    }

    /// Creates (and opens, as asked) each entry of a batch in one transaction; an entry that cannot be
    /// made fails alone. An entry whose name already holds its inode number was made by an earlier send
    /// of the same batch.
    fn create_batch_sync(&self, dir: Ino, entries: Vec<AsyncCreate>) -> FsResult<(Vec<BatchResult>, Attr)> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut dir_attr = tx.dir(dir)?.attr;
        let base = tx.dir_layout(dir)?.unwrap_or_default();
        note_lease_activity(&mut tx);
        let mut made = Vec::with_capacity(entries.len());
        let mut used = Vec::new();
        for e in entries {
            let layout = match tx.dentry(dir, &e.name)? {
                Some(d) if d.ino == e.ino => Ok(tx.inode(e.ino)?.layout),
                Some(_) => Err(FsError::exists(e.name.clone())),
                None => match validate_name(&e.name) {
                    Err(x) => Err(x),
                    // Set-id bits are never created without the MDS deciding (the holder sends none).
                    Ok(()) if e.perm & !0o1777 != 0 => Err(FsError::invalid("mode bits beyond 01777")),
                    Ok(()) if used.contains(&e.ino) => Err(FsError::invalid("inode number used twice")),
                    Ok(()) if !self.leases.is_reserved(dir, e.ino) && !self.reserved_before_restart(&tx, e.ino)? => {
                        Err(FsError::invalid(format!("inode {} was not reserved for this directory", e.ino)))
                    }
                    Ok(()) => {
                        let attr = Attr::new(e.ino, FileKind::File, e.perm, e.uid, e.gid, e.time);
                        let layout = self.new_layout(LayoutSpec::default(), base)?;
                        tx.add_inode(&Inode { attr, layout: Some(layout.clone()), target: None, parent: dir })?;
                        dir_attr = self.add_entry(&mut tx, dir, &e.name, e.ino, FileKind::File)?;
                        used.push(e.ino);
                        Ok(Some(layout))
                    }
                },
            };
            made.push((e.ino, e.open, layout));
        }
        self.commit(tx)?;
        // Only now: a batch that failed as a whole may be sent again with the same numbers.
        self.leases.consume(dir, &used);
        let results = made
            .into_iter()
            .map(|(ino, open, layout)| {
                let result = layout.and_then(|l| match (open, l) {
                    (Some(_), Some(l)) => Ok(Some((self.register_open(ino), l))),
                    (Some(_), None) => Err(FsError::protocol(format!("inode {ino} has no layout"))),
                    (None, _) => Ok(None),
                });
                BatchResult { ino, result }
            })
            .collect();
        Ok((results, dir_attr))
    }

    // ---------------------------------------------------------------------------------------------
    // Lookups

    fn lookup(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let p = rd.dir(parent)?;
        perm::check(c, &p.attr, X)?;
        let i = match name {
            "." => p,
            ".." => rd.inode(p.parent)?,
            _ => {
                validate_name(name)?;
                let d = rd.dentry(parent, name)?.ok_or_else(|| FsError::not_found(name.to_string()))?;
                rd.inode(d.ino)?
            }
        };
        Ok(entry(i))
    }

    /// Resolves an absolute path like the kernel's path walk.
    pub fn resolve(&self, c: &Caller, path: &str, follow: bool) -> FsResult<Inode> {
        if path.len() > PATH_MAX {
            return Err(err(ErrorCode::NameTooLong, format!("path of {} bytes", path.len())));
        }
        if !path.starts_with('/') {
            return Err(FsError::invalid(format!("path '{path}' is not absolute")));
        }
        fn components(p: &str) -> VecDeque<String> {
            let mut v: VecDeque<String> = p.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect();
            // A trailing slash demands a directory (and follows a final symlink).
            if p.ends_with('/') && !v.is_empty() {
                v.push_back(".".into());
            }
            v
        }
        let rd = self.store.begin();
        let mut comps = components(path);
        let mut cur = rd.inode(ROOT_INO)?;
        let mut hops = 0;
        while let Some(name) = comps.pop_front() {
            if cur.attr.kind != FileKind::Dir {
                return Err(err(ErrorCode::NotDir, format!("{path}: inode {} is not a directory", cur.attr.ino)));
            }
            perm::check(c, &cur.attr, X)?;
            match name.as_str() {
                "." => continue,
                ".." => {
                    cur = rd.inode(cur.parent)?;
                    continue;
                }
                _ => {}
            }
            if name.len() > NAME_MAX {
                return Err(err(ErrorCode::NameTooLong, format!("{path}: component of {} bytes", name.len())));
            }
            let d = rd.dentry(cur.attr.ino, &name)?.ok_or_else(|| FsError::not_found(format!("{path}: {name}")))?;
            let child = rd.inode(d.ino)?;
            if child.attr.kind == FileKind::Symlink && (follow || !comps.is_empty()) {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(err(ErrorCode::Loop, format!("{path}: too many symbolic links")));
                }
                let target = child.target.clone().unwrap_or_default();
                if target.starts_with('/') {
                    cur = rd.inode(ROOT_INO)?;
                }
                for t in components(&target).into_iter().rev() {
                    comps.push_front(t);
                }
                continue;
            }
            cur = child;
        }
        Ok(cur)
    }

    // ---------------------------------------------------------------------------------------------
    // Entry helpers (callers hold the mutation lock)

    /// Adds `name → ino` to `parent` with a fresh readdir position; parent size/nlink/times follow.
    /// Returns the parent's new attributes.
    fn add_entry(&self, tx: &mut Txn<'_>, parent: Ino, name: &str, ino: Ino, kind: FileKind) -> FsResult<Attr> {
        let seq = self.store.new_id()?;
        tx.put_dentry(parent, name, Dentry { ino, kind, seq })?;
        let now = Timestamp::now();
        let p = tx.update_inode(parent, |p| {
            p.attr.size = p.attr.size.saturating_add(1);
            if kind == FileKind::Dir {
                p.attr.nlink = p.attr.nlink.saturating_add(1);
            }
            p.attr.mtime = now;
            p.attr.ctime = now;
        })?;
        Ok(p.attr)
    }

    /// Removes an entry; returns the parent's new attributes.
    fn remove_entry(&self, tx: &mut Txn<'_>, parent: Ino, name: &str, d: &Dentry) -> FsResult<Attr> {
        tx.del_dentry(parent, name, d);
        let now = Timestamp::now();
        let p = tx.update_inode(parent, |p| {
            p.attr.size = p.attr.size.saturating_sub(1);
            if d.kind == FileKind::Dir {
                p.attr.nlink = p.attr.nlink.saturating_sub(1).max(2);
            }
            p.attr.mtime = now;
            p.attr.ctime = now;
        })?;
        Ok(p.attr)
    }

    /// Drops one link of a non-directory: at zero links it becomes an orphan if open, else it is
    /// deleted and its objects go to the destroy log (same transaction).
    fn drop_link(&self, tx: &mut Txn<'_>, ino: Ino) -> FsResult<()> {
        let mut i = tx.inode(ino)?;
        i.attr.nlink = i.attr.nlink.saturating_sub(1);
        i.attr.ctime = Timestamp::now();
        if i.attr.nlink > 0 {
            tx.put_inode(&i)
        } else if i.attr.kind == FileKind::File && self.is_open(ino) {
            tx.set_orphan(ino, true);
            tx.put_inode(&i)
        } else {
            tx.remove_inode(&i)
        }
    }

    fn new_inode(&self, c: &Caller, parent: &Inode, kind: FileKind, perm: u32, rdev: u32) -> FsResult<Inode> {
        let ino = self.store.new_ino()?;
        let (uid, gid, perm) = perm::new_owner(c, &parent.attr, kind, perm);
        let attr = Attr { rdev, ..Attr::new(ino, kind, perm, uid, gid, Timestamp::now()) };
        Ok(Inode { attr, layout: None, target: None, parent: parent.attr.ino })
    }

    /// A fresh layout: `spec` over `base` over the cluster defaults, placed by the policy.
    fn new_layout(&self, spec: LayoutSpec, base: LayoutSpec) -> FsResult<Layout> {
        let merged = spec.over(base).over(self.defaults);
        let stripe_size = merged.stripe_size.unwrap_or(1 << 20);
        let servers = self.stats.snapshot();
        let mut count = merged.stripe_count.unwrap_or(0) as usize;
        if count == 0 || count > servers.len() {
            count = servers.len();
        }
        let ds = self.placement.place(count, &servers)?;
        let targets =
            ds.into_iter().map(|ds| Ok(StripeTarget { ds, object: self.store.new_id()? })).collect::<FsResult<_>>()?;
        let l = Layout { stripe_size, targets };
        l.validate()?;
        Ok(l)
    }

    /// Parent for a new entry: a directory the caller may write and search, without `name` (EEXIST).
    fn parent_for_new(&self, tx: &Txn<'_>, c: &Caller, parent: Ino, name: &str) -> FsResult<Inode> {
        validate_name(name)?;
        let p = tx.dir(parent)?;
        perm::check(c, &p.attr, X)?;
        if tx.dentry(parent, name)?.is_some() {
            return Err(FsError::exists(name.to_string()));
        }
        perm::check(c, &p.attr, W)?;
        Ok(p)
    }

    // ---------------------------------------------------------------------------------------------
    // Mutations

    /// Creates `name` (or, if `exclusive` is false, finds the regular file of that name). With `open`,
    /// a NEW file is also opened, registered under the same lock so no unlink can slip in between:
    /// its handle is returned with the parent's new attributes; for an existing file it is `None` and
    /// the caller opens it normally.
    #[allow(clippy::too_many_arguments)]
    fn create_sync(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        kind: FileKind,
        perm: u32,
        rdev: u32,
        exclusive: bool,
        spec: Option<LayoutSpec>,
        open: bool,
    ) -> FsResult<(Inode, Option<(u64, Attr)>)> {
        validate_name(name)?;
        if matches!(kind, FileKind::Dir | FileKind::Symlink) {
            return Err(FsError::invalid("create makes files, FIFOs, sockets and devices (use mkdir/symlink)"));
        }
        if let Some(s) = &spec {
            s.validate()?;
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = tx.dir(parent)?;
        perm::check(c, &p.attr, X)?;
        if let Some(d) = tx.dentry(parent, name)? {
            if !exclusive && kind == FileKind::File && d.kind == FileKind::File {
                return Ok((tx.inode(d.ino)?, None));
            }
            return Err(FsError::exists(name.to_string()));
        }
        perm::check(c, &p.attr, W)?;
        let rdev = if matches!(kind, FileKind::CharDev | FileKind::BlockDev) { rdev } else { 0 };
        let mut i = self.new_inode(c, &p, kind, perm, rdev)?;
        if kind == FileKind::File {
            let base = tx.dir_layout(parent)?.unwrap_or_default();
            i.layout = Some(self.new_layout(spec.unwrap_or_default(), base)?);
        }
        tx.add_inode(&i)?;
        let parent_attr = self.add_entry(&mut tx, parent, name, i.attr.ino, kind)?;
        self.commit(tx)?;
        let handle = open.then(|| (self.register_open(i.attr.ino), parent_attr));
        Ok((i, handle))
    }

    /// A new open handle of `ino`. Call under the mutation lock, so an unlink sees it and keeps the
    /// file as an orphan.
    fn register_open(&self, ino: Ino) -> u64 {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.opens().entry(ino).or_default().insert(handle);
        handle
    }

    fn mkdir_sync(&self, c: &Caller, parent: Ino, name: &str, perm: u32) -> FsResult<MdsReply> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = self.parent_for_new(&tx, c, parent, name)?;
        let i = self.new_inode(c, &p, FileKind::Dir, perm, 0)?;
        tx.add_inode(&i)?;
        // Subdirectories inherit the default layout (as Lustre does).
        if let Some(spec) = tx.dir_layout(parent)? {
            tx.set_dir_layout(i.attr.ino, Some(spec))?;
        }
        self.add_entry(&mut tx, parent, name, i.attr.ino, FileKind::Dir)?;
        self.commit(tx)?;
        Ok(entry(i))
    }

    fn symlink_sync(&self, c: &Caller, parent: Ino, name: &str, target: &str) -> FsResult<MdsReply> {
        if target.is_empty() {
            return Err(FsError::not_found("empty symlink target"));
        }
        if target.len() > PATH_MAX {
            return Err(err(ErrorCode::NameTooLong, format!("symlink target of {} bytes", target.len())));
        }
        if target.contains('\0') {
            return Err(FsError::invalid("symlink target contains NUL"));
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let p = self.parent_for_new(&tx, c, parent, name)?;
        let mut i = self.new_inode(c, &p, FileKind::Symlink, 0o777, 0)?;
        i.attr.size = target.len() as u64;
        i.target = Some(target.to_string());
        tx.add_inode(&i)?;
        self.add_entry(&mut tx, parent, name, i.attr.ino, FileKind::Symlink)?;
        self.commit(tx)?;
        Ok(entry(i))
    }

    fn link_sync(&self, c: &Caller, ino: Ino, new_parent: Ino, new_name: &str) -> FsResult<MdsReply> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let i = tx.inode(ino)?;
        if i.attr.kind == FileKind::Dir {
            return Err(FsError::perm("hard links to directories are not allowed"));
        }
        if i.attr.nlink == 0 {
            return Err(FsError::not_found(format!("inode {ino} was unlinked")));
        }
        self.parent_for_new(&tx, c, new_parent, new_name)?;
        let now = Timestamp::now();
        let i = tx.update_inode(ino, |i| {
            i.attr.nlink = i.attr.nlink.saturating_add(1);
            i.attr.ctime = now;
        })?;
        self.add_entry(&mut tx, new_parent, new_name, ino, i.attr.kind)?;
        self.commit(tx)?;
        Ok(entry(i))
    }

    /// The entry `name` of directory `parent`, for removal: w+x on the parent and the sticky rule.
    fn victim(&self, tx: &Txn<'_>, c: &Caller, parent: Ino, name: &str) -> FsResult<(Inode, Dentry, Inode)> {
        let p = tx.dir(parent)?;
        perm::check(c, &p.attr, W | X)?;
        let d = tx.dentry(parent, name)?.ok_or_else(|| FsError::not_found(name.to_string()))?;
        let i = tx.inode(d.ino)?;
        perm::check_sticky(c, &p.attr, &i.attr)?;
        Ok((p, d, i))
    }

    fn unlink_sync(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        validate_name(name)?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, d, i) = self.victim(&tx, c, parent, name)?;
        if i.attr.kind == FileKind::Dir {
            return Err(err(ErrorCode::IsDir, format!("{name} is a directory")));
        }
        let parent_attr = self.remove_entry(&mut tx, parent, name, &d)?;
        self.drop_link(&mut tx, d.ino)?;
        self.commit(tx)?;
        Ok(MdsReply::Attr(parent_attr))
    }

    fn rmdir_sync(&self, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
        match name {
            "." => return Err(FsError::invalid("cannot remove '.'")),
            ".." => return Err(err(ErrorCode::NotEmpty, "cannot remove '..'")),
            _ => validate_name(name)?,
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, d, i) = self.victim(&tx, c, parent, name)?;
        if i.attr.kind != FileKind::Dir {
            return Err(err(ErrorCode::NotDir, format!("{name} is not a directory")));
        }
        if i.attr.ino == ROOT_INO {
            return Err(err(ErrorCode::Busy, "cannot remove the root"));
        }
        if tx.dir_has_entries(i.attr.ino)? {
            return Err(err(ErrorCode::NotEmpty, format!("{name} is not empty")));
        }
        let parent_attr = self.remove_entry(&mut tx, parent, name, &d)?;
        tx.remove_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Attr(parent_attr))
    }

    /// Whether directory `ancestor` is `dir` or one of its ancestors.
    fn is_ancestor(tx: &Txn<'_>, ancestor: Ino, dir: Ino) -> FsResult<bool> {
        let mut cur = dir;
        // Bounded walk: a corrupt parent chain must not loop forever.
        for _ in 0..100_000 {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = tx.inode(cur)?.parent;
        }
        Err(FsError::io("directory parent chain too deep"))
    }

    fn rename_sync(
        &self,
        c: &Caller,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
    ) -> FsResult<MdsReply> {
        validate_name(name)?;
        validate_name(new_name)?;
        if flags.exchange && flags.noreplace {
            return Err(FsError::invalid("rename: exchange and noreplace together"));
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let (_, sd, src) = self.victim(&tx, c, parent, name)?;
        let dp = tx.dir(new_parent)?;
        perm::check(c, &dp.attr, W | X)?;
        let dd = tx.dentry(new_parent, new_name)?;
        let dst = match &dd {
            Some(d) => Some(tx.inode(d.ino)?),
            None => None,
        };
        if let Some(dst) = &dst {
            if flags.noreplace {
                return Err(FsError::exists(new_name.to_string()));
            }
            if dst.attr.ino == src.attr.ino {
                return Ok(MdsReply::Ok); // hard links of each other (or the same name): nothing to do
            }
            perm::check_sticky(c, &dp.attr, &dst.attr)?;
        } else if flags.exchange {
            return Err(FsError::not_found(format!("rename exchange: {new_name}")));
        }
        let src_dir = src.attr.kind == FileKind::Dir;
        let moves_parent = parent != new_parent;
        // A directory changing parents rewrites its "..": write permission on it, and not into itself.
        if src_dir && moves_parent {
            perm::check(c, &src.attr, W)?;
            if Self::is_ancestor(&tx, src.attr.ino, new_parent)? {
                return Err(FsError::invalid("cannot move a directory into its own subtree"));
            }
        }
        let now = Timestamp::now();
        if flags.exchange {
            let (dst, dd) = match (dst, dd) {
                (Some(i), Some(d)) => (i, d),
                _ => return Err(FsError::not_found(new_name.to_string())),
            };
            let dst_dir = dst.attr.kind == FileKind::Dir;
            if dst_dir && moves_parent {
                perm::check(c, &dst.attr, W)?;
                if Self::is_ancestor(&tx, dst.attr.ino, parent)? {
                    return Err(FsError::invalid("cannot move a directory into its own subtree"));
                }
            }
            self.remove_entry(&mut tx, parent, name, &sd)?;
            self.remove_entry(&mut tx, new_parent, new_name, &dd)?;
            self.add_entry(&mut tx, parent, name, dst.attr.ino, dst.attr.kind)?;
            self.add_entry(&mut tx, new_parent, new_name, src.attr.ino, src.attr.kind)?;
            tx.update_inode(dst.attr.ino, |i| {
                i.attr.ctime = now;
                if dst_dir {
                    i.parent = parent;
                }
            })?;
        } else {
            if let (Some(dst), Some(dd)) = (&dst, &dd) {
                let dst_dir = dst.attr.kind == FileKind::Dir;
                if src_dir && !dst_dir {
                    return Err(err(ErrorCode::NotDir, format!("{new_name} is not a directory")));
                }
                if !src_dir && dst_dir {
                    return Err(err(ErrorCode::IsDir, format!("{new_name} is a directory")));
                }
                if dst_dir && tx.dir_has_entries(dst.attr.ino)? {
                    return Err(err(ErrorCode::NotEmpty, format!("{new_name} is not empty")));
                }
                self.remove_entry(&mut tx, new_parent, new_name, dd)?;
                if dst_dir {
                    tx.remove_inode(dst)?;
                } else {
                    self.drop_link(&mut tx, dst.attr.ino)?;
                }
            }
            self.remove_entry(&mut tx, parent, name, &sd)?;
            self.add_entry(&mut tx, new_parent, new_name, src.attr.ino, src.attr.kind)?;
        }
        tx.update_inode(src.attr.ino, |i| {
            i.attr.ctime = now;
            if src_dir {
                i.parent = new_parent;
            }
        })?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    // ---------------------------------------------------------------------------------------------
    // Attributes, open/close, sizes

    /// Applies `set` to `i` with every permission rule (used once to validate, once for real).
    fn apply_setattr(&self, c: &Caller, i: &mut Inode, set: &SetAttrs, now: Timestamp) -> FsResult<()> {
        let orig = i.attr.clone();
        if set.uid.is_some() || set.gid.is_some() {
            perm::check_chown(c, &orig, set.uid, set.gid)?;
            if let Some(uid) = set.uid {
                i.attr.uid = uid;
            }
            if let Some(gid) = set.gid {
                i.attr.gid = gid;
            }
            i.attr.perm = perm::mode_after_chown(i.attr.kind, i.attr.perm);
        }
        if let Some(p) = set.perm {
            let mut check_attr = orig.clone();
            check_attr.gid = i.attr.gid;
            i.attr.perm = perm::chmod_mode(c, &check_attr, p)?;
        }
        if let Some(size) = set.size {
            match i.attr.kind {
                FileKind::File => {}
                FileKind::Dir => return Err(err(ErrorCode::IsDir, "cannot truncate a directory")),
                _ => return Err(FsError::invalid("truncate of a special file")),
            }
            // ftruncate on an open descriptor is allowed without write permission on the inode now.
            if !perm::allowed(c, &orig, W) && !self.is_open(orig.ino) {
                perm::check(c, &orig, W)?;
            }
            i.attr.size = size;
            if set.mtime.is_none() {
                i.attr.mtime = now;
            }
        }
        for (t, slot) in [(set.atime, &mut i.attr.atime), (set.mtime, &mut i.attr.mtime)] {
            match t {
                Some(TimeSet::At(ts)) => {
                    perm::check_times(c, &orig, true)?;
                    *slot = ts;
                }
                Some(TimeSet::Now) => {
                    perm::check_times(c, &orig, false)?;
                    *slot = now;
                }
                None => {}
            }
        }
        i.attr.ctime = now;
        Ok(())
    }

    /// Truncates (or extends) every object of `l` to match a file of `size` bytes, in parallel.
    async fn truncate_objects(&self, l: &Layout, size: u64) -> FsResult<()> {
        let calls =
            l.targets.iter().enumerate().map(|(k, t)| self.data.truncate(t.ds, t.object, l.object_size(k, size)));
        for r in futures::future::join_all(calls).await {
            r?;
        }
        Ok(())
    }

    async fn setattr(&self, c: &Caller, ino: Ino, set: SetAttrs) -> FsResult<MdsReply> {
        let cur = self.store.begin().inode(ino)?;
        // Validate before touching the data servers.
        self.apply_setattr(c, &mut cur.clone(), &set, Timestamp::now())?;
        if let (Some(size), Some(l)) = (set.size, &cur.layout) {
            self.truncate_objects(l, size).await?;
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(ino)?;
            self.apply_setattr(c, &mut i, &set, Timestamp::now())?;
            tx.put_inode(&i)?;
            self.commit(tx).map(|_| MdsReply::Attr(i.attr))
        };
        self.durable(r).await
    }

    fn check_open(c: &Caller, i: &Inode, flags: OpenFlags) -> FsResult<()> {
        let writes = flags.write || flags.truncate;
        match i.attr.kind {
            FileKind::Dir if writes => return Err(err(ErrorCode::IsDir, "cannot open a directory for writing")),
            FileKind::Symlink => return Err(err(ErrorCode::Loop, "cannot open a symlink")),
            _ => {}
        }
        let mut mask = 0;
        if flags.read {
            mask |= R;
        }
        if writes {
            mask |= W;
        }
        if mask != 0 {
            perm::check(c, &i.attr, mask)?;
        }
        Ok(())
    }

    async fn open(&self, c: &Caller, ino: Ino, flags: OpenFlags) -> FsResult<MdsReply> {
        let cur = self.store.begin().inode(ino)?;
        Self::check_open(c, &cur, flags)?;
        let truncate = flags.truncate && cur.attr.kind == FileKind::File;
        if truncate && cur.attr.size > 0 {
            if let Some(l) = &cur.layout {
                self.truncate_objects(l, 0).await?;
            }
        }
        let r = {
            let _g = self.lock();
            let mut tx = self.store.begin();
            let mut i = tx.inode(ino)?;
            Self::check_open(c, &i, flags)?;
            if truncate {
                let now = Timestamp::now();
                i.attr.size = 0;
                i.attr.mtime = now;
                i.attr.ctime = now;
                tx.put_inode(&i)?;
                self.commit(tx)?;
            }
            let handle = self.register_open(ino);
            Ok(MdsReply::Opened { attr: i.attr, layout: i.layout, handle, parent: None })
        };
        if truncate {
            self.durable(r).await
        } else {
            r
        }
    }

    /// Drops a handle and merges the size; also says whether anything was written to the store.
    fn close_sync(&self, ino: Ino, handle: u64, size: Option<u64>, wrote: bool) -> FsResult<(MdsReply, bool)> {
        let _g = self.lock();
        let had = {
            let mut opens = self.opens();
            let had = opens.get_mut(&ino).is_some_and(|h| h.remove(&handle));
            if opens.get(&ino).is_some_and(|h| h.is_empty()) {
                opens.remove(&ino);
            }
            had
        };
        let mut tx = self.store.begin();
        let Some(mut i) = tx.get_inode(ino)? else {
            return if had {
                Ok((MdsReply::Ok, false))
            } else {
                Err(err(ErrorCode::Stale, format!("inode {ino} is gone")))
            };
        };
        let mut changed = false;
        if i.attr.kind == FileKind::File {
            if let Some(s) = size {
                if s > i.attr.size {
                    i.attr.size = s;
                    changed = true;
                }
            }
            if wrote {
                let now = Timestamp::now();
                i.attr.mtime = now;
                i.attr.ctime = now;
                changed = true;
            }
        }
        if i.attr.nlink == 0 && !self.is_open(ino) {
            tx.remove_inode(&i)?;
            changed = true;
        } else if changed {
            tx.put_inode(&i)?;
        }
        if changed {
            self.commit(tx)?;
        }
        Ok((MdsReply::Ok, changed))
    }

    fn report_write_sync(&self, c: &Caller, ino: Ino, size: u64) -> FsResult<MdsReply> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        match i.attr.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(err(ErrorCode::IsDir, "write to a directory")),
            _ => return Err(FsError::invalid("write report for a special file")),
        }
        if !perm::allowed(c, &i.attr, W) && !self.is_open(ino) {
            perm::check(c, &i.attr, W)?;
        }
        let now = Timestamp::now();
        i.attr.size = i.attr.size.max(size);
        i.attr.mtime = now;
        i.attr.ctime = now;
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    // ---------------------------------------------------------------------------------------------
    // Directories, statfs

    fn readdir(&self, c: &Caller, ino: Ino, offset: u64, max: u32) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let d = rd.dir(ino)?;
        perm::check(c, &d.attr, R)?;
        let max = (max as usize).clamp(1, READDIR_MAX);
        let mut out = Vec::new();
        if offset == u64::MAX {
            return Ok(MdsReply::DirEntries(out));
        }
        let start = dirseq_key(ino, offset + 1);
        for kv in self.store.scan_from(T::Dirseq, &start, &ino.to_be_bytes()) {
            let (k, v) = kv?;
            let Ok(seq) = <[u8; 8]>::try_from(&k[8..]).map(u64::from_be_bytes) else { continue };
            let Ok(name) = std::str::from_utf8(&v) else { continue };
            // An entry removed or renamed since the scan started is skipped.
            match rd.dentry(ino, name)? {
                Some(de) if de.seq == seq => {
                    out.push(DirEntry { name: name.to_string(), ino: de.ino, kind: de.kind, next_offset: seq })
                }
                _ => continue,
            }
            if out.len() >= max {
                break;
            }
        }
        Ok(MdsReply::DirEntries(out))
    }

    fn statfs(&self) -> MdsReply {
        let (capacity, free) = self.stats.totals();
        let files = self.store.inode_count();
        MdsReply::StatFs(StatFs {
            block_size: STATFS_BLOCK as u32,
            blocks: capacity / STATFS_BLOCK,
            blocks_free: free / STATFS_BLOCK,
            blocks_avail: free / STATFS_BLOCK,
            files,
            files_free: FILES_FREE.saturating_sub(files),
            name_max: NAME_MAX as u32,
        })
    }

    // ---------------------------------------------------------------------------------------------
    // Layouts

    fn get_layout(&self, ino: Ino) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let i = rd.inode(ino)?;
        match (i.attr.kind, i.layout) {
            (FileKind::File, Some(l)) => Ok(MdsReply::Layout(l)),
            (FileKind::Dir, _) => match rd.dir_layout(ino)? {
                Some(s) => Ok(MdsReply::DirLayout(s)),
                None => Err(err(ErrorCode::NoData, format!("directory {ino} has no default layout"))),
            },
            _ => Err(err(ErrorCode::NoData, format!("inode {ino} has no layout"))),
        }
    }

    /// Sets a directory default, or re-lays out an empty file with fresh objects (EBUSY if it has data).
    fn apply_layout(&self, tx: &mut Txn<'_>, c: &Caller, i: &mut Inode, spec: Option<LayoutSpec>) -> FsResult<()> {
        perm::check(c, &i.attr, W)?;
        match i.attr.kind {
            FileKind::Dir => tx.set_dir_layout(i.attr.ino, spec)?,
            FileKind::File => {
                if i.attr.size > 0 {
                    return Err(err(ErrorCode::Busy, format!("inode {} already has data", i.attr.ino)));
                }
                let new = self.new_layout(spec.unwrap_or_default(), LayoutSpec::default())?;
                if let Some(old) = i.layout.replace(new) {
                    tx.queue_destroy(&old)?;
                }
            }
            _ => return Err(FsError::invalid(format!("inode {} cannot have a layout", i.attr.ino))),
        }
        i.attr.ctime = Timestamp::now();
        tx.put_inode(i)
    }

    fn set_layout_sync(&self, c: &Caller, ino: Ino, spec: LayoutSpec) -> FsResult<MdsReply> {
        spec.validate()?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        self.apply_layout(&mut tx, c, &mut i, Some(spec))?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    // ---------------------------------------------------------------------------------------------
    // Extended attributes

    fn get_xattr(&self, c: &Caller, ino: Ino, name: &str) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        let rd = self.store.begin();
        let i = rd.inode(ino)?;
        let nodata = || err(ErrorCode::NoData, format!("no attribute {name}"));
        match ns {
            XattrNs::Layout => {
                return match (i.attr.kind, &i.layout) {
                    (FileKind::File, Some(l)) => Ok(MdsReply::Xattr(layout_text(l).into_bytes())),
                    (FileKind::Dir, _) => match rd.dir_layout(ino)? {
                        Some(s) => Ok(MdsReply::Xattr(spec_text(&s).into_bytes())),
                        None => Err(nodata()),
                    },
                    _ => Err(nodata()),
                };
            }
            XattrNs::Trusted if c.uid != 0 => return Err(FsError::perm("trusted.* attributes need root")),
            XattrNs::User => {
                if !matches!(i.attr.kind, FileKind::File | FileKind::Dir) {
                    return Err(nodata());
                }
                perm::check(c, &i.attr, R)?;
            }
            _ => {}
        }
        rd.get(T::Xattrs, &xattr_key(ino, name))?.map(MdsReply::Xattr).ok_or_else(nodata)
    }

    /// Permission to change attribute `name` of `i`.
    fn check_xattr_write(c: &Caller, i: &Inode, ns: &XattrNs) -> FsResult<()> {
        match ns {
            XattrNs::Trusted | XattrNs::Security if c.uid != 0 => {
                Err(FsError::perm("trusted.* and security.* attributes need root"))
            }
            XattrNs::User => {
                if !matches!(i.attr.kind, FileKind::File | FileKind::Dir) {
                    return Err(FsError::perm("user.* attributes only on files and directories"));
                }
                perm::check(c, &i.attr, W)
            }
            _ => Ok(()),
        }
    }

    fn set_xattr_sync(&self, c: &Caller, ino: Ino, name: &str, value: &[u8], mode: XattrMode) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(err(ErrorCode::Range, format!("xattr value of {} bytes (max {XATTR_SIZE_MAX})", value.len())));
        }
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        if let XattrNs::Layout = ns {
            let spec = parse_spec(value)?;
            let spec = (spec != LayoutSpec::default() || i.attr.kind != FileKind::Dir).then_some(spec);
            self.apply_layout(&mut tx, c, &mut i, spec)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        Self::check_xattr_write(c, &i, &ns)?;
        let key = xattr_key(ino, name);
        let exists = tx.get(T::Xattrs, &key)?.is_some();
        match mode {
            XattrMode::Create if exists => return Err(FsError::exists(format!("attribute {name}"))),
            XattrMode::Replace if !exists => return Err(err(ErrorCode::NoData, format!("no attribute {name}"))),
            _ => {}
        }
        tx.put(T::Xattrs, &key, value.to_vec());
        i.attr.ctime = Timestamp::now();
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }

    fn list_xattr(&self, c: &Caller, ino: Ino) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        rd.inode(ino)?;
        let prefix = xattr_prefix(ino);
        let names = rd
            .scan(T::Xattrs, &prefix)?
            .into_keys()
            .filter_map(|k| String::from_utf8(k[prefix.len()..].to_vec()).ok())
            .filter(|n| c.uid == 0 || !n.starts_with("trusted."))
            .collect();
        Ok(MdsReply::XattrNames(names))
    }

    fn remove_xattr_sync(&self, c: &Caller, ino: Ino, name: &str) -> FsResult<MdsReply> {
        let ns = xattr_ns(name)?;
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut i = tx.inode(ino)?;
        if let XattrNs::Layout = ns {
            if i.attr.kind != FileKind::Dir {
                return Err(FsError::perm("a file's layout cannot be removed"));
            }
            if tx.dir_layout(ino)?.is_none() {
                return Err(err(ErrorCode::NoData, "no default layout"));
            }
            self.apply_layout(&mut tx, c, &mut i, None)?;
            self.commit(tx)?;
            return Ok(MdsReply::Ok);
        }
        Self::check_xattr_write(c, &i, &ns)?;
        let key = xattr_key(ino, name);
        if tx.get(T::Xattrs, &key)?.is_none() {
            return Err(err(ErrorCode::NoData, format!("no attribute {name}")));
        }
        tx.del(T::Xattrs, &key);
        i.attr.ctime = Timestamp::now();
        tx.put_inode(&i)?;
        self.commit(tx)?;
        Ok(MdsReply::Ok)
    }
}

#[cfg(test)]
#[path = "namespace_tests.rs"]
mod tests;
