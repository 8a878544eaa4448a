//! RAID-0 stripe layouts and the stripe math every party shares.
//!
//! A file of layout (stripe size S, count C, targets t_0..t_{C-1}) keeps byte `x` in stripe
//! `k = (x / S) % C`, i.e. in object `t_k.object` at object offset `(x / (S*C)) * S + x % S`.
//!
//! - [`text`]: the `tessera.layout` attribute's text, formatted and parsed.
//!
//! **Composite (progressive) layouts**, like Lustre's PFL: a file is cut into extents `[start, end)` (the
//! last to EOF), each striped as above with its own stripe size, count and targets, over the bytes of its
//! own range (byte `x` of extent `[a, b)` is byte `x - a` of the extent's RAID-0 stripe math). The first
//! extent lives in [`Layout::stripe_size`] / [`Layout::targets`] (so a plain layout is a composite of one
//! extent `[0, EOF)`), the others in [`Layout::extents`]. An extent is *instantiated* (its objects placed)
//! when the file first reaches it; until then it has no targets. Instantiated extents are always a prefix
//! (reaching an extent instantiates every one before it, as Lustre's layout change does), so the *global
//! stripe index* — the position of an object in [`Layout::all_targets`], the first extent's objects first —
//! never changes once given out, and everything past [`Layout::instantiated_end`] is a hole.
//!
//! **Mirrored layouts** (issue 36): an extent with mirror count M > 1 keeps each stripe object as M
//! replicas on M distinct data servers (and failure domains). Replica 0 of a stripe is its
//! [`StripeTarget`] in the extent's `targets` (the *primary*: the ordering point of the stripe's writes,
//! always in sync); the M − 1 others are in the extent's `mirrors` (`mirrors[k]` for stripe `k`), each with
//! its [`ReplicaState`]. An unmirrored extent (M = 1) has no `mirrors` and is exactly the RAID-0 layout
//! above. [`Layout::mirror_gen`] counts the MDS's changes of any replica's place or state: a data server
//! refuses a mirrored write from a client whose layout is older than the one it knows.

mod mirror;
pub mod text;

use crate::error::{FsError, FsResult};
use crate::types::{DsId, ObjectId};
use serde::{Deserialize, Serialize};

/// One stripe's home: which data server holds which object.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct StripeTarget {
    pub ds: DsId,
    pub object: ObjectId,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Layout {
    /// The first extent's stripe size (a plain layout's only one).
    pub stripe_size: u64,
    /// The first extent's objects, one per stripe (its stripe count is `targets.len()`): replica 0 of
    /// each stripe when the extent is mirrored.
    pub targets: Vec<StripeTarget>,
    /// Composite layouts: the extents after the first, in file order (the first ends where
    /// `extents[0]` starts). Empty for a plain layout.
    pub extents: Vec<Component>,
    /// The first extent's mirror count M (1: unmirrored).
    pub mirror_count: u8,
    /// The first extent's other replicas: `mirrors[k]` holds the M − 1 replicas of stripe `k` after
    /// `targets[k]`. Empty when M = 1.
    pub mirrors: Vec<Vec<Replica>>,
    /// Generation of the replicas' places and states: bumped by the MDS at every change of either.
    pub mirror_gen: u64,
}

/// Most replicas of one stripe object.
pub const MAX_MIRRORS: u8 = 3;

/// One replica of a mirrored stripe after the first, and its state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Replica {
    pub target: StripeTarget,
    pub state: ReplicaState,
}

/// Whether a replica holds every acknowledged write of its stripe.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ReplicaState {
    /// Holds every acknowledged write: written with the others, read from.
    InSync,
    /// Missed writes (its server was down or unreachable): never read, not written, until resynced.
    Stale,
    /// Being brought up to date from an in-sync replica: written with the others, not yet read from.
    Resyncing,
}

impl ReplicaState {
    /// The word `tessera getstripe` prints: `in-sync`, `stale`, `resyncing`.
    pub fn word(self) -> &'static str {
        match self {
            ReplicaState::InSync => "in-sync",
            ReplicaState::Stale => "stale",
            ReplicaState::Resyncing => "resyncing",
        }
    }

    /// Whether writes go to this replica.
    pub fn written(self) -> bool {
        !matches!(self, ReplicaState::Stale)
    }
}

impl std::fmt::Display for ReplicaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// The end of the last extent of a composite layout (`-E -1`, "to EOF").
pub const EOF: u64 = u64::MAX;
/// Most extents of one composite layout (Lustre: 64 components; here fewer, the layout travels often).
pub const MAX_EXTENTS: usize = 16;
/// Most stripes of one extent (and of a plain layout).
pub const MAX_STRIPES: usize = 4096;

