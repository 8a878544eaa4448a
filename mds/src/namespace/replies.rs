//! Exactly-once namespace changes (issue 37): a client's numbered request (`MdsCall::seq`) is applied
//! once however often it is sent. The reply cache lives in the store (`Meta` "reply" slots, see
//! `Store::replied`): the mark that a request was applied is written in its change's own transaction,
//! its answer right after; a resend is answered from there, across MDS restarts too.
//!
//! In memory, per client, the highest number this process has started serving: a number above it
//! cannot be a resend (its first send would have been seen here or, before a restart, left a mark in
//! the store, which the first request of a client after the start reads), so the common case — a new
//! request — skips the store lookup.

use super::Namespace;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use tessera_proto::msg::{MdsReply, MdsRequest, OpenFlags};
use tessera_proto::Caller;
use tessera_proto::{FsError, FsResult};
use tokio::sync::Notify;
use tracing::warn;

tokio::task_local! {
    /// Client and number of the numbered request this task serves: its commits record it.
    static REPLYING: (u64, u64);
}

/// The reply cache's state in memory.
#[derive(Default)]
pub(crate) struct Replies {
    inner: Mutex<Inner>,
    done: Notify,
}

#[derive(Default)]
struct Inner {
    /// (client, number) being served now.
    serving: HashSet<(u64, u64)>,
    /// Per client, the highest number seen by this process (or kept in the store when first seen).
    newest: HashMap<u64, u64>,
}

impl Replies {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets `client` (evicted: its replies are dropped from the store too).
    pub(crate) fn forget(&self, client: u64) {
        self.lock().newest.remove(&client);
    }
}

/// The numbered request the current task serves, if any (for `Namespace::commit`'s mark).
pub(super) fn current() -> Option<(u64, u64)> {
    REPLYING.try_with(|r| *r).ok()
}

impl Namespace {
    /// Serves `fut`, client `client`'s request number `seq` (`MdsCall::seq`; 0: not numbered), once:
    /// a resend is answered with the first answer from the reply cache, written in the store like any
    /// change (a mark in the change's own transaction, the answer right after), so it holds across an
    /// MDS restart; one that arrives while the first is served waits for it. A change marked applied
    /// whose answer was lost (the MDS, or the leading replica, stopped between the two writes) is
    /// answered from what it left when `again` (the caller and the request) allows
    /// ([`Namespace::reconstruct`]), else with an error saying so. A commit made off this task (an
    /// offloaded one) carries no mark.
    pub(crate) async fn serve_once<F>(
        &self,
        client: u64,
        seq: u64,
        fut: F,
        again: Option<(&Caller, &MdsRequest)>,
    ) -> FsResult<MdsReply>
    where
        F: std::future::Future<Output = FsResult<MdsReply>>,
    {
        if seq == 0 || client == 0 {
            return fut.await;
        }
        let r = &self.replies;
        let known = loop {
            let waiting = r.done.notified();
            {
                let mut inner = r.lock();
                if inner.serving.insert((client, seq)) {
                    break inner.newest.get(&client).copied();
                }
            }
            waiting.await;
        };
        struct Done<'a>(&'a Replies, (u64, u64));
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.lock().serving.remove(&self.1);
                self.0.done.notify_waiters();
            }
        }
        let _done = Done(r, (client, seq));
        // The first request of a client this process sees: the store says how far it got before.
        let newest = match known {
            Some(n) => n,
            None => self.store.newest_reply(client)?,
        };
        {
            let mut inner = r.lock();
            let n = inner.newest.entry(client).or_insert(newest);
            *n = (*n).max(newest).max(seq);
        }
        if seq <= newest {
            match self.store.replied(client, seq)? {
                Some(crate::store::Replied::Answer(r)) => return *r,
                Some(crate::store::Replied::Applied) => {
                    if let Some(r) = match again {
                        Some((c, req)) => self.reconstruct(c, client, req).await,
                        None => None,
                    } {
                        return r;
                    }
                    return Err(FsError::io(format!(
                        "request {seq} of this client was applied, but its reply was lost when the metadata \
                         server stopped: look at its result"
                    )));
                }
                None => {}
            }
        }
        let reply = REPLYING.scope((client, seq), fut).await;
        // Journaled with the next changes (or flushed with them in fsync mode): not waited for.
        if let Err(e) = self.store.record_reply(client, seq, &reply) {
            warn!(client = format_args!("{client:016x}"), seq, "reply not kept for a resend: {e}");
        }
        reply
    }

    /// The answer to a numbered request whose change was committed but whose answer was not (a leader
    /// died between the two commits; the client, which never had the answer, sent the request again):
    /// rebuilt from what the change left, as Lustre's MDT reconstructs a lost reply. A create is
    /// answered with the entry it made (as it is now), a removal with its parent's attributes, an open
    /// with a new handle (the first one's was in the old leader's memory only; O_TRUNC applied once);
    /// `None` for requests whose answer cannot be rebuilt.
    async fn reconstruct(&self, c: &Caller, client: u64, req: &MdsRequest) -> Option<FsResult<MdsReply>> {
        use MdsRequest as Q;
        let reopen = |flags: OpenFlags| OpenFlags { truncate: false, ..flags };
        Some(match req {
            Q::Create { parent, name, .. } | Q::Mkdir { parent, name, .. } | Q::Symlink { parent, name, .. } => {
                self.lookup(c, *parent, name)
            }
            Q::Link { new_parent, new_name, .. } => self.lookup(c, *new_parent, new_name),
            Q::Unlink { parent, .. } | Q::Rmdir { parent, .. } => self.getattr(*parent),
            Q::Rename { .. }
            | Q::SetXattr { .. }
            | Q::RemoveXattr { .. }
            | Q::SetLayout { .. }
            | Q::SetCompositeLayout { .. } => Ok(MdsReply::Ok),
            Q::Open { ino, flags } => self.open(c, client, *ino, reopen(*flags)).await,
            Q::CreateOpen { parent, name, flags, .. } => {
                let ino = match self.lookup(c, *parent, name) {
                    Ok(MdsReply::Entry { attr, .. }) => attr.ino,
                    Ok(other) => return Some(Err(FsError::io(format!("lookup answered {other:?}")))),
                    Err(e) => return Some(Err(e)),
                };
                match (self.open(c, client, ino, reopen(*flags)).await, self.getattr(*parent)) {
                    (Ok(MdsReply::Opened { attr, layout, handle, .. }), Ok(MdsReply::Attr(p))) => {
                        Ok(MdsReply::Opened { attr, layout, handle, parent: Some(p) })
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                    (other, _) => other,
                }
            }
            _ => return None,
        })
    }
}
