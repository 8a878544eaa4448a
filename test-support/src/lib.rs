//! What Tessera's tests share (a dev-dependency only): certificates, data patterns, clusters of real
//! server processes.

/// A CA in a temporary directory and node identities issued by it.
pub mod certs;
/// A real cluster of `tessera-mds`, `tessera-ds` and `tessera-ion` processes on loopback.
pub mod cluster;
/// Deterministic test data.
pub mod pattern;

pub use certs::TestCa;
pub use cluster::{bin, connect, Cluster};
pub use pattern::pattern;
