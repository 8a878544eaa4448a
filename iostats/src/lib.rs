//! Job I/O statistics (specs/characterization.md): what a job's counts say about it, and how a node
//! counts them. The counts themselves are messages (`tessera_proto::msg`: `Window`, `Spatial`,
//! `JobDetail`, `JobInfo`, ...).
//!
//! - [`characterize`]: a job's I/O criteria (volume, rates, intensity, burstiness, spatial class, parallelism).
//! - [`counters`]: per-job data counters of a node (data servers, forwarding nodes), switchable.

pub mod characterize;
pub mod counters;
