//! Client sessions and eviction, as Lustre's MDS evicts a client that stops pinging: every request a
//! client sends (and its `KeepAlive`, every third of the timeout while it is idle) renews its session;
//! a client silent for longer than `[mds] eviction_timeout_s` (30 s) is evicted — the handles it holds
//! are closed, which destroys the files it had unlinked while open, and its directory leases have long
//! expired ([`crate::lease::LEASE_TIME`]). The client learns of it from its next request: a
//! `KeepAlive` says so, any other request is refused once with [`ErrorCode::Evicted`] (EIO; it was
//! not applied), and a close of a handle eviction closed answers ESTALE. The client then fails its
//! stale handles with EIO and goes on with new opens.
//!
//! [`ErrorCode::Evicted`]: tessera_proto::error::ErrorCode::Evicted
//!
//! A pure table, with the time passed in: the namespace owns one under its lock and applies what
//! [`Sessions::expire`] returns. Client 0 (the MDS's own callers, tests) has no session. What a peer
//! can grow is bounded: evicted handles are remembered for [`EVICTED_MEMORY`] and at most
//! [`EVICTED_MAX`] of them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tessera_proto::Ino;

/// How long a client that was evicted is remembered (to tell it, and to answer its stale handles).
pub const EVICTED_MEMORY: Duration = Duration::from_secs(3600);
/// Evicted handles remembered at most (the oldest are forgotten first: a close of one then answers as
/// for any unknown handle).
pub const EVICTED_MAX: usize = 1 << 20;

struct Session {
    last: Instant,
    /// Open handles and their inodes.
    handles: HashMap<u64, Ino>,
}

/// One client's eviction, as remembered.
struct Evicted {
    at: Instant,
    /// The client has been told (by a `KeepAlive` reply).
    told: bool,
}

/// A client evicted by [`Sessions::expire`]: the handles to close.
#[derive(Debug, PartialEq, Eq)]
pub struct Eviction {
    pub client: u64,
    pub silent: Duration,
    pub handles: Vec<(u64, Ino)>,
}

/// What a close found.
#[derive(Debug, PartialEq, Eq)]
pub enum Closed {
    /// The handle was open (or not known to belong to a session: client 0, or after an MDS restart).
    Known,
    /// Eviction closed it already.
    Evicted,
}

pub struct Sessions {
    timeout: Duration,
    clients: HashMap<u64, Session>,
    /// Which client holds each open handle.
    owners: HashMap<u64, u64>,
    evicted: HashMap<u64, Evicted>,
    /// Handles eviction closed, oldest first, with when.
    evicted_handles: VecDeque<(Instant, u64)>,
    evicted_set: HashSet<u64>,
}

