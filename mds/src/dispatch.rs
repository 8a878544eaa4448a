//! The one dispatch of metadata requests. The table in [`tessera_proto::requests`] gives each request's
//! properties — its name (the request counters), who may send it, which directory lease it waits for and
//! the part of the server that handles it ([`Handler`]) — and [`serve`] holds the only `match` over the
//! requests, handing each to its handler.
//!
//! A request from the network ([`MdsService::dispatch`]) passes, in this order:
//! 1. admission: the sender's role and caller ([`tessera_proto::requests::Senders`]), its origin, the job
//!    ids of a batch's entries;
//! 2. for the namespace's handlers (`Namespace`, `Lease`, `Session`): the job's metadata event is taken
//!    (`[metrics] job_counters`), then the request waits for the directory leases it touches;
//! 3. [`serve`]: for `Namespace` and `Lease`, the client's session is renewed (an evicted client is told so,
//!    and the request is not applied); then the handler;
//! 4. the job's metadata event with the result, and the request counter (by name, ok or not).
//!
//! [`Namespace::handle`] and [`Namespace::handle_client`] (the MDS's own callers and the namespace's tests)
//! enter at step 3 with the namespace alone: the other handlers' requests are unsupported there, and lease
//! requests need a client ([`Namespace::handle_client`]).

use crate::jobs::MetaEvent;
use crate::lease::Holder;
use crate::namespace::Namespace;
use crate::orchestrator::Orchestrator;
use crate::persched::service as periodic;
use crate::server::MdsService;
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{MdsCall, MdsReply, MdsRequest};
use tessera_proto::requests::{Handler, Properties};
use tessera_proto::rpc::PeerInfo;
use tessera_proto::{Caller, FsError, FsResult, Origin, PROTOCOL_VERSION};
use tracing::debug;

/// Where a request is served: the namespace, its caller and client, and the rest of the server when it came
/// over the network.
pub(crate) struct Context<'a> {
    pub ns: &'a Namespace,
    pub caller: &'a Caller,
    /// The client and its connection: its session is renewed by each request, and it may hold directory
    /// leases. `None`: no session (client 0 — the MDS's own callers and tests).
    pub holder: Option<Holder>,
    /// The server beyond the namespace (`None`: the namespace alone).
    pub remote: Option<Remote<'a>>,
}

/// A request that came over the network: the service that received it, the peer and the request's origin.
pub(crate) struct Remote<'a> {
    pub svc: &'a MdsService,
    pub peer: &'a PeerInfo,
    pub origin: &'a Origin,
}

impl Remote<'_> {
    fn orchestrator(&self) -> FsResult<&Orchestrator> {
        self.svc.orch.as_deref().ok_or_else(|| FsError::new(ErrorCode::Unsupported, "orchestrator not available"))
    }
}

