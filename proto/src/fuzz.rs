//! Structured fuzzing, shared by the fuzz tests of every crate and `tessera-bench fuzz` (feature
//! `arbitrary`): any message value from raw bytes (`arbitrary::Arbitrary` is derived for every message
//! type), byte sources biased towards what breaks decoders and handlers (zeros, all ones, tiny numbers,
//! `/`, NUL, `.`), and the mutations of an encoded frame.
//!
//! Tests run [`cases`] cases per property (`TESSERA_FUZZ_CASES` raises it for a longer run) from a
//! random [`seed`] (`TESSERA_FUZZ_SEED` repeats a run).

use crate::frame::{prefix, PREFIX};
use crate::layout::{Layout, LayoutSpec};
use crate::msg::*;
use crate::types::*;
use arbitrary::{Arbitrary, Unstructured};

/// Cases per property: `default`, or `TESSERA_FUZZ_CASES` when set (a longer run).
pub fn cases(default: u32) -> u32 {
    std::env::var("TESSERA_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The seed of a fuzz run: `TESSERA_FUZZ_SEED` when set (to repeat a run), else a new one.
pub fn seed() -> u64 {
    std::env::var("TESSERA_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Rng::new(t.as_nanos() as u64 ^ u64::from(std::process::id())).next_u64()
    })
}

/// A small, fast, seedable generator (SplitMix64): runs are reproducible from their seed, and the
/// protocol crate needs no random-number dependency for it.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A uniform index into a slice of `len` elements (`len` > 0).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One byte, biased: zeros, all ones, tiny numbers and the characters that make names invalid come
    /// far more often than chance would make them.
    pub fn biased_byte(&mut self) -> u8 {
        match self.below(20) {
            0..=7 => self.next_u64() as u8,
            8..=12 => 0,
            13..=14 => 0xff,
            15..=17 => 1 + self.below(8) as u8,
            _ => *pick(self, b"/\0.a-Z\xfd\xfc\xfb"),
        }
    }

    /// `n` biased bytes.
    pub fn biased_bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.biased_byte()).collect()
    }

    /// `usual` most of the time, else an [interesting](Rng::interesting_u64) number.
    pub fn usually(&mut self, usual: u64) -> u64 {
        if self.percent(85) {
            usual
        } else {
            self.interesting_u64()
        }
    }

    /// [`Rng::usually`] for 32-bit fields (the interesting number's low half).
    pub fn usually32(&mut self, usual: u32) -> u32 {
        self.usually(u64::from(usual)) as u32
    }

    /// A value that often breaks arithmetic: 0, 1, powers of two and their neighbours, the type limits.
    pub fn interesting_u64(&mut self) -> u64 {
        match self.below(4) {
            0 => *pick(self, &INTERESTING),
            1 => 1u64 << self.below(64),
            2 => (1u64 << self.below(64)).wrapping_sub(1),
            _ => self.next_u64(),
        }
    }
}

fn pick<'a, T>(rng: &mut Rng, from: &'a [T]) -> &'a T {
    &from[rng.index(from.len())]
}

/// Values worth trying wherever a number goes.
pub const INTERESTING: [u64; 14] =
    [0, 1, 2, 250, 251, 255, 4096, 65_535, 1 << 20, u32::MAX as u64, 1 << 32, i64::MAX as u64, u64::MAX - 1, u64::MAX];

/// A value of `T` made from `bytes` (as libFuzzer's structure-aware targets do); `None` when the bytes do
/// not suffice for one.
pub fn value_from<T: for<'a> Arbitrary<'a>>(bytes: &[u8]) -> Option<T> {
    T::arbitrary(&mut Unstructured::new(bytes)).ok()
}

/// A value of `T` made from `len` biased bytes of `rng` (retried a few times when they do not suffice).
pub fn arbitrary_value<T: for<'a> Arbitrary<'a>>(rng: &mut Rng, len: usize) -> Option<T> {
    (0..4).find_map(|_| value_from(&rng.biased_bytes(len)))
}

