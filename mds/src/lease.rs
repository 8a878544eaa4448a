//! Directory leases (asynchronous creates and unlinks, as Ceph's async dirops): while a client holds the
//! lease on a directory it is the only client that reads or changes it, so it can answer lookups of
//! unknown names itself and create and remove files without waiting for the MDS, sending the changes in
//! batches. Another client's request on a leased directory waits here: it recalls the lease (the holder's
//! next batch gives it up) and goes on once the holder has given it up or the lease has expired.
//!
//! Leases live in memory only. An MDS restart forgets them; a holder then learns it has none from its
//! next batch (entries whose names were taken meanwhile fail with EEXIST and are reported to it).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_proto::msg::MdsRequest;
pub use tessera_proto::requests::Touches;
use tessera_proto::types::Ino;
use tokio::sync::Notify;

/// How long a lease lasts after its grant or its last renewal. The holder renews while it creates (every
/// batch) and gives it up when idle; this bounds how long others wait for a holder that died.
pub const LEASE_TIME: Duration = Duration::from_secs(2);
/// Inode numbers a holder keeps in reserve (topped up by every batch).
pub const RESERVED_INOS: usize = 256;

/// Who holds a lease: one client on one connection. Through a forwarding node many clients share a
/// connection, and one client's lease must not let the others past it, so the client id counts too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub conn: u64,
    pub client: u64,
}

struct Lease {
    token: u64,
    /// The holder: its own requests do not wait.
    holder: Holder,
    expires: Instant,
    /// Another client waits: the next batch ends the lease.
    recalled: bool,
    /// Inode numbers handed to the holder and not used yet.
    reserved: HashSet<Ino>,
}

#[derive(Default)]
struct Table {
    leases: HashMap<Ino, Lease>,
    /// Reservations of leases that expired (a holder's late batch may still use them), with when.
    retired: VecDeque<(Instant, Ino, HashSet<Ino>)>,
    /// Requests admitted and not finished, per directory they touch and sender, and those that touch any.
    inflight: HashMap<Ino, HashMap<Holder, usize>>,
    inflight_any: usize,
    next_token: u64,
}

/// How long the reservations of an expired lease stay usable.
const RETIRED_KEEP: Duration = Duration::from_secs(60);

impl Table {
    /// Ends `dir`'s lease; an expired one's reservations are kept a while, a given-up one's dropped.
    fn end(&mut self, dir: Ino, expired: bool) {
        if let Some(l) = self.leases.remove(&dir) {
            if expired && !l.reserved.is_empty() {
                self.retired.push_back((Instant::now(), dir, l.reserved));
            }
        }
        let now = Instant::now();
        while self.retired.front().is_some_and(|(at, _, _)| now.duration_since(*at) > RETIRED_KEEP) {
            self.retired.pop_front();
        }
    }

    fn expire(&mut self, now: Instant) {
        let expired: Vec<Ino> = self.leases.iter().filter(|(_, l)| l.expires <= now).map(|(&d, _)| d).collect();
        for d in expired {
            self.end(d, true);
        }
    }
}

/// What a holder's renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Still held, now until `LEASE_TIME` from now.
    Renewed,
    /// Another client waits: the holder must stop using it and give it up (its `DirBatch` with
    /// `keep` false), which lets the waiters go on. Until then, or its expiry, it still holds them.
    Recalled,
    /// Not held any more (given up, expired, or the MDS restarted).
    Ended,
}

#[derive(Default)]
pub struct Leases {
    table: Mutex<Table>,
    /// Woken whenever a lease ends.
    ended: Notify,
    /// After a restart: until then requests on directories wait, since a holder from before may still
    /// be answering for one (this run does not know which).
    grace_until: Option<Instant>,
}

