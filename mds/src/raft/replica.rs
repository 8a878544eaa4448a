//! One metadata replica of a replicated metadata service (issue 37; design: `results/issue37/`).
//!
//! Every replica runs openraft over its log ([`LogStore`]) and database ([`StoreSm`]) and answers on the
//! metadata server's address: the replicated log's messages between replicas (`MdsRequest::Raft`, the
//! openraft request in the payload, only from metadata-server certificates) and `ReplicaStatus` itself;
//! every other request goes to the metadata service once this replica leads and serves it, and is
//! answered `NotLeader` (naming the leader's address after [`LEADER_HINT`] when known) until then.
//!
//! Taking the lead ([`Replica::lead`]): once elected, the replica confirms its leadership with a majority
//! and applies every committed entry (`ensure_linearizable`), then its database is the service's: it
//! proposes each commit from then on ([`Store::lead`]) and builds the service (the namespace and the
//! rest, their soft state new: clients reassert it). A replica that stops leading (a higher term seen:
//! it was cut off or paused, and another was elected) ends ([`Replica::deposed`]): its changes a majority
//! did not take are only in its memory, so its process is restarted (by `tessera up`, systemd or Docker)
//! and comes back as a follower from what is durable. It never acknowledged them: a change is answered
//! only once committed (`Store::settle`).

