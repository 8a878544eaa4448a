//! Leases on names and attributes, and their recalls (issue 38; as Lustre's lookup locks, Ceph's
//! capabilities, NFSv4's delegations). A client that keeps a `Watch` waiting here (its channel from the MDS)
//! holds a lease on every name and attribute the MDS answers it: the MDS remembers which client caches
//! which inode's attributes and which directory's names, and before a change made by anyone else takes
//! effect for them — before the changing request is answered — it recalls them (a [`Recall`] queued for
//! the holder and handed over by its `Watch`) and waits until the holder acknowledged it (its kernel
//! dropped them) or its lease ran out. So the client may let its kernel cache them for as long as its
//! lease lasts, far above the 1-second timeout that protects uncached mounts.
//!
//! The rules, each with a test below:
//! 1. A lease lasts [`LEASE`] from the sending of the holder's last answered `Watch` (here: from its
//!    arrival, which is later, so the MDS never gives up waiting before the holder's lease ended). A
//!    holder silent longer has no leases: its registrations go.
//! 2. A change (a committed transaction's inodes and names) recalls them from every holder but the
//!    requester (whose reply carries the new state and whose kernel knows what it changed); attributes
//!    recalled are forgotten (asked for again, they are leased again), a directory's names stay leased
//!    (only the changed names are dropped at the holder).
//! 3. An answer is leased only if nothing it names changed after its request arrived: otherwise the
//!    holder gets a recall for it before the answer, which the answer waits for, so the holder knows the
//!    answer was overtaken (see `Recalls` in the protocol).
//! 4. Memory is bounded: a holder caching more than [`CACHED_MAX`] inodes has its oldest recalled; one that
//!    leaves more than [`QUEUE_MAX`] recalls unacknowledged gets one recall of everything instead.
//! 5. A directory lease (exclusive: its holder creates and removes without telling the MDS at once) is
//!    granted only while no other client caches the directory's names; asking recalls them.

use crate::lease::Holder;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::msg::{Recall, Recalls, RECALLS_MAX, RECALL_NAMES_MAX, WATCH_WAIT_MAX_MS};
use tessera_proto::types::Ino;
use tokio::sync::Notify;

/// How long a lease lasts after the holder's last answered `Watch` was sent.
pub const LEASE: Duration = Duration::from_secs(5);
/// Inodes one client may cache (its oldest are recalled beyond).
pub const CACHED_MAX: usize = 1 << 18;
/// Recalls one client may leave unacknowledged (beyond: one recall of everything).
pub const QUEUE_MAX: usize = 1 << 14;
/// Changes remembered for rule 3 (an answer whose request is older than the oldest is not leased).
const CHANGES_KEPT: usize = 1 << 16;

/// What a client caches of an inode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Kinds {
    attrs: bool,
    names: bool,
}

/// A recall the caller's answer waits for: `holder` acknowledged recall `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub holder: Holder,
    pub seq: u64,
}

struct Watcher {
    /// When its last `Watch` arrived.
    heard: Instant,
    cached: HashMap<Ino, Kinds>,
    /// Inodes in the order they were first cached (some may be gone from `cached`).
    order: VecDeque<Ino>,
    /// Recalls not acknowledged yet, in order.
    queue: VecDeque<Recall>,
    next_seq: u64,
    acked: u64,
    /// A recall of everything not acknowledged yet: every change waits for it.
    everything: Option<u64>,
    wake: Arc<Notify>,
}

impl Watcher {
    fn new(now: Instant) -> Watcher {
        Watcher {
            heard: now,
            cached: HashMap::new(),
            order: VecDeque::new(),
            queue: VecDeque::new(),
            next_seq: 1,
            acked: 0,
            everything: None,
            wake: Arc::new(Notify::new()),
        }
    }

    fn live(&self, now: Instant, lease: Duration) -> bool {
        now.duration_since(self.heard) < lease
    }

    /// Queues a recall (or, past [`QUEUE_MAX`], one of everything); returns its number.
    fn push(&mut self, mut r: Recall) -> u64 {
        if let Some(s) = self.everything {
            return s;
        }
        r.seq = self.next_seq;
        self.next_seq += 1;
        if self.queue.len() >= QUEUE_MAX {
            self.queue.clear();
            r = Recall { seq: r.seq, everything: true, ..Recall::default() };
            self.everything = Some(r.seq);
            self.cached.clear();
            self.order.clear();
        }
        let seq = r.seq;
        self.queue.push_back(r);
        self.wake.notify_one();
        seq
    }
}

