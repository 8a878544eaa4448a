//! Spec: specs/periodic.md "In the file system" — PerSched's requests as the MDS serves them (register,
//! poll, rate, leave, status) for the calling job, on the registry it shares with the detector and the
//! metrics ([`Shared`]).
//!
//! Each request first drops expired reservations, then makes its change. A change is planned outside the
//! registry's lock ([`Shared::settle`]): a registration or departure waits for its plan, so a registration
//! is answered with its grant; a poll, rate or status that found expired jobs answers at once and leaves the
//! plan to a task.

use super::shared::Shared;
use std::sync::Arc;
use tessera_proto::msg::{MdsReply, PeriodicProfile};
use tessera_proto::{FsError, FsResult};
use tracing::info;

/// What a request changes in the registry before it is answered.
#[derive(Clone, Copy)]
enum Change {
    Nothing,
    Register(PeriodicProfile),
    Leave,
}

/// `PeriodicRegister`: the job's profile joins the pattern; the reply is its grant.
pub async fn register(persched: &Arc<Shared>, job: &str, profile: PeriodicProfile) -> FsResult<MdsReply> {
    prepare(persched, job, Change::Register(profile)).await?;
    Ok(MdsReply::Periodic(persched.lock().grant(job).map(Into::into)))
}

/// `PeriodicPoll`: renews the job's reservation; the reply is its current grant.
pub async fn poll(persched: &Arc<Shared>, job: &str, done: u64) -> FsResult<MdsReply> {
    let now_ms = prepare(persched, job, Change::Nothing).await?;
    Ok(MdsReply::Periodic(persched.lock().poll(job, done, now_ms).map(Into::into)))
}

/// `PeriodicLeave`: the job leaves the pattern.
pub async fn leave(persched: &Arc<Shared>, job: &str) -> FsResult<MdsReply> {
    prepare(persched, job, Change::Leave).await?;
    Ok(MdsReply::Ok)
}

/// `PeriodicIo`: the rate the online arbiter grants the job now.
pub async fn io(persched: &Arc<Shared>, job: &str, want: bool, done: u64) -> FsResult<MdsReply> {
    let now_ms = prepare(persched, job, Change::Nothing).await?;
    persched
        .lock()
        .io(job, want, done, now_ms)
        .map(MdsReply::PeriodicRate)
        .ok_or_else(|| FsError::invalid("this job is not registered as periodic"))
}

/// `PeriodicStatus`: every periodic job's planned and measured efficiency.
pub async fn status(persched: &Arc<Shared>) -> FsResult<MdsReply> {
    let now_ms = prepare(persched, "", Change::Nothing).await?;
    Ok(MdsReply::PeriodicStatus(persched.lock().status(now_ms).into()))
}

/// Drops expired reservations and makes `job`'s change (see the module docs for when the plan follows).
/// Returns the time of the request, milliseconds since the Unix epoch.
async fn prepare(persched: &Arc<Shared>, job: &str, change: Change) -> FsResult<u64> {
    let now_ms = tessera_proto::types::unix_us() / 1000;
    let (refused, stale) = {
        let mut r = persched.lock();
        for gone in r.expire(now_ms) {
            info!(job = %gone, "periodic job stopped polling: reservation dropped");
        }
        let refused = match change {
            Change::Register(profile) => r.register(job, profile.into(), now_ms).err(),
            Change::Leave => {
                r.leave(job);
                None
            }
            Change::Nothing => None,
        };
        (refused, r.stale())
    };
    if stale {
        if matches!(change, Change::Register(_) | Change::Leave) {
            persched.settle().await;
        } else {
            persched.settle_later();
        }
    }
    if let Some(e) = refused {
        return Err(FsError::invalid(e.to_string()));
    }
    Ok(now_ms)
}
