//! What a forwarding node measures (`specs/forwarding.md`, Measurements): request-size histograms where
//! requests leave the clients (the application's read or write a request is part of), arrive here and
//! leave here (merged), the mean offset distance of the stream leaving to each data server, the median
//! inter-arrival time, and per job its reads and writes as a data server counts them
//! ([`tessera_iostats::counters`]: requests, bytes, Darshan's size buckets, streams), reported to the
//! MDS ([`crate::report`]).
//!
//! Offset distance: between two consecutive requests leaving to the same data server for the same
//! object, |start of the second − end of the first| (0 for a sequential stream). A request for another
//! object than the previous one to that server counts as an object switch instead (the forwarding node
//! does not know where objects lie on the server's disk).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use tessera_iostats::counters::Counters;
use tessera_proto::msg::{IonJob, IonStatus, SizeHistogram};
use tessera_proto::types::{DsId, IoTag, ObjectId};

/// Inter-arrival times kept for the median.
const INTERARRIVALS: usize = 1024;

#[derive(Default)]
struct Inner {
    leaving_clients: SizeHistogram,
    arriving: SizeHistogram,
    leaving: SizeHistogram,
    requests_forwarded: u64,
    bytes_forwarded: u64,
    dispatched: u64,
    metadata_calls: u64,
    /// Per data server: the object and end offset of the last request sent.
    last: HashMap<DsId, (ObjectId, u64)>,
    distance_sum: f64,
    distance_n: u64,
    object_switches: u64,
    last_arrival_us: Option<u64>,
    interarrivals: VecDeque<u64>,
}

/// A forwarding node's counters.
#[derive(Default)]
pub struct Stats {
    inner: Mutex<Inner>,
    /// Per job (switched by `[metrics] job_counters`).
    pub jobs: Counters,
}

