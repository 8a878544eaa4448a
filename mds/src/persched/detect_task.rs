//! Spec: specs/periodic.md "In the file system" — the MDS task that runs PerSched's detection
//! ([`super::detect`]) over the job registry's byte series (`[persched] detect`).

use super::shared::Shared;
use crate::jobs::Jobs;
use std::sync::Arc;
use tracing::info;

/// Jobs whose last I/O is older than this are not looked at by PerSched's detection.
pub const DETECT_RECENT: std::time::Duration = std::time::Duration::from_secs(300);

/// PerSched's detection (specs/periodic.md, `[persched] detect`): every `every`, the byte series of the
/// jobs with recent I/O go to [`crate::persched::live::Registry::observe`] (periodic jobs join the pattern
/// as detected, detected ones doing I/O keep it), then detected jobs idle for a few periods leave it.
pub fn spawn_detector(
    persched: Arc<Shared>,
    jobs: Arc<Jobs>,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let params = crate::persched::detect::Params::default();
        loop {
            tick.tick().await;
            let now_us = tessera_proto::types::unix_us();
            let series = jobs.series(now_us.saturating_sub(DETECT_RECENT.as_micros() as u64), now_us);
            {
                let mut r = persched.lock();
                for job in r.observe(&series, &params, now_us / 1000) {
                    info!(%job, "periodic job detected from its I/O: joins the pattern");
                }
                for job in r.expire(now_us / 1000) {
                    info!(%job, "periodic job idle or silent: reservation dropped");
                }
            }
            persched.settle().await;
        }
    })
}
