//! Message parts more than one service uses: how `SetAttr` changes an inode, open/rename/xattr flags,
//! directory entries, file-system statistics, and request sizes in Darshan's buckets.

use crate::types::*;
use serde::{Deserialize, Serialize};

/// How `SetAttr` sets a time.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum TimeSet {
    Now,
    At(Timestamp),
}

/// Fields to change in `SetAttr`; `None` leaves a field alone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SetAttrs {
    /// Permission bits (`0o7777`).
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate/extend: the MDS truncates the objects on the data servers.
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct RenameFlags {
    /// Fail with EEXIST if the target exists (RENAME_NOREPLACE).
    pub noreplace: bool,
    /// Atomically swap the two entries (RENAME_EXCHANGE).
    pub exchange: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    /// O_TRUNC: the MDS truncates to zero as part of the open.
    pub truncate: bool,
}

/// `setxattr` flags.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum XattrMode {
    #[default]
    Any,
    /// XATTR_CREATE: fail with EEXIST if it exists.
    Create,
    /// XATTR_REPLACE: fail with ENODATA if it does not exist.
    Replace,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DirEntry {
    pub name: String,
    pub ino: Ino,
    pub kind: FileKind,
    /// Cookie to pass as `offset` to continue after this entry. Stable across concurrent changes.
    pub next_offset: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub blocks_free: u64,
    pub blocks_avail: u64,
    pub files: u64,
    pub files_free: u64,
    pub name_max: u32,
}

/// Request sizes in Darshan's buckets (0–100 B, 100 B–1 KiB, 1–10 KiB, 10–100 KiB, 100 KiB–1 MiB,
/// 1–4 MiB, 4–10 MiB, 10–100 MiB, 100 MiB–1 GiB, 1 GiB and more).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SizeHistogram {
    pub counts: [u64; SizeHistogram::BUCKETS],
}

impl SizeHistogram {
    pub const BUCKETS: usize = 10;
    /// Upper bounds (exclusive) of the buckets but the last.
    pub const BOUNDS: [u64; 9] = [100, 1 << 10, 10 << 10, 100 << 10, 1 << 20, 4 << 20, 10 << 20, 100 << 20, 1 << 30];
    pub const LABELS: [&'static str; 10] =
        ["0-100", "100-1K", "1K-10K", "10K-100K", "100K-1M", "1M-4M", "4M-10M", "10M-100M", "100M-1G", "1G+"];

    pub fn bucket(len: u64) -> usize {
        Self::BOUNDS.partition_point(|&b| b <= len)
    }

    pub fn record(&mut self, len: u64) {
        self.counts[Self::bucket(len)] += 1;
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn add(&mut self, other: &SizeHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }
}
