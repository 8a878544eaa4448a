//! HBRR, handle-based round robin (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.1 and
//! §3.4.3, IOFSL's second scheduler after Ohta et al. 2010).
//!
//! Rule: one queue per file (`ino`) and operation, in arrival order. The queues with requests form a
//! ring in the order they became non-empty; the front queue is visited and releases requests until it
//! has released `quantum` requests in this visit or is empty, then the next queue is visited (a queue
//! that still has requests goes to the back of the ring; an empty one leaves it and re-enters at the
//! back when a request arrives). Each release is a merged run: the queue's oldest request, then the
//! oldest queued request continuing the run's last one ([`Req::continued_by`]), and so on.
//!
//! **Decision** (quantum counting, where the thesis says only "a maximum number of requests"): the
//! quantum counts client requests, not released runs or bytes. A run of k merged requests uses k of
//! the quantum, and a run is cut to the quantum still left in the visit, so a visit never releases
//! more than `quantum` requests (with quantum 8 below [`MAX_MERGE`](super::MAX_MERGE) = 16, runs are
//! at most 8 requests here; the dispatch stage may merge further). A quantum of 0 is taken as 1.

use super::{by_arrival, file_label, take_run, Next, Op, Req, Scheduler};
use std::collections::{HashMap, VecDeque};
use tessera_proto::types::Ino;

type Key = (Ino, Op);

pub struct Hbrr {
    quantum: u32,
    queues: HashMap<Key, VecDeque<Req>>,
    /// Non-empty queues, the one being visited first.
    ring: VecDeque<Key>,
    /// Requests the front queue has released in its current visit.
    used: u32,
    len: usize,
}

impl Hbrr {
    pub fn new(quantum: u32) -> Hbrr {
        Hbrr { quantum: quantum.max(1), queues: HashMap::new(), ring: VecDeque::new(), used: 0, len: 0 }
    }
}

