//! Read-ahead decisions of one handle: which reads belong to a stream worth fetching ahead of, and how
//! far ahead. Pure (no I/O, no clock); [`super::open_file::Handle`] does the fetching. Modelled on Linux's
//! on-demand read-ahead (`mm/readahead.c`):
//! - a stream is recognised from the reads themselves — a read that starts where one of the last few
//!   ended (the kernel's own read-ahead sends several reads at once, which reach us slightly out of
//!   order), or the third read in a row at the same positive stride (each process of a strided job
//!   reading every P-th block);
//! - a sequential stream is fetched in chunks; a strided one along its stride: the blocks it will read
//!   (each as long as its reads), [`RA_CHUNK`] bytes of them at a time as vectored requests, so the gaps
//!   (other processes' blocks) are never fetched, however sparse the stride;
//! - chunks are fetched from the second confirming read on, once the stream covers [`MIN_STREAM`] bytes
//!   (the kernel's first read-ahead window is 128 KiB): a chance continuation among random reads, or the
//!   short runs of neighbouring blocks fio's random map produces when it nears the end of a pass, must not
//!   cost 8 MiB. Then one chunk ahead, one more with each further read, up to [`RA_AHEAD`];
//! - once a stream fetches chunks, reads close to its front or inside the chunks already fetched continue
//!   it;
//! - anything else is a random read: it costs exactly itself (no chunk is fetched for it) and ends the
//!   stream. Chunks fetched earlier still answer reads that fall inside them.
//!
//! Before this, a read at offset 0 or anywhere inside the fetched chunks counted as sequential, so random
//! 4 KiB reads kept pulling 4 MiB chunks: 11–14 bytes moved per byte returned (issue 19).

/// Read-ahead unit (one asynchronous read of the data path).
pub const RA_CHUNK: u64 = 4 << 20;
/// Chunks fetched beyond a read once a stream runs at full speed.
pub const RA_AHEAD: u64 = 4;
/// Reads remembered to recognise a stream.
const HISTORY: usize = 4;
/// How far from the stream's front a read may land and still continue a running stream (reads of the
/// kernel's read-ahead window arriving out of order).
pub const STREAM_SLACK: u64 = 1 << 20;
/// Confirming reads before chunks are fetched.
const CONFIRM: u64 = 2;
/// Bytes a stream must span (from its first read to its front) before chunks are fetched.
pub const MIN_STREAM: u64 = 256 << 10;
/// Largest stride followed (beyond it, three reads at one stride are taken for chance).
pub const MAX_STRIDE: u64 = 1 << 30;

/// What to do with one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Read exactly the requested range.
    Direct,
    /// Serve the read from read-ahead chunks, fetching those it covers and `ahead` more beyond it.
    Chunks { ahead: u64 },
    /// Serve the read from blocks fetched along its stride: the blocks at `base + k * stride` (each as
    /// long as this read), fetched in windows of [`RA_CHUNK`] bytes of blocks: the window holding this
    /// read and `ahead` more beyond it.
    Strided { base: u64, stride: u64, ahead: u64 },
}

/// The stream state of one handle.
#[derive(Clone, Debug, Default)]
pub struct Stream {
    /// The last reads, oldest first: (offset, end).
    recent: Vec<(u64, u64)>,
    /// Confirming reads since the stream was recognised (0: no stream).
    run: u64,
    /// The furthest end of the stream's reads.
    front: u64,
    /// Where the stream began (its lowest read offset).
    start: u64,
    /// The stride of a strided stream (0: sequential).
    stride: u64,
    /// The last decision, returned again for the same read (a read retried on the slow path).
    last: Option<((u64, u64), Plan)>,
}

