//! The group-commit thread: applies the pending overlay to sled and flushes it, on request (concurrent
//! callers share one fsync) and every [`COMMIT_INTERVAL`] while the journal (or the replicated log)
//! holds changes, then retires the journal segments the flush made redundant.

use super::error::{StoreError, StoreResult};
use super::overlay::{apply_pending, Overlay};
use crate::journal::{self, Journal};
use sled::{Db, Tree};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

/// How often journaled changes are committed to the database on disk (and so survive a power loss).
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// Group commit on a dedicated thread: on request, and every [`COMMIT_INTERVAL`] while the journal
/// holds changes. (sled 0.34's `flush_async` deadlocks under concurrent callers — sled issue
/// #1308 — so we batch waiters onto synchronous `flush` calls ourselves.)
pub(super) struct GroupCommit {
    /// Tickets handed out; a flush that starts after ticket t was taken covers t.
    next: Arc<AtomicU64>,
    pending: Arc<(Mutex<FlushCtl>, Condvar)>,
    done: watch::Receiver<FlushState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct FlushCtl {
    wanted: bool,
    shutdown: bool,
}

#[derive(Clone, Default)]
struct FlushState {
    /// Highest ticket known durable (or failed, with `error`).
    done: u64,
    error: Option<Arc<StoreError>>,
}

impl GroupCommit {
    pub(super) fn start(
        db: Db,
        trees: Vec<Tree>,
        overlay: Arc<Overlay>,
        journal: Option<Arc<Mutex<Journal>>>,
        interval: Duration,
        watermark: Arc<AtomicU64>,
        periodic: bool,
    ) -> StoreResult<GroupCommit> {
        let next = Arc::new(AtomicU64::new(0));
        let pending = Arc::new((Mutex::new(FlushCtl::default()), Condvar::new()));
        let (tx, done) = watch::channel(FlushState::default());
        let (n, p) = (next.clone(), pending.clone());
        let jdir = journal.as_ref().map(|j| j.lock().unwrap_or_else(|e| e.into_inner()).dir().to_path_buf());
        let thread = std::thread::Builder::new()
            .name("mds-flush".into())
            .spawn(move || loop {
                let (requested, last) = {
                    let (m, cv) = &*p;
                    let mut ctl = m.lock().unwrap_or_else(|e| e.into_inner());
                    if !ctl.wanted && !ctl.shutdown {
                        ctl = match periodic {
                            true => cv.wait_timeout(ctl, interval).unwrap_or_else(|e| e.into_inner()).0,
                            false => cv.wait(ctl).unwrap_or_else(|e| e.into_inner()),
                        };
                    }
                    // Shutting down: one last commit empties the journal.
                    (std::mem::take(&mut ctl.wanted) || ctl.shutdown, ctl.shutdown)
                };
                let target = n.load(Ordering::SeqCst);
                // Segments up to `retire` hold only changes the flush below makes durable.
                let retire = match &journal {
                    Some(j) => match j.lock().unwrap_or_else(|e| e.into_inner()).rotate() {
                        Ok(r) => r,
                        Err(e) => {
                            warn!("metadata journal: cannot start a new segment: {e}");
                            None
                        }
                    },
                    None => None,
                };
                if !requested && retire.is_none() && overlay.is_empty() {
                    continue; // periodic wake-up with nothing journaled
                }
                // The rotation took the journal's lock, so every change journaled before it is pending
                // (or applied) now: the flush below covers the segments up to `retire`.
                let applied = apply_pending(&trees, &overlay, watermark.load(Ordering::SeqCst));
                let error = applied.and_then(|()| db.flush().map(|_| ()).map_err(StoreError::from)).err();
                let error = error.map(Arc::new);
                if let (None, Some(upto), Some(dir)) = (&error, retire, &jdir) {
                    if let Err(e) = journal::retire(dir, upto) {
                        warn!("metadata journal: cannot delete committed segments: {e}");
                    }
                }
                tx.send_replace(FlushState { done: target, error });
                if last {
                    return;
                }
            })
            .map_err(StoreError::FlushThread)?;
        Ok(GroupCommit { next, pending, done, thread: Some(thread) })
    }

    pub(super) async fn flush(&self) -> StoreResult<()> {
        let ticket = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        {
            let (m, cv) = &*self.pending;
            m.lock().unwrap_or_else(|e| e.into_inner()).wanted = true;
            cv.notify_one();
        }
        let mut rx = self.done.clone();
        let state = rx.wait_for(|s| s.done >= ticket).await.map_err(|_| StoreError::FlushStopped)?.clone();
        match state.error {
            Some(e) => Err(StoreError::Flush(e)),
            None => Ok(()),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        {
            let (m, cv) = &*self.pending;
            m.lock().unwrap_or_else(|e| e.into_inner()).shutdown = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::journal;
    use crate::store::tests::{block_on, journaled};
    use crate::store::T;
    use std::path::Path;

    #[test]
    fn flush_retires_journal_segments() {
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"v".to_vec());
        tx.commit().unwrap();
        let jdir = dir.path().join("journal");
        let bytes = |d: &Path| {
            journal::segments(d).unwrap().iter().map(|(_, p)| std::fs::metadata(p).unwrap().len()).sum::<u64>()
        };
        assert!(bytes(&jdir) > 0);
        block_on(s.flush()).unwrap();
        assert_eq!(bytes(&jdir), 0, "a durable database needs no journal");
    }
}
