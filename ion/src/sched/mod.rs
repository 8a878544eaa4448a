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
pub const NAMES: &[&str] = &["fifo", "hbrr", "to", "to-agg", "sjf", "mlf", "sw", "twins"];

/// Builds the scheduler called `name`.
pub fn build(name: &str, p: &Params) -> Result<Box<dyn Scheduler>, String> {
    Ok(match name {
        "fifo" => Box::new(fifo::Fifo::default()),
        "hbrr" => Box::new(hbrr::Hbrr::new(p.quantum)),
        "to" => Box::new(to::TimeOrder::default()),
        "to-agg" => Box::new(to_agg::TimeOrderAgg::default()),
        "sjf" => Box::new(sjf::Sjf::default()),
        "mlf" => Box::new(mlf::Mlf::new(p.quantum)),
        "sw" => Box::new(sw::StaticWindows::new(p.window_us)),
        "twins" => Box::new(twins::Twins::new(p)?),
        other => return Err(format!("unknown scheduler '{other}' (one of: {})", NAMES.join(", "))),
    })
}
