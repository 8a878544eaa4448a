//! Spec: specs/periodic.md "In the file system" — PerSched's requests as the MDS serves them (register,
//! poll, rate, leave, status), on the registry it shares with the detector and the metrics ([`Shared`]).

use super::shared::Shared;
use std::sync::Arc;
use tessera_proto::msg::{MdsReply, MdsRequest};
use tessera_proto::{FsError, FsResult};
use tracing::info;

/// PerSched's requests for the calling job (specs/periodic.md): expired reservations go first. A change
/// is planned outside the registry's lock ([`Shared::settle`]): a registration or departure waits for its
/// plan, so a registration is answered with its grant; a poll, rate or status that found expired jobs
/// answers at once and leaves the plan to a task.
pub async fn serve(persched: &Arc<Shared>, job: &str, req: MdsRequest) -> FsResult<MdsReply> {
    let now_ms = tessera_proto::types::unix_us() / 1000;
    let (refused, stale) = {
        let mut r = persched.lock();
        for gone in r.expire(now_ms) {
            info!(job = %gone, "periodic job stopped polling: reservation dropped");
        }
        let refused = match &req {
            MdsRequest::PeriodicRegister { profile } => r.register(job, (*profile).into(), now_ms).err(),
            MdsRequest::PeriodicLeave => {
                r.leave(job);
                None
            }
            _ => None,
        };
        (refused, r.stale())
    };
    if stale {
        if matches!(req, MdsRequest::PeriodicRegister { .. } | MdsRequest::PeriodicLeave) {
            persched.settle().await;
        } else {
            persched.settle_later();
        }
    }
    if let Some(e) = refused {
        return Err(FsError::invalid(e));
    }
    let mut r = persched.lock();
    match req {
        MdsRequest::PeriodicRegister { .. } => Ok(MdsReply::Periodic(r.grant(job).map(Into::into))),
        MdsRequest::PeriodicPoll { done } => Ok(MdsReply::Periodic(r.poll(job, done, now_ms).map(Into::into))),
        MdsRequest::PeriodicLeave => Ok(MdsReply::Ok),
        MdsRequest::PeriodicIo { want, done } => r
            .io(job, want, done, now_ms)
            .map(MdsReply::PeriodicRate)
            .ok_or_else(|| FsError::invalid("this job is not registered as periodic")),
        _ => Ok(MdsReply::PeriodicStatus(r.status(now_ms).into())),
    }
}
