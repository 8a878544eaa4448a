//! Typed wrapper over the MDS connection. Every method is one `MdsRequest` at inode level and checks the
//! reply's shape; path-level convenience lives in [`crate::client`].

use crate::forward::Forwarding;
pub use crate::session::LockWait;
use crate::session::Session;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::layout::{ExtentSpec, Layout, LayoutSpec};
use tessera_proto::locks::{HeldLock, LockKind, LockSpec, LockType};
use tessera_proto::msg::{
    BatchResult, DeclaredFile, DirEntry, DirLease, DirOp, DsReport, DsStatus, FsckReport, HeldHandle, MdsCall,
    MdsReply, MdsRequest, OpenFlags, OrchestratorMode, OrchestratorStatus, PeriodicGrant, PeriodicProfile,
    PeriodicReport, PlacementStatus, RenameFlags, SetAttrs, StatFs, XattrMode, LOCK_WAIT_SLICE_MS, MAX_REOPEN,
};
use tessera_proto::rpc::MdsPeers;
use tessera_proto::types::{Attr, Caller, DsId, FileKind, Ino, Origin};
use tessera_proto::PROTOCOL_VERSION;

pub use tessera_proto::requests::RESTART_PATIENCE;

/// Result of `Open`: fresh attributes, the layout (regular files) and the handle to close.
#[derive(Clone, Debug)]
pub struct Opened {
    pub attr: Attr,
    pub layout: Option<Layout>,
    pub handle: u64,
    /// After a create: the parent directory's new attributes.
    pub parent: Option<Attr>,
}

/// What `GetLayout` returned: a file's layout or a directory's default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutReply {
    File(Layout),
    Dir(LayoutSpec),
    /// A directory's composite default (`setstripe -E ...`).
    DirComposite(Vec<ExtentSpec>),
}

/// The MDS connection plus the credentials and origin (job, client, process) sent with every call.
/// Cheap to clone. With forwarding nodes, calls go through the client's ION (and straight to the MDS
/// when the client has failed over to direct access).
#[derive(Clone)]
pub struct MdsClient {
    peer: Arc<MdsPeers>,
    fwd: Option<Arc<Forwarding>>,
    caller: Caller,
    origin: Arc<Origin>,
    session: Arc<Session>,
}

fn unexpected(what: &str, r: MdsReply) -> FsError {
    FsError::protocol(format!("MDS answered {what} with {r:?}"))
}

/// `Attr` or `Entry` replies both carry attributes.
fn attr_of(what: &str, r: MdsReply) -> FsResult<Attr> {
    match r {
        MdsReply::Attr(a) => Ok(a),
        MdsReply::Entry { attr, .. } => Ok(attr),
        MdsReply::Opened { attr, .. } => Ok(attr),
        r => Err(unexpected(what, r)),
    }
}

fn entry_of(what: &str, r: MdsReply) -> FsResult<(Attr, Option<Layout>)> {
    match r {
        MdsReply::Entry { attr, layout } => Ok((attr, layout)),
        MdsReply::Attr(a) => Ok((a, None)),
        r => Err(unexpected(what, r)),
    }
}

fn ok_of(what: &str, r: MdsReply) -> FsResult<()> {
    match r {
        MdsReply::Ok => Ok(()),
        // Some mutations may answer with the changed attributes; that is still success.
        MdsReply::Attr(_) | MdsReply::Entry { .. } => Ok(()),
        r => Err(unexpected(what, r)),
    }
}

impl MdsClient {
    pub fn new(peer: Arc<MdsPeers>, caller: Caller, origin: Origin) -> MdsClient {
        MdsClient { peer, fwd: None, caller, origin: Arc::new(origin), session: Arc::default() }
    }

