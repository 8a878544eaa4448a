//! The `tessera.layout` extended attribute: the text the MDS shows for a file's layout or a
//! directory's default, and the text users set (`setfattr -n tessera.layout -v "stripe_size=1MiB"`).

use super::{validate_extents, ExtentSpec, Layout, LayoutSpec, EOF};
use crate::error::{FsError, FsResult};
use crate::units::parse_size;

/// The attribute's name.
pub const XATTR_NAME: &str = "tessera.layout";

/// Text of a file layout: `stripe_size=N stripe_count=M objects=ds:obj,...`. A composite layout is each
/// extent's own such text after `extent=START-END` (END `EOF` for the last); an extent not instantiated
/// yet shows the stripe count asked for and `objects=none`. A mirrored extent adds `mirrors=M` and lists
/// each stripe's replicas joined by `|`, primary first, a replica not in sync followed by its state
/// (`0:17|1:40,2:18|3:41(stale)`).
pub fn format_layout(l: &Layout) -> String {
    let one = |e: &super::ExtentView<'_>, count: usize| {
        let objects: Vec<String> = e
            .targets
            .iter()
            .enumerate()
            .map(|(k, t)| {
                let mut s = format!("{}:{}", t.ds, t.object);
                for r in e.mirrors.get(k).map_or(&[][..], Vec::as_slice) {
                    s.push_str(&format!("|{}:{}", r.target.ds, r.target.object));
                    if r.state != super::ReplicaState::InSync {
                        s.push_str(&format!("({})", r.state));
                    }
                }
                s
            })
            .collect();
        let objects = if objects.is_empty() { "none".to_string() } else { objects.join(",") };
        let mirrors = if e.mirror_count > 1 { format!(" mirrors={}", e.mirror_count) } else { String::new() };
        format!("stripe_size={} stripe_count={count}{mirrors} objects={objects}", e.stripe_size)
    };
    if !l.is_composite() {
        return l.extent(0).map(|e| one(&e, l.targets.len())).unwrap_or_default();
    }
    let parts: Vec<String> = l
        .extent_views()
        .map(|e| {
            let count = if e.instantiated() { e.targets.len() } else { e.stripe_count as usize };
            format!("extent={} {}", range(e.start, e.end), one(&e, count))
        })
        .collect();
    parts.join(" ")
}

fn range(start: u64, end: u64) -> String {
    if end == EOF {
        format!("{start}-EOF")
    } else {
        format!("{start}-{end}")
    }
}

/// Text of a composite directory default: `extent=START-END [stripe_size=N] [stripe_count=M] ...`.
pub fn format_extents(specs: &[ExtentSpec]) -> String {
    let mut start = 0;
    let mut parts = Vec::new();
    for e in specs {
        let spec =
            format_spec(&LayoutSpec { stripe_size: e.stripe_size, stripe_count: e.stripe_count, mirrors: e.mirrors });
        parts.push(format!("extent={}{}{spec}", range(start, e.end), if spec.is_empty() { "" } else { " " }));
        start = e.end;
    }
    parts.join(" ")
}

/// A layout as set through the attribute: plain, or composite when it names extents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParsedLayout {
    Plain(LayoutSpec),
    Composite(Vec<ExtentSpec>),
}

