//! PerSched (specs/periodic.md): a periodic job's profile, its grant in the pattern, and the status of
//! every periodic job.

use serde::{Deserialize, Serialize};

/// A periodic job's profile (PerSched, specs/periodic.md): β nodes, w of compute, then `volume` bytes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicProfile {
    pub nodes: u32,
    pub compute_ms: u64,
    pub volume: u64,
}

/// During `[start_ms, end_ms)` modulo the period the job may transfer at `bytes_per_sec` in total.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicInterval {
    pub start_ms: u64,
    pub end_ms: u64,
    pub bytes_per_sec: u64,
}

/// A job's reservation in the current pattern, whose time 0 is `origin_ms` (Unix ms).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicGrant {
    pub epoch: u64,
    pub origin_ms: u64,
    pub period_ms: u64,
    pub intervals: Vec<PeriodicInterval>,
    /// Poll again within this long or lose the reservation.
    pub lease_ms: u64,
    /// The cluster schedules online instead of by pattern: the job asks for its rate with `PeriodicIo`
    /// when a transfer starts and says when it ends (no intervals).
    pub online: bool,
    /// The job's volume per instance (bytes): a transfer that began in an interval goes on until the job has
    /// moved this much, even past the interval's end (0: unknown, intervals are strict).
    pub volume: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicJob {
    pub job: String,
    pub profile: PeriodicProfile,
    pub planned_rho: f64,
    pub measured_rho: Option<f64>,
    pub dilation: f64,
    /// How the MDS learnt the profile.
    pub source: PeriodicSource,
}

/// Where a periodic job's profile comes from: the job registered it, or the MDS detected it from the
/// job's byte counters (bursts and gaps).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum PeriodicSource {
    #[default]
    Registered,
    Detected,
}

impl PeriodicSource {
    pub fn name(self) -> &'static str {
        match self {
            PeriodicSource::Registered => "registered",
            PeriodicSource::Detected => "detected",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PeriodicReport {
    pub jobs: Vec<PeriodicJob>,
    pub period_ms: u64,
    pub syseff: f64,
    pub upper_bound: f64,
}
