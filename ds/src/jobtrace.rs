//! Per-job request traces (`tessera trace start|stop|export JOB`; spec: ../shared/specs/characterization.md):
//! for each traced job a bounded ring of [`TraceRecord`]s (client, process, file, object, offset, length,
//! op, start, end), numbered so a reader can page through them. Off for every job by default; the data
//! path only looks at an atomic count while no job is traced.

use crate::device::OpKind;
use crate::observe::{Observer, Request};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tessera_proto::msg::{DsReply, TraceRecord, MAX_TRACED_JOBS, MAX_TRACE_PAGE, MAX_TRACE_RECORDS};
use tessera_proto::types::JOB_ID_MAX;
use tessera_proto::{FsError, FsResult};

#[derive(Default)]
struct Ring {
    on: bool,
    /// Number of the first record kept.
    first: u64,
    records: VecDeque<TraceRecord>,
}

#[derive(Default)]
pub struct JobTraces {
    traced: AtomicUsize,
    jobs: Mutex<HashMap<String, Ring>>,
}

impl JobTraces {
    /// Whether `job`'s requests are traced (cheap while no job is).
    pub fn is_on(&self, job: &str) -> bool {
        self.traced.load(Ordering::Relaxed) > 0
            && self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(job).is_some_and(|r| r.on)
    }

    pub fn record(&self, job: &str, r: TraceRecord) {
        let mut m = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ring) = m.get_mut(job).filter(|r| r.on) {
            if ring.records.len() == MAX_TRACE_RECORDS {
                ring.records.pop_front();
                ring.first += 1;
            }
            ring.records.push_back(r);
        }
    }

    /// Serves a `JobTrace` request: switches the trace if asked, then a page of records from `after`.
    pub fn request(&self, job: &str, set: Option<bool>, after: u64, max: u32) -> FsResult<DsReply> {
        if job.len() > JOB_ID_MAX {
            return Err(FsError::invalid(format!("job id of {} bytes exceeds {JOB_ID_MAX}", job.len())));
        }
        let mut m = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(on) = set {
            let traced = m.values().filter(|r| r.on).count();
            let ring = m.get(job);
            let was = ring.is_some_and(|r| r.on);
            if on && !was && traced >= MAX_TRACED_JOBS {
                return Err(FsError::invalid(format!("{MAX_TRACED_JOBS} jobs are traced already here")));
            }
            if on && !was && ring.is_none() && m.len() >= 4 * MAX_TRACED_JOBS {
                // Stopped traces are kept for export; make room by the emptiest stopped one.
                if let Some(k) =
                    m.iter().filter(|(_, r)| !r.on).min_by_key(|(_, r)| r.records.len()).map(|(k, _)| k.clone())
                {
                    m.remove(&k);
                }
            }
            m.entry(job.to_string()).or_default().on = on;
            self.traced.store(m.values().filter(|r| r.on).count(), Ordering::Relaxed);
        }
        let Some(ring) = m.get(job) else {
            return Ok(DsReply::JobTrace { on: false, first: 0, next: 0, dropped: 0, records: Vec::new() });
        };
        let next = ring.first + ring.records.len() as u64;
        let from = after.clamp(ring.first, next);
        let take = (max as usize).min(MAX_TRACE_PAGE);
        let records: Vec<TraceRecord> =
            ring.records.iter().skip((from - ring.first) as usize).take(take).cloned().collect();
        let end = from + records.len() as u64;
        Ok(DsReply::JobTrace { on: ring.on, first: from, next: end, dropped: ring.first, records })
    }
}

/// A traced job's reads and writes (traced when they arrived): a record per run, from arrival to the
/// end of the request.
impl Observer for JobTraces {
    fn arrived(&self, req: &Request<'_>) -> bool {
        self.is_on(req.tag.job())
    }

    fn served(&self, req: &Request<'_>, _real: Duration) {
        if !matches!(req.op.kind, OpKind::Read | OpKind::Write) {
            return;
        }
        let end_us = tessera_proto::types::unix_us();
        for run in &req.runs {
            let rec = TraceRecord {
                client: req.tag.origin.client,
                pid: req.tag.origin.pid,
                ino: req.tag.ino,
                object: req.op.object,
                offset: run.offset,
                len: run.len,
                write: req.op.kind == OpKind::Write,
                start_us: req.arrived_us,
                end_us,
            };
            self.record(&req.job, rec);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: u64) -> TraceRecord {
        TraceRecord { offset, len: 1, ..Default::default() }
    }

    #[test]
    fn traces_only_jobs_switched_on_bounded_and_paged() {
        let t = JobTraces::default();
        assert!(!t.is_on("j"));
        t.record("j", rec(0));
        t.request("j", Some(true), 0, 0).unwrap();
        assert!(t.is_on("j") && !t.is_on("k"));
        for i in 0..(MAX_TRACE_RECORDS as u64 + 10) {
            t.record("j", rec(i));
        }
        let DsReply::JobTrace { on, first, next, dropped, records } = t.request("j", None, 0, 5).unwrap() else {
            panic!()
        };
        assert!(on);
        assert_eq!((first, next, dropped, records.len(), records[0].offset), (10, 15, 10, 5, 10));
        t.request("j", Some(false), 0, 0).unwrap();
        assert!(!t.is_on("j"));
        t.record("j", rec(1));
        let DsReply::JobTrace { next, .. } = t.request("j", None, u64::MAX, 10).unwrap() else { panic!() };
        assert_eq!(next, MAX_TRACE_RECORDS as u64 + 10, "stopped: kept for export, nothing added");
        for i in 0..MAX_TRACED_JOBS {
            t.request(&format!("x{i}"), Some(true), 0, 0).unwrap();
        }
        assert!(t.request("one-too-many", Some(true), 0, 0).is_err());
        assert!(t.request(&"j".repeat(JOB_ID_MAX + 1), None, 0, 0).is_err());
    }
}
