//! Background worker draining the destroy log: removes unlinked files' objects from the data servers
//! and deletes each log entry once its data server confirmed; retries while a server is unreachable.

use crate::dsclient::DataServers;
use crate::store::{DestroyEntry, Store};
use futures::stream::{self, StreamExt};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::msg::MAX_REMOVE_OBJECTS;
use tessera_proto::{DsId, ObjectId};
use tokio::sync::Notify;
use tracing::{debug, warn};

const RETRY: Duration = Duration::from_secs(2);
/// After a wake-up, let more unlinks arrive: a burst (an `rm -r`, mdtest) is then drained with one
/// metadata commit instead of one per file.
const GATHER: Duration = Duration::from_millis(100);
/// Remove requests in flight at once.
const INFLIGHT: usize = 8;

/// One remove request: the objects of several log entries, all on one data server.
struct Removal {
    ds: DsId,
    keys: Vec<Vec<u8>>,
    objects: Vec<ObjectId>,
}

/// The log's entries as remove requests: one per data server for a burst of unlinks (a file striped
/// over every server has an entry per server), each at most [`MAX_REMOVE_OBJECTS`] objects. An entry is
/// never split, so a request's success retires its entries whole.
fn removals(entries: Vec<(Vec<u8>, DestroyEntry)>) -> Vec<Removal> {
    let mut per: BTreeMap<DsId, Vec<Removal>> = BTreeMap::new();
    for (key, e) in entries {
        let list = per.entry(e.ds).or_default();
        match list.last_mut() {
            Some(r) if r.objects.len() + e.objects.len() <= MAX_REMOVE_OBJECTS => {
                r.keys.push(key);
                r.objects.extend(e.objects);
            }
            _ => list.push(Removal { ds: e.ds, keys: vec![key], objects: e.objects }),
        }
    }
    per.into_values().flatten().collect()
}

/// One pass over the log. Returns whether entries remain (a data server failed).
pub async fn drain_once(store: &Store, data: &dyn DataServers) -> bool {
    let entries = match store.destroy_entries() {
        Ok(e) => e,
        Err(e) => {
            warn!("destroy log unreadable: {e}");
            return true;
        }
    };
    if entries.is_empty() {
        return false;
    }
    // The unlinks that queued these must be on disk first: after a power loss they must not come
    // back pointing at destroyed objects. Replicated, on a majority first: a failover must not bring
    // back a file whose objects are gone (its unlink was never acknowledged).
    if let Err(e) = async {
        store.settle().await?;
        store.flush().await
    }
    .await
    {
        warn!("destroy log: metadata commit failed, destroying later: {}", tessera_proto::error::chain(&e));
        return true;
    }
    let mut remaining = false;
    let mut done = stream::iter(removals(entries))
        .map(|mut r| async move {
            let objects = std::mem::take(&mut r.objects);
            let n = objects.len();
            let res = data.remove(r.ds, objects).await;
            (r, n, res)
        })
        .buffer_unordered(INFLIGHT);
    while let Some((r, n, res)) = done.next().await {
        match res {
            Ok(()) => {
                debug!(ds = r.ds, objects = n, "objects destroyed");
                let removed =
                    crate::offload::offload(|| store.remove_destroy_entries(r.keys.iter().map(Vec::as_slice)));
                if let Err(err) = removed {
                    warn!("destroy log: {err}");
                    remaining = true;
                }
            }
            Err(err) => {
                debug!(ds = r.ds, "destroy deferred: {err}");
                remaining = true;
            }
        }
    }
    remaining
}

/// Runs forever: drains at start (replaying what a crash left), when woken, and every [`RETRY`]
/// while entries remain.
pub fn spawn(store: Arc<Store>, data: Arc<dyn DataServers>, wake: Arc<Notify>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if drain_once(&store, data.as_ref()).await {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(RETRY) => {}
                }
            } else {
                wake.notified().await;
                tokio::time::sleep(GATHER).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: u8, ds: DsId, objects: std::ops::Range<ObjectId>) -> (Vec<u8>, DestroyEntry) {
        (vec![key], DestroyEntry { ds, objects: objects.collect() })
    }

    #[test]
    fn a_burst_becomes_one_request_per_data_server() {
        // Four files striped over two servers: two requests, not eight.
        let entries = (0..4u8).flat_map(|f| [entry(2 * f, 0, f as u64..f as u64 + 1), entry(2 * f + 1, 1, 10..11)]);
        let rs = removals(entries.collect());
        assert_eq!(rs.len(), 2);
        assert_eq!((rs[0].ds, rs[0].objects.clone(), rs[0].keys.len()), (0, vec![0, 1, 2, 3], 4));
        assert_eq!((rs[1].ds, rs[1].keys.len()), (1, 4));
    }

    #[test]
    fn requests_stay_within_the_limit_and_never_split_an_entry() {
        let big = MAX_REMOVE_OBJECTS as u64 / 2 + 1;
        let rs = removals(vec![entry(0, 3, 0..big), entry(1, 3, big..2 * big), entry(2, 3, 2 * big..2 * big + 1)]);
        assert_eq!(rs.len(), 2, "the second entry does not fit beside the first");
        assert!(rs.iter().all(|r| r.objects.len() <= MAX_REMOVE_OBJECTS));
        assert_eq!(rs[0].keys, vec![vec![0]]);
        assert_eq!(rs[1].keys, vec![vec![1], vec![2]]);
        assert_eq!(rs[1].objects.len() as u64, big + 1);
    }
}
