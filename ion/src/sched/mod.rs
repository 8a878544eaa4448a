//! The forwarding node's request schedulers (`specs/forwarding.md`, thesis: Bez 2016, chapters 3–4).
//!
//! A scheduler is a pure ordering decision, like the data server's `Policy`: requests are pushed as they
//! arrive, and [`Scheduler::next`] says what to release to the dispatch stage now, or until when to
//! wait. No I/O, no clock of its own (time is passed in, microseconds since the Unix epoch, so windows
//! can be aligned across forwarding nodes), so each ordering rule is unit-tested on its own.
//!
//! One module per scheduler, named after it:
//! - [`fifo`]: arrival order.
//! - [`hbrr`]: handle-based round robin over per-file, per-operation queues, `quantum` requests per visit.
//! - [`to`]: timeorder, one FCFS queue without merging (the scheduler's own overhead).
//! - [`to_agg`]: timeorder with contiguous requests merged on insert.
//! - [`sjf`]: shortest job first over per-file queues kept in offset order.
//! - [`mlf`]: multilevel feedback over per-file queues.
//! - [`sw`]: time windows ordered by `(arrival / window, server)`.
//! - [`twins`]: one queue per data server, visited round-robin for fixed windows aligned to an epoch.

use std::collections::VecDeque;
use std::sync::Arc;
use tessera_proto::types::{DsId, Ino, ObjectId};

pub mod fifo;
pub mod hbrr;
pub mod mlf;
pub mod sjf;
pub mod sw;
pub mod to;
pub mod to_agg;
pub mod twins;

/// Read or write (only these pass through a scheduler; metadata and fsync do not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
}

/// One client request waiting at the forwarding node: what the schedulers order by. The payload and
/// the reply channel stay with the dispatcher, under `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    /// Arrival number at this forwarding node, unique and increasing.
    pub seq: u64,
    /// Arrival time, microseconds since the Unix epoch.
    pub arrival_us: u64,
    /// The data server that holds the data (the request names it).
    pub ds: DsId,
    /// The file.
    pub ino: Ino,
    /// The object on `ds`; offsets are object offsets, so "contiguous" means contiguous on the server.
    pub object: ObjectId,
    /// The program; requests of different jobs are never merged (servers count and schedule per job).
    pub job: Arc<str>,
    pub op: Op,
    pub offset: u64,
    pub len: u64,
}

impl Req {
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// Whether `next` continues this request: same server, object, operation and job, starting where
    /// this one ends.
    pub fn continued_by(&self, next: &Req) -> bool {
        self.ds == next.ds
            && self.object == next.object
            && self.op == next.op
            && self.job == next.job
            && self.end() == next.offset
    }
}

/// Most requests merged into one request to a data server (IOFSL's default).
pub const MAX_MERGE: usize = 16;

/// Largest merged request, bytes (a frame's payload limit).
pub const MAX_MERGED_BYTES: u64 = tessera_proto::frame::MAX_PAYLOAD as u64;

/// What a scheduler says when asked for work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Release these to the dispatch stage, in this order. Schedulers that aggregate release a run of
    /// contiguous requests (each [`Req::continued_by`] the one before, at most [`MAX_MERGE`] and
    /// [`MAX_MERGED_BYTES`]) together; the others release one request at a time.
    Release(Vec<Req>),
    /// Requests are queued but none may go before this time (microseconds since the Unix epoch).
    WaitUntil(u64),
    /// Nothing is queued.
    Idle,
}

/// Parameters every scheduler is built from (each uses the ones its rule names).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// TWINS and SW: window length, microseconds.
    pub window_us: u64,
    /// HBRR (and MLF's first level): requests served per queue visit.
    pub quantum: u32,
    /// TWINS: the data servers, in the cluster's order.
    pub servers: Vec<DsId>,
    /// TWINS: this forwarding node's number k (it serves server `(k + slot) mod n` in slot `slot`).
    pub ion_index: usize,
    /// TWINS: the cluster-wide epoch windows are aligned to, microseconds since the Unix epoch.
    pub epoch_us: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { window_us: 1_000, quantum: 8, servers: Vec::new(), ion_index: 0, epoch_us: 0 }
    }
}

/// A request scheduler. Every request pushed is released exactly once (by `next` or `take_all`).
pub trait Scheduler: Send {
    /// The scheduler's name as users select it (`fifo`, `hbrr`, `to`, `to-agg`, `sjf`, `mlf`, `sw`, `twins`).
    fn name(&self) -> &'static str;

    /// A request arrived.
    fn push(&mut self, r: Req);

    /// What to release now.
    fn next(&mut self, now_us: u64) -> Next;

