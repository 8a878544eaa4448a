//! MLF, multilevel feedback (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.2.1, AGIOS's
//! MLF, "developed based on aIOLi" with per-file queues; the thesis gives only this outline).
//!
//! **Decision** (levels and quanta, which the thesis leaves open):
//! - One queue per file (`ino`) and operation, in arrival order; releases are merged runs as in HBRR
//!   (the queue's oldest request, then the oldest queued request continuing the run, ...).
//! - [`LEVELS`] = 4 levels, 0 the highest. Level `l` has a quantum of `quantum << l` requests
//!   (`quantum` from [`Params`](super::Params), default 8: 8, 16, 32, 64). As in HBRR, the quantum
//!   counts client requests (a merged run of k uses k) and a run is cut to the quantum left.
//! - A queue that becomes non-empty enters level 0 at the back (a queue that empties is forgotten, so
//!   a file whose requests come and go, like a synchronous reader's, stays on top).
//! - `next` always serves the highest non-empty level; within a level, round robin: the front queue is
//!   served until it has used its level's quantum (then it is **demoted** to the back of the next level
//!   down, or of the lowest level if already there) or is empty (then it leaves).
//! - A queue preempted by a higher level keeps its place and what it used of its quantum.
//! - **Aging**: every [`BOOST_US`] (timed from the first `next`), all queues move back to level 0 with
//!   a fresh quantum, level 0's first, then level 1's, ... each keeping its order, so a long stream
//!   that sank cannot be starved by a flow of new files.

use super::{by_arrival, file_label, take_run, Next, Op, Req, Scheduler};
use std::collections::{HashMap, VecDeque};
use tessera_proto::types::Ino;

/// Number of levels.
pub const LEVELS: usize = 4;

/// Aging period, microseconds: all queues return to level 0 this often.
pub const BOOST_US: u64 = 100_000;

type Key = (Ino, Op);

struct FileQueue {
    reqs: VecDeque<Req>,
    level: usize,
    /// Requests released from this queue against its current level's quantum.
    used: u32,
}

pub struct Mlf {
    quantum: u32,
    queues: HashMap<Key, FileQueue>,
    /// Per level, its non-empty queues in round-robin order (front = next served).
    levels: [VecDeque<Key>; LEVELS],
    len: usize,
    last_boost_us: Option<u64>,
}

impl Mlf {
    pub fn new(quantum: u32) -> Mlf {
        Mlf { quantum: quantum.max(1), queues: HashMap::new(), levels: Default::default(), len: 0, last_boost_us: None }
    }

    /// Requests a queue may release per turn at `level`.
    pub fn level_quantum(&self, level: usize) -> u32 {
        self.quantum.saturating_mul(1 << level)
    }

    fn boost(&mut self, now_us: u64) {
        let last = *self.last_boost_us.get_or_insert(now_us);
        if now_us < last.saturating_add(BOOST_US) {
            return;
        }
        self.last_boost_us = Some(now_us);
        for l in 1..LEVELS {
            let moved = std::mem::take(&mut self.levels[l]);
            self.levels[0].extend(moved);
        }
        for q in self.queues.values_mut() {
            q.level = 0;
            q.used = 0;
        }
    }
}

