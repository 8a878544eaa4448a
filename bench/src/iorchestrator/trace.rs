//! The data servers' `lba-trace.csv` (`time_us,job,address,len,op,client,pid`, one line per request
//! served; traces written before the client columns existed have 0 there):
//! reading the part appended during one configuration, and the reuse distances of a program.

use anyhow::{Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One request a data server served.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    pub time_us: u64,
    pub job: String,
    pub address: u64,
    pub len: u64,
    pub op: String,
    /// The originating client id (kept by forwarding nodes).
    pub client: u64,
    pub pid: u32,
}

/// One CSV record of the trace; a header or malformed record is None.
fn parse_record(r: &csv::StringRecord) -> Option<TraceRecord> {
    let mut f = r.iter().map(str::trim);
    let time_us = f.next()?.parse().ok()?;
    let job = f.next()?.to_string();
    let address = f.next()?.parse().ok()?;
    let len = f.next()?.parse().ok()?;
    let op = f.next().unwrap_or("").to_string();
    let client = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    let pid = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    Some(TraceRecord { time_us, job, address, len, op, client, pid })
}

/// The records of CSV `text` (the data servers quote a job id holding a comma or a quote); headers,
/// partial and malformed lines are left out.
pub fn parse(text: &str) -> Vec<TraceRecord> {
    let mut r = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
    r.records().filter_map(|r| r.ok()).filter_map(|r| parse_record(&r)).collect()
}

/// Microseconds since the Unix epoch (the time base of the servers' traces).
pub use tessera_proto::types::unix_us;

/// Current length of a trace file (0 if it does not exist yet).
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The records appended to `path` at or after byte `from` (a partial first line is skipped).
pub fn read_from(path: &Path, from: u64) -> Result<Vec<TraceRecord>> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    f.seek(SeekFrom::Start(from)).with_context(|| format!("seeking in {}", path.display()))?;
    let mut text = String::new();
    f.read_to_string(&mut text).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse(&text))
}

/// How long after a run's end the servers have written its requests out: they flush after a second
/// without requests (`ds/src/trace.rs`), plus a margin.
const FLUSH_AFTER_US: u64 = 1_600_000;

/// Where the data servers' traces stood when a run started: what they append after it, stamped up to the
/// run's end, is the run's.
pub struct Mark {
    lens: Vec<u64>,
    t_start: u64,
}

impl Mark {
    /// Marks the traces at `paths` (one per data server) now.
    pub fn now(paths: &[PathBuf]) -> Mark {
        Mark { lens: paths.iter().map(|p| file_len(p)).collect(), t_start: unix_us() }
    }

    /// Each server's requests of the run that ended at `t_end` (µs since the epoch), in time order. Waits
    /// until the servers have written them out.
    pub async fn records(&self, paths: &[PathBuf], t_end: u64) -> Result<Vec<Vec<TraceRecord>>> {
        let wait = (t_end + FLUSH_AFTER_US).saturating_sub(unix_us());
        tokio::time::sleep(Duration::from_micros(wait)).await;
        paths
            .iter()
            .zip(&self.lens)
            .map(|(p, &from)| {
                let mut recs = read_from(p, from)?;
                recs.retain(|r| r.time_us >= self.t_start && r.time_us <= t_end);
                recs.sort_by_key(|r| r.time_us);
                Ok(recs)
            })
            .collect()
    }
}

/// Times between consecutive requests of `job`, milliseconds (the paper's Fig. 4).
pub fn reuse_distances_ms(records: &[TraceRecord], job: &str) -> Vec<f64> {
    let mut times: Vec<u64> = records.iter().filter(|r| r.job == job).map(|r| r.time_us).collect();
    times.sort_unstable();
    times.windows(2).map(|w| (w[1] - w[0]) as f64 / 1000.0).collect()
}

/// Counts of `values` in the bins `[edges[i], edges[i+1])`; the last bin also takes everything above.
pub fn histogram(values: &[f64], edges: &[f64]) -> Vec<u64> {
    let bins = edges.len().saturating_sub(1);
    let mut out = vec![0u64; bins];
    if bins == 0 {
        return out;
    }
    for &v in values {
        if v < edges[0] {
            continue;
        }
        let i = edges.windows(2).position(|w| v >= w[0] && v < w[1]).unwrap_or(bins - 1);
        out[i] += 1;
    }
    out
}

