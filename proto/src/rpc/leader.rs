//! The metadata service as its clients see it (issue 37): one [`RpcPeer`] per metadata replica, in
//! configuration order, and the one believed to lead. A call goes to the leader; a replica that does
//! not lead answers [`ErrorCode::NotLeader`] (naming the leader when it knows it, see
//! [`LEADER_HINT`]) without applying the request, and one that is dead fails at the transport. The call
//! then moves on — to the named leader, else the next replica — and is sent again when that is safe:
//! always after NotLeader; after a transport failure only when the request never left or may be
//! repeated ([`MdsCall::resendable`]: idempotent, or numbered for the reply cache). A round of
//! replicas that all failed pauses (50 ms doubling to [`ROUND_PAUSE_MAX`]) while an election runs, for up to
//! [`FAILOVER_PATIENCE`].
//!
//! A leader named at an address no configuration lists (a replica added at run time, `tessera mds add`)
//! becomes one more replica to try: clients follow the group as it changes, as long as one replica they
//! were configured with still answers.
//!
//! With one metadata server this is [`MdsCall::send`] to it, unchanged.

use super::RpcPeer;
use crate::error::{ErrorCode, FsError, FsResult, LEADER_HINT};
use crate::msg::{MdsCall, MdsReply, MdsRequest};
use crate::rpc::Tuning;
use crate::tls::NodeIdentity;
use crate::types::Role;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long a call looks for a leader among the replicas before it fails: a leader's death is noticed
/// within an election timeout, and a new one is elected within a few more.
pub const FAILOVER_PATIENCE: Duration = Duration::from_secs(15);

/// How long a resendable call waits for the leader's answer before asking the other replicas whether
/// one of them serves now (and again every as long).
pub const LEADER_CHECK: Duration = Duration::from_millis(700);

/// The longest pause between two rounds of replicas without a leader: a new leader is found at most this
/// long after it serves (a round costs one call per replica: a few a second while an election runs).
pub const ROUND_PAUSE_MAX: Duration = Duration::from_millis(250);

/// Makes the peer for a replica's `host:port`.
type MakePeer = Box<dyn Fn(&str) -> FsResult<RpcPeer> + Send + Sync>;

/// Most replicas a client learns of beyond its configuration (a bound on what answers can make it hold).
const MAX_LEARNT: usize = 16;

/// The metadata replicas' peers and the current leader's position among them.
pub struct MdsPeers {
    /// The configured replicas, then those learnt from answers (never removed: positions stay valid).
    peers: RwLock<Vec<(String, Arc<RpcPeer>)>>,
    configured: usize,
    make: Option<MakePeer>,
    leader: AtomicUsize,
    patience: Duration,
}

impl MdsPeers {
    /// The replicas `(configured address, peer)`, in configuration order; the first is tried first.
    pub fn new(peers: Vec<(String, Arc<RpcPeer>)>) -> FsResult<MdsPeers> {
        if peers.is_empty() {
            return Err(FsError::invalid("no metadata server to talk to"));
        }
        let configured = peers.len();
        Ok(MdsPeers {
            peers: RwLock::new(peers),
            configured,
            make: None,
            leader: AtomicUsize::new(0),
            patience: FAILOVER_PATIENCE,
        })
    }

    /// Makes peers for replicas learnt from answers with `make`.
    fn learning(self, make: MakePeer) -> MdsPeers {
        MdsPeers { make: Some(make), ..self }
    }

    /// Peers for every `host:port` of `hosts` (the configured replicas), through `endpoint`.
    pub fn to_hosts(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        hosts: &[&str],
        tuning: Tuning,
    ) -> FsResult<MdsPeers> {
        let mut peers = Vec::new();
        for h in hosts {
            peers.push((h.to_string(), Arc::new(RpcPeer::to_host(endpoint.clone(), id, Role::Mds, h, tuning)?)));
        }
        Ok(MdsPeers::new(peers)?.learning(MdsPeers::maker(endpoint, id, tuning)))
    }

