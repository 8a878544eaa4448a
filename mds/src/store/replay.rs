//! Start-up after a crash: the journal segments the previous run left are applied to sled, oldest first,
//! made durable and deleted; what a corrupt segment does is the operator's choice ([`JournalRecovery`]).

use super::error::{StoreError, StoreResult};
use crate::journal;
use sled::{Db, Tree};
use std::path::Path;
use tracing::info;

/// What start-up does when a journal segment other than the newest ends before its last byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JournalRecovery {
    /// Refuse to start, naming the segment and offset: the segments after it hold acknowledged changes
    /// that were made on top of what is lost, and applying them past the hole would be inconsistent.
    #[default]
    Refuse,
    /// Skip the rest of that segment (logged with the segment and offset) and replay the others: the
    /// operator's explicit choice (`tessera-mds --skip-corrupt-journal`).
    SkipCorrupt,
}

/// Applies the journal segments a crash left behind (oldest first), makes the result durable and
/// deletes them. Returns the number for the next segment. Only the newest segment may end torn (the
/// write(2) a crash interrupted, never acknowledged); a cut anywhere else is corruption, and nothing is
/// applied or deleted unless `recovery` says to skip it.
pub(super) fn replay_journal(db: &Db, trees: &[Tree], dir: &Path, recovery: JournalRecovery) -> StoreResult<u64> {
    let jerr = |source: std::io::Error| StoreError::Journal { path: dir.to_path_buf(), source };
    let segs = journal::segments(dir).map_err(jerr)?;
    let Some(&(last, _)) = segs.last() else { return Ok(1) };
    // Read everything first: a refusal must leave the database and the journal as they are.
    let mut read = Vec::with_capacity(segs.len());
    let mut torn = 0usize;
    for (seg, path) in &segs {
        let s = journal::read_segment(path).map_err(jerr)?;
        if let Some(cut) = &s.cut {
            let at = format!("journal segment {} at offset {}: {}", path.display(), cut.offset, cut.why);
            if *seg == last {
                torn += 1;
                info!("torn tail cut off (a write the crash interrupted, never acknowledged): {at}");
            } else if recovery == JournalRecovery::SkipCorrupt {
                tracing::warn!("skipping the rest of a corrupt {at} (--skip-corrupt-journal)");
            } else {
                return Err(StoreError::CorruptJournal { at });
            }
        }
        read.push(s.records);
    }
    let mut records = 0usize;
    for ws in read.into_iter().flatten() {
        for (t, k, v) in ws {
            let tree = trees.get(t as usize).ok_or(StoreError::UnknownTree(t))?;
            match v {
                Some(v) => tree.insert(k, v),
                None => tree.remove(k),
            }?;
        }
        records += 1;
    }
    db.flush()?;
    journal::retire(dir, last).map_err(jerr)?;
    info!(segments = segs.len(), records, torn_tails = torn, "metadata journal replayed");
    Ok(last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Journal;
    use crate::store::tests::{copy_dir, journaled};
    use crate::store::{xattr_key, Store, COMMIT_INTERVAL, T};
    use tessera_proto::config::MetadataCommit;

    #[test]
    fn journal_replays_acknowledged_changes_the_database_lacks() {
        let live = tempfile::tempdir().unwrap();
        let s = journaled(live.path());
        let mut tx = s.begin();
        tx.put(T::Meta, b"kept", b"1".to_vec());
        tx.put(T::Meta, b"gone", b"2".to_vec());
        tx.commit().unwrap();
        let mut tx = s.begin();
        tx.del(T::Meta, b"gone");
        tx.put(T::Xattrs, &xattr_key(9, "user.x"), b"v".to_vec());
        tx.commit().unwrap();
        // A database that never saw those commits (as if the MDS died before its fsync) plus the journal.
        let crashed = tempfile::tempdir().unwrap();
        copy_dir(&live.path().join("journal"), &crashed.path().join("journal"));
        {
            let r = Store::open(crashed.path(), MetadataCommit::Journal).unwrap();
            assert_eq!(r.tree(T::Meta).get(b"kept").unwrap().unwrap().as_ref(), b"1");
            assert!(r.tree(T::Meta).get(b"gone").unwrap().is_none());
            assert_eq!(r.tree(T::Xattrs).len(), 1);
            assert!(journal::segments(&crashed.path().join("journal"))
                .unwrap()
                .iter()
                .all(|(_, p)| { std::fs::metadata(p).unwrap().len() == 0 }));
        }
        // Replaying again over a database that has everything changes nothing.
        copy_dir(&live.path().join("journal"), &crashed.path().join("journal"));
        let r = Store::open(crashed.path(), MetadataCommit::Fsync).unwrap();
        assert_eq!(r.tree(T::Meta).get(b"kept").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"gone").unwrap().is_none());
        drop(s);
    }

    /// Only the last segment may end torn (the write(2) a crash interrupted); a cut in an earlier one is
    /// corruption, and replaying the segments after it would apply changes past a hole.
    #[test]
    fn a_cut_before_the_last_segment_refuses_start_up() {
        let live = tempfile::tempdir().unwrap();
        let jdir = live.path().join("journal");
        let mut j = Journal::create(&jdir, 1).unwrap();
        j.append(vec![(T::Meta as u8, b"one".to_vec(), Some(b"1".to_vec()))]).unwrap();
        j.append(vec![(T::Meta as u8, b"two".to_vec(), Some(b"2".to_vec()))]).unwrap();
        j.rotate().unwrap();
        j.append(vec![(T::Meta as u8, b"three".to_vec(), Some(b"3".to_vec()))]).unwrap();
        drop(j);
        let segs = journal::segments(&jdir).unwrap();
        let first = &segs[0].1;
        let mut bytes = std::fs::read(first).unwrap();
        let second_at = bytes.len() / 2;
        let n = bytes.len();
        bytes[n - 1] ^= 0xff; // the second record's payload: its CRC fails
        std::fs::write(first, &bytes).unwrap();
        let crashed = tempfile::tempdir().unwrap();
        copy_dir(&jdir, &crashed.path().join("journal"));
        let e = tessera_proto::FsError::from(
            Store::open(crashed.path(), MetadataCommit::Journal).err().expect("start-up must refuse"),
        );
        let name = first.file_name().unwrap().to_str().unwrap();
        assert!(e.detail.contains(name), "names the segment: {}", e.detail);
        assert!(e.detail.contains(&format!("offset {second_at}")), "names the offset: {}", e.detail);
        // Nothing was applied or deleted: the operator can still decide.
        assert_eq!(journal::segments(&crashed.path().join("journal")).unwrap().len(), 2);
        // The operator's explicit choice: the intact records of both segments are replayed.
        let r = Store::open_with(crashed.path(), MetadataCommit::Fsync, COMMIT_INTERVAL, JournalRecovery::SkipCorrupt)
            .unwrap();
        assert_eq!(r.tree(T::Meta).get(b"one").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"two").unwrap().is_none(), "the corrupt record is dropped");
        assert_eq!(r.tree(T::Meta).get(b"three").unwrap().unwrap().as_ref(), b"3");
    }

    /// A torn tail of the newest segment is what a crash leaves: start-up cuts it and goes on.
    #[test]
    fn a_torn_tail_of_the_newest_segment_is_cut() {
        let live = tempfile::tempdir().unwrap();
        let jdir = live.path().join("journal");
        let mut j = Journal::create(&jdir, 1).unwrap();
        j.append(vec![(T::Meta as u8, b"one".to_vec(), Some(b"1".to_vec()))]).unwrap();
        j.append(vec![(T::Meta as u8, b"two".to_vec(), Some(b"2".to_vec()))]).unwrap();
        drop(j);
        let path = journal::segments(&jdir).unwrap()[0].1.clone();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let r = Store::open(live.path(), MetadataCommit::Fsync).unwrap();
        assert_eq!(r.tree(T::Meta).get(b"one").unwrap().unwrap().as_ref(), b"1");
        assert!(r.tree(T::Meta).get(b"two").unwrap().is_none());
    }
}
