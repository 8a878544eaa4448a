//! Operating a Tessera cluster: what launchers, the CLI, benchmarks and tests do around the protocol.
//!
//! - [`daemon`]: allocator settings, logging and async-runtime start-up shared by the servers and the mount.
//! - [`child`]: child processes: the READY line a daemon announces, signals, and the launchers' side
//!   (spawn, wait for READY, clean stops).
//! - [`issue`] (feature `ca`): a new cluster CA and node certificates signed by it (rcgen).
//! - [`ca`] (feature `ca`): the CA directory: issue, renew, revoke, the record of issued certificates,
//!   the revocation list.
//! - [`clusterdir`] (feature `ca`): certificates and configs of a cluster on loopback (`tessera up`,
//!   experiments, tests).
//! - [`hosts`] (feature `ca`): `tessera cluster init --hosts FILE`: certificates and configs for a list of
//!   hosts.
//! - [`cluster`] (feature `ca`): one local cluster's servers as child processes: started stage by stage,
//!   killed and started again by name, stopped (`tessera up` under its supervisor, `tessera-bench` and the
//!   cross-process tests).
//!
//! The daemons depend on this crate without the `ca` feature: rcgen stays out of their build.

pub mod child;
pub mod daemon;

#[cfg(feature = "ca")]
pub mod ca;
#[cfg(feature = "ca")]
pub mod cluster;
#[cfg(feature = "ca")]
pub mod clusterdir;
#[cfg(feature = "ca")]
pub mod hosts;
#[cfg(feature = "ca")]
pub mod issue;
