//! Orchestration (IOrchestrator, specs/iorchestrator.md): the data servers' locality reports, the serve
//! commands they follow, and what the orchestrator sees and decides.

use crate::types::*;
use serde::{Deserialize, Serialize};

/// The orchestrator's mode (`orchestrator.mode`; switched at run time with `tessera orchestrator mode`).
/// Named in lower case in TOML and JSON; on the wire (bincode) by its index.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
#[serde(rename_all = "lowercase")]
pub enum OrchestratorMode {
    /// Vanilla: every data server serves work-conserving.
    Off,
    /// Dedicated slices of equal length.
    Even,
    /// Dedicated slices inversely proportional to reuse distance (the paper).
    #[default]
    IOrchestrator,
}

impl OrchestratorMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OrchestratorMode::Off => "off",
            OrchestratorMode::Even => "even",
            OrchestratorMode::IOrchestrator => "iorchestrator",
        }
    }
}

impl std::str::FromStr for OrchestratorMode {
    type Err = crate::error::UnknownName;
    fn from_str(s: &str) -> Result<Self, crate::error::UnknownName> {
        match s {
            "off" => Ok(OrchestratorMode::Off),
            "even" => Ok(OrchestratorMode::Even),
            "iorchestrator" => Ok(OrchestratorMode::IOrchestrator),
            _ => Err(crate::error::UnknownName {
                what: "orchestrator mode",
                name: s.to_string(),
                choices: &["off", "even", "iorchestrator"],
            }),
        }
    }
}

impl std::fmt::Display for OrchestratorMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One program's locality at one data server (EWMA values, spec: SL_ij and RD_ij).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobLocality {
    pub job: String,
    /// SL_ij: EWMA of the address gap between consecutive requests of this job here, bytes.
    pub sl: f64,
    /// RD_ij: EWMA of the time between consecutive requests of this job here, microseconds. Only
    /// meaningful while the job's object is being served (`rd_valid`).
    pub rd_us: f64,
    pub rd_valid: bool,
    /// Requests of this job served since the previous report.
    pub requests: u64,
    pub bytes: u64,
}

/// A data server's locality statistics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct LocalityReport {
    pub ds: DsId,
    /// SL_i: EWMA of the address gap between consecutive requests of any job, bytes.
    pub sl: f64,
    /// SeekTime_i: the expected cost of leaving to serve others, microseconds.
    pub seek_time_us: f64,
    pub jobs: Vec<JobLocality>,
    /// RD of the "others" object (all ineligible jobs together) while it was served, microseconds.
    pub others_rd_us: Option<f64>,
    /// The serve epoch this server currently follows (0 = work-conserving).
    pub epoch: u64,
}

/// Which requests a data server releases to its device.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum ServeTarget {
    /// Work-conserving: everything.
    All,
    /// Dedicated service to one program.
    Job(String),
    /// Every program except the eligible ones (the paper's object m+1).
    Others { eligible: Vec<String> },
}

/// The orchestrator's command at a slice start.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct ServeCommand {
    /// Increases with every command; older commands are ignored.
    pub epoch: u64,
    pub target: ServeTarget,
    /// Length of this slice, milliseconds.
    pub slice_ms: u32,
    /// If no newer command arrives within this many milliseconds, the server falls back to
    /// work-conserving service (the orchestrator must never be able to hang I/O).
    pub fallback_ms: u32,
}

/// One scheduling object of the current plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct PlanSlice {
    /// The job, or "(others)".
    pub label: String,
    pub target: ServeTarget,
    pub slice_ms: f64,
    /// Mean reuse distance used for the slice, microseconds (None: not measured yet).
    pub rd_us: Option<f64>,
}

/// A program as the orchestrator sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct JobView {
    pub job: String,
    pub eligible: bool,
    /// Why (not) eligible: which condition passed or failed, with the numbers.
    pub reason: String,
    /// Per server: (ds, SL_ij bytes, RD_ij microseconds if valid).
    pub servers: Vec<(DsId, f64, Option<f64>)>,
    /// Share of the window this job's object gets (0 when it is served among the others).
    pub slice_share: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct OrchestratorStatus {
    pub mode: OrchestratorMode,
    pub window_ms: u32,
    /// Per server: (ds, SL_i bytes, SeekTime_i microseconds, report age ms).
    pub servers: Vec<(DsId, f64, f64, u64)>,
    pub jobs: Vec<JobView>,
    pub plan: Vec<PlanSlice>,
    /// Spread of the servers' switch times at the last slice start, microseconds.
    pub last_switch_skew_us: Option<u64>,
    /// Median switch skew over recent slices, microseconds.
    pub median_switch_skew_us: Option<u64>,
    pub windows_run: u64,
}
