//! The records of the MDS database: its trees, record types and key layouts, and their encoding.

use super::error::{StoreError, StoreResult};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tessera_proto::layout::Layout;
use tessera_proto::{wire, Attr, DsId, FileKind, Ino, ObjectId};

/// The trees of the MDS database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum T {
    /// ino BE → [`Inode`].
    Inodes = 0,
    /// parent ino BE ++ name → [`Dentry`].
    Dentries = 1,
    /// parent ino BE ++ seq BE → name (readdir order and stable cookies).
    Dirseq = 2,
    /// dir ino BE → [`LayoutSpec`](tessera_proto::layout::LayoutSpec) (default layout of files created in it); dir ino BE ++ `E` →
    /// `Vec<ExtentSpec>` (a composite default, which then replaces the plain one).
    DirLayouts = 3,
    /// ino BE ++ 0 ++ name → value.
    Xattrs = 4,
    /// Job registry (reserved).
    Jobs = 5,
    /// id BE → [`DestroyEntry`]: objects still to remove from a data server.
    Destroy = 6,
    /// Format version, orphan markers (`orphan` ++ ino BE), mirrored files' objects and degraded files
    /// ([`MIRROR_OBJECT_PREFIX`], [`DEGRADED_PREFIX`]).
    Meta = 7,
}

impl T {
    /// Every tree, in number order.
    pub const ALL: [T; 8] = [T::Inodes, T::Dentries, T::Dirseq, T::DirLayouts, T::Xattrs, T::Jobs, T::Destroy, T::Meta];

    /// The tree of number `n` (a write set's, a snapshot's).
    pub fn from_number(n: u8) -> Option<T> {
        T::ALL.get(usize::from(n)).copied()
    }
}

pub(super) const TREE_NAMES: [&str; 8] =
    ["inodes", "dentries", "dirseq", "dir_layouts", "xattrs", "jobs", "destroy_log", "meta"];
pub(super) const ORPHAN_PREFIX: &[u8] = b"orphan";
pub(super) const FORMAT_KEY: &[u8] = b"format";
/// 2: layouts carry composite extents ([`Layout::extents`]); 3: layouts carry mirrors
/// ([`Layout::mirrors`]) and layout requests a mirror count; 4: attributes carry `blocks`. Older databases are migrated in place on
/// open, one format after the other ([`super::migrate`]).
pub(super) const FORMAT_VERSION: u32 = 4;
/// Suffix of a directory's composite default in [`T::DirLayouts`].
const COMPOSITE_SUFFIX: u8 = b'E';

/// One inode: its attributes plus what only some kinds have.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Inode {
    pub attr: Attr,
    /// Regular files: where the data lives.
    pub layout: Option<Layout>,
    /// Symlinks: the target.
    pub target: Option<String>,
    /// Directories: the parent directory (`..`); the root is its own parent. Unused for other kinds.
    pub parent: Ino,
}

/// A directory entry's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dentry {
    pub ino: Ino,
    pub kind: FileKind,
    /// Position in the directory's `dirseq` (the readdir cookie).
    pub seq: u64,
}

/// Objects of one data server waiting to be removed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DestroyEntry {
    pub ds: DsId,
    pub objects: Vec<ObjectId>,
}

pub fn ino_key(ino: Ino) -> [u8; 8] {
    ino.to_be_bytes()
}

pub fn dentry_key(parent: Ino, name: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    k.extend_from_slice(&parent.to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn dirseq_key(parent: Ino, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&parent.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub fn xattr_prefix(ino: Ino) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.extend_from_slice(&ino.to_be_bytes());
    k.push(0);
    k
}

pub fn xattr_key(ino: Ino, name: &str) -> Vec<u8> {
    let mut k = xattr_prefix(ino);
    k.extend_from_slice(name.as_bytes());
    k
}

/// Mirrored files' objects (`mobj` ++ object BE → ino BE): which file a replica that missed a write
/// belongs to. Kept for every object of a mirrored layout (issue 36).
pub(super) const MIRROR_OBJECT_PREFIX: &[u8] = b"mobj";
/// Mirrored files with a replica not in sync (`mdeg` ++ ino BE → nothing): what resync works through.
pub(super) const DEGRADED_PREFIX: &[u8] = b"mdeg";

/// Data servers taken out of placement (`dsrm` ++ ds BE as u64 → nothing).
pub(super) const REMOVED_PREFIX: &[u8] = b"dsrm";

/// Each data server's object store identity as last seen (`dsid` ++ ds BE as u64 → id BE).
pub(super) const STORE_ID_PREFIX: &[u8] = b"dsid";

pub(super) fn prefixed_key(prefix: &[u8], id: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

pub(super) fn orphan_key(ino: Ino) -> Vec<u8> {
    let mut k = ORPHAN_PREFIX.to_vec();
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

/// The inode a record of `t` belongs to (the first 8 bytes of its key), for the trees keyed by inode.
pub fn key_ino(key: &[u8]) -> Option<Ino> {
    key.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes)
}

pub(super) fn composite_key(ino: Ino) -> [u8; 9] {
    let mut k = [COMPOSITE_SUFFIX; 9];
    k[..8].copy_from_slice(&ino.to_be_bytes());
    k
}

pub(super) fn enc<V: Serialize>(v: &V) -> StoreResult<Vec<u8>> {
    wire::encode(v).map_err(|source| StoreError::Encode { what: "record", source })
}

pub(super) fn dec<V: DeserializeOwned>(b: &[u8]) -> StoreResult<V> {
    wire::decode(b).map_err(StoreError::Corrupt)
}
