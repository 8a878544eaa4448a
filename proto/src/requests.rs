//! The table of metadata requests: each [`MdsRequest`]'s properties, in one place. The MDS takes from it
//! the request's name (metrics), who may send it and what it touches (directory leases); clients take
//! whether it may be sent again after a lost reply. A new request is one line here plus its handler.

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
    /// Sends the call to the MDS at `peer`. Requests the table marks idempotent are retried through an
    /// MDS restart (for up to [`RESTART_PATIENCE`]); the others are sent once, since a lost reply would
    /// turn a success into EEXIST/ENOENT on the retry. Clients and forwarding nodes send this way.
    pub async fn send(&self, peer: &RpcPeer) -> FsResult<MdsReply> {
        let (reply, _payload): (MdsReply, Bytes) = if self.req.properties().idempotent {
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
}

impl Senders {
    /// Whether a peer of `role` calling as `caller` may send the request.
    pub fn admit(self, role: Role, caller: &Caller) -> Result<(), String> {
        let ok = match self {
            Senders::Anyone => true,
            Senders::DataServers => role == Role::Ds,
            Senders::Clients => role != Role::Ds,
            Senders::Admins => role == Role::Admin || (role != Role::Ds && caller.uid == 0),
            Senders::ForwardingNodes => role == Role::Ion,
        };
        if ok {
            return Ok(());
        }
        Err(match self {
            Senders::DataServers => format!("only data servers send reports (peer is {role})"),
            Senders::Admins => "this needs the admin certificate or a root caller".to_string(),
            Senders::ForwardingNodes => format!("only forwarding nodes send this report (peer is {role})"),
            _ => format!("a peer with role {role} may only ping and report"),
        })
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
}

macro_rules! table {
    ($( $variant:ident $fields:tt => $idempotent:expr, $senders:ident, $touches:expr; )*) => {
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
                    }, )*
                }
            }
        }
    };
}

use Touches::{Any, Inode, Nothing};

table! {
    // request                                    idempotent  senders      touches
    Ping {}                                    => false, Anyone,      Nothing;
    Lookup { parent, .. }                      => true,  Clients,     Inode(*parent);
    LookupPath { .. }                          => true,  Clients,     Any;
    GetAttr { ino }                            => true,  Clients,     Inode(*ino);
    SetAttr { ino, .. }                        => true,  Clients,     Inode(*ino);
    Create { parent, .. }                      => false, Clients,     Inode(*parent);
    Mkdir { parent, .. }                       => false, Clients,     Inode(*parent);
    Symlink { parent, .. }                     => false, Clients,     Inode(*parent);
    Readlink { ino }                           => true,  Clients,     Inode(*ino);
    Link { new_parent, .. }                    => false, Clients,     Inode(*new_parent);
    Unlink { parent, .. }                      => false, Clients,     Inode(*parent);
    Rmdir { .. }                               => false, Clients,     Any;
    Rename { .. }                              => false, Clients,     Any;
    ReadDir { ino, .. }                        => true,  Clients,     Inode(*ino);
    Open { ino, flags }                        => !flags.truncate, Clients, Inode(*ino);
    Close { .. }                               => true,  Clients,     Nothing;
    CreateOpen { parent, .. }                  => false, Clients,     Inode(*parent);
    Sync {}                                    => true,  Clients,     Nothing;
    ReportWrite { .. }                         => true,  Clients,     Nothing;
    StatFs {}                                  => true,  Clients,     Nothing;
    Access { ino, .. }                         => true,  Clients,     Inode(*ino);
    GetXattr { ino, .. }                       => true,  Clients,     Inode(*ino);
    SetXattr { ino, .. }                       => false, Clients,     Inode(*ino);
    ListXattr { ino }                          => true,  Clients,     Inode(*ino);
    RemoveXattr { ino, .. }                    => false, Clients,     Inode(*ino);
    GetLayout { ino }                          => true,  Clients,     Inode(*ino);
    SetLayout { ino, .. }                      => false, Clients,     Inode(*ino);
    DsReport { .. }                            => false, DataServers, Nothing;
    ClusterStatus {}                           => true,  Clients,     Nothing;
    LocalityReport { .. }                      => false, DataServers, Nothing;
    SetOrchestratorMode { .. }                 => false, Admins,      Nothing;
    OrchestratorStatus {}                      => true,  Clients,     Nothing;
    LeaseDir { .. }                            => false, Clients,     Nothing;
    DirBatch { .. }                            => true,  Clients,     Nothing;
    KeepAlive {}                               => true,  Clients,     Nothing;
    Fsck { .. }                                => false, Admins,      Nothing;
    PlacementStatus {}                         => true,  Clients,     Nothing;
    Declare { .. }                             => false, Clients,     Any;
    PeriodicRegister { .. }                    => true,  Clients,     Nothing;
    PeriodicPoll { .. }                        => true,  Clients,     Nothing;
    PeriodicLeave {}                           => true,  Clients,     Nothing;
    PeriodicStatus {}                          => true,  Clients,     Nothing;
    DsJobReport { .. }                         => false, DataServers, Nothing;
    JobStats { .. }                            => true,  Clients,     Nothing;
    PeriodicIo { .. }                          => true,  Clients,     Nothing;
    SetCompositeLayout { ino, .. }             => false, Clients,     Inode(*ino);
    InstantiateExtent { ino, .. }              => true,  Clients,     Inode(*ino);
    IonJobReport { .. }                        => false, ForwardingNodes, Nothing;
    Append { ino, .. }                         => false, Clients,     Inode(*ino);
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
