//! POSIX access control lists (POSIX.1e draft 17, as `acl(5)` describes them) as a pure module: the
//! metadata server checks permissions with it and stores ACLs in the form it defines; fsck validates them.
//!
//! Everything follows Linux:
//! - The stored and exchanged form is Linux's extended attribute format
//!   (`include/uapi/linux/posix_acl_xattr.h`): a little-endian `u32` version ([`XATTR_VERSION`]), then
//!   8-byte entries (`u16` tag, `u16` perm, `u32` id), under the names [`ACCESS_XATTR`] and
//!   [`DEFAULT_XATTR`]. An attribute with no entries means no ACL (`posix_acl_from_xattr`).
//! - [`Acl::validate`] is `posix_acl_valid` (`fs/posix_acl.c`), plus the order of named ids that the
//!   stored form keeps (libacl sorts them; duplicates are rejected).
//! - [`Acl::equiv_mode`], [`Acl::chmod`], [`Acl::create_masq`] and [`inherit`] are `posix_acl_equiv_mode`,
//!   `__posix_acl_chmod`, `posix_acl_create_masq` and `posix_acl_create`.
//! - [`Acl::permits`] is `posix_acl_permission`; [`check_with_acl`] is `acl_permission_check`
//!   (`fs/namei.c`) for a caller without capabilities.
//!
//! What stays with the caller, as in Linux's callers of these functions: root's `CAP_DAC_OVERRIDE` /
//! `CAP_DAC_READ_SEARCH` (`generic_permission`), the umask (applied only when the parent directory has
//! no default ACL), symlinks (never get an ACL), and clearing `S_ISGID` when an access ACL sets the mode
//! (`posix_acl_update_mode`).

use crate::types::Caller;
use crate::{FsError, FsResult};
use std::fmt::{self, Write as _};

/// The extended attribute holding an inode's access ACL.
pub const ACCESS_XATTR: &str = "system.posix_acl_access";
/// The extended attribute holding a directory's default ACL (inherited by what is created in it).
pub const DEFAULT_XATTR: &str = "system.posix_acl_default";
/// `POSIX_ACL_XATTR_VERSION`: the only version of the xattr format.
pub const XATTR_VERSION: u32 = 2;

/// `ACL_USER_OBJ`: the owner.
pub const USER_OBJ: u16 = 0x01;
/// `ACL_USER`: a named user (`id` is a uid).
pub const USER: u16 = 0x02;
/// `ACL_GROUP_OBJ`: the owning group.
pub const GROUP_OBJ: u16 = 0x04;
/// `ACL_GROUP`: a named group (`id` is a gid).
pub const GROUP: u16 = 0x08;
/// `ACL_MASK`: the most the named entries and the owning group may grant.
pub const MASK: u16 = 0x10;
/// `ACL_OTHER`: everyone else.
pub const OTHER: u16 = 0x20;
/// `ACL_UNDEFINED_ID`: the id written for entries that name nobody (owner, owning group, mask, other).
pub const UNDEFINED_ID: u32 = u32::MAX;

/// Read, write, execute: the only permission bits an entry may hold.
const RWX: u16 = 0o7;
/// The size of the xattr header and of one entry.
const HEADER_LEN: usize = 4;
const ENTRY_LEN: usize = 8;

/// One entry of an ACL: a tag ([`USER_OBJ`] ... [`OTHER`]), permissions (r=4, w=2, x=1) and, for
/// [`USER`] and [`GROUP`], the uid or gid it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclEntry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// An ACL: its entries in the order Linux keeps them (see [`Acl::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Acl {
    pub entries: Vec<AclEntry>,
}

/// What a new inode gets from its parent's default ACL ([`inherit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// The new inode's mode: the requested one, narrowed by the default ACL.
    pub mode: u32,
    /// The access ACL to store, `None` when the mode says it all.
    pub access: Option<Acl>,
    /// The default ACL to store: the parent's, for a directory; `None` for anything else.
    pub default: Option<Acl>,
}

