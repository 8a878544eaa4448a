//! The client's I/O engine: what open files cache between the caller and the servers, inside
//! close-to-open consistency and the leases the MDS grants. Used by the FUSE mount.

/// Directory leases: creates and unlinks answered here and sent to the MDS in batches.
pub mod dir_lease;
/// One open file handle: reads through read-ahead, writes into the inode's write-behind, fallocate, size.
pub mod open_file;
/// Read-ahead decisions per handle: sequential and strided streams, random reads read exactly.
pub mod read_ahead;
/// Write-behind per open inode: buffered writes merged by offset, streams and batches of scattered writes.
pub mod write_behind;
