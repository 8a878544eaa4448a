//! The `tessera.layout` extended attribute: the text the MDS shows for a file's layout or a
//! directory's default, and the text users set (`setfattr -n tessera.layout -v "stripe_size=1MiB"`).

use super::{Layout, LayoutSpec};
use crate::error::{FsError, FsResult};
use crate::units::parse_size;

/// The attribute's name.
pub const XATTR_NAME: &str = "tessera.layout";

/// Text of a file layout: `stripe_size=N stripe_count=M objects=ds:obj,...`.
pub fn format_layout(l: &Layout) -> String {
    let objects: Vec<String> = l.targets.iter().map(|t| format!("{}:{}", t.ds, t.object)).collect();
    format!("stripe_size={} stripe_count={} objects={}", l.stripe_size, l.targets.len(), objects.join(","))
}

/// Text of a directory default: `stripe_size=N stripe_count=M`, each only if set.
pub fn format_spec(s: &LayoutSpec) -> String {
    let mut parts = Vec::new();
    if let Some(v) = s.stripe_size {
        parts.push(format!("stripe_size={v}"));
    }
    if let Some(v) = s.stripe_count {
        parts.push(format!("stripe_count={v}"));
    }
    parts.join(" ")
}

/// Parses `stripe_size=N stripe_count=M` as set by users (either may be missing; `objects=` is
/// ignored, so a file's text can be set back). Sizes take the suffixes of [`parse_size`].
pub fn parse_spec(text: &[u8]) -> FsResult<LayoutSpec> {
    let text = std::str::from_utf8(text).map_err(|_| FsError::invalid("layout text is not UTF-8"))?;
    let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    let mut spec = LayoutSpec::default();
    for tok in text.split_whitespace() {
        let (k, v) =
            tok.split_once('=').ok_or_else(|| FsError::invalid(format!("layout: '{tok}' is not key=value")))?;
        match k {
            "stripe_size" | "size" => {
                spec.stripe_size =
                    Some(parse_size(v).map_err(|e| FsError::invalid(format!("layout: bad stripe_size {e}")))?)
            }
            "stripe_count" | "count" => {
                spec.stripe_count =
                    Some(v.parse().map_err(|_| FsError::invalid(format!("layout: bad stripe_count '{v}'")))?)
            }
            "objects" => {}
            _ => return Err(FsError::invalid(format!("layout: unknown key '{k}'"))),
        }
    }
    spec.validate()?;
    Ok(spec)
}

/// Reads a spec out of an attribute value whatever its spelling (`stripe_size=1048576 stripe_count=4`,
/// JSON, ...): the value after each key, unchecked; `None` if neither key has one.
pub fn parse_spec_lenient(text: &str) -> Option<LayoutSpec> {
    let tokens: Vec<&str> =
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|t| !t.is_empty()).collect();
    let after = |key: &str| tokens.windows(2).find(|w| w[0] == key).map(|w| w[1]);
    let spec = LayoutSpec {
        stripe_size: after("stripe_size").and_then(|v| parse_size(v).ok()),
        stripe_count: after("stripe_count").and_then(|v| v.parse::<u64>().ok()).map(|c| c as u32),
    };
    (spec.stripe_size.is_some() || spec.stripe_count.is_some()).then_some(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StripeTarget;

    #[test]
    fn formats_as_the_attribute_always_showed() {
        let l = Layout {
            stripe_size: 65536,
            targets: vec![StripeTarget { ds: 0, object: 17 }, StripeTarget { ds: 2, object: 18 }],
        };
        assert_eq!(format_layout(&l), "stripe_size=65536 stripe_count=2 objects=0:17,2:18");
        let s = LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2) };
        assert_eq!(format_spec(&s), "stripe_size=65536 stripe_count=2");
        assert_eq!(format_spec(&LayoutSpec { stripe_size: None, stripe_count: Some(1) }), "stripe_count=1");
        assert_eq!(format_spec(&LayoutSpec::default()), "");
        // What is shown can be set back.
        assert_eq!(parse_spec(format_layout(&l).as_bytes()).unwrap(), s);
        assert_eq!(parse_spec(format_spec(&s).as_bytes()).unwrap(), s);
    }

    #[test]
    fn parses_what_users_set() {
        // The case: setstripe -S 1MiB worked, the attribute refused it.
        let s = parse_spec(b"stripe_size=1MiB").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(1 << 20), stripe_count: None });
        let s = parse_spec(b" size=64k count=3\0").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(3) });
        assert_eq!(parse_spec(b"stripe_size=2M").unwrap().stripe_size, Some(2 << 20));
        assert_eq!(parse_spec(b"stripe_size=8MB").unwrap().stripe_size, Some(8 << 20));
        assert_eq!(parse_spec(b"").unwrap(), LayoutSpec::default());
        for bad in
            [&b"stripe_size=1000"[..], b"stripe_size=1x", b"stripe_count=two", b"color=red", b"stripe_size", b"\xff"]
        {
            assert_eq!(parse_spec(bad).unwrap_err().code, crate::error::ErrorCode::Invalid, "{bad:?}");
        }
        assert!(parse_spec(b"stripe_size=1x").unwrap_err().detail.contains("unknown size suffix"));
    }

    #[test]
    fn reads_other_spellings_leniently() {
        let s = parse_spec_lenient("stripe_size=1048576 stripe_count=4").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(4) });
        let s = parse_spec_lenient("{\"stripe_size\":65536,\"stripe_count\":null}").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(65536), stripe_count: None });
        assert!(parse_spec_lenient("nothing here").is_none());
        assert_eq!(parse_spec_lenient("stripe_size=1MiB").unwrap().stripe_size, Some(1 << 20));
    }
}