fn tag_name(tag: u16) -> &'static str {
    match tag {
        USER_OBJ | USER => "user",
        GROUP_OBJ | GROUP => "group",
        MASK => "mask",
        OTHER => "other",
        _ => "unknown",
    }
}

/// The tag's position in the required order (`None` for an unknown tag).
fn tag_rank(tag: u16) -> Option<u8> {
    match tag {
        USER_OBJ => Some(0),
        USER => Some(1),
        GROUP_OBJ => Some(2),
        GROUP => Some(3),
        MASK => Some(4),
        OTHER => Some(5),
        _ => None,
    }
}

fn is_named(tag: u16) -> bool {
    tag == USER || tag == GROUP
}

impl Acl {
    /// Decodes Linux's xattr form (`posix_acl_from_xattr`) and validates the result. No entries at all
    /// means no ACL: `Ok(None)`. The ids of the owner, owning group, mask and other entries are ignored
    /// (read as [`UNDEFINED_ID`]), as Linux ignores them.
    pub fn parse(bytes: &[u8]) -> FsResult<Option<Acl>> {
        if bytes.len() < HEADER_LEN {
            return Err(FsError::invalid(format!("ACL xattr of {} bytes: shorter than its header", bytes.len())));
        }
        let version = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        if version != XATTR_VERSION {
            // Linux: EOPNOTSUPP (`posix_acl_from_xattr`).
            let what = format!("ACL xattr version {version}, expected {XATTR_VERSION}");
            return Err(FsError::new(crate::error::ErrorCode::Unsupported, what));
        }
        let body = &bytes[HEADER_LEN..];
        if !body.len().is_multiple_of(ENTRY_LEN) {
            return Err(FsError::invalid(format!(
                "ACL xattr of {} bytes: not a header plus whole {ENTRY_LEN}-byte entries",
                bytes.len()
            )));
        }
        if body.is_empty() {
            return Ok(None);
        }
        // Sized by the bytes actually received, never by a count they claim.
        let mut entries = Vec::with_capacity(body.len() / ENTRY_LEN);
        for e in body.chunks_exact(ENTRY_LEN) {
            let tag = u16::from_le_bytes([e[0], e[1]]);
            let perm = u16::from_le_bytes([e[2], e[3]]);
            let raw_id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            let id = if is_named(tag) { raw_id } else { UNDEFINED_ID };
            entries.push(AclEntry { tag, perm, id });
        }
        let acl = Acl { entries };
        acl.validate()?;
        Ok(Some(acl))
    }

