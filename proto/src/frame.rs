//! Framing on a QUIC stream: `"TS" | version u16 | header_len u32 | payload_len u32 | header | payload`.
//!
//! The header is a bincode value; the payload is raw bytes (file data never goes through serde).
//! Sizes are checked before anything is allocated.

use crate::bufpool::PoolBuf;
use crate::wire::{self, MAX_HEADER};
use crate::PROTOCOL_VERSION;
use bytes::{Bytes, BytesMut};
use serde::{de::DeserializeOwned, Serialize};

pub const MAGIC: [u8; 2] = *b"TS";
/// Largest payload of one request or response (data requests are split below this).
pub const MAX_PAYLOAD: usize = 64 << 20;
const PREFIX: usize = 12;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("stream closed before a frame")]
    Closed,
    #[error("truncated frame: {0}")]
    Truncated(String),
    #[error("not a Tessera frame (bad magic)")]
    BadMagic,
    #[error("protocol version mismatch: peer speaks {peer}, we speak {ours}")]
    Version { peer: u16, ours: u16 },
    #[error("header of {0} bytes exceeds the limit of {MAX_HEADER}")]
    HeaderTooLarge(usize),
    #[error("payload of {0} bytes exceeds the limit of {1}")]
    PayloadTooLarge(usize, usize),
    #[error("malformed header: {0}")]
    Decode(String),
    #[error("stream error: {0}")]
    Io(String),
}

pub struct Frame {
    pub header: Bytes,
    pub payload: Bytes,
}

impl Frame {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FrameError> {
        wire::decode(&self.header).map_err(FrameError::Decode)
    }
}

/// Encodes the prefix and header of a frame (the payload is sent after it as is).
pub fn encode_head<T: Serialize>(header: &T, payload_len: usize) -> Result<Vec<u8>, FrameError> {
    let h = wire::encode(header).map_err(FrameError::Decode)?;
    if h.len() > MAX_HEADER {
        return Err(FrameError::HeaderTooLarge(h.len()));
    }
    if payload_len > MAX_PAYLOAD {
        return Err(FrameError::PayloadTooLarge(payload_len, MAX_PAYLOAD));
    }
    let mut out = Vec::with_capacity(PREFIX + h.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    out.extend_from_slice(&(payload_len as u32).to_be_bytes());
    out.extend_from_slice(&h);
    Ok(out)
}

/// Sends one frame. The header is encoded before the returned future is created, so the future does
/// not borrow it (handlers' reply types need not be `Sync`).
pub fn write_frame<'a, T: Serialize>(
    send: &'a mut quinn::SendStream,
    header: &T,
    payload: Bytes,
) -> impl std::future::Future<Output = Result<(), FrameError>> + Send + 'a {
    let head = encode_head(header, payload.len());
    async move {
        let mut chunks = [Bytes::from(head?), payload];
        send.write_all_chunks(&mut chunks).await.map_err(|e| FrameError::Io(e.to_string()))?;
        Ok(())
    }
}

/// Parses a frame prefix; returns (header_len, payload_len).
pub fn parse_prefix(p: &[u8; PREFIX], max_payload: usize) -> Result<(usize, usize), FrameError> {
    if p[0..2] != MAGIC {
        return Err(FrameError::BadMagic);
    }
    let version = u16::from_be_bytes([p[2], p[3]]);
    if version != PROTOCOL_VERSION {
        return Err(FrameError::Version { peer: version, ours: PROTOCOL_VERSION });
    }
    let hlen = u32::from_be_bytes([p[4], p[5], p[6], p[7]]) as usize;
    let plen = u32::from_be_bytes([p[8], p[9], p[10], p[11]]) as usize;
    if hlen > MAX_HEADER {
        return Err(FrameError::HeaderTooLarge(hlen));
    }
    if plen > max_payload {
        return Err(FrameError::PayloadTooLarge(plen, max_payload));
    }
    Ok((hlen, plen))
}

/// Reads one request frame (replies are read with [`read_frame_chunked`]). A large payload is gathered into
/// a recycled page-aligned buffer, so that a data server can hand a block-aligned write to `O_DIRECT`
/// without copying it again.
pub async fn read_frame(recv: &mut quinn::RecvStream, max_payload: usize) -> Result<Frame, FrameError> {
    let (header, plen) = read_head(recv, max_payload).await?;
    let payload = if plen >= ALIGNED_PAYLOAD_MIN {
        let mut buf = PoolBuf::with_capacity(plen);
        for_each_chunk(recv, plen, "payload", |chunk| buf.extend_from_slice(&chunk)).await?;
        buf.freeze()
    } else {
        read_exact_bytes(recv, plen, "payload").await?
    };
    Ok(Frame { header, payload })
}

/// Payloads arriving in more chunks than this (small datagrams, e.g. a standard 1500-byte MTU) are
/// gathered anyway by [`read_frame_chunked`]: thousands of tiny pieces cost more to carry than one copy.
pub const MAX_CHUNKS: usize = 64;

