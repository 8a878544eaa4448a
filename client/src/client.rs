//! The path-level client: resolves paths with the MDS, opens files, and the usual file-system calls.

use crate::cache::{Engine, HandleOptions};
use crate::data::{DataPlane, Route};
use crate::file::{File, OpenOptions};
use crate::forward::Forwarding;
use crate::mds_client::{LayoutReply, MdsClient, Opened};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::config::ClusterConfig;
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::{text, ExtentSpec, Layout, LayoutSpec};
use tessera_proto::msg::{
    DeclaredFile, DirEntry, DsStatus, IonCall, IonReply, IonStatus, PlacementStatus, RenameFlags, SchedulerSetting,
    SetAttrs, StatFs, MAX_DECLARE,
};
use tessera_proto::rpc::{client_endpoint, resolve, MdsPeers};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::types::{Attr, Caller, DsId, FileKind, Ino, Origin, NAME_MAX, PATH_MAX, ROOT_INO};

/// Entries fetched per `ReadDir` call.
const READDIR_PAGE: u32 = 1024;
/// Removals in flight during `remove_all`.
const REMOVE_PARALLEL: usize = 16;
/// Read size used by `read_file`.
const READ_FILE_CHUNK: u64 = 64 << 20;

struct Shared {
    cfg: ClusterConfig,
    /// The data servers and the inodes open through this client (the I/O engine, [`crate::cache`]).
    engine: Arc<Engine>,
    // Kept so the endpoint outlives every peer using it.
    _endpoint: quinn::Endpoint,
    /// Renews this client's session with the MDS while the client exists.
    _keep_alive: crate::mds_client::KeepAlive,
    /// PerSched: the job's grant; inactive (no delay at all) unless the job registered or follows one.
    periodic: Arc<crate::periodic::Periodic>,
}

/// A connection to a Tessera cluster. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    /// Carries this client's origin (job, client id, process) on every metadata call.
    mds: MdsClient,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("mds", &self.shared.cfg.mds0().addr)
            .field("job", &self.job())
            .field("client_id", &self.client_id())
            .finish()
    }
}