/// Ways to spoil an encoded frame (`"TS" | version | header_len | payload_len | header | payload`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mutation {
    /// One to eight bits flipped anywhere.
    BitFlips,
    /// Cut short at a random point.
    Truncate,
    /// Random bytes appended (the declared lengths unchanged).
    Extend,
    /// A bincode length or number in the header replaced by a huge varint (u16/u32/u64 maximum).
    AbsurdLength,
    /// One to eight bytes of the header overwritten with an interesting number.
    Interesting,
    /// An enum tag (a header byte) replaced by a small number, often one no variant has.
    Tag,
    /// The prefix's header or payload length set to 0, the limit, past the limit or off by one.
    PrefixLength,
    /// The header's front joined to another frame's back.
    Splice,
    /// Random bytes behind a valid prefix declaring them.
    RandomHeader,
    /// Random bytes, no valid prefix at all.
    RandomBytes,
}

impl Mutation {
    pub const ALL: [Mutation; 10] = [
        Mutation::BitFlips,
        Mutation::Truncate,
        Mutation::Extend,
        Mutation::AbsurdLength,
        Mutation::Interesting,
        Mutation::Tag,
        Mutation::PrefixLength,
        Mutation::Splice,
        Mutation::RandomHeader,
        Mutation::RandomBytes,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutation::BitFlips => "bit-flips",
            Mutation::Truncate => "truncate",
            Mutation::Extend => "extend",
            Mutation::AbsurdLength => "absurd-length",
            Mutation::Interesting => "interesting-value",
            Mutation::Tag => "enum-tag",
            Mutation::PrefixLength => "prefix-length",
            Mutation::Splice => "splice",
            Mutation::RandomHeader => "random-header",
            Mutation::RandomBytes => "random-bytes",
        }
    }
}

/// A header position to spoil: within the header when the frame has one, else anywhere.
fn header_pos(rng: &mut Rng, frame: &[u8]) -> usize {
    if frame.len() > PREFIX {
        PREFIX + rng.index(frame.len() - PREFIX)
    } else {
        rng.index(frame.len().max(1))
    }
}