impl Scheduler for Hbrr {
    fn name(&self) -> &'static str {
        "hbrr"
    }

    fn push(&mut self, r: Req) {
        let key = (r.ino, r.op);
        let q = self.queues.entry(key).or_default();
        if q.is_empty() {
            self.ring.push_back(key);
        }
        q.push_back(r);
        self.len += 1;
    }

    fn next(&mut self, _now_us: u64) -> Next {
        loop {
            let Some(&key) = self.ring.front() else {
                return Next::Idle;
            };
            let Some(q) = self.queues.get_mut(&key) else {
                // A ring entry without its queue: nothing to serve there, visit the next.
                self.ring.pop_front();
                self.used = 0;
                continue;
            };
            let left = self.quantum.saturating_sub(self.used).max(1) as usize;
            let run = take_run(q, left);
            self.used = self.used.saturating_add(run.len() as u32);
            self.len = self.len.saturating_sub(run.len());
            if q.is_empty() {
                self.queues.remove(&key);
                self.ring.pop_front();
                self.used = 0;
            } else if self.used >= self.quantum {
                self.ring.rotate_left(1);
                self.used = 0;
            }
            if !run.is_empty() {
                return Next::Release(run);
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn depths(&self) -> Vec<(String, usize)> {
        let depth = |key| self.queues.get(key).map_or(0, VecDeque::len);
        self.ring.iter().map(|key| (file_label(key.0, key.1), depth(key))).collect()
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.ring.clear();
        self.used = 0;
        self.len = 0;
        by_arrival(self.queues.drain().flat_map(|(_, q)| q).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, req, seqs};

    #[test]
    fn hbrr_round_robin_serves_quantum_requests_per_queue() {
        let mut s = Hbrr::new(2);
        // Non-contiguous requests (gaps), so nothing merges: the ring order is by first arrival.
        s.push(req(0, 0, 1, Op::Read, 0, 10)); // queue (1, read)
        s.push(req(1, 0, 2, Op::Read, 0, 10)); // queue (2, read)
        s.push(req(2, 0, 1, Op::Write, 0, 10)); // queue (1, write): same file, other operation
        s.push(req(3, 0, 1, Op::Read, 100, 10));
        s.push(req(4, 0, 2, Op::Read, 100, 10));
        s.push(req(5, 0, 1, Op::Read, 200, 10));
        s.push(req(6, 0, 2, Op::Read, 200, 10));
        assert_eq!(
            s.depths(),
            vec![("ino 1 read".to_string(), 3), ("ino 2 read".to_string(), 3), ("ino 1 write".to_string(), 1)]
        );
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![3], vec![1], vec![4], vec![2], vec![5], vec![6]]);
        assert!(s.is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }

    #[test]
    fn hbrr_merges_contiguous_requests_inside_a_queue() {
        let mut s = Hbrr::new(8);
        // File 1 read: 0..10, then 30..40 (gap), 10..20, 20..30 arrive interleaved with file 2.
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        s.push(req(1, 0, 2, Op::Read, 0, 10));
        s.push(req(2, 0, 1, Op::Read, 30, 10));
        s.push(req(3, 0, 1, Op::Read, 10, 10));
        s.push(req(4, 0, 1, Op::Read, 20, 10));
        // Contiguous but a different operation: another queue, not merged.
        s.push(req(5, 0, 1, Op::Write, 10, 10));
        // One run 0..40 in offset order, then file 2, then the write.
        assert_eq!(drain(&mut s, 0), vec![vec![0, 3, 4, 2], vec![1], vec![5]]);
    }

    #[test]
    fn hbrr_does_not_merge_other_jobs_or_objects() {
        let mut s = Hbrr::new(8);
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        let mut other_job = req(1, 0, 1, Op::Read, 10, 10);
        other_job.job = "job-b".into();
        s.push(other_job);
        // Same file, contiguous offset, but on another server's object.
        s.push(req(2, 1, 1, Op::Read, 10, 10));
        s.push(req(3, 0, 1, Op::Read, 10, 10));
        assert_eq!(drain(&mut s, 0), vec![vec![0, 3], vec![1], vec![2]]);
    }

    #[test]
    fn hbrr_quantum_counts_merged_requests() {
        let mut s = Hbrr::new(3);
        for i in 0..5 {
            s.push(req(i, 0, 1, Op::Read, i * 10, 10)); // 5 contiguous requests of file 1
        }
        s.push(req(5, 0, 2, Op::Read, 0, 10));
        // The first visit's run is cut at the quantum (3 requests), then file 2 gets its turn.
        assert_eq!(drain(&mut s, 0), vec![vec![0, 1, 2], vec![5], vec![3, 4]]);
    }

    #[test]
    fn hbrr_runs_stop_at_max_merge() {
        let mut s = Hbrr::new(100);
        for i in 0..20 {
            s.push(req(i, 0, 1, Op::Write, i * 10, 10));
        }
        let runs = drain(&mut s, 0);
        assert_eq!(runs, vec![(0..16).collect::<Vec<_>>(), (16..20).collect()]);
    }

    #[test]
    fn hbrr_skips_a_ring_entry_without_its_queue_instead_of_panicking() {
        let mut s = Hbrr::new(2);
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        s.ring.push_front((9, Op::Write));
        assert_eq!(drain(&mut s, 0), vec![vec![0]]);
        assert!(s.ring.is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }

    #[test]
    fn hbrr_take_all_is_arrival_order() {
        let mut s = Hbrr::new(8);
        s.push(req(0, 0, 2, Op::Read, 0, 10));
        s.push(req(1, 0, 1, Op::Read, 0, 10));
        s.push(req(2, 0, 2, Op::Read, 50, 10));
        s.push(req(3, 0, 1, Op::Write, 0, 10));
        assert_eq!(seqs(&s.take_all()), vec![0, 1, 2, 3]);
        assert_eq!(s.len(), 0);
        assert!(s.depths().is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }
}
