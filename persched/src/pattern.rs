//! A periodic pattern of size T (§3): the shared bandwidth in use over [0, T) as a sorted set of event
//! times, and each application's instances with their I/O pieces; INSERT-IN-PATTERN (Algorithm 1) and
//! INSERT-FIRST-INSTANCE.

use super::{App, Platform};
use std::collections::BTreeMap;

/// One stretch of an instance's transfer: during `[start, end)` (modulo T, `0 <= start < end <= T`) each of
/// the application's β nodes sends at `bw / β`, the application as a whole at `bw`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Piece {
    pub start: f64,
    pub end: f64,
    pub bw: f64,
}

impl Piece {
    pub fn volume(&self) -> f64 {
        self.bw * (self.end - self.start)
    }
}

/// One instance of an application in the pattern: compute from `compute_start` (modulo T) for w, idle
/// until its first piece, then its pieces (in time order from the compute's end, possibly wrapping past T).
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub compute_start: f64,
    pub pieces: Vec<Piece>,
}

/// Per application: its instances and where the next one may go.
#[derive(Clone, Debug, Default)]
struct Track {
    instances: Vec<Instance>,
    /// Unwrapped start of the first instance's compute (the app's window is `[origin, origin + T)`).
    origin: f64,
    /// Unwrapped end of the last inserted instance's transfer.
    last_io_end: f64,
    rejected: bool,
}

/// A pattern under construction or as returned by [`super::persched`].
#[derive(Clone, Debug)]
pub struct Pattern {
    platform: Platform,
    apps: Vec<App>,
    period: f64,
    /// Event time (as `f64::to_bits`, all times are in [0, T) so the order is the numeric one) → shared
    /// bandwidth in use from it to the next event (or T). Always holds 0.
    used: BTreeMap<u64, f64>,
    tracks: Vec<Track>,
    /// Every insertion attempt in order: (application, accepted).
    attempts: Vec<(usize, bool)>,
}

/// A transfer found by [`Pattern::fill`]: its pieces and the unwrapped time it ends.
struct Fill {
    pieces: Vec<Piece>,
    end: f64,
}

impl Pattern {
    pub fn new(platform: Platform, apps: Vec<App>, period: f64) -> Pattern {
        let tracks = vec![Track::default(); apps.len()];
        let mut used = BTreeMap::new();
        used.insert(0f64.to_bits(), 0.0);
        Pattern { platform, apps, period, used, tracks, attempts: Vec::new() }
    }

    pub fn period(&self) -> f64 {
        self.period
    }

    pub fn apps(&self) -> &[App] {
        &self.apps
    }

    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    pub fn instances(&self, k: usize) -> &[Instance] {
        &self.tracks[k].instances
    }

    /// n_k for every application.
    pub fn counts(&self) -> Vec<usize> {
        self.tracks.iter().map(|t| t.instances.len()).collect()
    }

    /// Whether App k failed an insertion in this pattern (it is then never tried again).
    pub fn rejected(&self, k: usize) -> bool {
        self.tracks[k].rejected
    }

    pub(super) fn note_rejected(&mut self, k: usize) {
        self.tracks[k].rejected = true;
    }

    /// Eq. 3: `ρ̃_k = n_k w_k / T`.
    pub fn rho_tilde(&self, k: usize) -> f64 {
        self.tracks[k].instances.len() as f64 * self.apps[k].w / self.period
    }

    pub fn rho_tildes(&self) -> Vec<f64> {
        (0..self.apps.len()).map(|k| self.rho_tilde(k)).collect()
    }

    pub fn syseff(&self) -> f64 {
        self.platform.syseff(&self.apps, &self.rho_tildes())
    }

    pub fn dilation(&self) -> f64 {
        self.platform.dilation(&self.apps, &self.rho_tildes())
    }

    /// The event intervals `(start, end, shared bandwidth in use)` covering [0, T).
    pub fn intervals(&self) -> Vec<(f64, f64, f64)> {
        let mut out = Vec::with_capacity(self.used.len());
        let mut it = self.used.iter().peekable();
        while let Some((&k, &u)) = it.next() {
            let end = it.peek().map_or(self.period, |(&n, _)| f64::from_bits(n));
            out.push((f64::from_bits(k), end, u));
        }
        out
    }

    /// Shared bandwidth no transfer may exceed a tiny rounding margin of.
    fn bw_eps(&self) -> f64 {
        self.platform.big_b * 1e-12
    }

