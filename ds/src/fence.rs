//! The data server's fences (issue 36): which of its objects are mirrored replicas not in sync, as the
//! MDS last said. A client call about a mirrored stripe (a read, or a write to it as the primary) is
//! refused for such an object (`Stale`: the client reads another replica or refreshes its layout), and
//! every mirrored client call is refused (`Busy`) while the list is older than the fence lease —
//! counted from when this server asked, so the MDS, which waits the lease from when it answered, never
//! acknowledges a write this server missed while this server could still serve the old bytes. Calls a
//! primary passes on are never fenced: a resyncing replica is written, and a stale one may be.
//!
//! The MDS side, and why: `mds/src/namespace/mirror.rs`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_proto::error::ErrorCode;
use tessera_proto::msg::{MdsCall, MdsReply, MdsRequest};
use tessera_proto::rpc::{self, MdsPeers, Tuning};
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{Caller, DsId, FsError, FsResult, ObjectId, Origin};
use tracing::{debug, info};

pub struct Fences {
    state: Mutex<State>,
    /// `None`: never fenced (a data server without an MDS, in tests).
    lease: Option<Duration>,
}

#[derive(Default)]
struct State {
    version: u64,
    objects: HashSet<ObjectId>,
    /// When the request of the last answer was sent.
    fresh_at: Option<Instant>,
}

impl Fences {
    /// Fences kept with the MDS, refused until the first answer and after `lease` without one.
    pub fn new(lease: Duration) -> Fences {
        Fences { state: Mutex::default(), lease: Some(lease) }
    }

    /// Nothing fenced, ever (a data server on its own).
    pub fn open() -> Fences {
        Fences { state: Mutex::default(), lease: None }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a client may read `object` here, or write it as its primary.
    pub fn check(&self, object: ObjectId) -> FsResult<()> {
        let Some(lease) = self.lease else { return Ok(()) };
        let s = self.state();
        match s.fresh_at {
            Some(at) if at.elapsed() <= lease => {}
            _ => {
                return Err(FsError::new(
                    ErrorCode::Busy,
                    format!(
                        "this data server has not heard from the MDS for {} ms: it serves no mirrored calls",
                        lease.as_millis()
                    ),
                ))
            }
        }
        if s.objects.contains(&object) {
            return Err(FsError::new(ErrorCode::Stale, format!("the replica object {object} here is not in sync")));
        }
        Ok(())
    }

    /// The version of the list held (0: none yet).
    pub fn known(&self) -> u64 {
        self.state().version
    }

    /// The MDS answered a request sent at `sent`: version `version`, its list (`None`: unchanged).
    pub fn update(&self, sent: Instant, version: u64, objects: Option<Vec<ObjectId>>) {
        let mut s = self.state();
        if let Some(o) = objects {
            if o.len() != s.objects.len() || version != s.version {
                info!(version, stale_replicas = o.len(), "replica fences updated");
            }
            s.objects = o.into_iter().collect();
        }
        s.version = version;
        s.fresh_at = Some(s.fresh_at.map_or(sent, |t| t.max(sent)));
    }

    /// Replica objects fenced now.
    pub fn count(&self) -> usize {
        self.state().objects.len()
    }
}

/// The identity of the object store in `data_dir` (`store-id`, made on first use): a store that
/// starts empty gets a new one, and the MDS then counts every replica it held as lost.
pub fn store_identity(data_dir: &std::path::Path) -> std::io::Result<u64> {
    let path = data_dir.join("store-id");
    match std::fs::read_to_string(&path) {
        Ok(s) => s.trim().parse().map_err(|e| std::io::Error::other(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)?;
            let mut b = [0u8; 8];
            // SAFETY: getrandom writes at most b.len() bytes into b.
            let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
            let id = if n == 8 {
                u64::from_ne_bytes(b)
            } else {
                tessera_proto::types::unix_us() ^ u64::from(std::process::id()) << 40
            }
            .max(1);
            let tmp = data_dir.join("store-id.tmp");
            std::fs::write(&tmp, format!("{id}\n"))?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// Asks the MDS for this server's fences every quarter of the lease.
pub fn spawn_fence_task(
    fences: Arc<Fences>,
    ds: DsId,
    store: u64,
    identity: &NodeIdentity,
    mds: &[SocketAddr],
    tuning: Tuning,
    lease: Duration,
) -> FsResult<tokio::task::JoinHandle<()>> {
    let endpoint = rpc::client_endpoint(mds.first().is_some_and(|a| a.is_ipv6()))?;
    let every = (lease / 4).max(Duration::from_millis(25));
    // A call that takes longer than the lease is of no use.
    let tuning = Tuning { call_timeout: lease, connect_timeout: tuning.connect_timeout.min(lease), ..tuning };
    let peer = MdsPeers::to_addrs(&endpoint, identity, mds, tuning)?;
    Ok(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let sent = Instant::now();
            let req = MdsRequest::MirrorFences { ds, known: fences.known(), store };
            let call = MdsCall { caller: Caller::root(), origin: Origin::default(), req, seq: 0 };
            match peer.send_once(&call).await {
                Ok(MdsReply::Fences { version, objects }) => fences.update(sent, version, objects),
                Ok(other) => debug!("MDS answered MirrorFences with {other:?}"),
                Err(e) => debug!(mds = %peer.leader().addr(), "fences not fetched: {e}"),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_served_before_the_first_answer_nor_after_the_lease() {
        let f = Fences::new(Duration::from_millis(50));
        assert_eq!(f.check(1).unwrap_err().code, ErrorCode::Busy);
        f.update(Instant::now(), 7, Some(vec![2]));
        f.check(1).unwrap();
        assert_eq!(f.check(2).unwrap_err().code, ErrorCode::Stale);
        // An unchanged list keeps the objects and renews the lease.
        f.update(Instant::now(), 7, None);
        assert_eq!(f.check(2).unwrap_err().code, ErrorCode::Stale);
        assert_eq!(f.known(), 7);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(f.check(1).unwrap_err().code, ErrorCode::Busy, "the lease ran out");
        // The lease counts from when the request was sent, not from the answer.
        f.update(Instant::now() - Duration::from_millis(60), 8, Some(vec![]));
        assert_eq!(f.check(1).unwrap_err().code, ErrorCode::Busy);
        f.update(Instant::now(), 8, None);
        f.check(2).unwrap();
        Fences::open().check(2).unwrap();
    }
}