/// One extent (Lustre: component) of a composite layout after the first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Component {
    pub start: u64,
    /// Exclusive; [`EOF`] for the last.
    pub end: u64,
    pub stripe_size: u64,
    /// The stripe count asked for (0: all targets); what was placed is `targets.len()`.
    pub stripe_count: u32,
    /// Empty until the extent is instantiated (the file reaches it).
    pub targets: Vec<StripeTarget>,
    /// The extent's mirror count M (1: unmirrored), asked for and then placed.
    pub mirror_count: u8,
    /// The other replicas of each stripe, as [`Layout::mirrors`]; empty until instantiated or when M = 1.
    pub mirrors: Vec<Vec<Replica>>,
}

/// One extent of a requested composite layout (`setstripe -E END [-c COUNT] [-S SIZE]`): it starts where
/// the one before it ends (the first at 0); unset fields take the cluster's defaults.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ExtentSpec {
    /// Exclusive end; [`EOF`] (`-E -1`) for the last.
    pub end: u64,
    pub stripe_size: Option<u64>,
    /// `Some(0)` means all targets (`-c -1`).
    pub stripe_count: Option<u32>,
    /// Mirror count M (`-N`); unset: the cluster's default.
    pub mirrors: Option<u8>,
}

/// Checks a requested composite layout: 1..=[`MAX_EXTENTS`] extents, ends increasing, multiples of
/// [`MIN_STRIPE_SIZE`], the last to [`EOF`], valid stripe sizes.
pub fn validate_extents(specs: &[ExtentSpec]) -> FsResult<()> {
    if specs.is_empty() || specs.len() > MAX_EXTENTS {
        return Err(FsError::invalid(format!(
            "a composite layout has 1 to {MAX_EXTENTS} extents, not {}",
            specs.len()
        )));
    }
    let mut start = 0u64;
    for (i, e) in specs.iter().enumerate() {
        LayoutSpec { stripe_size: e.stripe_size, stripe_count: e.stripe_count, mirrors: e.mirrors }.validate()?;
        if e.end <= start {
            return Err(FsError::invalid(format!("extent {i} ends at {} but starts at {start}", e.end)));
        }
        if e.end != EOF && e.end % MIN_STRIPE_SIZE != 0 {
            return Err(FsError::invalid(format!("extent end {} is not a multiple of {MIN_STRIPE_SIZE}", e.end)));
        }
        if e.stripe_count.is_some_and(|c| c as usize > MAX_STRIPES) {
            return Err(FsError::invalid(format!("extent {i}: more than {MAX_STRIPES} stripes")));
        }
        start = e.end;
    }
    if start != EOF {
        return Err(FsError::invalid("the last extent of a composite layout must end at EOF (-E -1)"));
    }
    Ok(())
}

/// One extent of a layout seen uniformly (the first one included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentView<'a> {
    pub index: usize,
    pub start: u64,
    pub end: u64,
    pub stripe_size: u64,
    /// Asked-for count (the placed one for the first extent).
    pub stripe_count: u32,
    pub targets: &'a [StripeTarget],
    /// Global stripe index of `targets[0]`.
    pub first_stripe: usize,
    /// Mirror count M (1: unmirrored).
    pub mirror_count: u8,
    /// The other replicas of each stripe (empty when M = 1 or not instantiated).
    pub mirrors: &'a [Vec<Replica>],
}

impl ExtentView<'_> {
    pub fn instantiated(&self) -> bool {
        !self.targets.is_empty()
    }
}

/// A requested layout (`setstripe`): unset fields fall back to the directory's or the cluster's default.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LayoutSpec {
    pub stripe_size: Option<u64>,
    /// `Some(0)` or `None` with no other default means "all data servers".
    pub stripe_count: Option<u32>,
    /// Mirror count M, 1..=[`MAX_MIRRORS`] (`setstripe -N`); `None`: the directory's or the cluster's.
    pub mirrors: Option<u8>,
}

pub const MIN_STRIPE_SIZE: u64 = 4096;
pub const MAX_STRIPE_SIZE: u64 = 1 << 30;

impl LayoutSpec {
    pub fn validate(&self) -> FsResult<()> {
        if let Some(s) = self.stripe_size {
            if !(MIN_STRIPE_SIZE..=MAX_STRIPE_SIZE).contains(&s) || s % MIN_STRIPE_SIZE != 0 {
                return Err(FsError::invalid(format!(
                    "stripe size {s} must be a multiple of {MIN_STRIPE_SIZE} between {MIN_STRIPE_SIZE} and {MAX_STRIPE_SIZE}"
                )));
            }
        }
        if let Some(m) = self.mirrors {
            if !(1..=MAX_MIRRORS).contains(&m) {
                return Err(FsError::invalid(format!("mirror count {m} must be between 1 and {MAX_MIRRORS}")));
            }
        }
        Ok(())
    }