/// An inode's last change: when, by whom, and the last change by anyone else before it (a client's own
/// change does not overtake its answers: it knows what it changed).
#[derive(Clone, Copy)]
struct Changed {
    last: u64,
    by: Option<Holder>,
    other: u64,
}

#[derive(Default)]
struct State {
    watchers: HashMap<Holder, Watcher>,
    /// Which watchers cache something of each inode.
    by_ino: HashMap<Ino, Vec<Holder>>,
    /// Changes counted from 1; each inode's last, and the last ones in order (rule 3).
    counter: u64,
    changed_at: HashMap<Ino, Changed>,
    changes: VecDeque<(u64, Ino)>,
    /// Changes up to this one are forgotten: an older request's answer is not leased.
    forgotten: u64,
    last_expiry: Option<Instant>,
}

impl State {
    /// What `holder` caches of `ino`.
    fn caches(&self, holder: Holder, ino: Ino) -> Kinds {
        self.watchers.get(&holder).and_then(|w| w.cached.get(&ino)).copied().unwrap_or_default()
    }

    fn unregister(&mut self, holder: Holder, ino: Ino) {
        if let Some(hs) = self.by_ino.get_mut(&ino) {
            hs.retain(|h| *h != holder);
            if hs.is_empty() {
                self.by_ino.remove(&ino);
            }
        }
    }

    fn drop_watcher(&mut self, holder: Holder) {
        if let Some(w) = self.watchers.remove(&holder) {
            for &ino in w.cached.keys() {
                self.unregister(holder, ino);
            }
        }
    }

    /// Rule 1: holders silent longer than a lease hold nothing (checked at most every tenth of one).
    fn expire(&mut self, now: Instant, lease: Duration) {
        if self.last_expiry.is_some_and(|at| now.duration_since(at) < lease / 10) {
            return;
        }
        self.last_expiry = Some(now);
        let gone: Vec<Holder> = self.watchers.iter().filter(|(_, w)| !w.live(now, lease)).map(|(h, _)| *h).collect();
        for h in gone {
            self.drop_watcher(h);
        }
    }

    /// Whether someone other than `holder` changed `ino` after counter `start`.
    fn changed_since(&self, ino: Ino, start: u64, holder: Holder) -> bool {
        start < self.forgotten
            || self.changed_at.get(&ino).is_some_and(|c| {
                if c.by == Some(holder) {
                    c.other > start
                } else {
                    c.last > start
                }
            })
    }

    fn note_change(&mut self, ino: Ino, by: Option<Holder>) {
        let counter = self.counter;
        let c = self.changed_at.entry(ino).or_insert(Changed { last: 0, by, other: 0 });
        if c.by != by || by.is_none() {
            c.other = c.last;
        }
        c.last = counter;
        c.by = by;
        self.changes.push_back((counter, ino));
        while self.changes.len() > CHANGES_KEPT {
            let Some((c, i)) = self.changes.pop_front() else { break };
            self.forgotten = self.forgotten.max(c);
            if self.changed_at.get(&i).is_some_and(|x| x.last == c) {
                self.changed_at.remove(&i);
            }
        }
    }
}

tokio::task_local! {
    /// The client whose request this task serves, and the recalls its commits made (its answer waits
    /// for them).
    static SERVING: Serving;
}

struct Serving {
    holder: Holder,
    waits: Mutex<Vec<Wait>>,
}

/// Runs `f`, the serving of `holder`'s request: its commits' recalls spare `holder` and are returned, for
/// the answer to wait for.
pub async fn serving<F: std::future::Future>(holder: Holder, f: F) -> (F::Output, Vec<Wait>) {
    let s = Serving { holder, waits: Mutex::new(Vec::new()) };
    let (out, s) = SERVING
        .scope(s, async move {
            let out = f.await;
            (out, SERVING.with(|s| std::mem::take(&mut *s.waits.lock().unwrap_or_else(|p| p.into_inner()))))
        })
        .await;
    (out, s)
}

