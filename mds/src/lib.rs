//! Tessera's metadata server (MDS).
//!
//! - [`store`]: the sled database (`Store`, `Txn`): records, pending overlay, group commit, replay, migration.
//! - [`journal`]: the redo journal that makes an acknowledged change survive an MDS crash before fsync.
//! - [`raft`]: replicated metadata (issue 37): the Raft log's types and its storage on segment files.
//! - [`lease`]: directory leases, which let a client create files in a directory without waiting.
//! - [`locks`]: the lock manager (POSIX and `flock` locks across clients: waits, deadlocks, eviction, grace).
//! - [`perm`]: POSIX permission checks from the caller's credentials.
//! - [`namespace`]: every metadata operation with POSIX semantics.
//! - [`offload`]: long synchronous sections (batches, placement solves, scans) off the async workers.
//! - [`placement`]: placement policies (round-robin, lustre, balanced) and `placer`, the subsystem around them.
//! - [`fsck`]: `tessera fsck`: what is inconsistent and what repair does; `online`: scan, confirmation, repair.
//! - [`stats`]: the latest report of each data server and its age.
//! - [`dsclient`]: the MDS as a client of the data servers (truncate, remove, serve commands).
//! - [`destroy`]: background worker draining the destroy log.
//! - [`orchestrator`]: IOrchestrator's decisions: locality reports, eligibility, each window's plan.
//! - [`driver`]: executes the plan: serve commands to every data server, slice timing, switch skew.
//! - [`metrics`]: Prometheus `GET /metrics` (requests by type, orchestrator state).
//! - [`session`]: client sessions and the eviction of silent clients.
//! - [`jobs`]: the job registry (sled tree `jobs`), per-job metadata counters, data counters and time series.
//! - [`persched`]: PerSched — the planner, the registry of periodic jobs, its requests and its detector task.
//! - `dispatch`: the one dispatch of metadata requests, driven by proto's request table.
//! - [`server`]: the RPC service and the `tessera-mds` process entry point.

pub mod caches;
pub mod destroy;
mod dispatch;
pub mod driver;
pub mod dsclient;
pub mod fsck;
pub mod jobs;
pub mod journal;
pub mod lease;
pub mod locks;
pub mod metrics;
pub mod namespace;
mod offload;
pub mod orchestrator;
pub mod perm;
pub mod persched;
pub mod placement;
pub mod raft;
pub mod server;
pub mod session;
pub mod stats;
pub mod store;

#[cfg(test)]
mod fuzz_tests;

pub use placement::placer;
pub use server::{main_entry, run, MdsService, Options};
