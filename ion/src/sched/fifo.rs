//! FIFO: requests are released in arrival order, one per release, without merging or waiting
//! (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.1, IOFSL's default scheduler, and
//! §3.4.3, where it measures the cost of the extra hop through the forwarding node).
//!
//! Rule: the oldest queued request (smallest `seq`) goes first. Merging is left to the dispatch stage.

use super::{Next, Req, Scheduler};
use std::collections::VecDeque;

#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<Req>,
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn push(&mut self, r: Req) {
        self.queue.push_back(r);
    }

    fn next(&mut self, _now_us: u64) -> Next {
        match self.queue.pop_front() {
            Some(r) => Next::Release(vec![r]),
            None => Next::Idle,
        }
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn depths(&self) -> Vec<(String, usize)> {
        vec![("fifo".to_string(), self.queue.len())]
    }

    fn take_all(&mut self) -> Vec<Req> {
        // Pushed in arrival order, so already sorted by seq.
        self.queue.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{req, seqs};
    use crate::sched::Op;

    #[test]
    fn fifo_releases_in_arrival_order_one_at_a_time() {
        let mut s = Fifo::default();
        // Contiguous requests of one file are still released one by one.
        s.push(req(0, 2, 5, Op::Read, 4096, 4096));
        s.push(req(1, 1, 5, Op::Write, 0, 4096));
        s.push(req(2, 2, 5, Op::Read, 8192, 4096));
        s.push(req(3, 0, 5, Op::Read, 0, 4096));
        assert_eq!(s.len(), 4);
        let mut order = Vec::new();
        while let Next::Release(run) = s.next(0) {
            assert_eq!(run.len(), 1);
            order.extend(seqs(&run));
        }
        assert_eq!(order, vec![0, 1, 2, 3]);
        assert_eq!(s.next(0), Next::Idle);
        assert!(s.is_empty());
    }

    #[test]
    fn fifo_take_all_returns_arrival_order_and_empties() {
        let mut s = Fifo::default();
        for i in 0..5 {
            s.push(req(i, 0, 1, Op::Read, i * 100_000, 10));
        }
        assert_eq!(s.next(0), Next::Release(vec![req(0, 0, 1, Op::Read, 0, 10)]));
        assert_eq!(s.depths(), vec![("fifo".to_string(), 4)]);
        assert_eq!(seqs(&s.take_all()), vec![1, 2, 3, 4]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.next(0), Next::Idle);
    }
}
