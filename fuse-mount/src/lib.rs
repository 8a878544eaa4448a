//! Tessera's FUSE file system: `tessera-fuse MOUNTPOINT` mounts the cluster of the client config.

/// Caller credentials and job ids of requesting processes, from /proc.
pub mod creds;
/// Directory leases on the mount's side: creates that do not wait for the MDS.
pub mod dirlease;
/// The `fuser::Filesystem` implementation: one tokio task per request.
pub mod fs;
/// Open files: write-behind per inode, read-ahead per handle.
pub mod io;
/// Command line, mount point checks, mounting, signals and unmounting.
pub mod mount;
/// PerSched's patterns per job: reads and writes of a job with a pattern wait for its interval.
pub mod periodic;
/// Read-ahead decisions per handle: sequential and strided streams, random reads read exactly.
pub mod readahead;

pub use mount::main_entry;