/// Serves one request in `cx`: what its handler (the table's column) asks first, then the handler.
pub(crate) async fn serve(cx: &Context<'_>, req: MdsRequest) -> FsResult<MdsReply> {
    use MdsRequest as Q;
    let handler = req.properties().handler;
    // Every request of a client to the namespace renews its session; an evicted one is refused (its
    // keep-alive, `Handler::Session`, is how it learns so).
    if let (Some(h), Handler::Namespace | Handler::Lease | Handler::Locks) = (cx.holder, handler) {
        cx.ns.renew_session(h.client)?;
    }
    let (ns, c) = (cx.ns, cx.caller);
    let client = cx.holder.map_or(0, |h| h.client);
    let holder = || {
        cx.holder.ok_or_else(|| {
            FsError::new(ErrorCode::Unsupported, "lease requests need the caller's connection and client")
        })
    };
    let remote = || cx.remote.as_ref().ok_or_else(|| FsError::new(ErrorCode::Unsupported, "not a namespace request"));
    match req {
        // Handler::Namespace
        Q::Ping => Ok(MdsReply::Pong { version: PROTOCOL_VERSION }),
        Q::Lookup { parent, name } => ns.lookup(c, parent, &name),
        Q::LookupPath { path, follow } => ns.lookup_path(c, &path, follow),
        Q::GetAttr { ino } => ns.getattr(ino),
        Q::SetAttr { ino, set } => ns.setattr(c, ino, set).await,
        Q::Create { parent, name, kind, perm, umask, rdev, exclusive, layout } => {
            ns.create(c, parent, &name, kind, (perm, umask), rdev, exclusive, layout).await
        }
        Q::CreateOpen { parent, name, perm, umask, exclusive, layout, flags } => {
            ns.create_open(c, client, parent, &name, (perm, umask), exclusive, layout, flags).await
        }
        Q::Sync => ns.sync().await,
        Q::Mkdir { parent, name, perm, umask } => ns.mkdir(c, parent, &name, (perm, umask)).await,
        Q::Symlink { parent, name, target } => ns.symlink(c, parent, &name, &target).await,
        Q::Readlink { ino } => ns.readlink(ino),
        Q::Link { ino, new_parent, new_name } => ns.link(c, ino, new_parent, &new_name).await,
        Q::Unlink { parent, name } => ns.unlink(c, parent, &name).await,
        Q::Rmdir { parent, name } => ns.rmdir(c, parent, &name).await,
        Q::Rename { parent, name, new_parent, new_name, flags } => {
            ns.rename(c, parent, &name, new_parent, &new_name, flags).await
        }
        Q::ReadDir { ino, offset, max } => ns.readdir(c, ino, offset, max),
        Q::Open { ino, flags } => ns.open(c, client, ino, flags).await,
        Q::Close { ino, handle, size, wrote } => ns.close(ino, handle, size, wrote).await,
        Q::ReportWrite { ino, size } => ns.report_write(c, ino, size).await,
        Q::Append { ino, len } => ns.append(c, ino, len).await,
        Q::StatFs => Ok(ns.statfs()),
        Q::Access { ino, mask } => ns.access(c, ino, mask),
        Q::GetXattr { ino, name } => ns.get_xattr(c, ino, &name),
        Q::SetXattr { ino, name, value, mode } => ns.set_xattr(c, ino, &name, &value, mode).await,
        Q::ListXattr { ino } => ns.list_xattr(c, ino),
        Q::RemoveXattr { ino, name } => ns.remove_xattr(c, ino, &name).await,
        Q::GetLayout { ino } => ns.get_layout(ino),
        Q::SetLayout { ino, spec } => ns.set_layout(c, ino, spec).await,
        Q::SetCompositeLayout { ino, extents } => ns.set_composite(c, ino, &extents).await,
        Q::InstantiateExtent { ino, offset } => ns.instantiate(c, ino, offset).await.map(MdsReply::Layout),
        Q::ClusterStatus => Ok(MdsReply::Cluster(ns.stats().cluster_status())),
        Q::PlacementStatus => Ok(MdsReply::Placement(ns.placer().status())),
        Q::Declare { files } => ns.declare(c, files),
        Q::Fsck { repair, verify_mirrors } => ns.fsck_with(repair, verify_mirrors).await.map(MdsReply::Fsck),
        // Handler::Replica
        // Without replicas (a replica answers these itself, before the dispatch: `crate::raft::replica`).
        Q::Raft { .. } | Q::ChangeReplicas { .. } => Err(FsError::new(
            ErrorCode::Unsupported,
            "this metadata server has no replicas (start the service with several [[mds]] entries)",
        )),
        Q::ReplicaStatus => Ok(MdsReply::Replica(tessera_proto::msg::ReplicaStatus {
            id: 1,
            role: "single".into(),
            term: 0,
            log_index: 0,
            applied_index: 0,
            leader: Some(1),
            matched: Vec::new(),
            serving: true,
            members: Vec::new(),
        })),
        // Handler::Session
        Q::KeepAlive => Ok(ns.keep_alive(client)),
        // Handler::Caches
        Q::Watch { acked, wait_ms, leave } => ns.watch(holder()?, acked, wait_ms, leave).await,
        Q::Reopen { handles } => ns.reopen(client, &handles),
        // Handler::Locks
        Q::Lock { ino, owner, spec, wait_ms, wait_id, reclaim } => {
            ns.lock_file(client, ino, owner, spec, wait_ms, wait_id, reclaim).await
        }
        Q::TestLock { ino, owner, spec } => ns.test_lock(client, ino, owner, spec),
        Q::CancelLock { owner, wait_id } => Ok(ns.cancel_lock(client, owner, wait_id)),
        // Handler::Lease
        Q::LeaseDir { dir } => ns.lease_dir(c, holder()?, dir).map(MdsReply::Lease),
        Q::DirBatch { dir, token, entries, keep } => ns.dir_batch(holder()?, dir, token, entries, keep).await,
        // Handler::Stats
        Q::DsReport(r) => {
            let remote = remote()?;
            if !ns.stats().is_configured(r.ds) {
                debug!(ds = r.ds, peer = %remote.peer.name, "report from an unconfigured data server");
            }
            remote.svc.learn_name(remote.peer, r.ds);
            ns.stats().record(*r);
            Ok(MdsReply::Ok)
        }
        // Handler::Orchestrator
        Q::LocalityReport(l) => {
            let remote = remote()?;
            remote.svc.learn_name(remote.peer, l.ds);
            remote.orchestrator()?.report(l)
        }
        Q::SetOrchestratorMode { mode } => remote()?.orchestrator()?.change_mode(mode),
        Q::OrchestratorStatus => remote()?.orchestrator()?.status_reply(),
        // Handler::Periodic
        Q::PeriodicRegister { profile } => {
            let remote = remote()?;
            periodic::register(&remote.svc.persched, &remote.origin.job, profile).await
        }
        Q::PeriodicPoll { done } => {
            let remote = remote()?;
            periodic::poll(&remote.svc.persched, &remote.origin.job, done).await
        }
        Q::PeriodicLeave => {
            let remote = remote()?;
            periodic::leave(&remote.svc.persched, &remote.origin.job).await
        }
        Q::PeriodicStatus => periodic::status(&remote()?.svc.persched).await,
        Q::PeriodicIo { want, done } => {
            let remote = remote()?;
            periodic::io(&remote.svc.persched, &remote.origin.job, want, done).await
        }
        // Handler::Jobs
        Q::DsJobReport(r) => {
            remote()?.svc.jobs.on_detail(&r);
            Ok(MdsReply::Ok)
        }
        Q::IonJobReport(r) => {
            remote()?.svc.jobs.on_ion_detail(&r);
            Ok(MdsReply::Ok)
        }
        Q::JobStats { job } => Ok(MdsReply::Jobs(remote()?.svc.jobs.info(job.as_deref(), ns.store()))),
        // Handler::Mirror
        Q::MirrorMarkStale { from, missed, logs } => ns.mirror_mark_stale(from, missed, logs).await,
        Q::MirrorFences { ds, known, store } => ns.mirror_fences_of(ds, known, store).await,
        Q::MirrorStatus => ns.mirror_status().map(MdsReply::MirrorStatus),
        Q::MirrorLease { ds } => Ok(MdsReply::MirrorLease { held: ns.fences.holds_lease(ds) }),
        Q::DsRemove { ds, rebuild } => ns.ds_remove(ds, rebuild).await,
    }
}