/// How one data server's served stream looks: requests, address gaps between consecutive requests
/// (|address − end of the previous one|), and how often consecutive requests came from different sources.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StreamShape {
    pub requests: usize,
    pub mean_gap_kib: f64,
    pub median_gap_kib: f64,
    /// Share of consecutive requests that are exactly contiguous (gap 0).
    pub contiguous_fraction: f64,
    /// Share of consecutive requests whose sources (`source_of(client)`) differ.
    pub source_switch_fraction: f64,
}

/// The [`StreamShape`] of `recs`, in service order (sorted by time, as [`Mark::records`] gives them).
pub fn stream_shape(recs: &[TraceRecord], source_of: impl Fn(u64) -> usize) -> StreamShape {
    let pairs = recs.len().saturating_sub(1).max(1) as f64;
    let mut gaps: Vec<f64> =
        recs.windows(2).map(|w| w[1].address.abs_diff(w[0].address.saturating_add(w[0].len)) as f64 / 1024.0).collect();
    let switches = recs.windows(2).filter(|w| source_of(w[0].client) != source_of(w[1].client)).count();
    let contiguous = gaps.iter().filter(|g| **g == 0.0).count();
    let mean_gap_kib = if gaps.is_empty() { 0.0 } else { gaps.iter().sum::<f64>() / gaps.len() as f64 };
    gaps.sort_by(f64::total_cmp);
    StreamShape {
        requests: recs.len(),
        mean_gap_kib,
        median_gap_kib: gaps.get(gaps.len() / 2).copied().unwrap_or(0.0),
        contiguous_fraction: contiguous as f64 / pairs,
        source_switch_fraction: switches as f64 / pairs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_computes_reuse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lba-trace.csv");
        std::fs::write(
            &p,
            "time_us,job,address,len,op\n1000,a,0,65536,read\n1500,b,9,1,read\n3000,a,65536,65536,read,42,7\n\
             3500,\"x,\"\"y\"\"\",0,1,write,1,2\n",
        )
        .unwrap();
        let all = read_from(&p, 0).unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!((all[3].job.as_str(), all[3].op.as_str()), ("x,\"y\"", "write"), "a quoted job id");
        let all = all[..3].to_vec();
        let b =
            TraceRecord { time_us: 1500, job: "b".into(), address: 9, len: 1, op: "read".into(), client: 0, pid: 0 };
        assert_eq!(all[1], b);
        assert_eq!((all[2].client, all[2].pid), (42, 7));
        assert_eq!(reuse_distances_ms(&all, "a"), vec![2.0]);
        let len = file_len(&p);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .and_then(|mut f| {
                use std::io::Write;
                f.write_all(b"4000,a,0,1,write\n")
            })
            .unwrap();
        assert_eq!(read_from(&p, len).unwrap().len(), 1);
        assert!(read_from(&dir.path().join("none"), 0).unwrap().is_empty());
        assert_eq!(histogram(&[0.5, 1.0, 7.0, 100.0], &[0.0, 1.0, 5.0, 10.0]), vec![1, 1, 2]);
    }

    #[test]
    fn stream_shape_measures_gaps_and_source_switches() {
        let r = |t, address, client| TraceRecord {
            time_us: t,
            job: "a".into(),
            address,
            len: 10,
            op: "read".into(),
            client,
            pid: 1,
        };
        // Served in time order: 0..10 (c1), 10..20 (c1, contiguous), 50..60 (c2, gap 30), 0..10 (c2, back 60).
        let recs = vec![r(0, 0, 1), r(1, 10, 1), r(3, 50, 2), r(4, 0, 2)];
        let s = stream_shape(&recs, |c| c as usize);
        assert_eq!(s.requests, 4);
        assert!((s.mean_gap_kib - 90.0 / 3.0 / 1024.0).abs() < 1e-12, "{s:?}");
        assert!((s.median_gap_kib - 30.0 / 1024.0).abs() < 1e-12);
        assert!((s.contiguous_fraction - 1.0 / 3.0).abs() < 1e-12);
        assert!((s.source_switch_fraction - 1.0 / 3.0).abs() < 1e-12);
        // Every client its own source but all one group: no switches.
        assert_eq!(stream_shape(&recs, |_| 0).source_switch_fraction, 0.0);
        assert_eq!(stream_shape(&[], |_| 0).requests, 0);
    }
}