    /// Fields of `self` override those of `base`.
    pub fn over(self, base: LayoutSpec) -> LayoutSpec {
        LayoutSpec {
            stripe_size: self.stripe_size.or(base.stripe_size),
            stripe_count: self.stripe_count.or(base.stripe_count),
            mirrors: self.mirrors.or(base.mirrors),
        }
    }
}

/// A piece of a file range that lives in one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Index into `Layout::targets`.
    pub stripe: usize,
    /// Offset inside the object.
    pub object_offset: u64,
    /// Offset in the file.
    pub file_offset: u64,
    pub len: u64,
}

impl Layout {
    /// A plain (one-extent) layout.
    pub fn plain(stripe_size: u64, targets: Vec<StripeTarget>) -> Layout {
        Layout { stripe_size, targets, extents: Vec::new(), mirror_count: 1, mirrors: Vec::new(), mirror_gen: 0 }
    }

    /// A plain layout whose stripe `k` has replicas `targets[k]` (primary first, all in sync).
    pub fn mirrored(stripe_size: u64, targets: Vec<Vec<StripeTarget>>) -> Layout {
        let m = targets.first().map_or(1, Vec::len) as u8;
        let mut l = Layout::plain(stripe_size, targets.iter().filter_map(|r| r.first().copied()).collect());
        if m > 1 {
            l.mirror_count = m;
            l.mirrors = targets
                .iter()
                .map(|r| r[1..].iter().map(|&target| Replica { target, state: ReplicaState::InSync }).collect())
                .collect();
        }
        l
    }

    /// Whether any extent keeps more than one replica of its stripes.
    pub fn is_mirrored(&self) -> bool {
        self.mirror_count > 1 || self.extents.iter().any(|e| e.mirror_count > 1)
    }

    /// The replicas of global stripe `stripe` after its primary (empty when unmirrored or out of range).
    pub fn mirrors_of(&self, stripe: usize) -> &[Replica] {
        match self.locate(stripe) {
            Some((e, k)) => e.mirrors.get(k).map_or(&[][..], Vec::as_slice),
            None => &[],
        }
    }

    /// [`Layout::mirrors_of`], to change them.
    pub fn mirrors_of_mut(&mut self, stripe: usize) -> Option<&mut Vec<Replica>> {
        let mut k = stripe;
        if k < self.targets.len() {
            return self.mirrors.get_mut(k);
        }
        k -= self.targets.len();
        for e in &mut self.extents {
            if k < e.targets.len() {
                return e.mirrors.get_mut(k);
            }
            k -= e.targets.len();
        }
        None
    }

    /// Every replica of global stripe `stripe`, the primary first (in sync by definition).
    pub fn replicas(&self, stripe: usize) -> Vec<Replica> {
        let Some(primary) = self.target(stripe) else { return Vec::new() };
        let mut out = vec![Replica { target: primary, state: ReplicaState::InSync }];
        out.extend_from_slice(self.mirrors_of(stripe));
        out
    }