/// The MDS's table of who caches what (see the module docs).
pub struct Caches {
    /// How long a lease lasts ([`LEASE`]).
    lease: Duration,
    state: Mutex<State>,
    /// Woken whenever a holder acknowledges recalls or leaves.
    acked: Notify,
    /// Watchers known (a cheap check before working out what a commit changed).
    watchers: AtomicUsize,
}

/// One change to recall: an inode's attributes, or names in a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub attrs: Vec<Ino>,
    pub names: Vec<(Ino, String)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty() && self.names.is_empty()
    }
}

impl Default for Caches {
    fn default() -> Caches {
        Caches::with_lease(LEASE)
    }
}

impl Caches {
    pub fn with_lease(lease: Duration) -> Caches {
        Caches { lease, state: Mutex::default(), acked: Notify::new(), watchers: AtomicUsize::new(0) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether any client watches (nothing to do otherwise).
    pub fn active(&self) -> bool {
        self.watchers.load(Ordering::Relaxed) > 0
    }

    /// The change counter now: taken when a request arrives, given to [`Caches::grant`] with its answer.
    pub fn counter(&self) -> u64 {
        self.state().counter
    }

    /// Rule 2: `changes` were committed by `except` (`None`: by the MDS itself, or unknown): recalls
    /// them from every other holder. Returns the recalls the requester's answer must wait for.
    pub fn changed(&self, changes: &Changes, except: Option<Holder>) -> Vec<Wait> {
        let mut st = self.state();
        let now = Instant::now();
        st.expire(now, self.lease);
        st.counter += 1;
        let mut per: HashMap<Holder, HashMap<Ino, Recall>> = HashMap::new();
        for &ino in &changes.attrs {
            st.note_change(ino, except);
            for &h in st.by_ino.get(&ino).into_iter().flatten() {
                if Some(h) != except && st.caches(h, ino).attrs {
                    per.entry(h).or_default().entry(ino).or_insert_with(|| Recall { ino, ..Recall::default() }).attrs =
                        true;
                }
            }
        }
        for (dir, name) in &changes.names {
            st.note_change(*dir, except);
            for &h in st.by_ino.get(dir).into_iter().flatten() {
                if Some(h) == except || !st.caches(h, *dir).names {
                    continue;
                }
                let r =
                    per.entry(h).or_default().entry(*dir).or_insert_with(|| Recall { ino: *dir, ..Recall::default() });
                if r.names.len() >= RECALL_NAMES_MAX {
                    r.all_names = true;
                } else if !r.names.contains(name) {
                    r.names.push(name.clone());
                }
            }
        }
        let mut waits = Vec::new();
        // Holders with a recall of everything pending wait out every change.
        for (&h, w) in st.watchers.iter() {
            if let Some(seq) = w.everything {
                if Some(h) != except && !per.contains_key(&h) {
                    waits.push(Wait { holder: h, seq });
                }
            }
        }
        for (h, recalls) in per {
            let mut last = 0;
            for (ino, r) in recalls {
                let Some(w) = st.watchers.get_mut(&h) else { break };
                // Attributes recalled are no longer cached (names are, all but those recalled).
                let names_stay = match w.cached.get_mut(&ino) {
                    Some(k) if r.attrs => {
                        k.attrs = false;
                        k.names
                    }
                    _ => true,
                };
                if !names_stay {
                    w.cached.remove(&ino);
                }
                last = w.push(r);
                if !names_stay {
                    st.unregister(h, ino);
                }
            }
            if last > 0 {
                waits.push(Wait { holder: h, seq: last });
            }
        }
        waits
    }

    /// A commit's `changes` (rule 2), made by the client whose request this task serves (see [`serving`]),
    /// if any: recalled from the others, and waited for by that request's answer.
    pub fn committed(&self, changes: &Changes) {
        if changes.is_empty() {
            return;
        }
        let by = SERVING.try_with(|s| s.holder).ok();
        let waits = self.changed(changes, by);
        if !waits.is_empty() {
            let _ = SERVING.try_with(|s| s.waits.lock().unwrap_or_else(|p| p.into_inner()).extend(waits));
        }
    }

    /// Rule 3: the answer to `holder`'s request that arrived at counter `start` names `attrs` (inodes whose
    /// attributes it gives) and `names` (directories whose names it gives): they are leased to it if it
    /// watches, and recalled at once if they changed since `start`. Returns the recall the answer must
    /// wait for, if any.
    pub fn grant(&self, holder: Holder, start: u64, attrs: &[Ino], names: &[Ino]) -> Option<Wait> {
        let mut st = self.state();
        let now = Instant::now();
        if !st.watchers.get(&holder).is_some_and(|w| w.live(now, self.lease)) {
            return None;
        }
        let mut overtaken: HashMap<Ino, Recall> = HashMap::new();
        let mut added = Vec::new();
        let wants = attrs.iter().map(|&i| (i, false)).chain(names.iter().map(|&i| (i, true)));
        for (ino, is_names) in wants {
            if st.changed_since(ino, start, holder) {
                let r = overtaken.entry(ino).or_insert_with(|| Recall { ino, ..Recall::default() });
                if is_names {
                    r.all_names = true;
                } else {
                    r.attrs = true;
                }
                continue;
            }
            let w = st.watchers.get_mut(&holder)?;
            let k = w.cached.entry(ino).or_default();
            let new = !k.attrs && !k.names;
            if is_names {
                k.names = true;
            } else {
                k.attrs = true;
            }
            if new {
                w.order.push_back(ino);
                added.push(ino);
            }
        }
        for ino in added {
            let hs = st.by_ino.entry(ino).or_default();
            if !hs.contains(&holder) {
                hs.push(holder);
            }
        }
        // Rule 4: the oldest beyond the bound are recalled.
        let mut evicted = Vec::new();
        if let Some(w) = st.watchers.get_mut(&holder) {
            while w.cached.len() > CACHED_MAX {
                let Some(old) = w.order.pop_front() else { break };
                if w.cached.remove(&old).is_some() {
                    w.push(Recall { ino: old, attrs: true, all_names: true, ..Recall::default() });
                    evicted.push(old);
                }
            }
            if w.order.len() > 2 * CACHED_MAX {
                let cached = &w.cached;
                w.order.retain(|i| cached.contains_key(i));
            }
        }
        for ino in evicted {
            st.unregister(holder, ino);
        }
        let w = st.watchers.get_mut(&holder)?;
        let mut last = None;
        for (_, r) in overtaken {
            last = Some(w.push(r));
        }
        last.map(|seq| Wait { holder, seq })
    }

    /// Rule 5: whether a client other than `holder` caches `dir`'s names; if so they are recalled (the
    /// directory lease is refused this time: asked again, it is granted once they are gone).
    pub fn names_cached_elsewhere(&self, dir: Ino, holder: Holder) -> bool {
        let mut st = self.state();
        st.expire(Instant::now(), self.lease);
        let others: Vec<Holder> = st
            .by_ino
            .get(&dir)
            .into_iter()
            .flatten()
            .copied()
            .filter(|h| *h != holder)
            .filter(|h| st.watchers.get(h).and_then(|w| w.cached.get(&dir)).is_some_and(|k| k.names))
            .collect();
        for h in &others {
            if let Some(w) = st.watchers.get_mut(h) {
                if let Some(k) = w.cached.get_mut(&dir) {
                    k.names = false;
                }
                w.push(Recall { ino: dir, all_names: true, ..Recall::default() });
            }
        }
        !others.is_empty()
    }

    /// Waits until every recall in `waits` is acknowledged or its holder's lease ran out (or it left).
    pub async fn wait(&self, waits: &[Wait]) {
        if waits.is_empty() {
            return;
        }
        loop {
            let notified = self.acked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let st = self.state();
                let now = Instant::now();
                let mut deadline: Option<Instant> = None;
                for w in waits {
                    let Some(watcher) = st.watchers.get(&w.holder) else { continue };
                    if watcher.acked >= w.seq || !watcher.live(now, self.lease) {
                        continue;
                    }
                    let ends = watcher.heard + self.lease;
                    deadline = Some(deadline.map_or(ends, |d| d.min(ends)));
                }
                deadline
            };
            let Some(deadline) = deadline else { return };
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }

    /// `Watch`: `holder` carried out the recalls up to `acked` and waits for the next (at most `wait_ms`),
    /// or leaves (`leave`: it caches nothing any more).
    pub async fn watch(&self, holder: Holder, acked: u64, wait_ms: u32, leave: bool, boot: u64) -> Recalls {
        let lease_ms = self.lease.as_millis() as u32;
        if leave {
            let mut st = self.state();
            if st.watchers.contains_key(&holder) {
                st.drop_watcher(holder);
                self.watchers.store(st.watchers.len(), Ordering::Relaxed);
            }
            drop(st);
            self.acked.notify_waiters();
            return Recalls { boot, lease_ms, recalls: Vec::new() };
        }
        let deadline = Instant::now() + Duration::from_millis(u64::from(wait_ms.min(WATCH_WAIT_MAX_MS)));
        let wake = {
            let mut st = self.state();
            let now = Instant::now();
            st.expire(now, self.lease);
            let w = st.watchers.entry(holder).or_insert_with(|| Watcher::new(now));
            w.heard = now;
            let acked = acked.min(w.next_seq - 1);
            let mut woke = false;
            if acked > w.acked {
                w.acked = acked;
                while w.queue.front().is_some_and(|r| r.seq <= acked) {
                    w.queue.pop_front();
                }
                if w.everything.is_some_and(|s| s <= acked) {
                    w.everything = None;
                }
                woke = true;
            }
            let wake = w.wake.clone();
            self.watchers.store(st.watchers.len(), Ordering::Relaxed);
            drop(st);
            if woke {
                self.acked.notify_waiters();
            }
            wake
        };
        loop {
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let st = self.state();
                let recalls: Vec<Recall> = st
                    .watchers
                    .get(&holder)
                    .map(|w| w.queue.iter().take(RECALLS_MAX).cloned().collect())
                    .unwrap_or_default();
                if !recalls.is_empty() || Instant::now() >= deadline {
                    return Recalls { boot, lease_ms, recalls };
                }
            }
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> Holder {
        Holder { conn: n, client: n }
    }

    fn attrs(inos: &[Ino]) -> Changes {
        Changes { attrs: inos.to_vec(), names: Vec::new() }
    }

    async fn watching(c: &Caches, holder: Holder) {
        c.watch(holder, 0, 0, false, 1).await;
    }

    #[tokio::test]
    async fn only_a_watching_client_is_granted_and_a_change_recalls_it_from_everyone_but_the_changer() {
        let c = Caches::default();
        assert!(!c.active());
        let start = c.counter();
        assert_eq!(c.grant(h(1), start, &[5], &[]), None);
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty(), "h(1) does not watch: nothing was leased");
        watching(&c, h(1)).await;
        watching(&c, h(2)).await;
        assert!(c.active());
        let start = c.counter();
        assert_eq!(c.grant(h(1), start, &[5], &[]), None, "nothing changed: leased, nothing to wait for");
        assert_eq!(c.grant(h(2), start, &[5], &[]), None);
        let waits = c.changed(&attrs(&[5]), Some(h(2)));
        assert_eq!(waits, vec![Wait { holder: h(1), seq: 1 }], "the changer's own copy is not recalled");
        let r = c.watch(h(1), 0, 0, false, 1).await;
        assert_eq!(r.recalls.len(), 1);
        assert!(r.recalls[0].attrs && r.recalls[0].ino == 5 && r.recalls[0].seq == 1);
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty(), "attributes recalled are no longer leased");
    }

    #[tokio::test]
    async fn the_change_waits_for_the_acknowledgement() {
        let c = Arc::new(Caches::default());
        watching(&c, h(1)).await;
        c.grant(h(1), c.counter(), &[5], &[]);
        let waits = c.changed(&attrs(&[5]), Some(h(2)));
        let waiter = tokio::spawn({
            let c = c.clone();
            async move { c.wait(&waits).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "not acknowledged yet");
        let r = c.watch(h(1), 0, 1000, false, 1).await;
        assert_eq!(r.recalls.len(), 1, "answered at once: a recall is queued");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "handed over is not carried out");
        c.watch(h(1), r.recalls[0].seq, 0, false, 1).await;
        tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_silent_holder_is_waited_for_until_its_lease_ends() {
        let lease = Duration::from_millis(300);
        let c = Caches::with_lease(lease);
        watching(&c, h(1)).await;
        c.grant(h(1), c.counter(), &[5], &[]);
        let waits = c.changed(&attrs(&[5]), Some(h(2)));
        let t0 = Instant::now();
        c.wait(&waits).await;
        assert!(t0.elapsed() >= lease - Duration::from_millis(20), "waited {:?}", t0.elapsed());
        tokio::time::sleep(lease).await;
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty(), "its registrations went with its lease");
    }

    #[tokio::test]
    async fn names_stay_leased_but_only_changed_names_are_recalled() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        c.grant(h(1), c.counter(), &[], &[10]);
        let ch = Changes { attrs: vec![10], names: vec![(10, "a".into()), (10, "b".into())] };
        let waits = c.changed(&ch, Some(h(2)));
        assert_eq!(waits.len(), 1);
        let r = c.watch(h(1), 0, 0, false, 1).await;
        assert_eq!(r.recalls.len(), 1);
        assert_eq!(r.recalls[0].names, vec!["a".to_string(), "b".to_string()]);
        assert!(!r.recalls[0].attrs, "its attributes were not leased");
        let ch = Changes { attrs: Vec::new(), names: vec![(10, "c".into())] };
        assert_eq!(c.changed(&ch, Some(h(2))).len(), 1, "the directory's names are still leased");
    }

    #[tokio::test]
    async fn an_answer_overtaken_by_a_change_is_recalled_before_it_is_sent() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        let start = c.counter();
        // Another client changes inode 5 while h(1)'s request is being served.
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty());
        let w = c.grant(h(1), start, &[5, 6], &[]).expect("the answer about 5 was overtaken");
        let r = c.watch(h(1), 0, 0, false, 1).await;
        assert_eq!(r.recalls.len(), 1);
        assert_eq!((r.recalls[0].ino, r.recalls[0].seq), (5, w.seq));
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty(), "5 was not leased");
        assert_eq!(c.changed(&attrs(&[6]), Some(h(2))).len(), 1, "6 was");
    }

    #[tokio::test]
    async fn a_directory_lease_waits_until_no_one_else_caches_its_names() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        c.grant(h(1), c.counter(), &[10], &[10]);
        assert!(!c.names_cached_elsewhere(10, h(1)), "its own cache is no conflict");
        assert!(c.names_cached_elsewhere(10, h(2)), "h(1) caches 10's names");
        let r = c.watch(h(1), 0, 0, false, 1).await;
        assert!(r.recalls[0].all_names);
        assert!(!c.names_cached_elsewhere(10, h(2)), "recalled: the next ask is granted");
        assert_eq!(c.changed(&attrs(&[10]), Some(h(2))).len(), 1, "its attributes are still leased");
    }

    #[tokio::test]
    async fn a_holder_that_leaves_is_not_waited_for() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        c.grant(h(1), c.counter(), &[5], &[]);
        c.watch(h(1), 0, 0, true, 1).await;
        assert!(c.changed(&attrs(&[5]), Some(h(2))).is_empty());
        assert!(!c.active());
    }

    #[tokio::test]
    async fn too_many_unacknowledged_recalls_become_one_of_everything() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        let inos: Vec<Ino> = (1..=QUEUE_MAX as u64 + 1).collect();
        c.grant(h(1), c.counter(), &inos, &[]);
        for &i in &inos {
            c.changed(&attrs(&[i]), Some(h(2)));
        }
        let r = c.watch(h(1), 0, 0, false, 1).await;
        let last = r.recalls.last().unwrap();
        assert!(last.everything, "the queue collapsed into one recall of everything");
        assert_eq!(c.changed(&attrs(&[999_999_999]), Some(h(2))), vec![Wait { holder: h(1), seq: last.seq }]);
        c.watch(h(1), last.seq, 0, false, 1).await;
        assert!(c.changed(&attrs(&[999_999_999]), Some(h(2))).is_empty());
    }

    #[tokio::test]
    async fn a_fuzzed_acknowledgement_is_bounded_by_what_was_sent() {
        let c = Caches::default();
        watching(&c, h(1)).await;
        c.watch(h(1), u64::MAX, 0, false, 1).await;
        c.grant(h(1), c.counter(), &[5], &[]);
        let waits = c.changed(&attrs(&[5]), Some(h(2)));
        assert_eq!(waits, vec![Wait { holder: h(1), seq: 1 }], "a later recall is still waited for");
    }
}
