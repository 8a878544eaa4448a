//! Leases on names and attributes at the client (issue 38; the MDS's side is `tessera_mds::caches`).
//! The client keeps a `Watch` waiting at the MDS at all times: its channel for recalls. While it does,
//! every name and attribute the MDS answers it is leased to it until [`NameLeases`]' deadline (the lease
//! time after the sending of its last answered `Watch`), and the MDS recalls them before another
//! client's change to them takes effect. So an adapter may let what it caches (the FUSE mount: the
//! kernel's entries and attributes) live until the deadline, not one second: [`NameLeases::ttl`] says how
//! long, [`NameLeases::track_entry`] and [`NameLeases::track_attrs`] remember what it gave out, and a
//! recall reaches it through [`Invalidate`] before the client acknowledges it.
//!
//! An answer is leased only if it was asked while the lease held, arrives while it still holds, and no
//! recall of an inode it names was carried out while it was on its way (the MDS sends such a recall, and
//! waits for its acknowledgement, when a change overtook the answer). When the `Watch` fails the deadline
//! passes by itself; when the MDS restarted (a new `boot`) or the deadline passed before a `Watch` was
//! answered again, everything given out is dropped.

use crate::mds_client::MdsClient;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tessera_proto::msg::{MdsReply, MdsRequest, Recall};
use tessera_proto::types::{Attr, Ino};

/// How long a `Watch` waits at the MDS for a recall before it is answered empty (a fraction of the
/// lease, so the next one is sent in time).
pub const WATCH_WAIT: Duration = Duration::from_millis(1500);
/// How long an acknowledgement waits for the kernel to carry out a recall (see [`NameLeases::run`]).
pub const INVALIDATE_PATIENCE: Duration = Duration::from_millis(200);
/// Names and attributes given out at most (beyond: not leased, the adapter's short timeout applies).
pub const TRACKED_MAX: usize = 1 << 18;
/// Recalls remembered to check the answers on their way (older answers are not leased).
const RECENT_MAX: usize = 4096;

/// What a recall tells the adapter to drop.
pub trait Invalidate: Send + Sync + 'static {
    /// The cached attributes of `ino`.
    fn attrs(&self, ino: Ino);
    /// The cached entry (or absence) `name` in directory `parent`.
    fn entry(&self, parent: Ino, name: &str);
}

/// A change of this client's own in flight (see [`NameLeases::changing`]).
pub struct Changing {
    leases: Arc<NameLeases>,
    inos: Vec<Ino>,
    all: bool,
}

impl Drop for Changing {
    fn drop(&mut self) {
        self.leases.note_own(&self.inos, self.all, -1);
    }
}

/// What recalls tell the adapter to drop.
#[derive(Default)]
struct Dropped {
    attrs: Vec<Ino>,
    entries: Vec<(Ino, String)>,
}

impl Dropped {
    fn extend(&mut self, o: Dropped) {
        self.attrs.extend(o.attrs);
        self.entries.extend(o.entries);
    }

    fn apply(self, inval: &dyn Invalidate) {
        for ino in self.attrs {
            inval.attrs(ino);
        }
        for (dir, n) in self.entries {
            inval.entry(dir, &n);
        }
    }
}

/// Taken before a request is sent (see [`NameLeases::ttl`]).
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    carried: u64,
    until_ms: u64,
    at_ms: u64,
}

#[derive(Default)]
struct Tracked {
    /// Recalls carried out, numbered by [`NameLeases::carried`] at the time, with their inode.
    recent: VecDeque<(u64, Ino)>,
    /// Names given out, per directory, with the inode each gives.
    names: HashMap<Ino, HashMap<String, Ino>>,
    name_count: usize,
    /// Attributes given out, as they were (`None`: given out by an answer that did not carry them here).
    attrs: HashMap<Ino, Option<Attr>>,
    /// Inodes this client is changing itself (see [`NameLeases::changing`]), and changes of unknown inodes.
    changing: HashMap<Ino, usize>,
    changing_any: usize,
}

impl Tracked {
    /// Answers on their way that name `inos` are overtaken: recall (or own change) number `n`.
    fn overtake(&mut self, n: u64, inos: &[Ino]) {
        self.recent.extend(inos.iter().map(|&ino| (n, ino)));
        while self.recent.len() > RECENT_MAX {
            self.recent.pop_front();
        }
    }

    /// Every answer on its way is overtaken: `carried` jumps past what `recent` can tell (see
    /// [`NameLeases::leased_for`]).
    fn overtake_all(&mut self, carried: &AtomicU64) {
        let n = carried.fetch_add(RECENT_MAX as u64 + 1, Ordering::AcqRel) + RECENT_MAX as u64 + 1;
        self.recent.clear();
        self.recent.push_back((n, 0));
    }
}