    /// Every replica of every stripe as (global stripe, object), stripe by stripe, the primary first.
    pub fn stripe_objects(&self) -> impl Iterator<Item = (usize, StripeTarget)> + '_ {
        (0..self.stripe_count()).flat_map(move |k| self.replicas(k).into_iter().map(move |r| (k, r.target)))
    }

    /// Every object of the layout, every replica of every stripe (the primaries in global stripe order
    /// first, then the other replicas).
    pub fn all_objects(&self) -> impl Iterator<Item = StripeTarget> + '_ {
        let others = std::iter::once(&self.mirrors)
            .chain(self.extents.iter().map(|e| &e.mirrors))
            .flat_map(|m| m.iter().flat_map(|r| r.iter().map(|x| x.target)));
        self.all_targets().copied().chain(others)
    }

    pub fn is_composite(&self) -> bool {
        !self.extents.is_empty()
    }

    /// Objects of every instantiated extent (the global stripe count).
    pub fn stripe_count(&self) -> usize {
        self.targets.len() + self.extents.iter().map(|e| e.targets.len()).sum::<usize>()
    }

    /// Every object, in global stripe order (the first extent's first).
    pub fn all_targets(&self) -> impl Iterator<Item = &StripeTarget> + '_ {
        self.targets.iter().chain(self.extents.iter().flat_map(|e| e.targets.iter()))
    }

    /// The object of global stripe `stripe`, to change it.
    pub fn target_mut(&mut self, stripe: usize) -> Option<&mut StripeTarget> {
        self.targets.iter_mut().chain(self.extents.iter_mut().flat_map(|e| e.targets.iter_mut())).nth(stripe)
    }

    /// The object of global stripe `stripe`.
    pub fn target(&self, stripe: usize) -> Option<StripeTarget> {
        self.all_targets().nth(stripe).copied()
    }

    pub fn extent_count(&self) -> usize {
        1 + self.extents.len()
    }

    /// Extent `i` (0 = the first), if any.
    pub fn extent(&self, i: usize) -> Option<ExtentView<'_>> {
        if i == 0 {
            return Some(ExtentView {
                index: 0,
                start: 0,
                end: self.extents.first().map_or(EOF, |e| e.start),
                stripe_size: self.stripe_size,
                stripe_count: self.targets.len() as u32,
                targets: &self.targets,
                first_stripe: 0,
                mirror_count: self.mirror_count,
                mirrors: &self.mirrors,
            });
        }
        let e = self.extents.get(i - 1)?;
        let first_stripe = self.targets.len() + self.extents[..i - 1].iter().map(|e| e.targets.len()).sum::<usize>();
        Some(ExtentView {
            index: i,
            start: e.start,
            end: e.end,
            stripe_size: e.stripe_size,
            stripe_count: e.stripe_count,
            targets: &e.targets,
            first_stripe,
            mirror_count: e.mirror_count,
            mirrors: &e.mirrors,
        })
    }

    pub fn extent_views(&self) -> impl Iterator<Item = ExtentView<'_>> + '_ {
        (0..self.extent_count()).filter_map(|i| self.extent(i))
    }

    /// The extent holding file offset `offset`.
    pub fn extent_index_at(&self, offset: u64) -> usize {
        self.extents.partition_point(|e| e.start <= offset)
    }

    /// The end of the instantiated prefix: bytes from here on are a hole with no objects ([`EOF`] when
    /// every extent is instantiated, as a plain layout always is).
    pub fn instantiated_end(&self) -> u64 {
        self.extent_views().take_while(|e| e.instantiated()).last().map_or(0, |e| e.end)
    }

    /// The extent and local stripe of global stripe `stripe`.
    fn locate(&self, stripe: usize) -> Option<(ExtentView<'_>, usize)> {
        self.extent_views().find_map(|e| {
            (stripe >= e.first_stripe && stripe < e.first_stripe + e.targets.len())
                .then(|| (e, stripe - e.first_stripe))
        })
    }

    pub fn validate(&self) -> FsResult<()> {
        if self.targets.is_empty() {
            return Err(FsError::invalid("layout with no targets"));
        }
        if self.extents.len() + 1 > MAX_EXTENTS {
            return Err(FsError::invalid(format!("layout with more than {MAX_EXTENTS} extents")));
        }
        let mut pending = false;
        for e in self.extent_views() {
            LayoutSpec { stripe_size: Some(e.stripe_size), stripe_count: None, mirrors: Some(e.mirror_count) }
                .validate()?;
            check_mirrors(&e)?;
            if e.end <= e.start {
                return Err(FsError::invalid(format!("extent {} is empty", e.index)));
            }
            if e.targets.len() > MAX_STRIPES {
                return Err(FsError::invalid(format!("extent {} has over {MAX_STRIPES} stripes", e.index)));
            }
            if pending && e.instantiated() {
                return Err(FsError::invalid("instantiated extent after one that is not"));
            }
            pending |= !e.instantiated();
        }
        for w in self.extent_views().collect::<Vec<_>>().windows(2) {
            if w[1].start != w[0].end {
                return Err(FsError::invalid(format!(
                    "extent {} does not start where {} ends",
                    w[1].index, w[0].index
                )));
            }
        }
        if self.extents.last().is_some_and(|e| e.end != EOF) {
            return Err(FsError::invalid("the last extent does not end at EOF"));
        }
        Ok(())
    }

    /// Splits the file range `[offset, offset+len)` into per-object chunks, in file order (`stripe` is the
    /// global stripe index). Parts in extents not instantiated yet have no object and give no chunk: a
    /// reader sees a hole there, a writer must instantiate them first ([`Layout::instantiated_end`]).
    pub fn chunks(&self, offset: u64, len: u64) -> Vec<Chunk> {
        let mut out = Vec::new();
        let end = offset.saturating_add(len);
        for e in self.extent_views() {
            if !e.instantiated() || e.end <= offset {
                continue;
            }
            if e.start >= end {
                break;
            }
            let (a, b) = (offset.max(e.start), end.min(e.end));
            if a >= b {
                continue; // only in a layout that fails `validate` (an extent ending before it starts)
            }
            raid0_chunks(e.stripe_size, e.targets.len() as u64, a - e.start, b - a, &mut |mut c| {
                c.stripe += e.first_stripe;
                c.file_offset += e.start;
                out.push(c)
            });
        }
        out
    }

    /// The part of object `stripe` that holds the file range `[offset, offset+len)`: one contiguous range
    /// of the object (empty when the range misses it), computed without walking the stripe units.
    pub fn object_range(&self, stripe: usize, offset: u64, len: u64) -> std::ops::Range<u64> {
        self.object_size(stripe, offset)..self.object_size(stripe, offset.saturating_add(len))
    }

    /// Size object `stripe` has when the file is exactly `file_size` bytes long.
    pub fn object_size(&self, stripe: usize, file_size: u64) -> u64 {
        match self.locate(stripe) {
            Some((e, k)) => {
                // (Not `clamp`: a layout that fails `validate` may have end < start; nothing here panics.)
                let local = file_size.max(e.start).min(e.end).saturating_sub(e.start);
                raid0_object_size(e.stripe_size, e.targets.len() as u64, k as u64, local)
            }
            None => 0,
        }
    }

    /// The file size implied by object `stripe` having `object_size` bytes (the end of its last byte in
    /// the file). Used to recover sizes from the data servers.
    pub fn file_size_from_object(&self, stripe: usize, object_size: u64) -> u64 {
        if object_size == 0 {
            return 0;
        }
        let Some((e, k)) = self.locate(stripe) else { return 0 };
        let s = e.stripe_size;
        if s == 0 {
            return 0;
        }
        let c = e.targets.len() as u64;
        let last = object_size - 1;
        let row = last / s;
        let within = last % s;
        let local = row
            .saturating_mul(s)
            .saturating_mul(c)
            .saturating_add((k as u64).saturating_mul(s))
            .saturating_add(within + 1);
        let local = local.min(e.end.saturating_sub(e.start));
        e.start.saturating_add(local)
    }
}

