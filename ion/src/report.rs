//! The forwarding node's per-job report to the MDS (specs/characterization.md: counters per node and per
//! job, forwarding nodes included): every interval, the detail of the jobs whose forwarded requests it
//! counted since the last one ([`IonJobReport`]), like a data server's `DsJobReport`. Jobs whose report
//! was not delivered are sent again next time.

use crate::stats::Stats;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::msg::{IonJobReport, MdsCall, MdsRequest};
use tessera_proto::{Caller, Origin};
use tracing::debug;

/// The report of the jobs changed since the last one (none if nothing changed).
pub fn build(stats: &Stats, ion: u32) -> Option<IonJobReport> {
    let jobs = stats.jobs.take_changed();
    (!jobs.is_empty()).then(|| IonJobReport {
        ion,
        at_unix_us: tessera_proto::types::unix_us(),
        generation: stats.jobs.generation(),
        jobs,
    })
}

/// Sends [`build`]'s report to the MDS every `interval` (at least 10 ms) while per-job counting is on.
pub fn spawn(
    stats: Arc<Stats>,
    ion: u32,
    mds: Arc<tessera_proto::rpc::MdsPeers>,
    interval: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    if !stats.jobs.enabled() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(r) = build(&stats, ion) else { continue };
            let call = MdsCall {
                caller: Caller::root(),
                origin: Origin::default(),
                req: MdsRequest::IonJobReport(Box::new(r)),
                seq: 0,
            };
            if let Err(e) = mds.send_once(&call).await {
                debug!("job report not delivered: {e}");
                if let MdsRequest::IonJobReport(r) = &call.req {
                    stats.jobs.mark_changed(r.jobs.iter().map(|j| j.job.as_str()));
                }
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::IoTag;

    #[test]
    fn reports_the_changed_jobs_once() {
        let s = Stats::default();
        assert!(build(&s, 2).is_none(), "nothing counted");
        let tag = IoTag { origin: Origin { job: "j".into(), client: 1, pid: 4 }, ino: 9 };
        s.answered(&tag, 5, 0, 4096, true);
        let r = build(&s, 2).unwrap();
        assert_eq!((r.ion, r.generation, r.jobs.len()), (2, s.jobs.generation(), 1));
        assert_eq!((r.jobs[0].job.as_str(), r.jobs[0].write_bytes), ("j", 4096));
        assert!(build(&s, 2).is_none(), "unchanged since");
        s.jobs.mark_changed(["j"]);
        assert_eq!(build(&s, 2).unwrap().jobs[0].write_ops, 1, "undelivered: again, cumulative");
    }
}