impl Scheduler for Mlf {
    fn name(&self) -> &'static str {
        "mlf"
    }

    fn push(&mut self, r: Req) {
        let key = (r.ino, r.op);
        let q = self.queues.entry(key).or_insert_with(|| FileQueue { reqs: VecDeque::new(), level: 0, used: 0 });
        if q.reqs.is_empty() {
            self.levels[0].push_back(key);
        }
        q.reqs.push_back(r);
        self.len += 1;
    }

    fn next(&mut self, now_us: u64) -> Next {
        if self.len == 0 {
            return Next::Idle;
        }
        self.boost(now_us);
        loop {
            let Some((level, &key)) = self.levels.iter().enumerate().find_map(|(l, q)| Some((l, q.front()?))) else {
                // Requests counted but no queue in any level: queues still holding requests start
                // again at level 0; if none does, the count was wrong.
                let mut stray: Vec<Key> =
                    self.queues.iter().filter(|(_, q)| !q.reqs.is_empty()).map(|(&k, _)| k).collect();
                if stray.is_empty() {
                    self.len = 0;
                    return Next::Idle;
                }
                stray.sort_unstable();
                for k in &stray {
                    if let Some(q) = self.queues.get_mut(k) {
                        q.level = 0;
                        q.used = 0;
                    }
                }
                self.levels[0].extend(stray);
                continue;
            };
            let quantum = self.level_quantum(level);
            let Some(q) = self.queues.get_mut(&key) else {
                // A level entry without its queue: nothing to serve there, take the next.
                self.levels[level].pop_front();
                continue;
            };
            let run = take_run(&mut q.reqs, quantum.saturating_sub(q.used).max(1) as usize);
            q.used = q.used.saturating_add(run.len() as u32);
            self.len = self.len.saturating_sub(run.len());
            if q.reqs.is_empty() {
                self.queues.remove(&key);
                self.levels[level].pop_front();
            } else if q.used >= quantum {
                let down = (level + 1).min(LEVELS - 1);
                q.level = down;
                q.used = 0;
                self.levels[level].pop_front();
                self.levels[down].push_back(key);
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
        let mut out = Vec::new();
        for (l, keys) in self.levels.iter().enumerate() {
            for &(ino, op) in keys {
                let depth = self.queues.get(&(ino, op)).map_or(0, |q| q.reqs.len());
                out.push((format!("L{l} {}", file_label(ino, op)), depth));
            }
        }
        out
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.len = 0;
        self.levels = Default::default();
        by_arrival(self.queues.drain().flat_map(|(_, q)| q.reqs).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, released, req, seqs};

    /// `n` non-contiguous reads of file `ino`, seqs from `first`.
    fn file(s: &mut Mlf, ino: Ino, first: u64, n: u64) {
        for i in 0..n {
            s.push(req(first + i, 0, ino, Op::Read, i * 1000, 10));
        }
    }

    #[test]
    fn mlf_demotes_a_queue_that_uses_its_quantum() {
        let mut s = Mlf::new(1); // quanta 1, 2, 4, 8
        file(&mut s, 1, 0, 8); // A: seqs 0..8
        file(&mut s, 2, 100, 1); // B: seq 100
                                 // A uses its level-0 quantum (1) and sinks to level 1, behind nothing; B (level 0) goes next.
        assert_eq!(released(s.next(0)), vec![0]);
        assert_eq!(s.depths(), vec![("L0 ino 2 read".to_string(), 1), ("L1 ino 1 read".to_string(), 7)]);
        assert_eq!(released(s.next(0)), vec![100]);
        // A at level 1: 2 requests, then level 2: 4, then level 3 (the lowest): the last one.
        assert_eq!(drain(&mut s, 0), vec![vec![1], vec![2], vec![3], vec![4], vec![5], vec![6], vec![7]]);
        assert!(s.is_empty());
    }

    #[test]
    fn mlf_serves_the_highest_non_empty_level_first() {
        let mut s = Mlf::new(1);
        file(&mut s, 1, 0, 5); // A
        assert_eq!(released(s.next(0)), vec![0]); // A -> level 1
        assert_eq!(released(s.next(0)), vec![1]); // A used 1 of level 1's 2
        file(&mut s, 2, 100, 2); // B enters level 0 and preempts A
        assert_eq!(released(s.next(0)), vec![100]); // B -> level 1, behind A
        assert_eq!(s.depths(), vec![("L1 ino 1 read".to_string(), 3), ("L1 ino 2 read".to_string(), 1)]);
        // A resumes with what was left of its quantum (1), sinks to level 2; B's turn at level 1.
        assert_eq!(drain(&mut s, 0), vec![vec![2], vec![101], vec![3], vec![4]]);
    }

    #[test]
    fn mlf_round_robin_within_a_level() {
        let mut s = Mlf::new(2);
        file(&mut s, 1, 0, 3);
        file(&mut s, 2, 10, 3);
        file(&mut s, 3, 20, 1);
        // Level 0, quantum 2 each: A A, B B, C; then level 1: A's last, B's last.
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![1], vec![10], vec![11], vec![20], vec![2], vec![12]]);
    }

    #[test]
    fn mlf_merges_contiguous_requests_within_the_quantum() {
        let mut s = Mlf::new(4);
        for i in 0..6 {
            s.push(req(i, 0, 1, Op::Write, i * 10, 10));
        }
        s.push(req(6, 0, 1, Op::Read, 60, 10)); // continues the writes' offsets, but a read
                                                // Level 0 quantum 4 cuts the run; the read is another queue; then level 1 finishes the writes.
        assert_eq!(drain(&mut s, 0), vec![vec![0, 1, 2, 3], vec![6], vec![4, 5]]);
    }

    #[test]
    fn mlf_aging_returns_sunk_queues_to_the_top() {
        let mut s = Mlf::new(1);
        file(&mut s, 1, 0, 3); // A
        assert_eq!(released(s.next(0)), vec![0]); // A sinks to level 1
                                                  // A flow of new files keeps level 0 busy: A waits.
        for i in 0..5 {
            s.push(req(100 + i, 0, 10 + i, Op::Read, 0, 10));
            assert_eq!(released(s.next(1000 * i)), vec![100 + i]);
        }
        // After BOOST_US, A is back at level 0, ahead of files arriving after the boost.
        s.push(req(200, 0, 50, Op::Read, 0, 10));
        assert_eq!(released(s.next(BOOST_US)), vec![200]); // already at level 0, queued before A
        s.push(req(201, 0, 51, Op::Read, 0, 10));
        assert_eq!(released(s.next(BOOST_US + 1)), vec![1]);
        assert_eq!(released(s.next(BOOST_US + 2)), vec![201]);
        assert_eq!(released(s.next(BOOST_US + 3)), vec![2]);
        assert_eq!(s.next(BOOST_US + 4), Next::Idle);
    }

    #[test]
    fn mlf_repairs_its_levels_instead_of_panicking() {
        // A count with nothing queued: idle.
        let mut s = Mlf::new(1);
        s.len = 3;
        assert_eq!(s.next(0), Next::Idle);
        assert!(s.is_empty());
        // A level entry whose queue is gone is skipped.
        file(&mut s, 1, 0, 1);
        s.levels[0].push_front((9, Op::Read));
        assert_eq!(released(s.next(0)), vec![0]);
        // A queue holding requests in no level starts again at level 0.
        file(&mut s, 2, 10, 2);
        s.levels = Default::default();
        assert_eq!(drain(&mut s, 0), vec![vec![10], vec![11]]);
        assert!(s.is_empty());
    }

    #[test]
    fn mlf_take_all_is_arrival_order() {
        let mut s = Mlf::new(1);
        file(&mut s, 2, 0, 2);
        file(&mut s, 1, 2, 2);
        s.next(0);
        assert_eq!(seqs(&s.take_all()), vec![1, 2, 3]);
        assert!(s.is_empty());
        assert!(s.depths().is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }
}