/// An extent's replicas: none when M = 1 or not instantiated, else M − 1 per stripe, each stripe's on
/// distinct data servers.
fn check_mirrors(e: &ExtentView<'_>) -> FsResult<()> {
    if e.mirror_count <= 1 || !e.instantiated() {
        if !e.mirrors.is_empty() {
            return Err(FsError::invalid(format!("extent {} has replicas it should not", e.index)));
        }
        return Ok(());
    }
    if e.mirrors.len() != e.targets.len() {
        return Err(FsError::invalid(format!(
            "extent {}: replicas for {} of {} stripes",
            e.index,
            e.mirrors.len(),
            e.targets.len()
        )));
    }
    for (k, (t, others)) in e.targets.iter().zip(e.mirrors).enumerate() {
        if others.len() + 1 != e.mirror_count as usize {
            return Err(FsError::invalid(format!(
                "extent {} stripe {k}: {} replicas, not {}",
                e.index,
                others.len() + 1,
                e.mirror_count
            )));
        }
        let servers: Vec<DsId> = std::iter::once(t.ds).chain(others.iter().map(|r| r.target.ds)).collect();
        if (1..servers.len()).any(|i| servers[..i].contains(&servers[i])) {
            return Err(FsError::invalid(format!("extent {} stripe {k}: two replicas on one data server", e.index)));
        }
    }
    Ok(())
}

/// RAID-0 chunks of `[offset, offset+len)` over `c` objects of stripe size `s` (offsets relative).
fn raid0_chunks(s: u64, c: u64, offset: u64, len: u64, out: &mut impl FnMut(Chunk)) {
    if s == 0 || c == 0 {
        return;
    }
    let end = offset.saturating_add(len);
    let mut pos = offset;
    while pos < end {
        let stripe_unit = pos / s;
        let within = pos % s;
        let n = (s - within).min(end - pos);
        out(Chunk {
            stripe: (stripe_unit % c) as usize,
            object_offset: (stripe_unit / c) * s + within,
            file_offset: pos,
            len: n,
        });
        pos += n;
    }
}

