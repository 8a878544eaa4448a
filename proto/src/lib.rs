//! Tessera's shared protocol crate: everything two Tessera processes must agree on.
//!
//! - [`acl`]: POSIX ACLs as Linux has them: the xattr format, validation, inheritance, permission checks.
//! - [`types`]: inode numbers, attributes, timestamps, credentials, job tags.
//! - [`error`]: the file-system error carried on the wire, with its errno.
//! - [`layout`]: stripe layouts and the stripe math shared by clients, forwarders and the MDS.
//! - [`msg`]: request/response messages, one file per service (MDS, DS, ION, reports, orchestrator, PerSched, jobs).
//! - [`locks`]: POSIX byte-range and `flock` locks as a pure table (the MDS decides with one, clients record theirs).
//! - [`requests`]: the table of metadata requests: name, idempotence, senders, what each touches.
//! - [`frame`]: length-prefixed bincode headers plus raw payloads on QUIC streams.
//! - [`tls`]: a node's TLS identity, what a certificate says (role, name, validity: `tls/cert.rs`), the rustls
//!   configs of mutual TLS. Issuing certificates and the CA directory are operations (`tessera-ops`).
//! - [`crl`] (in `tls/`): the revocation list on the nodes, reloaded when it changes, checked in both directions.
//! - [`rpc`]: QUIC endpoints, the RPC client (`rpc/client.rs`, one stream per call) and server (`rpc/server.rs`).
//! - [`config`]: the cluster's TOML configuration.
//! - [`wire`]: bincode encoding with bounded decoding.
//! - [`bufpool`]: recycled page-aligned buffers for payloads and write-behind.
//! - [`fileio`]: positional reads into a buffer's spare capacity (data servers, benchmarks).
//! - [`fuzz`] (feature `arbitrary`): message values from raw bytes and frame mutations, for fuzzing.
//! - [`units`]: sizes with K/M/G/T suffixes, parsed and formatted the same everywhere.

pub mod acl;
pub mod bufpool;
pub mod config;
pub mod error;
pub mod fileio;
pub mod frame;
#[cfg(any(test, feature = "arbitrary"))]
pub mod fuzz;
pub mod layout;
pub mod locks;
pub mod msg;
pub mod requests;
pub mod rpc;
pub mod tls;
pub mod types;
pub mod units;
pub mod wire;

/// The revocation list lives with TLS (`tls/crl.rs`); `crate::crl` names it as before.
pub use tls::crl;

pub use error::{FsError, FsResult};
pub use types::*;

/// Bumped whenever a message changes shape; checked on every frame.
pub const PROTOCOL_VERSION: u16 = 22;
