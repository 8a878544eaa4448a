//! Forwarding nodes (specs/forwarding.md): [`IonCall`] (metadata and data calls passed on, and the
//! node's own) and [`IonReply`], the request scheduler's setting and the node's status.

use super::common::SizeHistogram;
use super::ds::{DsCall, DsReply};
use super::mds::{MdsCall, MdsReply};
use crate::types::*;
use serde::{Deserialize, Serialize};

/// A call to a forwarding node (ION): the metadata and data calls it passes on, and its own.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum IonCall {
    /// Passed on to the MDS unchanged (not scheduled). Reply: [`IonReply::Mds`].
    Mds(MdsCall),
    /// Passed on to the data server it names, reads and writes through the request scheduler.
    /// `app_len`: the size of the application's read or write this request is part of (the ION's
    /// "leaving clients" histogram). Reply: [`IonReply::Ds`].
    Ds { call: DsCall, app_len: u64 },
    /// Reply: [`IonReply::Status`].
    Status,
    /// Switches the request scheduler (the admin certificate, or a root caller). Queued requests move
    /// to the new scheduler in their order; nothing acknowledged is lost. Reply: [`IonReply::Status`].
    SetScheduler { caller: Caller, setting: SchedulerSetting },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum IonReply {
    Mds(MdsReply),
    Ds(DsReply),
    Status(IonStatus),
}

/// A scheduler and its parameters (`None`: keep the current value).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct SchedulerSetting {
    pub name: String,
    pub window_us: Option<u64>,
    pub quantum: Option<u32>,
}

/// One job's traffic through a forwarding node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IonJob {
    pub job: String,
    pub requests: u64,
    pub bytes: u64,
}

/// A forwarding node's state (`tessera ion status`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct IonStatus {
    pub name: String,
    /// Its index in the configuration (TWINS's rotation k).
    pub index: u32,
    pub scheduler: String,
    pub window_us: u64,
    pub quantum: u32,
    /// Queued requests by scheduler queue.
    pub queues: Vec<(String, u64)>,
    /// Merged requests sent to data servers and not answered yet.
    pub in_flight: u32,
    /// Client data requests answered.
    pub requests_forwarded: u64,
    pub bytes_forwarded: u64,
    /// Requests sent to data servers (after merging).
    pub dispatched: u64,
    pub metadata_calls: u64,
    /// Sizes of the applications' reads and writes the requests were part of.
    pub sizes_leaving_clients: SizeHistogram,
    /// Sizes of the requests arriving here.
    pub sizes_arriving: SizeHistogram,
    /// Sizes of the (merged) requests sent to data servers.
    pub sizes_leaving: SizeHistogram,
    /// Mean |offset distance| between consecutive requests leaving to the same data server, bytes
    /// (object offsets, between requests for the same object).
    pub mean_offset_distance: f64,
    /// Consecutive requests leaving to the same data server for another object than the one before.
    pub object_switches: u64,
    /// Median time between consecutive arrivals over the recent ones, microseconds.
    pub median_interarrival_us: Option<u64>,
    pub jobs: Vec<IonJob>,
}