/// Bytes object `k` of a RAID-0 stripe set of `c` objects in stripes of `s` bytes holds when the set
/// holds `file_size` bytes (object `k` holds stripes `k`, `k + c`, ...; a set that is not a whole number
/// of stripe rows has its larger objects first).
pub fn raid0_object_size(s: u64, c: u64, k: u64, file_size: u64) -> u64 {
    if s == 0 || c == 0 {
        return 0;
    }
    // Saturating: a decoded layout may declare any stripe size and count.
    let row = s.saturating_mul(c);
    let full_rows = file_size / row;
    let rest = file_size % row;
    let in_last = rest.saturating_sub(k.saturating_mul(s)).min(s);
    full_rows.saturating_mul(s).saturating_add(in_last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn object_range_is_the_envelope_of_the_chunks() {
        let mut rng = rand::thread_rng();
        for _ in 0..2000 {
            let l = layout(4096 * rng.gen_range(1..5), rng.gen_range(1..6));
            let (off, len) = (rng.gen_range(0..200_000u64), rng.gen_range(1..100_000u64));
            for s in 0..l.targets.len() {
                let mine: Vec<Chunk> = l.chunks(off, len).into_iter().filter(|c| c.stripe == s).collect();
                let want = match (mine.first(), mine.last()) {
                    (Some(a), Some(b)) => a.object_offset..b.object_offset + b.len,
                    _ => 0..0,
                };
                let got = l.object_range(s, off, len);
                assert_eq!(got.is_empty(), want.is_empty(), "{off}+{len} stripe {s}");
                if !want.is_empty() {
                    assert_eq!(got, want, "{off}+{len} stripe {s}");
                    assert_eq!(mine.iter().map(|c| c.len).sum::<u64>(), got.end - got.start, "contiguous");
                }
            }
        }
    }

    #[test]
    fn mirrored_layouts_keep_replicas_per_stripe_on_distinct_servers() {
        let t = |ds, object| StripeTarget { ds, object };
        let l = Layout::mirrored(65536, vec![vec![t(0, 1), t(1, 2)], vec![t(2, 3), t(3, 4)]]);
        l.validate().unwrap();
        assert!(l.is_mirrored());
        assert_eq!(l.mirror_count, 2);
        assert_eq!(l.targets, vec![t(0, 1), t(2, 3)], "replica 0 is the stripe's target");
        assert_eq!(l.replicas(1).iter().map(|r| r.target).collect::<Vec<_>>(), vec![t(2, 3), t(3, 4)]);
        assert_eq!(l.mirrors_of(0), &[Replica { target: t(1, 2), state: ReplicaState::InSync }]);
        assert_eq!(l.all_objects().count(), 4);
        // The stripe math does not change with mirrors.
        assert_eq!(l.chunks(0, 200_000), Layout::plain(65536, l.targets.clone()).chunks(0, 200_000));
        let mut bad = l.clone();
        bad.mirrors[1][0].target.ds = 2;
        assert!(bad.validate().is_err(), "two replicas on one server");
        let mut bad = l.clone();
        bad.mirrors.pop();
        assert!(bad.validate().is_err(), "a stripe without its replicas");
        let mut bad = l.clone();
        bad.mirror_count = 4;
        assert!(bad.validate().is_err(), "more than MAX_MIRRORS");
        let mut stale = l.clone();
        stale.mirrors_of_mut(1).unwrap()[0].state = ReplicaState::Stale;
        assert_eq!(stale.mirrors_of(1)[0].state.word(), "stale");
        assert!(!ReplicaState::Stale.written() && ReplicaState::Resyncing.written());
        // One copy: exactly the layout it always was.
        let one = Layout::mirrored(65536, vec![vec![t(0, 1)], vec![t(2, 3)]]);
        assert_eq!(one, Layout::plain(65536, vec![t(0, 1), t(2, 3)]));
        assert!(LayoutSpec { mirrors: Some(0), ..Default::default() }.validate().is_err());
        assert!(LayoutSpec { mirrors: Some(3), ..Default::default() }.validate().is_ok());
    }

    fn layout(s: u64, c: usize) -> Layout {
        Layout::plain(s, (0..c).map(|i| StripeTarget { ds: i as u32, object: 100 + i as u64 }).collect())
    }

    #[test]
    fn chunks_cover_range_exactly() {
        let mut rng = rand::thread_rng();
        for _ in 0..2000 {
            let s = 4096 * rng.gen_range(1..8u64);
            let c = rng.gen_range(1..6usize);
            let l = layout(s, c);
            let off = rng.gen_range(0..200_000u64);
            let len = rng.gen_range(0..100_000u64);
            let ch = l.chunks(off, len);
            let total: u64 = ch.iter().map(|c| c.len).sum();
            assert_eq!(total, len);
            let mut pos = off;
            for c in &ch {
                assert_eq!(c.file_offset, pos);
                // Re-derive the mapping byte-wise for the first and last byte.
                for x in [c.file_offset, c.file_offset + c.len - 1] {
                    let k = (x / s) % l.targets.len() as u64;
                    let oo = (x / (s * l.targets.len() as u64)) * s + x % s;
                    assert_eq!(k as usize, c.stripe);
                    assert_eq!(oo, c.object_offset + (x - c.file_offset));
                }
                pos += c.len;
            }
        }
    }

    #[test]
    fn object_sizes_match_bytewise_count() {
        for c in 1..5 {
            let l = layout(4096, c);
            for size in [0u64, 1, 4095, 4096, 4097, 8192, 3 * 4096 + 5, 4096 * 4 * 3 + 7, 100_000] {
                let mut per = vec![0u64; c];
                for ch in l.chunks(0, size) {
                    per[ch.stripe] = per[ch.stripe].max(ch.object_offset + ch.len);
                }
                for (k, &p) in per.iter().enumerate() {
                    assert_eq!(l.object_size(k, size), p, "c={c} size={size} k={k}");
                    if p > 0 {
                        assert!(l.file_size_from_object(k, p) <= size);
                    }
                }
                let recovered = (0..c).map(|k| l.file_size_from_object(k, per[k])).max().unwrap_or(0);
                assert_eq!(recovered, size, "c={c}");
            }
        }
    }

    #[test]
    fn spec_validation() {
        assert!(LayoutSpec { stripe_size: Some(1000), stripe_count: None, mirrors: None }.validate().is_err());
        assert!(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: None }.validate().is_ok());
        let merged = LayoutSpec { stripe_size: None, stripe_count: Some(3), mirrors: None }.over(LayoutSpec {
            stripe_size: Some(8192),
            stripe_count: Some(1),
            mirrors: None,
        });
        assert_eq!(merged, LayoutSpec { stripe_size: Some(8192), stripe_count: Some(3), mirrors: None });
    }

    /// `[0,1M): 64K×1`, `[1M,3M): 128K×3`, `[3M,EOF): 64K×2`; the first `inst` extents instantiated.
    fn composite(inst: usize) -> Layout {
        let t = |n: usize, base: u64| (0..n).map(|i| StripeTarget { ds: i as u32, object: base + i as u64 }).collect();
        let mut l = Layout::plain(65536, t(1, 100));
        l.extents = vec![
            Component {
                start: 1 << 20,
                end: 3 << 20,
                stripe_size: 131072,
                stripe_count: 3,
                targets: t(3, 200),
                mirror_count: 1,
                mirrors: vec![],
            },
            Component {
                start: 3 << 20,
                end: EOF,
                stripe_size: 65536,
                stripe_count: 2,
                targets: t(2, 300),
                mirror_count: 1,
                mirrors: vec![],
            },
        ];
        for e in l.extents.iter_mut().skip(inst.saturating_sub(1)) {
            e.targets.clear();
        }
        l
    }

    /// The mapping byte by byte: (global stripe, object offset) of file byte `x`, or None in a hole.
    fn byte_home(x: u64) -> Option<(usize, u64)> {
        let (start, s, c, first) = if x < 1 << 20 {
            (0, 65536, 1, 0)
        } else if x < 3 << 20 {
            (1 << 20, 131072, 3, 1)
        } else {
            (3 << 20, 65536, 2, 4)
        };
        let r = x - start;
        Some((first + ((r / s) % c) as usize, (r / (s * c)) * s + r % s))
    }

    #[test]
    fn composite_offsets_map_to_their_extent_then_stripe_and_object() {
        let l = composite(3);
        l.validate().unwrap();
        assert_eq!(l.stripe_count(), 6);
        assert_eq!(l.instantiated_end(), EOF);
        assert_eq!(l.target(1).unwrap().object, 200);
        assert_eq!(l.target(5).unwrap().object, 301);
        assert_eq!((l.extent_index_at(0), l.extent_index_at((1 << 20) - 1)), (0, 0));
        assert_eq!((l.extent_index_at(1 << 20), l.extent_index_at(3 << 20), l.extent_index_at(EOF - 1)), (1, 2, 2));
        // Boundaries, both sides, and ranges across them.
        for x in [0, 65535, 65536, (1 << 20) - 1, 1 << 20, (1 << 20) + 131072, (3 << 20) - 1, 3 << 20, 5 << 20] {
            let ch = l.chunks(x, 1);
            assert_eq!(ch.len(), 1);
            assert_eq!(Some((ch[0].stripe, ch[0].object_offset)), byte_home(x), "byte {x}");
        }
        let mut rng = rand::thread_rng();
        for _ in 0..500 {
            let (off, len) = (rng.gen_range(0..5u64 << 20), rng.gen_range(0..2u64 << 20));
            let ch = l.chunks(off, len);
            assert_eq!(ch.iter().map(|c| c.len).sum::<u64>(), len);
            let mut pos = off;
            for c in &ch {
                assert_eq!(c.file_offset, pos);
                for x in [c.file_offset, c.file_offset + c.len - 1] {
                    assert_eq!(byte_home(x), Some((c.stripe, c.object_offset + (x - c.file_offset))), "byte {x}");
                }
                pos += c.len;
            }
            for s in 0..l.stripe_count() {
                let mine: Vec<&Chunk> = ch.iter().filter(|c| c.stripe == s).collect();
                let r = l.object_range(s, off, len);
                match (mine.first(), mine.last()) {
                    (Some(a), Some(b)) => assert_eq!(r, a.object_offset..b.object_offset + b.len, "{off}+{len} {s}"),
                    _ => assert!(r.is_empty(), "{off}+{len} stripe {s}: {r:?}"),
                }
            }
        }
    }

    #[test]
    fn composite_sizes_map_back_through_the_extents() {
        let l = composite(3);
        for size in
            [0u64, 1, 65536, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (2 << 20) + 12345, 3 << 20, (3 << 20) + 70000]
        {
            let mut per = vec![0u64; l.stripe_count()];
            for c in l.chunks(0, size) {
                per[c.stripe] = per[c.stripe].max(c.object_offset + c.len);
            }
            for (k, &p) in per.iter().enumerate() {
                assert_eq!(l.object_size(k, size), p, "size {size} stripe {k}");
                assert!(l.file_size_from_object(k, p) <= size);
            }
            let recovered = (0..per.len()).map(|k| l.file_size_from_object(k, per[k])).max().unwrap_or(0);
            assert_eq!(recovered, size);
        }
    }

    #[test]
    fn extents_not_instantiated_are_holes_after_an_instantiated_prefix() {
        let l = composite(1);
        l.validate().unwrap();
        assert_eq!(l.instantiated_end(), 1 << 20);
        assert_eq!(l.stripe_count(), 1);
        let ch = l.chunks((1 << 20) - 10, 100);
        assert_eq!(ch.len(), 1, "only the instantiated part has an object");
        assert_eq!(ch[0].len, 10);
        assert_eq!(composite(2).instantiated_end(), 3 << 20);
        assert_eq!(l.object_size(0, 5 << 20), 1 << 20, "the first extent's object ends at its extent's end");
        // A later extent instantiated before an earlier one, gaps, a last extent short of EOF: refused.
        let mut bad = composite(3);
        bad.extents[0].targets.clear();
        assert!(bad.validate().is_err());
        let mut bad = composite(3);
        bad.extents[1].start += 4096;
        assert!(bad.validate().is_err());
        let mut bad = composite(3);
        bad.extents[1].end = 8 << 20;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn extent_specs_are_checked() {
        let e = |end, c| ExtentSpec { end, stripe_size: None, stripe_count: Some(c), mirrors: None };
        assert!(validate_extents(&[e(1 << 20, 1), e(EOF, 2)]).is_ok());
        assert!(validate_extents(&[e(EOF, 2)]).is_ok());
        assert!(validate_extents(&[]).is_err());
        assert!(validate_extents(&[e(1 << 20, 1)]).is_err(), "must end at EOF");
        assert!(validate_extents(&[e(2 << 20, 1), e(1 << 20, 1), e(EOF, 1)]).is_err(), "ends increase");
        assert!(validate_extents(&[e(1000, 1), e(EOF, 1)]).is_err(), "4 KiB multiples");
        let bad_size = ExtentSpec { end: EOF, stripe_size: Some(1000), stripe_count: None, mirrors: None };
        assert!(validate_extents(&[bad_size]).is_err());
    }

    #[test]
    fn the_stripe_math_never_panics_on_layouts_that_fail_validation() {
        use arbitrary::{Arbitrary, Unstructured};
        let mut rng = rand::thread_rng();
        let mut composite = 0;
        for _ in 0..5000 {
            let bytes: Vec<u8> = (0..rng.gen_range(0..1500)).map(|_| rng.gen()).collect();
            let Ok(mut l) = Layout::arbitrary(&mut Unstructured::new(&bytes)) else { continue };
            // Keep the stripe units sane (as any decoded frame's could be anything, but the loops in
            // `chunks` walk stripe units: a 1-byte stripe over a huge range is slow, not a panic).
            l.stripe_size = l.stripe_size.max(4096);
            for e in &mut l.extents {
                e.stripe_size = e.stripe_size.max(4096);
            }
            let _ = l.validate();
            let off = rng.gen::<u64>() >> rng.gen_range(0..64);
            let _ = l.chunks(off, rng.gen_range(0..1 << 16));
            for s in 0..l.stripe_count().min(8) + 1 {
                let _ = l.object_size(s, rng.gen());
                let _ = l.file_size_from_object(s, rng.gen());
                let _ = l.object_range(s, off, rng.gen());
            }
            let _ = l.instantiated_end();
            let _ = l.extent_index_at(off);
            let _ = text::format_layout(&l);
            composite += usize::from(l.is_composite());
        }
        assert!(composite > 100, "only {composite} composite layouts generated");
    }
}
