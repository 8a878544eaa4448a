//! PerSched in the metadata server (specs/periodic.md). The planner, the registry of periodic jobs and the
//! detection are pure and shared with the benchmarks: the crate `tessera-persched`, re-exported here.
//! The MDS's side: [`shared`] (the registry behind its lock, planning outside it), [`service`] (the
//! periodic requests) and [`detect_task`] (the task running the detection).

pub mod detect_task;
pub mod service;
pub mod shared;

pub use tessera_persched::*;
