//! The table of metadata requests: each [`MdsRequest`]'s properties, in one place. The MDS takes from it
//! the request's name (metrics), who may send it, what it touches (directory leases) and the part of the
//! server that handles it (its dispatch, `tessera_mds::dispatch`); clients take whether it may be sent
//! again after a lost reply. A new request is one line here plus its arm in the MDS's dispatch.

use crate::error::FsResult;
use crate::msg::{MdsCall, MdsReply, MdsRequest};
use crate::rpc::RpcPeer;
use crate::types::{Caller, Ino, Role};
use bytes::Bytes;
use std::time::Duration;

/// How long a request that may be repeated waits for an MDS that went away to come back. With the
/// default transport (a dead connection noticed within 5 s, then one attempt per second of at most 2 s),
/// a call to an MDS that stays down fails within 10 s; one that restarts meanwhile is answered.
pub const RESTART_PATIENCE: Duration = Duration::from_secs(8);

impl MdsCall {
    /// Whether the call may be sent again: its request is idempotent, or it carries a number the MDS's
    /// reply cache answers a resend by ([`MdsCall::seq`]).
    pub fn resendable(&self) -> bool {
        self.seq != 0 || self.req.properties().idempotent
    }

    /// Sends the call to the MDS at `peer`. A [`MdsCall::resendable`] call is retried through an MDS
    /// restart (for up to [`RESTART_PATIENCE`]); the others are sent once, since a lost reply would turn
    /// a success into EEXIST/ENOENT on the retry. Clients and forwarding nodes send this way.
    pub async fn send(&self, peer: &RpcPeer) -> FsResult<MdsReply> {
        let (reply, _payload): (MdsReply, Bytes) = if self.resendable() {
            peer.call_retrying(self, Bytes::new(), RESTART_PATIENCE).await?
        } else {
            peer.call(self, Bytes::new()).await?
        };
        Ok(reply)
    }
}

/// Who may send a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Senders {
    /// Any authenticated peer (a liveness and version check).
    Anyone,
    /// Data servers only (their reports).
    DataServers,
    /// Clients, administrators, forwarding nodes and metadata servers — not data servers.
    Clients,
    /// The admin certificate, or a root caller from a client.
    Admins,
    /// Forwarding nodes only (their reports).
    ForwardingNodes,
    /// Metadata servers only (the replicated log between replicas).
    MetadataServers,
}

impl Senders {
    /// Whether a peer of `role` calling as `caller` may send the request.
    pub fn admit(self, role: Role, caller: &Caller) -> Result<(), NotAdmitted> {
        let ok = match self {
            Senders::Anyone => true,
            Senders::DataServers => role == Role::Ds,
            Senders::Clients => role != Role::Ds,
            Senders::Admins => role == Role::Admin || (role != Role::Ds && caller.uid == 0),
            Senders::ForwardingNodes => role == Role::Ion,
            Senders::MetadataServers => role == Role::Mds,
        };
        if ok {
            return Ok(());
        }
        Err(NotAdmitted { senders: self, role })
    }
}

/// A peer that may not send a request ([`Senders::admit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", match senders {
    Senders::DataServers => format!("only data servers send reports (peer is {role})"),
    Senders::Admins => "this needs the admin certificate or a root caller".to_string(),
    Senders::ForwardingNodes => format!("only forwarding nodes send this report (peer is {role})"),
    Senders::MetadataServers => format!("only metadata servers send this (peer is {role})"),
    _ => format!("a peer with role {role} may only ping and report"),
})]
pub struct NotAdmitted {
    /// Who may send the request.
    pub senders: Senders,
    /// The peer's role.
    pub role: Role,
}

impl From<NotAdmitted> for crate::error::FsError {
    fn from(e: NotAdmitted) -> crate::error::FsError {
        crate::error::FsError::perm(e.to_string())
    }
}

/// What a request may read or change that a directory lease covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touches {
    Nothing,
    /// This inode (when it is a leased directory).
    Inode(Ino),
    /// Possibly any directory: a path walk, or a removal or rename (which may replace a directory).
    Any,
}