    /// The same client, its calls going through `fwd`'s forwarding node.
    pub fn through(self, fwd: Option<Arc<Forwarding>>) -> MdsClient {
        MdsClient { fwd, ..self }
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// Who the calls are made for (job, client instance, process).
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The same connection with other credentials.
    pub fn with_caller(&self, caller: Caller) -> MdsClient {
        MdsClient { caller, ..self.clone() }
    }

    /// The same connection, calling for another process: its credentials, job and process id (a mount
    /// calls for the program that made each request).
    pub fn for_process(&self, caller: Caller, job: &str, pid: u32) -> MdsClient {
        if self.origin.job == job && self.origin.pid == pid {
            return self.with_caller(caller);
        }
        let origin = Origin { job: job.to_string(), client: self.origin.client, pid };
        MdsClient { caller, origin: Arc::new(origin), ..self.clone() }
    }

    /// This client's session with the MDS (shared by every clone).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Renews this client's session; returns the MDS's eviction timeout. If the MDS evicted this
    /// client meanwhile, handles opened before now fail (see [`Session`]).
    ///
    /// When a new start of the service answers (a restart, a failover), the handles this client holds
    /// are reasserted to it (`Reopen`): the files they keep alive after an unlink then stay until their
    /// last close, as before.
    pub async fn keep_alive(&self) -> FsResult<Duration> {
        match self.call(MdsRequest::KeepAlive).await? {
            MdsReply::Session { evicted, timeout_ms, boot } => {
                let timeout = Duration::from_millis(timeout_ms);
                let again = self.session.renewed(timeout, evicted, boot);
                let before = again.before;
                let mut r = Ok(());
                if !again.handles.is_empty() {
                    r = self.reopen(again.handles).await.map(drop);
                }
                if r.is_ok() && !again.locks.is_empty() {
                    r = self.reclaim_locks(again.locks).await;
                }
                if let Err(e) = r {
                    // Tried again at the next keep-alive (reasserting twice is harmless).
                    self.session.reassert_again(before);
                    return Err(e);
                }
                Ok(timeout)
            }
            r => Err(unexpected("KeepAlive", r)),
        }
    }

    /// Reasserts `held` (see [`MdsClient::keep_alive`]), [`MAX_REOPEN`] at a time; returns the handles
    /// whose files are gone.
    pub async fn reopen(&self, held: Vec<HeldHandle>) -> FsResult<Vec<u64>> {
        let mut gone = Vec::new();
        for chunk in held.chunks(MAX_REOPEN) {
            match self.call(MdsRequest::Reopen { handles: chunk.to_vec() }).await? {
                MdsReply::Reopened { stale } => gone.extend(stale),
                r => return Err(unexpected("Reopen", r)),
            }
        }
        tracing::info!(
            handles = held.len(),
            gone = gone.len(),
            "a new start of the metadata service: open handles reasserted"
        );
        Ok(gone)
    }

    /// Places, changes or removes `owner`'s lock `spec` on `ino` at the MDS's lock manager and records
    /// it in this client's session. With `wait`, a request blocked by another owner's lock waits until it
    /// is free (asking again after each wait slice) or until `wait` is cancelled: EINTR; without, EAGAIN.
    /// EDEADLK when waiting would deadlock.
    pub async fn lock(&self, ino: Ino, owner: u64, spec: LockSpec, wait: Option<&LockWait>) -> FsResult<()> {
        // Each request waits at most half the call timeout at the server.
        let slice = (self.peer.leader().call_timeout().as_millis() / 2).clamp(1, LOCK_WAIT_SLICE_MS.into()) as u32;
        loop {
            let req = MdsRequest::Lock {
                ino,
                owner,
                spec,
                wait_ms: if wait.is_some() { slice } else { 0 },
                wait_id: wait.map_or(0, |w| w.id),
                reclaim: false,
            };
            let r = self.call(req).await;
            if spec.kind == LockKind::Flock
                && spec.typ != LockType::Unlock
                && !matches!(r, Ok(MdsReply::Lock { granted: true }))
            {
                // A flock request that was not granted has dropped a lock the owner held (flock(2)).
                self.session.record_lock(ino, owner, &LockSpec::flock(LockType::Unlock));
            }
            match r? {
                MdsReply::Lock { granted: true } => {
                    self.session.record_lock(ino, owner, &spec);
                    return Ok(());
                }
                MdsReply::Lock { granted: false } => match wait {
                    Some(w) if w.cancelled() => {
                        return Err(FsError::new(ErrorCode::Interrupted, "interrupted while waiting for a lock"))
                    }
                    Some(_) => continue,
                    None => return Err(FsError::new(ErrorCode::WouldBlock, "the lock is held by another owner")),
                },
                r => return Err(unexpected("Lock", r)),
            }
        }
    }

    /// `F_GETLK`: the lock of another owner (on any client) that keeps `owner` from placing `spec`.
    pub async fn test_lock(&self, ino: Ino, owner: u64, spec: LockSpec) -> FsResult<Option<HeldLock>> {
        match self.call(MdsRequest::TestLock { ino, owner, spec }).await? {
            MdsReply::LockTest(l) => Ok(l),
            r => Err(unexpected("TestLock", r)),
        }
    }

    /// Ends `owner`'s wait `wait` (its caller got a signal): the waiting [`MdsClient::lock`] returns EINTR
    /// unless the lock was granted first.
    pub async fn cancel_lock(&self, owner: u64, wait: &LockWait) -> FsResult<()> {
        wait.cancel();
        match self.call(MdsRequest::CancelLock { owner, wait_id: wait.id }).await? {
            MdsReply::Ok => Ok(()),
            r => Err(unexpected("CancelLock", r)),
        }
    }

    /// Reasserts the locks a new start of the service must learn (see [`MdsClient::keep_alive`]); a lock
    /// it refuses (granted to another owner meanwhile, after this client's grace) is lost. Any other error
    /// ends the round, to be tried again.
    async fn reclaim_locks(&self, locks: Vec<(Ino, HeldLock)>) -> FsResult<()> {
        let (mut kept, mut lost) = (0usize, 0usize);
        for (ino, l) in locks {
            let typ = if l.write { LockType::Write } else { LockType::Read };
            let spec = LockSpec { kind: l.kind, typ, start: l.start, end: l.end, pid: l.pid };
            let owner = l.owner.owner;
            let req = MdsRequest::Lock { ino, owner, spec, wait_ms: 0, wait_id: 0, reclaim: true };
            match self.call(req).await {
                Ok(MdsReply::Lock { granted: true }) => {
                    kept += 1;
                    if !self.session.holds_lock(ino, owner, l.kind) {
                        // Released here while it was being reasserted: released there too.
                        let unlock = LockSpec { typ: LockType::Unlock, ..spec };
                        let req = MdsRequest::Lock { ino, owner, spec: unlock, wait_ms: 0, wait_id: 0, reclaim: false };
                        self.call(req).await?;
                    }
                }
                Err(e) if e.code == ErrorCode::WouldBlock => {
                    lost += 1;
                    tracing::warn!(ino, "a file lock could not be reasserted and is lost: {e}");
                    self.session.record_lock(ino, owner, &LockSpec { typ: LockType::Unlock, ..spec });
                }
                Err(e) => return Err(e),
                Ok(r) => return Err(unexpected("Lock", r)),
            }
        }
        tracing::info!(kept, lost, "a new start of the metadata service: file locks reasserted");
        Ok(())
    }

    /// The metadata replicas (one unless replicated).
    pub fn peers(&self) -> &Arc<MdsPeers> {
        &self.peer
    }

    /// Sends any request with this client's credentials. Requests that may safely be sent twice are
    /// retried through an MDS restart (for up to [`RESTART_PATIENCE`]); namespace changes are not,
    /// since a lost reply would turn a success into EEXIST/ENOENT on the retry.
    ///
    /// The MDS refuses the first request of a client it evicted with [`ErrorCode::Evicted`], without
    /// applying it: the session then fails the handles opened before, and the request is sent once
    /// more, so a new open (or anything else not tied to an old handle) works at once.
    pub async fn call(&self, req: MdsRequest) -> FsResult<MdsReply> {
        let seq = if req.properties().replies_cached() { self.session.next_seq() } else { 0 };
        let call = MdsCall { caller: self.caller.clone(), origin: (*self.origin).clone(), req, seq };
        let retry = call.resendable();
        let send = || async {
            if let Some(fwd) = &self.fwd {
                if let Some(reply) = fwd.mds_call(&call, retry).await? {
                    return Ok(reply);
                }
            }
            self.peer.send(&call).await
        };
        let mut r = send().await;
        if matches!(&r, Err(e) if e.code == ErrorCode::Evicted) {
            self.session.evicted();
            r = send().await;
        }
        match &r {
            Ok(_) => self.session.heard(),
            Err(e) if e.code == ErrorCode::Evicted => self.session.evicted(),
            Err(_) => {}
        }
        r
    }

    /// Liveness and protocol check; returns the round-trip time.
    pub async fn ping(&self) -> FsResult<Duration> {
        let t = Instant::now();
        match self.call(MdsRequest::Ping).await? {
            MdsReply::Pong { version } if version == PROTOCOL_VERSION => Ok(t.elapsed()),
            MdsReply::Pong { version } => Err(FsError::protocol(format!(
                "MDS {} speaks protocol version {version}, this client {PROTOCOL_VERSION}",
                self.peer.leader().addr()
            ))),
            r => Err(unexpected("Ping", r)),
        }
    }

    pub async fn lookup(&self, parent: Ino, name: &str) -> FsResult<(Attr, Option<Layout>)> {
        entry_of("Lookup", self.call(MdsRequest::Lookup { parent, name: name.to_string() }).await?)
    }

    /// Resolves an absolute path; `follow`: also follow a symlink in the last component.
    pub async fn lookup_path(&self, path: &str, follow: bool) -> FsResult<(Attr, Option<Layout>)> {
        entry_of("LookupPath", self.call(MdsRequest::LookupPath { path: path.to_string(), follow }).await?)
    }

    pub async fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        attr_of("GetAttr", self.call(MdsRequest::GetAttr { ino }).await?)
    }

