//! The error every file-system operation can return, carried on the wire with its errno.

use serde::{Deserialize, Serialize};

/// A POSIX-like error: `code` says what happened (and maps to an errno), `detail` says why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
#[error("{code}: {detail}")]
pub struct FsError {
    pub code: ErrorCode,
    pub detail: String,
}

pub type FsResult<T> = Result<T, FsError>;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ErrorCode {
    NotFound,
    Exists,
    NotDir,
    IsDir,
    NotEmpty,
    Access,
    Perm,
    Invalid,
    NameTooLong,
    NoSpace,
    Io,
    CrossDevice,
    Loop,
    NoData,
    Range,
    Stale,
    Busy,
    TooBig,
    Protocol,
    Unavailable,
    Unsupported,
    TimedOut,
    /// The MDS evicted the calling client (silent for longer than its eviction timeout): the request was
    /// not applied, and the handles the client held are closed. EIO, as Lustre's evicted clients see.
    Evicted,
    /// A metadata replica that is not the leader (issue 37): the request was not applied. The detail
    /// names the leader's address after [`LEADER_HINT`] when the replica knows it; clients move to it
    /// and send again ([`crate::rpc::MdsPeers`]). Seen by an application only when no replica led
    /// within the failover patience: EHOSTUNREACH, as an unreachable server.
    NotLeader,
    /// A lock another owner holds is in the way and the request does not wait (EAGAIN).
    WouldBlock,
    /// Waiting for the lock would deadlock: the owners in the way wait for the requester (EDEADLK).
    Deadlock,
    /// The waiting caller was interrupted by a signal (EINTR).
    Interrupted,
    /// The client holds as many locks as the lock manager grants one client (ENOLCK).
    NoLocks,
    /// `lseek(SEEK_DATA/SEEK_HOLE)` at or past the end of a file, or no data after the offset (ENXIO).
    NoSuchAddress,
}

/// Where a [`ErrorCode::NotLeader`] answer's detail names the leader: `... leader at ADDR`.
pub const LEADER_HINT: &str = "leader at ";

impl ErrorCode {
    pub fn errno(self) -> i32 {
        match self {
            ErrorCode::NotFound => libc::ENOENT,
            ErrorCode::Exists => libc::EEXIST,
            ErrorCode::NotDir => libc::ENOTDIR,
            ErrorCode::IsDir => libc::EISDIR,
            ErrorCode::NotEmpty => libc::ENOTEMPTY,
            ErrorCode::Access => libc::EACCES,
            ErrorCode::Perm => libc::EPERM,
            ErrorCode::Invalid => libc::EINVAL,
            ErrorCode::NameTooLong => libc::ENAMETOOLONG,
            ErrorCode::NoSpace => libc::ENOSPC,
            ErrorCode::Io => libc::EIO,
            ErrorCode::CrossDevice => libc::EXDEV,
            ErrorCode::Loop => libc::ELOOP,
            ErrorCode::NoData => libc::ENODATA,
            ErrorCode::Range => libc::ERANGE,
            ErrorCode::Stale => libc::ESTALE,
            ErrorCode::Busy => libc::EBUSY,
            ErrorCode::TooBig => libc::EFBIG,
            ErrorCode::Protocol => libc::EPROTO,
            ErrorCode::Unavailable => libc::EHOSTUNREACH,
            ErrorCode::Unsupported => libc::EOPNOTSUPP,
            ErrorCode::TimedOut => libc::ETIMEDOUT,
            ErrorCode::Evicted => libc::EIO,
            ErrorCode::NotLeader => libc::EHOSTUNREACH,
            ErrorCode::WouldBlock => libc::EAGAIN,
            ErrorCode::Deadlock => libc::EDEADLK,
            ErrorCode::Interrupted => libc::EINTR,
            ErrorCode::NoLocks => libc::ENOLCK,
            ErrorCode::NoSuchAddress => libc::ENXIO,
        }
    }

