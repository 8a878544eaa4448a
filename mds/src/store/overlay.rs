//! The pending overlay of journal mode: each journaled change sled does not have yet, which every read
//! consults first ([`Overlay`]); moving it into sled as one transaction ([`apply_pending`]), which the
//! group-commit thread does every [`super::COMMIT_INTERVAL`]; and the reads that merge it with sled
//! ([`Scan`]).

use super::error::{StoreError, StoreResult};
use super::records::T;
use sled::transaction::TransactionError;
use sled::{Transactional, Tree};
use std::collections::BTreeMap;
use std::sync::{Mutex, RwLock};
use tessera_proto::FsResult;

pub(super) type Key = (T, Vec<u8>);
/// A pending value (None: deleted) with the commit that wrote it.
type Versioned = (u64, Option<Vec<u8>>);
/// A key with its pending value (None: deleted).
pub(super) type PendingEntry = (Vec<u8>, Option<Vec<u8>>);

/// The journaled values of each key sled does not have yet, oldest first, each with the commit that
/// wrote it: usually one; more when a key is written again before its older value may be applied (a
/// replicated log's commits are applied only up to what a majority has: [`apply_pending`]'s `upto`).
#[derive(Default)]
struct Pending {
    map: BTreeMap<Key, Vec<Versioned>>,
    commits: u64,
}

/// The pending overlay, and the lock that lets one apply run at a time: two overlapping applies could
/// write an older snapshot's value after a newer one was applied and dropped from the overlay.
#[derive(Default)]
pub(super) struct Overlay {
    pending: RwLock<Pending>,
    applying: Mutex<()>,
}

fn read_pending(p: &RwLock<Pending>) -> std::sync::RwLockReadGuard<'_, Pending> {
    p.read().unwrap_or_else(|e| e.into_inner())
}

fn write_pending(p: &RwLock<Pending>) -> std::sync::RwLockWriteGuard<'_, Pending> {
    p.write().unwrap_or_else(|e| e.into_inner())
}

impl Overlay {
    /// Whether nothing is pending.
    pub(super) fn is_empty(&self) -> bool {
        read_pending(&self.pending).map.is_empty()
    }

    /// The pending value of a key (`Some(None)`: deleted), or `None` if sled has the latest.
    pub(super) fn get(&self, t: T, key: &[u8]) -> Option<Option<Vec<u8>>> {
        // Usually empty (always in fsync mode): then no key copy for the lookup.
        let pending = read_pending(&self.pending);
        if pending.map.is_empty() {
            return None;
        }
        pending.map.get(&(t, key.to_vec())).and_then(|vs| vs.last()).map(|(_, v)| v.clone())
    }

    /// The number of the last commit added ([`Overlay::add`] numbers them 1, 2, ...).
    #[cfg(test)]
    pub(super) fn commits(&self) -> u64 {
        read_pending(&self.pending).commits
    }

    /// A snapshot of the pending keys of `t` from `start` on that begin with `prefix`, in order.
    pub(super) fn range(&self, t: T, start: &[u8], prefix: &[u8]) -> Vec<PendingEntry> {
        read_pending(&self.pending)
            .map
            .range((t, start.to_vec())..)
            .take_while(|((pt, k), _)| *pt == t && k.starts_with(prefix))
            .filter_map(|((_, k), vs)| vs.last().map(|(_, v)| (k.clone(), v.clone())))
            .collect()
    }

    /// Drops everything pending (the database is being replaced by a snapshot).
    pub(super) fn clear(&self) {
        write_pending(&self.pending).map.clear();
    }

    /// Adds one commit's writes, newer than everything pending; returns the commit's number.
    pub(super) fn add(&self, writes: BTreeMap<Key, Option<Vec<u8>>>) -> u64 {
        let mut p = write_pending(&self.pending);
        p.commits += 1;
        let commit = p.commits;
        for (k, v) in writes {
            p.map.entry(k).or_default().push((commit, v));
        }
        commit
    }
}

/// Applies `writes` to sled as one transaction over the trees they touch.
pub(super) fn apply_writes<'w>(
    trees: &[Tree],
    writes: impl Iterator<Item = (&'w Key, &'w Option<Vec<u8>>)> + Clone,
) -> StoreResult<()> {
    let mut involved: Vec<T> = writes.clone().map(|((t, _), _)| *t).collect();
    involved.sort();
    involved.dedup();
    if involved.is_empty() {
        return Ok(());
    }
    let view_trees: Vec<Tree> = involved.iter().map(|t| trees[*t as usize].clone()).collect();
    let res: Result<(), TransactionError<()>> = view_trees.as_slice().transaction(|view| {
        for ((t, k), v) in writes.clone() {
            let idx = involved.iter().position(|x| x == t).unwrap_or(0);
            match v {
                Some(v) => {
                    view[idx].insert(k.as_slice(), v.as_slice())?;
                }
                None => {
                    view[idx].remove(k.as_slice())?;
                }
            }
        }
        Ok(())
    });
    res.map_err(|e| match e {
        TransactionError::Storage(e) => StoreError::Commit(e),
        // The closure above aborts only through sled's own errors.
        TransactionError::Abort(()) => StoreError::Aborted,
    })
}

