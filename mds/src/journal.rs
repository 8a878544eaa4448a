//! The MDS redo journal. Every committed write set is appended with one write(2) before the change
//! is acknowledged: a crash or kill of the MDS process then loses nothing (the kernel already holds
//! the bytes). The periodic database commit (sled flush + fsync) makes the changes power-safe and
//! retires whole journal segments; at start-up the segments left behind are replayed in order.
//!
//! Records are physical (tree, key, new value or deletion), so replaying a record the database
//! already holds is harmless: replaying a suffix of history in order always ends in the same state.

use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// One committed change: (tree number, key, new value or `None` for a deletion), in order.
pub type WriteSet = Vec<(u8, Vec<u8>, Option<Vec<u8>>)>;

#[derive(Serialize, Deserialize)]
struct Record(WriteSet);

const SEGMENT_PREFIX: &str = "journal-";
const SEGMENT_SUFFIX: &str = ".log";
/// Length (u32 LE) + CRC-32 of the payload (u32 LE).
const HEADER: usize = 8;
/// Far above any real write set (a rename touches a handful of keys); guards replay against garbage.
pub const MAX_RECORD: usize = 64 << 20;

pub struct Journal {
    dir: PathBuf,
    seg: u64,
    file: File,
    /// Bytes in the current segment.
    len: u64,
}

fn segment_path(dir: &Path, seg: u64) -> PathBuf {
    dir.join(format!("{SEGMENT_PREFIX}{seg:016}{SEGMENT_SUFFIX}"))
}

