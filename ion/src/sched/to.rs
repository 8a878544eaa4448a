//! TO, timeorder (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.2.1, AGIOS's TO, used in
//! §3.4.4 "to illustrate the overhead of redirecting the flow of requests through AGIOS").
//!
//! Rule: one first-come, first-served queue for reads and writes; no merging; one request per
//! release. The ordering is FIFO's; it is its own type so that it can be measured as the scheduler
//! layer's own overhead, separately from [`Fifo`](super::fifo::Fifo).

use super::fifo::Fifo;
use super::{Next, Req, Scheduler};

/// FIFO's queue under its own name.
#[derive(Default)]
pub struct TimeOrder {
    queue: Fifo,
}

impl Scheduler for TimeOrder {
    fn name(&self) -> &'static str {
        "to"
    }

    fn push(&mut self, r: Req) {
        self.queue.push(r);
    }

    fn next(&mut self, now_us: u64) -> Next {
        self.queue.next(now_us)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn depths(&self) -> Vec<(String, usize)> {
        vec![("queue".to_string(), self.queue.len())]
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.queue.take_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, req, seqs};
    use crate::sched::Op;

    #[test]
    fn to_is_first_come_first_served_without_merging() {
        let mut s = TimeOrder::default();
        // 0..10 and 10..20 of one object are contiguous: TO still releases them separately.
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        s.push(req(1, 1, 2, Op::Write, 0, 10));
        s.push(req(2, 0, 1, Op::Read, 10, 10));
        s.push(req(3, 0, 1, Op::Write, 500, 10));
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![1], vec![2], vec![3]]);
        assert_eq!(s.next(0), Next::Idle);
    }

    #[test]
    fn to_take_all_and_depths() {
        let mut s = TimeOrder::default();
        for i in 0..3 {
            s.push(req(i, 0, 1, Op::Read, i * 10, 10));
        }
        assert_eq!(s.depths(), vec![("queue".to_string(), 3)]);
        assert_eq!(s.name(), "to");
        assert_eq!(seqs(&s.take_all()), vec![0, 1, 2]);
        assert!(s.is_empty());
    }
}
