//! Basic identifiers and attributes shared by every service.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{SystemTime, UNIX_EPOCH};

/// Inode number. The root directory is [`ROOT_INO`].
pub type Ino = u64;
/// Object identifier, unique in the whole cluster (allocated by the MDS).
pub type ObjectId = u64;
/// Data server identifier (from the cluster configuration).
pub type DsId = u32;
/// Index of a storage target on its data server (0 = the data directory itself).
pub type TargetIdx = u16;

/// Object ids name their target: the top 16 bits are the target's index on its data server, the low
/// 48 bits the MDS's sequence number (as a Lustre FID's sequence names its OST). Objects of a
/// single-target server (every object made before targets existed) are in target 0.
pub const TARGET_SHIFT: u32 = 48;
/// Largest sequence number an object id can carry.
pub const OBJECT_SEQ_MAX: u64 = (1 << TARGET_SHIFT) - 1;

/// The target holding object `id`.
pub fn target_of(id: ObjectId) -> TargetIdx {
    (id >> TARGET_SHIFT) as TargetIdx
}

/// The id of object `seq` (at most [`OBJECT_SEQ_MAX`]) in target `target`.
pub fn object_in(target: TargetIdx, seq: u64) -> ObjectId {
    (u64::from(target) << TARGET_SHIFT) | (seq & OBJECT_SEQ_MAX)
}

pub const ROOT_INO: Ino = 1;
/// Longest file name component, as on Linux.
pub const NAME_MAX: usize = 255;
/// Longest path / symlink target.
pub const PATH_MAX: usize = 4096;
/// Largest extended attribute value.
pub const XATTR_SIZE_MAX: usize = 65536;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::CharDev => libc::S_IFCHR,
            FileKind::BlockDev => libc::S_IFBLK,
        }
    }

    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFDIR => FileKind::Dir,
            libc::S_IFLNK => FileKind::Symlink,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDev,
            libc::S_IFBLK => FileKind::BlockDev,
            _ => return None,
        })
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// Microseconds since the Unix epoch, now (0 if the clock is before it).
pub fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros().min(u64::MAX as u128) as u64).unwrap_or(0)
}

impl Timestamp {
    pub fn now() -> Timestamp {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() }
    }

    pub fn to_system_time(self) -> SystemTime {
        if self.secs >= 0 {
            UNIX_EPOCH + std::time::Duration::new(self.secs as u64, self.nanos)
        } else {
            UNIX_EPOCH - std::time::Duration::new((-self.secs) as u64, 0)
                + std::time::Duration::from_nanos(self.nanos as u64)
        }
    }

    /// `YYYY-MM-DD HH:MM:SS` in UTC (the seconds only).
    pub fn utc(self) -> String {
        format_utc(self.secs)
    }

    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
            Err(e) => {
                let d = e.duration();
                let mut secs = -(d.as_secs() as i64);
                let mut nanos = 0;
                if d.subsec_nanos() > 0 {
                    secs -= 1;
                    nanos = 1_000_000_000 - d.subsec_nanos();
                }
                Timestamp { secs, nanos }
            }
        }
    }
}

/// `YYYY-MM-DD HH:MM:SS` in UTC for `secs` since the Unix epoch.
pub fn format_utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Attributes of an inode, as `stat(2)` shows them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Attr {
    pub ino: Ino,
    pub kind: FileKind,
    /// Permission bits including setuid/setgid/sticky (`0o7777`), without the type bits.
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    /// Logical file size (for directories: number of entries; for symlinks: target length).
    pub size: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    /// Device number for character/block devices.
    pub rdev: u32,
    /// What a regular file's data takes on the data servers' disks, in 512-byte units (`st_blocks`; every
    /// replica counted): measured by the MDS shortly after writes are reported, an estimate from the
    /// size until then. 0 for other kinds.
    pub blocks: u64,
}

impl Attr {
    /// A new inode's attributes: empty, no device, every time `t`; two links for a directory (its entry
    /// and its "."), one otherwise.
    pub fn new(ino: Ino, kind: FileKind, perm: u32, uid: u32, gid: u32, t: Timestamp) -> Attr {
        let nlink = if kind == FileKind::Dir { 2 } else { 1 };
        Attr { ino, kind, perm, nlink, uid, gid, size: 0, atime: t, mtime: t, ctime: t, crtime: t, rdev: 0, blocks: 0 }
    }