/// `frame` spoiled by `m` (`other`: a second valid frame, for splices).
pub fn mutate(rng: &mut Rng, m: Mutation, frame: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = frame.to_vec();
    match m {
        Mutation::BitFlips => {
            for _ in 0..1 + rng.below(8) {
                if !out.is_empty() {
                    let i = header_pos(rng, &out);
                    out[i] ^= 1 << rng.below(8);
                }
            }
        }
        Mutation::Truncate => out.truncate(rng.index(out.len().max(1))),
        Mutation::Extend => {
            let n = 1 + rng.index(64);
            out.extend(rng.biased_bytes(n));
        }
        Mutation::AbsurdLength => {
            let i = header_pos(rng, &out).min(out.len());
            let varint: &[u8] = match rng.below(4) {
                0 => &[0xfb, 0xff, 0xff],
                1 => &[0xfc, 0xff, 0xff, 0xff, 0xff],
                2 => &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
                _ => &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            };
            // Overwrite (keeping the length) or insert.
            if rng.percent(50) {
                let end = (i + varint.len()).min(out.len());
                out.splice(i..end, varint.iter().copied());
            } else {
                out.splice(i..i, varint.iter().copied());
            }
        }
        Mutation::Interesting => {
            let v = rng.interesting_u64().to_le_bytes();
            let n = [1, 2, 4, 8][rng.index(4)];
            let i = header_pos(rng, &out).min(out.len());
            let end = (i + n).min(out.len());
            out.splice(i..end, v[..n].iter().copied());
        }
        Mutation::Tag => {
            if !out.is_empty() {
                let i = if rng.percent(50) && out.len() > PREFIX { PREFIX } else { header_pos(rng, &out) };
                out[i] = rng.below(64) as u8;
            }
        }
        Mutation::PrefixLength => {
            if out.len() >= PREFIX {
                let field = if rng.percent(50) { 4..8 } else { 8..12 };
                let old = u32::from_be_bytes(out[field.clone()].try_into().unwrap_or([0; 4]));
                let v = match rng.below(6) {
                    0 => 0,
                    1 => u32::MAX,
                    2 => crate::wire::MAX_HEADER as u32,
                    3 => crate::wire::MAX_HEADER as u32 + 1,
                    4 => old.wrapping_add(1),
                    _ => old.wrapping_sub(1),
                };
                out[field].copy_from_slice(&v.to_be_bytes());
            }
        }
        Mutation::Splice => {
            let cut = rng.index(out.len().max(1));
            let from = rng.index(other.len().max(1)).min(other.len());
            out.truncate(cut);
            out.extend_from_slice(&other[from..]);
        }
        Mutation::RandomHeader => {
            let n = rng.index(256);
            out = prefix(n, 0).to_vec();
            out.extend(rng.biased_bytes(n));
        }
        Mutation::RandomBytes => {
            let n = rng.index(256);
            out = (0..n).map(|_| rng.next_u64() as u8).collect();
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Plausible requests: aimed at what exists (inodes, handles, leases, objects the replies named), with
// now and then one field absurd. Purely arbitrary values rarely get past a handler's first check.
// ---------------------------------------------------------------------------------------------

/// Most of each kind of thing [`Known`] remembers.
const KNOWN_MAX: usize = 256;

/// What a fuzzer learnt from a server's replies, to aim its next requests at things that exist.
#[derive(Clone, Debug)]
pub struct Known {
    pub inos: Vec<Ino>,
    /// Open handles: (inode, handle).
    pub handles: Vec<(Ino, u64)>,
    /// Directory leases: (directory, token, inode numbers reserved for the holder).
    pub leases: Vec<(Ino, u64, Vec<Ino>)>,
    pub objects: Vec<ObjectId>,
}

impl Default for Known {
    fn default() -> Known {
        Known { inos: vec![ROOT_INO], handles: Vec::new(), leases: Vec::new(), objects: (1..=16).collect() }
    }
}

/// Appends `x`, replacing a random element once `v` holds [`KNOWN_MAX`].
fn remember<T>(rng: &mut Rng, v: &mut Vec<T>, x: T) {
    if v.len() < KNOWN_MAX {
        v.push(x);
    } else {
        let i = rng.index(v.len());
        v[i] = x;
    }
}

impl Known {
    /// Takes note of the inodes, handles, leases and objects a metadata reply names.
    pub fn learn_mds(&mut self, rng: &mut Rng, reply: &MdsReply) {
        fn layout(rng: &mut Rng, k: &mut Known, l: &Option<Layout>) {
            for t in l.iter().flat_map(|l| &l.targets) {
                remember(rng, &mut k.objects, t.object);
            }
        }
        match reply {
            MdsReply::Attr(a) => remember(rng, &mut self.inos, a.ino),
            MdsReply::Entry { attr, layout: l } => {
                remember(rng, &mut self.inos, attr.ino);
                layout(rng, self, l);
            }
            MdsReply::Opened { attr, layout: l, handle, .. } => {
                remember(rng, &mut self.inos, attr.ino);
                remember(rng, &mut self.handles, (attr.ino, *handle));
                layout(rng, self, l);
            }
            MdsReply::DirEntries(es) => {
                for e in es.iter().take(8) {
                    remember(rng, &mut self.inos, e.ino);
                }
            }
            MdsReply::Lease(l) => remember(rng, &mut self.leases, (l.dir, l.token, l.inos.clone())),
            MdsReply::Batch { results, lease, .. } => {
                for r in results {
                    remember(rng, &mut self.inos, r.ino);
                    if let Ok(Some((h, l))) = &r.result {
                        remember(rng, &mut self.handles, (r.ino, *h));
                        layout(rng, self, &Some(l.clone()));
                    }
                }
                if let Some(l) = lease {
                    remember(rng, &mut self.leases, (l.dir, l.token, l.inos.clone()));
                }
            }
            _ => {}
        }
    }
}

/// Names: mostly a few plain ones (so creates collide with lookups, renames and removes), sometimes an
/// invalid one (empty, `.`, `..`, with `/` or NUL, too long) or random bytes.
pub fn name(rng: &mut Rng) -> String {
    const PLAIN: [&str; 8] = ["a", "b", "c", "d", "dir", "file", "x.y", "\u{e9}t\u{e9}"];
    const BAD: [&str; 6] = ["", ".", "..", "a/b", "n\0ul", "/"];
    match rng.below(20) {
        0..=15 => PLAIN[rng.index(PLAIN.len())].to_string(),
        16 | 17 => BAD[rng.index(BAD.len())].to_string(),
        18 => "n".repeat(NAME_MAX + rng.below(2) as usize),
        _ => {
            let n = rng.index(300);
            String::from_utf8_lossy(&rng.biased_bytes(n)).into_owned()
        }
    }
}

/// A path: absolute over the plain names, now and then relative, empty, long or with `.`/`..`.
fn path(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => name(rng),
        1 => "/".repeat(1 + rng.index(PATH_MAX + 2)),
        _ => (0..1 + rng.below(4)).map(|_| format!("/{}", name(rng))).collect(),
    }
}

fn pick_or<T: Clone>(rng: &mut Rng, from: &[T], or: impl FnOnce(&mut Rng) -> T) -> T {
    if from.is_empty() || rng.percent(10) {
        or(rng)
    } else {
        from[rng.index(from.len())].clone()
    }
}

/// An inode that exists (mostly), the root, or an interesting number.
pub fn ino(rng: &mut Rng, known: &Known) -> Ino {
    match rng.below(10) {
        0 => ROOT_INO,
        1 => rng.interesting_u64(),
        _ => pick_or(rng, &known.inos, |r| r.interesting_u64()),
    }
}

fn opt<T>(rng: &mut Rng, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    rng.percent(40).then(|| f(rng))
}

fn perm(rng: &mut Rng) -> u32 {
    {
        let v = [0o644, 0o755, 0o600, 0o000, 0o7777][rng.index(5)];
        rng.usually32(v)
    }
}

/// A composite layout request: usually valid (increasing ends, the last to EOF), sometimes not.
fn extent_specs(rng: &mut Rng) -> Vec<crate::layout::ExtentSpec> {
    let n = rng.below(5) as usize;
    let mut end = 0u64;
    let mut out: Vec<crate::layout::ExtentSpec> = (0..n)
        .map(|_| {
            end += (1 + rng.below(64)) << 16;
            let spec = layout_spec(rng);
            crate::layout::ExtentSpec {
                end: rng.usually(end),
                stripe_size: spec.stripe_size,
                stripe_count: spec.stripe_count,
                mirrors: spec.mirrors,
            }
        })
        .collect();
    if let Some(last) = out.last_mut() {
        last.end = rng.usually(crate::layout::EOF);
    }
    out
}

fn layout_spec(rng: &mut Rng) -> LayoutSpec {
    LayoutSpec {
        stripe_size: opt(rng, |r| {
            let v = 65536 << r.below(4);
            r.usually(v)
        }),
        stripe_count: opt(rng, |r| {
            let v = r.below(5) as u32;
            r.usually32(v)
        }),
        mirrors: rng.percent(20).then(|| rng.below(5) as u8),
    }
}

fn open_flags(rng: &mut Rng) -> OpenFlags {
    OpenFlags { read: rng.percent(80), write: rng.percent(60), truncate: rng.percent(10) }
}

/// The caller of a metadata request: root, an ordinary user or an absurd one.
pub fn caller(rng: &mut Rng) -> Caller {
    match rng.below(10) {
        0..=4 => Caller::root(),
        5..=8 => Caller { uid: 1000, gid: 1000, groups: vec![100] },
        _ => Caller {
            uid: rng.next_u64() as u32,
            gid: rng.next_u64() as u32,
            groups: (0..rng.below(40)).map(|_| rng.next_u64() as u32).collect(),
        },
    }
}

/// Who issues a request: job `fuzz` of `client` mostly, now and then an empty or over-long job id.
pub fn origin(rng: &mut Rng, client: u64) -> Origin {
    Origin { job: job_id(rng), client, pid: rng.usually32(42) }
}

/// A job id: `fuzz` mostly, now and then an empty or over-long one.
pub fn job_id(rng: &mut Rng) -> String {
    match rng.below(20) {
        0 => String::new(),
        1 => "j".repeat(crate::JOB_ID_MAX + 1),
        2 => name(rng),
        _ => "fuzz".to_string(),
    }
}

/// A metadata request aimed at what `known` holds; one in ten is an arbitrary value of any variant.
pub fn mds_request(rng: &mut Rng, known: &Known) -> MdsRequest {
    use MdsRequest as Q;
    if rng.percent(10) {
        if let Some(q) = arbitrary_value(rng, 48) {
            return q;
        }
    }
    match rng.below(33) {
        0 => Q::Ping,
        1 => Q::Lookup { parent: ino(rng, known), name: name(rng) },
        2 => Q::LookupPath { path: path(rng), follow: rng.percent(50) },
        3 => Q::GetAttr { ino: ino(rng, known) },
        4 => {
            let set = SetAttrs {
                perm: opt(rng, perm),
                uid: opt(rng, |r| r.usually32(1000)),
                gid: opt(rng, |r| r.usually32(1000)),
                size: opt(rng, |r| {
                    let v = r.below(1 << 22);
                    r.usually(v)
                }),
                atime: opt(rng, |r| if r.percent(50) { TimeSet::Now } else { TimeSet::At(timestamp(r)) }),
                mtime: opt(rng, |r| if r.percent(50) { TimeSet::Now } else { TimeSet::At(timestamp(r)) }),
            };
            Q::SetAttr { ino: ino(rng, known), set }
        }
        5 => {
            let kinds =
                [FileKind::File, FileKind::Fifo, FileKind::Socket, FileKind::CharDev, FileKind::Dir, FileKind::Symlink];
            Q::Create {
                parent: ino(rng, known),
                name: name(rng),
                kind: kinds[rng.index(kinds.len())],
                perm: perm(rng),
                umask: perm(rng) & 0o777,
                rdev: rng.usually32(0),
                exclusive: rng.percent(50),
                layout: opt(rng, layout_spec),
            }
        }
        6 | 7 => Q::Mkdir { parent: ino(rng, known), name: name(rng), perm: perm(rng), umask: perm(rng) & 0o777 },
        8 => Q::Symlink { parent: ino(rng, known), name: name(rng), target: path(rng) },
        9 => Q::Readlink { ino: ino(rng, known) },
        10 => Q::Link { ino: ino(rng, known), new_parent: ino(rng, known), new_name: name(rng) },
        11 => Q::Unlink { parent: ino(rng, known), name: name(rng) },
        12 => Q::Rmdir { parent: ino(rng, known), name: name(rng) },
        13 => Q::Rename {
            parent: ino(rng, known),
            name: name(rng),
            new_parent: ino(rng, known),
            new_name: name(rng),
            flags: RenameFlags { noreplace: rng.percent(20), exchange: rng.percent(20) },
        },
        14 => Q::ReadDir { ino: ino(rng, known), offset: rng.usually(0), max: rng.usually32(64) },
        15 => Q::Open { ino: ino(rng, known), flags: open_flags(rng) },
        16 => {
            let (i, handle) = pick_or(rng, &known.handles, |r| (ROOT_INO, r.interesting_u64()));
            Q::Close { ino: rng.usually(i), handle, size: opt(rng, |r| r.usually(4096)), wrote: rng.percent(50) }
        }
        17 => Q::CreateOpen {
            parent: ino(rng, known),
            name: name(rng),
            perm: perm(rng),
            umask: perm(rng) & 0o777,
            exclusive: rng.percent(30),
            layout: opt(rng, layout_spec),
            flags: open_flags(rng),
        },
        18 => Q::ReportWrite {
            ino: ino(rng, known),
            size: {
                let v = rng.below(1 << 20);
                rng.usually(v)
            },
        },
        19 => Q::StatFs,
        20 => Q::Access {
            ino: ino(rng, known),
            mask: {
                let v = rng.below(8) as u32;
                rng.usually32(v)
            },
        },
        21 => Q::GetXattr { ino: ino(rng, known), name: xattr_name(rng) },
        22 => {
            let len = if rng.percent(5) { XATTR_SIZE_MAX + 1 } else { rng.index(100) };
            let name = xattr_name(rng);
            let value =
                if name.starts_with("system.") && rng.percent(70) { acl_bytes(rng) } else { rng.biased_bytes(len) };
            Q::SetXattr { ino: ino(rng, known), name, value, mode: XattrMode::Any }
        }
        23 => Q::ListXattr { ino: ino(rng, known) },
        24 => Q::RemoveXattr { ino: ino(rng, known), name: xattr_name(rng) },
        25 if rng.percent(25) => Q::InstantiateExtent { ino: ino(rng, known), offset: rng.interesting_u64() },
        25 if rng.percent(25) => Q::Append { ino: ino(rng, known), len: rng.interesting_u64() },
        25 => Q::GetLayout { ino: ino(rng, known) },
        26 if rng.percent(25) => Q::SetCompositeLayout { ino: ino(rng, known), extents: extent_specs(rng) },
        26 => Q::SetLayout { ino: ino(rng, known), spec: layout_spec(rng) },
        27 if rng.percent(20) => {
            let n = if rng.percent(5) { crate::msg::MAX_REOPEN + 1 } else { rng.index(8) };
            Q::Reopen {
                handles: (0..n)
                    .map(|_| crate::msg::HeldHandle { ino: ino(rng, known), handle: rng.interesting_u64() })
                    .collect(),
            }
        }
        // Acknowledges any number; waits at most a moment (a fuzzer's request must not be held long).
        27 if rng.percent(15) => {
            Q::Watch { acked: rng.interesting_u64(), wait_ms: rng.below(3) as u32, leave: rng.percent(20) }
        }
        27 => [Q::ClusterStatus, Q::OrchestratorStatus, Q::KeepAlive, Q::PlacementStatus, Q::MirrorStatus]
            [rng.index(5)]
        .clone(),
        28 if rng.percent(30) => {
            let spec = crate::locks::LockSpec {
                kind: [crate::locks::LockKind::Posix, crate::locks::LockKind::Flock][rng.index(2)],
                typ: [crate::locks::LockType::Read, crate::locks::LockType::Write, crate::locks::LockType::Unlock]
                    [rng.index(3)],
                start: rng.interesting_u64(),
                end: rng.interesting_u64(),
                pid: rng.interesting_u64() as u32,
            };
            match rng.below(3) {
                0 => Q::TestLock { ino: ino(rng, known), owner: rng.interesting_u64(), spec },
                1 => Q::CancelLock { owner: rng.interesting_u64(), wait_id: rng.interesting_u64() },
                // Never waits: a fuzzer's request must not be held for the wait slice.
                _ => Q::Lock {
                    ino: ino(rng, known),
                    owner: rng.interesting_u64(),
                    spec,
                    wait_ms: 0,
                    wait_id: rng.interesting_u64(),
                    reclaim: rng.percent(10),
                },
            }
        }
        28 => Q::SetOrchestratorMode { mode: [OrchestratorMode::Off, OrchestratorMode::Even][rng.index(2)] },
        29 | 30 => Q::LeaseDir { dir: ino(rng, known) },
        _ => {
            let (dir, token, inos) = pick_or(rng, &known.leases, |r| (ROOT_INO, r.interesting_u64(), Vec::new()));
            let entries = (0..rng.below(8)).map(|_| dir_op(rng, known, &inos)).collect();
            Q::DirBatch { dir: rng.usually(dir), token: rng.usually(token), entries, keep: rng.percent(70) }
        }
    }
}

fn timestamp(rng: &mut Rng) -> Timestamp {
    Timestamp { secs: rng.interesting_u64() as i64, nanos: rng.usually32(0) }
}

fn xattr_name(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => "tessera.layout".into(),
        1 => name(rng),
        2 => crate::acl::ACCESS_XATTR.into(),
        3 => crate::acl::DEFAULT_XATTR.into(),
        _ => format!("user.{}", name(rng)),
    }
}

/// A POSIX ACL in Linux's xattr form: usually the entries of a valid one (in order or not), sometimes
/// unknown tags, wrong permission bits or a cut entry.
fn acl_bytes(rng: &mut Rng) -> Vec<u8> {
    use crate::acl::{GROUP, GROUP_OBJ, MASK, OTHER, USER, USER_OBJ};
    let mut out = crate::acl::XATTR_VERSION.to_le_bytes().to_vec();
    let mut tags = vec![USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER];
    if rng.percent(20) {
        tags.swap(rng.index(6), rng.index(6));
    }
    for tag in tags {
        if matches!(tag, USER | GROUP | MASK) && rng.percent(40) {
            continue;
        }
        let tag = if rng.percent(3) { rng.usually32(0x40) as u16 } else { tag };
        let perm: u16 = if rng.percent(3) { 0o10 } else { rng.index(8) as u16 };
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&rng.usually32(1000).to_le_bytes());
    }
    if rng.percent(5) {
        out.pop();
    }
    out
}