    /// Encodes in Linux's xattr form (`posix_acl_to_xattr`): entries that name nobody carry
    /// [`UNDEFINED_ID`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + ENTRY_LEN * self.entries.len());
        out.extend_from_slice(&XATTR_VERSION.to_le_bytes());
        for e in &self.entries {
            let id = if is_named(e.tag) { e.id } else { UNDEFINED_ID };
            out.extend_from_slice(&e.tag.to_le_bytes());
            out.extend_from_slice(&e.perm.to_le_bytes());
            out.extend_from_slice(&id.to_le_bytes());
        }
        out
    }

    /// `posix_acl_valid`: entries in the order owner, named users, owning group, named groups, mask,
    /// other; exactly one owner, owning group and other entry; at most one mask, required when a named
    /// entry exists; named ids strictly increasing within their tag and never [`UNDEFINED_ID`] (Linux
    /// cannot map it); permissions within r/w/x. EINVAL otherwise.
    pub fn validate(&self) -> FsResult<()> {
        let bad = |i: usize, e: &AclEntry, why: &str| {
            Err(FsError::invalid(format!("invalid ACL {self}: entry {i} ({e}): {why}")))
        };
        // The rank of the previous entry's tag, the previous named id, whether a named entry was seen.
        let mut prev_rank: Option<u8> = None;
        let mut prev_id: Option<u32> = None;
        let mut needs_mask = false;
        for (i, e) in self.entries.iter().enumerate() {
            if e.perm & !RWX != 0 {
                return bad(i, e, &format!("permission bits {:#o} beyond rwx", e.perm));
            }
            let Some(rank) = tag_rank(e.tag) else {
                return bad(i, e, &format!("unknown tag {:#x}", e.tag));
            };
            match prev_rank {
                None if e.tag != USER_OBJ => return bad(i, e, "the first entry must be the owner's (user::)"),
                Some(p) if rank < p => {
                    return bad(i, e, "out of order (user::, user:ID, group::, group:ID, mask::, other::)")
                }
                Some(p) if rank == p && !is_named(e.tag) => return bad(i, e, "duplicate entry"),
                _ => {}
            }
            if prev_rank.is_some_and(|p| p < rank) {
                // A new tag begins: named ids restart.
                prev_id = None;
            }
            // A tag skipped on the way to this one must not be a required one.
            let from = prev_rank.map_or(0, |p| p + 1);
            for missing in from..rank {
                match missing {
                    0 => return bad(i, e, "missing the owner entry (user::)"),
                    2 => return bad(i, e, "missing the owning group entry (group::)"),
                    4 if needs_mask => return bad(i, e, "named users or groups require a mask entry (mask::)"),
                    _ => {}
                }
            }
            if is_named(e.tag) {
                if e.id == UNDEFINED_ID {
                    return bad(i, e, "the undefined id cannot be named");
                }
                if prev_id.is_some_and(|p| e.id <= p) {
                    return bad(i, e, "named ids must be strictly increasing (duplicate or unsorted)");
                }
                prev_id = Some(e.id);
                needs_mask = true;
            }
            prev_rank = Some(rank);
        }
        if prev_rank != tag_rank(OTHER) {
            let why = if self.entries.is_empty() { "no entries" } else { "missing the other entry (other::)" };
            return Err(FsError::invalid(format!("invalid ACL {self}: {why}")));
        }
        Ok(())
    }

    /// The three-entry ACL saying what `mode`'s permission bits say (`posix_acl_from_mode`).
    pub fn from_mode(mode: u32) -> Acl {
        let entry = |tag, shift: u32| AclEntry { tag, perm: ((mode >> shift) & 0o7) as u16, id: UNDEFINED_ID };
        Acl { entries: vec![entry(USER_OBJ, 6), entry(GROUP_OBJ, 3), entry(OTHER, 0)] }
    }

    /// `posix_acl_equiv_mode`: `mode` with its 0o777 bits replaced by those the ACL implies (the group
    /// bits from the mask when there is one), and whether the ACL is equivalent to a mode (only owner,
    /// owning group and other entries). An unknown tag makes it not equivalent (Linux: EINVAL).
    pub fn equiv_mode(&self, mode: u32) -> (u32, bool) {
        let mut bits = 0u32;
        let mut equiv = true;
        for e in &self.entries {
            let perm = u32::from(e.perm) & 0o7;
            match e.tag {
                USER_OBJ => bits |= perm << 6,
                GROUP_OBJ => bits |= perm << 3,
                OTHER => bits |= perm,
                MASK => {
                    bits = (bits & !0o070) | (perm << 3);
                    equiv = false;
                }
                _ => equiv = false,
            }
        }
        ((mode & !0o777) | bits, equiv)
    }

    /// `__posix_acl_chmod`: the ACL after a chmod to `mode`: the owner and other entries take the owner
    /// and other bits, the mask takes the group bits, or the owning group does when there is no mask.
    pub fn chmod(&mut self, mode: u32) {
        let mut group_obj = None;
        let mut mask = None;
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 0o7) as u16,
                OTHER => e.perm = (mode & 0o7) as u16,
                GROUP_OBJ => group_obj = Some(i),
                MASK => mask = Some(i),
                _ => {}
            }
        }
        if let Some(i) = mask.or(group_obj) {
            self.entries[i].perm = ((mode >> 3) & 0o7) as u16;
        }
    }

    /// `posix_acl_create_masq`, on a clone of the parent's default ACL for a new inode created with
    /// `mode`: the owner, other and mask (or owning group, without a mask) entries and the matching bits
    /// of `mode` are narrowed to what both allow; named entries are kept. Returns the new mode (bits
    /// outside 0o777 kept) and whether the ACL is not equivalent to a mode, i.e. must be stored. Meant
    /// for a valid ACL (Linux fails with EIO on one without an owning group entry; this leaves it be).
    pub fn create_masq(&mut self, mode: u32) -> (u32, bool) {
        let mut m = mode;
        let mut group_obj = None;
        let mut mask = None;
        let mut not_equiv = false;
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) as u16) | !RWX;
                    m &= (u32::from(e.perm) << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= (m as u16) | !RWX;
                    m &= u32::from(e.perm) | !0o007;
                }
                GROUP_OBJ => group_obj = Some(i),
                MASK => {
                    mask = Some(i);
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.entries[i];
            e.perm &= ((m >> 3) as u16) | !RWX;
            m &= (u32::from(e.perm) << 3) | !0o070;
        }
        // Only permission bits were cleared: the type and the set-id and sticky bits are as given.
        (m, not_equiv)
    }

    /// `posix_acl_permission`: whether the ACL grants `c` every bit of `want` (r=4, w=2, x=1; other
    /// bits ignored) on an inode owned by `owner_uid`:`owner_gid`. The owner entry is not limited by
    /// the mask; a named user is; among the owning and named groups the caller belongs to, one granting
    /// all of `want` (within the mask) suffices, but belonging to one and none granting denies, without
    /// falling back to other. An ACL without an other entry grants nothing (Linux: EIO).
    pub fn permits(&self, c: &Caller, owner_uid: u32, owner_gid: u32, want: u32) -> bool {
        let want = (want & 0o7) as u16;
        let mut found = false;
        for (i, e) in self.entries.iter().enumerate() {
            let masked = match e.tag {
                USER_OBJ if c.uid == owner_uid => false,
                USER if c.uid == e.id => true,
                GROUP_OBJ if c.in_group(owner_gid) => {
                    found = true;
                    if e.perm & want != want {
                        continue;
                    }
                    true
                }
                GROUP if c.in_group(e.id) => {
                    found = true;
                    if e.perm & want != want {
                        continue;
                    }
                    true
                }
                USER_OBJ | USER | GROUP_OBJ | GROUP | MASK => continue,
                OTHER if found => return false,
                OTHER => false,
                _ => return false,
            };
            // Limited by the mask when one follows (it always does in a valid ACL with named entries).
            let mask = if masked { self.entries[i + 1..].iter().find(|m| m.tag == MASK) } else { None };
            return e.perm & mask.map_or(u16::MAX, |m| m.perm) & want == want;
        }
        false
    }
}

