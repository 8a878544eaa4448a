//! SW, server window (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §4.2, Algorithm 1: a
//! request's priority is `(timestamp / windowSize) * max + serverID`, inserted in one queue in
//! ascending priority; smaller priority is scheduled earlier).
//!
//! Rule: one queue ordered by `(arrival_us / window_us, server id, seq)`: time windows in order, and
//! within a window, requests grouped by data server in server order, each server's in arrival order.
//! (The tuple is the thesis's `window * max + server` without the overflow, plus arrival to break
//! ties.) One request per release; merging is left to the dispatch stage, as in the thesis.
//!
//! **Decision** (release rule): work-conserving. `next` releases the queue's head at once (the
//! earliest window, then the lowest server) and never waits: the window only bounds how far a request
//! can be overtaken by later ones (so none starves), it is not a time the scheduler holds requests for.
//! This is the thesis's SW — §4.3 contrasts it with TWINS ("no fixed time window but rather an abstract
//! window so requests do not starve"), which is why requests "were not staying long enough" in its
//! queue to coordinate servers. Holding requests until their window closes would be a different
//! scheduler, adding up to one window (1 s by default) of latency. A window of 0 is taken as 1 µs.

use super::{Next, Req, Scheduler};
use std::collections::BTreeMap;
use tessera_proto::types::DsId;

pub struct StaticWindows {
    window_us: u64,
    /// By `(window, server, seq)`.
    queue: BTreeMap<(u64, DsId, u64), Req>,
}

impl StaticWindows {
    pub fn new(window_us: u64) -> StaticWindows {
        StaticWindows { window_us: window_us.max(1), queue: BTreeMap::new() }
    }

    /// The window a request arriving at `arrival_us` belongs to.
    pub fn window_of(&self, arrival_us: u64) -> u64 {
        arrival_us / self.window_us
    }
}

impl Scheduler for StaticWindows {
    fn name(&self) -> &'static str {
        "sw"
    }

    fn push(&mut self, r: Req) {
        self.queue.insert((self.window_of(r.arrival_us), r.ds, r.seq), r);
    }

    fn next(&mut self, _now_us: u64) -> Next {
        match self.queue.pop_first() {
            Some((_, r)) => Next::Release(vec![r]),
            None => Next::Idle,
        }
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn depths(&self) -> Vec<(String, usize)> {
        vec![("queue".to_string(), self.queue.len())]
    }

    fn take_all(&mut self) -> Vec<Req> {
        super::by_arrival(std::mem::take(&mut self.queue).into_values().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, req, seqs};
    use crate::sched::Op;

    fn at(seq: u64, arrival_us: u64, ds: DsId) -> Req {
        let mut r = req(seq, ds, 1, Op::Read, seq * 1000, 10);
        r.arrival_us = arrival_us;
        r
    }

    #[test]
    fn sw_orders_by_window_then_server_then_arrival() {
        let mut s = StaticWindows::new(1000);
        s.push(at(0, 100, 2));
        s.push(at(1, 200, 0));
        s.push(at(2, 300, 1));
        s.push(at(3, 1100, 0)); // window 1
        s.push(at(4, 900, 2)); // window 0, after seq 0 on server 2
        s.push(at(5, 950, 0)); // window 0, server 0
        s.push(at(6, 2500, 1)); // window 2
        s.push(at(7, 1999, 3)); // window 1
                                // Window 0: server 0 (1, 5), server 1 (2), server 2 (0, 4); window 1: 3, 7; window 2: 6.
                                // Work-conserving: all released at once, at a time before any window closes.
        let runs = drain(&mut s, 0);
        assert!(runs.iter().all(|r| r.len() == 1));
        assert_eq!(runs.concat(), vec![1, 5, 2, 0, 4, 3, 7, 6]);
    }

    #[test]
    fn sw_releases_one_request_at_a_time_without_merging() {
        let mut s = StaticWindows::new(1_000_000);
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        s.push(req(1, 0, 1, Op::Read, 10, 10)); // contiguous, same window and server
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn sw_window_size_changes_the_order() {
        // With a 10 ms window both requests share window 0 and server 0 goes first; with 1 ms they
        // are in different windows and arrival wins.
        for (window, expect) in [(10_000, vec![vec![1], vec![0]]), (1_000, vec![vec![0], vec![1]])] {
            let mut s = StaticWindows::new(window);
            s.push(at(0, 500, 3));
            s.push(at(1, 1500, 0));
            assert_eq!(drain(&mut s, 0), expect, "window {window}");
        }
    }

    #[test]
    fn sw_take_all_is_arrival_order() {
        let mut s = StaticWindows::new(1000);
        s.push(at(0, 0, 3));
        s.push(at(1, 10, 0));
        s.push(at(2, 20, 1));
        assert_eq!(s.depths(), vec![("queue".to_string(), 3)]);
        assert_eq!(seqs(&s.take_all()), vec![0, 1, 2]);
        assert_eq!(s.next(0), Next::Idle);
        assert_eq!(StaticWindows::new(0).window_of(5), 5);
    }
}
