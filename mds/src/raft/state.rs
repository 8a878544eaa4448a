//! The replicated log's state machine: the MDS database ([`Store`]). Applying a committed entry adds its
//! writes to the store's overlay, where every read sees them and the group commit moves them into sled;
//! the applied log id and the membership are kept in the same way (`Meta` keys), so sled always holds a
//! state together with the entry it reached (older at worst: replaying physical writes again is harmless).
//!
//! The leader's own proposals are in its overlay already (added when committed locally, before the
//! majority had them), so applying one only moves the store's watermark: the overlay's commits up to it
//! may go into sled, later ones — not yet on a majority — stay pending. This holds because a new leader
//! proposes nothing before it has applied every entry of earlier terms (it serves only once caught up).
//!
//! A snapshot is the whole database ([`Store::export`], in memory); installing one replaces it.

use super::{LogCmd, MdsRaft, NodeId};
use crate::store::{Store, T};
use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

type SErr = StorageError<NodeId>;

/// `Meta` key: the last applied log id and the membership then.
const APPLIED_KEY: &[u8] = b"raft-applied";

type Applied = (Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>);

/// The store as openraft's state machine; clones share it.
#[derive(Clone)]
pub struct StoreSm {
    store: Arc<Store>,
    inner: Arc<Mutex<Inner>>,
    /// The overlay commit up to which everything is applied here (what `durable` waits for).
    committed: Arc<watch::Sender<u64>>,
}