fn dir_op(rng: &mut Rng, known: &Known, reserved: &[Ino]) -> DirOp {
    if rng.percent(30) {
        return DirOp::Unlink { name: name(rng), job: job_id(rng), pid: rng.usually32(7), time: Timestamp::now() };
    }
    DirOp::Create(AsyncCreate {
        ino: pick_or(rng, reserved, |r| ino(r, known)),
        name: name(rng),
        perm: perm(rng),
        uid: rng.usually32(1000),
        gid: rng.usually32(1000),
        time: Timestamp::now(),
        open: opt(rng, open_flags),
        job: job_id(rng),
        pid: rng.usually32(7),
    })
}

/// Longest reservation a generated [`DsRequest::Fallocate`] asks for (see [`defuse`]).
pub const FALLOCATE_CAP: u64 = 1 << 20;

/// Caps what a data request may make a data server reserve on its disk: a space-reserving fallocate of
/// a terabyte is a valid request (an authenticated client may fill the disk, as with writes) and would
/// fill the disk of the machine the fuzzer runs on. Returns whether it changed anything.
pub fn defuse(req: &mut DsRequest) -> bool {
    match req {
        DsRequest::Fallocate { len, punch: false, .. } if *len > FALLOCATE_CAP => {
            *len = FALLOCATE_CAP;
            true
        }
        _ => false,
    }
}