    /// `st_mode`: type bits | permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | (self.perm & 0o7777)
    }
}

/// Who is asking: used by the MDS for permission checks (like NFS AUTH_SYS).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl Caller {
    pub fn root() -> Caller {
        Caller { uid: 0, gid: 0, groups: vec![] }
    }

    /// The credentials of this process.
    pub fn current_process() -> Caller {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Caller { uid, gid, groups: vec![] }
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Who issues a request: the program (job), the client instance and the process. Every metadata call
/// and every data request carries one, so servers (and forwarding nodes, which pass it on unchanged)
/// can tell programs apart, count per job and hold state per client.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Origin {
    /// Job id as the scheduler knows it (e.g. `slurm-1234`, `sess-4711`), at most [`JOB_ID_MAX`] bytes.
    pub job: String,
    /// Client instance id (random per client process; a forwarding node keeps its clients' ids).
    pub client: u64,
    /// The calling process on the client's host (0: the client itself, e.g. the kernel's write-back).
    pub pid: u32,
}

impl Origin {
    /// Checks what a server must bound before using it.
    pub fn check(&self) -> Result<(), JobIdTooLong> {
        check_job_id(&self.job)
    }
}

/// A job id a server may keep: at most [`JOB_ID_MAX`] bytes.
pub fn check_job_id(job: &str) -> Result<(), JobIdTooLong> {
    if job.len() > JOB_ID_MAX {
        return Err(JobIdTooLong { len: job.len() });
    }
    Ok(())
}

/// A job id longer than [`JOB_ID_MAX`] bytes ([`check_job_id`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("job id of {len} bytes exceeds {JOB_ID_MAX}")]
pub struct JobIdTooLong {
    pub len: usize,
}

impl From<JobIdTooLong> for crate::error::FsError {
    fn from(e: JobIdTooLong) -> crate::error::FsError {
        crate::error::FsError::invalid(e.to_string())
    }
}

/// Which program a data request belongs to and the file it is for. Every data request carries one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IoTag {
    pub origin: Origin,
    /// The file the object belongs to.
    pub ino: Ino,
}

impl IoTag {
    pub fn job(&self) -> &str {
        &self.origin.job
    }
}

pub const JOB_ID_MAX: usize = 128;

/// Jobs a server keeps apart in its per-job state; further jobs share [`OVERFLOW_JOB`]'s, so peers
/// cannot grow a server's memory without bound.
pub const MAX_JOBS: usize = 4096;
pub const OVERFLOW_JOB: &str = "(other)";

/// `job`'s entry in a per-job map bounded to [`MAX_JOBS`] jobs (a job beyond them gets the
/// [`OVERFLOW_JOB`] entry); `new` makes the entry of a key seen first.
pub fn job_entry<'a, K, T>(jobs: &'a mut HashMap<K, T>, job: &str, new: impl FnOnce(&str) -> T) -> &'a mut T
where
    K: Borrow<str> + for<'s> From<&'s str> + Hash + Eq,
{
    let key = if jobs.contains_key(job) || jobs.len() < MAX_JOBS { job } else { OVERFLOW_JOB };
    if !jobs.contains_key(key) {
        jobs.insert(K::from(key), new(key));
    }
    jobs.get_mut(key).unwrap_or_else(|| unreachable!("inserted above"))
}

/// Role of a node, carried in its certificate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum Role {
    Mds,
    Ds,
    Ion,
    Client,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Mds => "mds",
            Role::Ds => "ds",
            Role::Ion => "ion",
            Role::Client => "client",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "mds" => Role::Mds,
            "ds" => Role::Ds,
            "ion" => Role::Ion,
            "client" => Role::Client,
            "admin" => Role::Admin,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Role {
    /// Every role's name, as [`Role::parse`] takes them.
    pub const NAMES: &'static [&'static str] = &["mds", "ds", "ion", "client", "admin"];
}

impl std::str::FromStr for Role {
    type Err = crate::error::UnknownName;
    fn from_str(s: &str) -> Result<Role, crate::error::UnknownName> {
        Role::parse(s).ok_or_else(|| crate::error::UnknownName {
            what: "role",
            name: s.to_string(),
            choices: Role::NAMES,
        })
    }
}
