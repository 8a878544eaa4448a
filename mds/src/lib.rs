//! Tessera's metadata server (MDS).
//!
//! - [`store`]: the sled database — trees, records, and the overlay that commits as one transaction.
//! - [`perm`]: POSIX permission checks from the caller's credentials.
//! - [`namespace`]: every metadata operation with POSIX semantics.
//! - [`placement`]: placement policies choosing data servers for new files (round-robin).
//! - [`stats`]: the latest report of each data server and its age.
//! - [`dsclient`]: the MDS as a client of the data servers (truncate, remove).
//! - [`destroy`]: background worker draining the destroy log.
//! - [`server`]: the RPC service and the `tessera-mds` process entry point.

pub mod destroy;
pub mod dsclient;
pub mod namespace;
pub mod perm;
pub mod placement;
pub mod server;
pub mod stats;
pub mod store;

pub use server::{main_entry, run, MdsService, Options};
