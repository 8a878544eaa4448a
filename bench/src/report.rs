//! IOR/mdtest-style text output, summary statistics and JSON result files.

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;

const MIB: f64 = (1u64 << 20) as f64;

/// Max/min/mean/population standard deviation of a series (all zero when empty), as IOR reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    pub max: f64,
    pub min: f64,
    pub mean: f64,
    pub stddev: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Stats {
        if values.is_empty() {
            return Stats::default();
        }
        let n = values.len() as f64;
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        Stats { max, min, mean, stddev: var.sqrt() }
    }
}

/// Median (mean of the middle two for an even count); NaN for no values.
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Bytes per second expressed as MiB/s.
pub fn mib_per_sec(bytes: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    bytes as f64 / MIB / secs
}

/// MiB/s expressed as (decimal) MB/s.
pub fn mib_to_mb(mib: f64) -> f64 {
    mib * MIB / 1e6
}

/// Operations per second.
pub fn rate(ops: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        return 0.0;
    }
    ops as f64 / secs
}

/// One timed phase of one iteration, as IOR prints it in its results table.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseLine {
    /// `write` or `read`.
    pub access: &'static str,
    pub iteration: u32,
    pub bytes: u64,
    pub transfers: u64,
    pub block: u64,
    pub xfer: u64,
    /// Longest open, I/O and close (incl. fsync) time of any task.
    pub open_s: f64,
    pub io_s: f64,
    pub close_s: f64,
    /// From the start barrier to the end of the last task.
    pub total_s: f64,
}

impl PhaseLine {
    pub fn bw_mib(&self) -> f64 {
        mib_per_sec(self.bytes, self.total_s)
    }
    pub fn iops(&self) -> f64 {
        rate(self.transfers, self.total_s)
    }
}

pub fn results_header() -> String {
    let h = format!(
        "{:<10}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}{:>10}{:>10}  {}",
        "access", "bw(MiB/s)", "IOPS", "block(KiB)", "xfer(KiB)", "open(s)", "wr/rd(s)", "close(s)", "total(s)", "iter"
    );
    let u = format!(
        "{:<10}{:>12}{:>12}{:>12}{:>12}{:>10}{:>10}{:>10}{:>10}  {}",
        "------", "---------", "----", "----------", "---------", "-------", "--------", "--------", "--------", "----"
    );
    format!("{h}\n{u}")
}

pub fn format_phase(l: &PhaseLine) -> String {
    format!(
        "{:<10}{:>12.2}{:>12.2}{:>12}{:>12.2}{:>10.4}{:>10.4}{:>10.4}{:>10.4}  {}",
        l.access,
        l.bw_mib(),
        l.iops(),
        l.block / 1024,
        l.xfer as f64 / 1024.0,
        l.open_s,
        l.io_s,
        l.close_s,
        l.total_s,
        l.iteration
    )
}

/// IOR's closing lines: `Max Write: X MiB/sec (Y MB/sec)` (and Read), then the `Summary of all tests:` table.
pub fn format_summary(lines: &[PhaseLine]) -> String {
    let mut out = String::new();
    for (access, label) in [("write", "Max Write: "), ("read", "Max Read:  ")] {
        let bws: Vec<f64> = lines.iter().filter(|l| l.access == access).map(PhaseLine::bw_mib).collect();
        if !bws.is_empty() {
            let max = Stats::of(&bws).max;
            out.push_str(&format!("{label}{max:.2} MiB/sec ({:.2} MB/sec)\n", mib_to_mb(max)));
        }
    }
    out.push_str("\nSummary of all tests:\n");
    out.push_str(&format!(
        "{:<10}{:>11}{:>11}{:>11}{:>11}{:>12}{:>12}{:>12}{:>11}{:>11}{:>7}\n",
        "Operation",
        "Max(MiB)",
        "Min(MiB)",
        "Mean(MiB)",
        "StdDev",
        "Max(OPs)",
        "Min(OPs)",
        "Mean(OPs)",
        "StdDev",
        "Mean(s)",
        "#Iter"
    ));
    for access in ["write", "read"] {
        let sel: Vec<&PhaseLine> = lines.iter().filter(|l| l.access == access).collect();
        if sel.is_empty() {
            continue;
        }
        let bw = Stats::of(&sel.iter().map(|l| l.bw_mib()).collect::<Vec<_>>());
        let ops = Stats::of(&sel.iter().map(|l| l.iops()).collect::<Vec<_>>());
        let secs = Stats::of(&sel.iter().map(|l| l.total_s).collect::<Vec<_>>());
        out.push_str(&format!(
            "{:<10}{:>11.2}{:>11.2}{:>11.2}{:>11.2}{:>12.2}{:>12.2}{:>12.2}{:>11.2}{:>11.5}{:>7}\n",
            access,
            bw.max,
            bw.min,
            bw.mean,
            bw.stddev,
            ops.max,
            ops.min,
            ops.mean,
            ops.stddev,
            secs.mean,
            sel.len()
        ));
    }
    out
}