/// This client's name and attribute leases.
pub struct NameLeases {
    base: Instant,
    /// Leases hold until then (milliseconds since `base`; 0: none).
    until_ms: AtomicU64,
    /// Recalls carried out so far.
    carried: AtomicU64,
    boot: AtomicU64,
    tracked: Mutex<Tracked>,
}

impl Default for NameLeases {
    fn default() -> NameLeases {
        NameLeases {
            base: Instant::now(),
            until_ms: AtomicU64::new(0),
            carried: AtomicU64::new(0),
            boot: AtomicU64::new(0),
            tracked: Mutex::default(),
        }
    }
}

impl NameLeases {
    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    fn tracked(&self) -> MutexGuard<'_, Tracked> {
        self.tracked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken before sending a request whose answer may be leased.
    pub fn ticket(&self) -> Ticket {
        Ticket {
            carried: self.carried.load(Ordering::Acquire),
            until_ms: self.until_ms.load(Ordering::Acquire),
            at_ms: self.now_ms(),
        }
    }

    /// Checked under the tracking lock: the answer to the request `t` was taken for, naming `inos`, is
    /// leased for the returned time.
    fn leased_for(&self, tr: &Tracked, t: &Ticket, inos: &[Ino]) -> Option<Duration> {
        let now = self.now_ms();
        if t.until_ms <= t.at_ms || now >= t.until_ms {
            return None;
        }
        let carried = self.carried.load(Ordering::Acquire);
        if carried != t.carried {
            // Recalls were carried out meanwhile: of one of these inodes, or too many to tell?
            if tr.recent.front().is_none_or(|(n, _)| *n > t.carried + 1) {
                return None;
            }
            // Newest first, only those since the ticket (the queue holds thousands while changes run).
            if tr.recent.iter().rev().take_while(|(n, _)| *n > t.carried).any(|(_, ino)| inos.contains(ino)) {
                return None;
            }
        }
        let until = self.until_ms.load(Ordering::Acquire);
        Some(Duration::from_millis(until.saturating_sub(now)))
    }

    /// How long an answer to the request `t` was taken for may be cached, `inos` being the inodes whose
    /// attributes or names it gives: `None` when it is not leased (the adapters ask through
    /// [`NameLeases::track_entry`] and [`NameLeases::track_attrs`], which also remember it).
    #[cfg(test)]
    fn ttl(&self, t: &Ticket, inos: &[Ino]) -> Option<Duration> {
        let tr = self.tracked();
        self.leased_for(&tr, t, inos)
    }

    /// As [`NameLeases::ttl`] for an entry `name` in `parent` giving `attr` (`None`: only its inode
    /// `ino` is known): remembered, to be answered again by [`NameLeases::entry`] while the lease holds and
    /// dropped at a recall.
    pub fn track_entry(&self, t: &Ticket, parent: Ino, name: &str, ino: Ino, attr: Option<&Attr>) -> Option<Duration> {
        let mut tr = self.tracked();
        let ttl = self.leased_for(&tr, t, &[parent, ino])?;
        if tr.name_count >= TRACKED_MAX || tr.attrs.len() >= TRACKED_MAX {
            return None;
        }
        if tr.names.entry(parent).or_default().insert(name.to_string(), ino).is_none() {
            tr.name_count += 1;
        }
        let keep = attr.filter(|_| tr.changing_any == 0 && !tr.changing.contains_key(&ino)).cloned();
        let slot = tr.attrs.entry(ino).or_default();
        if keep.is_some() {
            *slot = keep;
        }
        Some(ttl)
    }

    /// As [`NameLeases::ttl`] for an answer giving `ino`'s attributes `attr` (`None`: not to be answered
    /// again from here): remembered (see [`NameLeases::track_entry`]).
    pub fn track_attrs(&self, t: &Ticket, ino: Ino, attr: Option<&Attr>) -> Option<Duration> {
        let mut tr = self.tracked();
        let ttl = self.leased_for(&tr, t, &[ino])?;
        if tr.attrs.len() >= TRACKED_MAX {
            return None;
        }
        let keep = attr.filter(|_| tr.changing_any == 0 && !tr.changing.contains_key(&ino)).cloned();
        tr.attrs.insert(ino, keep);
        Some(ttl)
    }