/// The part of the metadata server that handles a request; the steps the MDS takes before handing it over
/// follow from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    /// The namespace: counted per job, waits for the directory leases it touches, renews the client's
    /// session (and is refused once the client was evicted).
    Namespace,
    /// Directory leases and their batches of creates: the namespace, with the caller's connection and client.
    Lease,
    /// The client's session (its keep-alive): as the namespace, but answered after an eviction too (it is
    /// how the client learns of it).
    Session,
    /// The data servers' reports (the statistics placement and `df` use).
    Stats,
    /// IOrchestrator.
    Orchestrator,
    /// PerSched: periodic jobs.
    Periodic,
    /// The job registry and its counters.
    Jobs,
    /// Mirrored files' replica states: degraded writes, fences, resync and rebuild (issue 36).
    Mirror,
    /// The replicated metadata service (issue 37): answered by the replica itself, leader or not.
    Replica,
    /// File locks (issue 42): the MDS's lock manager; renews the client's session, as the namespace.
    Locks,
    /// The client's channel for recalls of cached names and attributes (`Watch`): the MDS's caches table.
    Caches,
}

/// One request's properties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Properties {
    /// The request type's name (the `type` label of the MDS's request counters).
    pub name: &'static str,
    /// Sending it twice does no harm, so a client may resend it after a lost reply (through an MDS
    /// restart): reads, and changes whose repetition is a no-op (a close of a handle the MDS no longer
    /// knows, a max-merged size report, attributes set to given values, an open without O_TRUNC — at
    /// worst a handle kept until the MDS restarts, a batch whose entries are recognised when resent).
    /// `Ping` is not resent: it is how tools check the MDS is up.
    pub idempotent: bool,
    pub senders: Senders,
    pub touches: Touches,
    pub handler: Handler,
}

impl Properties {
    /// Whether the MDS keeps the reply to a numbered call of this request ([`MdsCall::seq`]) and answers
    /// a resend with it: changes of the namespace (and leases) that are not idempotent. `Ping` changes
    /// nothing and is not resent.
    pub fn replies_cached(&self) -> bool {
        !self.idempotent && matches!(self.handler, Handler::Namespace | Handler::Lease) && self.name != "Ping"
    }
}

macro_rules! table {
    ($( $variant:ident $fields:tt => $idempotent:expr, $senders:ident, $touches:expr, $handler:ident; )*) => {
        /// Every request type's name, in table order.
        pub const NAMES: &[&str] = &[$( stringify!($variant) ),*];

        impl MdsRequest {
            /// This request's properties (the table above).
            pub fn properties(&self) -> Properties {
                #[allow(unused_variables)]
                match self {
                    $( MdsRequest::$variant $fields => Properties {
                        name: stringify!($variant),
                        idempotent: $idempotent,
                        senders: Senders::$senders,
                        touches: $touches,
                        handler: Handler::$handler,
                    }, )*
                }
            }
        }
    };
}

use Touches::{Any, Inode, Nothing};