    pub fn from_errno(errno: i32) -> ErrorCode {
        match errno {
            libc::ENOENT => ErrorCode::NotFound,
            libc::EEXIST => ErrorCode::Exists,
            libc::ENOTDIR => ErrorCode::NotDir,
            libc::EISDIR => ErrorCode::IsDir,
            libc::ENOTEMPTY => ErrorCode::NotEmpty,
            libc::EACCES => ErrorCode::Access,
            libc::EPERM => ErrorCode::Perm,
            libc::EINVAL => ErrorCode::Invalid,
            libc::ENAMETOOLONG => ErrorCode::NameTooLong,
            libc::ENOSPC | libc::EDQUOT => ErrorCode::NoSpace,
            libc::EXDEV => ErrorCode::CrossDevice,
            libc::ELOOP => ErrorCode::Loop,
            libc::ENODATA => ErrorCode::NoData,
            libc::ERANGE => ErrorCode::Range,
            libc::ESTALE => ErrorCode::Stale,
            libc::EBUSY => ErrorCode::Busy,
            libc::EFBIG => ErrorCode::TooBig,
            libc::EPROTO => ErrorCode::Protocol,
            libc::EOPNOTSUPP => ErrorCode::Unsupported,
            libc::ETIMEDOUT => ErrorCode::TimedOut,
            libc::EAGAIN => ErrorCode::WouldBlock,
            libc::EDEADLK => ErrorCode::Deadlock,
            libc::EINTR => ErrorCode::Interrupted,
            libc::ENOLCK => ErrorCode::NoLocks,
            libc::ENXIO => ErrorCode::NoSuchAddress,
            _ => ErrorCode::Io,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // strerror-like text, so CLI messages read naturally.
        let s = match self {
            ErrorCode::NotFound => "No such file or directory",
            ErrorCode::Exists => "File exists",
            ErrorCode::NotDir => "Not a directory",
            ErrorCode::IsDir => "Is a directory",
            ErrorCode::NotEmpty => "Directory not empty",
            ErrorCode::Access => "Permission denied",
            ErrorCode::Perm => "Operation not permitted",
            ErrorCode::Invalid => "Invalid argument",
            ErrorCode::NameTooLong => "File name too long",
            ErrorCode::NoSpace => "No space left on device",
            ErrorCode::Io => "Input/output error",
            ErrorCode::CrossDevice => "Invalid cross-device link",
            ErrorCode::Loop => "Too many levels of symbolic links",
            ErrorCode::NoData => "No data available",
            ErrorCode::Range => "Numerical result out of range",
            ErrorCode::Stale => "Stale file handle",
            ErrorCode::Busy => "Device or resource busy",
            ErrorCode::TooBig => "File too large",
            ErrorCode::Protocol => "Protocol error",
            ErrorCode::Unavailable => "Server unavailable",
            ErrorCode::Unsupported => "Operation not supported",
            ErrorCode::TimedOut => "Timed out",
            ErrorCode::Evicted => "Input/output error (client evicted)",
            ErrorCode::NotLeader => "Not the metadata leader",
            ErrorCode::WouldBlock => "Resource temporarily unavailable",
            ErrorCode::Deadlock => "Resource deadlock avoided",
            ErrorCode::Interrupted => "Interrupted system call",
            ErrorCode::NoLocks => "No locks available",
            ErrorCode::NoSuchAddress => "No such device or address",
        };
        f.write_str(s)
    }
}

impl FsError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> FsError {
        FsError { code, detail: detail.into() }
    }
    pub fn errno(&self) -> i32 {
        self.code.errno()
    }
    pub fn not_found(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::NotFound, d)
    }
    pub fn exists(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Exists, d)
    }
    pub fn invalid(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Invalid, d)
    }
    pub fn io(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Io, d)
    }
    pub fn access(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Access, d)
    }
    pub fn perm(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Perm, d)
    }
    pub fn protocol(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Protocol, d)
    }
    pub fn unavailable(d: impl Into<String>) -> FsError {
        FsError::new(ErrorCode::Unavailable, d)
    }
    /// Whether the server could not be reached: no connection, or no answer in time (not an answer
    /// refusing the request).
    pub fn is_unreachable(&self) -> bool {
        matches!(self.code, ErrorCode::Unavailable | ErrorCode::TimedOut)
    }
    /// A local error flattened for the wire: `code`, and `e` with its sources as the detail ([`chain`]).
    pub fn from_error(code: ErrorCode, e: &(dyn std::error::Error + 'static)) -> FsError {
        FsError::new(code, chain(e))
    }
}

/// `e` and each of its sources, joined by ": " (as anyhow's `{:#}`): how a local error with typed
/// sources becomes one line of text (an [`FsError`]'s detail, a log line) without losing its causes.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        // A source that repeats its wrapper's text (or adds nothing) is not printed twice.
        if !text.is_empty() && !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        next = cause.source();
    }
    s
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        let code = match e.raw_os_error() {
            Some(errno) => ErrorCode::from_errno(errno),
            None => match e.kind() {
                std::io::ErrorKind::NotFound => ErrorCode::NotFound,
                std::io::ErrorKind::AlreadyExists => ErrorCode::Exists,
                std::io::ErrorKind::PermissionDenied => ErrorCode::Access,
                std::io::ErrorKind::InvalidInput => ErrorCode::Invalid,
                std::io::ErrorKind::TimedOut => ErrorCode::TimedOut,
                _ => ErrorCode::Io,
            },
        };
        FsError::new(code, e.to_string())
    }
}

impl From<FsError> for std::io::Error {
    fn from(e: FsError) -> std::io::Error {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno()).kind(), e.to_string())
    }
}

/// A name that is none of a setting's choices (a configuration setting, a role, a mode).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} '{name}' (one of: {})", choices.join(", "))]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub choices: &'static [&'static str],
}