/// Moves what is pending from commits up to number `upto` into sled (one transaction: of each key, its
/// latest value from those commits); values from later commits, and those added meanwhile, stay pending.
pub(super) fn apply_pending(trees: &[Tree], overlay: &Overlay, upto: u64) -> StoreResult<()> {
    let _one_at_a_time = overlay.applying.lock().unwrap_or_else(|e| e.into_inner());
    let pending = &overlay.pending;
    let snapshot: Vec<(Key, Versioned)> = read_pending(pending)
        .map
        .iter()
        .filter_map(|(k, vs)| vs.iter().rev().find(|(c, _)| *c <= upto).map(|v| (k.clone(), v.clone())))
        .collect();
    if snapshot.is_empty() {
        return Ok(());
    }
    apply_writes(trees, snapshot.iter().map(|(k, (_, v))| (k, v)))?;
    let mut p = write_pending(pending);
    for (k, (commit, _)) in &snapshot {
        if let Some(vs) = p.map.get_mut(k) {
            vs.retain(|(c, _)| c > commit);
            if vs.is_empty() {
                p.map.remove(k);
            }
        }
    }
    Ok(())
}

/// Keys from `start` on that begin with `prefix`, with values: sled merged with a snapshot of the
/// pending overlay (which wins; its deletions hide sled's keys).
pub struct Scan {
    sled: sled::Iter,
    prefix: Vec<u8>,
    sled_head: Option<(Vec<u8>, Vec<u8>)>,
    sled_done: bool,
    pending: std::iter::Peekable<std::vec::IntoIter<PendingEntry>>,
}

impl Scan {
    /// `sled`'s keys merged with `pending` (a snapshot of the overlay's, in order: [`Overlay::range`]).
    pub(super) fn new(sled: sled::Iter, prefix: &[u8], pending: Vec<PendingEntry>) -> Scan {
        Scan {
            sled,
            prefix: prefix.to_vec(),
            sled_head: None,
            sled_done: false,
            pending: pending.into_iter().peekable(),
        }
    }
}