    /// Requests queued.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue depths by queue, for status displays (e.g. `("ds 2", 14)`, `("ino 7 read", 3)`).
    fn depths(&self) -> Vec<(String, usize)>;

    /// Everything still queued, in arrival order, leaving the scheduler empty (switching schedulers at
    /// run time re-pushes these into the new one: nothing is lost or reordered within a queue).
    fn take_all(&mut self) -> Vec<Req>;
}

/// The schedulers' names, in the order of the thesis's comparison.
pub const NAMES: &[&str] = tessera_proto::config::IonScheduler::NAMES;

/// Longest window TWINS and SW accept: a request waits at most a window's length per data server for
/// its turn, and an absurd window (an admin's `window_us` of 2^64-1 µs, seen while writing `tessera-bench fuzz`)
/// would hold every request queued on the node, and its data, for good.
pub const MAX_WINDOW_US: u64 = 10_000_000;

/// Why a scheduler was not built ([`build`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedError {
    #[error(transparent)]
    Unknown(#[from] tessera_proto::config::UnknownName),
    #[error("a window of {0} us is longer than the limit of {MAX_WINDOW_US} us")]
    WindowTooLong(u64),
    #[error("twins: no data servers to rotate over")]
    NoServers,
    #[error("twins: window must be at least 1 µs")]
    ZeroWindow,
    #[error("twins: data server {0} listed twice")]
    ServerTwice(tessera_proto::DsId),
}

impl From<SchedError> for tessera_proto::FsError {
    fn from(e: SchedError) -> tessera_proto::FsError {
        tessera_proto::FsError::invalid(e.to_string())
    }
}

/// Builds the scheduler called `name`.
pub fn build(name: &str, p: &Params) -> Result<Box<dyn Scheduler>, SchedError> {
    if matches!(name, "sw" | "twins") && p.window_us > MAX_WINDOW_US {
        return Err(SchedError::WindowTooLong(p.window_us));
    }
    Ok(match name {
        "fifo" => Box::new(fifo::Fifo::default()),
        "hbrr" => Box::new(hbrr::Hbrr::new(p.quantum)),
        "to" => Box::new(to::TimeOrder::default()),
        "to-agg" => Box::new(to_agg::TimeOrderAgg::default()),
        "sjf" => Box::new(sjf::Sjf::default()),
        "mlf" => Box::new(mlf::Mlf::new(p.quantum)),
        "sw" => Box::new(sw::StaticWindows::new(p.window_us)),
        "twins" => Box::new(twins::Twins::new(p)?),
        other => {
            return Err(SchedError::Unknown(tessera_proto::config::UnknownName {
                what: "scheduler",
                name: other.to_string(),
                choices: NAMES,
            }))
        }
    })
}

/// `read` / `write`, for queue labels.
pub(crate) fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

/// The label of a per-file, per-operation queue in [`Scheduler::depths`] (`ino 7 read`).
pub(crate) fn file_label(ino: Ino, op: Op) -> String {
    format!("ino {ino} {}", op_name(op))
}

/// Whether `r` may join a run of `count` requests totalling `bytes`, the run being limited to
/// `limit` requests (and always to [`MAX_MERGE`] and [`MAX_MERGED_BYTES`]).
pub(crate) fn fits(count: usize, bytes: u64, r: &Req, limit: usize) -> bool {
    count < limit.min(MAX_MERGE) && bytes.saturating_add(r.len) <= MAX_MERGED_BYTES
}

/// Pops the oldest request of `queue` and then, while the run may grow (at most `limit` requests,
/// [`MAX_MERGE`], [`MAX_MERGED_BYTES`]), the oldest queued request that continues the run's last one,
/// wherever it is in the queue. The others keep their order. Empty if `queue` is.
pub(crate) fn take_run(queue: &mut VecDeque<Req>, limit: usize) -> Vec<Req> {
    let Some(head) = queue.pop_front() else {
        return Vec::new();
    };
    let mut bytes = head.len;
    let mut run = vec![head];
    loop {
        let last = &run[run.len() - 1];
        let found = queue.iter().position(|r| last.continued_by(r) && fits(run.len(), bytes, r, limit));
        match found.and_then(|pos| queue.remove(pos)) {
            Some(r) => {
                bytes += r.len;
                run.push(r);
            }
            None => return run,
        }
    }
}