    pub async fn setattr(&self, ino: Ino, set: SetAttrs) -> FsResult<Attr> {
        match self.call(MdsRequest::SetAttr { ino, set }).await? {
            // An Ok without attributes: fetch them so callers always get the new state.
            MdsReply::Ok => self.getattr(ino).await,
            r => attr_of("SetAttr", r),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn create(
        &self,
        parent: Ino,
        name: &str,
        kind: FileKind,
        (perm, umask): (u32, u32),
        rdev: u32,
        exclusive: bool,
        layout: Option<LayoutSpec>,
    ) -> FsResult<(Attr, Option<Layout>)> {
        let req = MdsRequest::Create { parent, name: name.to_string(), kind, perm, umask, rdev, exclusive, layout };
        entry_of("Create", self.call(req).await?)
    }

    /// open(2) with O_CREAT in one round trip: creates `name` and opens it, or (not `exclusive`)
    /// opens the regular file already there with `flags`. `perm` and the caller's `umask` (see
    /// [`MdsRequest::Create`]).
    pub async fn create_open(
        &self,
        parent: Ino,
        name: &str,
        (perm, umask): (u32, u32),
        exclusive: bool,
        layout: Option<LayoutSpec>,
        flags: OpenFlags,
    ) -> FsResult<Opened> {
        let req = MdsRequest::CreateOpen { parent, name: name.to_string(), perm, umask, exclusive, layout, flags };
        self.opened("CreateOpen", self.call(req).await?)
    }

    /// An `Opened` reply, its handle noted as held.
    fn opened(&self, what: &str, r: MdsReply) -> FsResult<Opened> {
        match r {
            MdsReply::Opened { attr, layout, handle, parent } => {
                self.session.hold(handle, attr.ino);
                Ok(Opened { attr, layout, handle, parent })
            }
            r => Err(unexpected(what, r)),
        }
    }

    /// Asks for the lease on the empty directory `dir` (EBUSY when it is not empty or held elsewhere).
    pub async fn lease_dir(&self, dir: Ino) -> FsResult<DirLease> {
        match self.call(MdsRequest::LeaseDir { dir }).await? {
            MdsReply::Lease(l) => Ok(l),
            r => Err(unexpected("LeaseDir", r)),
        }
    }

    /// Sends a lease holder's creates and unlinks in `dir`; returns each one's result, the directory's
    /// attributes and the renewed lease (`keep`), if it still holds one.
    pub async fn dir_batch(
        &self,
        dir: Ino,
        token: u64,
        entries: Vec<DirOp>,
        keep: bool,
    ) -> FsResult<(Vec<BatchResult>, Attr, Option<DirLease>)> {
        match self.call(MdsRequest::DirBatch { dir, token, entries, keep }).await? {
            MdsReply::Batch { results, dir_attr, lease } => {
                for r in &results {
                    if let Ok(Some((handle, _))) = &r.result {
                        self.session.hold(*handle, r.ino);
                    }
                }
                Ok((results, dir_attr, lease))
            }
            r => Err(unexpected("DirBatch", r)),
        }
    }

    /// Makes every metadata change so far durable on the MDS's disk (fsync/fsyncdir/sync).
    pub async fn sync(&self) -> FsResult<()> {
        ok_of("Sync", self.call(MdsRequest::Sync).await?)
    }

    /// `perm` and the caller's `umask` (see [`MdsRequest::Mkdir`]).
    pub async fn mkdir(&self, parent: Ino, name: &str, (perm, umask): (u32, u32)) -> FsResult<Attr> {
        attr_of("Mkdir", self.call(MdsRequest::Mkdir { parent, name: name.to_string(), perm, umask }).await?)
    }

    pub async fn symlink(&self, parent: Ino, name: &str, target: &str) -> FsResult<Attr> {
        let req = MdsRequest::Symlink { parent, name: name.to_string(), target: target.to_string() };
        attr_of("Symlink", self.call(req).await?)
    }

    pub async fn readlink(&self, ino: Ino) -> FsResult<String> {
        match self.call(MdsRequest::Readlink { ino }).await? {
            MdsReply::Target(t) => Ok(t),
            r => Err(unexpected("Readlink", r)),
        }
    }

    pub async fn link(&self, ino: Ino, new_parent: Ino, new_name: &str) -> FsResult<Attr> {
        let req = MdsRequest::Link { ino, new_parent, new_name: new_name.to_string() };
        match self.call(req).await? {
            MdsReply::Ok => self.getattr(ino).await,
            r => attr_of("Link", r),
        }
    }

    /// Removes a non-directory; returns the parent's new attributes.
    pub async fn unlink(&self, parent: Ino, name: &str) -> FsResult<Attr> {
        attr_of("Unlink", self.call(MdsRequest::Unlink { parent, name: name.to_string() }).await?)
    }

    /// Removes an empty directory; returns the parent's new attributes.
    pub async fn rmdir(&self, parent: Ino, name: &str) -> FsResult<Attr> {
        attr_of("Rmdir", self.call(MdsRequest::Rmdir { parent, name: name.to_string() }).await?)
    }

    pub async fn rename(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        flags: RenameFlags,
    ) -> FsResult<()> {
        let req =
            MdsRequest::Rename { parent, name: name.to_string(), new_parent, new_name: new_name.to_string(), flags };
        ok_of("Rename", self.call(req).await?)
    }

    /// One page of entries after cookie `offset`.
    pub async fn readdir(&self, ino: Ino, offset: u64, max: u32) -> FsResult<Vec<DirEntry>> {
        match self.call(MdsRequest::ReadDir { ino, offset, max }).await? {
            MdsReply::DirEntries(e) => Ok(e),
            r => Err(unexpected("ReadDir", r)),
        }
    }

    pub async fn open(&self, ino: Ino, flags: OpenFlags) -> FsResult<Opened> {
        self.opened("Open", self.call(MdsRequest::Open { ino, flags }).await?)
    }

    pub async fn close(&self, ino: Ino, handle: u64, size: Option<u64>, wrote: bool) -> FsResult<()> {
        self.session.release(handle);
        ok_of("Close", self.call(MdsRequest::Close { ino, handle, size, wrote }).await?)
    }

    pub async fn report_write(&self, ino: Ino, size: u64) -> FsResult<()> {
        ok_of("ReportWrite", self.call(MdsRequest::ReportWrite { ino, size }).await?)
    }

    /// `O_APPEND`: the offset at which `len` bytes go, the file's size already past them (see
    /// [`MdsRequest::Append`]).
    pub async fn append(&self, ino: Ino, len: u64) -> FsResult<u64> {
        match self.call(MdsRequest::Append { ino, len }).await? {
            MdsReply::Appended { offset } => Ok(offset),
            r => Err(unexpected("Append", r)),
        }
    }

    pub async fn statfs(&self) -> FsResult<StatFs> {
        match self.call(MdsRequest::StatFs).await? {
            MdsReply::StatFs(s) => Ok(s),
            r => Err(unexpected("StatFs", r)),
        }
    }

    /// `access(2)`: `mask` of `R_OK`/`W_OK`/`X_OK` (0 = existence).
    pub async fn access(&self, ino: Ino, mask: u32) -> FsResult<()> {
        ok_of("Access", self.call(MdsRequest::Access { ino, mask }).await?)
    }

    pub async fn getxattr(&self, ino: Ino, name: &str) -> FsResult<Vec<u8>> {
        match self.call(MdsRequest::GetXattr { ino, name: name.to_string() }).await? {
            MdsReply::Xattr(v) => Ok(v),
            r => Err(unexpected("GetXattr", r)),
        }
    }

    pub async fn setxattr(&self, ino: Ino, name: &str, value: Vec<u8>, mode: XattrMode) -> FsResult<()> {
        ok_of("SetXattr", self.call(MdsRequest::SetXattr { ino, name: name.to_string(), value, mode }).await?)
    }

    pub async fn listxattr(&self, ino: Ino) -> FsResult<Vec<String>> {
        match self.call(MdsRequest::ListXattr { ino }).await? {
            MdsReply::XattrNames(v) => Ok(v),
            r => Err(unexpected("ListXattr", r)),
        }
    }

    pub async fn removexattr(&self, ino: Ino, name: &str) -> FsResult<()> {
        ok_of("RemoveXattr", self.call(MdsRequest::RemoveXattr { ino, name: name.to_string() }).await?)
    }

    /// A file's layout, or a directory's default layout.
    pub async fn get_layout(&self, ino: Ino) -> FsResult<LayoutReply> {
        match self.call(MdsRequest::GetLayout { ino }).await? {
            MdsReply::Layout(l) => Ok(LayoutReply::File(l)),
            MdsReply::DirLayout(s) => Ok(LayoutReply::Dir(s)),
            MdsReply::DirComposite(e) => Ok(LayoutReply::DirComposite(e)),
            r => Err(unexpected("GetLayout", r)),
        }
    }

    /// Sets a composite layout: a directory's default, or an empty file's own.
    pub async fn set_composite_layout(&self, ino: Ino, extents: Vec<ExtentSpec>) -> FsResult<()> {
        ok_of("SetCompositeLayout", self.call(MdsRequest::SetCompositeLayout { ino, extents }).await?)
    }

    /// Has the extent of `ino`'s composite layout holding `offset` (and all before it) placed; returns
    /// the file's layout.
    pub async fn instantiate_extent(&self, ino: Ino, offset: u64) -> FsResult<Layout> {
        match self.call(MdsRequest::InstantiateExtent { ino, offset }).await? {
            MdsReply::Layout(l) => {
                l.validate()?;
                Ok(l)
            }
            r => Err(unexpected("InstantiateExtent", r)),
        }
    }

    pub async fn set_layout(&self, ino: Ino, spec: LayoutSpec) -> FsResult<()> {
        match self.call(MdsRequest::SetLayout { ino, spec }).await? {
            MdsReply::Ok | MdsReply::Layout(_) | MdsReply::DirLayout(_) | MdsReply::Attr(_) => Ok(()),
            MdsReply::Entry { .. } => Ok(()),
            r => Err(unexpected("SetLayout", r)),
        }
    }

    /// A data server's report (only servers with the `ds` role may send it).
    pub async fn ds_report(&self, report: DsReport) -> FsResult<()> {
        ok_of("DsReport", self.call(MdsRequest::DsReport(Box::new(report))).await?)
    }

    pub async fn cluster_status(&self) -> FsResult<Vec<DsStatus>> {
        match self.call(MdsRequest::ClusterStatus).await? {
            MdsReply::Cluster(v) => Ok(v),
            r => Err(unexpected("ClusterStatus", r)),
        }
    }

    /// Declares files a job will create (placed together now, used when each create arrives).
    pub async fn declare(&self, files: Vec<DeclaredFile>) -> FsResult<u32> {
        match self.call(MdsRequest::Declare { files }).await? {
            MdsReply::Declared { count } => Ok(count),
            r => Err(unexpected("Declare", r)),
        }
    }

    /// The placement policy and its last solve (`tessera df --policy`).
    pub async fn placement_status(&self) -> FsResult<PlacementStatus> {
        match self.call(MdsRequest::PlacementStatus).await? {
            MdsReply::Placement(s) => Ok(s),
            r => Err(unexpected("PlacementStatus", r)),
        }
    }

    /// Mirrored files' health (`tessera mirror status`).
    /// Whether data server `ds` still holds its fence lease at the MDS (`MirrorLease`).
    pub async fn mirror_lease(&self, ds: DsId) -> FsResult<bool> {
        match self.call(MdsRequest::MirrorLease { ds }).await? {
            MdsReply::MirrorLease { held } => Ok(held),
            r => Err(unexpected("MirrorLease", r)),
        }
    }

    pub async fn mirror_status(&self) -> FsResult<tessera_proto::msg::MirrorStatus> {
        match self.call(MdsRequest::MirrorStatus).await? {
            MdsReply::MirrorStatus(s) => Ok(s),
            r => Err(unexpected("MirrorStatus", r)),
        }
    }

    /// Each metadata replica's own state (`tessera mds status`) with its address: the configured ones in
    /// configuration order, then the members the answers name that no configuration lists (replicas
    /// added at run time); a replica that does not answer within 2 s gives its error. Sent directly,
    /// not through a forwarding node.
    pub async fn replica_statuses(&self) -> Vec<(String, FsResult<tessera_proto::msg::ReplicaStatus>)> {
        let patience = std::time::Duration::from_secs(2);
        let n = self.peer.each().len();
        let mut all = futures::future::join_all((0..n).map(|i| self.replica_status(i, patience))).await;
        let named: Vec<String> = all
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok())
            .flat_map(|s| s.members.iter().map(|m| m.addr.clone()))
            .collect();
        for addr in named {
            if let Some(i) = self.peer.learn(&addr).filter(|&i| i >= all.len()) {
                all.push(self.replica_status(i, patience).await);
            }
        }
        all
    }

    /// Changes the metadata replicas' membership (admin; `tessera mds add`, `tessera mds remove`): the
    /// leader's status after the change.
    pub async fn change_replicas(
        &self,
        change: tessera_proto::msg::ReplicaChange,
    ) -> FsResult<tessera_proto::msg::ReplicaStatus> {
        match self.call(MdsRequest::ChangeReplicas { change }).await? {
            MdsReply::Replica(s) => Ok(s),
            r => Err(unexpected("ChangeReplicas", r)),
        }
    }

    /// Replica `i`'s own state (its position in the configuration) and configured address, if it answers
    /// within `patience`.
    pub async fn replica_status(
        &self,
        i: usize,
        patience: std::time::Duration,
    ) -> (String, FsResult<tessera_proto::msg::ReplicaStatus>) {
        let Some((addr, peer)) = self.peer.each().into_iter().nth(i) else {
            return (String::new(), Err(FsError::invalid(format!("no metadata replica {i}"))));
        };
        let call = MdsCall {
            caller: self.caller.clone(),
            origin: (*self.origin).clone(),
            req: MdsRequest::ReplicaStatus,
            seq: 0,
        };
        let r = match tokio::time::timeout(patience, call.send(&peer)).await {
            Ok(Ok(MdsReply::Replica(s))) => Ok(s),
            Ok(Ok(r)) => Err(unexpected("ReplicaStatus", r)),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(FsError::new(ErrorCode::TimedOut, format!("no answer within {patience:?}"))),
        };
        (addr.to_string(), r)
    }

    /// Takes data server `ds` out of the cluster (admin); with `rebuild`, its mirrored replicas are rebuilt
    /// elsewhere. The mirror status after it.
    pub async fn ds_remove(
        &self,
        ds: tessera_proto::DsId,
        rebuild: bool,
    ) -> FsResult<tessera_proto::msg::MirrorStatus> {
        match self.call(MdsRequest::DsRemove { ds, rebuild }).await? {
            MdsReply::MirrorStatus(s) => Ok(s),
            r => Err(unexpected("DsRemove", r)),
        }
    }

    /// PerSched: registers this job's periodic profile; its grant in the recomputed pattern.
    pub async fn periodic_register(&self, profile: PeriodicProfile) -> FsResult<Option<PeriodicGrant>> {
        match self.call(MdsRequest::PeriodicRegister { profile }).await? {
            MdsReply::Periodic(g) => Ok(g),
            r => Err(unexpected("PeriodicRegister", r)),
        }
    }

    /// PerSched: renews this job's reservation and fetches its grant (`None`: not registered).
    pub async fn periodic_poll(&self, done: u64) -> FsResult<Option<PeriodicGrant>> {
        match self.call(MdsRequest::PeriodicPoll { done }).await? {
            MdsReply::Periodic(g) => Ok(g),
            r => Err(unexpected("PeriodicPoll", r)),
        }
    }

    /// Online scheduling: this job wants to transfer (`want`) or has finished; its rate now (0: wait).
    pub async fn periodic_io(&self, want: bool, done: u64) -> FsResult<u64> {
        match self.call(MdsRequest::PeriodicIo { want, done }).await? {
            MdsReply::PeriodicRate(r) => Ok(r),
            r => Err(unexpected("PeriodicIo", r)),
        }
    }

    pub async fn periodic_leave(&self) -> FsResult<()> {
        match self.call(MdsRequest::PeriodicLeave).await? {
            MdsReply::Ok => Ok(()),
            r => Err(unexpected("PeriodicLeave", r)),
        }
    }

    /// PerSched: every periodic job's planned and measured efficiency (`tessera jobs --periodic`).
    pub async fn periodic_status(&self) -> FsResult<PeriodicReport> {
        match self.call(MdsRequest::PeriodicStatus).await? {
            MdsReply::PeriodicStatus(s) => Ok(s),
            r => Err(unexpected("PeriodicStatus", r)),
        }
    }

    /// What the orchestrator sees and decides (`tessera jobs`, `tessera orchestrator status`).
    pub async fn orchestrator_status(&self) -> FsResult<OrchestratorStatus> {
        match self.call(MdsRequest::OrchestratorStatus).await? {
            MdsReply::Orchestrator(s) => Ok(s),
            r => Err(unexpected("OrchestratorStatus", r)),
        }
    }

    /// The job registry with its counters: one job (with its files and time series) or all (summaries).
    pub async fn job_stats(&self, job: Option<&str>) -> FsResult<Vec<tessera_proto::msg::JobInfo>> {
        match self.call(MdsRequest::JobStats { job: job.map(str::to_string) }).await? {
            MdsReply::Jobs(v) => Ok(v),
            r => Err(unexpected("JobStats", r)),
        }
    }

    /// Checks the namespace against itself and the data servers' objects; with `repair`, fixes what it
    /// finds (`tessera fsck`; admin certificate, or a root caller).
    pub async fn fsck(&self, repair: bool) -> FsResult<FsckReport> {
        self.fsck_with(repair, false).await
    }

    /// [`MdsClient::fsck`], comparing mirrored stripes' in-sync replicas by checksum too
    /// (`verify_mirrors`).
    pub async fn fsck_with(&self, repair: bool, verify_mirrors: bool) -> FsResult<FsckReport> {
        match self.call(MdsRequest::Fsck { repair, verify_mirrors }).await? {
            MdsReply::Fsck(r) => Ok(r),
            r => Err(unexpected("Fsck", r)),
        }
    }

    /// Switches the orchestrator's mode (admin certificate, or a root caller).
    pub async fn set_orchestrator_mode(&self, mode: OrchestratorMode) -> FsResult<()> {
        ok_of("SetOrchestratorMode", self.call(MdsRequest::SetOrchestratorMode { mode }).await?)
    }
}

/// Sends a client's keep-alives until dropped (with the client's last clone).
pub(crate) struct KeepAlive(tokio::task::JoinHandle<()>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts sending `mds`'s keep-alives, the first at once, then every third of the eviction timeout the
/// MDS answers with ([`crate::session::period`]).
pub(crate) fn spawn_keep_alive(mds: MdsClient) -> KeepAlive {
    KeepAlive(tokio::spawn(async move {
        let mut every = crate::session::FIRST_PERIOD;
        loop {
            match mds.keep_alive().await {
                Ok(timeout) => every = crate::session::period(timeout),
                Err(e) => tracing::debug!("keep-alive: {e}"),
            }
            tokio::time::sleep(every).await;
        }
    }))
}
