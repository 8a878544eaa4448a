//! What the data path's observers see ([`crate::pipeline`] takes every data request through its steps,
//! then shows it to them): a request and its runs, and the [`Observer`] interface the locality monitor,
//! the target statistics, the job traces and the request trace implement. Its own module so that the
//! observers and the pipeline do not import each other.

use crate::device::DeviceOp;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::types::IoTag;

/// One run of a request: where it lies in the object and, when known, in the target's volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub offset: u64,
    pub len: u64,
    /// The object's base address + `offset`; `None` without an address (a read of a missing object, an
    /// fsync, a failed lookup).
    pub addr: Option<u64>,
}

/// A request as the observers see it.
pub struct Request<'a> {
    pub tag: &'a IoTag,
    pub job: Arc<str>,
    /// The request as the device sees it (a vectored read's spans all its runs).
    pub op: DeviceOp,
    /// One run for a plain request, one per extent of a vectored read; once served, in the order the
    /// device served them.
    pub runs: Vec<Run>,
    /// When it arrived (after its address was looked up), and the same as wall-clock microseconds.
    pub arrived: Instant,
    pub arrived_us: u64,
}

/// Watches requests pass through the pipeline.
pub trait Observer: Send + Sync {
    /// `req` arrived, before it is queued; returns whether this observer wants to see it served.
    fn arrived(&self, _req: &Request<'_>) -> bool {
        true
    }

    /// `req` was served without error; `real` is its real I/O time (the device model's delay not
    /// included).
    fn served(&self, req: &Request<'_>, real: Duration);
}
