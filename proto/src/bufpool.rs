//! Recycled page-aligned buffers for the data path: a data server's request payloads, a mount's
//! write-behind chunks.
//!
//! They are allocated and freed at the rate data flows (hundreds of MiB/s), often by different threads,
//! and glibc gives such memory back to the kernel: its per-thread heaps are unmapped when they empty. The
//! next buffer is then fresh memory, and every page of it costs a fault and zeroing. On the 2-core VM of
//! `results/core` that was 20,000-35,000 faults in the mount per 512 MiB written, most of them on these
//! buffers, even with `tessera_ops::daemon::tune_allocator`. A buffer freed here goes back to a small pool
//! instead, and the next one of its size class is taken from there.

use bytes::Bytes;
use std::sync::Mutex;

/// Smallest pooled buffer; smaller ones are ordinary allocations.
pub const POOLED_MIN: usize = 64 << 10;
/// Largest pooled buffer (a frame's largest payload).
pub const POOLED_MAX: usize = crate::wire::MAX_PAYLOAD;
/// Idle bytes kept per size class; what is freed beyond that goes back to the allocator.
pub const IDLE_PER_CLASS: usize = 32 << 20;
/// Alignment of every buffer's start (a data server writes them with `O_DIRECT`).
pub const ALIGN: usize = 4096;

/// Size classes: powers of two from `POOLED_MIN` to `POOLED_MAX`.
const CLASSES: usize = (POOLED_MAX / POOLED_MIN).trailing_zeros() as usize + 1;

static POOL: [Mutex<Vec<Vec<u8>>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

/// The class whose buffers hold `len` bytes, if `len` is pooled.
fn class_of(len: usize) -> Option<usize> {
    if !(POOLED_MIN..=POOLED_MAX).contains(&len) {
        return None;
    }
    Some((len.next_power_of_two() / POOLED_MIN).trailing_zeros() as usize)
}

fn class_len(class: usize) -> usize {
    POOLED_MIN << class
}

/// An append-only buffer, page-aligned when large; [`PoolBuf::freeze`] turns it into
/// [`Bytes`] without copying, and the memory returns to the pool when the last of those is dropped.
pub struct PoolBuf {
    /// The allocation; the data are `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    /// The size class the allocation came from, while it still is that allocation.
    class: Option<usize>,
}

impl PoolBuf {
    /// An empty buffer with room for at least `cap` bytes (from the pool when `cap` is in its range).
    /// Buffers of at least [`POOLED_MIN`] bytes start on an [`ALIGN`] boundary.
    pub fn with_capacity(cap: usize) -> PoolBuf {
        let class = class_of(cap);
        let recycled = class.and_then(|c| POOL[c].lock().ok().and_then(|mut free| free.pop()));
        let mut buf: Vec<u8> = match (recycled, class) {
            (Some(buf), _) => buf,
            (None, Some(c)) => Vec::with_capacity(class_len(c) + ALIGN),
            (None, None) if cap >= POOLED_MIN => Vec::with_capacity(cap + ALIGN),
            (None, None) => Vec::with_capacity(cap),
        };
        let start = if cap >= POOLED_MIN { buf.as_ptr().align_offset(ALIGN).min(ALIGN) } else { 0 };
        buf.clear();
        buf.resize(start, 0);
        PoolBuf { buf, start, class }
    }

    pub fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `data` (growing the buffer if needed; a grown buffer is no longer aligned nor pooled).
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        if self.buf.len() + data.len() > self.buf.capacity() {
            self.class = None;
        }
        self.buf.extend_from_slice(data);
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The data, to overwrite in place.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    /// The data as [`Bytes`], without copying.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuf").field("len", &self.len()).field("class", &self.class).finish()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let Some(class) = self.class else { return };
        let buf = std::mem::take(&mut self.buf);
        if let Ok(mut free) = POOL[class].lock() {
            if (free.len() + 1) * class_len(class) <= IDLE_PER_CLASS.max(class_len(class)) {
                free.push(buf);
            }
        }
    }
}

/// Idle buffers in the pool of the class holding `len` bytes (for tests and diagnostics).
pub fn idle(len: usize) -> usize {
    class_of(len).and_then(|c| POOL[c].lock().ok().map(|f| f.len())).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_the_pooled_range() {
        assert_eq!(class_of(POOLED_MIN - 1), None);
        assert_eq!(class_of(POOLED_MIN), Some(0));
        assert_eq!(class_of(POOLED_MIN + 1), Some(1));
        assert_eq!(class_of(1 << 20), Some(4));
        assert_eq!(class_of(POOLED_MAX), Some(CLASSES - 1));
        assert_eq!(class_of(POOLED_MAX + 1), None);
        for len in [POOLED_MIN, 100_000, 1 << 20, (1 << 20) + 1, POOLED_MAX] {
            let c = class_of(len).unwrap();
            assert!(class_len(c) >= len && (c == 0 || class_len(c - 1) < len), "{len} in class {c}");
        }
    }

    #[test]
    fn buffers_are_aligned_and_keep_their_bytes() {
        for cap in [0, 100, POOLED_MIN, 3 << 20, POOLED_MAX + 5] {
            let mut b = PoolBuf::with_capacity(cap);
            if cap >= POOLED_MIN {
                assert_eq!(b.as_slice().as_ptr().align_offset(ALIGN), 0, "capacity {cap}");
            }
            b.extend_from_slice(b"abc");
            b.extend_from_slice(&vec![7u8; cap]);
            let bytes = b.freeze();
            assert_eq!(bytes.len(), cap + 3);
            assert_eq!(&bytes[..3], b"abc");
            assert!(bytes[3..].iter().all(|&b| b == 7));
        }
    }

    #[test]
    fn a_freed_buffer_is_taken_again_once_the_last_slice_is_gone() {
        // A size class of its own so that other tests do not take from it meanwhile.
        let len = 5 << 20;
        let mut b = PoolBuf::with_capacity(len);
        b.extend_from_slice(&vec![1u8; len]);
        let first = b.as_slice().as_ptr();
        let bytes = b.freeze();
        let part = bytes.slice(10..20);
        drop(bytes);
        let idle_before = idle(len);
        drop(part);
        assert_eq!(idle(len), idle_before + 1, "the buffer went back to its pool");
        let again = PoolBuf::with_capacity(len);
        assert_eq!(again.as_slice().as_ptr(), first, "the pooled buffer is reused");
        assert!(again.is_empty());
    }

    #[test]
    fn a_grown_buffer_is_not_pooled() {
        let len = 9 << 20; // A class no other test uses.
        let mut b = PoolBuf::with_capacity(len);
        b.extend_from_slice(&vec![1u8; 17 << 20]);
        let idle_before = idle(len);
        drop(b);
        assert_eq!(idle(len), idle_before);
    }

    #[test]
    fn the_pool_keeps_a_bounded_amount() {
        let len = 40 << 20; // 64 MiB class: one buffer is kept at most.
        let bufs: Vec<PoolBuf> = (0..3).map(|_| PoolBuf::with_capacity(len)).collect();
        drop(bufs);
        assert_eq!(idle(len), 1);
    }
}
