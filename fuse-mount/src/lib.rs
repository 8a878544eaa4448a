//! Tessera's FUSE file system: `tessera-fuse MOUNTPOINT` mounts the cluster of the client config. A thin
//! adapter from the kernel's requests to the client library, whose I/O engine (`tessera_client::cache`:
//! write-behind, read-ahead, directory leases) and PerSched gate (`tessera_client::periodic::patterns`)
//! serve every open file.

/// Caller credentials and job ids of requesting processes, from /proc.
pub mod creds;
/// The `fuser::Filesystem` implementation: one tokio task per request.
pub mod fs;
/// File locks through the mount: to the MDS's lock manager, and interrupted waits.
mod locks;
/// Command line, mount point checks, mounting, signals and unmounting.
pub mod mount;

pub use mount::main_entry;