/// The segments in `dir`, oldest first.
pub fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = name.strip_prefix(SEGMENT_PREFIX).and_then(|r| r.strip_suffix(SEGMENT_SUFFIX)) {
            if let Ok(seg) = n.parse::<u64>() {
                out.push((seg, e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// What one segment holds: its intact records, in order, and where reading stopped if it did not reach
/// the end.
#[derive(Debug, PartialEq, Eq)]
pub struct Segment {
    pub records: Vec<WriteSet>,
    pub cut: Option<Cut>,
}

/// Where and why a segment's records end before its last byte: a torn write(2) at the tail of the
/// newest segment (a crash; never acknowledged), or corruption anywhere else.
#[derive(Debug, PartialEq, Eq)]
pub struct Cut {
    /// Byte offset of the first record not read.
    pub offset: u64,
    pub why: String,
}

/// Reads one segment's records up to its end or the first record that is not intact.
pub fn read_segment(path: &Path) -> io::Result<Segment> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let (frames, mut cut) = read_frames(&bytes);
    let mut records = Vec::new();
    for (at, payload) in frames {
        // The journal's own bound: a record may be far larger than a frame header.
        match tessera_proto::wire::decode_bounded::<Record, MAX_RECORD>(payload) {
            Ok(Record(ws)) => records.push(ws),
            Err(e) => {
                let why = format!("record of {} bytes: {}", payload.len(), tessera_proto::error::chain(&e));
                cut = Some(Cut { offset: at as u64, why });
                break;
            }
        }
    }
    Ok(Segment { records, cut })
}

/// One record as written to a segment: length (u32 LE), CRC-32 of the payload (u32 LE), payload. Also
/// the replicated log's framing (`crate::raft::log`).
pub fn frame(payload: &[u8]) -> io::Result<Vec<u8>> {
    if payload.len() > MAX_RECORD {
        return Err(io::Error::other(format!("journal record of {} bytes", payload.len())));
    }
    let mut buf = Vec::with_capacity(HEADER + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    buf.extend_from_slice(payload);
    Ok(buf)
}

/// The intact records' payloads of a segment's bytes (with their offsets), in order, and where reading
/// stopped if it did not reach the end (a torn or corrupt record: nothing after it is trusted).
pub fn read_frames(bytes: &[u8]) -> (Vec<(usize, &[u8])>, Option<Cut>) {
    let mut out = Vec::new();
    let mut at = 0;
    let cut = |at: usize, why: String| Some(Cut { offset: at as u64, why });
    while at < bytes.len() {
        let Some(h) = bytes.get(at..at + HEADER) else {
            return (out, cut(at, format!("{} bytes of a record header", bytes.len() - at)));
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if len > MAX_RECORD {
            return (out, cut(at, format!("record length {len} over the limit of {MAX_RECORD}")));
        }
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            let have = bytes.len() - at - HEADER;
            return (out, cut(at, format!("record of {len} bytes, {have} in the file")));
        };
        if crc32fast::hash(payload) != crc {
            return (out, cut(at, format!("record of {len} bytes fails its CRC")));
        }
        out.push((at, payload));
        at += HEADER + len;
    }
    (out, None)
}

/// Deletes every segment numbered `upto` or lower (their changes are in the durable database).
pub fn retire(dir: &Path, upto: u64) -> io::Result<()> {
    for (seg, path) in segments(dir)? {
        if seg <= upto {
            fs::remove_file(path)?;
        }
    }
    Ok(())
}

impl Journal {
    /// Starts a new, empty segment numbered `seg` in `dir`.
    pub fn create(dir: &Path, seg: u64) -> io::Result<Journal> {
        fs::create_dir_all(dir)?;
        let file = OpenOptions::new().create(true).append(true).open(segment_path(dir, seg))?;
        Ok(Journal { dir: dir.to_path_buf(), seg, file, len: 0 })
    }

    /// Appends one write set with a single write(2).
    pub fn append(&mut self, ws: WriteSet) -> io::Result<()> {
        let payload = tessera_proto::wire::encode(&Record(ws)).map_err(io::Error::other)?;
        let buf = frame(&payload)?;
        self.file.write_all(&buf)?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Switches to a new segment if the current one holds records, returning the number of the
    /// last full one: it (and everything older) may be deleted once a database flush that started
    /// after this call has finished. `None`: nothing was journaled since the last rotation.
    pub fn rotate(&mut self) -> io::Result<Option<u64>> {
        if self.len == 0 {
            return Ok(None);
        }
        let next = Journal::create(&self.dir, self.seg + 1)?;
        let old = std::mem::replace(self, next);
        Ok(Some(old.seg))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(k: &str, v: Option<&str>) -> WriteSet {
        vec![(1, k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))]
    }

    #[test]
    fn records_round_trip_rotate_and_retire() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(dir.path(), 1).unwrap();
        assert_eq!(j.rotate().unwrap(), None, "an empty segment is not rotated");
        j.append(ws("a", Some("1"))).unwrap();
        j.append(ws("a", None)).unwrap();
        assert_eq!(j.rotate().unwrap(), Some(1));
        j.append(ws("b", Some("2"))).unwrap();
        let segs = segments(dir.path()).unwrap();
        assert_eq!(segs.iter().map(|s| s.0).collect::<Vec<_>>(), [1, 2]);
        let whole = |records| Segment { records, cut: None };
        assert_eq!(read_segment(&segs[0].1).unwrap(), whole(vec![ws("a", Some("1")), ws("a", None)]));
        assert_eq!(read_segment(&segs[1].1).unwrap(), whole(vec![ws("b", Some("2"))]));
        retire(dir.path(), 1).unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 1);
    }

    /// A large create batch on a wide cluster journals a record over the 1 MiB header limit of the wire
    /// format: it must read back whole, not as a torn tail that drops an acknowledged change.
    #[test]
    fn a_record_over_a_mebibyte_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(dir.path(), 1).unwrap();
        let big: WriteSet = (0..3000u32).map(|n| (1, n.to_be_bytes().to_vec(), Some(vec![7u8; 1000]))).collect();
        j.append(big.clone()).unwrap();
        j.append(ws("after", Some("1"))).unwrap();
        let path = segments(dir.path()).unwrap()[0].1.clone();
        assert!(fs::metadata(&path).unwrap().len() > 2 << 20);
        let seg = read_segment(&path).unwrap();
        assert_eq!(seg.cut, None, "nothing is torn");
        assert_eq!(seg.records, vec![big, ws("after", Some("1"))]);
    }

    #[test]
    fn torn_or_corrupt_tail_is_cut_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::create(dir.path(), 7).unwrap();
        j.append(ws("x", Some("1"))).unwrap();
        j.append(ws("y", Some("2"))).unwrap();
        let path = segments(dir.path()).unwrap()[0].1.clone();
        let full = fs::read(&path).unwrap();
        let second = (full.len() / 2) as u64;
        // Cut inside the second record: the first survives.
        fs::write(&path, &full[..full.len() - 3]).unwrap();
        let seg = read_segment(&path).unwrap();
        assert_eq!(seg.records, vec![ws("x", Some("1"))]);
        assert_eq!(seg.cut.map(|c| c.offset), Some(second));
        // A flipped byte in the second record's payload fails its CRC.
        let mut bad = full.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        fs::write(&path, &bad).unwrap();
        let seg = read_segment(&path).unwrap();
        assert_eq!(seg.records, vec![ws("x", Some("1"))]);
        let cut = seg.cut.unwrap();
        assert_eq!(cut.offset, second);
        assert!(cut.why.contains("CRC"), "{}", cut.why);
        // An absurd length is not trusted.
        let mut huge = full[..full.len()].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        fs::write(&path, &huge).unwrap();
        let seg = read_segment(&path).unwrap();
        assert_eq!(seg.records.len(), 2);
        assert_eq!(seg.cut.map(|c| c.offset), Some(full.len() as u64));
    }
}
