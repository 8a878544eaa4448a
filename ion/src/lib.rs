//! Tessera forwarding node (`tessera-ion`, `specs/forwarding.md`): passes clients' metadata calls to the
//! MDS and schedules and aggregates their reads and writes before sending them to the data servers.
//!
//! - [`sched`]: the request schedulers (FIFO, HBRR, TO, TO-AGG, SJF, MLF, SW, TWINS), pure decisions.
//! - [`dispatch`]: the scheduler's queue, the dispatch slots, merging, write-through sends; the dispatch
//!   loop is watched (restarted on the same queues after a panic, given up if it keeps panicking).
//! - [`stats`]: request-size histograms, offset distances, inter-arrival times, per-job counters.
//! - [`report`]: the per-job report to the MDS (`tessera jobstats` shows the forwarding node).
//! - [`server`]: the RPC service: role checks, metadata pass-through, status and scheduler switch.
//! - [`metrics`]: the forwarding node's Prometheus metrics (served by `tessera_metrics`).
//! - [`daemon`]: the `tessera-ion` command line and start-up.

pub mod daemon;
pub mod dispatch;
pub mod metrics;
pub mod report;
pub mod sched;
pub mod server;
pub mod stats;

pub use daemon::main_entry;