/// A request admitted past the leases: counted as in flight (no lease is granted on what it touches)
/// until dropped.
pub struct Admitted<'a> {
    leases: &'a Leases,
    holder: Holder,
    touches: Touches,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        match self.touches {
            Touches::Nothing => {}
            Touches::Any => {
                let mut t = self.leases.table();
                t.inflight_any = t.inflight_any.saturating_sub(1);
            }
            Touches::Inode(i) => {
                let mut t = self.leases.table();
                if let Some(by) = t.inflight.get_mut(&i) {
                    if let Some(n) = by.get_mut(&self.holder) {
                        *n -= 1;
                        if *n == 0 {
                            by.remove(&self.holder);
                        }
                    }
                    if by.is_empty() {
                        t.inflight.remove(&i);
                    }
                }
            }
        }
    }
}

impl Leases {
    /// Leases for an MDS that starts now; `grace`: how long the previous run's leases may still last.
    pub fn with_grace(grace: Duration) -> Leases {
        let grace_until = (!grace.is_zero()).then(|| Instant::now() + grace);
        if !grace.is_zero() {
            tracing::info!(?grace, "leases may still be held from before the restart: directories wait");
        }
        Leases { grace_until, ..Leases::default() }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new lease on `dir` for `holder`, unless another live one exists or another client's request on
    /// it (or on any directory) is in flight: it may have passed [`Leases::admit`] before this grant and
    /// change the directory after it, behind the holder's back. The holder's own requests in flight are
    /// no such surprise: it learns their outcome. (The namespace lists the directory for the grant and
    /// checks the caller may use it.)
    pub fn grant(&self, dir: Ino, holder: Holder) -> Option<u64> {
        let mut t = self.table();
        let now = Instant::now();
        t.expire(now);
        let others = t.inflight.get(&dir).is_some_and(|by| by.keys().any(|h| *h != holder));
        if t.inflight_any > 0 || others {
            return None;
        }
        if let Some(l) = t.leases.get(&dir) {
            if l.holder != holder || l.recalled {
                return None;
            }
        }
        t.end(dir, false);
        t.next_token += 1;
        let token = t.next_token;
        let lease = Lease { token, holder, expires: now + LEASE_TIME, recalled: false, reserved: HashSet::new() };
        t.leases.insert(dir, lease);
        Some(token)
    }

    /// Remembers inode numbers handed to the holder of `dir`.
    pub fn reserve(&self, dir: Ino, inos: &[Ino]) {
        if let Some(l) = self.table().leases.get_mut(&dir) {
            l.reserved.extend(inos.iter().copied());
        }
    }

    /// Whether `ino` was handed out for creates in `dir` and not used yet.
    pub fn is_reserved(&self, dir: Ino, ino: Ino) -> bool {
        let t = self.table();
        t.leases.get(&dir).is_some_and(|l| l.reserved.contains(&ino))
            || t.retired.iter().any(|(_, d, r)| *d == dir && r.contains(&ino))
    }

    /// Marks reserved numbers as used (after the creates that used them committed).
    pub fn consume(&self, dir: Ino, inos: &[Ino]) {
        let mut t = self.table();
        if let Some(l) = t.leases.get_mut(&dir) {
            for i in inos {
                l.reserved.remove(i);
            }
        }
        for (_, d, r) in t.retired.iter_mut() {
            if *d == dir {
                for i in inos {
                    r.remove(i);
                }
            }
        }
    }

    /// Whether `holder` holds a live lease on `dir` with `token`.
    pub fn holds(&self, dir: Ino, token: u64, holder: Holder) -> bool {
        let t = self.table();
        t.leases.get(&dir).is_some_and(|l| l.token == token && l.holder == holder && l.expires > Instant::now())
    }

    /// Keeps a held lease from expiring while its holder's batch is applied (and waiters waiting).
    pub fn extend(&self, dir: Ino, token: u64) {
        let mut t = self.table();
        let now = Instant::now();
        if let Some(l) = t.leases.get_mut(&dir).filter(|l| l.token == token && l.expires > now) {
            l.expires = l.expires.max(now + LEASE_TIME);
        }
    }

    /// After a holder's batch: renews the lease (`keep`, not recalled) or ends it (`keep` false). A
    /// recalled lease ends only when its holder gives it up, so waiters never go on while the holder may
    /// still answer for the directory (it learns of the recall from this batch's reply).
    pub fn renew(&self, dir: Ino, token: u64, keep: bool) -> Renewal {
        let mut t = self.table();
        let now = Instant::now();
        let Some(l) = t.leases.get_mut(&dir) else { return Renewal::Ended };
        if l.token != token || l.expires <= now {
            return Renewal::Ended;
        }
        if keep && l.recalled {
            return Renewal::Recalled;
        }
        if keep {
            l.expires = now + LEASE_TIME;
            return Renewal::Renewed;
        }
        t.end(dir, false);
        drop(t);
        self.ended.notify_waiters();
        Renewal::Ended
    }

    /// Waits until no other holder than `holder` holds a lease on `dir` (`None`: on any directory at
    /// all, for requests that may reach a leased directory by path or by removing it). Recalls the
    /// leases found, so their holders give them up at their next batch.
    pub async fn wait_for(&self, holder: Holder, dir: Option<Ino>) {
        loop {
            let notified = self.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut t = self.table();
                let now = Instant::now();
                t.expire(now);
                let mut deadline: Option<Instant> = None;
                for (leased, l) in t.leases.iter_mut() {
                    if l.holder == holder || dir.is_some_and(|d| d != *leased) {
                        continue;
                    }
                    l.recalled = true;
                    deadline = Some(deadline.map_or(l.expires, |d| d.min(l.expires)));
                }
                deadline
            };
            let Some(deadline) = deadline else { return };
            let _ = tokio::time::timeout_at(deadline.into(), notified).await;
        }
    }