impl Iterator for Scan {
    type Item = FsResult<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.sled_head.is_none() && !self.sled_done {
                match self.sled.next() {
                    Some(Ok((k, v))) if k.starts_with(&self.prefix) => self.sled_head = Some((k.to_vec(), v.to_vec())),
                    Some(Err(e)) => return Some(Err(StoreError::from(e).into())),
                    _ => self.sled_done = true,
                }
            }
            let pending_first = match (self.pending.peek(), &self.sled_head) {
                (None, None) => return None,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((pk, _)), Some((sk, _))) => pk <= sk,
            };
            if !pending_first {
                return self.sled_head.take().map(Ok);
            }
            let (k, v) = self.pending.next()?;
            if self.sled_head.as_ref().is_some_and(|(sk, _)| *sk == k) {
                self.sled_head = None;
            }
            if let Some(v) = v {
                return Some(Ok((k, v)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{block_on, journaled};
    use crate::store::{xattr_key, xattr_prefix, Store};
    use std::sync::atomic::Ordering;

    #[test]
    fn journaled_commits_are_read_from_the_overlay_until_applied() {
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let mut tx = s.begin();
        for n in ["a", "b", "c"] {
            tx.put(T::Xattrs, &xattr_key(7, n), n.as_bytes().to_vec());
        }
        tx.commit().unwrap();
        // Applied to sled by the commit thread only: sled lacks them, every read path sees them.
        assert_eq!(s.tree(T::Xattrs).len(), 0);
        assert_eq!(s.read(T::Xattrs, &xattr_key(7, "b")).unwrap(), Some(b"b".to_vec()));
        s.flush_sync().unwrap();
        assert_eq!(s.tree(T::Xattrs).len(), 3);
        // Pending changes over applied ones: a deletion hides sled's key, an insert joins in order.
        let mut tx = s.begin();
        tx.del(T::Xattrs, &xattr_key(7, "b"));
        tx.put(T::Xattrs, &xattr_key(7, "bb"), b"new".to_vec());
        tx.put(T::Xattrs, &xattr_key(7, "a"), b"A".to_vec());
        tx.commit().unwrap();
        let names = |s: &Store| -> Vec<(Vec<u8>, Vec<u8>)> {
            s.scan_from(T::Xattrs, &xattr_prefix(7), &xattr_prefix(7)).map(|kv| kv.unwrap()).collect()
        };
        let want = vec![
            (xattr_key(7, "a"), b"A".to_vec()),
            (xattr_key(7, "bb"), b"new".to_vec()),
            (xattr_key(7, "c"), b"c".to_vec()),
        ];
        assert_eq!(names(&s), want);
        assert_eq!(s.begin().scan(T::Xattrs, &xattr_prefix(7)).unwrap().len(), 3);
        // Starting mid-range, and a prefix that matches nothing.
        let from_b: Vec<_> =
            s.scan_from(T::Xattrs, &xattr_key(7, "b"), &xattr_prefix(7)).map(|kv| kv.unwrap()).collect();
        assert_eq!(from_b, want[1..].to_vec());
        assert_eq!(s.scan_from(T::Xattrs, &xattr_prefix(8), &xattr_prefix(8)).count(), 0);
        block_on(s.flush()).unwrap();
        assert_eq!(names(&s), want);
        assert_eq!(s.tree(T::Xattrs).len(), 3);
        assert!(read_pending(&s.overlay.pending).map.is_empty());
        // A newer pending value wins over the one sled has.
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"1".to_vec());
        tx.commit().unwrap();
        s.flush_sync().unwrap();
        let mut tx = s.begin();
        tx.put(T::Meta, b"k", b"2".to_vec());
        tx.commit().unwrap();
        assert_eq!(s.tree(T::Meta).get(b"k").unwrap().unwrap().as_ref(), b"1");
        assert_eq!(s.read(T::Meta, b"k").unwrap(), Some(b"2".to_vec()));
        s.flush_sync().unwrap();
        assert_eq!(s.tree(T::Meta).get(b"k").unwrap().unwrap().as_ref(), b"2");
    }

    /// Applied up to a commit (a replicated log's majority): later values of a key stay pending, readers
    /// see the newest throughout, and applying the rest later ends with the newest in sled.
    #[test]
    fn applying_up_to_a_commit_keeps_later_values_pending() {
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let put = |k: &[u8], v: &[u8]| {
            let mut tx = s.begin();
            tx.put(T::Meta, k, v.to_vec());
            tx.commit().unwrap();
            s.overlay.commits()
        };
        let first = put(b"a", b"1");
        let second = put(b"b", b"2");
        put(b"a", b"3");
        assert_eq!(second, first + 1);
        apply_pending(&s.trees, &s.overlay, second).unwrap();
        let in_sled = |k: &[u8]| s.tree(T::Meta).get(k).unwrap().map(|v| v.to_vec());
        assert_eq!((in_sled(b"a"), in_sled(b"b")), (Some(b"1".to_vec()), Some(b"2".to_vec())));
        assert_eq!(s.read(T::Meta, b"a").unwrap(), Some(b"3".to_vec()), "the newer value is still read");
        assert_eq!(read_pending(&s.overlay.pending).map.len(), 1);
        apply_pending(&s.trees, &s.overlay, s.overlay.commits()).unwrap();
        assert_eq!(in_sled(b"a"), Some(b"3".to_vec()));
        assert!(read_pending(&s.overlay.pending).map.is_empty());
    }

    /// Writers commit while two threads apply the overlay to sled again and again: every reader sees its own
    /// latest writes throughout, and in the end sled holds exactly the last value of every key.
    #[test]
    fn overlay_stays_consistent_while_it_is_applied_concurrently() {
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let s = journaled(dir.path());
        let done = std::sync::atomic::AtomicBool::new(false);
        let models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = std::thread::scope(|sc| {
            // Two appliers, as when the commit thread's tick meets a synchronous flush.
            for _ in 0..2 {
                sc.spawn(|| {
                    while !done.load(Ordering::Acquire) {
                        s.flush_sync().unwrap();
                    }
                });
            }
            let writers: Vec<_> = (0..4u8)
                .map(|w| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(w));
                        let mut model = BTreeMap::new();
                        for n in 0..400u32 {
                            let mut tx = s.begin();
                            for _ in 0..rng.gen_range(1..4) {
                                let key = vec![w, rng.gen_range(0..16u8)];
                                let v = rng.gen_bool(0.7).then(|| n.to_be_bytes().to_vec());
                                match &v {
                                    Some(v) => tx.put(T::Xattrs, &key, v.clone()),
                                    None => tx.del(T::Xattrs, &key),
                                }
                                model.insert(key, v);
                            }
                            tx.commit().unwrap();
                            let key = vec![w, rng.gen_range(0..16u8)];
                            assert_eq!(s.read(T::Xattrs, &key).unwrap(), model.get(&key).cloned().flatten());
                            let scanned: BTreeMap<Vec<u8>, Vec<u8>> =
                                s.scan_from(T::Xattrs, &[w], &[w]).map(|kv| kv.unwrap()).collect();
                            let live: BTreeMap<Vec<u8>, Vec<u8>> =
                                model.iter().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
                            assert_eq!(scanned, live, "writer {w} after commit {n}");
                        }
                        model
                    })
                })
                .collect();
            let joined: Vec<_> = writers.into_iter().map(|h| h.join()).collect();
            // Stop the applier before a failed writer's panic is passed on (else the scope waits forever).
            done.store(true, Ordering::Release);
            joined.into_iter().map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
        });
        s.flush_sync().unwrap();
        assert!(read_pending(&s.overlay.pending).map.is_empty());
        let want: BTreeMap<Vec<u8>, Vec<u8>> =
            models.iter().flatten().filter_map(|(k, v)| Some((k.clone(), v.clone()?))).collect();
        let in_sled: BTreeMap<Vec<u8>, Vec<u8>> =
            s.tree(T::Xattrs).iter().map(|kv| kv.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(in_sled, want);
    }
}
