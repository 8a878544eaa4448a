//! Tessera client library (the `tessera` command-line tool is the tessera-cli crate).
//!
//! ```no_run
//! # async fn demo() -> tessera_client::FsResult<()> {
//! use tessera_client::{Client, ClusterConfig};
//! let cfg = ClusterConfig::locate(None)?;
//! let client = Client::connect(&cfg).await?;
//! client.write_file("/hello", b"world").await?;
//! assert_eq!(client.read_file("/hello").await?, b"world");
//! # Ok(()) }
//! ```

/// The I/O engine under every open file (the mount's and `File`): the per-client table of open inodes,
/// handles, write-behind per inode, read-ahead per handle, directory leases.
pub mod cache;
/// The path-level `Client` API.
pub mod client;
/// Data path: one connection and in-flight limit per data server, stripe splitting, read assembly.
pub mod data;
/// Open files, each an engine handle: write-through or write-behind, exact reads or read-ahead,
/// close-to-open consistency, flush/fsync/close.
pub mod file;
/// The route through forwarding nodes (IONs), with failover to the next ION or direct access.
pub mod forward;
/// Job id of this process (`TESSERA_JOB`, batch-scheduler variables, else the session id); who calls.
pub mod job;
/// A file's layout kept current as composite-layout extents are instantiated.
pub mod live_layout;
/// Typed, ino-level wrapper over the MDS connection: one method per `MdsRequest`.
pub mod mds_client;
/// PerSched: the job's grant (intervals modulo T), its poll, and the gate its reads and writes pass.
pub mod periodic;
/// The client's session with the MDS: keep-alives, and handles that an eviction closed.
pub mod session;

pub use bytes::Bytes;
pub use client::Client;
pub use file::{File, OpenOptions};
pub use mds_client::MdsClient;
/// The protocol crate itself, for anything not re-exported above.
pub use tessera_proto as proto;
pub use tessera_proto::config::{ClientOptions, ClusterConfig, Defaults};
pub use tessera_proto::error::{ErrorCode, FsError, FsResult};
pub use tessera_proto::layout::{ExtentSpec, Layout, LayoutSpec, StripeTarget};
pub use tessera_proto::msg::{
    AsyncCreate, BatchResult, DirEntry, DirLease, DirOp, DsReport, DsStatus, JobCounters, OpenFlags, RenameFlags,
    SetAttrs, StatFs, TimeSet, XattrMode,
};
pub use tessera_proto::types::{Attr, Caller, DsId, FileKind, Ino, IoTag, ObjectId, Timestamp, ROOT_INO};
pub use tessera_proto::PROTOCOL_VERSION;
