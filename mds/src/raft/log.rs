//! The replicated metadata log's storage: openraft's `RaftLogStorage` on segment files in
//! `<data_dir>/raft/`, each record framed as the journal's (length, CRC-32, payload: `journal::frame`).
//!
//! - A record is an entry, a truncation (entries from an index on are gone: a follower's log conflicting
//!   with a new leader's) or a purge (entries up to a log id are gone: in a snapshot now). Replaying the
//!   segments in order rebuilds the log; the entries not purged are also kept in memory, where openraft
//!   reads them (they are bounded by its snapshot policy).
//! - An append is one `write(2)` (and an `fsync` in `fsync` commit mode) before openraft is told the
//!   entries are durable: as the journal, a killed process loses nothing it acknowledged.
//! - Segments roll over at [`SEGMENT_BYTES`]; a closed one is deleted once every entry in it is purged.
//! - Only the newest segment may end torn (an append a crash cut, never acknowledged): it is cut back to
//!   its last whole record at open. A record cut or corrupt in an older segment refuses the open.
//! - The vote is its own file, written to a temporary file, fsync'ed and renamed (a vote must survive a
//!   power loss: a replica must not vote twice in a term). The committed log id (openraft treats it as
//!   a hint) is overwritten in place in its file, a length-prefixed record, without fsync: a rename per
//!   commit cost the leader 13% of its CPU (ext4 writes a replaced file's data back at the rename); one
//!   that does not read back is no hint.

use super::{MdsRaft, NodeId};
use crate::journal::{frame, read_frames, MAX_RECORD};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// A segment is closed once it holds this much.
pub const SEGMENT_BYTES: u64 = 64 << 20;

type SErr = StorageError<NodeId>;

#[derive(Serialize, Deserialize)]
enum Rec {
    Entry(Entry<MdsRaft>),
    /// Entries from this index on are gone.
    Truncate(u64),
    /// Entries up to this log id are gone (in a snapshot).
    Purge(LogId<NodeId>),
}

/// The log's storage; clones share it (openraft's log reader is one).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    dir: PathBuf,
    sync: bool,
    file: File,
    seg: u64,
    seg_len: u64,
    /// The highest entry index in the current segment (0: none).
    seg_max: u64,
    /// Closed segments and the highest entry index each holds.
    closed: Vec<(u64, u64)>,
    entries: BTreeMap<u64, Entry<MdsRaft>>,
    purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    /// The file the committed log id is overwritten in.
    committed_file: File,
}

fn segment_path(dir: &Path, seg: u64) -> PathBuf {
    dir.join(format!("log-{seg:016}.seg"))
}