/// `reqs` sorted by arrival (`seq`): what [`Scheduler::take_all`] returns.
pub(crate) fn by_arrival(mut reqs: Vec<Req>) -> Vec<Req> {
    reqs.sort_by_key(|r| r.seq);
    reqs
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeSet;

    /// A request of job `job-a` arriving at `seq` µs, on object `ino * 1000 + ds`.
    pub(crate) fn req(seq: u64, ds: DsId, ino: Ino, op: Op, offset: u64, len: u64) -> Req {
        Req { seq, arrival_us: seq, ds, ino, object: ino * 1000 + ds as u64, job: Arc::from("job-a"), op, offset, len }
    }

    pub(crate) fn seqs(reqs: &[Req]) -> Vec<u64> {
        reqs.iter().map(|r| r.seq).collect()
    }

    /// The seqs of a release (panics on anything else).
    pub(crate) fn released(n: Next) -> Vec<u64> {
        match n {
            Next::Release(run) => seqs(&run),
            other => panic!("expected a release, got {other:?}"),
        }
    }

    /// Calls `next(now_us)` until it stops releasing; the runs released, as seqs.
    pub(crate) fn drain<S: Scheduler + ?Sized>(s: &mut S, now_us: u64) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        while let Next::Release(run) = s.next(now_us) {
            out.push(seqs(&run));
        }
        out
    }

    #[test]
    fn take_run_merges_only_continuations() {
        let mut q = VecDeque::new();
        q.push_back(req(0, 0, 1, Op::Read, 0, 10));
        q.push_back(req(1, 0, 1, Op::Write, 10, 10)); // other operation
        q.push_back(req(2, 1, 1, Op::Read, 10, 10)); // other server and object
        let mut other_job = req(3, 0, 1, Op::Read, 10, 10);
        other_job.job = "job-b".into();
        q.push_back(other_job);
        q.push_back(req(4, 0, 1, Op::Read, 11, 10)); // overlaps, does not continue
        q.push_back(req(5, 0, 1, Op::Read, 20, 10)); // continues seq 6, which arrives later
        q.push_back(req(6, 0, 1, Op::Read, 10, 10));
        assert_eq!(seqs(&take_run(&mut q, MAX_MERGE)), vec![0, 6, 5]);
        assert_eq!(seqs(&q.iter().cloned().collect::<Vec<_>>()), vec![1, 2, 3, 4]);
        assert_eq!(seqs(&take_run(&mut q, MAX_MERGE)), vec![1]);
        assert!(take_run(&mut VecDeque::new(), MAX_MERGE).is_empty());
    }

    #[test]
    fn take_run_respects_limit_max_merge_and_bytes() {
        let mut q: VecDeque<Req> = (0..40).map(|i| req(i, 0, 1, Op::Read, i * 10, 10)).collect();
        assert_eq!(take_run(&mut q, 3).len(), 3);
        assert_eq!(take_run(&mut q, 100).len(), MAX_MERGE);
        assert_eq!(take_run(&mut q, 0).len(), 1, "the head always goes");
        let half = MAX_MERGED_BYTES / 2;
        let mut q: VecDeque<Req> = [(0, 0, half), (1, half, half), (2, 2 * half, 1)]
            .map(|(s, off, len)| req(s, 0, 1, Op::Read, off, len))
            .into();
        assert_eq!(seqs(&take_run(&mut q, MAX_MERGE)), vec![0, 1], "a third would pass MAX_MERGED_BYTES");
        let mut q: VecDeque<Req> = [(0, 0, MAX_MERGED_BYTES + 1), (1, MAX_MERGED_BYTES + 1, 1)]
            .map(|(s, off, len)| req(s, 0, 1, Op::Read, off, len))
            .into();
        assert_eq!(seqs(&take_run(&mut q, MAX_MERGE)), vec![0], "an oversized request goes alone");
    }

    #[test]
    fn build_knows_every_name_and_refuses_others() {
        let p = Params { servers: vec![0, 1], ..Params::default() };
        for &name in NAMES {
            let s = build(name, &p).unwrap();
            assert_eq!(s.name(), name);
            assert!(s.is_empty());
        }
        assert!(build("cfq", &p).err().expect("unknown name").to_string().contains("twins"));
        assert!(build("twins", &Params::default()).is_err(), "twins needs servers");
    }

    /// A random request: 4 servers in the rotation plus, rarely, server 9 outside it; 3 files, 2 jobs;
    /// offsets on a 4 KiB grid so that contiguous runs are frequent.
    fn random_req(rng: &mut StdRng, seq: u64, now_us: u64) -> Req {
        let ds = if rng.gen_ratio(1, 25) { 9 } else { rng.gen_range(0..4) };
        let op = if rng.gen_bool(0.5) { Op::Read } else { Op::Write };
        let len = if rng.gen_ratio(1, 4) { 8192 } else { 4096 };
        let mut r = req(seq, ds, rng.gen_range(1..4), op, rng.gen_range(0..24) * 4096, len);
        r.arrival_us = now_us;
        if rng.gen_ratio(1, 4) {
            r.job = "job-b".into();
        }
        r
    }

    fn check_run(name: &str, run: &[Req]) {
        assert!(!run.is_empty() && run.len() <= MAX_MERGE, "{name}: run of {}", run.len());
        for w in run.windows(2) {
            assert!(w[0].continued_by(&w[1]), "{name}: {:?} then {:?} released together", w[0], w[1]);
        }
        let bytes: u64 = run.iter().map(|r| r.len).sum();
        assert!(run.len() == 1 || bytes <= MAX_MERGED_BYTES, "{name}: {bytes} bytes merged");
    }

    /// Random pushes interleaved with `next` at advancing times (and, if `switch`, a switch through
    /// `take_all` into a fresh scheduler half way), then a drain following `WaitUntil`: every request
    /// is released exactly once, runs are contiguous and bounded, `len` and `depths` are exact.
    fn exercise(name: &str, seed: u64, switch: bool) {
        let mut rng = StdRng::seed_from_u64(seed);
        let start = 1_700_000_000_000_000;
        let p = Params { window_us: 1000, quantum: 3, servers: vec![0, 1, 2, 3], ion_index: 1, epoch_us: start - 123 };
        let mut s = build(name, &p).unwrap();
        let mut pending = BTreeSet::new();
        let (mut now, mut seq, mut releases, mut longest, mut waits) = (start, 0u64, 0usize, 0usize, 0usize);
        let mut check = |s: &mut Box<dyn Scheduler>, now: u64, pending: &mut BTreeSet<u64>| match s.next(now) {
            Next::Release(run) => {
                check_run(name, &run);
                for r in &run {
                    assert!(pending.remove(&r.seq), "{name}: seq {} released twice", r.seq);
                }
                releases += 1;
                longest = longest.max(run.len());
                None
            }
            Next::WaitUntil(t) => {
                assert!(t > now, "{name}: WaitUntil({t}) at {now}");
                assert!(!pending.is_empty(), "{name}: waits with nothing queued");
                waits += 1;
                Some(t)
            }
            Next::Idle => {
                assert!(pending.is_empty(), "{name}: idle with {} queued", pending.len());
                None
            }
        };
        for step in 0..2000 {
            now += rng.gen_range(0..200);
            if rng.gen_bool(0.55) {
                for _ in 0..rng.gen_range(1..4) {
                    s.push(random_req(&mut rng, seq, now));
                    pending.insert(seq);
                    seq += 1;
                }
            } else {
                check(&mut s, now, &mut pending);
            }
            if step == 1000 && switch {
                let taken = s.take_all();
                assert!(taken.windows(2).all(|w| w[0].seq < w[1].seq), "{name}: take_all not in arrival order");
                assert_eq!(seqs(&taken), pending.iter().copied().collect::<Vec<_>>(), "{name}: take_all");
                assert!(s.is_empty() && s.next(now) == Next::Idle, "{name}: not empty after take_all");
                s = build(name, &p).unwrap();
                taken.into_iter().for_each(|r| s.push(r));
            }
            assert_eq!(s.len(), pending.len(), "{name}: len");
            assert_eq!(s.depths().iter().map(|d| d.1).sum::<usize>(), pending.len(), "{name}: depths");
        }
        for _ in 0..100_000 {
            if s.is_empty() {
                break;
            }
            if let Some(t) = check(&mut s, now, &mut pending) {
                now = t;
            }
        }
        assert!(pending.is_empty(), "{name}: {} never released", pending.len());
        assert_eq!(s.next(now), Next::Idle);
        assert!(releases > 100, "{name}: only {releases} releases");
        // The rules are exercised, not vacuously true: the aggregating schedulers merged, the others
        // did not, and only TWINS waited.
        let merges = ["hbrr", "to-agg", "sjf", "mlf", "twins"].contains(&name);
        assert_eq!(longest > 1, merges, "{name}: longest run {longest}");
        assert_eq!(waits > 0, name == "twins", "{name}: {waits} waits");
    }

    #[test]
    fn every_scheduler_releases_every_request_once_in_bounded_contiguous_runs() {
        for &name in NAMES {
            for seed in 0..6 {
                exercise(name, seed, seed >= 3);
            }
        }
    }

    #[test]
    fn absurd_windows_are_refused() {
        for name in ["twins", "sw"] {
            let p = |window_us| Params { window_us, servers: vec![0, 1], ..Params::default() };
            assert!(build(name, &p(MAX_WINDOW_US)).is_ok());
            assert!(build(name, &p(MAX_WINDOW_US + 1)).is_err(), "{name}");
            assert!(build(name, &p(u64::MAX)).is_err(), "{name}");
        }
        let p = Params { window_us: u64::MAX, ..Params::default() };
        assert!(build("fifo", &p).is_ok(), "schedulers without windows ignore it");
    }
}