/// Lexically cleans a path into absolute form: `a//b/./c/../d` → `/a/b/d`. Relative paths are taken
/// from the root (the file system has no current directory).
pub fn clean_path(path: &str) -> FsResult<String> {
    if path.len() > PATH_MAX {
        return Err(FsError::new(ErrorCode::NameTooLong, format!("path longer than {PATH_MAX} bytes")));
    }
    if path.contains('\0') {
        return Err(FsError::invalid("path contains a NUL byte"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => {
                if c.len() > NAME_MAX {
                    return Err(FsError::new(ErrorCode::NameTooLong, format!("name '{c}' is too long")));
                }
                parts.push(c)
            }
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// Splits a path into its (clean) parent and last name; the root has no parent.
pub fn split_parent(path: &str) -> FsResult<(String, String)> {
    let clean = clean_path(path)?;
    match clean.rfind('/') {
        Some(i) if i + 1 < clean.len() => {
            let parent = if i == 0 { "/".to_string() } else { clean[..i].to_string() };
            Ok((parent, clean[i + 1..].to_string()))
        }
        _ => Err(FsError::new(ErrorCode::Busy, "the root directory cannot be created, removed or renamed")),
    }
}

/// Joins a directory path and a name.
pub fn join_path(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Client {
    /// Connects to the cluster of `cfg` with the identity of `cfg.tls` and checks the MDS answers.
    pub async fn connect(cfg: &ClusterConfig) -> FsResult<Client> {
        let id = NodeIdentity::load(&cfg.tls)
            .map_err(|e| FsError::invalid(format!("TLS identity: {}", tessera_proto::error::chain(&e))))?;
        let tuning = cfg.tuning();
        let mds_addr = resolve(&cfg.mds0().addr)?;
        let endpoint = client_endpoint(mds_addr.is_ipv6())?;
        let mds_peer = Arc::new(MdsPeers::to_hosts(&endpoint, &id, &cfg.mds_addrs(), tuning)?);
        let origin = Origin { job: crate::job::detect(), client: rand::random(), pid: std::process::id() };
        let fwd = Forwarding::new(&endpoint, &id, cfg, tuning, cfg.client_ion(origin.client)?)?;
        let mds = MdsClient::new(mds_peer, Caller::current_process(), origin).through(fwd.clone());
        let data =
            DataPlane::new(Route::new(&endpoint, &id, cfg, tuning, fwd.clone())?, cfg).with_lease_oracle(mds.clone());
        mds.ping().await.map_err(|e| {
            let via = fwd.as_ref().and_then(|f| f.current_name()).map(|n| format!(" through forwarding node {n}"));
            FsError::new(
                e.code,
                format!("metadata server {}{}: {}", cfg.mds0().addr, via.unwrap_or_default(), e.detail),
            )
        })?;
        let _keep_alive = crate::mds_client::spawn_keep_alive(mds.clone());
        let periodic: Arc<crate::periodic::Periodic> = Arc::default();
        periodic.set_lease_hint(cfg.persched.lease_ms);
        let engine = Arc::new(Engine::new(data));
        let shared = Arc::new(Shared { cfg: cfg.clone(), engine, _endpoint: endpoint, _keep_alive, periodic });
        Ok(Client { shared, mds })
    }

    /// The same connections, tagging metadata calls and I/O with another job id.
    pub fn with_job(self, job: impl Into<String>) -> Client {
        let o = self.mds.origin();
        let mds = self.mds.for_process(self.mds.caller().clone(), &crate::job::sanitize(&job.into()), o.pid);
        Client { mds, ..self }
    }

    /// The same connections, sending other credentials to the MDS.
    pub fn with_caller(self, caller: Caller) -> Client {
        let mds = self.mds.with_caller(caller);
        Client { mds, ..self }
    }

    /// The same connections, calling the MDS through `mds` (another caller, job or process).
    pub fn with_mds(self, mds: MdsClient) -> Client {
        Client { mds, ..self }
    }

    pub fn job(&self) -> &str {
        &self.mds.origin().job
    }

    /// Random id of this client instance, carried in every data request.
    pub fn client_id(&self) -> u64 {
        self.mds.origin().client
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.shared.cfg
    }

    /// Ino-level MDS calls.
    pub fn mds(&self) -> &MdsClient {
        &self.mds
    }

    /// The data servers' connections.
    pub fn data(&self) -> &DataPlane {
        self.shared.engine.data()
    }

    /// The I/O engine: the data servers and the inodes open through this client (and its clones).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// PerSched state of this client (the job's grant, if it follows a pattern).
    pub fn periodic(&self) -> &Arc<crate::periodic::Periodic> {
        &self.shared.periodic
    }

    /// PerSched: registers this job's periodic profile (β nodes, compute, volume per instance) and from now
    /// on delays this client's reads and writes into the job's intervals, paced to the granted bandwidth.
    pub async fn periodic_register(
        &self,
        profile: tessera_proto::msg::PeriodicProfile,
    ) -> FsResult<tessera_proto::msg::PeriodicGrant> {
        self.shared.periodic.register(&self.mds, profile).await
    }

    /// PerSched: follows the pattern of this job registered elsewhere (e.g. `tessera job periodic`).
    pub fn periodic_follow(&self) {
        self.shared.periodic.follow(self.mds.clone());
    }

    /// PerSched: this job stops being periodic.
    pub async fn periodic_leave(&self) -> FsResult<()> {
        self.shared.periodic.leave(&self.mds).await
    }

    /// MDS round-trip time.
    pub async fn ping(&self) -> FsResult<Duration> {
        self.mds.ping().await
    }

    /// Round-trip time to data server `ds`.
    pub async fn ping_ds(&self, ds: DsId) -> FsResult<Duration> {
        self.data().ping(ds).await
    }

    /// Data server ids of the configuration.
    pub fn ds_ids(&self) -> Vec<DsId> {
        self.data().ids()
    }

    async fn resolve(&self, path: &str, follow: bool) -> FsResult<(Attr, Option<Layout>)> {
        self.mds.lookup_path(&clean_path(path)?, follow).await
    }

    /// The parent directory's inode and the last name of `path`.
    async fn parent_of(&self, path: &str) -> FsResult<(Ino, String)> {
        let (parent, name) = split_parent(path)?;
        let (attr, _) = self.mds.lookup_path(&parent, true).await?;
        if attr.kind != FileKind::Dir {
            return Err(FsError::new(ErrorCode::NotDir, format!("{parent} is not a directory")));
        }
        Ok((attr.ino, name))
    }

    /// Attributes, following a final symlink.
    pub async fn stat(&self, path: &str) -> FsResult<Attr> {
        Ok(self.resolve(path, true).await?.0)
    }

    /// Attributes of the entry itself (a symlink is not followed).
    pub async fn lstat(&self, path: &str) -> FsResult<Attr> {
        Ok(self.resolve(path, false).await?.0)
    }

    pub async fn mkdir(&self, path: &str, perm: u32) -> FsResult<Attr> {
        let (parent, name) = self.parent_of(path).await?;
        self.mds.mkdir(parent, &name, (perm & 0o7777, 0)).await
    }

    /// `mkdir -p`: creates every missing directory of `path`.
    pub async fn mkdir_all(&self, path: &str, perm: u32) -> FsResult<()> {
        let clean = clean_path(path)?;
        let mut ino = ROOT_INO;
        let mut so_far = String::new();
        for name in clean.split('/').filter(|c| !c.is_empty()) {
            so_far.push('/');
            so_far.push_str(name);
            let attr = match self.mds.lookup(ino, name).await {
                Ok((a, _)) => a,
                Err(e) if e.code == ErrorCode::NotFound => match self.mds.mkdir(ino, name, (perm & 0o7777, 0)).await {
                    Ok(a) => a,
                    // Someone else created it meanwhile.
                    Err(e) if e.code == ErrorCode::Exists => self.mds.lookup(ino, name).await?.0,
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(e),
            };
            let attr = if attr.kind == FileKind::Symlink { self.mds.lookup_path(&so_far, true).await?.0 } else { attr };
            if attr.kind != FileKind::Dir {
                return Err(FsError::new(ErrorCode::NotDir, format!("{so_far} exists and is not a directory")));
            }
            ino = attr.ino;
        }
        Ok(())
    }

    /// Creates a new file (O_CREAT|O_EXCL|O_RDWR), optionally with its own layout.
    pub async fn create(&self, path: &str, perm: u32, layout: Option<LayoutSpec>) -> FsResult<File> {
        let opts = OpenOptions { read: true, write: true, create: true, exclusive: true, perm, ..Default::default() };
        self.create_with(path, opts, layout).await
    }

    /// Creates a new file with its own layout (or the directory's default) and opens it as `opts` say
    /// (O_CREAT is implied; O_EXCL as `opts.exclusive`: without it an existing file is opened, and keeps
    /// its layout).
    pub async fn create_with(&self, path: &str, opts: OpenOptions, layout: Option<LayoutSpec>) -> FsResult<File> {
        if let Some(spec) = &layout {
            spec.validate()?;
        }
        let (parent, name) = self.parent_of(path).await?;
        let flags = opts.open_flags();
        let opened =
            self.mds.create_open(parent, &name, (opts.create_perm(), 0), opts.exclusive, layout, flags).await?;
        self.file_from(opened, opts).await
    }

    /// Opens (and with `create`, creates) a file; fetches fresh attributes and layout (close-to-open).
    /// A create and its open are one MDS round trip.
    pub async fn open(&self, path: &str, opts: OpenOptions) -> FsResult<File> {
        let flags = opts.open_flags();
        let create = |exclusive: bool| async move {
            let (parent, name) = self.parent_of(path).await?;
            // Not exclusive: if another client created it meanwhile, the MDS opens that file.
            self.mds.create_open(parent, &name, (opts.create_perm(), 0), exclusive, None, flags).await
        };
        let opened = if opts.create_exclusive() {
            create(true).await?
        } else if opts.create {
            match self.resolve(path, true).await {
                Ok((attr, _)) => self.mds.open(attr.ino, flags).await?,
                Err(e) if e.code == ErrorCode::NotFound => create(false).await?,
                Err(e) => return Err(e),
            }
        } else {
            self.mds.open(self.resolve(path, true).await?.0.ino, flags).await?
        };
        self.file_from(opened, opts).await
    }

    /// Opens an inode directly (for the FUSE layer); `create`/`exclusive`/`perm` are ignored.
    pub async fn open_ino(&self, ino: Ino, opts: OpenOptions) -> FsResult<File> {
        let flags = opts.open_flags();
        let opened = self.mds.open(ino, flags).await?;
        self.file_from(opened, opts).await
    }

    /// The open file for a handle the MDS granted (released again if it is not a regular file).
    async fn file_from(&self, opened: Opened, opts: OpenOptions) -> FsResult<File> {
        let (attr, flags) = (opened.attr.clone(), opts.open_flags());
        let how = HandleOptions {
            flags,
            write_behind: opts.write_behind,
            read_ahead: opts.read_ahead,
            periodic: self.shared.periodic.clone(),
            detect_periodic: self.shared.cfg.persched.detect,
        };
        let handle = self.shared.engine.open(&self.mds, opened, how).await?;
        Ok(File::new(handle, attr, flags))
    }

    pub async fn unlink(&self, path: &str) -> FsResult<()> {
        let (parent, name) = self.parent_of(path).await?;
        self.mds.unlink(parent, &name).await.map(drop)
    }

    pub async fn rmdir(&self, path: &str) -> FsResult<()> {
        let (parent, name) = self.parent_of(path).await?;
        self.mds.rmdir(parent, &name).await.map(drop)
    }

    /// `rm -rf`: removes `path` and everything below it; a missing path is not an error.
    pub async fn remove_all(&self, path: &str) -> FsResult<()> {
        let (parent, name) = self.parent_of(path).await.or_else(|e| match e.code {
            ErrorCode::NotFound => Ok((0, String::new())),
            _ => Err(e),
        })?;
        if parent == 0 {
            return Ok(());
        }
        let attr = match self.mds.lookup(parent, &name).await {
            Ok((a, _)) => a,
            Err(e) if e.code == ErrorCode::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        self.remove_entry(parent, name, attr.kind, attr.ino).await
    }

    fn remove_entry(&self, parent: Ino, name: String, kind: FileKind, ino: Ino) -> BoxFuture<'_, FsResult<()>> {
        async move {
            let res = if kind == FileKind::Dir {
                let entries = self.readdir_ino(ino).await?;
                let results: Vec<FsResult<()>> = futures::stream::iter(entries)
                    .map(|e| self.remove_entry(ino, e.name, e.kind, e.ino))
                    .buffer_unordered(REMOVE_PARALLEL)
                    .collect()
                    .await;
                results.into_iter().collect::<FsResult<Vec<()>>>()?;
                self.mds.rmdir(parent, &name).await.map(drop)
            } else {
                self.mds.unlink(parent, &name).await.map(drop)
            };
            match res {
                Err(e) if e.code == ErrorCode::NotFound => Ok(()),
                r => r,
            }
        }
        .boxed()
    }

    pub async fn rename(&self, from: &str, to: &str) -> FsResult<()> {
        self.rename_with(from, to, RenameFlags::default()).await
    }

    pub async fn rename_with(&self, from: &str, to: &str, flags: RenameFlags) -> FsResult<()> {
        let (p1, n1) = self.parent_of(from).await?;
        let (p2, n2) = self.parent_of(to).await?;
        self.mds.rename(p1, &n1, p2, &n2, flags).await
    }

    /// Hard link `new` to `existing` (a symlink itself is linked, as on Linux).
    pub async fn link(&self, existing: &str, new: &str) -> FsResult<Attr> {
        let (attr, _) = self.resolve(existing, false).await?;
        let (parent, name) = self.parent_of(new).await?;
        self.mds.link(attr.ino, parent, &name).await
    }

    /// Creates `link` pointing at `target` (stored as given).
    pub async fn symlink(&self, target: &str, link: &str) -> FsResult<Attr> {
        if target.is_empty() || target.len() > PATH_MAX {
            return Err(FsError::invalid("symlink target must have 1 to 4096 bytes"));
        }
        let (parent, name) = self.parent_of(link).await?;
        self.mds.symlink(parent, &name, target).await
    }

    pub async fn readlink(&self, path: &str) -> FsResult<String> {
        let (attr, _) = self.resolve(path, false).await?;
        if attr.kind != FileKind::Symlink {
            return Err(FsError::invalid(format!("{path} is not a symbolic link")));
        }
        self.mds.readlink(attr.ino).await
    }

    /// All entries of a directory (without `.` and `..`).
    pub async fn readdir(&self, path: &str) -> FsResult<Vec<DirEntry>> {
        let (attr, _) = self.resolve(path, true).await?;
        if attr.kind != FileKind::Dir {
            return Err(FsError::new(ErrorCode::NotDir, format!("{path} is not a directory")));
        }
        self.readdir_ino(attr.ino).await
    }

    /// All entries of directory `ino`, paging through `ReadDir`.
    pub async fn readdir_ino(&self, ino: Ino) -> FsResult<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut offset = 0;
        loop {
            let page = self.mds.readdir(ino, offset, READDIR_PAGE).await?;
            let Some(last) = page.last() else { break };
            let next = last.next_offset;
            out.extend(page);
            if next == offset {
                // A cookie that does not advance would loop forever.
                return Err(FsError::protocol("MDS readdir cookie did not advance"));
            }
            offset = next;
        }
        Ok(out)
    }

    pub async fn setattr(&self, path: &str, set: SetAttrs) -> FsResult<Attr> {
        let (attr, _) = self.resolve(path, true).await?;
        self.mds.setattr(attr.ino, set).await
    }

    pub async fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        self.setattr(path, SetAttrs { size: Some(size), ..Default::default() }).await.map(|_| ())
    }

    /// A directory's default layout, or (an empty file's) layout.
    pub async fn set_layout(&self, path: &str, spec: LayoutSpec) -> FsResult<()> {
        spec.validate()?;
        let (attr, _) = self.resolve(path, true).await?;
        self.mds.set_layout(attr.ino, spec).await
    }

    /// Sets a composite (progressive) layout (`setstripe -E ...`): a directory's default for new files,
    /// or an empty file's own layout.
    pub async fn set_composite_layout(&self, path: &str, extents: Vec<ExtentSpec>) -> FsResult<()> {
        tessera_proto::layout::validate_extents(&extents)?;
        let (attr, _) = self.resolve(path, true).await?;
        self.mds.set_composite_layout(attr.ino, extents).await
    }

    /// A directory's composite default layout, if it has one.
    pub async fn get_dir_composite(&self, path: &str) -> FsResult<Option<Vec<ExtentSpec>>> {
        let (attr, _) = self.resolve(path, true).await?;
        match self.mds.get_layout(attr.ino).await {
            Ok(LayoutReply::DirComposite(e)) => Ok(Some(e)),
            Ok(_) => Ok(None),
            Err(e) if matches!(e.code, ErrorCode::NoData | ErrorCode::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A regular file's layout.
    pub async fn get_layout(&self, path: &str) -> FsResult<Layout> {
        let (attr, layout) = self.resolve(path, true).await?;
        if attr.kind == FileKind::Dir {
            return Err(FsError::new(
                ErrorCode::IsDir,
                format!("{path} is a directory (it has a default layout only)"),
            ));
        }
        if let Some(l) = layout {
            return Ok(l);
        }
        match self.mds.get_layout(attr.ino).await? {
            LayoutReply::File(l) => Ok(l),
            LayoutReply::Dir(_) | LayoutReply::DirComposite(_) => {
                Err(FsError::new(ErrorCode::IsDir, format!("{path} is a directory")))
            }
        }
    }

    /// A directory's default layout for new files; `None` if it has none of its own.
    pub async fn get_dir_layout(&self, path: &str) -> FsResult<Option<LayoutSpec>> {
        let (attr, _) = self.resolve(path, true).await?;
        if attr.kind != FileKind::Dir {
            return Err(FsError::new(ErrorCode::NotDir, format!("{path} is not a directory")));
        }
        let none_if_empty = |s: LayoutSpec| (s != LayoutSpec::default()).then_some(s);
        match self.mds.get_layout(attr.ino).await {
            Ok(LayoutReply::Dir(spec)) => Ok(none_if_empty(spec)),
            Ok(LayoutReply::DirComposite(_)) => Ok(None),
            Ok(LayoutReply::File(_)) => Err(FsError::protocol("MDS returned a file layout for a directory")),
            Err(e) if matches!(e.code, ErrorCode::NoData | ErrorCode::NotFound) => Ok(None),
            Err(e) if matches!(e.code, ErrorCode::Invalid | ErrorCode::IsDir | ErrorCode::Unsupported) => {
                match self.mds.getxattr(attr.ino, text::XATTR_NAME).await {
                    Ok(v) => Ok(text::parse_spec_lenient(&String::from_utf8_lossy(&v)).and_then(none_if_empty)),
                    Err(x) if matches!(x.code, ErrorCode::NoData | ErrorCode::NotFound) => Ok(None),
                    Err(_) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Forwarding node `k`'s status.
    pub async fn ion_status(&self, k: usize) -> FsResult<IonStatus> {
        match self.ion_call(k, &IonCall::Status).await? {
            IonReply::Status(s) => Ok(s),
            r => Err(FsError::protocol(format!("forwarding node answered Status with {r:?}"))),
        }
    }

    /// Switches forwarding node `k`'s scheduler (the admin certificate or a root caller); returns its
    /// status after the switch.
    pub async fn set_ion_scheduler(&self, k: usize, setting: SchedulerSetting) -> FsResult<IonStatus> {
        let call = IonCall::SetScheduler { caller: self.mds.caller().clone(), setting };
        match self.ion_call(k, &call).await? {
            IonReply::Status(s) => Ok(s),
            r => Err(FsError::protocol(format!("forwarding node answered SetScheduler with {r:?}"))),
        }
    }

    async fn ion_call(&self, k: usize, call: &IonCall) -> FsResult<IonReply> {
        let fwd = self
            .data()
            .route()
            .forwarding()
            .ok_or_else(|| FsError::invalid("the cluster configuration lists no forwarding nodes ([[ion]])"))?;
        fwd.ion_call(k, call).await
    }

    pub async fn statfs(&self) -> FsResult<StatFs> {
        self.mds.statfs().await
    }

    /// Every data server as the MDS sees it.
    pub async fn cluster_status(&self) -> FsResult<Vec<DsStatus>> {
        self.mds.cluster_status().await
    }

    /// Declares the files a job will create, `(path, expected size, stripe count)` (count `None`: the
    /// directory's default): the MDS places them together as one batch now and uses that placement when
    /// each create arrives (`tessera declare`). Sent in requests of at most [`MAX_DECLARE`] files; returns
    /// how many were declared.
    pub async fn declare(&self, files: &[(String, u64, Option<u32>)]) -> FsResult<u32> {
        let mut parents: std::collections::HashMap<String, Ino> = Default::default();
        let mut list = Vec::with_capacity(files.len());
        for (path, expected_size, stripe_count) in files {
            let (parent, name) = split_parent(path)?;
            let ino = match parents.get(&parent) {
                Some(ino) => *ino,
                None => {
                    let (ino, _) = self.parent_of(path).await?;
                    parents.insert(parent, ino);
                    ino
                }
            };
            list.push(DeclaredFile { parent: ino, name, expected_size: *expected_size, stripe_count: *stripe_count });
        }
        let mut count = 0;
        for chunk in list.chunks(MAX_DECLARE) {
            count += self.mds.declare(chunk.to_vec()).await?;
        }
        Ok(count)
    }

    /// The placement policy and its last solve.
    pub async fn placement_status(&self) -> FsResult<PlacementStatus> {
        self.mds.placement_status().await
    }

    /// The whole content of a file.
    pub async fn read_file(&self, path: &str) -> FsResult<Vec<u8>> {
        let file = self.open(path, OpenOptions::read_only()).await?;
        let res: FsResult<Vec<u8>> = async {
            let mut out = Vec::with_capacity(file.attr().size.min(1 << 30) as usize);
            loop {
                let chunk = file.read_at(out.len() as u64, READ_FILE_CHUNK).await?;
                out.extend_from_slice(&chunk);
                if (chunk.len() as u64) < READ_FILE_CHUNK {
                    return Ok(out);
                }
            }
        }
        .await;
        let closed = file.close().await;
        let out = res?;
        closed?;
        Ok(out)
    }

    /// Creates or truncates `path` and writes `data` into it.
    pub async fn write_file(&self, path: &str, data: &[u8]) -> FsResult<()> {
        let file = self.open(path, OpenOptions::write_truncate()).await?;
        let written = file.write_at(0, Bytes::copy_from_slice(data)).await;
        let closed = file.close().await;
        written?;
        closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned() {
        assert_eq!(clean_path("").unwrap(), "/");
        assert_eq!(clean_path("/").unwrap(), "/");
        assert_eq!(clean_path("a//b/./c/../d/").unwrap(), "/a/b/d");
        assert_eq!(clean_path("/../x").unwrap(), "/x");
        assert!(clean_path(&"x".repeat(300)).is_err());
        assert_eq!(split_parent("/a/b").unwrap(), ("/a".to_string(), "b".to_string()));
        assert_eq!(split_parent("top").unwrap(), ("/".to_string(), "top".to_string()));
        assert!(split_parent("/").is_err());
        assert!(split_parent("/a/..").is_err());
        assert_eq!(join_path("/", "x"), "/x");
        assert_eq!(join_path("/a", "x"), "/a/x");
    }
}
