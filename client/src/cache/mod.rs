//! The client's I/O engine: what open files cache between the caller and the servers, inside
//! close-to-open consistency and the leases the MDS grants. Every way in runs on it: the FUSE mount's
//! handles, the library's [`crate::File`] (with or without the cache), and through it `tessera put/get`
//! and `tessera-bench -a tessera`.

/// Directory leases: creates and unlinks answered here and sent to the MDS in batches.
pub mod dir_lease;
/// One client's engine: its data servers and the table of open inodes every handle is made over.
pub mod engine;
/// Leases on names and attributes: the client's `Watch` at the MDS, how long answers may be cached,
/// and the recalls carried out through the adapter.
pub mod name_leases;
/// One open file handle: reads through read-ahead, writes into the inode's write-behind (or through),
/// fallocate, size, flush, fsync, release.
pub mod open_file;
/// Read-ahead decisions per handle: sequential and strided streams, random reads read exactly.
pub mod read_ahead;
/// Write-behind per open inode: buffered writes merged by offset, streams and batches of scattered writes.
pub mod write_behind;

pub use engine::{Engine, HandleOptions};
pub use open_file::Handle;
