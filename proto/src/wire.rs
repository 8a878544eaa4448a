//! bincode 2 (serde mode) with a decode limit, so a hostile length prefix cannot make us allocate.

use serde::{de::DeserializeOwned, Serialize};

/// Largest encoded header accepted (payload data is never encoded, so headers are small).
pub const MAX_HEADER: usize = 1 << 20;
/// Largest payload of one request or response (data requests are split below this); raw bytes after
/// the header, never encoded (re-exported by [`crate::frame`]).
pub const MAX_PAYLOAD: usize = 64 << 20;

fn config<const LIMIT: usize>() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<LIMIT>()
}

/// Why a value did not encode or decode (the bincode error is the source).
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("encode")]
    Encode(#[source] bincode::error::EncodeError),
    #[error("decode")]
    Decode(#[source] bincode::error::DecodeError),
    #[error("decode: {0} trailing bytes")]
    Trailing(usize),
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, WireError> {
    bincode::serde::encode_to_vec(value, config::<MAX_HEADER>()).map_err(WireError::Encode)
}

/// Decodes exactly `bytes` (trailing bytes are an error: a frame is one value), allocating at most
/// [`MAX_HEADER`] bytes for what they declare.
///
/// bincode counts against the limit what the value takes in memory (a string's declared length before
/// its bytes are read, 8 bytes for a `u64` however short its varint): never more than [`INFLATION`] times
/// what a valid encoding holds. So the limit follows the input's size, and a 20-byte header declaring a
/// string of a MiB fails at once instead of having a MiB allocated and zeroed first (found by the
/// structured fuzz tests, [`crate::fuzz`]); longer inputs keep [`MAX_HEADER`].
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() <= SMALL {
        decode_bounded::<T, { SMALL * INFLATION }>(bytes)
    } else if bytes.len() <= MEDIUM {
        decode_bounded::<T, { MEDIUM * INFLATION }>(bytes)
    } else {
        decode_bounded::<T, MAX_HEADER>(bytes)
    }
}

/// Most memory a decoded value claims per encoded byte (a `u64` in a one-byte varint).
pub const INFLATION: usize = 8;
const SMALL: usize = 4 << 10;
const MEDIUM: usize = 64 << 10;

/// [`decode`] with another bound, for values that are not frame headers (the MDS journal's records,
/// whose own bound is larger).
pub fn decode_bounded<T: DeserializeOwned, const LIMIT: usize>(bytes: &[u8]) -> Result<T, WireError> {
    let (v, used) = bincode::serde::decode_from_slice(bytes, config::<LIMIT>()).map_err(WireError::Decode)?;
    if used != bytes.len() {
        return Err(WireError::Trailing(bytes.len() - used));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_the_callers() {
        let big = vec![1u8; 2 * MAX_HEADER];
        let b = encode(&big).unwrap();
        assert!(decode::<Vec<u8>>(&b).is_err(), "over the header bound");
        assert_eq!(decode_bounded::<Vec<u8>, { 4 * MAX_HEADER }>(&b).unwrap(), big);
    }
}