/// Linux's `acl_permission_check` for a caller without capabilities (root's overrides are the caller's):
/// whether `c` may do all of `want` (r=4, w=2, x=1) on an inode with `mode`, owned by
/// `owner_uid`:`owner_gid`, with access ACL `acl`. The owner gets the owner bits of `mode`; anyone else
/// is checked against the ACL when there is one and `mode` has group bits, else against the group bits
/// (member of the owning group) or the other bits. Linux's quirk is kept: with a zero group field (the
/// mask, when the ACL has one) the ACL is skipped and the mode decides.
pub fn check_with_acl(c: &Caller, mode: u32, owner_uid: u32, owner_gid: u32, acl: Option<&Acl>, want: u32) -> bool {
    let want = want & 0o7;
    if c.uid == owner_uid {
        return want & !(mode >> 6) == 0;
    }
    if let Some(acl) = acl {
        if mode & 0o070 != 0 {
            return acl.permits(c, owner_uid, owner_gid, want);
        }
    }
    let bits = if c.in_group(owner_gid) { mode >> 3 } else { mode };
    want & !bits == 0
}

/// `posix_acl_create`: what a new inode created with `mode` in a directory with default ACL `default`
/// gets: the mode narrowed by [`Acl::create_masq`], an access ACL when the result is not equivalent to
/// a mode, and (directories only) the default ACL itself. The umask is not applied here: the caller
/// applies it only when the parent has no default ACL, and gives symlinks no ACL.
pub fn inherit(default: &Acl, kind_is_dir: bool, mode: u32) -> Inherited {
    let mut access = default.clone();
    let (mode, store) = access.create_masq(mode);
    Inherited { mode, access: store.then_some(access), default: kind_is_dir.then(|| default.clone()) }
}

