//! What can go wrong in the metadata database, with the failure underneath kept (sled's error, the
//! journal's I/O error, the record that did not decode). Converted to the wire's [`FsError`] where a
//! reply is made (`Io`, or `Invalid` for a database of a format this server does not understand).

use std::path::PathBuf;
use std::sync::Arc;
use tessera_proto::error::ErrorCode;
use tessera_proto::wire::WireError;
use tessera_proto::FsError;

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled failed (reading, writing, flushing, iterating).
    #[error("metadata database")]
    Db(#[from] sled::Error),
    /// The database directory could not be made.
    #[error("{}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("open metadata database {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: sled::Error,
    },
    /// A transaction over several trees was not applied.
    #[error("metadata database: commit")]
    Commit(#[source] sled::Error),
    /// A record that does not encode (`what`: which).
    #[error("metadata database: {what}")]
    Encode {
        what: &'static str,
        #[source]
        source: WireError,
    },
    #[error("metadata database: commit aborted")]
    Aborted,
    /// A stored record that does not decode.
    #[error("metadata database: corrupt record")]
    Corrupt(#[source] WireError),
    /// The database has a format this server does not understand.
    #[error("metadata database {} has format {found}, this server understands {understood}", path.display())]
    Format { path: PathBuf, found: u32, understood: u32 },
    /// The redo journal's files (`path`: its directory).
    #[error("metadata journal {}", path.display())]
    Journal {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A journal segment cut before its end that is not the newest (see `replay`).
    #[error(
        "corrupt {at}; later segments hold acknowledged changes, so the metadata server will not \
         start past it (inspect or restore the journal, or start with --skip-corrupt-journal to \
         drop the rest of this segment)"
    )]
    CorruptJournal { at: String },
    /// The record of the ids handed out is not 8 bytes.
    #[error("metadata database: the id range record holds {0} bytes, not 8")]
    BadIds(usize),
    /// A journal record names a tree the database does not have.
    #[error("metadata database: journal names tree {0}")]
    UnknownTree(u8),
    /// The group-commit thread could not be started.
    #[error("flush thread")]
    FlushThread(#[source] std::io::Error),
    #[error("metadata flush thread stopped")]
    FlushStopped,
    /// The replicated log did not take a change (this replica no longer leads, or its Raft stopped).
    #[error("metadata change not replicated: {0}")]
    NotReplicated(String),
    /// The group commit's flush failed (shared by every caller that waited for it).
    #[error("metadata database: flush")]
    Flush(#[source] Arc<StoreError>),
}

impl From<StoreError> for FsError {
    fn from(e: StoreError) -> FsError {
        let code = match e {
            StoreError::Format { .. } => ErrorCode::Invalid,
            StoreError::NotReplicated(_) => ErrorCode::NotLeader,
            _ => ErrorCode::Io,
        };
        FsError::from_error(code, &e)
    }
}
