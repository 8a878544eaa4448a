//! Size parsing and formatting with IOR's binary suffixes (`4k`, `1m`, `16M`, `2g`).

use anyhow::{bail, Result};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// Parses `N[K|M|G|T][i][B]` (case-insensitive, binary multiples like IOR); a bare number is bytes.
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        bail!("invalid size {s:?}: expected a number with an optional K/M/G/T suffix");
    }
    let n: u64 = num.parse().map_err(|e| anyhow::anyhow!("invalid size {s:?}: {e}"))?;
    let mult = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "ki" | "kib" => KIB,
        "m" | "mb" | "mi" | "mib" => MIB,
        "g" | "gb" | "gi" | "gib" => GIB,
        "t" | "tb" | "ti" | "tib" => TIB,
        other => bail!("invalid size {s:?}: unknown suffix {other:?} (use K, M, G or T)"),
    };
    n.checked_mul(mult).ok_or_else(|| anyhow::anyhow!("size {s:?} overflows 64 bits"))
}

/// clap value parser for sizes.
pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Human-readable binary size, exact when possible (`1 MiB`, `1.50 GiB`, `4096 bytes`).
pub fn format_size(n: u64) -> String {
    for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if n >= unit {
            return if n % unit == 0 {
                format!("{} {name}", n / unit)
            } else {
                format!("{:.2} {name}", n as f64 / unit as f64)
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("8mb").unwrap(), 8 << 20);
        assert_eq!(parse_size(" 3K ").unwrap(), 3072);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("1x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1.5m").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000000g").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(100), "100 bytes");
    }
}
