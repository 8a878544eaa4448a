//! Sizes as people write them (`4096`, `64K`, `1m`, `8MiB`, `2GB`): the one parser of command lines,
//! the `tessera.layout` attribute and the benchmarks, and the binary formatter of the benchmarks.

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// `parse-size` with the conventional units (KB, MB, ...) in powers of 1024.
const BINARY: parse_size::Config = parse_size::Config::new().with_binary();

/// Parses a size in bytes: a whole number with an optional K, M, G or T suffix in powers of 1024
/// (like IOR and Lustre's `setstripe -S 1M`), in any case and spelled `K`, `Ki`, `KiB` or `KB`; `B` or
/// no suffix is bytes. Blanks around the number and before the suffix are allowed. Fractions, signs,
/// exponents, larger units and sizes over 64 bits are refused. The error names the input, so the
/// function serves as a clap `value_parser` as it is.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits == 0 {
        return Err(SizeError::NotASize(s.to_string()));
    }
    // parse-size also takes fractions, exponents, digit grouping and P/E units: not sizes here.
    let unit = t[digits..].trim_start().chars().next().map(|c| c.to_ascii_lowercase());
    let bad_unit = || SizeError::Suffix(s.to_string());
    if !matches!(unit, None | Some('b' | 'k' | 'm' | 'g' | 't')) {
        return Err(bad_unit());
    }
    BINARY.parse_size(t).map_err(|e| match e {
        parse_size::Error::PosOverflow => SizeError::TooLarge(s.to_string()),
        _ => bad_unit(),
    })
}

/// Why [`parse_size`] refused its input (each names it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("'{0}' is not a size (e.g. 4096, 64K, 1M, 2G)")]
    NotASize(String),
    #[error("'{0}': unknown size suffix (use K, M, G or T)")]
    Suffix(String),
    #[error("'{0}' is too large (over 64 bits)")]
    TooLarge(String),
}

/// Human-readable binary size, exact when possible (`1 MiB`, `1.50 GiB`, `100 bytes`).
pub fn format_size(n: u64) -> String {
    for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if n >= unit {
            // Not `is_multiple_of`: the benchmark crate, a user of this one, keeps Rust 1.85.
            let (whole, rest) = (n / unit, n % unit);
            return if rest == 0 { format!("{whole} {name}") } else { format!("{:.2} {name}", n as f64 / unit as f64) };
        }
    }
    format!("{n} bytes")
}

/// Serde for an optional size in a configuration file: a number of bytes or a string [`parse_size`]
/// reads (`capacity = "10G"`); written back as a number of bytes.
pub mod opt_size {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Raw>::deserialize(d)? {
            None => Ok(None),
            Some(Raw::Bytes(n)) => Ok(Some(n)),
            Some(Raw::Text(t)) => super::parse_size(&t).map(Some).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("64k").unwrap(), 64 << 10);
        assert_eq!(parse_size("1m").unwrap(), 1 << 20);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert_eq!(parse_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert_eq!(parse_size("8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("8mb").unwrap(), 8 << 20);
        assert_eq!(parse_size(" 3K ").unwrap(), 3072);
    }

    #[test]
    fn every_documented_spelling_is_binary() {
        for (unit, mult) in [("k", KIB), ("m", MIB), ("g", GIB), ("t", TIB)] {
            for spelling in [unit.to_string(), format!("{unit}b"), format!("{unit}i"), format!("{unit}ib")] {
                assert_eq!(parse_size(&format!("3{spelling}")).unwrap(), 3 * mult, "{spelling}");
                assert_eq!(parse_size(&format!("3{}", spelling.to_uppercase())).unwrap(), 3 * mult, "{spelling}");
            }
        }
        assert_eq!(parse_size("7b").unwrap(), 7);
        assert_eq!(parse_size("7B").unwrap(), 7);
        assert_eq!(parse_size("64 KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("16777215T").unwrap(), 16777215 << 40);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("1x").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("+1").is_err());
        assert!(parse_size("1.5m").is_err());
        assert!(parse_size("1e3").is_err());
        assert!(parse_size("1_000").is_err());
        assert!(parse_size("1 000").is_err());
        assert!(parse_size("1P").is_err());
        assert!(parse_size("1kk").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000000g").is_err());
        assert!(parse_size("20000000T").is_err());
        assert!(parse_size("16777216T").is_err());
    }

    #[test]
    fn errors_name_the_input_and_the_problem() {
        assert_eq!(parse_size("12Q").unwrap_err().to_string(), "'12Q': unknown size suffix (use K, M, G or T)");
        assert_eq!(parse_size("abc").unwrap_err().to_string(), "'abc' is not a size (e.g. 4096, 64K, 1M, 2G)");
        assert_eq!(parse_size("20000000T").unwrap_err().to_string(), "'20000000T' is too large (over 64 bits)");
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(1 << 20), "1 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
        assert_eq!(format_size(4096), "4 KiB");
        assert_eq!(format_size(100), "100 bytes");
    }
}
