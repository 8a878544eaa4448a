//! Directory leases (asynchronous creates, as Ceph's async dirops): while a client holds the lease on a
//! directory it is the only client that reads or changes it, so it can answer lookups of unknown names
//! itself and create files without waiting for the MDS, sending them in batches. Another client's request
//! on a leased directory waits here: it recalls the lease (the holder's next batch gives it up) and goes
//! on once the holder has given it up or the lease has expired.
//!
//! Leases live in memory only. An MDS restart forgets them; a holder then learns it has none from its
//! next batch (entries whose names were taken meanwhile fail with EEXIST and are reported to it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_proto::msg::MdsRequest;
use tessera_proto::types::Ino;
use tokio::sync::Notify;

/// How long a lease lasts after its grant or its last renewal. The holder renews while it creates (every
/// batch) and gives it up when idle; this bounds how long others wait for a holder that died.
pub const LEASE_TIME: Duration = Duration::from_secs(2);
/// Inode numbers a holder keeps in reserve (topped up by every batch).
pub const RESERVED_INOS: usize = 256;

struct Lease {
    token: u64,
    /// The holder's connection: its own requests do not wait.
    conn: u64,
    expires: Instant,
    /// Another client waits: the next batch ends the lease.
    recalled: bool,
}

#[derive(Default)]
struct Table {
    leases: HashMap<Ino, Lease>,
    /// Inode numbers handed to holders and not used yet, with the directory they were given for.
    reserved: HashMap<Ino, Ino>,
    next_token: u64,
}

/// What a holder's renewal found.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Still held, now until `LEASE_TIME` from now.
    Renewed,
    /// Another client waits: the holder must stop using it and give it up (its `CreateBatch` with
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
}