use super::log::LogStore;
use super::state::StoreSm;
use super::{LogCmd, MdsRaft, NodeId};
use crate::server::MdsService;
use crate::store::{Replicator, Store};
use bytes::Bytes;
use futures::FutureExt;
use openraft::error::{NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use tessera_proto::error::{ErrorCode, LEADER_HINT};
use tessera_proto::msg::{
    MdsCall, MdsReply, MdsRequest, RaftRpc, ReplicaChange, ReplicaMember, ReplicaStatus, MAX_REPLICA_ADDR, PROMOTE_LAG,
};
use tessera_proto::rpc::{PeerInfo, RpcPeer, Service, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::wire::MAX_PAYLOAD;
use tessera_proto::{Caller, FsError, FsResult, Origin, Role};
use tracing::{info, warn};

/// The replicated log's timing: heartbeats every 50 ms; a follower that hears none for 0.3–0.6 s (its
/// election timeout, drawn once per process) after openraft's leader lease (the maximum election
/// timeout, 0.6 s: followers refuse votes that long after the leader's last message) stands for
/// election. Measured (`results/issue37/README.md`, `timing-ab`): a killed leader replaced in 1.2 s
/// (median; max 3.7 s over 30 kills) against 2.4 s (max 6.8 s) with 100 ms / 0.6–1.2 s, and no live
/// leader deposed under load on this two-core machine with either.
pub fn raft_config() -> Config {
    Config {
        cluster_name: "tessera-mds".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        install_snapshot_timeout: 10_000,
        max_payload_entries: 256,
        // A snapshot is the whole database, in memory: taken every 20 000 entries, the log before it
        // kept for 1000 more so a replica a little behind catches up from the log.
        snapshot_policy: SnapshotPolicy::LogsSinceLast(20_000),
        max_in_snapshot_log_to_keep: 1000,
        snapshot_max_chunk_size: 8 << 20,
        ..Default::default()
    }
}

fn encode_big<T: Serialize>(v: &T) -> Result<Vec<u8>, FsError> {
    let b = tessera_proto::wire::encode(v).map_err(|e| FsError::protocol(format!("raft message: {e}")))?;
    if b.len() > MAX_PAYLOAD {
        return Err(FsError::protocol(format!("raft message of {} bytes", b.len())));
    }
    Ok(b)
}

fn decode_big<T: DeserializeOwned>(b: &[u8]) -> Result<T, FsError> {
    tessera_proto::wire::decode_bounded::<T, { MAX_PAYLOAD * 2 }>(b)
        .map_err(|e| FsError::protocol(format!("raft message: {e}")))
}

/// The network between replicas: each replica's [`RpcPeer`] through the metadata server's endpoint, made
/// on first use from the address the group's membership names (so a replica added at run time, at an
/// address no configuration lists, is reached too) and kept while that address stays the same.
pub struct Network {
    endpoint: quinn::Endpoint,
    identity: NodeIdentity,
    tuning: Tuning,
    /// Each replica's address and peer, by id.
    peers: BTreeMap<NodeId, (String, Arc<RpcPeer>)>,
}

impl Network {
    pub fn new(endpoint: quinn::Endpoint, identity: NodeIdentity, tuning: Tuning) -> Network {
        Network { endpoint, identity, tuning, peers: BTreeMap::new() }
    }

    /// The peer for replica `target` at `addr`: the one made before for that address, else a new one.
    fn peer(&mut self, target: NodeId, addr: &str) -> Option<Arc<RpcPeer>> {
        if let Some((a, p)) = self.peers.get(&target) {
            if a == addr {
                return Some(p.clone());
            }
        }
        match RpcPeer::to_host(self.endpoint.clone(), &self.identity, Role::Mds, addr, self.tuning) {
            Ok(p) => {
                let p = Arc::new(p);
                self.peers.insert(target, (addr.to_string(), p.clone()));
                Some(p)
            }
            Err(e) => {
                warn!(replica = target, addr, "no link to the replica: {e}");
                None
            }
        }
    }
}

impl RaftNetworkFactory<MdsRaft> for Network {
    type Network = PeerLink;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerLink {
        PeerLink { target, peer: self.peer(target, &node.addr) }
    }
}

/// The link to one replica.
pub struct PeerLink {
    target: NodeId,
    peer: Option<Arc<RpcPeer>>,
}

/// What a proposal's receiver yields.
type ProposalOutcome = tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<MdsRaft>>;

type RpcErr<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl PeerLink {
    async fn send<Req, Resp, E>(&self, rpc: RaftRpc, req: &Req, option: &RPCOption) -> Result<Resp, RpcErr<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: FsError| RPCError::Unreachable(Unreachable::new(&e));
        let peer = self
            .peer
            .as_ref()
            .ok_or_else(|| unreachable(FsError::invalid(format!("replica {}: no usable address", self.target))))?;
        let payload = encode_big(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let call = MdsCall { caller: Caller::root(), origin: Origin::default(), req: MdsRequest::Raft { rpc }, seq: 0 };
        let sent = tokio::time::timeout(option.hard_ttl(), peer.call::<_, MdsReply>(&call, Bytes::from(payload)));
        let bytes = match sent.await {
            Ok(Ok((MdsReply::Raft, bytes))) => bytes,
            Ok(Ok((other, _))) => {
                return Err(RPCError::Network(NetworkError::new(&FsError::protocol(format!(
                    "replica {} answered a raft message with {other:?}",
                    self.target
                )))))
            }
            Ok(Err(e)) => return Err(unreachable(e)),
            Err(_) => {
                let e = FsError::new(ErrorCode::TimedOut, format!("no answer within {:?}", option.hard_ttl()));
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        let answer: Result<Resp, RaftError<NodeId, E>> =
            decode_big(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<MdsRaft> for PeerLink {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<MdsRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        let n = rpc.entries.len() as u64;
        match self.send(RaftRpc::AppendEntries, &rpc, &option).await {
            // Too big for one message: openraft sends fewer entries at a time.
            Err(RPCError::Network(e)) if n > 1 && e.to_string().contains("bytes") => {
                Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(n / 2)))
            }
            r => r,
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<MdsRaft>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<openraft::error::InstallSnapshotError>> {
        self.send(RaftRpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        self.send(RaftRpc::Vote, &rpc, &option).await
    }
}

/// One replica: its Raft, its database and, while it leads, the metadata service.
pub struct Replica {
    id: NodeId,
    raft: Raft<MdsRaft>,
    sm: StoreSm,
    store: Arc<Store>,
    /// The metadata service, once this replica leads and is caught up.
    serving: OnceLock<Arc<MdsService>>,
    /// While leading: when a majority last acknowledged this replica's leadership (as openraft's metrics
    /// last said, noted when they said it: a paused process wakes up with an old time here).
    quorum_at: Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

/// How often a leader proposes the reply-cache answers no change took along ([`Store::flush_deferred`]).
const DEFERRED_REPLIES: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a restarted replica waits before it may stand for election: longer than the leader may take
/// to reach it again (a connection attempt to it while it was down times out after 2 s, then openraft
/// backs off 0.5 s) plus its election timeout (with 3 s, one live leader in about 50 kills was deposed
/// by a replica restarted after 1.5 s down).
pub const ELECTION_HOLD: std::time::Duration = std::time::Duration::from_secs(5);

/// How long after a majority last acknowledged it a leader answers without asking again: well within
/// the time followers refuse to vote after hearing from it (openraft's leader lease, the maximum
/// election timeout, 0.6 s), so another replica cannot have been elected meanwhile; heartbeats (every
/// 50 ms) keep it fresh.
pub const LEASE: std::time::Duration = std::time::Duration::from_millis(250);

/// A new replica's id and address checked: ids start at 1, the address is `host:port` within
/// [`MAX_REPLICA_ADDR`] bytes.
fn check_replica_addr(id: NodeId, addr: &str) -> FsResult<()> {
    if id == 0 {
        return Err(FsError::invalid("replica ids start at 1"));
    }
    if addr.len() > MAX_REPLICA_ADDR {
        return Err(FsError::invalid(format!(
            "a replica address of {} bytes (at most {MAX_REPLICA_ADDR})",
            addr.len()
        )));
    }
    let port = addr.rsplit_once(':').filter(|(h, _)| !h.is_empty()).and_then(|(_, p)| p.parse::<u16>().ok());
    match port {
        Some(p) if p != 0 => Ok(()),
        _ => Err(FsError::invalid(format!("replica address {addr:?}: expected host:port"))),
    }
}

/// The last log index replica `id` is known to hold, as a leader's metrics say (None: not known).
fn held_by(m: &openraft::RaftMetrics<NodeId, BasicNode>, id: NodeId) -> Option<u64> {
    m.replication.as_ref()?.get(&id).copied().flatten().map(|l| l.index)
}

/// How long a voter being removed is given to learn it is a learner now, before it leaves the group.
const REMOVED_HEARS: std::time::Duration = std::time::Duration::from_secs(3);

impl Replica {
    /// Starts replica `id` of the group `addrs` (id → address) over `store` (opened with
    /// [`Store::open_replicated`]) and the log in `log_dir`. Replica 1 initialises a group that was never
    /// started, with every replica as a voter; the others wait to hear from a leader.
    pub async fn start(
        id: NodeId,
        addrs: BTreeMap<NodeId, String>,
        store: Arc<Store>,
        log_dir: &std::path::Path,
        sync: bool,
        network: Network,
    ) -> anyhow::Result<Arc<Replica>> {
        let log = LogStore::open(log_dir, sync)
            .map_err(|e| anyhow::anyhow!("replicated log in {}: {e}", log_dir.display()))?;
        let sm = StoreSm::open(store.clone())?;
        let config = Arc::new(raft_config().validate()?);
        let raft = Raft::new(id, config, network, log, sm.clone()).await?;
        // Only the first replica initialises a new group: several doing it at once stand for election
        // together, and one elected may be deposed in the same term a moment later.
        if id == 1 && !raft.is_initialized().await? {
            let members: BTreeMap<NodeId, BasicNode> =
                addrs.iter().map(|(&n, a)| (n, BasicNode::new(a.clone()))).collect();
            match raft.initialize(members).await {
                Ok(()) => info!(replica = id, replicas = addrs.len(), "replicated metadata initialised"),
                Err(e) => info!(replica = id, "replicated metadata: {e}"),
            }
        } else {
            // Any other start may stand for election only after ELECTION_HOLD: the leader's link to a
            // restarted replica may take a moment to be made again, and one whose election timer ran out
            // meanwhile would depose a live leader with its higher term (seen: a second leader change and
            // pause of service after a killed replica's restart).
            raft.runtime_config().elect(false);
            let r = raft.clone();
            tokio::spawn(async move {
                tokio::time::sleep(ELECTION_HOLD).await;
                r.runtime_config().elect(true);
            });
        }
        let quorum_at = Arc::new(std::sync::Mutex::new(None));
        let (mut metrics, noted) = (raft.metrics(), quorum_at.clone());
        tokio::spawn(async move {
            let mut seen = (ServerState::Learner, 0, None);
            while metrics.changed().await.is_ok() {
                let (ack, now) = {
                    let m = metrics.borrow_and_update();
                    (m.millis_since_quorum_ack, (m.state, m.current_term, m.current_leader))
                };
                let at = ack.and_then(|ms| std::time::Instant::now().checked_sub(std::time::Duration::from_millis(ms)));
                *noted.lock().unwrap_or_else(|p| p.into_inner()) = at;
                // Its role and the leader it knows, as they change (openraft's own log is off by default).
                if now != seen {
                    info!(replica = id, state = ?now.0, term = now.1, leader = ?now.2, "replica role");
                    seen = now;
                }
            }
        });
        Ok(Arc::new(Replica { id, raft, sm, store, serving: OnceLock::new(), quorum_at }))
    }

    /// Waits until this replica is elected and caught up, then makes its database the service's: every
    /// commit is proposed from now on. Returns the term it leads in; [`Replica::serve`] follows.
    pub async fn take_lead(&self) -> anyhow::Result<u64> {
        let mut metrics = self.raft.metrics();
        let term = loop {
            let (state, term) = {
                let m = metrics.borrow_and_update();
                (m.state, m.current_term)
            };
            if state == ServerState::Leader {
                // Leadership confirmed by a majority, and every entry committed before applied here.
                match self.raft.ensure_linearizable().await {
                    Ok(_) => break term,
                    Err(e) => info!(replica = self.id, term, "elected, not confirmed yet: {e}"),
                }
            }
            metrics.changed().await.map_err(|_| anyhow::anyhow!("the replicated log stopped"))?;
        };
        let stream = loop {
            let s: u64 = rand::random();
            if s != 0 {
                break s;
            }
        };
        self.sm.set_own_stream(stream);
        let raft = self.raft.clone();
        // A proposal's outcome reaches the store as its entry is applied (`StoreSm::committed`); the
        // receivers are awaited in order here only to log a refusal (openraft warns of one dropped).
        let (outcomes, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProposalOutcome>();
        let id = self.id;
        tokio::spawn(async move {
            while let Some(outcome) = rx.recv().await {
                if let Ok(Err(e)) = outcome.await {
                    warn!(replica = id, "a metadata change was not committed: {e}");
                }
            }
        });
        let propose = Box::new(move |seq: u64, writes| {
            match raft.client_write_ff(LogCmd { stream, seq, writes }).now_or_never() {
                Some(Ok(outcome)) => {
                    let _ = outcomes.send(outcome);
                    Ok(())
                }
                Some(Err(e)) => Err(e.to_string()),
                None => Err("the replicated log did not take the change at once".into()),
            }
        });
        self.store.lead(Replicator::new(propose, self.sm.committed()))?;
        // Reply-cache answers no change took along (the last ones before a pause) proposed by themselves.
        let store = Arc::downgrade(&self.store);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DEFERRED_REPLIES);
            while let Some(store) = store.upgrade() {
                if let Err(e) = store.flush_deferred() {
                    warn!(replica = id, "reply-cache answers not proposed: {e}");
                    return;
                }
                drop(store);
                tick.tick().await;
            }
        });
        info!(replica = self.id, term, "leading the metadata service");
        Ok(term)
    }

    /// Serves metadata requests with `svc` (after [`Replica::take_lead`]).
    pub fn serve(&self, svc: Arc<MdsService>) {
        let _ = self.serving.set(svc);
    }

    /// Completes when this replica, leading in `term`, no longer does.
    pub async fn deposed(&self, term: u64) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            {
                let m = metrics.borrow_and_update();
                if m.state != ServerState::Leader || m.current_term != term {
                    return format!(
                        "replica {} no longer leads (it led in term {term}; now term {}, {:?})",
                        self.id, m.current_term, m.state
                    );
                }
            }
            if metrics.changed().await.is_err() {
                return format!("replica {}: the replicated log stopped", self.id);
            }
        }
    }

    /// Whether this replica still leads, as far as it can tell: a majority acknowledged it within the
    /// [`LEASE`], or confirms it now. A leader cut off or paused while another was elected answers
    /// nothing from its own state (its reads could be stale), and steps down once it hears of the new term.
    async fn confirmed(&self) -> bool {
        let at = *self.quorum_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_some_and(|t| t.elapsed() < LEASE) {
            return true;
        }
        self.raft.ensure_linearizable().await.is_ok()
    }

    /// This replica's state (`ReplicaStatus`).
    pub fn status(&self) -> ReplicaStatus {
        let m = self.raft.metrics().borrow().clone();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let membership = m.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        let members: Vec<ReplicaMember> = membership
            .nodes()
            .map(|(&id, n)| ReplicaMember { id, addr: n.addr.clone(), voter: voters.contains(&id) })
            .collect();
        let role = match members.iter().any(|r| r.id == self.id) {
            true => role,
            false => "not-member",
        };
        let matched = m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(&n, l)| (n, l.map_or(0, |l| l.index))).collect())
            .unwrap_or_default();
        ReplicaStatus {
            id: self.id,
            role: role.into(),
            term: m.current_term,
            log_index: m.last_log_index.unwrap_or(0),
            applied_index: m.last_applied.map_or(0, |l| l.index),
            leader: m.current_leader,
            matched,
            serving: self.serving.get().is_some(),
            members,
        }
    }

    /// The answer to a metadata request while this replica does not serve.
    fn not_leader(&self) -> FsError {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader.filter(|&l| l != self.id);
        let addr = leader.and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.addr.clone()));
        match addr {
            Some(addr) => FsError::new(
                ErrorCode::NotLeader,
                format!("metadata replica {} does not lead; {LEADER_HINT}{addr}", self.id),
            ),
            None => FsError::new(
                ErrorCode::NotLeader,
                format!("metadata replica {} does not serve: an election or its catching up is under way", self.id),
            ),
        }
    }

    /// Applies a change of the group's membership (this replica leads): each is a joint-consensus change
    /// of the replicated log, committed before the answer. A change already made (the request resent
    /// after a failover) answers as if made now.
    async fn change(&self, change: ReplicaChange) -> FsResult<ReplicaStatus> {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership().clone();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        let done = match change {
            ReplicaChange::Add { id, addr } => {
                check_replica_addr(id, &addr)?;
                match membership.get_node(&id) {
                    Some(n) if n.addr == addr => None,
                    Some(n) => {
                        return Err(FsError::new(
                            ErrorCode::Exists,
                            format!("replica {id} is a member already, at {}: remove it first", n.addr),
                        ))
                    }
                    None => Some(self.raft.add_learner(id, BasicNode::new(addr), false).await),
                }
            }
            ReplicaChange::Promote { id } if voters.contains(&id) => None,
            ReplicaChange::Promote { id } => {
                if membership.get_node(&id).is_none() {
                    return Err(FsError::not_found(format!("replica {id} is not a member: add it first")));
                }
                let last = m.last_log_index.unwrap_or(0);
                let matched = held_by(&m, id).unwrap_or(0);
                if last.saturating_sub(matched) > PROMOTE_LAG {
                    return Err(FsError::new(
                        ErrorCode::Busy,
                        format!("replica {id} holds the log up to {matched} of {last}: promote it once caught up"),
                    ));
                }
                Some(self.raft.change_membership(ChangeMembers::AddVoterIds([id].into()), false).await)
            }
            ReplicaChange::Remove { id } if membership.get_node(&id).is_none() => None,
            ReplicaChange::Remove { id } if voters.contains(&id) => {
                if voters.len() == 1 {
                    return Err(FsError::invalid(format!("replica {id} is the group's last voter")));
                }
                // First a learner: a live replica removed at once may not hear of it (it is no longer
                // sent the log) and, still a voter in its own eyes, stand for election again and again.
                // A learner never does; once it holds the change (or after a moment, if it is dead),
                // it leaves the group.
                match self.raft.change_membership(ChangeMembers::RemoveVoters([id].into()), true).await {
                    Ok(r) => {
                        self.replicated_to(id, r.log_id.index, REMOVED_HEARS).await;
                        Some(self.raft.change_membership(ChangeMembers::RemoveNodes([id].into()), false).await)
                    }
                    Err(e) => Some(Err(e)),
                }
            }
            ReplicaChange::Remove { id } => {
                Some(self.raft.change_membership(ChangeMembers::RemoveNodes([id].into()), false).await)
            }
        };
        match done {
            None | Some(Ok(_)) => Ok(self.status()),
            Some(Err(RaftError::APIError(openraft::error::ClientWriteError::ForwardToLeader(_)))) => {
                Err(self.not_leader())
            }
            Some(Err(RaftError::APIError(openraft::error::ClientWriteError::ChangeMembershipError(e)))) => {
                Err(FsError::new(ErrorCode::Busy, format!("membership change refused: {e}")))
            }
            Some(Err(e)) => Err(FsError::new(ErrorCode::Io, format!("membership change: {e}"))),
        }
    }

    /// Waits until replica `id` holds the log up to `index` (as this leader knows it), at most `patience`.
    async fn replicated_to(&self, id: NodeId, index: u64, patience: std::time::Duration) -> bool {
        let mut metrics = self.raft.metrics();
        let wait = async {
            loop {
                if held_by(&metrics.borrow_and_update(), id).is_some_and(|i| i >= index) {
                    return true;
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(patience, wait).await.unwrap_or(false)
    }

    /// Answers one of the replicated log's messages (its payload), with the answer as the payload.
    async fn raft_message(&self, rpc: RaftRpc, payload: &[u8]) -> FsResult<Bytes> {
        let answer = match rpc {
            RaftRpc::Vote => encode_big(&self.raft.vote(decode_big(payload)?).await)?,
            RaftRpc::AppendEntries => encode_big(&self.raft.append_entries(decode_big(payload)?).await)?,
            RaftRpc::InstallSnapshot => encode_big(&self.raft.install_snapshot(decode_big(payload)?).await)?,
        };
        Ok(Bytes::from(answer))
    }

    /// Stops the replicated log (the process is ending).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            warn!(replica = self.id, "stopping the replicated log: {e}");
        }
    }
}

impl Service for Replica {
    type Request = MdsCall;
    type Reply = MdsReply;

    fn accepts(&self, role: Role) -> bool {
        matches!(role, Role::Client | Role::Admin | Role::Ion | Role::Mds | Role::Ds)
    }

    /// The replicated log's messages carry payloads (entries, snapshot chunks), only between replicas;
    /// metadata requests carry none.
    fn max_payload(&self, peer: &PeerInfo) -> usize {
        if peer.role == Role::Mds {
            MAX_PAYLOAD
        } else {
            0
        }
    }

    fn peer_revoked(&self, peer: &PeerInfo) {
        if let Some(svc) = self.serving.get() {
            svc.peer_revoked(peer);
        }
    }

    async fn handle(&self, peer: Arc<PeerInfo>, call: MdsCall, payload: Bytes) -> (FsResult<MdsReply>, Bytes) {
        match call.req {
            MdsRequest::Raft { rpc } => {
                if let Err(e) = call.req.properties().senders.admit(peer.role, &call.caller) {
                    return (Err(e.into()), Bytes::new());
                }
                match self.raft_message(rpc, &payload).await {
                    Ok(answer) => (Ok(MdsReply::Raft), answer),
                    Err(e) => (Err(e), Bytes::new()),
                }
            }
            MdsRequest::ReplicaStatus => (Ok(MdsReply::Replica(self.status())), Bytes::new()),
            MdsRequest::ChangeReplicas { ref change } => {
                if let Err(e) = call.req.properties().senders.admit(peer.role, &call.caller) {
                    return (Err(e.into()), Bytes::new());
                }
                let change = change.clone();
                let answer = match self.serving.get().is_some() && self.confirmed().await {
                    true => self.change(change).await.map(MdsReply::Replica),
                    false => Err(self.not_leader()),
                };
                (answer, Bytes::new())
            }
            _ => match self.serving.get() {
                Some(svc) if self.confirmed().await => svc.handle(peer, call, payload).await,
                _ => (Err(self.not_leader()), Bytes::new()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_replica_needs_an_id_and_a_host_and_port() {
        assert!(check_replica_addr(4, "10.0.0.6:7400").is_ok());
        assert!(check_replica_addr(4, "mds3.example:7400").is_ok());
        assert!(check_replica_addr(4, "[::1]:7400").is_ok());
        assert!(check_replica_addr(0, "10.0.0.6:7400").is_err(), "ids start at 1");
        for bad in ["10.0.0.6", ":7400", "h:0", "h:x", "h:70000", ""] {
            assert!(check_replica_addr(4, bad).is_err(), "{bad:?}");
        }
        let long = format!("{}:1", "h".repeat(MAX_REPLICA_ADDR));
        assert_eq!(check_replica_addr(4, &long).unwrap_err().code, ErrorCode::Invalid);
    }
}
