//! Background worker draining the destroy log: removes unlinked files' objects from the data servers
//! and deletes each log entry once its data server confirmed; retries while a server is unreachable.

use crate::dsclient::DataServers;
use crate::store::Store;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tracing::{debug, warn};

const RETRY: Duration = Duration::from_secs(2);
/// After a wake-up, let more unlinks arrive: a burst (an `rm -r`, mdtest) is then drained with one
/// metadata commit instead of one per file.
const GATHER: Duration = Duration::from_millis(100);
/// Remove requests in flight at once.
const BATCH: usize = 64;

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
    // back pointing at destroyed objects.
    if let Err(e) = store.flush().await {
        warn!("destroy log: metadata commit failed, destroying later: {e}");
        return true;
    }
    let mut remaining = false;
    for batch in entries.chunks(BATCH) {
        let results = futures::future::join_all(batch.iter().map(|(_, e)| data.remove(e.ds, e.objects.clone()))).await;
        for ((key, e), r) in batch.iter().zip(results) {
            match r {
                Ok(()) => {
                    debug!(ds = e.ds, objects = e.objects.len(), "objects destroyed");
                    if let Err(err) = store.remove_destroy_entry(key) {
                        warn!("destroy log: {err}");
                        remaining = true;
                    }
                }
                Err(err) => {
                    debug!(ds = e.ds, "destroy deferred: {err}");
                    remaining = true;
                }
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
