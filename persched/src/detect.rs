//! Spec: specs/periodic.md "In the file system" — our addition to PerSched: the MDS detects a periodic job
//! from its byte counters over time (bursts and gaps) instead of waiting for it to register its profile.
//! Pure: the input is the job's series of bytes per window Δt (the MDS's job registry's, `tessera_mds::jobs`).
//!
//! What counts as a burst reuses the characterisation criteria (`tessera_iostats::characterize`): a window
//! has I/O when H(t) says so ([`h_series`] with threshold c over the job's total), and bursts and gaps
//! are the runs of H ([`runs`], the runs burstiness averages over).
//!
//! **decisions**:
//! - Threshold c = max([`Params::min_bytes`], 10% of the series' largest window): scattered small I/O
//!   in the gaps (metadata-like noise, a log line) does not split or make a burst.
//! - The job's first burst is left out: a job's start often differs (reading its input, a first larger
//!   write) and its first counters may reach the MDS late, merged with the next burst's.
//! - A burst is *complete* once a gap follows it; the run still open at the end of the series may be a
//!   burst in progress and is left out of the volumes (its start still counts for the period).
//! - At least [`Params::min_bursts`] (3) complete bursts after the first among the last [`Params::history`] (8), whose
//!   start-to-start periods and volumes both have a coefficient of variation (population σ / mean) of at
//!   most [`Params::max_cv`] (0.2). That leaves room for the quantisation of a window (a burst starting
//!   one window early or late: periods of 5, 6 and 7 windows have a CV of 0.14) and for jitter of the
//!   compute phase; random series have CVs of 0.4 and more, yet a few pass by chance (the unit tests
//!   measure it: equal bursts after random gaps of 1–12 windows 6 times in 200, bursts of random volumes
//!   3 times in 200). A false positive costs the job a delay into its intervals, not correctness;
//!   such a job is dropped again once its I/O stops matching (it expires after a few idle periods).
//! - A burst's volume is everything the job moved from its start to the next burst's start (or the end
//!   of the series): the part of a transfer that spilled into a window under the threshold still
//!   belongs to its instance, and PerSched must fit all of an instance's bytes into its interval.
//! - The pattern must be current: the time since the last burst ended is at most two mean periods.
//! - The profile: w = the mean gap between a burst's end and the next one's start, vol = the mean volume;
//!   β is the caller's (the job's clients in the registry, one per node).

use tessera_iostats::characterize::{h_series, runs, Dir, Window};

/// Detection's parameters (see the decisions at the top).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// K: complete bursts needed.
    pub min_bursts: usize,
    /// The most recent bursts looked at.
    pub history: usize,
    /// Largest coefficient of variation of the periods and of the volumes.
    pub max_cv: f64,
    /// A window is part of a burst only above this many bytes (and 10% of the largest window).
    pub min_bytes: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params { min_bursts: 3, history: 8, max_cv: 0.2, min_bytes: 64 << 10 }
    }
}

/// What the MDS knows of one job's recent I/O (built from the MDS's job registry, `tessera_mds::jobs::Jobs::series`).
#[derive(Clone, Debug, PartialEq)]
pub struct JobSeries {
    pub job: String,
    /// Clients the job used (one per node): its β.
    pub nodes: u32,
    /// Δt, ms.
    pub dt_ms: u64,
    /// Bytes read and written per window, oldest first, up to the current window.
    pub bytes: Vec<u64>,
    /// When its last window with I/O began, Unix ms.
    pub last_io_ms: u64,
}

/// A detected periodic pattern.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Detected {
    /// Mean start-to-start period, ms.
    pub period_ms: u64,
    /// w: mean gap between bursts (the compute phase), ms.
    pub gap_ms: u64,
    /// vol: mean bytes per burst.
    pub volume: u64,
    /// Complete bursts the means are over.
    pub bursts: usize,
    pub period_cv: f64,
    pub volume_cv: f64,
}