impl Sessions {
    pub fn new(timeout: Duration) -> Sessions {
        Sessions {
            timeout,
            clients: HashMap::new(),
            owners: HashMap::new(),
            evicted: HashMap::new(),
            evicted_handles: VecDeque::new(),
            evicted_set: HashSet::new(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Clients with a session now.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// Whether `client` has a session now.
    pub fn has(&self, client: u64) -> bool {
        self.clients.contains_key(&client)
    }

    /// A request from `client` arrived: its session is renewed (or begins).
    pub fn touch(&mut self, client: u64, now: Instant) {
        if client == 0 {
            return;
        }
        self.clients.entry(client).or_insert_with(|| Session { last: now, handles: HashMap::new() }).last = now;
    }

    /// `KeepAlive` from `client`: renews its session and says whether it was evicted since it last
    /// asked (once).
    pub fn keep_alive(&mut self, client: u64, now: Instant) -> bool {
        self.touch(client, now);
        self.tell_evicted(client)
    }

    /// Whether `client` was evicted and has not been told yet (it is told now).
    pub fn tell_evicted(&mut self, client: u64) -> bool {
        match self.evicted.get_mut(&client) {
            Some(e) if !e.told => {
                e.told = true;
                true
            }
            _ => false,
        }
    }

    /// `client` opened `handle` on `ino`.
    pub fn opened(&mut self, client: u64, handle: u64, ino: Ino, now: Instant) {
        if client == 0 {
            return;
        }
        self.touch(client, now);
        if let Some(s) = self.clients.get_mut(&client) {
            s.handles.insert(handle, ino);
            self.owners.insert(handle, client);
        }
    }

    /// `handle` is being closed.
    pub fn closed(&mut self, handle: u64) -> Closed {
        if let Some(client) = self.owners.remove(&handle) {
            if let Some(s) = self.clients.get_mut(&client) {
                s.handles.remove(&handle);
            }
            return Closed::Known;
        }
        if self.evicted_set.contains(&handle) {
            Closed::Evicted
        } else {
            Closed::Known
        }
    }

    /// Evicts every client silent for longer than the timeout: their sessions end and their handles are
    /// returned, to be closed. Clients without handles end quietly (nothing of theirs to close).
    pub fn expire(&mut self, now: Instant) -> Vec<Eviction> {
        let silent: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, s)| now.saturating_duration_since(s.last) > self.timeout)
            .map(|(&c, _)| c)
            .collect();
        let mut out = Vec::new();
        for client in silent {
            let Some(s) = self.clients.remove(&client) else { continue };
            if s.handles.is_empty() {
                continue;
            }
            let mut handles: Vec<(u64, Ino)> = s.handles.into_iter().collect();
            handles.sort_unstable();
            for &(h, _) in &handles {
                self.owners.remove(&h);
                self.evicted_set.insert(h);
                self.evicted_handles.push_back((now, h));
            }
            self.evicted.insert(client, Evicted { at: now, told: false });
            out.push(Eviction { client, silent: now.saturating_duration_since(s.last), handles });
        }
        self.forget_old(now);
        out
    }

    fn forget_old(&mut self, now: Instant) {
        while let Some(&(at, h)) = self.evicted_handles.front() {
            if self.evicted_handles.len() <= EVICTED_MAX && now.saturating_duration_since(at) < EVICTED_MEMORY {
                break;
            }
            self.evicted_handles.pop_front();
            self.evicted_set.remove(&h);
        }
        self.evicted.retain(|_, e| now.saturating_duration_since(e.at) < EVICTED_MEMORY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_client_is_evicted_only_after_the_timeout_of_silence() {
        let t0 = Instant::now();
        let mut s = Sessions::new(T);
        s.opened(7, 100, 42, t0);
        s.touch(7, secs(t0, 20));
        assert!(s.expire(secs(t0, 49)).is_empty(), "20 s + 29 s of silence is within the timeout");
        let ev = s.expire(secs(t0, 51));
        assert_eq!(ev, vec![Eviction { client: 7, silent: Duration::from_secs(31), handles: vec![(100, 42)] }]);
        assert!(s.is_empty());
        assert!(s.expire(secs(t0, 100)).is_empty(), "evicted once");
    }

    #[test]
    fn keep_alives_keep_a_session_and_tell_an_evicted_client_once() {
        let t0 = Instant::now();
        let mut s = Sessions::new(T);
        s.opened(7, 1, 5, t0);
        for k in 1..10 {
            assert!(!s.keep_alive(7, secs(t0, 10 * k)));
            assert!(s.expire(secs(t0, 10 * k + 1)).is_empty());
        }
        s.opened(8, 2, 6, t0);
        assert_eq!(s.expire(secs(t0, 31)).len(), 1, "client 8 fell silent");
        assert!(s.keep_alive(8, secs(t0, 40)), "told at its next keep-alive");
        assert!(!s.keep_alive(8, secs(t0, 41)), "and only once");
    }

    #[test]
    fn a_close_of_an_evicted_handle_is_recognised_and_others_are_not() {
        let t0 = Instant::now();
        let mut s = Sessions::new(T);
        s.opened(7, 1, 5, t0);
        s.opened(7, 2, 5, t0);
        assert_eq!(s.closed(2), Closed::Known);
        s.expire(secs(t0, 31));
        assert_eq!(s.closed(1), Closed::Evicted);
        assert_eq!(s.closed(99), Closed::Known, "an unknown handle (an MDS restart) closes as before");
        // Remembered for EVICTED_MEMORY only.
        s.expire(t0 + EVICTED_MEMORY + Duration::from_secs(32));
        assert_eq!(s.closed(1), Closed::Known);
    }

    #[test]
    fn closed_handles_are_not_closed_again_by_eviction_and_idle_clients_end_quietly() {
        let t0 = Instant::now();
        let mut s = Sessions::new(T);
        s.opened(7, 1, 5, t0);
        s.closed(1);
        s.touch(9, t0);
        assert!(s.expire(secs(t0, 31)).is_empty(), "no handles: nothing to evict");
        assert!(s.is_empty(), "but the sessions ended");
        assert!(!s.keep_alive(7, secs(t0, 32)));
    }

    #[test]
    fn client_zero_has_no_session() {
        let t0 = Instant::now();
        let mut s = Sessions::new(T);
        s.opened(0, 1, 5, t0);
        assert!(s.is_empty());
        assert!(s.expire(secs(t0, 100)).is_empty());
        assert_eq!(s.closed(1), Closed::Known);
    }
}
