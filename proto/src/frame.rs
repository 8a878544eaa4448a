//! Framing on a QUIC stream: `"TS" | version u16 | header_len u32 | payload_len u32 | header | payload`.
//!
//! The header is a bincode value; the payload is raw bytes (file data never goes through serde).
//! Sizes are checked before anything is allocated.

use crate::bufpool::PoolBuf;
pub use crate::wire::MAX_PAYLOAD;
use crate::wire::{self, MAX_HEADER};
use crate::PROTOCOL_VERSION;
use bytes::{Bytes, BytesMut};
use serde::{de::DeserializeOwned, Serialize};

pub const MAGIC: [u8; 2] = *b"TS";
/// Bytes of a frame before its header: magic, version, header length, payload length.
pub const PREFIX: usize = 12;

#[derive(Debug, thiserror::Error)]
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
    #[error("malformed header")]
    Decode(#[from] wire::WireError),
    #[error("stream error: {0}")]
    Io(String),
}

pub struct Frame {
    pub header: Bytes,
    pub payload: Bytes,
}

impl Frame {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FrameError> {
        Ok(wire::decode(&self.header)?)
    }
}

/// Encodes the prefix and header of a frame (the payload is sent after it as is).
pub fn encode_head<T: Serialize>(header: &T, payload_len: usize) -> Result<Vec<u8>, FrameError> {
    let h = wire::encode(header)?;
    if h.len() > MAX_HEADER {
        return Err(FrameError::HeaderTooLarge(h.len()));
    }
    if payload_len > MAX_PAYLOAD {
        return Err(FrameError::PayloadTooLarge(payload_len, MAX_PAYLOAD));
    }
    let mut out = Vec::with_capacity(PREFIX + h.len());
    out.extend_from_slice(&prefix(h.len(), payload_len));
    out.extend_from_slice(&h);
    Ok(out)
}

/// The prefix of a frame whose header and payload have these lengths (each at most `u32::MAX`).
pub fn prefix(header_len: usize, payload_len: usize) -> [u8; PREFIX] {
    let mut p = [0u8; PREFIX];
    p[..2].copy_from_slice(&MAGIC);
    p[2..4].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    p[4..8].copy_from_slice(&(header_len as u32).to_be_bytes());
    p[8..12].copy_from_slice(&(payload_len as u32).to_be_bytes());
    p
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

/// Reads one request frame (replies are read with [`read_head`] and [`read_payload_chunked`]). A large payload is gathered into
/// a recycled page-aligned buffer, so that a data server can hand a block-aligned write to `O_DIRECT`
/// without copying it again.
///
/// A declared length costs nothing until the bytes are there: the chunks are held as they arrive (QUIC
/// flow control bounds them), and the buffer of the declared size is taken only once half of the payload
/// has arrived, so memory reserved for a payload is never more than twice what its peer has sent. A peer
/// declaring the largest payload on thousands of streams and sending nothing reserves nothing.
pub async fn read_frame(recv: &mut quinn::RecvStream, max_payload: usize) -> Result<Frame, FrameError> {
    let (header, plen) = read_head(recv, max_payload).await?;
    let payload = if plen >= ALIGNED_PAYLOAD_MIN {
        let mut gathered = Gathered::new(plen);
        for_each_chunk(recv, plen, "payload", |chunk| gathered.push(chunk)).await?;
        gathered.finish()
    } else {
        read_exact_bytes(recv, plen, "payload").await?
    };
    Ok(Frame { header, payload })
}

/// A payload being gathered into an aligned buffer of its declared length, taken once half of it is here.
struct Gathered {
    declared: usize,
    held: Vec<Bytes>,
    held_len: usize,
    buf: Option<PoolBuf>,
}

impl Gathered {
    fn new(declared: usize) -> Gathered {
        Gathered { declared, held: Vec::new(), held_len: 0, buf: None }
    }

    fn push(&mut self, chunk: Bytes) {
        if let Some(buf) = &mut self.buf {
            buf.extend_from_slice(&chunk);
            return;
        }
        self.held_len += chunk.len();
        self.held.push(chunk);
        if self.held_len.saturating_mul(2) >= self.declared {
            let mut buf = PoolBuf::with_capacity(self.declared);
            for c in self.held.drain(..) {
                buf.extend_from_slice(&c);
            }
            self.buf = Some(buf);
        }
    }

    fn finish(self) -> Bytes {
        match self.buf {
            Some(buf) => buf.freeze(),
            None => concat(self.held),
        }
    }
}

/// Payloads arriving in more chunks than this (small datagrams, e.g. a standard 1500-byte MTU) are
/// gathered anyway by [`read_payload_chunked`]: thousands of tiny pieces cost more to carry than one copy.
pub const MAX_CHUNKS: usize = 64;

/// The `len` payload bytes following a header read with [`read_head`], left in the chunks they arrived in
/// (16 or so per MiB on loopback, whose datagrams are 64 KiB): a caller that can use the pieces (a FUSE
/// read reply written with `writev`) saves the copy that gathering them into one buffer costs.
pub async fn read_payload_chunked(recv: &mut quinn::RecvStream, len: usize) -> Result<Vec<Bytes>, FrameError> {
    let mut chunks = Vec::new();
    for_each_chunk(recv, len, "payload", |chunk| chunks.push(chunk)).await?;
    if chunks.len() > MAX_CHUNKS {
        chunks = vec![concat(chunks)];
    }
    Ok(chunks)
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
pub async fn read_head(recv: &mut quinn::RecvStream, max_payload: usize) -> Result<(Bytes, usize), FrameError> {
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

/// The next `len` bytes, held in the chunks they arrive in and joined at the end (no copy when one
/// chunk holds them all, the common case for headers): nothing is reserved for a declared length before
/// the bytes are there.
async fn read_exact_bytes(recv: &mut quinn::RecvStream, len: usize, what: &str) -> Result<Bytes, FrameError> {
    let mut chunks = Vec::new();
    for_each_chunk(recv, len, what, |chunk| chunks.push(chunk)).await?;
    Ok(concat(chunks))
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
    fn a_payload_takes_its_buffer_only_once_half_of_it_arrived() {
        let declared = 1 << 20;
        let mut g = Gathered::new(declared);
        let piece = Bytes::from(vec![5u8; declared / 4]);
        g.push(piece.clone());
        assert!(g.buf.is_none(), "a quarter is held as it came");
        g.push(piece.clone());
        let buf = g.buf.as_ref().expect("half: the buffer is taken");
        assert_eq!(buf.len(), declared / 2);
        assert_eq!(buf.as_slice().as_ptr() as usize % crate::bufpool::ALIGN, 0, "page-aligned");
        g.push(piece.clone());
        g.push(piece);
        let out = g.finish();
        assert_eq!(out.len(), declared);
        assert!(out.iter().all(|&b| b == 5));
        // A payload that never arrived whole is joined from what was held.
        let mut g = Gathered::new(declared);
        g.push(Bytes::from_static(b"ab"));
        assert_eq!(&g.finish()[..], b"ab");
    }

    #[test]
    fn prefix_checks() {
        let head = encode_head(&7u32, 10).unwrap();
        let p: [u8; PREFIX] = head[..PREFIX].try_into().unwrap();
        assert_eq!(parse_prefix(&p, MAX_PAYLOAD).unwrap(), (head.len() - PREFIX, 10));
        let mut bad = p;
        bad[0] = b'X';
        assert!(matches!(parse_prefix(&bad, MAX_PAYLOAD), Err(FrameError::BadMagic)));
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