/// Parses what users set (or what [`format_layout`] / [`format_extents`] showed): `extent=START-END`
/// (END `EOF` or `-1` for the last) starts an extent whose `stripe_size=`/`stripe_count=` follow; text
/// without extents is a plain spec ([`parse_spec`]). `objects=` is ignored.
pub fn parse(text: &[u8]) -> FsResult<ParsedLayout> {
    let s = std::str::from_utf8(text).map_err(|_| FsError::invalid("layout text is not UTF-8"))?;
    if !s.split_whitespace().any(|t| t.starts_with("extent=")) {
        return parse_spec(text).map(ParsedLayout::Plain);
    }
    let s = s.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    let mut specs: Vec<ExtentSpec> = Vec::new();
    for tok in s.split_whitespace() {
        let (k, v) =
            tok.split_once('=').ok_or_else(|| FsError::invalid(format!("layout: '{tok}' is not key=value")))?;
        let bad = |what: &str| FsError::invalid(format!("layout: bad {what} '{v}'"));
        match k {
            "extent" => {
                let (_, end) = v.split_once('-').ok_or_else(|| bad("extent"))?;
                let end = match end {
                    "EOF" | "eof" | "-1" => EOF,
                    e => parse_size(e).map_err(|_| bad("extent"))?,
                };
                specs.push(ExtentSpec { end, stripe_size: None, stripe_count: None, mirrors: None });
            }
            "stripe_size" | "size" | "stripe_count" | "count" | "mirrors" if specs.is_empty() => {
                return Err(FsError::invalid("layout: stripe fields before the first extent="));
            }
            "stripe_size" | "size" => {
                let last = specs.last_mut().ok_or_else(|| bad("stripe_size"))?;
                last.stripe_size = Some(parse_size(v).map_err(|_| bad("stripe_size"))?);
            }
            "stripe_count" | "count" => {
                let last = specs.last_mut().ok_or_else(|| bad("stripe_count"))?;
                last.stripe_count = Some(v.parse().map_err(|_| bad("stripe_count"))?);
            }
            "mirrors" => {
                let last = specs.last_mut().ok_or_else(|| bad("mirrors"))?;
                last.mirrors = Some(v.parse().map_err(|_| bad("mirrors"))?);
            }
            "objects" => {}
            _ => return Err(FsError::invalid(format!("layout: unknown key '{k}'"))),
        }
    }
    validate_extents(&specs)?;
    Ok(ParsedLayout::Composite(specs))
}

/// Text of a directory default: `stripe_size=N stripe_count=M mirrors=K`, each only if set.
pub fn format_spec(s: &LayoutSpec) -> String {
    let mut parts = Vec::new();
    if let Some(v) = s.stripe_size {
        parts.push(format!("stripe_size={v}"));
    }
    if let Some(v) = s.stripe_count {
        parts.push(format!("stripe_count={v}"));
    }
    if let Some(v) = s.mirrors {
        parts.push(format!("mirrors={v}"));
    }
    parts.join(" ")
}