/// [`read_frame`] leaving the payload in the chunks it arrived in (16 or so per MiB on loopback, whose
/// datagrams are 64 KiB): a caller that can use the pieces (a FUSE read reply written with `writev`)
/// saves the copy that gathering them into one buffer costs. Returns the header and the chunks.
pub async fn read_frame_chunked(
    recv: &mut quinn::RecvStream,
    max_payload: usize,
) -> Result<(Bytes, Vec<Bytes>), FrameError> {
    let (header, plen) = read_head(recv, max_payload).await?;
    let mut chunks = Vec::new();
    for_each_chunk(recv, plen, "payload", |chunk| chunks.push(chunk)).await?;
    if chunks.len() > MAX_CHUNKS {
        chunks = vec![concat(chunks)];
    }
    Ok((header, chunks))
}

/// The chunks joined into one buffer: no copy for zero or one chunk.
pub fn concat(mut chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut buf = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in &chunks {
                buf.extend_from_slice(c);
            }
            buf.freeze()
        }
    }
}

/// Reads a frame's prefix and header; returns the header and the payload's length.
async fn read_head(recv: &mut quinn::RecvStream, max_payload: usize) -> Result<(Bytes, usize), FrameError> {
    let mut prefix = [0u8; PREFIX];
    match recv.read_exact(&mut prefix).await {
        Ok(()) => {}
        Err(quinn::ReadExactError::FinishedEarly(0)) => return Err(FrameError::Closed),
        Err(quinn::ReadExactError::FinishedEarly(n)) => {
            return Err(FrameError::Truncated(format!("{n} of {PREFIX} prefix bytes")))
        }
        Err(quinn::ReadExactError::ReadError(e)) => return Err(FrameError::Io(e.to_string())),
    }
    let (hlen, plen) = parse_prefix(&prefix, max_payload)?;
    let header = read_exact_bytes(recv, hlen, "header").await?;
    Ok((header, plen))
}

async fn read_exact_bytes(recv: &mut quinn::RecvStream, len: usize, what: &str) -> Result<Bytes, FrameError> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    // Take the first chunk without copying when it already holds everything (the common case for
    // headers); otherwise gather into one buffer.
    let mut whole = None;
    let mut buf = BytesMut::with_capacity(len);
    for_each_chunk(recv, len, what, |chunk| {
        if chunk.len() == len {
            whole = Some(chunk);
        } else {
            buf.extend_from_slice(&chunk);
        }
    })
    .await?;
    Ok(whole.unwrap_or_else(|| buf.freeze()))
}

/// Hands the next `len` bytes of the stream to `take`, in the chunks they arrive in.
async fn for_each_chunk(
    recv: &mut quinn::RecvStream,
    len: usize,
    what: &str,
    mut take: impl FnMut(Bytes),
) -> Result<(), FrameError> {
    let mut got = 0;
    while got < len {
        match recv.read_chunk(len - got, true).await {
            Ok(Some(chunk)) => {
                got += chunk.bytes.len();
                take(chunk.bytes);
            }
            Ok(None) => return Err(FrameError::Truncated(format!("{got} of {len} {what} bytes"))),
            Err(e) => return Err(FrameError::Io(e.to_string())),
        }
    }
    Ok(())
}

/// Payloads at least this long are gathered page-aligned.
const ALIGNED_PAYLOAD_MIN: usize = 64 << 10;
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_copies_only_several_chunks() {
        assert!(concat(Vec::new()).is_empty());
        let one = Bytes::from_static(b"abc");
        assert_eq!(concat(vec![one.clone()]).as_ptr(), one.as_ptr());
        let joined = concat(vec![one, Bytes::new(), Bytes::from_static(b"de")]);
        assert_eq!(&joined[..], b"abcde");
    }

    #[test]
    fn prefix_checks() {
        let head = encode_head(&7u32, 10).unwrap();
        let p: [u8; PREFIX] = head[..PREFIX].try_into().unwrap();
        assert_eq!(parse_prefix(&p, MAX_PAYLOAD).unwrap(), (head.len() - PREFIX, 10));
        let mut bad = p;
        bad[0] = b'X';
        assert_eq!(parse_prefix(&bad, MAX_PAYLOAD), Err(FrameError::BadMagic));
        let mut v = p;
        v[3] = v[3].wrapping_add(1);
        assert!(matches!(parse_prefix(&v, MAX_PAYLOAD), Err(FrameError::Version { .. })));
        let mut big = p;
        big[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(parse_prefix(&big, MAX_PAYLOAD), Err(FrameError::PayloadTooLarge(..))));
        let mut bigh = p;
        bigh[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(parse_prefix(&bigh, MAX_PAYLOAD), Err(FrameError::HeaderTooLarge(..))));
    }
}
