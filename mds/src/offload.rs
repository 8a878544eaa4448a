//! Long synchronous sections of the metadata server (batches, placement solves, scans) run off the async
//! workers: see [`offload`].

/// Runs `f`, the synchronous section of a long mutation — batches (`declare`, a lease's grant and
/// `dir_batch`), placement solves (composite layouts, extent instantiation), eviction's closes, the
/// destroy log, fsck's scans — off the async worker: on the multi-thread runtime the worker hands its
/// other tasks to another thread while `f` blocks this one (`block_in_place`), so one long section does
/// not stall every connection served by this worker. Inline elsewhere (a current-thread runtime, as
/// `#[tokio::test]`'s, or no runtime), where there is no other worker to hand over to.
///
/// A single small mutation (create, unlink, setattr, open, close, ...: a few microseconds of memory
/// work and one journal write(2)) stays inline: the hand-over costs a thread wake-up per call, and the
/// A/B measured it slower for small operations (`results/house/mds-offload-ab.md`).
pub(crate) fn offload<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}
