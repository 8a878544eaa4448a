//! The second route: through a forwarding node (ION, `specs/forwarding.md`). A client goes through the
//! ION chosen by [`ClusterConfig::client_ion`] for metadata and data alike; when that ION is gone (its
//! connection cannot be made, or closes after `ion_options.failover_ms` of silence; a slow reply on a
//! live connection is the caller's error, not a reason to leave) the client moves on to the next configured ION, and after the last to direct access if
//! `ion_options.failover_direct` allows it. It stays where it moved to (a restarted client goes back
//! to its chosen ION).
//!
//! What is resent after a failure: data requests always (a read, or a write of the same bytes at the
//! same place, changes nothing when repeated; the client has not acknowledged it to anyone yet), and
//! metadata requests when the request table says they are idempotent or they were never sent (no
//! connection could be made). Any other metadata request fails with the transport error, once; the
//! next one goes to the new route.

use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::config::{ClusterConfig, IonChoice};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::msg::{DsCall, DsReply, IonCall, IonReply, MdsCall, MdsReply};
use tessera_proto::rpc::{RpcPeer, TransportFailure, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::types::Role;

/// `current` when the client talks to the servers directly.
const DIRECT: usize = usize::MAX;

/// One forwarding node.
pub struct Ion {
    pub name: String,
    pub peer: RpcPeer,
}

/// The forwarding nodes of the cluster and the one this client uses now.
pub struct Forwarding {
    ions: Vec<Ion>,
    /// Index into `ions`, or [`DIRECT`].
    current: AtomicUsize,
    failover_direct: bool,
}

/// Where a request is to go next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    Ion(usize),
    Direct,
}

impl Forwarding {
    /// The forwarding nodes of `cfg` (`None`: it has none), requests starting at `choice`.
    pub fn new(
        endpoint: &quinn::Endpoint,
        id: &NodeIdentity,
        cfg: &ClusterConfig,
        tuning: Tuning,
        choice: IonChoice,
    ) -> FsResult<Option<Arc<Forwarding>>> {
        if cfg.ion.is_empty() {
            return Ok(None);
        }
        let first = match choice {
            IonChoice::Ion(k) => k,
            IonChoice::Direct => DIRECT,
        };
        // A silent ION is given up after failover_ms (keep-alives run at a third of it).
        let silence = Duration::from_millis(cfg.ion_options.failover_ms.max(300));
        let tuning = Tuning { idle_timeout: silence, ..tuning };
        let ions = cfg
            .ion
            .iter()
            .map(|n| {
                Ok(Ion {
                    name: n.name.clone(),
                    peer: RpcPeer::to_host(endpoint.clone(), id, Role::Ion, &n.addr, tuning)?,
                })
            })
            .collect::<FsResult<Vec<_>>>()?;
        Ok(Some(Arc::new(Forwarding {
            ions,
            current: AtomicUsize::new(first),
            failover_direct: cfg.ion_options.failover_direct,
        })))
    }

    /// Where requests go now.
    pub fn hop(&self) -> Hop {
        match self.current.load(Ordering::Relaxed) {
            DIRECT => Hop::Direct,
            k => Hop::Ion(k),
        }
    }

    /// The forwarding node in use (its name), if any.
    pub fn current_name(&self) -> Option<&str> {
        match self.hop() {
            Hop::Ion(k) => self.ions.get(k).map(|i| i.name.as_str()),
            Hop::Direct => None,
        }
    }

    /// ION `k` failed: move on from it (if no other request moved already). Returns the new hop, or
    /// `None` when there is nowhere left to go.
    fn failed(&self, k: usize, e: &FsError, tried: usize) -> Option<Hop> {
        let next = if tried < self.ions.len() {
            (k + 1) % self.ions.len()
        } else if self.failover_direct {
            DIRECT
        } else {
            return None;
        };
        if self.current.compare_exchange(k, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let to = if next == DIRECT {
                "direct access".to_string()
            } else {
                format!("forwarding node {}", self.ions[next].name)
            };
            tracing::warn!("forwarding node {} failed ({e}); moving to {to}", self.ions[k].name);
        }
        Some(self.hop())
    }

    /// Sends `call` through the current ION, failing over on transport errors. `Ok(None)`: the route
    /// is now direct and the caller sends it itself. `resend`: whether a request that may have reached
    /// a failed ION may be sent again.
    async fn forward(&self, call: &IonCall, payload: Bytes, resend: bool) -> FsResult<Option<(IonReply, Vec<Bytes>)>> {
        let mut tried = 0;
        loop {
            let k = match self.hop() {
                Hop::Direct => return Ok(None),
                Hop::Ion(k) => k,
            };
            tried += 1;
            match self.ions[k].peer.try_call_chunked::<IonCall, IonReply>(call, payload.clone()).await {
                Ok(answer) => return answer.map(Some),
                // A call that timed out on a connection still alive is a slow answer, not a dead
                // forwarding node (it may be waiting on a data server that died): no failover.
                Err(TransportFailure { sent: true, error, .. }) if self.ions[k].peer.is_connected().await => {
                    return Err(error);
                }
                Err(TransportFailure { sent, error, .. }) => {
                    let moved = self.failed(k, &error, tried);
                    if moved.is_none() || (sent && !resend) {
                        return Err(error);
                    }
                }
            }
        }
    }

    /// A data call through the ION (`Ok(None)`: go direct). `app_len`: the size of the application's
    /// read or write it is part of.
    pub async fn ds_call(
        &self,
        call: &DsCall,
        payload: Bytes,
        app_len: u64,
    ) -> FsResult<Option<(DsReply, Vec<Bytes>)>> {
        let ion_call = IonCall::Ds { call: call.clone(), app_len };
        match self.forward(&ion_call, payload, true).await? {
            None => Ok(None),
            Some((IonReply::Ds(r), chunks)) => Ok(Some((r, chunks))),
            Some((r, _)) => Err(FsError::protocol(format!("forwarding node answered a data request with {r:?}"))),
        }
    }

    /// A metadata call through the ION (`Ok(None)`: go direct).
    pub async fn mds_call(&self, call: &MdsCall, resend: bool) -> FsResult<Option<MdsReply>> {
        match self.forward(&IonCall::Mds(call.clone()), Bytes::new(), resend).await? {
            None => Ok(None),
            Some((IonReply::Mds(r), _)) => Ok(Some(r)),
            Some((r, _)) => Err(FsError::protocol(format!("forwarding node answered a metadata request with {r:?}"))),
        }
    }

    /// An ION's own call (status, scheduler switch) to ION `k`, no failover.
    pub async fn ion_call(&self, k: usize, call: &IonCall) -> FsResult<IonReply> {
        let ion = self.ions.get(k).ok_or_else(|| FsError::invalid(format!("no forwarding node {k}")))?;
        Ok(ion.peer.call::<IonCall, IonReply>(call, Bytes::new()).await?.0)
    }
}