impl MdsService {
    /// Every metadata request from the network passes here (the module docs give the steps).
    pub(crate) async fn dispatch(&self, peer: &PeerInfo, call: MdsCall) -> FsResult<MdsReply> {
        let props = call.req.properties();
        let mut r = self.admit_and_serve(peer, props, call).await;
        // Replicated: no answer (a read's either) shows a change a majority does not have yet.
        if r.is_ok() {
            if let Err(e) = self.ns.store().settle().await {
                r = Err(e.into());
            }
        }
        self.counters.count(props.name, r.is_ok());
        r
    }

    async fn admit_and_serve(&self, peer: &PeerInfo, props: Properties, call: MdsCall) -> FsResult<MdsReply> {
        props.senders.admit(peer.role, &call.caller)?;
        call.origin.check()?;
        if let MdsRequest::DirBatch { entries, .. } = &call.req {
            for e in entries {
                tessera_proto::check_job_id(e.by().0)?;
            }
        }
        let MdsCall { caller, origin, req, seq } = call;
        let seq = if props.replies_cached() { seq } else { 0 };
        // A lease is held by one client on one connection (many share one through a forwarding node).
        let holder = Holder { conn: peer.conn, client: origin.client };
        let cx = Context {
            ns: &self.ns,
            caller: &caller,
            holder: Some(holder),
            remote: Some(Remote { svc: self, peer, origin: &origin }),
        };
        if !matches!(props.handler, Handler::Namespace | Handler::Lease | Handler::Session) {
            return serve(&cx, req).await;
        }
        let event = self.job_counters.then(|| MetaEvent::of(&req)).flatten().map(|ev| match ev {
            // The inode an unlink removes, for the job's files.
            MetaEvent::Unlink { parent, name, .. } => {
                let ino = self.ns.store().begin().dentry(parent, &name).ok().flatten().map(|d| d.ino);
                MetaEvent::Unlink { parent, name, ino }
            }
            ev => ev,
        });
        let _admitted = self.ns.leases().admit(holder, &req).await;
        // Kept to rebuild the answer of a change committed whose answer was lost (`serve_once`).
        let again = (seq != 0).then(|| req.clone());
        let caches = self.ns.caches();
        // While clients watch: the answer is leased to the caller, and its changes recalled from the others.
        let leasing = caches.active().then(|| (Leasing::of(&req), caches.counter()));
        let served = self.ns.serve_once(origin.client, seq, serve(&cx, req), again.as_ref().map(|r| (&caller, r)));
        let r = match leasing {
            None => served.await,
            Some((leasing, start)) => {
                let (r, mut waits) = crate::caches::serving(holder, served).await;
                let (attrs, names) = leasing.leased(&r);
                waits.extend(caches.grant(holder, start, &attrs, &names));
                caches.wait(&waits).await;
                r
            }
        };
        if let Some(ev) = event {
            self.jobs.on_metadata(&origin, caller.uid, ev, &r);
        }
        r
    }
}

