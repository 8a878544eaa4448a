//! TO-AGG, timeorder with aggregation (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.2.1,
//! AGIOS's TO-agg: "works just like TO but it performs aggregations of contiguous requests", insertion
//! O(N) because it goes through the queue).
//!
//! Rule: one first-come, first-served queue of runs. On insert, a request joins the oldest queued run
//! it continues (the run's last request is [`Req::continued_by`] it), or else the oldest run it
//! precedes (it is continued by the run's first request; it becomes the run's new first), provided the
//! run stays within [`MAX_MERGE`] requests and [`MAX_MERGED_BYTES`](super::MAX_MERGED_BYTES); otherwise it starts a new run at
//! the back. A run keeps the queue position of its first-arrived request. `next` releases the front
//! run whole, in offset order. (A request that would bridge two runs joins one; runs are not fused.)

use super::{by_arrival, fits, Next, Req, Scheduler, MAX_MERGE};
use std::collections::VecDeque;

/// A queued run: contiguous requests, each continuing the one before, and their total bytes.
struct Run {
    reqs: VecDeque<Req>,
    bytes: u64,
}

#[derive(Default)]
pub struct TimeOrderAgg {
    runs: VecDeque<Run>,
    len: usize,
}

impl Scheduler for TimeOrderAgg {
    fn name(&self) -> &'static str {
        "to-agg"
    }

    fn push(&mut self, r: Req) {
        self.len += 1;
        let room = |run: &Run| fits(run.reqs.len(), run.bytes, &r, MAX_MERGE);
        if let Some(run) =
            self.runs.iter_mut().find(|run| room(run) && run.reqs.back().is_some_and(|l| l.continued_by(&r)))
        {
            run.bytes += r.len;
            run.reqs.push_back(r);
        } else if let Some(run) =
            self.runs.iter_mut().find(|run| room(run) && run.reqs.front().is_some_and(|f| r.continued_by(f)))
        {
            run.bytes += r.len;
            run.reqs.push_front(r);
        } else {
            self.runs.push_back(Run { bytes: r.len, reqs: VecDeque::from([r]) });
        }
    }

    fn next(&mut self, _now_us: u64) -> Next {
        match self.runs.pop_front() {
            Some(run) => {
                self.len -= run.reqs.len();
                Next::Release(run.reqs.into())
            }
            None => Next::Idle,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn depths(&self) -> Vec<(String, usize)> {
        vec![("queue".to_string(), self.len)]
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.len = 0;
        by_arrival(self.runs.drain(..).flat_map(|run| run.reqs).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, req, seqs};
    use crate::sched::Op;

    #[test]
    fn to_agg_merges_on_insert_and_keeps_time_order() {
        let mut s = TimeOrderAgg::default();
        s.push(req(0, 0, 1, Op::Read, 0, 10)); // run A
        s.push(req(1, 1, 2, Op::Read, 0, 10)); // run B (another object)
        s.push(req(2, 0, 1, Op::Read, 10, 10)); // continues A
        s.push(req(3, 0, 1, Op::Read, 100, 10)); // gap: run C
        s.push(req(4, 0, 1, Op::Read, 20, 10)); // continues A again
        s.push(req(5, 0, 1, Op::Write, 30, 10)); // contiguous to A but a write: run D
        assert_eq!(s.len(), 6);
        assert_eq!(drain(&mut s, 0), vec![vec![0, 2, 4], vec![1], vec![3], vec![5]]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn to_agg_request_preceding_a_run_joins_its_front() {
        let mut s = TimeOrderAgg::default();
        s.push(req(0, 0, 1, Op::Write, 20, 10));
        s.push(req(1, 0, 9, Op::Write, 0, 10));
        s.push(req(2, 0, 1, Op::Write, 10, 10)); // ends where seq 0 starts
        s.push(req(3, 0, 1, Op::Write, 0, 10)); // ends where seq 2 starts
                                                // The run is released in offset order, at the position of its first arrival.
        assert_eq!(drain(&mut s, 0), vec![vec![3, 2, 0], vec![1]]);
    }

    #[test]
    fn to_agg_never_merges_other_jobs() {
        let mut s = TimeOrderAgg::default();
        s.push(req(0, 0, 1, Op::Read, 0, 10));
        let mut b = req(1, 0, 1, Op::Read, 10, 10);
        b.job = "job-b".into();
        s.push(b);
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![1]]);
    }

    #[test]
    fn to_agg_runs_stop_at_max_merge() {
        let mut s = TimeOrderAgg::default();
        for i in 0..(MAX_MERGE as u64 + 3) {
            s.push(req(i, 0, 1, Op::Read, i * 10, 10));
        }
        let runs = drain(&mut s, 0);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0], (0..MAX_MERGE as u64).collect::<Vec<_>>());
        assert_eq!(runs[1], vec![16, 17, 18]);
    }

    #[test]
    fn to_agg_take_all_is_arrival_order() {
        let mut s = TimeOrderAgg::default();
        s.push(req(0, 0, 1, Op::Read, 10, 10));
        s.push(req(1, 0, 2, Op::Read, 0, 10));
        s.push(req(2, 0, 1, Op::Read, 0, 10)); // joins the front of seq 0's run
        assert_eq!(s.depths(), vec![("queue".to_string(), 3)]);
        assert_eq!(seqs(&s.take_all()), vec![0, 1, 2]);
        assert!(s.is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }
}