    /// The leased entry `name` in `parent` with its attributes, and how long it stays leased (while the
    /// lease holds and no recall or change of this client's dropped it).
    pub fn entry(&self, parent: Ino, name: &str) -> Option<(Attr, Duration)> {
        let ttl = self.remaining()?;
        let tr = self.tracked();
        let ino = *tr.names.get(&parent)?.get(name)?;
        Some((tr.attrs.get(&ino)?.clone()?, ttl))
    }

    /// The leased attributes of `ino` (as [`NameLeases::entry`]).
    pub fn attrs(&self, ino: Ino) -> Option<(Attr, Duration)> {
        let ttl = self.remaining()?;
        Some((self.tracked().attrs.get(&ino)?.clone()?, ttl))
    }

    fn remaining(&self) -> Option<Duration> {
        let (now, until) = (self.now_ms(), self.until_ms.load(Ordering::Acquire));
        (now < until).then(|| Duration::from_millis(until - now))
    }

    /// This client is about to change `inos` itself (`all`: and inodes it does not know, as the one a
    /// name it removes or replaces gives): the MDS recalls nothing from the changer (its kernel knows what
    /// it changed), so their attributes are not answered from here, nor kept from answers that cross the
    /// change, until the returned guard is dropped (when the change's answer is in).
    pub fn changing(self: &Arc<Self>, inos: &[Ino], all: bool) -> Changing {
        self.note_own(inos, all, 1);
        Changing { leases: self.clone(), inos: inos.to_vec(), all }
    }

    /// This client changed `ino`'s attributes itself where no answer of the MDS can cross the change (a write
    /// buffered here: the MDS learns its size at a flush or close, which [`NameLeases::changing`] covers).
    pub fn forget_attrs(&self, ino: Ino) {
        self.note_own(&[ino], false, 0);
    }

    /// Forgets the attributes of `inos` (every attribute with `all`) and counts changes in flight by `delta`;
    /// answers on their way are not kept (as after a recall).
    fn note_own(&self, inos: &[Ino], all: bool, delta: isize) {
        let mut tr = self.tracked();
        let n = self.carried.fetch_add(1, Ordering::AcqRel) + 1;
        tr.overtake(n, inos);
        for &ino in inos {
            if let Some(a) = tr.attrs.get_mut(&ino) {
                *a = None;
            }
            let c = tr.changing.entry(ino).or_default();
            *c = c.saturating_add_signed(delta);
            if *c == 0 {
                tr.changing.remove(&ino);
            }
        }
        if all {
            tr.attrs.values_mut().for_each(|a| *a = None);
            tr.changing_any = tr.changing_any.saturating_add_signed(delta);
            tr.overtake_all(&self.carried);
        }
    }

    /// This client is about to remove or replace the entry `name` in `parent`: the entry is forgotten, and
    /// `parent` and the inode it gave (every inode when that is not known here) are [`NameLeases::changing`].
    pub fn removing(self: &Arc<Self>, parent: Ino, name: &str) -> Changing {
        match self.forget_entry(parent, name) {
            Some(ino) => self.changing(&[parent, ino], false),
            None => self.changing(&[parent], true),
        }
    }

    /// This client removes or replaces the entry `name` in `parent` (under the directory's lock, so no lookup
    /// of it crosses the change): forgotten. Returns the inode it gave, if known here.
    fn forget_entry(&self, parent: Ino, name: &str) -> Option<Ino> {
        let mut tr = self.tracked();
        let ino = tr.names.get_mut(&parent).and_then(|ns| ns.remove(name));
        if ino.is_some() {
            tr.name_count -= 1;
        }
        ino
    }

    /// Notes one recall (answers on their way are no longer leased, what it names is no longer given
    /// out) and returns what the adapter must drop.
    fn note(&self, r: &Recall) -> Dropped {
        if r.everything {
            return self.note_everything();
        }
        let mut tr = self.tracked();
        let n = self.carried.fetch_add(1, Ordering::AcqRel) + 1;
        tr.overtake(n, &[r.ino]);
        let mut names: Vec<String> = r.names.clone();
        if r.all_names {
            if let Some(all) = tr.names.remove(&r.ino) {
                tr.name_count -= all.len();
                names.extend(all.into_keys());
            }
        } else if let Some(known) = tr.names.get_mut(&r.ino) {
            let before = known.len();
            for n in &r.names {
                known.remove(n);
            }
            let removed = before - known.len();
            tr.name_count -= removed;
        }
        let attrs = r.attrs || tr.attrs.contains_key(&r.ino) && r.all_names;
        if r.attrs {
            tr.attrs.remove(&r.ino);
        }
        Dropped {
            attrs: if attrs { vec![r.ino] } else { Vec::new() },
            entries: names.into_iter().map(|n| (r.ino, n)).collect(),
        }
    }