/// What an answer leases to the caller (`crate::caches`): the attributes it carries, and the names of the
/// directory it looked up, listed or changed a name in.
struct Leasing {
    names: Option<tessera_proto::Ino>,
    /// Files a directory lease's batch created (their attributes are the holder's).
    created: Vec<tessera_proto::Ino>,
}

impl Leasing {
    fn of(req: &MdsRequest) -> Leasing {
        use MdsRequest as Q;
        let names = match req {
            Q::Lookup { parent, .. }
            | Q::Create { parent, .. }
            | Q::CreateOpen { parent, .. }
            | Q::Mkdir { parent, .. }
            | Q::Symlink { parent, .. } => Some(*parent),
            Q::Link { new_parent, .. } => Some(*new_parent),
            Q::ReadDir { ino, .. } => Some(*ino),
            Q::LeaseDir { dir } | Q::DirBatch { dir, .. } => Some(*dir),
            _ => None,
        };
        let created = match req {
            Q::DirBatch { entries, .. } => entries
                .iter()
                .filter_map(|e| match e {
                    tessera_proto::msg::DirOp::Create(c) => Some(c.ino),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Leasing { names, created }
    }

    /// The inodes whose attributes and the directories whose names `r` gives.
    fn leased(self, r: &FsResult<MdsReply>) -> (Vec<tessera_proto::Ino>, Vec<tessera_proto::Ino>) {
        let mut attrs = Vec::new();
        match r {
            Ok(MdsReply::Attr(a)) | Ok(MdsReply::Entry { attr: a, .. }) => attrs.push(a.ino),
            Ok(MdsReply::Opened { attr, parent, .. }) => {
                attrs.push(attr.ino);
                attrs.extend(parent.as_ref().map(|p| p.ino));
            }
            Ok(MdsReply::Lease(l)) => attrs.push(l.attr.ino),
            Ok(MdsReply::Batch { dir_attr, results, .. }) => {
                attrs.push(dir_attr.ino);
                // Only the creates that took effect.
                let created: std::collections::HashSet<_> = self.created.iter().collect();
                attrs.extend(results.iter().filter(|b| b.result.is_ok() && created.contains(&b.ino)).map(|b| b.ino));
            }
            Ok(MdsReply::DirEntries(_)) => {}
            // A name found absent is leased as absent.
            Err(e) if e.code == ErrorCode::NotFound && self.names.is_some() => {
                return (attrs, self.names.into_iter().collect());
            }
            _ => return (attrs, Vec::new()),
        }
        (attrs, self.names.into_iter().collect())
    }
}

/// The namespace's own entries into the dispatch (the MDS's own callers and the namespace's tests).
impl Namespace {
    /// Serves one request of the namespace (not the data servers', the orchestrator's, PerSched's or the
    /// job registry's, which need the rest of the server) for a caller without a session (client 0: the
    /// MDS's own callers and tests), through the one dispatch (`crate::dispatch`).
    pub async fn handle(&self, c: &Caller, req: MdsRequest) -> FsResult<MdsReply> {
        let cx = Context { ns: self, caller: c, holder: None, remote: None };
        serve(&cx, req).await
    }

    /// Serves one request of the namespace from `holder`, a client on a connection: its session is renewed
    /// (an evicted client is told so and the request not applied), handles it opens are its own (evicted
    /// with it), and it may hold directory leases. Requests from the network are served the same way, after
    /// admission and with the rest of the server (`crate::dispatch`).
    pub async fn handle_client(&self, c: &Caller, holder: Holder, req: MdsRequest) -> FsResult<MdsReply> {
        let cx = Context { ns: self, caller: c, holder: Some(holder), remote: None };
        serve(&cx, req).await
    }
}
