//! File locks held across client nodes (issue 42): POSIX byte-range locks (`fcntl` `F_SETLK`/`F_GETLK`)
//! and whole-file `flock` locks, as a pure table. The MDS keeps the one that decides (`mds/src/locks.rs`:
//! waiting, deadlock detection, eviction, the grace period after a restart); each client keeps one of what
//! it was granted, to release at close and to reassert to a new start of the service.
//!
//! The rules are POSIX.1-2017's `fcntl` and Linux's `fs/locks.c`:
//! - A POSIX lock belongs to an owner (a process: the kernel's lock owner, per client); a write lock
//!   conflicts with any lock of another owner on an overlapping range, a read lock with another owner's
//!   write lock. An owner's own locks never conflict with each other: a new lock replaces what the owner
//!   held on its range (an upgrade or downgrade in place), splitting a lock it cuts through, and merges
//!   with the owner's locks of the same type that it overlaps or touches. An unlock of a range removes
//!   the owner's locks there, splitting as needed.
//! - A `flock` lock belongs to an open file description and covers the whole file; POSIX and `flock`
//!   locks do not see each other (Linux). Converting a `flock` lock (shared to exclusive or back) is not
//!   atomic: the old lock is removed first, then the new one placed, so a conversion that fails has
//!   dropped the old lock (`flock(2)`).

use crate::types::Ino;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A POSIX byte-range lock or a `flock` whole-file lock.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum LockKind {
    Posix,
    Flock,
}

/// What a lock request asks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum LockType {
    /// Shared (`F_RDLCK`, `LOCK_SH`).
    Read,
    /// Exclusive (`F_WRLCK`, `LOCK_EX`).
    Write,
    /// `F_UNLCK`, `LOCK_UN`.
    Unlock,
}

impl LockType {
    /// From `F_RDLCK`/`F_WRLCK`/`F_UNLCK`.
    pub fn from_fcntl(typ: i32) -> Option<LockType> {
        match typ {
            libc::F_RDLCK => Some(LockType::Read),
            libc::F_WRLCK => Some(LockType::Write),
            libc::F_UNLCK => Some(LockType::Unlock),
            _ => None,
        }
    }

    pub fn to_fcntl(self) -> i32 {
        match self {
            LockType::Read => libc::F_RDLCK,
            LockType::Write => libc::F_WRLCK,
            LockType::Unlock => libc::F_UNLCK,
        }
    }
}

/// One lock request: what, where (`start..=end`, bytes; a `flock` lock's range is ignored) and the
/// requesting process (reported by `F_GETLK`, never used to decide).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LockSpec {
    pub kind: LockKind,
    pub typ: LockType,
    pub start: u64,
    /// Inclusive; `u64::MAX` (or the kernel's `OFFSET_MAX`): to the end of the file, however it grows.
    pub end: u64,
    pub pid: u32,
}

impl LockSpec {
    /// A `flock` request (the whole file).
    pub fn flock(typ: LockType) -> LockSpec {
        LockSpec { kind: LockKind::Flock, typ, start: 0, end: u64::MAX, pid: 0 }
    }

    /// Removes every lock of its kind an owner holds on a file (a close).
    pub fn unlock_all(kind: LockKind) -> LockSpec {
        LockSpec { kind, typ: LockType::Unlock, start: 0, end: u64::MAX, pid: 0 }
    }

    /// Whether the range makes sense (`EINVAL` otherwise).
    pub fn is_valid(&self) -> bool {
        self.start <= self.end
    }
}

/// Who owns a lock: a client, and the owner its kernel named (a process for POSIX locks, an open file
/// description for `flock` locks). Different clients' owners never match.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LockOwner {
    pub client: u64,
    pub owner: u64,
}

/// A lock held.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct HeldLock {
    pub owner: LockOwner,
    pub kind: LockKind,
    pub write: bool,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
}

impl HeldLock {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }

    /// Overlaps `start..=end` or touches it at either side.
    fn touches(&self, start: u64, end: u64) -> bool {
        self.start <= end.saturating_add(1) && start.saturating_sub(1) <= self.end
    }

    fn conflicts(&self, owner: LockOwner, spec: &LockSpec) -> bool {
        self.owner != owner
            && self.kind == spec.kind
            && (self.write || spec.typ == LockType::Write)
            && (spec.kind == LockKind::Flock || self.overlaps(spec.start, spec.end))
    }
}

/// The locks on every file, as one holder of the truth (the MDS) or one client's record of its own sees
/// them.
#[derive(Default, Debug, Clone)]
pub struct LockTable {
    files: HashMap<Ino, Vec<HeldLock>>,
}