/// Population coefficient of variation (σ / mean); infinite for an empty set or a zero mean.
pub fn cv(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if xs.is_empty() || mean <= 0.0 {
        return f64::INFINITY;
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// Finds a periodic pattern in `bytes` (bytes per window of `dt_ms`, oldest first, the last window the
/// current one). `None`: not (or no longer) periodic.
pub fn detect(bytes: &[u64], dt_ms: u64, p: &Params) -> Option<Detected> {
    if dt_ms == 0 || p.min_bursts < 2 {
        return None;
    }
    let peak = bytes.iter().copied().max()?;
    let c = p.min_bytes.max(peak / 10);
    let windows: Vec<Window> = bytes.iter().map(|&b| Window { write_bytes: b, ..Default::default() }).collect();
    let h = h_series(&windows, c, Dir::Both);
    let all = runs(&h);
    // The job's first burst is left out (see the decisions).
    let bursts: Vec<_> = all.iter().filter(|r| r.io).skip(1).collect();
    // Complete bursts: a gap follows (the last run of the series is not one of them if it is a burst).
    let complete = bursts.len().saturating_sub(usize::from(all.last().is_some_and(|r| r.io)));
    if complete < p.min_bursts {
        return None;
    }
    // The last `history` complete bursts, and the start of the one after them (if any) for the last period.
    let first = complete.saturating_sub(p.history.max(p.min_bursts));
    let chosen = &bursts[first..complete];
    let next_start = bursts.get(complete).map(|r| r.start);
    let starts: Vec<usize> = chosen.iter().map(|r| r.start).chain(next_start).collect();
    let periods: Vec<f64> = starts.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let gaps: Vec<f64> =
        chosen.iter().zip(starts.iter().skip(1)).map(|(b, &next)| (next - (b.start + b.len)) as f64).collect();
    let volumes: Vec<f64> = chosen
        .iter()
        .zip(starts.iter().skip(1).map(|&s| Some(s)).chain([None]))
        .map(|(b, next)| bytes[b.start..next.unwrap_or(bytes.len())].iter().sum::<u64>() as f64)
        .collect();
    if periods.len() + 1 < p.min_bursts {
        return None;
    }
    let (period_cv, volume_cv) = (cv(&periods), cv(&volumes));
    if period_cv > p.max_cv || volume_cv > p.max_cv {
        return None;
    }
    let period = mean(&periods);
    let gap = mean(&gaps);
    // Current: the last burst (complete or in progress) ended at most two periods ago.
    let last = bursts.last()?;
    let idle = bytes.len() - (last.start + last.len);
    if idle as f64 > 2.0 * period || gap < 1.0 {
        return None;
    }
    Some(Detected {
        period_ms: (period * dt_ms as f64).round() as u64,
        gap_ms: (gap * dt_ms as f64).round() as u64,
        volume: mean(&volumes).round() as u64,
        bursts: chosen.len(),
        period_cv,
        volume_cv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    /// `n` cycles of `on` windows of `per` bytes then `off` idle windows, then `tail` idle windows.
    fn periodic(n: usize, on: usize, off: usize, per: u64, tail: usize) -> Vec<u64> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend(std::iter::repeat_n(per, on));
            v.extend(std::iter::repeat_n(0, off));
        }
        v.truncate(v.len() - off);
        v.extend(std::iter::repeat_n(0, tail));
        v
    }

    /// A deterministic pseudo-random sequence (an LCG), values in 0..m.
    fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        move |m| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        }
    }

    #[test]
    fn a_regular_series_gives_its_gap_volume_and_period() {
        // Bursts of 2 s × 30 MB every 10 s (8 s of compute), the last one 3 s ago.
        let s = periodic(5, 2, 8, 30 * MB, 3);
        let d = detect(&s, 1_000, &Params::default()).expect("periodic");
        assert_eq!((d.period_ms, d.gap_ms, d.volume, d.bursts), (10_000, 8_000, 60 * MB, 4), "the first left out");
        assert_eq!((d.period_cv, d.volume_cv), (0.0, 0.0));
        // Windows of 250 ms: the same in ms.
        let d = detect(&s, 250, &Params::default()).unwrap();
        assert_eq!((d.period_ms, d.gap_ms), (2_500, 2_000));
    }

    #[test]
    fn a_burst_in_progress_counts_for_the_period_not_the_volume() {
        let mut s = periodic(4, 2, 8, 30 * MB, 8);
        s.push(5 * MB); // the fifth burst has just started
        let d = detect(&s, 1_000, &Params::default()).unwrap();
        assert_eq!((d.bursts, d.volume, d.period_ms), (3, 60 * MB, 10_000));
    }

    #[test]
    fn a_single_burst_or_two_are_not_a_pattern() {
        let p = Params::default();
        assert_eq!(detect(&periodic(1, 3, 5, 30 * MB, 10), 1_000, &p), None);
        assert_eq!(detect(&periodic(3, 3, 5, 30 * MB, 2), 1_000, &p), None, "the first burst does not count");
        assert!(detect(&periodic(4, 3, 5, 30 * MB, 2), 1_000, &p).is_some(), "K = 3 after it is enough");
        // A larger first burst (reading the input) changes nothing.
        let mut s = vec![90 * MB, 0, 0, 0, 0];
        s.extend(periodic(4, 1, 5, 30 * MB, 2));
        assert_eq!(detect(&s, 1_000, &p).map(|d| (d.volume, d.period_ms)), Some((30 * MB, 6_000)));
        // Steady I/O: one run, no gaps.
        assert_eq!(detect(&[10 * MB; 60], 1_000, &p), None);
        assert_eq!(detect(&[], 1_000, &p), None);
        assert_eq!(detect(&[0; 30], 1_000, &p), None);
    }

    #[test]
    fn a_pattern_that_stopped_is_no_longer_detected() {
        let p = Params::default();
        assert!(detect(&periodic(5, 2, 8, 30 * MB, 20), 1_000, &p).is_some(), "two periods idle");
        assert_eq!(detect(&periodic(5, 2, 8, 30 * MB, 21), 1_000, &p), None, "more than two periods idle");
    }

    #[test]
    fn random_series_are_not_periodic() {
        let mut regular_volume_hits = 0;
        for seed in 0..200 {
            let mut r = lcg(seed);
            // On/off with probability 1/2 per window, random volumes.
            let s: Vec<u64> = (0..120).map(|_| if r(2) == 0 { 0 } else { MB + r(50) * MB }).collect();
            assert_eq!(detect(&s, 1_000, &Params::default()), None, "seed {seed}: {s:?}");
            // Regular volumes but random gaps of 1..=12 windows.
            let mut s = Vec::new();
            for _ in 0..12 {
                s.push(20 * MB);
                s.extend(std::iter::repeat_n(0, 1 + r(12) as usize));
            }
            regular_volume_hits += usize::from(detect(&s, 1_000, &Params::default()).is_some());
        }
        // Periods of 2..=13 windows drawn at random: a CV of about 0.45; seven in a row under 0.2 is rare.
        assert!(regular_volume_hits <= 8, "{regular_volume_hits} of 200 random-gap series detected");
    }

    #[test]
    fn regular_gaps_with_random_volumes_are_not_periodic() {
        let mut hits = 0;
        for seed in 0..200 {
            let mut r = lcg(seed);
            let mut s = Vec::new();
            for _ in 0..10 {
                s.push(10 * MB + r(90) * MB);
                s.extend([0; 5]);
            }
            hits += usize::from(detect(&s, 1_000, &Params::default()).is_some());
        }
        assert!(hits <= 4, "{hits} of 200 random-volume series detected");
        // Volumes of 30 and 100 MB alternating: a CV of 0.54.
        let s: Vec<u64> = (0..40)
            .map(|t| {
                if t % 5 == 0 {
                    if t % 10 == 0 {
                        30 * MB
                    } else {
                        100 * MB
                    }
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(detect(&s, 1_000, &Params::default()), None);
    }

    #[test]
    fn noise_and_jitter_are_tolerated() {
        for seed in 0..100 {
            let mut r = lcg(seed);
            let mut s = Vec::new();
            for _ in 0..8 {
                // 40 MB ± 10% split over 2 windows (the split point moves), then 9 ± 1 windows of compute
                // with small I/O (under 64 KiB a window) now and then.
                let vol = 36 * MB + r(8 * MB);
                let first = vol / 4 + r(vol / 2);
                s.extend([first, vol - first]);
                for _ in 0..(8 + r(3)) {
                    s.push(if r(3) == 0 { r(60_000) } else { 0 });
                }
            }
            let d = detect(&s, 1_000, &Params::default()).unwrap_or_else(|| panic!("seed {seed}: {s:?}"));
            assert!(d.volume.abs_diff(40 * MB) < 4 * MB, "seed {seed}: {d:?}");
            assert!(d.gap_ms.abs_diff(9_000) <= 1_000 && d.period_ms.abs_diff(11_000) <= 1_000, "{d:?}");
        }
    }

    #[test]
    fn cv_is_sigma_over_mean() {
        assert_eq!(cv(&[2.0, 2.0]), 0.0);
        assert!((cv(&[1.0, 3.0]) - 0.5).abs() < 1e-12);
        assert_eq!(cv(&[]), f64::INFINITY);
        assert_eq!(cv(&[0.0, 0.0]), f64::INFINITY);
    }
}