struct Inner {
    applied: Applied,
    /// The proposal stream this replica leads with (0: it does not lead): entries of it are in the
    /// overlay already.
    own_stream: u64,
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

impl StoreSm {
    /// The state machine over `store`, which holds back from sled what is not applied yet.
    pub fn open(store: Arc<Store>) -> std::io::Result<StoreSm> {
        let applied: Applied = match store.read(T::Meta, APPLIED_KEY).map_err(io_err)? {
            Some(v) => tessera_proto::wire::decode(&v).map_err(io_err)?,
            None => (None, StoredMembership::default()),
        };
        store.set_watermark(0);
        Ok(StoreSm {
            store,
            inner: Arc::new(Mutex::new(Inner { applied, own_stream: 0, snapshot: None })),
            committed: Arc::new(watch::channel(0).0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries of proposal stream `stream` are this replica's own from now on (0: none).
    pub fn set_own_stream(&self, stream: u64) {
        self.lock().own_stream = stream;
    }

    /// Watches the overlay commit up to which everything is applied.
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// Keeps `applied` in the database (with the writes around it); returns its overlay commit.
    fn record_applied(&self, applied: &Applied) -> std::io::Result<u64> {
        let v = tessera_proto::wire::encode(applied).map_err(io_err)?;
        self.store.apply_replicated(&vec![(T::Meta as u8, APPLIED_KEY.to_vec(), Some(v))]).map_err(io_err)
    }

    fn advance(&self, upto: u64) {
        self.store.set_watermark(upto);
        self.committed.send_if_modified(|c| {
            let moved = upto > *c;
            *c = (*c).max(upto);
            moved
        });
    }
}

impl RaftSnapshotBuilder<MdsRaft> for StoreSm {
    async fn build_snapshot(&mut self) -> Result<Snapshot<MdsRaft>, SErr> {
        let (last_log_id, last_membership) = self.lock().applied.clone();
        let data = self.store.export().map_err(|e| StorageIOError::read_state_machine(&io_err(e)))?;
        let snapshot_id = format!("{}-{}", last_log_id.map_or(0, |l| l.index), data.len());
        let meta = SnapshotMeta { last_log_id, last_membership, snapshot_id };
        self.lock().snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<MdsRaft> for StoreSm {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<Applied, SErr> {
        Ok(self.lock().applied.clone())
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, SErr>
    where
        I: IntoIterator<Item = Entry<MdsRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let own = self.lock().own_stream;
        let mut out = Vec::new();
        let mut upto = *self.committed.borrow();
        let mut applied = self.lock().applied.clone();
        for e in entries {
            match e.payload {
                EntryPayload::Normal(LogCmd { stream, seq, .. }) if own != 0 && stream == own => upto = upto.max(seq),
                EntryPayload::Normal(cmd) => {
                    let c = self
                        .store
                        .apply_replicated(&cmd.writes)
                        .map_err(|err| StorageIOError::apply(e.log_id, &io_err(err)))?;
                    upto = upto.max(c);
                }
                EntryPayload::Membership(m) => applied.1 = StoredMembership::new(Some(e.log_id), m),
                EntryPayload::Blank => {}
            }
            applied.0 = Some(e.log_id);
            out.push(());
        }
        // The applied id goes with the writes (a follower: into sled with them; the leader: with its next
        // own commit that is applied).
        let c = self.record_applied(&applied).map_err(|e| StorageIOError::write_state_machine(&e))?;
        if own == 0 {
            upto = upto.max(c);
        }
        self.lock().applied = applied;
        self.advance(upto);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let data = snapshot.into_inner();
        let sig = Some(meta.signature());
        self.store.import(&data).map_err(|e| StorageIOError::read_snapshot(sig.clone(), &io_err(e)))?;
        let applied: Applied = (meta.last_log_id, meta.last_membership.clone());
        let c = self.record_applied(&applied).map_err(|e| StorageIOError::write_snapshot(sig, &e))?;
        {
            let mut s = self.lock();
            s.applied = applied;
            s.snapshot = Some((meta.clone(), data));
        }
        self.advance(c);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<MdsRaft>>, SErr> {
        Ok(self.lock().snapshot.clone().map(|(meta, d)| Snapshot { meta, snapshot: Box::new(Cursor::new(d)) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log::LogStore;
    use openraft::testing::{StoreBuilder, Suite};

    struct Builder;

    impl StoreBuilder<MdsRaft, LogStore, StoreSm, tempfile::TempDir> for Builder {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StoreSm), SErr> {
            let d = tempfile::tempdir().unwrap();
            let log = LogStore::open(&d.path().join("raft"), false).unwrap();
            let store = Arc::new(Store::open(&d.path().join("db"), Default::default()).unwrap());
            Ok((d, log, StoreSm::open(store).unwrap()))
        }
    }

    fn entry(index: u64, stream: u64, seq: u64, key: &[u8], value: &[u8]) -> Entry<MdsRaft> {
        let writes = vec![(T::Xattrs as u8, key.to_vec(), Some(value.to_vec()))];
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(LogCmd { stream, seq, writes }),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    /// A follower's applied entries are read at once and reach sled; the leader's own entries are not
    /// added again (its newer uncommitted value of the key stays what is read) and only what is applied
    /// goes into sled; a snapshot of one database installed into another carries the data and the
    /// applied id, also across a reopen.
    #[test]
    fn applied_entries_reach_the_database_and_a_snapshot_moves_it() {
        let d = tempfile::tempdir().unwrap();
        let open = |name: &str| Arc::new(Store::open(&d.path().join(name), Default::default()).unwrap());
        let (a, b) = (open("a"), open("b"));
        let mut sm = StoreSm::open(a.clone()).unwrap();
        let in_sled = |s: &Store, k: &[u8]| s.tree(T::Xattrs).get(k).unwrap().map(|v| v.to_vec());
        block_on(sm.apply(vec![entry(1, 7, 1, b"f", b"1")])).unwrap();
        assert_eq!(a.read(T::Xattrs, b"f").unwrap(), Some(b"1".to_vec()));
        a.flush_sync().unwrap();
        assert_eq!(in_sled(&a, b"f"), Some(b"1".to_vec()), "a follower's applied entry goes into sled");
        // Leading now (stream 9): two local commits of key k, proposed; only the first is applied.
        sm.set_own_stream(9);
        let commit = |v: &[u8]| {
            let mut tx = a.begin();
            tx.put(T::Xattrs, b"k", v.to_vec());
            tx.commit().unwrap();
        };
        commit(b"old");
        commit(b"new");
        let applied_seq = 3; // the overlay's commits: 1 (f), 2 (its applied id), 3 (old), 4 (new)
        block_on(sm.apply(vec![entry(2, 9, applied_seq, b"k", b"old")])).unwrap();
        assert_eq!(a.read(T::Xattrs, b"k").unwrap(), Some(b"new".to_vec()), "not overwritten by its own entry");
        a.flush_sync().unwrap();
        assert_eq!(in_sled(&a, b"k"), Some(b"old".to_vec()), "only the applied proposal reaches sled");
        assert_eq!(*sm.committed().borrow(), applied_seq);
        // A snapshot of a into b.
        let snap = block_on(sm.build_snapshot()).unwrap();
        let mut other = StoreSm::open(b.clone()).unwrap();
        block_on(other.install_snapshot(&snap.meta, snap.snapshot)).unwrap();
        assert_eq!(b.read(T::Xattrs, b"f").unwrap(), Some(b"1".to_vec()));
        assert_eq!(b.read(T::Xattrs, b"k").unwrap(), Some(b"old".to_vec()));
        assert_eq!(block_on(other.applied_state()).unwrap().0.map(|l| l.index), Some(2));
        b.flush_sync().unwrap();
        drop((other, b));
        let b = open("b");
        let mut again = StoreSm::open(b.clone()).unwrap();
        assert_eq!(block_on(again.applied_state()).unwrap().0.map(|l| l.index), Some(2), "kept across a reopen");
        assert_eq!(b.read(T::Xattrs, b"k").unwrap(), Some(b"old".to_vec()));
    }

    /// openraft's storage suite with the real state machine: applied ids and memberships, snapshots built
    /// from one database and installed into another.
    #[test]
    fn openraft_storage_suite_passes_over_the_database() {
        Suite::test_all(Builder).unwrap();
    }
}