table! {
    // request                                    idempotent  senders      touches              handler
    Ping {}                                    => false, Anyone,      Nothing,             Namespace;
    Lookup { parent, .. }                      => true,  Clients,     Inode(*parent),      Namespace;
    LookupPath { .. }                          => true,  Clients,     Any,                 Namespace;
    GetAttr { ino }                            => true,  Clients,     Inode(*ino),         Namespace;
    SetAttr { ino, .. }                        => true,  Clients,     Inode(*ino),         Namespace;
    Create { parent, .. }                      => false, Clients,     Inode(*parent),      Namespace;
    Mkdir { parent, .. }                       => false, Clients,     Inode(*parent),      Namespace;
    Symlink { parent, .. }                     => false, Clients,     Inode(*parent),      Namespace;
    Readlink { ino }                           => true,  Clients,     Inode(*ino),         Namespace;
    Link { new_parent, .. }                    => false, Clients,     Inode(*new_parent),  Namespace;
    Unlink { parent, .. }                      => false, Clients,     Inode(*parent),      Namespace;
    Rmdir { .. }                               => false, Clients,     Any,                 Namespace;
    Rename { .. }                              => false, Clients,     Any,                 Namespace;
    ReadDir { ino, .. }                        => true,  Clients,     Inode(*ino),         Namespace;
    Open { ino, flags }                        => !flags.truncate, Clients, Inode(*ino),     Namespace;
    Close { .. }                               => true,  Clients,     Nothing,             Namespace;
    CreateOpen { parent, .. }                  => false, Clients,     Inode(*parent),      Namespace;
    Sync {}                                    => true,  Clients,     Nothing,             Namespace;
    ReportWrite { .. }                         => true,  Clients,     Nothing,             Namespace;
    StatFs {}                                  => true,  Clients,     Nothing,             Namespace;
    Access { ino, .. }                         => true,  Clients,     Inode(*ino),         Namespace;
    GetXattr { ino, .. }                       => true,  Clients,     Inode(*ino),         Namespace;
    SetXattr { ino, .. }                       => false, Clients,     Inode(*ino),         Namespace;
    ListXattr { ino }                          => true,  Clients,     Inode(*ino),         Namespace;
    RemoveXattr { ino, .. }                    => false, Clients,     Inode(*ino),         Namespace;
    GetLayout { ino }                          => true,  Clients,     Inode(*ino),         Namespace;
    SetLayout { ino, .. }                      => false, Clients,     Inode(*ino),         Namespace;
    DsReport { .. }                            => false, DataServers, Nothing,             Stats;
    ClusterStatus {}                           => true,  Clients,     Nothing,             Namespace;
    LocalityReport { .. }                      => false, DataServers, Nothing,             Orchestrator;
    SetOrchestratorMode { .. }                 => false, Admins,      Nothing,             Orchestrator;
    OrchestratorStatus {}                      => true,  Clients,     Nothing,             Orchestrator;
    LeaseDir { .. }                            => false, Clients,     Nothing,             Lease;
    DirBatch { .. }                            => true,  Clients,     Nothing,             Lease;
    KeepAlive {}                               => true,  Clients,     Nothing,             Session;
    Watch { .. }                               => true,  Clients,     Nothing,             Caches;
    Fsck { .. }                                => false, Admins,      Nothing,             Namespace;
    PlacementStatus {}                         => true,  Clients,     Nothing,             Namespace;
    Declare { .. }                             => false, Clients,     Any,                 Namespace;
    PeriodicRegister { .. }                    => true,  Clients,     Nothing,             Periodic;
    PeriodicPoll { .. }                        => true,  Clients,     Nothing,             Periodic;
    PeriodicLeave {}                           => true,  Clients,     Nothing,             Periodic;
    PeriodicStatus {}                          => true,  Clients,     Nothing,             Periodic;
    DsJobReport { .. }                         => false, DataServers, Nothing,             Jobs;
    JobStats { .. }                            => true,  Clients,     Nothing,             Jobs;
    PeriodicIo { .. }                          => true,  Clients,     Nothing,             Periodic;
    SetCompositeLayout { ino, .. }             => false, Clients,     Inode(*ino),         Namespace;
    InstantiateExtent { ino, .. }              => true,  Clients,     Inode(*ino),         Namespace;
    IonJobReport { .. }                        => false, ForwardingNodes, Nothing,         Jobs;
    Append { ino, .. }                         => false, Clients,     Inode(*ino),         Namespace;
    MirrorMarkStale { .. }                     => true,  DataServers, Nothing,             Mirror;
    MirrorFences { .. }                        => true,  DataServers, Nothing,             Mirror;
    MirrorStatus {}                            => true,  Clients,     Nothing,             Mirror;
    MirrorLease { .. }                         => true,  Clients,     Nothing,             Mirror;
    DsRemove { .. }                            => true,  Admins,      Nothing,             Mirror;
    Raft { .. }                                => false, MetadataServers, Nothing,         Replica;
    ReplicaStatus {}                           => true,  Clients,     Nothing,             Replica;
    Reopen { .. }                              => true,  Clients,     Nothing,             Session;
    ChangeReplicas { .. }                      => true,  Admins,      Nothing,             Replica;
    Lock { .. }                                => true,  Clients,     Nothing,             Locks;
    TestLock { .. }                            => true,  Clients,     Nothing,             Locks;
    CancelLock { .. }                          => true,  Clients,     Nothing,             Locks;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{OpenFlags, OrchestratorMode, SetAttrs};

    #[test]
    fn names_are_unique_and_match_the_variants() {
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len());
        assert_eq!(MdsRequest::StatFs.properties().name, "StatFs");
        assert_eq!(MdsRequest::Lookup { parent: 1, name: "x".into() }.properties().name, "Lookup");
    }

    #[test]
    fn what_requests_touch() {
        assert_eq!(MdsRequest::Lookup { parent: 10, name: "x".into() }.properties().touches, Touches::Inode(10));
        let link = MdsRequest::Link { ino: 5, new_parent: 11, new_name: "y".into() };
        assert_eq!(link.properties().touches, Touches::Inode(11));
        let walk = MdsRequest::LookupPath { path: "/a".into(), follow: true };
        assert_eq!(walk.properties().touches, Touches::Any);
        assert_eq!(MdsRequest::Close { ino: 3, handle: 1, size: None, wrote: false }.properties().touches, Nothing);
    }

    #[test]
    fn only_repeatable_requests_are_idempotent() {
        let open = |truncate| MdsRequest::Open { ino: 1, flags: OpenFlags { read: true, write: true, truncate } };
        assert!(open(false).properties().idempotent);
        assert!(!open(true).properties().idempotent, "O_TRUNC twice may cut data written in between");
        assert!(MdsRequest::SetAttr { ino: 1, set: SetAttrs::default() }.properties().idempotent);
        assert!(!MdsRequest::Unlink { parent: 1, name: "x".into() }.properties().idempotent);
        assert!(!MdsRequest::Ping.properties().idempotent, "tools ping to see whether the MDS is up");
    }

    #[test]
    fn who_handles_what() {
        assert_eq!(MdsRequest::Lookup { parent: 1, name: "x".into() }.properties().handler, Handler::Namespace);
        assert_eq!(MdsRequest::LeaseDir { dir: 1 }.properties().handler, Handler::Lease);
        assert_eq!(MdsRequest::KeepAlive.properties().handler, Handler::Session, "answered after an eviction");
        assert_eq!(MdsRequest::DsReport(Default::default()).properties().handler, Handler::Stats);
        assert_eq!(MdsRequest::OrchestratorStatus.properties().handler, Handler::Orchestrator);
        assert_eq!(MdsRequest::PeriodicStatus.properties().handler, Handler::Periodic);
        assert_eq!(MdsRequest::JobStats { job: None }.properties().handler, Handler::Jobs);
    }

    #[test]
    fn who_may_send_what() {
        let user = Caller { uid: 1000, gid: 1000, groups: vec![] };
        let set = MdsRequest::SetOrchestratorMode { mode: OrchestratorMode::Off }.properties().senders;
        assert!(set.admit(Role::Client, &user).is_err());
        assert!(set.admit(Role::Admin, &user).is_ok());
        assert!(set.admit(Role::Client, &Caller::root()).is_ok());
        assert!(set.admit(Role::Ds, &Caller::root()).is_err(), "a data server is no administrator");
        let report = MdsRequest::LocalityReport(Default::default()).properties().senders;
        assert!(report.admit(Role::Client, &user).is_err());
        assert!(report.admit(Role::Ds, &user).is_ok());
        let lookup = MdsRequest::Lookup { parent: 1, name: "x".into() }.properties().senders;
        assert!(lookup.admit(Role::Ds, &Caller::root()).is_err(), "data servers may only ping and report");
        assert!(lookup.admit(Role::Ion, &user).is_ok());
        assert!(MdsRequest::Ping.properties().senders.admit(Role::Ds, &user).is_ok());
    }
}