    /// The event interval holding `t` (in [0, T)): its start, end and bandwidth in use.
    fn segment(&self, t: f64) -> (f64, f64, f64) {
        let (&k, &u) = self.used.range(..=t.to_bits()).next_back().expect("0 is always an event");
        let end = self
            .used
            .range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded))
            .next()
            .map_or(self.period, |(&n, _)| f64::from_bits(n));
        (f64::from_bits(k), end, u)
    }

    /// Walks the event intervals from the unwrapped time `start` to `deadline` taking in each
    /// `min(β b, B - used)` until `vol` is moved (Algorithm 1 lines 8–18). `None` when the deadline comes
    /// first. Reads only.
    fn fill(&self, k: usize, start: f64, deadline: f64) -> Option<Fill> {
        let a = &self.apps[k];
        let cap = self.platform.peak(a);
        let t = self.period;
        let tol = t * 1e-12;
        let mut left = a.vol;
        let mut pos = start;
        // The same place modulo T, moved from event to event exactly (no rounding drift).
        let mut m = start.rem_euclid(t);
        if m >= t {
            m = 0.0;
        }
        let mut pieces = Vec::new();
        // Each step consumes one event interval or reaches the deadline, so the walk is bounded by the
        // number of events in one period.
        for _ in 0..self.used.len() + 2 {
            if pos >= deadline - tol {
                break;
            }
            let (_, seg_end, u) = self.segment(m);
            let seg_len = seg_end - m;
            let room = deadline - pos;
            let avail = cap.min(self.platform.big_b - u);
            if avail > self.bw_eps() {
                let need = left / avail;
                if need <= seg_len.min(room) {
                    pieces.push(Piece { start: m, end: m + need, bw: avail });
                    return Some(Fill { pieces, end: pos + need });
                }
                let end = if seg_len <= room { seg_end } else { m + room };
                pieces.push(Piece { start: m, end, bw: avail });
                left -= avail * (end - m);
                // What rounding leaves after a piece that all but finished the transfer is no piece of its
                // own (it would last less than the time's resolution).
                if left <= a.vol * 1e-12 {
                    return Some(Fill { pieces, end: pos + (end - m) });
                }
            }
            if seg_len > room {
                break;
            }
            pos += seg_len;
            m = if seg_end >= t { 0.0 } else { seg_end };
        }
        None
    }

    /// Makes `t` (in [0, T)) an event, the new interval inheriting the bandwidth of the one it splits.
    fn split(&mut self, t: f64) {
        if t <= 0.0 || t >= self.period {
            return;
        }
        let key = t.to_bits();
        if !self.used.contains_key(&key) {
            let (_, _, u) = self.segment(t);
            self.used.insert(key, u);
        }
    }

    /// Adds a found transfer to the pattern as App k's next instance whose compute starts at the unwrapped
    /// `compute_start`.
    fn commit(&mut self, k: usize, compute_start: f64, fill: Fill) {
        for p in &fill.pieces {
            self.split(p.start);
            self.split(p.end);
            // After the splits the piece covers whole event intervals: add its bandwidth to each.
            for (_, u) in self.used.range_mut(p.start.to_bits()..p.end.to_bits()) {
                *u += p.bw;
            }
        }
        let tr = &mut self.tracks[k];
        if tr.instances.is_empty() {
            tr.origin = compute_start;
        }
        tr.last_io_end = fill.end;
        tr.instances.push(Instance { compute_start: compute_start.rem_euclid(self.period), pieces: fill.pieces });
    }

    /// INSERT-IN-PATTERN (Algorithm 1): one more instance of App k, or `false` (pattern unchanged).
    ///
    /// The new instance computes right after the last inserted instance's transfer, then transfers in the
    /// event intervals that follow, taking `min(β b, B - used)` in each, until vol is moved; it fails if the
    /// first instance's compute (one period after it started) would be reached first. Inserting only after
    /// the last inserted instance keeps the pattern compact (Lemma 1), which makes this the full
    /// schedulability test of Definition 2 (Lemma 2).
    pub fn insert(&mut self, k: usize) -> bool {
        if k >= self.apps.len() {
            return false;
        }
        let ok = !self.tracks[k].rejected && self.insert_one(k);
        self.attempts.push((k, ok));
        ok
    }

    /// Every insertion attempt so far, in order: (application, accepted).
    pub fn attempts(&self) -> &[(usize, bool)] {
        &self.attempts
    }

    fn insert_one(&mut self, k: usize) -> bool {
        if self.tracks[k].instances.is_empty() {
            return self.insert_first(k);
        }
        let w = self.apps[k].w;
        let compute_start = self.tracks[k].last_io_end;
        let deadline = self.tracks[k].origin + self.period;
        match self.fill(k, compute_start + w, deadline) {
            Some(f) => {
                self.commit(k, compute_start, f);
                true
            }
            None => false,
        }
    }

    /// INSERT-FIRST-INSTANCE: the first instance goes where its transfer takes the least time.
    ///
    /// **decision**: the paper places it by water-filling where the most bandwidth is free (§3.1, [19]); its
    /// reference code fills the free intervals in decreasing order of free bandwidth over the whole
    /// period, which can scatter one transfer over the instance's own compute. We keep a transfer
    /// contiguous in time (as every later instance is): for every event time s (where the free bandwidth
    /// changes, so where a shortest transfer can start) we fill greedily from s with the instance's own
    /// compute one period later (`s - w + T`) as deadline, and keep the start whose transfer ends first
    /// (ties: the earliest s). In an empty pattern this is s = 0.
    fn insert_first(&mut self, k: usize) -> bool {
        let w = self.apps[k].w;
        let t = self.period;
        let mut best: Option<(f64, f64, Fill)> = None;
        let starts: Vec<f64> = self.used.keys().map(|&b| f64::from_bits(b)).collect();
        for s in starts {
            if let Some(f) = self.fill(k, s, s - w + t) {
                let span = f.end - s;
                if best.as_ref().is_none_or(|(bs, _, _)| span < *bs) {
                    best = Some((span, s, f));
                }
            }
        }
        match best {
            Some((_, s, f)) => {
                self.commit(k, s - w, f);
                true
            }
            None => false,
        }
    }
}
