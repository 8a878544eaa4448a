//! RAID-0 stripe layouts and the stripe math every party shares.
//!
//! A file of layout (stripe size S, count C, targets t_0..t_{C-1}) keeps byte `x` in stripe
//! `k = (x / S) % C`, i.e. in object `t_k.object` at object offset `(x / (S*C)) * S + x % S`.
//!
//! - [`text`]: the `tessera.layout` attribute's text, formatted and parsed.

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
    pub stripe_size: u64,
    /// One target per stripe (the stripe count is `targets.len()`).
    pub targets: Vec<StripeTarget>,
}

/// A requested layout (`setstripe`): unset fields fall back to the directory's or the cluster's default.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LayoutSpec {
    pub stripe_size: Option<u64>,
    /// `Some(0)` or `None` with no other default means "all data servers".
    pub stripe_count: Option<u32>,
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
        Ok(())
    }

    /// Fields of `self` override those of `base`.
    pub fn over(self, base: LayoutSpec) -> LayoutSpec {
        LayoutSpec {
            stripe_size: self.stripe_size.or(base.stripe_size),
            stripe_count: self.stripe_count.or(base.stripe_count),
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
    pub fn stripe_count(&self) -> usize {
        self.targets.len()
    }

    pub fn validate(&self) -> FsResult<()> {
        if self.targets.is_empty() {
            return Err(FsError::invalid("layout with no targets"));
        }
        LayoutSpec { stripe_size: Some(self.stripe_size), stripe_count: None }.validate()
    }

    /// Splits the file range `[offset, offset+len)` into per-object chunks, in file order.
    pub fn chunks(&self, offset: u64, len: u64) -> Vec<Chunk> {
        let s = self.stripe_size;
        let c = self.targets.len() as u64;
        let mut out = Vec::new();
        if s == 0 || c == 0 {
            return out;
        }
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let stripe_unit = pos / s;
            let within = pos % s;
            let n = (s - within).min(end - pos);
            out.push(Chunk {
                stripe: (stripe_unit % c) as usize,
                object_offset: (stripe_unit / c) * s + within,
                file_offset: pos,
                len: n,
            });
            pos += n;
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
        let s = self.stripe_size;
        let c = self.targets.len() as u64;
        let k = stripe as u64;
        let row = s * c;
        let full_rows = file_size / row;
        let rest = file_size % row;
        let in_last = rest.saturating_sub(k * s).min(s);
        full_rows * s + in_last
    }

    /// The file size implied by object `stripe` having `object_size` bytes (the end of its last byte in
    /// the file). Used to recover sizes from the data servers.
    pub fn file_size_from_object(&self, stripe: usize, object_size: u64) -> u64 {
        if object_size == 0 {
            return 0;
        }
        let s = self.stripe_size;
        let c = self.targets.len() as u64;
        let last = object_size - 1;
        let row = last / s;
        let within = last % s;
        row * s * c + stripe as u64 * s + within + 1
    }
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

    fn layout(s: u64, c: usize) -> Layout {
        Layout {
            stripe_size: s,
            targets: (0..c).map(|i| StripeTarget { ds: i as u32, object: 100 + i as u64 }).collect(),
        }
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
        assert!(LayoutSpec { stripe_size: Some(1000), stripe_count: None }.validate().is_err());
        assert!(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2) }.validate().is_ok());
        let merged = LayoutSpec { stripe_size: None, stripe_count: Some(3) }
            .over(LayoutSpec { stripe_size: Some(8192), stripe_count: Some(1) });
        assert_eq!(merged, LayoutSpec { stripe_size: Some(8192), stripe_count: Some(3) });
    }
}
