//! SJF, shortest job first (`specs/forwarding.md`, "Schedulers"; thesis: Bez 2016, §3.2.1, AGIOS's
//! SJF: "two separate queues per file ... In each queue, requests are considered in offset order,
//! examining possible aggregations of contiguous requests. The first request of the smallest queue
//! (based on the sum of all its request' sizes) is selected first").
//!
//! Rule: one queue per file (`ino`) and operation, kept in offset order. `next` picks the queue whose
//! queued requests total the fewest bytes (ties: the queue holding the oldest request, then the
//! smaller `(ino, op)`) and releases its head merged with the requests that continue it (each
//! [`Req::continued_by`] the one before, at most [`MAX_MERGE`](super::MAX_MERGE) requests and
//! [`MAX_MERGED_BYTES`](super::MAX_MERGED_BYTES)).
//!
//! **Decision** ("offset order" for a file striped over several objects): offsets are object offsets,
//! so a queue is ordered by `(object, offset, seq)`: object by object, each in offset order, arrival
//! breaking ties between requests at the same offset.

use super::{by_arrival, file_label, fits, Next, Op, Req, Scheduler, MAX_MERGE};
use std::collections::{BTreeMap, BTreeSet};
use tessera_proto::types::{Ino, ObjectId};

type Key = (Ino, Op);

#[derive(Default)]
struct FileQueue {
    /// By `(object, offset, seq)`.
    reqs: BTreeMap<(ObjectId, u64, u64), Req>,
    bytes: u64,
    /// Arrival numbers queued, for the tie-break (oldest first).
    seqs: BTreeSet<u64>,
}

impl FileQueue {
    fn remove(&mut self, k: (ObjectId, u64, u64)) -> Option<Req> {
        let r = self.reqs.remove(&k)?;
        self.bytes = self.bytes.saturating_sub(r.len);
        self.seqs.remove(&r.seq);
        Some(r)
    }

    /// The head (lowest object and offset) and the queued requests continuing it.
    fn take_run(&mut self) -> Vec<Req> {
        let Some(head) = self.reqs.first_key_value().map(|(&k, _)| k).and_then(|k| self.remove(k)) else {
            return Vec::new();
        };
        let mut bytes = head.len;
        let mut run = vec![head];
        loop {
            let last = &run[run.len() - 1];
            let found = self
                .reqs
                .range((last.object, last.end(), 0)..=(last.object, last.end(), u64::MAX))
                .find(|(_, r)| last.continued_by(r) && fits(run.len(), bytes, r, MAX_MERGE))
                .map(|(&k, _)| k);
            match found.and_then(|k| self.remove(k)) {
                Some(r) => {
                    bytes += r.len;
                    run.push(r);
                }
                None => return run,
            }
        }
    }
}

#[derive(Default)]
pub struct Sjf {
    queues: BTreeMap<Key, FileQueue>,
    len: usize,
}

impl Scheduler for Sjf {
    fn name(&self) -> &'static str {
        "sjf"
    }

    fn push(&mut self, r: Req) {
        let q = self.queues.entry((r.ino, r.op)).or_default();
        q.bytes += r.len;
        q.seqs.insert(r.seq);
        q.reqs.insert((r.object, r.offset, r.seq), r);
        self.len += 1;
    }

    fn next(&mut self, _now_us: u64) -> Next {
        loop {
            let pick = self.queues.iter_mut().min_by_key(|(&key, q)| (q.bytes, q.seqs.first().copied(), key));
            let Some((&key, q)) = pick else {
                return Next::Idle;
            };
            let run = q.take_run();
            if q.reqs.is_empty() {
                self.queues.remove(&key);
            }
            self.len = self.len.saturating_sub(run.len());
            if !run.is_empty() {
                return Next::Release(run);
            }
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn depths(&self) -> Vec<(String, usize)> {
        self.queues.iter().map(|(&(ino, op), q)| (file_label(ino, op), q.reqs.len())).collect()
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.len = 0;
        by_arrival(std::mem::take(&mut self.queues).into_values().flat_map(|q| q.reqs.into_values()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{drain, req, seqs};

    #[test]
    fn sjf_serves_the_queue_with_fewest_bytes_first() {
        let mut s = Sjf::default();
        // File 1 read: three 4 KiB requests with gaps (12 KiB queued).
        s.push(req(0, 0, 1, Op::Read, 0, 4096));
        s.push(req(1, 0, 1, Op::Read, 10_000, 4096));
        s.push(req(2, 0, 1, Op::Read, 20_000, 4096));
        // File 2 read: one 8 KiB request.
        s.push(req(3, 0, 2, Op::Read, 0, 8192));
        // File 1 write: one 64 KiB request.
        s.push(req(4, 0, 1, Op::Write, 0, 65536));
        // 8 KiB < 12 KiB: file 2 first; then file 1 read (12, 8, 4 KiB left) before the 64 KiB write.
        assert_eq!(drain(&mut s, 0), vec![vec![3], vec![0], vec![1], vec![2], vec![4]]);
    }

    #[test]
    fn sjf_queue_is_in_offset_order_with_contiguous_merge() {
        let mut s = Sjf::default();
        s.push(req(0, 0, 1, Op::Read, 30_000, 10));
        s.push(req(1, 0, 1, Op::Read, 4096, 4096));
        s.push(req(2, 0, 1, Op::Read, 8192, 4096));
        s.push(req(3, 0, 1, Op::Read, 0, 4096));
        let mut other_job = req(4, 0, 1, Op::Read, 12288, 4096);
        other_job.job = "job-b".into();
        s.push(other_job);
        // 0..12288 merged (arrived out of order); the other job's contiguous request is not merged.
        assert_eq!(drain(&mut s, 0), vec![vec![3, 1, 2], vec![4], vec![0]]);
    }

    #[test]
    fn sjf_ties_go_to_the_oldest_request() {
        let mut s = Sjf::default();
        s.push(req(0, 0, 5, Op::Read, 0, 100));
        s.push(req(1, 0, 3, Op::Read, 0, 100));
        s.push(req(2, 0, 4, Op::Write, 0, 100));
        assert_eq!(drain(&mut s, 0), vec![vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn sjf_runs_stop_at_max_merge() {
        let mut s = Sjf::default();
        for i in (0..20).rev() {
            s.push(req(i, 0, 1, Op::Write, i * 10, 10));
        }
        let runs = drain(&mut s, 0);
        assert_eq!(runs, vec![(0..16).collect::<Vec<_>>(), (16..20).collect()]);
    }

    #[test]
    fn sjf_skips_a_queue_left_empty_instead_of_releasing_nothing() {
        let mut s = Sjf::default();
        s.push(req(0, 0, 1, Op::Read, 0, 100));
        // An empty queue has the fewest bytes: it must not stand for the queued request.
        s.queues.insert((2, Op::Read), FileQueue::default());
        assert_eq!(drain(&mut s, 0), vec![vec![0]]);
        assert!(s.queues.is_empty());
        assert_eq!(s.next(0), Next::Idle);
    }

    #[test]
    fn sjf_depths_and_take_all() {
        let mut s = Sjf::default();
        s.push(req(0, 0, 2, Op::Read, 50, 10));
        s.push(req(1, 0, 1, Op::Write, 0, 10));
        s.push(req(2, 0, 2, Op::Read, 0, 10));
        assert_eq!(s.depths(), vec![("ino 1 write".to_string(), 1), ("ino 2 read".to_string(), 2)]);
        assert_eq!(seqs(&s.take_all()), vec![0, 1, 2]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.next(0), Next::Idle);
    }
}