    /// Notes that everything given out goes (the lease is void: a recall of everything, a restarted MDS,
    /// or a lease that ran out before the next `Watch` was answered); returns what the adapter must drop.
    fn note_everything(&self) -> Dropped {
        let mut tr = self.tracked();
        tr.overtake_all(&self.carried);
        tr.name_count = 0;
        let entries =
            std::mem::take(&mut tr.names).into_iter().flat_map(|(d, ns)| ns.into_keys().map(move |n| (d, n))).collect();
        Dropped { attrs: std::mem::take(&mut tr.attrs).into_keys().collect(), entries }
    }

    /// Carries out one recall (tests).
    #[cfg(test)]
    fn carry_out(&self, r: &Recall, inval: &dyn Invalidate) {
        self.note(r).apply(inval);
    }

    /// Keeps a `Watch` waiting at the MDS until `stop` is set, carrying out each recall through `inval`
    /// before acknowledging it. Runs on the caller's runtime.
    pub async fn run(
        self: Arc<Self>,
        mds: MdsClient,
        inval: Arc<dyn Invalidate>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let mut acked = 0u64;
        // The first is answered at once: leases hold from then on, not only once a wait has passed.
        let mut wait_ms = 0;
        while !stop.load(Ordering::Acquire) {
            let sent = self.now_ms();
            match mds.call(MdsRequest::Watch { acked, wait_ms, leave: false }).await {
                Ok(MdsReply::Recalls(r)) => {
                    wait_ms = WATCH_WAIT.as_millis() as u32;
                    let until = sent + u64::from(r.lease_ms);
                    // Noted at once (answers on their way are checked against them), then dropped from
                    // the adapter's caches off the runtime: an invalidation waits for the directory's lock,
                    // which a request of this mount may hold while it waits for the MDS — and for a task
                    // of this runtime, or for this very acknowledgement (the MDS holds an answer overtaken
                    // by a change until its recall is acknowledged). So the acknowledgement waits for the
                    // kernel at most INVALIDATE_PATIENCE: a directory locked that long is locked by such a
                    // request of this mount, and the invalidation lands when it ends.
                    if !r.recalls.is_empty() {
                        tracing::debug!(recalls = r.recalls.len(), first = ?r.recalls.first(), "recalls");
                    }
                    let mut dropped = Dropped::default();
                    let lapsed = self.now_ms() >= self.until_ms.load(Ordering::Acquire);
                    let old_boot = self.boot.swap(r.boot, Ordering::AcqRel);
                    if old_boot != r.boot || lapsed {
                        // What was given out under a lease that ended (or an MDS that forgot it) goes.
                        dropped.extend(self.note_everything());
                        if old_boot != r.boot {
                            acked = 0;
                        }
                    }
                    let mut last = acked;
                    for rc in r.recalls.iter().filter(|rc| rc.seq > acked) {
                        dropped.extend(self.note(rc));
                        last = rc.seq;
                    }
                    let inval = inval.clone();
                    let carrying = tokio::task::spawn_blocking(move || dropped.apply(inval.as_ref()));
                    match tokio::time::timeout(INVALIDATE_PATIENCE, carrying).await {
                        Ok(Ok(())) => acked = last,
                        Ok(Err(e)) => {
                            tracing::warn!("carrying out recalls failed ({e}): name and attribute leases lapse");
                            self.until_ms.store(0, Ordering::Release);
                            continue;
                        }
                        Err(_) => {
                            tracing::debug!("a recall waits for a directory this mount has locked: acknowledged");
                            acked = last;
                        }
                    }
                    self.until_ms.fetch_max(until, Ordering::AcqRel);
                }
                Ok(other) => {
                    tracing::warn!("unexpected answer to Watch: {other:?}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::debug!("Watch failed ({e}): name and attribute leases lapse");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Tells the MDS this client caches nothing any more (at unmount).
    pub async fn leave(&self, mds: &MdsClient) {
        self.until_ms.store(0, Ordering::Release);
        let _ = mds.call(MdsRequest::Watch { acked: 0, wait_ms: 0, leave: true }).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Invalidate for Log {
        fn attrs(&self, ino: Ino) {
            self.0.lock().unwrap().push(format!("attrs {ino}"));
        }
        fn entry(&self, parent: Ino, name: &str) {
            self.0.lock().unwrap().push(format!("entry {parent}/{name}"));
        }
    }

    fn attr(ino: Ino) -> Attr {
        Attr::new(ino, tessera_proto::types::FileKind::File, 0o644, 0, 0, tessera_proto::types::Timestamp::now())
    }

    #[test]
    fn leased_answers_are_answered_again_until_recalled_or_changed_here() {
        let l = NameLeases::default();
        leased(&l);
        let log = Log::default();
        let t = l.ticket();
        l.track_entry(&t, 1, "a", 5, Some(&attr(5))).unwrap();
        assert_eq!(l.entry(1, "a").unwrap().0.ino, 5);
        assert_eq!(l.attrs(5).unwrap().0.ino, 5);
        let l = Arc::new(l);
        let g = l.changing(&[5], false);
        assert!(l.entry(1, "a").is_none() && l.attrs(5).is_none(), "changed here: asked again");
        l.track_attrs(&l.ticket(), 5, Some(&attr(5))).unwrap();
        assert!(l.attrs(5).is_none(), "not kept while the change is in flight");
        let t = l.ticket();
        drop(g);
        l.track_attrs(&t, 5, Some(&attr(5)));
        assert!(l.attrs(5).is_none(), "an answer that crossed the change is not kept");
        l.track_attrs(&l.ticket(), 5, Some(&attr(5))).unwrap();
        assert!(l.entry(1, "a").is_some());
        l.carry_out(&Recall { seq: 1, ino: 1, names: vec!["a".into()], ..Recall::default() }, &log);
        assert!(l.entry(1, "a").is_none(), "the name was recalled");
        assert!(l.attrs(5).is_some(), "its attributes were not");
        l.track_entry(&l.ticket(), 1, "b", 6, Some(&attr(6))).unwrap();
        assert_eq!(l.forget_entry(1, "b"), Some(6));
        let g = l.changing(&[], true);
        assert!(l.attrs(5).is_none(), "a change of unknown inodes: every attribute goes");
        drop(g);
        l.until_ms.store(0, Ordering::Release);
        l.track_entry(&l.ticket(), 1, "c", 7, Some(&attr(7)));
        assert!(l.entry(1, "c").is_none(), "nothing without a lease");
    }

    fn leased(l: &NameLeases) {
        l.until_ms.store(l.now_ms() + 5000, Ordering::Release);
    }

    #[test]
    fn nothing_is_leased_without_a_watch() {
        let l = NameLeases::default();
        let t = l.ticket();
        assert_eq!(l.ttl(&t, &[5]), None);
        leased(&l);
        assert_eq!(l.ttl(&t, &[5]), None, "asked before the lease held");
        let t = l.ticket();
        let ttl = l.ttl(&t, &[5]).unwrap();
        assert!(ttl > Duration::from_secs(4) && ttl <= Duration::from_secs(5));
    }

    #[test]
    fn an_answer_overtaken_by_a_recall_of_its_inode_is_not_leased() {
        let l = NameLeases::default();
        leased(&l);
        let log = Log::default();
        let t = l.ticket();
        l.carry_out(&Recall { seq: 1, ino: 5, attrs: true, ..Recall::default() }, &log);
        assert_eq!(l.ttl(&t, &[5]), None);
        assert!(l.ttl(&t, &[6]).is_some(), "a recall of another inode does not matter");
        assert!(l.ttl(&l.ticket(), &[5]).is_some(), "asked after the recall");
    }

    #[test]
    fn recalls_drop_what_was_given_out() {
        let l = NameLeases::default();
        leased(&l);
        let log = Log::default();
        let t = l.ticket();
        l.track_entry(&t, 1, "a", 5, None).unwrap();
        l.track_entry(&t, 1, "b", 6, None).unwrap();
        l.carry_out(&Recall { seq: 1, ino: 1, names: vec!["a".into()], ..Recall::default() }, &log);
        assert_eq!(*log.0.lock().unwrap(), vec!["entry 1/a"]);
        log.0.lock().unwrap().clear();
        l.carry_out(&Recall { seq: 2, ino: 1, all_names: true, ..Recall::default() }, &log);
        assert_eq!(*log.0.lock().unwrap(), vec!["entry 1/b"], "every name still given out");
        log.0.lock().unwrap().clear();
        let t = l.ticket();
        l.track_attrs(&t, 7, Some(&attr(7))).unwrap();
        l.carry_out(&Recall { seq: 3, everything: true, ..Recall::default() }, &log);
        let got = log.0.lock().unwrap().clone();
        assert!(got.contains(&"attrs 7".to_string()) && got.contains(&"attrs 5".to_string()), "{got:?}");
        assert_eq!(l.ttl(&t, &[99]), None, "every answer on its way is overtaken");
    }
}