/// The `--json` file of `tessera-bench ior`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct IorJson {
    pub api: String,
    pub write_mib_s: f64,
    pub read_mib_s: f64,
    pub write_mib_s_all: Vec<f64>,
    pub read_mib_s_all: Vec<f64>,
    pub tasks: usize,
    pub transfer_size: u64,
    pub block_size: u64,
    pub segments: u64,
    pub file_per_task: bool,
    pub fsync: bool,
    pub iterations: u32,
    pub total_bytes: u64,
}

/// The `--json` file of `tessera-bench mdtest`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct MdtestJson {
    pub api: String,
    pub create_ops_s: f64,
    pub stat_ops_s: f64,
    /// Open, read `-e` bytes, close.
    pub read_ops_s: f64,
    pub remove_ops_s: f64,
    pub files: u64,
    pub tasks: usize,
}

/// CSV text: `header`, then one line per row, fields quoted where they need it (the `csv` crate).
pub fn csv_text<R, F>(header: &[&str], rows: impl IntoIterator<Item = R>) -> Result<String>
where
    R: IntoIterator<Item = F>,
    F: AsRef<[u8]>,
{
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(header).context("writing CSV")?;
    for r in rows {
        w.write_record(r).context("writing CSV")?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("writing CSV: {}", e.error()))?;
    String::from_utf8(bytes).context("CSV is not UTF-8")
}

pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).context("encoding JSON results")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert!(median(&[]).is_nan());
    }

    fn line(access: &'static str, iteration: u32, total_s: f64) -> PhaseLine {
        PhaseLine {
            access,
            iteration,
            bytes: 1 << 30,
            transfers: 1024,
            block: 1 << 20,
            xfer: 1 << 20,
            open_s: 0.0,
            io_s: total_s,
            close_s: 0.0,
            total_s,
        }
    }

    #[test]
    fn stats_math() {
        let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.max, s.min, s.mean), (4.0, 1.0, 2.5));
        assert!((s.stddev - 1.118_033_988_7).abs() < 1e-9);
        assert_eq!(Stats::of(&[]), Stats::default());
        assert_eq!(Stats::of(&[5.0]).stddev, 0.0);
    }

    #[test]
    fn bandwidth_units() {
        assert_eq!(mib_per_sec(1 << 30, 2.0), 512.0);
        assert_eq!(mib_per_sec(1, 0.0), 0.0);
        assert!((mib_to_mb(1.0) - 1.048576).abs() < 1e-12);
        assert_eq!(rate(100, 4.0), 25.0);
    }

    #[test]
    fn summary_lines_have_ior_form() {
        let lines = vec![line("write", 0, 1.0), line("write", 1, 2.0), line("read", 0, 0.5)];
        let s = format_summary(&lines);
        assert!(s.contains("Max Write: 1024.00 MiB/sec (1073.74 MB/sec)\n"), "{s}");
        assert!(s.contains("Max Read:  2048.00 MiB/sec (2147.48 MB/sec)\n"), "{s}");
        assert!(s.contains("Summary of all tests:"));
        let w = s.lines().find(|l| l.starts_with("write ")).unwrap();
        assert!(w.contains("1024.00") && w.contains("512.00") && w.contains("768.00"), "{w}");
        let only_read = format_summary(&[line("read", 0, 1.0)]);
        assert!(!only_read.contains("Max Write"));
    }
}