impl Stream {
    /// Decides how to serve the read `off..end`; `cached`: the chunks covering it are already fetched
    /// (or on their way).
    pub fn plan(&mut self, off: u64, end: u64, cached: bool) -> Plan {
        if let Some((r, p)) = self.last {
            if r == (off, end) {
                return p;
            }
        }
        let sequential = self.recent.iter().any(|&(_, e)| e == off);
        let stride = self.stride_of(off, end);
        let continues = sequential || stride.is_some();
        // Only a stream that fetches takes reads near its front (a random read close by must not grow a
        // chance continuation into one); a strided one only reads inside the blocks it fetched.
        let near_front = self.fetching() && (cached || self.stride == 0 && off.abs_diff(self.front) <= STREAM_SLACK);
        if continues || near_front {
            if self.run == 0 {
                // The stream began with the read this one continues, or the first of the strided ones.
                let continued = self.recent.iter().find(|r| r.1 == off).map(|r| r.0);
                let stride_start = self.recent.len().checked_sub(2).map(|i| self.recent[i].0);
                self.start = continued.or(stride_start).unwrap_or(off).min(off);
                self.front = 0;
            }
            match (sequential, stride) {
                (false, Some(s)) => self.stride = s,
                (true, _) => self.stride = 0,
                (false, None) => {}
            }
            self.run += 1;
            self.front = self.front.max(end);
            self.start = self.start.min(off);
        } else {
            self.run = 0;
            self.stride = 0;
        }
        if self.recent.len() == HISTORY {
            self.recent.remove(0);
        }
        self.recent.push((off, end));
        let plan = if self.fetching() {
            let ahead = (self.run + 1 - CONFIRM).min(RA_AHEAD);
            match self.stride {
                0 => Plan::Chunks { ahead },
                stride => Plan::Strided { base: self.start, stride, ahead },
            }
        } else if cached {
            Plan::Chunks { ahead: 0 }
        } else {
            Plan::Direct
        };
        self.last = Some(((off, end), plan));
        plan
    }

    /// The stride, if `off..end` is the third read in a row at one positive stride, with a gap between
    /// reads (adjacent ones are sequential).
    fn stride_of(&self, off: u64, end: u64) -> Option<u64> {
        let &[.., (a, _), (b, _)] = self.recent.as_slice() else { return None };
        let stride = b.wrapping_sub(a);
        (b > a && off > b && off - b == stride && stride <= MAX_STRIDE && end - off < stride).then_some(stride)
    }

    /// The stream is confirmed and long enough to be served from chunks.
    fn fetching(&self) -> bool {
        self.run >= CONFIRM && self.front - self.start >= MIN_STREAM
    }

    /// Whether a stream is running (for tests and diagnostics).
    pub fn running(&self) -> bool {
        self.run > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 1024;

    /// Plans for a sequence of (offset, length) reads, none cached.
    fn plans(reads: &[(u64, u64)]) -> Vec<Plan> {
        let mut s = Stream::default();
        reads.iter().map(|&(o, l)| s.plan(o, o + l, false)).collect()
    }

    #[test]
    fn a_sequential_reader_ramps_up_from_its_third_read() {
        let reads: Vec<(u64, u64)> = (0..8).map(|i| (i * 128 * K, 128 * K)).collect();
        let p = plans(&reads);
        assert_eq!(p[0], Plan::Direct, "one read is not a stream yet, even at offset 0");
        assert_eq!(p[1], Plan::Direct, "one continuation may be chance");
        let ahead: Vec<u64> = p[2..].iter().map(|p| if let Plan::Chunks { ahead } = p { *ahead } else { 0 }).collect();
        assert_eq!(ahead, vec![1, 2, 3, 4, 4, 4]);
    }

    #[test]
    fn random_reads_never_fetch_ahead() {
        // A deterministic pseudo-random walk over a 128 MiB file in 4 KiB reads (offset 0 included).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut s = Stream::default();
        let mut chunks = 0;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = if i == 100 { 0 } else { (x % (32 * K)) * 4 * K };
            if s.plan(off, off + 4 * K, false) != Plan::Direct {
                chunks += 1;
            }
        }
        // Chunks need two confirming reads in a row: an exact continuation of one of the last four reads
        // (4/32768 per read) followed by one within a MiB of it (1/64), or four equal strides.
        assert!(chunks <= 1, "{chunks} of 20000 random reads fetched chunks");
    }

    #[test]
    fn kernel_readahead_out_of_order_still_counts_as_sequential() {
        let mut s = Stream::default();
        assert_eq!(s.plan(0, 128 * K, false), Plan::Direct);
        // 256K arrives before 128K: not a continuation yet...
        assert_eq!(s.plan(256 * K, 384 * K, false), Plan::Direct);
        // ...but 128K continues the first read, and 384K the second.
        assert_eq!(s.plan(128 * K, 256 * K, false), Plan::Direct);
        assert!(s.running());
        assert!(matches!(s.plan(384 * K, 512 * K, false), Plan::Chunks { .. }));
        // Once running, a read slightly behind the front continues the stream.
        assert!(matches!(s.plan(200 * K, 300 * K, false), Plan::Chunks { .. }));
        assert!(s.running());
    }

