//! Deterministic pseudo-random test data, so failures are reproducible.

/// `len` bytes of a xorshift sequence seeded by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_seed_same_bytes() {
        assert_eq!(super::pattern(7, 100), super::pattern(7, 100));
        assert_ne!(super::pattern(7, 100), super::pattern(8, 100));
        assert_eq!(super::pattern(1, 13).len(), 13);
    }
}
