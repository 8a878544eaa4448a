//! Tessera data server (`tessera-ds`): stores objects on the local file system and serves the data
//! service (`DsRequest`) over QUIC.
//!
//! - [`store`]: the object store, one file per object in sharded directories, positional I/O; large
//!   writes with O_DIRECT.
//! - [`write_cache`]: recently written data kept in memory for reads.
//! - [`address`]: each object's base address in the volume (allocation order), persisted.
//! - [`pipeline`]: the I/O path of every data request: address, arrival, queue, device, observers.
//! - [`scheduler`]: per-job queues in front of the device; round robin or orchestrated dedicated
//!   service; a released request runs in its caller's task.
//! - [`device`]: the device model: `none` or the emulated rotating disk `hdd` (one head, C-LOOK), which
//!   only delays the real I/O.
//! - [`observe`]: what the path's observers see (a request and its runs) and their interface.
//! - [`locality`]: the locality monitor (SL_i, SL_ij, RD_ij EWMAs, SeekTime_i), an observer of the path.
//! - [`counters`]: per-job read/write operation and byte counters.
//! - [`targetstats`]: per storage target request sizes, latencies and traffic per job (an observer).
//! - [`report`]: the data server's report and the tasks sending it and the locality report to the MDS.
//! - [`jobtrace`]: per-job bounded request traces (`tessera trace start|stop|export`; an observer).
//! - [`trace`]: optional CSV trace of every served request (time, job, address, length, op; an observer).
//! - [`metrics`]: the data server's Prometheus metrics (served by `tessera_metrics`).
//! - [`replicate`]: mirrored stripes: the primary's fan-out of writes to the other replicas, in one
//!   order per object range.
//! - [`server`]: the RPC service: role and request checks, dispatch to the data path, store and serve
//!   control.
//! - [`daemon`]: the `tessera-ds` command line and start-up: config, identity, tasks, READY, shutdown.

pub mod address;
/// The per-job counters ([`tessera_iostats::counters`], shared with the forwarding nodes).
pub use tessera_iostats::counters;
pub mod daemon;
pub mod device;
pub mod fence;
pub mod jobtrace;
pub mod locality;
pub mod metrics;
pub mod observe;
pub mod pipeline;
pub mod replicate;
pub mod report;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod targetstats;
pub mod trace;
pub mod write_cache;

#[cfg(test)]
mod fuzz_tests;

pub use daemon::main_entry;