    #[test]
    fn small_reads_fetch_chunks_only_once_the_stream_spans_256_kib() {
        // A sequential 4 KiB reader: direct for its first 256 KiB, then chunks.
        let reads: Vec<(u64, u64)> = (0..70).map(|i| (i * 4 * K, 4 * K)).collect();
        let p = plans(&reads);
        let first = p.iter().position(|p| *p != Plan::Direct).unwrap();
        assert_eq!(first, 63, "the read ending at 256 KiB is the first served from chunks");
        // fio's random map near the end of a pass: runs of up to 16 neighbouring blocks, then a jump.
        let mut s = Stream::default();
        let mut fetched = 0;
        for run in 0..200u64 {
            let base = (run * 7919 % 30_000) * 4 * K;
            for i in 0..(run % 16 + 1) {
                if s.plan(base + i * 4 * K, base + (i + 1) * 4 * K, false) != Plan::Direct {
                    fetched += 1;
                }
            }
        }
        assert_eq!(fetched, 0);
    }

    #[test]
    fn a_random_read_ends_the_stream_but_cached_data_still_answers() {
        let mut s = Stream::default();
        for i in 0..4 {
            s.plan(i * 64 * K, (i + 1) * 64 * K, false);
        }
        assert_eq!(s.plan(256 * K, 320 * K, false), Plan::Chunks { ahead: 3 });
        assert!(s.running());
        assert_eq!(s.plan(900 << 20, (900 << 20) + 4 * K, false), Plan::Direct);
        assert!(!s.running());
        // A read inside chunks fetched before: served from them, nothing more fetched.
        assert_eq!(s.plan(8 * K, 12 * K, true), Plan::Chunks { ahead: 0 });
        assert!(!s.running());
    }

    #[test]
    fn strides_dense_or_sparse_are_fetched_along_the_stride() {
        // 2 processes, 32 KiB blocks: each reads every other block from its own offset.
        let reads: Vec<(u64, u64)> = (0..6).map(|k| (32 * K + k * 64 * K, 32 * K)).collect();
        let p = plans(&reads);
        assert_eq!(&p[..4], &[Plan::Direct; 4], "a stride is seen at the third read, fetched at 256 KiB");
        assert_eq!(p[4], Plan::Strided { base: 32 * K, stride: 64 * K, ahead: 2 });
        assert_eq!(p[5], Plan::Strided { base: 32 * K, stride: 64 * K, ahead: 3 });
        // 16 processes: a read uses 1/16 of the stride, and only those blocks are fetched.
        let sparse: Vec<(u64, u64)> = (0..5).map(|k| (k * 512 * K, 32 * K)).collect();
        let p = plans(&sparse);
        assert_eq!(&p[..3], &[Plan::Direct; 3]);
        assert_eq!(p[3], Plan::Strided { base: 0, stride: 512 * K, ahead: 1 });
        // A read off the stride ends it (nothing cached), even next to the front.
        let mut s = Stream::default();
        for k in 0..5 {
            s.plan(k * 64 * K, k * 64 * K + 32 * K, false);
        }
        assert_eq!(s.plan(5 * 64 * K + 4 * K, 5 * 64 * K + 8 * K, false), Plan::Direct);
        assert!(!s.running());
        // Adjacent reads are sequential, not a stride.
        let seq: Vec<(u64, u64)> = (0..6).map(|k| (k * 64 * K, 64 * K)).collect();
        assert!(plans(&seq).iter().all(|p| !matches!(p, Plan::Strided { .. })));
        // Backwards strides are not followed.
        let back: Vec<(u64, u64)> = (0..5).map(|k| ((10 - k) * 64 * K, 32 * K)).collect();
        assert!(plans(&back).iter().all(|p| *p == Plan::Direct));
    }

    #[test]
    fn the_same_read_twice_gets_the_same_plan_and_counts_once() {
        let mut s = Stream::default();
        s.plan(0, 128 * K, false);
        s.plan(128 * K, 256 * K, false);
        let p = s.plan(256 * K, 384 * K, false);
        assert_eq!(p, Plan::Chunks { ahead: 1 });
        assert_eq!(s.plan(256 * K, 384 * K, false), p, "the slow path asks again");
        assert_eq!(s.plan(384 * K, 512 * K, false), Plan::Chunks { ahead: 2 });
    }
}
