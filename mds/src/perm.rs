//! POSIX permission checks from the caller's credentials, following what the Linux kernel does.

use tessera_proto::acl::{self, Acl};
use tessera_proto::{Attr, Caller, FileKind, FsError, FsResult};

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;
pub const S_ISUID: u32 = 0o4000;
pub const S_ISGID: u32 = 0o2000;
pub const S_ISVTX: u32 = 0o1000;
const S_IXGRP: u32 = 0o010;

fn mask_text(mask: u32) -> String {
    let mut s = String::new();
    for (bit, c) in [(R, 'r'), (W, 'w'), (X, 'x')] {
        if mask & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// Whether `a`'s access ACL can decide for `c` (Linux's `acl_permission_check`): not for root, nor the
/// owner (the mode's owner bits are the ACL's owner entry), nor when the mode's group bits (the ACL's
/// mask) are all clear. Callers load the ACL only then.
pub fn acl_applies(c: &Caller, a: &Attr) -> bool {
    c.uid != 0 && c.uid != a.uid && a.perm & 0o070 != 0
}

/// Whether `c` may access `a` for every bit of `mask` (R/W/X), with `a`'s access ACL if it has one.
/// Root bypasses r/w, and x on directories; x on other files only if some x bit is set.
pub fn allowed(c: &Caller, a: &Attr, access_acl: Option<&Acl>, mask: u32) -> bool {
    let mask = mask & 7;
    if c.uid == 0 {
        return mask & X == 0 || a.kind == FileKind::Dir || a.perm & 0o111 != 0;
    }
    acl::check_with_acl(c, a.perm, a.uid, a.gid, access_acl, mask)
}

/// EACCES unless [`allowed`].
pub fn check(c: &Caller, a: &Attr, access_acl: Option<&Acl>, mask: u32) -> FsResult<()> {
    if allowed(c, a, access_acl, mask) {
        Ok(())
    } else {
        Err(denied(c, a, mask))
    }
}

/// The EACCES of a refused check.
pub fn denied(c: &Caller, a: &Attr, mask: u32) -> FsError {
    FsError::access(format!("uid {} lacks {} permission on inode {}", c.uid, mask_text(mask), a.ino))
}

pub fn is_owner_or_root(c: &Caller, a: &Attr) -> bool {
    c.uid == 0 || c.uid == a.uid
}

/// EPERM unless owner or root.
pub fn check_owner(c: &Caller, a: &Attr, what: &str) -> FsResult<()> {
    if is_owner_or_root(c, a) {
        Ok(())
    } else {
        Err(FsError::perm(format!("{what}: uid {} does not own inode {}", c.uid, a.ino)))
    }
}

/// In a sticky directory only the entry's owner, the directory's owner or root may remove/rename it (EPERM).
pub fn check_sticky(c: &Caller, dir: &Attr, victim: &Attr) -> FsResult<()> {
    if dir.perm & S_ISVTX == 0 || c.uid == 0 || c.uid == victim.uid || c.uid == dir.uid {
        Ok(())
    } else {
        Err(FsError::perm(format!(
            "sticky directory {}: uid {} owns neither it nor inode {}",
            dir.ino, c.uid, victim.ino
        )))
    }
}

/// Owner and permission bits of a new inode created by `c` in directory `parent`: a setgid directory
/// passes on its group (and, to subdirectories, the setgid bit).
pub fn new_owner(c: &Caller, parent: &Attr, kind: FileKind, perm: u32) -> (u32, u32, u32) {
    let mut perm = perm & 0o7777;
    let gid = if parent.perm & S_ISGID != 0 {
        if kind == FileKind::Dir {
            perm |= S_ISGID;
        } else if perm & S_ISGID != 0 && c.uid != 0 && !c.in_group(parent.gid) {
            perm &= !S_ISGID;
        }
        parent.gid
    } else {
        c.gid
    };
    (c.uid, gid, perm)
}

/// The mode a chmod by `c` actually sets (non-root outside the file's group loses S_ISGID).
pub fn chmod_mode(c: &Caller, a: &Attr, perm: u32) -> FsResult<u32> {
    check_owner(c, a, "chmod")?;
    let mut perm = perm & 0o7777;
    if c.uid != 0 && !c.in_group(a.gid) {
        perm &= !S_ISGID;
    }
    Ok(perm)
}

/// chown rules: only root changes the owner; the owner may change the group to one it belongs to.
pub fn check_chown(c: &Caller, a: &Attr, uid: Option<u32>, gid: Option<u32>) -> FsResult<()> {
    if c.uid == 0 {
        return Ok(());
    }
    if let Some(uid) = uid {
        if uid != a.uid || c.uid != a.uid {
            return Err(FsError::perm(format!("chown: uid {} may not make inode {} owned by {uid}", c.uid, a.ino)));
        }
    }
    if let Some(gid) = gid {
        if c.uid != a.uid || (gid != a.gid && !c.in_group(gid)) {
            return Err(FsError::perm(format!("chgrp: uid {} may not give inode {} group {gid}", c.uid, a.ino)));
        }
    }
    Ok(())
}

/// Mode after a chown of a non-directory: S_ISUID always cleared, S_ISGID if group-exec is set (Linux).
pub fn mode_after_chown(kind: FileKind, perm: u32) -> u32 {
    if kind == FileKind::Dir {
        return perm;
    }
    let mut p = perm & !S_ISUID;
    if p & S_IXGRP != 0 {
        p &= !S_ISGID;
    }
    p
}

/// utimes: explicit times need owner/root (EPERM); "now" also allowed with write permission (EACCES).
pub fn check_times(c: &Caller, a: &Attr, access_acl: Option<&Acl>, explicit: bool) -> FsResult<()> {
    if is_owner_or_root(c, a) {
        return Ok(());
    }
    if explicit {
        return Err(FsError::perm(format!("utimes: uid {} does not own inode {}", c.uid, a.ino)));
    }
    check(c, a, access_acl, W)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::Timestamp;

    fn attr(kind: FileKind, perm: u32, uid: u32, gid: u32) -> Attr {
        let t = Timestamp::default();
        Attr {
            ino: 9,
            kind,
            perm,
            nlink: 1,
            uid,
            gid,
            size: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            rdev: 0,
            blocks: 0,
        }
    }

    fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Caller {
        Caller { uid, gid, groups }
    }

    #[test]
    fn classes_and_root() {
        let f = attr(FileKind::File, 0o640, 10, 20);
        assert!(allowed(&user(10, 1, vec![]), &f, None, R | W));
        assert!(!allowed(&user(10, 1, vec![]), &f, None, X));
        assert!(allowed(&user(11, 1, vec![20]), &f, None, R));
        assert!(!allowed(&user(11, 1, vec![20]), &f, None, W));
        assert!(!allowed(&user(12, 1, vec![]), &f, None, R));
        // Owner class applies even when the group would allow more.
        let g = attr(FileKind::File, 0o070, 10, 20);
        assert!(!allowed(&user(10, 20, vec![]), &g, None, R));
        let root = Caller::root();
        assert!(allowed(&root, &f, None, R | W));
        assert!(!allowed(&root, &f, None, X));
        assert!(allowed(&root, &attr(FileKind::File, 0o001, 10, 20), None, X));
        assert!(allowed(&root, &attr(FileKind::Dir, 0o000, 10, 20), None, R | W | X));
        assert_eq!(check(&user(12, 1, vec![]), &f, None, R).unwrap_err().code, tessera_proto::error::ErrorCode::Access);
    }

    #[test]
    fn chown_chmod_rules() {
        let f = attr(FileKind::File, 0o6755, 10, 20);
        let owner = user(10, 20, vec![30]);
        assert!(check_chown(&owner, &f, Some(11), None).is_err());
        assert!(check_chown(&owner, &f, Some(10), Some(30)).is_ok());
        assert!(check_chown(&owner, &f, None, Some(40)).is_err());
        assert!(check_chown(&user(11, 20, vec![]), &f, None, Some(20)).is_err());
        assert!(check_chown(&Caller::root(), &f, Some(1), Some(2)).is_ok());
        assert_eq!(mode_after_chown(FileKind::File, 0o6755), 0o0755);
        assert_eq!(mode_after_chown(FileKind::File, 0o6745), 0o2745);
        assert_eq!(mode_after_chown(FileKind::Dir, 0o6755), 0o6755);
        assert_eq!(chmod_mode(&user(10, 99, vec![]), &f, 0o2755).unwrap(), 0o0755);
        assert_eq!(chmod_mode(&owner, &f, 0o2755).unwrap(), 0o2755);
        assert!(chmod_mode(&user(11, 20, vec![]), &f, 0o777).is_err());
        assert!(check_times(&user(11, 20, vec![]), &attr(FileKind::File, 0o666, 10, 20), None, false).is_ok());
        assert!(check_times(&user(11, 20, vec![]), &attr(FileKind::File, 0o666, 10, 20), None, true).is_err());
        assert!(check_times(&user(11, 20, vec![]), &attr(FileKind::File, 0o644, 10, 20), None, false).is_err());
    }

    #[test]
    fn setgid_dirs_pass_group_and_bit() {
        let d = attr(FileKind::Dir, 0o2775, 10, 50);
        let c = user(11, 1, vec![]);
        assert_eq!(new_owner(&c, &d, FileKind::Dir, 0o755), (11, 50, 0o2755));
        assert_eq!(new_owner(&c, &d, FileKind::File, 0o2644), (11, 50, 0o0644));
        let plain = attr(FileKind::Dir, 0o755, 10, 50);
        assert_eq!(new_owner(&c, &plain, FileKind::File, 0o644), (11, 1, 0o644));
    }
}
