//! The data servers' `lba-trace.csv` (`time_us,job,address,len,op`, one line per request served):
//! reading the part appended during one configuration, and the reuse distances of a program.

use anyhow::{Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// One request a data server served.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRecord {
    pub time_us: u64,
    pub job: String,
    pub address: u64,
    pub len: u64,
    pub op: String,
}

/// Parses one line; a header or malformed line is None.
pub fn parse_line(line: &str) -> Option<TraceRecord> {
    let mut f = line.trim().split(',');
    let time_us = f.next()?.trim().parse().ok()?;
    let job = f.next()?.trim().to_string();
    let address = f.next()?.trim().parse().ok()?;
    let len = f.next()?.trim().parse().ok()?;
    let op = f.next().unwrap_or("").trim().to_string();
    Some(TraceRecord { time_us, job, address, len, op })
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
    Ok(text.lines().filter_map(parse_line).collect())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_computes_reuse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lba-trace.csv");
        std::fs::write(
            &p,
            "time_us,job,address,len,op\n1000,a,0,65536,read\n1500,b,9,1,read\n3000,a,65536,65536,read\n",
        )
        .unwrap();
        let all = read_from(&p, 0).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1], TraceRecord { time_us: 1500, job: "b".into(), address: 9, len: 1, op: "read".into() });
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
}