impl fmt::Display for AclEntry {
    /// One entry of getfacl's short text form: `user::rw-`, `group:100:r-x`, `mask::r--`, `other::---`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(tag_name(self.tag))?;
        match self.tag {
            USER | GROUP => write!(f, ":{}:", self.id)?,
            USER_OBJ | GROUP_OBJ | MASK | OTHER => f.write_str("::")?,
            t => write!(f, "({t:#x}):{}:", self.id)?,
        }
        for (bit, c) in [(4, 'r'), (2, 'w'), (1, 'x')] {
            f.write_char(if self.perm & bit != 0 { c } else { '-' })?;
        }
        Ok(())
    }
}

impl fmt::Display for Acl {
    /// getfacl's short text form: `user::rw-,user:1000:r--,group::r-x,mask::r-x,other::---`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    /// An ACL from short text (`u::rwx,u:1000:r--,g::r-x,m::r-x,o::---`), without validating it.
    fn acl(text: &str) -> Acl {
        let entries = text
            .split(',')
            .map(|e| {
                let parts: Vec<&str> = e.split(':').collect();
                assert_eq!(parts.len(), 3, "{e}");
                let named = !parts[1].is_empty();
                let tag = match (parts[0], named) {
                    ("u", false) => USER_OBJ,
                    ("u", true) => USER,
                    ("g", false) => GROUP_OBJ,
                    ("g", true) => GROUP,
                    ("m", false) => MASK,
                    ("o", false) => OTHER,
                    _ => panic!("bad entry {e}"),
                };
                let id = if named { parts[1].parse().unwrap() } else { UNDEFINED_ID };
                let perm = parts[2].chars().zip([4, 2, 1]).map(|(c, b)| if c == '-' { 0 } else { b }).sum();
                AclEntry { tag, perm, id }
            })
            .collect();
        Acl { entries }
    }

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller { uid, gid, groups: groups.to_vec() }
    }

    /// Asserts that the bytes are rejected with EINVAL, for a reason mentioning `why`.
    fn rejects(bytes: &[u8], why: &str) {
        let err = Acl::parse(bytes).expect_err("should be rejected");
        assert_eq!(err.code, ErrorCode::Invalid, "{err}");
        assert!(err.detail.contains(why), "{err} does not mention {why:?}");
    }

    fn rejects_acl(text: &str, why: &str) {
        rejects(&acl(text).to_bytes(), why);
    }

    #[test]
    fn round_trip_to_bytes_parse() {
        let a = acl("u::rwx,u:1000:r--,u:1001:rw-,g::r-x,g:50:--x,m::rwx,o::---");
        assert_eq!(Acl::parse(&a.to_bytes()).unwrap(), Some(a));
    }

    #[test]
    fn parse_rejects_short_input() {
        rejects(&[2, 0, 0], "shorter than its header");
        rejects(&[], "shorter than its header");
    }

    #[test]
    fn parse_rejects_odd_length() {
        let mut b = acl("u::rw-,g::r--,o::r--").to_bytes();
        b.push(0);
        rejects(&b, "whole 8-byte entries");
    }

    #[test]
    fn parse_rejects_wrong_version() {
        let mut b = acl("u::rw-,g::r--,o::r--").to_bytes();
        b[0] = 1;
        let err = Acl::parse(&b).expect_err("should be rejected");
        assert_eq!(err.code, ErrorCode::Unsupported, "{err}");
        assert!(err.detail.contains("version 1"), "{err}");
    }

    #[test]
    fn parse_rejects_bad_perm_bits() {
        let mut a = acl("u::rw-,g::r--,o::r--");
        a.entries[1].perm = 0o10;
        rejects(&a.to_bytes(), "beyond rwx");
    }

    #[test]
    fn parse_rejects_unknown_tag() {
        let mut a = acl("u::rw-,g::r--,o::r--");
        a.entries[1].tag = 0x40;
        rejects(&a.to_bytes(), "unknown tag");
    }

    #[test]
    fn parse_rejects_unsorted_entries() {
        rejects_acl("u::rw-,g::r--,u:1000:r--,m::r--,o::---", "out of order");
        rejects_acl("u::rw-,g::r--,o::---,m::r--", "out of order");
    }

    #[test]
    fn parse_rejects_decreasing_named_ids() {
        rejects_acl("u::rw-,g::r--,g:20:r--,g:10:r--,m::r--,o::---", "strictly increasing");
    }

    #[test]
    fn parse_rejects_duplicate_named_ids() {
        rejects_acl("u::rw-,u:1000:r--,u:1000:rw-,g::r--,m::rw-,o::---", "strictly increasing");
    }

    #[test]
    fn parse_accepts_same_id_as_user_and_group() {
        let a = acl("u::rw-,u:1000:r--,g::r--,g:1000:r--,m::r--,o::---");
        assert_eq!(Acl::parse(&a.to_bytes()).unwrap(), Some(a));
    }

    #[test]
    fn parse_rejects_undefined_named_id() {
        let mut a = acl("u::rw-,u:1000:r--,g::r--,m::r--,o::---");
        a.entries[1].id = UNDEFINED_ID;
        rejects(&a.to_bytes(), "undefined id");
    }

    #[test]
    fn parse_rejects_missing_mask_with_named_entries() {
        rejects_acl("u::rw-,u:1000:r--,g::r--,o::---", "require a mask");
        rejects_acl("u::rw-,g::r--,g:7:r--,o::---", "require a mask");
    }

    #[test]
    fn parse_rejects_two_masks() {
        rejects_acl("u::rw-,g::r--,m::r--,m::r--,o::---", "duplicate entry");
    }

    #[test]
    fn parse_rejects_two_user_obj() {
        rejects_acl("u::rw-,u::rw-,g::r--,o::---", "duplicate entry");
    }

    #[test]
    fn parse_rejects_missing_group_obj() {
        rejects_acl("u::rw-,o::---", "owning group");
    }

    #[test]
    fn parse_rejects_missing_other() {
        rejects_acl("u::rw-,g::r--", "missing the other entry");
        rejects_acl("u::rw-,g::r--,m::r--", "missing the other entry");
    }

    #[test]
    fn parse_zero_entries_is_none() {
        assert_eq!(Acl::parse(&[2, 0, 0, 0]).unwrap(), None);
    }

    #[test]
    fn parse_setfacl_bytes() {
        // `setfacl -m u:1000:rw f` on a 0644 file: user::rw-, user:1000:rw-, group::r--, mask::rw-, other::r--.
        #[rustfmt::skip]
        let bytes = [
            0x02, 0x00, 0x00, 0x00,
            0x01, 0x00, 0x06, 0x00, 0xff, 0xff, 0xff, 0xff,
            0x02, 0x00, 0x06, 0x00, 0xe8, 0x03, 0x00, 0x00,
            0x04, 0x00, 0x04, 0x00, 0xff, 0xff, 0xff, 0xff,
            0x10, 0x00, 0x06, 0x00, 0xff, 0xff, 0xff, 0xff,
            0x20, 0x00, 0x04, 0x00, 0xff, 0xff, 0xff, 0xff,
        ];
        let a = Acl::parse(&bytes).unwrap().unwrap();
        assert_eq!(a, acl("u::rw-,u:1000:rw-,g::r--,m::rw-,o::r--"));
        assert_eq!(a.to_bytes(), bytes);
    }

    #[test]
    fn parse_ignores_ids_of_unnamed_entries() {
        let mut b = acl("u::rw-,g::r--,o::r--").to_bytes();
        b[8..12].copy_from_slice(&1234u32.to_le_bytes());
        assert_eq!(Acl::parse(&b).unwrap(), Some(acl("u::rw-,g::r--,o::r--")));
    }

    #[test]
    fn from_mode_is_three_entries() {
        assert_eq!(Acl::from_mode(0o100751), acl("u::rwx,g::r-x,o::--x"));
    }

    #[test]
    fn equiv_mode_three_entries() {
        assert_eq!(acl("u::rw-,g::r--,o::---").equiv_mode(0o104777), (0o104640, true));
    }

    #[test]
    fn equiv_mode_with_mask() {
        assert_eq!(acl("u::rw-,g::rwx,m::r--,o::---").equiv_mode(0o100000), (0o100640, false));
        assert_eq!(acl("u::rw-,u:5:rw-,g::r--,m::rw-,o::---").equiv_mode(0), (0o660, false));
    }

    #[test]
    fn chmod_updates_mask_when_present() {
        let mut a = acl("u::rw-,u:1000:rwx,g::r-x,m::rwx,o::r--");
        a.chmod(0o100750);
        assert_eq!(a, acl("u::rwx,u:1000:rwx,g::r-x,m::r-x,o::---"));
    }

    #[test]
    fn chmod_updates_group_obj_without_mask() {
        let mut a = acl("u::rw-,g::r-x,o::r--");
        a.chmod(0o604);
        assert_eq!(a, acl("u::rw-,g::---,o::r--"));
    }

    #[test]
    fn create_masq_plain_default() {
        let mut a = acl("u::rwx,g::r-x,o::r-x");
        assert_eq!(a.create_masq(0o100666), (0o100644, false));
        assert_eq!(a, acl("u::rw-,g::r--,o::r--"));
    }

    #[test]
    fn create_masq_named_user_and_mask() {
        let mut a = acl("u::rwx,u:1000:rwx,g::r-x,m::r-x,o::---");
        assert_eq!(a.create_masq(0o666), (0o640, true));
        assert_eq!(a, acl("u::rw-,u:1000:rwx,g::r-x,m::r--,o::---"));
    }

    #[test]
    fn create_masq_keeps_special_bits() {
        let mut a = acl("u::rwx,g::r-x,o::---");
        assert_eq!(a.create_masq(0o42777), (0o42750, false));
    }

    #[test]
    fn inherit_directory_keeps_default() {
        let d = acl("u::rwx,u:1000:rwx,g::r-x,m::rwx,o::r-x");
        let got = inherit(&d, true, 0o40700);
        assert_eq!(got.mode, 0o40700);
        assert_eq!(got.access, Some(acl("u::rwx,u:1000:rwx,g::r-x,m::---,o::---")));
        assert_eq!(got.default, Some(d));
    }

    #[test]
    fn inherit_file_drops_default() {
        let d = acl("u::rwx,g::r-x,o::r-x");
        let got = inherit(&d, false, 0o100666);
        assert_eq!(got, Inherited { mode: 0o100644, access: None, default: None });
    }

    #[test]
    fn permits_owner_uses_user_obj_without_mask() {
        let a = acl("u::rw-,g::r--,m::r--,o::---");
        assert!(a.permits(&caller(1000, 1000, &[]), 1000, 100, 2));
        assert!(!a.permits(&caller(1000, 1000, &[]), 1000, 100, 1));
    }

    #[test]
    fn permits_named_user_limited_by_mask() {
        let a = acl("u::rw-,u:2000:rw-,g::r--,m::r--,o::---");
        let c = caller(2000, 2000, &[]);
        assert!(a.permits(&c, 1000, 100, 4));
        assert!(!a.permits(&c, 1000, 100, 2));
        assert!(!a.permits(&c, 1000, 100, 6));
    }

    #[test]
    fn permits_named_user_without_mask_after_it() {
        // Not a valid ACL (a named user needs a mask), but permits follows Linux: no mask, no limit.
        let a = acl("u::---,u:2000:rw-,g::---,o::---");
        assert!(a.permits(&caller(2000, 2000, &[]), 1000, 100, 6));
    }

    #[test]
    fn permits_group_member_of_two_matching_groups_one_grants() {
        let a = acl("u::rw-,g::r--,g:600:rw-,m::rw-,o::---");
        assert!(a.permits(&caller(3000, 500, &[600]), 1000, 500, 6));
        assert!(!a.permits(&caller(3000, 500, &[]), 1000, 500, 2));
        // The granting group is still limited by the mask.
        let masked = acl("u::rw-,g::r--,g:600:rw-,m::r--,o::rw-");
        assert!(!masked.permits(&caller(3000, 500, &[600]), 1000, 500, 2));
    }

    #[test]
    fn permits_matching_group_that_denies_does_not_fall_back_to_other() {
        let a = acl("u::rw-,g::---,m::rwx,o::rw-");
        assert!(!a.permits(&caller(3000, 500, &[]), 1000, 500, 4));
        assert!(a.permits(&caller(3000, 700, &[]), 1000, 500, 4));
    }

    #[test]
    fn permits_unmatched_uses_other() {
        let a = acl("u::rw-,u:2000:rw-,g::rw-,g:600:rw-,m::rw-,o::r--");
        let c = caller(3000, 700, &[701]);
        assert!(a.permits(&c, 1000, 500, 4));
        assert!(!a.permits(&c, 1000, 500, 2));
    }

    #[test]
    fn permits_ignores_bits_beyond_rwx_in_want() {
        let a = acl("u::rw-,g::r--,o::r--");
        assert!(a.permits(&caller(3000, 700, &[]), 1000, 500, 0o10 | 4));
    }

    #[test]
    fn permits_denies_without_other() {
        let a = acl("u::rw-,g::r--");
        assert!(!a.permits(&caller(3000, 700, &[]), 1000, 500, 0));
    }

    #[test]
    fn check_with_acl_owner_uses_mode() {
        let a = acl("u::rw-,g::rwx,m::rwx,o::rwx");
        let owner = caller(1000, 500, &[]);
        assert!(check_with_acl(&owner, 0o100477, 1000, 500, Some(&a), 4));
        assert!(!check_with_acl(&owner, 0o100477, 1000, 500, Some(&a), 2));
    }

    #[test]
    fn check_with_acl_uses_acl_with_group_bits() {
        let a = acl("u::rw-,u:2000:rw-,g::r--,m::rw-,o::r--");
        let c = caller(2000, 2000, &[]);
        assert!(check_with_acl(&c, 0o100664, 1000, 500, Some(&a), 2));
        assert!(!check_with_acl(&c, 0o100664, 1000, 500, None, 2));
    }

    #[test]
    fn check_with_acl_zero_group_bits_skips_acl() {
        let a = acl("u::rw-,u:2000:rw-,g::r--,m::---,o::r--");
        let c = caller(2000, 2000, &[]);
        assert!(!a.permits(&c, 1000, 500, 4));
        assert!(check_with_acl(&c, 0o100604, 1000, 500, Some(&a), 4));
    }

    #[test]
    fn check_with_acl_without_acl_uses_group_then_other() {
        assert!(check_with_acl(&caller(3000, 500, &[]), 0o640, 1000, 500, None, 4));
        assert!(!check_with_acl(&caller(3000, 700, &[]), 0o640, 1000, 500, None, 4));
        assert!(!check_with_acl(&caller(3000, 500, &[]), 0o604, 1000, 500, None, 4));
    }

    #[test]
    fn display_short_text() {
        let a = acl("u::rw-,u:1000:r--,g::r-x,m::r-x,o::---");
        assert_eq!(a.to_string(), "user::rw-,user:1000:r--,group::r-x,mask::r-x,other::---");
        assert_eq!(acl("u::rwx,g:7:--x,m::-w-,o::r--").to_string(), "user::rwx,group:7:--x,mask::-w-,other::r--");
    }
}