    /// Whether any lease is held (a cheap check before working out what a request touches).
    pub fn any(&self) -> bool {
        !self.table().leases.is_empty()
    }
}

impl Leases {
    /// Counts `req` from `holder` as in flight, then holds it while another holder leases what it
    /// touches. The request is served while the returned guard lives.
    pub async fn admit(&self, holder: Holder, req: &MdsRequest) -> Admitted<'_> {
        let touches = req.properties().touches;
        match touches {
            Touches::Nothing => {}
            Touches::Any => self.table().inflight_any += 1,
            Touches::Inode(i) => *self.table().inflight.entry(i).or_default().entry(holder).or_default() += 1,
        }
        let admitted = Admitted { leases: self, holder, touches };
        if let Some(g) = self.grace_until {
            if touches != Touches::Nothing && Instant::now() < g {
                tokio::time::sleep_until(g.into()).await;
            }
        }
        if self.any() {
            match touches {
                Touches::Nothing => {}
                Touches::Inode(i) => self.wait_for(holder, Some(i)).await,
                Touches::Any => self.wait_for(holder, None).await,
            }
        }
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Client `n` on a connection of its own.
    fn h(n: u64) -> Holder {
        Holder { conn: n, client: n }
    }

    #[test]
    fn one_holder_at_a_time_and_renewal_until_recalled() {
        let l = Leases::default();
        let t = l.grant(10, h(1)).unwrap();
        assert!(l.grant(10, h(2)).is_none(), "another connection is refused while it lasts");
        assert!(l.holds(10, t, h(1)));
        assert!(!l.holds(10, t, h(2)));
        assert_eq!(l.renew(10, t, true), Renewal::Renewed);
        assert_eq!(l.renew(10, t + 1, true), Renewal::Ended, "a stale token");
        assert_eq!(l.renew(10, t, false), Renewal::Ended, "given up");
        assert!(!l.any());
        let t2 = l.grant(10, h(2)).unwrap();
        assert_ne!(t, t2);
    }