fn segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let Some(n) = name.to_str().and_then(|n| n.strip_prefix("log-")).and_then(|n| n.strip_suffix(".seg")) else {
            continue;
        };
        if let Ok(seg) = n.parse() {
            out.push(seg);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Writes `bytes` to `dir/name` through a temporary file renamed over it (fsync'ed first if `sync`).
fn replace_file(dir: &Path, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    if sync {
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(name))?;
    if sync {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn read_small<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> io::Result<Option<T>> {
    match fs::read(dir.join(name)) {
        Ok(b) => tessera_proto::wire::decode(&b).map(Some).map_err(io::Error::other),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The file of the committed log id (see the module doc).
const COMMITTED: &str = "committed";

/// The committed log id kept in `dir`, if it reads back (it is a hint: anything else is none).
fn read_committed(dir: &Path) -> Option<LogId<NodeId>> {
    let b = fs::read(dir.join(COMMITTED)).ok()?;
    let len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    tessera_proto::wire::decode::<Option<LogId<NodeId>>>(b.get(4..4usize.checked_add(len)?)?).ok().flatten()
}

fn encode<T: Serialize>(v: &T) -> io::Result<Vec<u8>> {
    tessera_proto::wire::encode(v).map_err(io::Error::other)
}

impl Inner {
    fn apply(&mut self, rec: Rec) {
        match rec {
            Rec::Entry(e) => {
                if self.purged.is_none_or(|p| e.log_id.index > p.index) {
                    self.entries.insert(e.log_id.index, e);
                }
            }
            Rec::Truncate(i) => drop(self.entries.split_off(&i)),
            Rec::Purge(l) => {
                if self.purged.is_none_or(|p| l.index > p.index) {
                    self.purged = Some(l);
                }
                self.entries = self.entries.split_off(&(l.index + 1));
            }
        }
    }

    /// Appends records with one write(2) (and an fsync in sync mode), rolling the segment over after.
    fn write(&mut self, recs: &[Rec]) -> io::Result<()> {
        let mut buf = Vec::new();
        for r in recs {
            buf.extend_from_slice(&frame(&encode(r)?)?);
            if let Rec::Entry(e) = r {
                self.seg_max = self.seg_max.max(e.log_id.index);
            }
        }
        self.file.write_all(&buf)?;
        if self.sync {
            self.file.sync_data()?;
        }
        self.seg_len += buf.len() as u64;
        if self.seg_len >= SEGMENT_BYTES {
            let file = OpenOptions::new().create(true).append(true).open(segment_path(&self.dir, self.seg + 1))?;
            self.closed.push((self.seg, self.seg_max));
            (self.file, self.seg, self.seg_len, self.seg_max) = (file, self.seg + 1, 0, 0);
        }
        Ok(())
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`. `sync`: fsync every append (`fsync` commit mode).
    pub fn open(dir: &Path, sync: bool) -> io::Result<LogStore> {
        fs::create_dir_all(dir)?;
        let segs = segments(dir)?;
        let mut closed = Vec::new();
        let mut recs = Vec::new();
        for (n, &seg) in segs.iter().enumerate() {
            let path = segment_path(dir, seg);
            let bytes = fs::read(&path)?;
            let (frames, cut) = read_frames(&bytes);
            let mut max = 0;
            for (at, payload) in frames {
                let rec: Rec = tessera_proto::wire::decode_bounded::<Rec, MAX_RECORD>(payload)
                    .map_err(|e| io::Error::other(format!("{}: record at byte {at}: {}", path.display(), e)))?;
                if let Rec::Entry(e) = &rec {
                    max = max.max(e.log_id.index);
                }
                recs.push(rec);
            }
            if let Some(cut) = cut {
                if n + 1 < segs.len() {
                    return Err(io::Error::other(format!(
                        "{}: {} at byte {}, in a segment older than the newest",
                        path.display(),
                        cut.why,
                        cut.offset
                    )));
                }
                // A torn tail: never acknowledged. Cut it off so the next appends follow whole records.
                tracing::warn!(segment = %path.display(), offset = cut.offset, "raft log: cutting a torn tail ({})", cut.why);
                OpenOptions::new().write(true).open(&path)?.set_len(cut.offset)?;
            }
            closed.push((seg, max));
        }
        let seg = segs.last().map_or(1, |s| s + 1);
        let file = OpenOptions::new().create(true).append(true).open(segment_path(dir, seg))?;
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            sync,
            file,
            seg,
            seg_len: 0,
            seg_max: 0,
            closed,
            entries: BTreeMap::new(),
            purged: None,
            vote: read_small(dir, "vote")?,
            committed: read_committed(dir),
            committed_file: OpenOptions::new().create(true).write(true).truncate(false).open(dir.join(COMMITTED))?,
        };
        for r in recs {
            inner.apply(r);
        }
        Ok(LogStore { inner: Arc::new(Mutex::new(inner)) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `entries` (durable as the mode says when this returns) and makes them readable.
    pub fn append_entries(&self, entries: impl IntoIterator<Item = Entry<MdsRaft>>) -> io::Result<()> {
        let recs: Vec<Rec> = entries.into_iter().map(Rec::Entry).collect();
        let mut s = self.lock();
        s.write(&recs)?;
        for r in recs {
            s.apply(r);
        }
        Ok(())
    }

    /// How many segment files the log has (the current one included).
    pub fn segment_count(&self) -> usize {
        self.lock().closed.len() + 1
    }
}

impl RaftLogReader<MdsRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<MdsRaft>>, SErr> {
        Ok(self.lock().entries.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<MdsRaft> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<MdsRaft>, SErr> {
        let s = self.lock();
        let last = s.entries.values().next_back().map(|e| e.log_id).or(s.purged);
        Ok(LogState { last_purged_log_id: s.purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), SErr> {
        let mut s = self.lock();
        let bytes = encode(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        replace_file(&s.dir, "vote", &bytes, true).map_err(|e| StorageIOError::write_vote(&e))?;
        s.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, SErr> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), SErr> {
        let mut s = self.lock();
        let bytes = encode(&committed).map_err(|e| StorageIOError::write(&e))?;
        let record = [&(bytes.len() as u32).to_le_bytes()[..], &bytes].concat();
        std::os::unix::fs::FileExt::write_all_at(&s.committed_file, &record, 0)
            .map_err(|e| StorageIOError::write(&e))?;
        s.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, SErr> {
        Ok(self.lock().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<MdsRaft>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<MdsRaft>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        if let Err(e) = self.append_entries(entries) {
            callback.log_io_completed(Err(io::Error::new(e.kind(), e.to_string())));
            return Err(StorageIOError::write_logs(&e).into());
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        let mut s = self.lock();
        s.write(&[Rec::Truncate(log_id.index)]).map_err(|e| StorageIOError::write_logs(&e))?;
        s.apply(Rec::Truncate(log_id.index));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), SErr> {
        let mut s = self.lock();
        s.write(&[Rec::Purge(log_id)]).map_err(|e| StorageIOError::write_logs(&e))?;
        s.apply(Rec::Purge(log_id));
        // Closed segments whose every entry is purged go (the purge record itself is in a newer one).
        let (gone, kept): (Vec<_>, Vec<_>) = s.closed.iter().partition(|(_, max)| *max <= log_id.index);
        for (seg, _) in &gone {
            if let Err(e) = fs::remove_file(segment_path(&s.dir, *seg)) {
                tracing::warn!("raft log: cannot delete purged segment {seg}: {e}");
            }
        }
        s.closed = kept;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::EntryPayload;

    // openraft's storage suite runs against this log with the real state machine: raft::state's tests.

    fn entry(term: u64, index: u64, n: u8) -> Entry<MdsRaft> {
        let cmd = crate::raft::LogCmd { stream: 1, seq: index, writes: vec![(7, vec![n], Some(vec![n; 3]))] };
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    async fn append(log: &mut LogStore, entries: Vec<Entry<MdsRaft>>) {
        log.append_entries(entries).unwrap();
    }

    /// What a reopened log holds is what was appended, truncated and purged before, across segments;
    /// a torn tail of the newest segment is cut; a corrupt record in an older segment refuses the open.
    #[test]
    fn the_log_survives_a_reopen_and_refuses_older_corruption() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("raft");
        block_on(async {
            let mut log = LogStore::open(&dir, false).unwrap();
            append(&mut log, (1..=10).map(|i| entry(1, i, i as u8)).collect()).await;
            log.truncate(LogId::new(openraft::CommittedLeaderId::new(1, 1), 8)).await.unwrap();
            append(&mut log, (8..=12).map(|i| entry(2, i, 100 + i as u8)).collect()).await;
            log.purge(LogId::new(openraft::CommittedLeaderId::new(1, 1), 3)).await.unwrap();
            log.save_vote(&Vote::new(2, 1)).await.unwrap();
        });
        let mut again = LogStore::open(&dir, false).unwrap();
        block_on(async {
            let state = again.get_log_state().await.unwrap();
            assert_eq!(state.last_purged_log_id.map(|l| l.index), Some(3));
            assert_eq!(state.last_log_id.map(|l| (l.leader_id.term, l.index)), Some((2, 12)));
            let got = again.try_get_log_entries(0..100).await.unwrap();
            let want: Vec<_> =
                (4..=7).map(|i| entry(1, i, i as u8)).chain((8..=12).map(|i| entry(2, i, 100 + i as u8))).collect();
            assert_eq!(got, want);
            assert_eq!(again.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
        });
        drop(again);
        // A torn tail in the newest segment (a write a kill cut short): cut back to the whole records.
        let newest = *segments(&dir).unwrap().last().unwrap();
        let path = segment_path(&dir, newest);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[9, 0, 0]).unwrap();
        drop(f);
        let mut log = LogStore::open(&dir, false).unwrap();
        block_on(async {
            assert_eq!(log.try_get_log_entries(0..100).await.unwrap().len(), 9);
            append(&mut log, vec![entry(2, 13, 13)]).await;
        });
        drop(log);
        assert_eq!(
            block_on(async { LogStore::open(&dir, false).unwrap().try_get_log_entries(13..).await.unwrap().len() }),
            1
        );
        // A flipped byte in a segment that is not the newest: refused, naming it.
        let first = segments(&dir).unwrap()[0];
        let path = segment_path(&dir, first);
        let mut bytes = fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        fs::write(&path, bytes).unwrap();
        let e = LogStore::open(&dir, false).err().expect("a corrupt older segment must refuse the open");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
}