/// Parses `stripe_size=N stripe_count=M mirrors=K` as set by users (any may be missing; `objects=` is
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
            "mirrors" => {
                spec.mirrors = Some(v.parse().map_err(|_| FsError::invalid(format!("layout: bad mirrors '{v}'")))?)
            }
            "objects" => {}
            "extent" => return Err(FsError::invalid("layout: a composite layout (extent=) is not a plain spec")),
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
        mirrors: after("mirrors").and_then(|v| v.parse::<u8>().ok()),
    };
    (spec.stripe_size.is_some() || spec.stripe_count.is_some() || spec.mirrors.is_some()).then_some(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::StripeTarget;

    #[test]
    fn formats_as_the_attribute_always_showed() {
        let l = Layout::plain(65536, vec![StripeTarget { ds: 0, object: 17 }, StripeTarget { ds: 2, object: 18 }]);
        assert_eq!(format_layout(&l), "stripe_size=65536 stripe_count=2 objects=0:17,2:18");
        let s = LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: None };
        assert_eq!(format_spec(&s), "stripe_size=65536 stripe_count=2");
        assert_eq!(
            format_spec(&LayoutSpec { stripe_size: None, stripe_count: Some(1), mirrors: None }),
            "stripe_count=1"
        );
        assert_eq!(format_spec(&LayoutSpec::default()), "");
        // What is shown can be set back.
        assert_eq!(parse_spec(format_layout(&l).as_bytes()).unwrap(), s);
        assert_eq!(parse_spec(format_spec(&s).as_bytes()).unwrap(), s);
    }

    #[test]
    fn mirrored_layouts_show_every_replica_and_the_mirror_count_round_trips() {
        let t = |ds, object| StripeTarget { ds, object };
        let mut l = Layout::mirrored(65536, vec![vec![t(0, 17), t(1, 40)], vec![t(2, 18), t(3, 41)]]);
        l.mirrors[1][0].state = crate::layout::ReplicaState::Stale;
        assert_eq!(format_layout(&l), "stripe_size=65536 stripe_count=2 mirrors=2 objects=0:17|1:40,2:18|3:41(stale)");
        let s = LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: Some(2) };
        assert_eq!(parse_spec(format_layout(&l).as_bytes()).unwrap(), s);
        assert_eq!(parse_spec(b"mirrors=3").unwrap().mirrors, Some(3));
        assert!(parse_spec(b"mirrors=4").is_err());
        assert_eq!(parse_spec_lenient("mirrors=2").unwrap().mirrors, Some(2));
        let ParsedLayout::Composite(specs) = parse(b"extent=0-1M mirrors=2 extent=1M-EOF").unwrap() else { panic!() };
        assert_eq!((specs[0].mirrors, specs[1].mirrors), (Some(2), None));
    }

    #[test]
    fn parses_what_users_set() {
        // The case: setstripe -S 1MiB worked, the attribute refused it.
        let s = parse_spec(b"stripe_size=1MiB").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(1 << 20), stripe_count: None, mirrors: None });
        let s = parse_spec(b" size=64k count=3\0").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(64 << 10), stripe_count: Some(3), mirrors: None });
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
        assert_eq!(s, LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(4), mirrors: None });
        let s = parse_spec_lenient("{\"stripe_size\":65536,\"stripe_count\":null}").unwrap();
        assert_eq!(s, LayoutSpec { stripe_size: Some(65536), stripe_count: None, mirrors: None });
        assert!(parse_spec_lenient("nothing here").is_none());
        assert_eq!(parse_spec_lenient("stripe_size=1MiB").unwrap().stripe_size, Some(1 << 20));
    }

    #[test]
    fn composite_layouts_show_their_extents_and_parse_back() {
        use crate::layout::{Component, StripeTarget};
        let mut l = Layout::plain(65536, vec![StripeTarget { ds: 0, object: 17 }]);
        l.extents = vec![Component {
            start: 1 << 20,
            end: EOF,
            stripe_size: 65536,
            stripe_count: 2,
            targets: vec![],
            mirror_count: 1,
            mirrors: vec![],
        }];
        let t = format_layout(&l);
        assert_eq!(
            t,
            "extent=0-1048576 stripe_size=65536 stripe_count=1 objects=0:17 \
             extent=1048576-EOF stripe_size=65536 stripe_count=2 objects=none"
        );
        let want = vec![
            ExtentSpec { end: 1 << 20, stripe_size: Some(65536), stripe_count: Some(1), mirrors: None },
            ExtentSpec { end: EOF, stripe_size: Some(65536), stripe_count: Some(2), mirrors: None },
        ];
        assert_eq!(parse(t.as_bytes()).unwrap(), ParsedLayout::Composite(want.clone()));
        assert_eq!(parse(format_extents(&want).as_bytes()).unwrap(), ParsedLayout::Composite(want));
        let users = parse(b"extent=0-128M stripe_count=1 extent=128M--1 stripe_count=8").unwrap();
        let ParsedLayout::Composite(e) = users else { panic!("{users:?}") };
        assert_eq!((e[0].end, e[1].end, e[1].stripe_count), (128 << 20, EOF, Some(8)));
        assert_eq!(
            parse(b"stripe_count=2").unwrap(),
            ParsedLayout::Plain(LayoutSpec { stripe_size: None, stripe_count: Some(2), mirrors: None })
        );
        assert!(parse(b"stripe_count=2 extent=0-EOF").is_err());
        assert!(parse(b"extent=0-1M stripe_count=1").is_err(), "the last extent ends at EOF");
        assert!(parse_spec(t.as_bytes()).is_err(), "not a plain spec");
    }
}