impl Stats {
    /// Counting per job only if `job_counters`.
    pub fn switched(job_counters: bool) -> Stats {
        Stats { inner: Mutex::default(), jobs: Counters::switched(job_counters) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A data request of `len` bytes arrived at `now_us`, part of an application request of `app_len`.
    pub fn arrived(&self, len: u64, app_len: u64, now_us: u64) {
        let mut s = self.lock();
        s.leaving_clients.record(app_len.max(len));
        s.arriving.record(len);
        if let Some(prev) = s.last_arrival_us {
            if s.interarrivals.len() == INTERARRIVALS {
                s.interarrivals.pop_front();
            }
            s.interarrivals.push_back(now_us.saturating_sub(prev));
        }
        s.last_arrival_us = Some(now_us.max(s.last_arrival_us.unwrap_or(0)));
    }

    /// A (merged) request of `len` bytes left for data server `ds`.
    pub fn dispatched(&self, ds: DsId, object: ObjectId, offset: u64, len: u64) {
        let mut s = self.lock();
        s.leaving.record(len);
        s.dispatched += 1;
        match s.last.insert(ds, (object, offset + len)) {
            Some((o, end)) if o == object => {
                s.distance_sum += offset.abs_diff(end) as f64;
                s.distance_n += 1;
            }
            Some(_) => s.object_switches += 1,
            None => {}
        }
    }

    /// A client's read (`write` false) or write of `object` at `offset` was answered with `bytes` of
    /// data moved.
    pub fn answered(&self, tag: &IoTag, object: ObjectId, offset: u64, bytes: u64, write: bool) {
        {
            let mut s = self.lock();
            s.requests_forwarded += 1;
            s.bytes_forwarded += bytes;
        }
        self.jobs.record(tag, object, offset, bytes, write);
    }

    pub fn metadata_call(&self) {
        self.lock().metadata_calls += 1;
    }

    /// The counters' part of the forwarding node's status (the rest left at its default).
    pub fn snapshot(&self) -> IonStatus {
        let s = self.lock();
        let mut ia: Vec<u64> = s.interarrivals.iter().copied().collect();
        ia.sort_unstable();
        let jobs = self.jobs.snapshot().into_iter();
        let jobs = jobs
            .map(|j| IonJob { requests: j.read_ops + j.write_ops, bytes: j.read_bytes + j.write_bytes, job: j.job })
            .collect();
        IonStatus {
            sizes_leaving_clients: s.leaving_clients.clone(),
            sizes_arriving: s.arriving.clone(),
            sizes_leaving: s.leaving.clone(),
            requests_forwarded: s.requests_forwarded,
            bytes_forwarded: s.bytes_forwarded,
            dispatched: s.dispatched,
            metadata_calls: s.metadata_calls,
            mean_offset_distance: if s.distance_n == 0 { 0.0 } else { s.distance_sum / s.distance_n as f64 },
            object_switches: s.object_switches,
            median_interarrival_us: ia.get(ia.len() / 2).copied(),
            jobs,
            ..IonStatus::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::types::{MAX_JOBS, OVERFLOW_JOB};

    #[test]
    fn histograms_distances_and_interarrivals() {
        let s = Stats::default();
        for (i, t) in [0u64, 10, 30, 60].iter().enumerate() {
            s.arrived(32 << 10, 1 << 20, 1_000 + t);
            assert_eq!(s.snapshot().sizes_arriving.total(), i as u64 + 1);
        }
        let snap = s.snapshot();
        assert_eq!(snap.median_interarrival_us, Some(20), "gaps 10, 20, 30");
        assert_eq!(snap.sizes_leaving_clients.counts[SizeHistogram::bucket(1 << 20)], 4);
        assert_eq!(snap.sizes_arriving.counts[SizeHistogram::bucket(32 << 10)], 4);
        // A sequential stream to server 0, a jump of 1 MiB, and a switch of object.
        s.dispatched(0, 7, 0, 64 << 10);
        s.dispatched(0, 7, 64 << 10, 64 << 10);
        s.dispatched(0, 7, (128 << 10) + (1 << 20), 64 << 10);
        s.dispatched(0, 8, 0, 64 << 10);
        s.dispatched(1, 8, 5, 1);
        let snap = s.snapshot();
        assert_eq!(snap.mean_offset_distance, (1u64 << 20) as f64 / 2.0);
        assert_eq!((snap.object_switches, snap.dispatched), (1, 5));
        assert_eq!(snap.sizes_leaving.total(), 5);
    }

    fn tag(job: &str, pid: u32) -> IoTag {
        IoTag { origin: tessera_proto::Origin { job: job.into(), client: 3, pid }, ino: 7 }
    }

    #[test]
    fn jobs_are_counted_and_bounded() {
        let s = Stats::default();
        s.answered(&tag("a", 1), 70, 0, 10, true);
        s.answered(&tag("a", 1), 70, 10, 5, true);
        s.answered(&tag("b", 1), 70, 0, 1, false);
        let snap = s.snapshot();
        assert_eq!((snap.requests_forwarded, snap.bytes_forwarded), (3, 16));
        assert_eq!(snap.jobs[0], IonJob { job: "a".into(), requests: 2, bytes: 15 });
        for i in 0..MAX_JOBS + 5 {
            s.answered(&tag(&format!("j{i}"), 1), 70, 0, 1, false);
        }
        let snap = s.snapshot();
        assert_eq!(snap.jobs.len(), MAX_JOBS + 1);
        assert!(snap.jobs.iter().any(|j| j.job == OVERFLOW_JOB && j.requests >= 5));
    }

    #[test]
    fn job_detail_as_a_data_server_counts_it() {
        let s = Stats::default();
        // Two processes writing a shared file in 32 KiB blocks, strided (P = 2); one small read.
        for k in 0..4u64 {
            for p in 0..2u32 {
                s.answered(&tag("ior", p), 70, (k * 2 + u64::from(p)) * 32768, 32768, true);
            }
        }
        s.answered(&tag("ior", 0), 70, 0, 100, false);
        let d = s.jobs.take_changed();
        assert_eq!(d.len(), 1);
        let d = &d[0];
        assert_eq!((d.write_ops, d.write_bytes, d.read_ops, d.read_bytes), (8, 8 * 32768, 1, 100));
        assert_eq!(d.write_sizes.counts[SizeHistogram::bucket(32768)], 8);
        assert_eq!((d.read_small, d.read_sizes.counts[SizeHistogram::bucket(100)]), (1, 1));
        let w: Vec<_> = d.streams.iter().filter(|s| s.write).collect();
        assert_eq!(w.len(), 2);
        assert!(w.iter().all(|s| s.spatial == tessera_proto::msg::Spatial::Strided(65536)));
        // Switched off: the node's totals count, the jobs do not.
        let off = Stats::switched(false);
        off.answered(&tag("ior", 0), 70, 0, 100, false);
        let snap = off.snapshot();
        assert_eq!((snap.requests_forwarded, snap.jobs.len()), (1, 0));
        assert!(off.jobs.take_changed().is_empty());
    }
}