    #[test]
    fn reservations_belong_to_their_lease_and_end_with_it() {
        let l = Leases::default();
        let t = l.grant(10, h(1)).unwrap();
        l.reserve(10, &[100, 101]);
        l.reserve(11, &[200]);
        assert!(!l.is_reserved(11, 200), "no lease on 11: nothing reserved there");
        assert!(!l.is_reserved(11, 100));
        assert!(l.is_reserved(10, 100));
        l.consume(10, &[100]);
        assert!(!l.is_reserved(10, 100), "used once");
        assert!(l.is_reserved(10, 101));
        assert_eq!(l.renew(10, t, false), Renewal::Ended);
        assert!(!l.is_reserved(10, 101), "given up: its reservations go with it");
    }

    #[test]
    fn no_grant_while_a_request_on_the_directory_is_in_flight() {
        let l = Leases::default();
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let lookup = MdsRequest::Lookup { parent: 10, name: "x".into() };
        let admitted = rt.block_on(l.admit(h(2), &lookup));
        assert!(l.grant(10, h(1)).is_none(), "the lookup may run after a grant and see the directory");
        assert!(l.grant(11, h(1)).is_some(), "another directory is free");
        let own = rt.block_on(l.admit(h(3), &lookup));
        assert!(l.grant(10, h(3)).is_none(), "h(2)'s lookup is still in flight");
        drop(admitted);
        let t = l.grant(10, h(3)).expect("the holder's own request is no surprise to it");
        drop(own);
        assert_eq!(l.renew(10, t, false), Renewal::Ended);
        let path = MdsRequest::LookupPath { path: "/a".into(), follow: true };
        let walking = rt.block_on(l.admit(h(2), &path));
        assert!(l.grant(10, h(1)).is_none(), "a path walk may reach any directory");
        drop(walking);
        assert!(l.grant(10, h(1)).is_some());
    }

    #[tokio::test]
    async fn a_waiter_recalls_the_lease_and_goes_on_when_it_is_given_up() {
        let l = std::sync::Arc::new(Leases::default());
        let t = l.grant(10, h(1)).unwrap();
        // The holder itself and requests on other directories do not wait.
        tokio::time::timeout(Duration::from_millis(100), l.wait_for(h(1), None)).await.unwrap();
        tokio::time::timeout(Duration::from_millis(100), l.wait_for(h(2), Some(11))).await.unwrap();
        let waiter = tokio::spawn({
            let l = l.clone();
            async move { l.wait_for(h(2), Some(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "another connection waits while the lease lasts");
        assert_eq!(l.renew(10, t, true), Renewal::Recalled, "recalled: the holder learns it at its next batch");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "the waiter goes on only once the holder gave it up");
        assert_eq!(l.renew(10, t, false), Renewal::Ended);
        tokio::time::timeout(Duration::from_secs(1), waiter).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn clients_sharing_a_connection_do_not_share_its_lease() {
        // Through a forwarding node, clients 7 and 8 share connection 1.
        let (c7, c8) = (Holder { conn: 1, client: 7 }, Holder { conn: 1, client: 8 });
        let l = Leases::default();
        let t = l.grant(10, c7).unwrap();
        assert!(l.grant(10, c8).is_none(), "another client on the same connection is refused");
        assert!(l.holds(10, t, c7) && !l.holds(10, t, c8));
        tokio::time::timeout(Duration::from_millis(100), l.wait_for(c7, Some(10))).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(100), l.wait_for(c8, Some(10))).await;
        assert!(waited.is_err(), "client 8 waits for client 7's lease like any other client");
        assert_eq!(l.renew(10, t, true), Renewal::Recalled, "and recalls it");
    }

    #[tokio::test]
    async fn a_waiter_goes_on_when_an_abandoned_lease_expires() {
        let l = Leases::default();
        l.grant(10, h(1)).unwrap();
        let start = Instant::now();
        tokio::time::timeout(LEASE_TIME * 2, l.wait_for(h(2), None)).await.unwrap();
        assert!(start.elapsed() >= LEASE_TIME - Duration::from_millis(50));
    }
}