/// [`defuse`] for a call to a forwarding node.
pub fn defuse_ion(call: &mut IonCall) -> bool {
    match call {
        IonCall::Ds { call, .. } => defuse(&mut call.req),
        _ => false,
    }
}

fn object(rng: &mut Rng, known: &Known) -> ObjectId {
    pick_or(rng, &known.objects, |r| r.interesting_u64())
}

fn offset(rng: &mut Rng) -> u64 {
    {
        let v = if rng.percent(50) { rng.below(64) << 12 } else { rng.below(1 << 20) };
        rng.usually(v)
    }
}

fn extents(rng: &mut Rng) -> Vec<Extent> {
    let n = if rng.percent(3) { MAX_EXTENTS + 1 } else { rng.index(8) };
    (0..n)
        .map(|_| Extent {
            offset: offset(rng),
            len: {
                let v = 1 + rng.below(8192) as u32;
                rng.usually32(v)
            },
        })
        .collect()
}

/// A data call to data server `ds` (now and then to another, or marked forwarded) aimed at `known`'s
/// objects, and its payload; one in ten requests is an arbitrary value of any variant. Defused.
pub fn ds_call(rng: &mut Rng, ds: DsId, known: &Known) -> (DsCall, Vec<u8>) {
    let tag = IoTag { origin: origin(rng, 7), ino: ino(rng, known) };
    let mut payload = Vec::new();
    let arbitrary = if rng.percent(10) { arbitrary_value::<DsRequest>(rng, 48) } else { None };
    let mut req = arbitrary.unwrap_or_else(|| match rng.below(17) {
        0 => DsRequest::Ping,
        1..=3 => DsRequest::Read {
            tag,
            object: object(rng, known),
            offset: offset(rng),
            len: {
                let v = rng.below(256 << 10) as u32;
                rng.usually32(v)
            },
        },
        4 => DsRequest::ReadV { tag, object: object(rng, known), extents: extents(rng) },
        5..=7 => {
            let len = rng.index(64 << 10);
            payload = rng.biased_bytes(len);
            DsRequest::Write { tag, object: object(rng, known), offset: offset(rng), sync: rng.percent(2) }
        }
        8 => {
            let extents = extents(rng);
            let total: u64 = extents.iter().map(|e| u64::from(e.len)).sum();
            let len = if total <= 1 << 20 && rng.percent(80) { total as usize } else { rng.index(4096) };
            payload = rng.biased_bytes(len);
            DsRequest::WriteV { tag, object: object(rng, known), extents, sync: false }
        }
        9 => DsRequest::Fallocate {
            tag,
            object: object(rng, known),
            offset: offset(rng),
            len: {
                let v = rng.below(1 << 20);
                rng.usually(v)
            },
            punch: rng.percent(50),
        },
        10 => DsRequest::Truncate { object: object(rng, known), size: offset(rng) },
        11 => DsRequest::Remove { objects: (0..rng.below(4)).map(|_| object(rng, known)).collect() },
        12 => DsRequest::Fsync { tag, object: object(rng, known) },
        13 => DsRequest::Report,
        14 => DsRequest::ListObjects { shard: rng.next_u64() as u8, after: rng.usually(0), max: rng.usually32(16) },
        15 if rng.percent(50) => {
            let n = if rng.percent(5) { crate::msg::MAX_USAGE_OBJECTS + 1 } else { rng.index(4) };
            DsRequest::Usage { objects: (0..n).map(|_| object(rng, known)).collect() }
        }
        15 => DsRequest::Seek { object: object(rng, known), offset: offset(rng), hole: rng.percent(50) },
        _ => DsRequest::Serve(ServeCommand {
            epoch: {
                let v = rng.below(100);
                rng.usually(v)
            },
            target: ServeTarget::Job("fuzz".into()),
            slice_ms: rng.usually32(50),
            fallback_ms: rng.usually32(100),
        }),
    });
    defuse(&mut req);
    let via = rng.percent(5).then(|| Forwarded { ion: rng.usually32(0), requests: rng.usually32(1) });
    let ds = if rng.percent(95) { ds } else { rng.interesting_u64() as u32 };
    let mirror = rng.percent(10).then(|| crate::msg::MirrorCall {
        gen: rng.usually(0),
        stripe: rng.usually32(0),
        replicas: (0..rng.below(4))
            .map(|_| crate::layout::StripeTarget { ds: rng.below(4) as u32, object: object(rng, known) })
            .collect(),
        from_primary: rng.percent(30),
        failed: (0..rng.below(2))
            .map(|_| crate::layout::StripeTarget { ds: rng.below(4) as u32, object: object(rng, known) })
            .collect(),
    });
    (DsCall { ds, req, via, mirror }, payload)
}

#[cfg(test)]
mod tests;