impl LockTable {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Locks held, on every file.
    pub fn len(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// The locks of other owners that keep `owner` from placing `spec` on `ino` (none for an unlock).
    pub fn conflicts<'a>(
        &'a self,
        ino: Ino,
        owner: LockOwner,
        spec: &'a LockSpec,
    ) -> impl Iterator<Item = &'a HeldLock> {
        let locks = if spec.typ == LockType::Unlock { None } else { self.files.get(&ino) };
        locks.into_iter().flatten().filter(move |l| l.conflicts(owner, spec))
    }

    /// `F_GETLK`: the first lock that would keep `owner` from placing `spec`, if any.
    pub fn test(&self, ino: Ino, owner: LockOwner, spec: &LockSpec) -> Option<HeldLock> {
        self.conflicts(ino, owner, spec).min_by_key(|l| l.start).copied()
    }

    /// Places (or removes) `owner`'s lock `spec` on `ino` if no other owner's lock conflicts; otherwise
    /// returns the owners in the way (sorted, once each) and changes nothing — except that a `flock`
    /// conversion has dropped the old lock (see the module docs).
    pub fn apply(&mut self, ino: Ino, owner: LockOwner, spec: &LockSpec) -> Result<(), Vec<LockOwner>> {
        let write = spec.typ == LockType::Write;
        let flock_of = |l: &HeldLock| l.owner == owner && l.kind == LockKind::Flock;
        if spec.kind == LockKind::Flock
            && spec.typ != LockType::Unlock
            && self.on(ino).iter().any(|l| flock_of(l) && l.write == write)
        {
            return Ok(()); // already held as asked: nothing to convert
        }
        let mut blockers: Vec<LockOwner> = self.conflicts(ino, owner, spec).map(|l| l.owner).collect();
        if !blockers.is_empty() {
            if spec.kind == LockKind::Flock {
                self.remove_where(ino, flock_of); // flock(2): the old lock goes first
            }
            blockers.sort_unstable();
            blockers.dedup();
            return Err(blockers);
        }
        self.place(ino, owner, spec);
        Ok(())
    }

    /// Places `spec` for `owner` without looking at other owners' locks (a client's record of what the
    /// MDS granted it). An unlock removes.
    pub fn place(&mut self, ino: Ino, owner: LockOwner, spec: &LockSpec) {
        let write = spec.typ == LockType::Write;
        let new = |start, end| HeldLock { owner, kind: spec.kind, write, start, end, pid: spec.pid };
        if spec.kind == LockKind::Flock {
            self.remove_where(ino, |l| l.owner == owner && l.kind == LockKind::Flock);
            if spec.typ != LockType::Unlock {
                self.files.entry(ino).or_default().push(new(0, u64::MAX));
            }
            return;
        }
        let (mut start, mut end) = (spec.start, spec.end);
        let unlock = spec.typ == LockType::Unlock;
        // The owner's POSIX locks that the new one overlaps or touches come out; what is left of them
        // outside the new range goes back, and those of the same type merge into it.
        let mine = self
            .remove_where(ino, |l| l.owner == owner && l.kind == LockKind::Posix && l.touches(spec.start, spec.end));
        let mut back = Vec::new();
        for l in mine {
            if !unlock && l.write == write {
                start = start.min(l.start);
                end = end.max(l.end);
            } else if l.overlaps(spec.start, spec.end) {
                if l.start < spec.start {
                    back.push(HeldLock { end: spec.start - 1, ..l });
                }
                if l.end > spec.end {
                    back.push(HeldLock { start: spec.end + 1, ..l });
                }
            } else {
                back.push(l); // touches but of another type: unchanged
            }
        }
        if !unlock {
            back.push(new(start, end));
        }
        if !back.is_empty() {
            let locks = self.files.entry(ino).or_default();
            locks.extend(back);
            locks.sort_by_key(|l| (l.owner, l.start));
        }
    }

    fn remove_where(&mut self, ino: Ino, mut pred: impl FnMut(&HeldLock) -> bool) -> Vec<HeldLock> {
        let Some(locks) = self.files.get_mut(&ino) else { return Vec::new() };
        let mut out = Vec::new();
        locks.retain(|l| {
            if pred(l) {
                out.push(*l);
                false
            } else {
                true
            }
        });
        if locks.is_empty() {
            self.files.remove(&ino);
        }
        out
    }

    /// Whether `owner` holds a lock of `kind` on `ino`.
    pub fn holds(&self, ino: Ino, owner: LockOwner, kind: LockKind) -> bool {
        self.files.get(&ino).is_some_and(|v| v.iter().any(|l| l.owner == owner && l.kind == kind))
    }

    /// Removes every lock of `client` (an evicted client); returns how many.
    pub fn release_client(&mut self, client: u64) -> usize {
        let mut n = 0;
        self.files.retain(|_, locks| {
            let before = locks.len();
            locks.retain(|l| l.owner.client != client);
            n += before - locks.len();
            !locks.is_empty()
        });
        n
    }

    /// Every lock held, with its file.
    pub fn all(&self) -> Vec<(Ino, HeldLock)> {
        let mut v: Vec<(Ino, HeldLock)> =
            self.files.iter().flat_map(|(&i, ls)| ls.iter().map(move |l| (i, *l))).collect();
        v.sort_by_key(|(i, l)| (*i, l.owner, l.start));
        v
    }

    /// The locks on `ino`.
    pub fn on(&self, ino: Ino) -> &[HeldLock] {
        self.files.get(&ino).map_or(&[], Vec::as_slice)
    }

    /// Which clients hold locks.
    pub fn clients(&self) -> Vec<u64> {
        let mut c: Vec<u64> = self.files.values().flatten().map(|l| l.owner.client).collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: LockOwner = LockOwner { client: 1, owner: 10 };
    const B: LockOwner = LockOwner { client: 2, owner: 10 };
    const EOF: u64 = u64::MAX;

    fn posix(typ: LockType, start: u64, end: u64) -> LockSpec {
        LockSpec { kind: LockKind::Posix, typ, start, end, pid: 7 }
    }
    fn rd(s: u64, e: u64) -> LockSpec {
        posix(LockType::Read, s, e)
    }
    fn wr(s: u64, e: u64) -> LockSpec {
        posix(LockType::Write, s, e)
    }
    fn un(s: u64, e: u64) -> LockSpec {
        posix(LockType::Unlock, s, e)
    }
    /// `owner`'s locks on file 1 as (write, start, end).
    fn of(t: &LockTable, owner: LockOwner) -> Vec<(bool, u64, u64)> {
        t.on(1).iter().filter(|l| l.owner == owner).map(|l| (l.write, l.start, l.end)).collect()
    }

    #[test]
    fn a_write_lock_excludes_every_other_owner_and_a_read_lock_only_writers() {
        let mut t = LockTable::default();
        t.apply(1, A, &wr(0, 99)).unwrap();
        assert_eq!(t.apply(1, B, &rd(50, 60)), Err(vec![A]));
        assert_eq!(t.apply(1, B, &wr(99, 99)), Err(vec![A]), "one byte of overlap is enough");
        t.apply(1, B, &wr(100, 200)).expect("no overlap, no conflict");
        t.apply(2, B, &wr(0, EOF)).expect("another file");
        let mut t = LockTable::default();
        t.apply(1, A, &rd(0, EOF)).unwrap();
        t.apply(1, B, &rd(10, 20)).expect("readers share");
        assert_eq!(t.apply(1, B, &wr(10, 20)), Err(vec![A]));
    }

    #[test]
    fn an_owner_never_conflicts_with_itself_and_upgrades_in_place() {
        let mut t = LockTable::default();
        t.apply(1, A, &rd(0, 99)).unwrap();
        t.apply(1, A, &wr(0, 99)).unwrap();
        assert_eq!(of(&t, A), vec![(true, 0, 99)]);
        t.apply(1, A, &rd(0, 99)).unwrap();
        assert_eq!(of(&t, A), vec![(false, 0, 99)], "and downgrades");
    }

    #[test]
    fn a_lock_of_another_type_in_the_middle_splits_the_owners_lock_in_three() {
        let mut t = LockTable::default();
        t.apply(1, A, &rd(0, 99)).unwrap();
        t.apply(1, A, &wr(40, 59)).unwrap();
        assert_eq!(of(&t, A), vec![(false, 0, 39), (true, 40, 59), (false, 60, 99)]);
        // Another owner's read lock may now sit on the read parts only.
        t.apply(1, B, &rd(0, 39)).unwrap();
        assert_eq!(t.apply(1, B, &rd(30, 40)), Err(vec![A]));
    }

    #[test]
    fn locks_of_the_same_type_that_overlap_or_touch_merge() {
        let mut t = LockTable::default();
        t.apply(1, A, &wr(0, 9)).unwrap();
        t.apply(1, A, &wr(20, 29)).unwrap();
        t.apply(1, A, &wr(10, 19)).unwrap();
        assert_eq!(of(&t, A), vec![(true, 0, 29)], "adjacent ranges are one lock");
        t.apply(1, A, &wr(25, EOF)).unwrap();
        assert_eq!(of(&t, A), vec![(true, 0, EOF)]);
        // Of another type they stay apart.
        let mut t = LockTable::default();
        t.apply(1, A, &rd(0, 9)).unwrap();
        t.apply(1, A, &wr(10, 19)).unwrap();
        assert_eq!(of(&t, A), vec![(false, 0, 9), (true, 10, 19)]);
    }

    #[test]
    fn an_unlock_removes_and_splits_only_the_owners_own_locks() {
        let mut t = LockTable::default();
        t.apply(1, A, &wr(0, 99)).unwrap();
        t.apply(1, B, &wr(200, 299)).unwrap();
        t.apply(1, A, &un(10, 19)).unwrap();
        assert_eq!(of(&t, A), vec![(true, 0, 9), (true, 20, 99)]);
        t.apply(1, B, &wr(10, 19)).expect("the hole is free");
        t.apply(1, A, &un(0, EOF)).unwrap();
        assert!(of(&t, A).is_empty());
        assert_eq!(of(&t, B), vec![(true, 10, 19), (true, 200, 299)]);
        t.apply(1, A, &un(0, EOF)).expect("unlocking nothing is not an error");
        t.apply(1, B, &un(0, EOF)).unwrap();
        assert!(t.is_empty(), "a file without locks leaves nothing behind");
    }

    #[test]
    fn a_refused_posix_request_changes_nothing() {
        let mut t = LockTable::default();
        t.apply(1, A, &rd(0, 99)).unwrap();
        t.apply(1, B, &rd(0, 9)).unwrap();
        assert_eq!(t.apply(1, A, &wr(0, 99)), Err(vec![B]));
        assert_eq!(of(&t, A), vec![(false, 0, 99)], "A keeps its read lock");
    }

    #[test]
    fn flock_locks_cover_the_whole_file_and_do_not_see_posix_locks() {
        let mut t = LockTable::default();
        let ex = LockSpec::flock(LockType::Write);
        let sh = LockSpec::flock(LockType::Read);
        t.apply(1, A, &wr(0, EOF)).unwrap();
        t.apply(1, B, &ex).expect("flock and fcntl locks are independent (Linux)");
        assert_eq!(t.apply(1, A, &sh), Err(vec![B]));
        t.apply(1, B, &LockSpec::flock(LockType::Unlock)).unwrap();
        t.apply(1, A, &sh).unwrap();
        t.apply(1, B, &sh).expect("shared");
        assert_eq!(t.test(1, A, &LockSpec::flock(LockType::Write)).map(|l| l.owner), Some(B));
    }

    #[test]
    fn a_flock_conversion_that_fails_has_dropped_the_old_lock() {
        let mut t = LockTable::default();
        let sh = LockSpec::flock(LockType::Read);
        t.apply(1, A, &sh).unwrap();
        t.apply(1, B, &sh).unwrap();
        assert_eq!(t.apply(1, A, &LockSpec::flock(LockType::Write)), Err(vec![B]));
        assert!(!t.holds(1, A, LockKind::Flock), "flock(2): the existing lock is removed first");
        t.apply(1, B, &sh).expect("asking again for what is held is a no-op");
        assert_eq!(t.on(1).len(), 1);
    }

    #[test]
    fn getlk_reports_the_first_conflicting_lock_or_none() {
        let mut t = LockTable::default();
        t.apply(1, A, &wr(50, 59)).unwrap();
        t.apply(1, A, &rd(10, 19)).unwrap();
        let l = t.test(1, B, &wr(0, EOF)).unwrap();
        assert_eq!((l.owner, l.write, l.start, l.end, l.pid), (A, false, 10, 19, 7));
        assert_eq!(t.test(1, B, &rd(0, EOF)).map(|l| l.start), Some(50), "a reader only meets the write lock");
        assert_eq!(t.test(1, A, &wr(0, EOF)), None, "the owner's own locks never conflict");
    }

    #[test]
    fn a_client_releases_everything_at_once() {
        let mut t = LockTable::default();
        let a2 = LockOwner { client: 1, owner: 11 };
        t.apply(1, A, &wr(0, 9)).unwrap();
        t.apply(2, a2, &LockSpec::flock(LockType::Write)).unwrap();
        t.apply(1, B, &rd(20, 29)).unwrap();
        assert_eq!(t.clients(), vec![1, 2]);
        assert_eq!(t.release_client(1), 2);
        assert_eq!(t.all().len(), 1);
        assert_eq!(t.clients(), vec![2]);
    }

    #[test]
    fn ranges_at_the_ends_of_the_offsets_do_not_overflow() {
        let mut t = LockTable::default();
        t.apply(1, A, &wr(EOF, EOF)).unwrap();
        t.apply(1, A, &wr(0, 0)).unwrap();
        t.apply(1, A, &rd(1, EOF - 1)).unwrap();
        assert_eq!(of(&t, A), vec![(true, 0, 0), (false, 1, EOF - 1), (true, EOF, EOF)]);
        t.apply(1, A, &un(0, EOF)).unwrap();
        assert!(t.is_empty());
        assert!(!rd(5, 4).is_valid());
    }
}