    fn maker(endpoint: &quinn::Endpoint, id: &NodeIdentity, tuning: Tuning) -> MakePeer {
        let (endpoint, id) = (endpoint.clone(), id.clone());
        Box::new(move |host: &str| RpcPeer::to_host(endpoint.clone(), &id, Role::Mds, host, tuning))
    }

    /// Peers for every resolved address of `addrs` (the configured replicas), through `endpoint`.
    pub fn to_addrs(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        addrs: &[std::net::SocketAddr],
        tuning: Tuning,
    ) -> FsResult<MdsPeers> {
        let mut peers = Vec::new();
        for a in addrs {
            peers.push((a.to_string(), Arc::new(RpcPeer::new(endpoint.clone(), id, Role::Mds, *a, tuning)?)));
        }
        Ok(MdsPeers::new(peers)?.learning(MdsPeers::maker(endpoint, id, tuning)))
    }

    /// How long [`MdsPeers::send`] looks for a leader (default [`FAILOVER_PATIENCE`]).
    pub fn with_patience(self, patience: Duration) -> MdsPeers {
        MdsPeers { patience, ..self }
    }

    /// Every replica `(address, peer)`: the configured ones in configuration order, then those learnt
    /// (to ask each one itself).
    pub fn each(&self) -> Vec<(String, Arc<RpcPeer>)> {
        self.peers.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many replicas were configured (the first of [`MdsPeers::each`]).
    pub fn configured(&self) -> usize {
        self.configured
    }

    fn len(&self) -> usize {
        self.peers.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Replica `i`'s peer.
    fn peer(&self, i: usize) -> Arc<RpcPeer> {
        let peers = self.peers.read().unwrap_or_else(|p| p.into_inner());
        peers[i % peers.len()].1.clone()
    }

    /// The peer believed to lead.
    pub fn leader(&self) -> Arc<RpcPeer> {
        self.peer(self.leader.load(Ordering::Relaxed))
    }

    /// The position of the replica at `addr` (`host:port`), learning it if it is not known yet (a replica
    /// added since the configuration was written). None: not known, and not learnt (no way to make
    /// peers, or [`MAX_LEARNT`] learnt already).
    pub fn learn(&self, addr: &str) -> Option<usize> {
        let known = |peers: &[(String, Arc<RpcPeer>)]| {
            peers.iter().position(|(a, p)| a == addr || p.addr().to_string() == addr)
        };
        if let Some(i) = known(&self.peers.read().unwrap_or_else(|p| p.into_inner())) {
            return Some(i);
        }
        let make = self.make.as_ref()?;
        let mut peers = self.peers.write().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = known(&peers) {
            return Some(i);
        }
        if peers.len() >= self.configured + MAX_LEARNT {
            return None;
        }
        let peer = make(addr).ok()?;
        peers.push((addr.to_string(), Arc::new(peer)));
        Some(peers.len() - 1)
    }

    /// Where a NotLeader answer's detail says the leader is.
    fn hinted(&self, detail: &str) -> Option<usize> {
        let at = detail.rfind(LEADER_HINT)? + LEADER_HINT.len();
        let addr = detail[at..].split_whitespace().next()?;
        self.learn(addr)
    }

    /// One try at the leader, and at the leader it names if it answers NotLeader; a transport failure
    /// moves the next call on to the next replica. For periodic calls (reports, fence lists) whose
    /// next round is their retry.
    pub async fn send_once(&self, call: &MdsCall) -> FsResult<MdsReply> {
        let n = self.len();
        let i = self.leader.load(Ordering::Relaxed) % n;
        let to = match self.peer(i).try_call_chunked::<_, MdsReply>(call, Bytes::new()).await {
            Ok(Ok((reply, _))) => return Ok(reply),
            Ok(Err(e)) if e.code == ErrorCode::NotLeader && n > 1 => {
                let to = self.hinted(&e.detail).filter(|&n| n != i).unwrap_or((i + 1) % self.len());
                let _ = self.leader.compare_exchange(i, to, Ordering::Relaxed, Ordering::Relaxed);
                to
            }
            Ok(Err(e)) => return Err(e),
            Err(f) => {
                let _ = self.leader.compare_exchange(i, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
                return Err(f.error);
            }
        };
        Ok(self.peer(to).call::<_, MdsReply>(call, Bytes::new()).await?.0)
    }

    /// `attempt` (a call to replica `i`), unless it has no answer after [`LEADER_CHECK`] and another
    /// replica serves meanwhile (asked every [`LEADER_CHECK`]): then `Err` with that replica. A leader
    /// killed or cut off mid-call is otherwise noticed only when its connection times out (the idle
    /// timeout, 5 s); the call, resendable, goes to the new leader at once.
    async fn unless_moved<T>(
        &self,
        i: usize,
        call: &MdsCall,
        attempt: impl std::future::Future<Output = T>,
    ) -> Result<T, usize> {
        tokio::pin!(attempt);
        loop {
            tokio::select! {
                r = &mut attempt => return Ok(r),
                _ = tokio::time::sleep(LEADER_CHECK) => {
                    if let Some(j) = self.serving_elsewhere(i, call).await {
                        return Err(j);
                    }
                }
            }
        }
    }

    /// A replica other than `i` that serves (leads, caught up), asking them all at once (each for at
    /// most [`LEADER_CHECK`]).
    async fn serving_elsewhere(&self, i: usize, call: &MdsCall) -> Option<usize> {
        let ask = MdsCall { req: MdsRequest::ReplicaStatus, seq: 0, ..call.clone() };
        let peers = self.each();
        let asks = peers.iter().enumerate().filter(|(j, _)| *j != i).map(|(j, (_, p))| {
            let ask = &ask;
            async move {
                let r = tokio::time::timeout(LEADER_CHECK, p.try_call_chunked::<_, MdsReply>(ask, Bytes::new())).await;
                matches!(r, Ok(Ok(Ok((MdsReply::Replica(s), _)))) if s.serving).then_some(j)
            }
        });
        futures::future::join_all(asks).await.into_iter().flatten().next()
    }

    /// Sends `call` to the leader, finding it first if need be (see the module doc).
    pub async fn send(&self, call: &MdsCall) -> FsResult<MdsReply> {
        if self.len() == 1 {
            return call.send(&self.peer(0)).await;
        }
        let deadline = tokio::time::Instant::now() + self.patience;
        let mut pause = Duration::from_millis(50);
        let mut tried = 0;
        let mut last: FsError;
        loop {
            let n = self.len();
            let i = self.leader.load(Ordering::Relaxed) % n;
            let peer = self.peer(i);
            let attempt = peer.try_call_chunked::<_, MdsReply>(call, Bytes::new());
            let outcome = match call.resendable() {
                true => self.unless_moved(i, call, attempt).await,
                false => Ok(attempt.await),
            };
            let outcome = match outcome {
                Ok(o) => o,
                Err(moved) => {
                    let _ = self.leader.compare_exchange(i, moved, Ordering::Relaxed, Ordering::Relaxed);
                    continue;
                }
            };
            let next = match outcome {
                Ok(Ok((reply, _))) => return Ok(reply),
                Ok(Err(e)) if e.code == ErrorCode::NotLeader => {
                    let n = self.hinted(&e.detail).filter(|&n| n != i);
                    last = e;
                    n
                }
                Ok(Err(e)) => return Err(e),
                Err(f) if f.sent && !call.resendable() => return Err(f.error),
                Err(f) => {
                    last = f.error;
                    None
                }
            };
            tried += 1;
            let to = match next {
                Some(j) => j,
                None => (i + 1) % n,
            };
            // Only if no other task moved it meanwhile.
            let _ = self.leader.compare_exchange(i, to, Ordering::Relaxed, Ordering::Relaxed);
            if next.is_none() && tried >= n {
                // A whole round without a leader: an election is under way, or every replica is down.
                if tokio::time::Instant::now() + pause >= deadline {
                    return Err(FsError::new(
                        last.code,
                        format!("no metadata replica leads (tried {} for {:?}): {}", n, self.patience, last.detail),
                    ));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(ROUND_PAUSE_MAX);
                tried = 0;
            }
        }
    }
}