impl Leases {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new lease on `dir` for connection `conn`, unless another live one exists. (The namespace checks
    /// the directory is empty and the caller may use it.)
    pub fn grant(&self, dir: Ino, conn: u64) -> Option<u64> {
        let mut t = self.table();
        let now = Instant::now();
        if let Some(l) = t.leases.get(&dir) {
            if l.expires > now && (l.conn != conn || l.recalled) {
                return None;
            }
        }
        t.next_token += 1;
        let token = t.next_token;
        t.leases.insert(dir, Lease { token, conn, expires: now + LEASE_TIME, recalled: false });
        Some(token)
    }

    /// Remembers inode numbers handed to the holder of `dir`.
    pub fn reserve(&self, dir: Ino, inos: &[Ino]) {
        let mut t = self.table();
        t.reserved.extend(inos.iter().map(|&i| (i, dir)));
    }

    /// Takes a reserved inode number for a create in `dir`: false if it was not handed out for it.
    pub fn use_reserved(&self, dir: Ino, ino: Ino) -> bool {
        let mut t = self.table();
        match t.reserved.get(&ino) {
            Some(&d) if d == dir => {
                t.reserved.remove(&ino);
                true
            }
            _ => false,
        }
    }

    /// Whether `conn` holds a live lease on `dir` with `token`.
    pub fn holds(&self, dir: Ino, token: u64, conn: u64) -> bool {
        let t = self.table();
        t.leases.get(&dir).is_some_and(|l| l.token == token && l.conn == conn && l.expires > Instant::now())
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
        t.leases.remove(&dir);
        drop(t);
        self.ended.notify_waiters();
        Renewal::Ended
    }

    /// Waits until no other connection than `conn` holds a lease on any of `dirs` (`None`: on any
    /// directory at all, for requests that may reach a leased directory by path or by removing it).
    /// Recalls the leases found, so their holders give them up at their next batch.
    pub async fn wait_for(&self, conn: u64, dirs: Option<&[Ino]>) {
        loop {
            let notified = self.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let mut t = self.table();
                let now = Instant::now();
                t.leases.retain(|_, l| l.expires > now);
                let mut deadline: Option<Instant> = None;
                for (dir, l) in t.leases.iter_mut() {
                    if l.conn == conn || dirs.is_some_and(|d| !d.contains(dir)) {
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

/// What a request may read or change that a lease covers.
#[derive(Debug, PartialEq, Eq)]
pub enum Touches {
    Nothing,
    /// These inodes (when they are leased directories).
    Inodes(Vec<Ino>),
    /// Possibly any directory: a path walk, or a removal or rename (which may replace a directory).
    Any,
}

pub fn touches(req: &MdsRequest) -> Touches {
    use MdsRequest as Q;
    match req {
        Q::Lookup { parent, .. }
        | Q::Create { parent, .. }
        | Q::CreateOpen { parent, .. }
        | Q::Mkdir { parent, .. }
        | Q::Symlink { parent, .. }
        | Q::Unlink { parent, .. } => Touches::Inodes(vec![*parent]),
        Q::Link { new_parent, .. } => Touches::Inodes(vec![*new_parent]),
        Q::GetAttr { ino }
        | Q::SetAttr { ino, .. }
        | Q::Readlink { ino }
        | Q::ReadDir { ino, .. }
        | Q::Open { ino, .. }
        | Q::Access { ino, .. }
        | Q::GetXattr { ino, .. }
        | Q::SetXattr { ino, .. }
        | Q::ListXattr { ino }
        | Q::RemoveXattr { ino, .. }
        | Q::GetLayout { ino }
        | Q::SetLayout { ino, .. } => Touches::Inodes(vec![*ino]),
        Q::LookupPath { .. } | Q::Rmdir { .. } | Q::Rename { .. } => Touches::Any,
        // Files (closes, size reports), a lease's own requests, the cluster and the orchestrator.
        Q::Close { .. }
        | Q::ReportWrite { .. }
        | Q::LeaseDir { .. }
        | Q::CreateBatch { .. }
        | Q::Ping
        | Q::Sync
        | Q::StatFs
        | Q::DsReport(_)
        | Q::ClusterStatus
        | Q::LocalityReport(_)
        | Q::SetOrchestratorMode { .. }
        | Q::OrchestratorStatus => Touches::Nothing,
    }
}

impl Leases {
    /// Holds `req` from connection `conn` while another connection leases what it touches.
    pub async fn admit(&self, conn: u64, req: &MdsRequest) {
        if !self.any() {
            return;
        }
        match touches(req) {
            Touches::Nothing => {}
            Touches::Inodes(inos) => self.wait_for(conn, Some(&inos)).await,
            Touches::Any => self.wait_for(conn, None).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_renewal_until_recalled() {
        let l = Leases::default();
        let t = l.grant(10, 1).unwrap();
        assert!(l.grant(10, 2).is_none(), "another connection is refused while it lasts");
        assert!(l.holds(10, t, 1));
        assert!(!l.holds(10, t, 2));
        assert_eq!(l.renew(10, t, true), Renewal::Renewed);
        assert_eq!(l.renew(10, t + 1, true), Renewal::Ended, "a stale token");
        assert_eq!(l.renew(10, t, false), Renewal::Ended, "given up");
        assert!(!l.any());
        let t2 = l.grant(10, 2).unwrap();
        assert_ne!(t, t2);
    }

    #[test]
    fn reserved_inodes_are_used_once_and_only_in_their_directory() {
        let l = Leases::default();
        l.reserve(10, &[100, 101]);
        assert!(!l.use_reserved(11, 100));
        assert!(l.use_reserved(10, 100));
        assert!(!l.use_reserved(10, 100));
        assert!(!l.use_reserved(10, 999));
        assert!(l.use_reserved(10, 101));
    }

    #[tokio::test]
    async fn a_waiter_recalls_the_lease_and_goes_on_when_it_is_given_up() {
        let l = std::sync::Arc::new(Leases::default());
        let t = l.grant(10, 1).unwrap();
        // The holder itself and requests on other directories do not wait.
        tokio::time::timeout(Duration::from_millis(100), l.wait_for(1, None)).await.unwrap();
        tokio::time::timeout(Duration::from_millis(100), l.wait_for(2, Some(&[11]))).await.unwrap();
        let waiter = tokio::spawn({
            let l = l.clone();
            async move { l.wait_for(2, Some(&[10])).await }
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
    async fn a_waiter_goes_on_when_an_abandoned_lease_expires() {
        let l = Leases::default();
        l.grant(10, 1).unwrap();
        let start = Instant::now();
        tokio::time::timeout(LEASE_TIME * 2, l.wait_for(2, None)).await.unwrap();
        assert!(start.elapsed() >= LEASE_TIME - Duration::from_millis(50));
    }
}
