//! Per-job read/write operation and byte counters since the server started, and each job's detail:
//! request-size histograms, small requests, and per stream (file, process, object, direction) its
//! counts and online spatial class (`crate::characterize`).

use crate::characterize::SpatialTracker;
use std::collections::HashMap;
use std::sync::Mutex;
use tessera_proto::msg::{
    JobCounters, JobDetail, SizeHistogram, StreamCounters, MAX_JOBS_PER_DETAIL, MAX_STREAMS_PER_JOB, SMALL_REQUEST,
};
use tessera_proto::types::job_entry;
use tessera_proto::{IoTag, ObjectId};

/// Request sizes and forwarded requests since the server started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub sizes: SizeHistogram,
    pub forwarded: u64,
    pub forwarded_client_requests: u64,
}

/// One job's counters with the spatial tracker of each of its streams.
#[derive(Default)]
struct JobState {
    detail: JobDetail,
    streams: HashMap<StreamKey, (StreamCounters, SpatialTracker)>,
    /// Changed since its detail was last taken ([`Counters::take_changed`]).
    changed: bool,
}

/// (ino, client, pid, object, write)
type StreamKey = (u64, u64, u32, u64, bool);

pub struct Counters {
    jobs: Mutex<HashMap<String, JobCounters>>,
    /// Per-job detail: size histograms, small requests, streams.
    details: Mutex<HashMap<String, JobState>>,
    /// Sizes of the read and write requests served, and how many came through forwarding nodes.
    traffic: Mutex<Traffic>,
    /// This set of counters' generation (reported with them): they count from zero since it began.
    generation: u64,
    /// Per-job counting on (`[metrics] job_counters`); off, reads and writes are not counted per job.
    enabled: bool,
}

impl Default for Counters {
    fn default() -> Self {
        Counters::new()
    }
}

impl Counters {
    /// Counters from zero, in a new generation (the time they start, microseconds since the epoch: two
    /// starts of a server never share one, and a reader can tell which is newer).
    pub fn new() -> Counters {
        Counters::switched(true)
    }

    /// [`Counters::new`], counting per job only if `enabled` (`[metrics] job_counters`).
    pub fn switched(enabled: bool) -> Counters {
        Counters {
            jobs: Mutex::default(),
            details: Mutex::default(),
            traffic: Mutex::default(),
            generation: tessera_proto::types::unix_us(),
            enabled,
        }
    }

    /// Whether reads and writes are counted per job.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    fn with_job(&self, job: &str, f: impl FnOnce(&mut JobCounters)) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        f(job_entry(&mut jobs, job, |key| JobCounters { job: key.to_string(), ..Default::default() }));
    }

    /// A read of `bytes` at `offset` of `object` served for `tag`.
    pub fn record_read(&self, tag: &IoTag, object: ObjectId, offset: u64, bytes: u64) {
        self.record(tag, object, offset, bytes, false);
    }

    /// A write of `bytes` at `offset` of `object` served for `tag`.
    pub fn record_write(&self, tag: &IoTag, object: ObjectId, offset: u64, bytes: u64) {
        self.record(tag, object, offset, bytes, true);
    }

    /// A read or (`write`) write of `bytes` at `offset` of `object` served for `tag`; nothing when
    /// switched off.
    pub fn record(&self, tag: &IoTag, object: ObjectId, offset: u64, bytes: u64, write: bool) {
        if !self.enabled {
            return;
        }
        self.with_job(tag.job(), |c| {
            let (ops, total) =
                if write { (&mut c.write_ops, &mut c.write_bytes) } else { (&mut c.read_ops, &mut c.read_bytes) };
            *ops += 1;
            *total += bytes;
        });
        self.record_detail(tag, object, offset, bytes, write);
    }

    fn record_detail(&self, tag: &IoTag, object: ObjectId, offset: u64, bytes: u64, write: bool) {
        let mut m = self.details.lock().unwrap_or_else(|p| p.into_inner());
        let st = job_entry(&mut m, tag.job(), |key| JobState {
            detail: JobDetail { job: key.to_string(), ..Default::default() },
            ..Default::default()
        });
        st.changed = true;
        let d = &mut st.detail;
        let small = u64::from(bytes <= SMALL_REQUEST);
        if write {
            d.write_ops += 1;
            d.write_bytes += bytes;
            d.write_sizes.record(bytes);
            d.write_small += small;
        } else {
            d.read_ops += 1;
            d.read_bytes += bytes;
            d.read_sizes.record(bytes);
            d.read_small += small;
        }
        let key = (tag.ino, tag.origin.client, tag.origin.pid, object, write);
        if !st.streams.contains_key(&key) && st.streams.len() >= MAX_STREAMS_PER_JOB {
            return;
        }
        let (c, t) = st.streams.entry(key).or_insert_with(|| {
            let c = StreamCounters {
                ino: tag.ino,
                client: tag.origin.client,
                pid: tag.origin.pid,
                object,
                write,
                ..Default::default()
            };
            (c, SpatialTracker::default())
        });
        c.ops += 1;
        c.bytes += bytes;
        t.push(offset, bytes);
    }

    /// The detail of the jobs changed since the last call (at most [`MAX_JOBS_PER_DETAIL`]; the others
    /// stay marked for the next), cumulative since the generation began.
    pub fn take_changed(&self) -> Vec<JobDetail> {
        let mut m = self.details.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for st in m.values_mut().filter(|s| s.changed).take(MAX_JOBS_PER_DETAIL) {
            st.changed = false;
            out.push(Self::detail_of(st));
        }
        out
    }

    /// Marks jobs changed again (their detail was not delivered).
    pub fn mark_changed<'a>(&self, jobs: impl IntoIterator<Item = &'a str>) {
        let mut m = self.details.lock().unwrap_or_else(|p| p.into_inner());
        for j in jobs {
            if let Some(st) = m.get_mut(j) {
                st.changed = true;
            }
        }
    }

    /// Every job's detail (the `Report` request's and tests').
    pub fn details(&self) -> Vec<JobDetail> {
        let m = self.details.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<JobDetail> = m.values().map(Self::detail_of).collect();
        v.sort_by(|a, b| a.job.cmp(&b.job));
        v
    }

    fn detail_of(st: &JobState) -> JobDetail {
        let mut d = st.detail.clone();
        d.streams = st.streams.values().map(|(c, t)| StreamCounters { spatial: t.class(), ..c.clone() }).collect();
        d.streams.sort_by_key(|s| (s.ino, s.client, s.pid, s.object, s.write));
        d
    }

    /// A read or write request of `len` bytes arrived; `forwarded`: it carried this many client
    /// requests merged by a forwarding node.
    pub fn record_request(&self, len: u64, forwarded: Option<u32>) {
        let mut t = self.traffic.lock().unwrap_or_else(|p| p.into_inner());
        t.sizes.record(len);
        if let Some(n) = forwarded {
            t.forwarded += 1;
            t.forwarded_client_requests += u64::from(n);
        }
    }

    pub fn traffic(&self) -> Traffic {
        self.traffic.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// All jobs' counters, sorted by job id.
    pub fn snapshot(&self) -> Vec<JobCounters> {
        let mut v: Vec<JobCounters> = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        v.sort_by(|a, b| a.job.cmp(&b.job));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::characterize::Spatial;
    use tessera_proto::types::{MAX_JOBS, OVERFLOW_JOB};
    use tessera_proto::Origin;

    fn tag(job: &str, ino: u64, pid: u32) -> IoTag {
        IoTag { origin: Origin { job: job.into(), client: 9, pid }, ino }
    }

    #[test]
    fn job_detail_has_sizes_small_requests_and_streams_with_their_class() {
        let c = Counters::new();
        // Two processes of a strided shared file (32 KiB, P = 2), one of a file of its own.
        for k in 0..8u64 {
            for r in 0..2u32 {
                c.record_write(&tag("j", 5, r), 77, (k * 2 + u64::from(r)) * 32768, 32768);
            }
            c.record_read(&tag("j", 6, 3), 78, k * 100, 100);
        }
        c.record_write(&tag("other", 1, 0), 1, 0, 1);
        let changed = c.take_changed();
        assert_eq!(changed.len(), 2);
        assert!(c.take_changed().is_empty(), "nothing changed since");
        let d = changed.into_iter().find(|d| d.job == "j").unwrap();
        assert_eq!((d.write_ops, d.write_bytes, d.read_ops, d.read_bytes), (16, 16 * 32768, 8, 800));
        assert_eq!(d.write_sizes.counts[SizeHistogram::bucket(32768)], 16);
        assert_eq!((d.read_small, d.write_small), (8, 0));
        assert_eq!(d.streams.len(), 3);
        let w: Vec<_> = d.streams.iter().filter(|s| s.write).collect();
        assert!(w.iter().all(|s| s.spatial == Spatial::Strided(65536) && s.ops == 8 && s.ino == 5));
        let r = d.streams.iter().find(|s| !s.write).unwrap();
        assert_eq!((r.pid, r.spatial), (3, Spatial::Contiguous));
        c.record_read(&tag("j", 6, 3), 78, 0, 100);
        c.mark_changed(["other"]);
        let again = c.take_changed();
        assert_eq!(again.len(), 2, "changed, and marked again");
        assert_eq!(again.iter().find(|d| d.job == "j").unwrap().read_ops, 9, "cumulative");
        // Streams per job are bounded.
        for i in 0..MAX_STREAMS_PER_JOB as u64 + 10 {
            c.record_write(&tag("many", i, 0), i, 0, 1);
        }
        let many = c.details().into_iter().find(|d| d.job == "many").unwrap();
        assert_eq!((many.streams.len(), many.write_ops), (MAX_STREAMS_PER_JOB, MAX_STREAMS_PER_JOB as u64 + 10));
    }

    #[test]
    fn counts_per_job_and_bounds_jobs() {
        let c = Counters::new();
        c.record_read(&tag("a", 1, 0), 1, 0, 10);
        c.record_read(&tag("a", 1, 0), 1, 10, 5);
        c.record_write(&tag("b", 1, 0), 1, 0, 7);
        let s = c.snapshot();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].job.as_str(), s[0].read_ops, s[0].read_bytes, s[0].write_ops), ("a", 2, 15, 0));
        assert_eq!((s[1].job.as_str(), s[1].write_ops, s[1].write_bytes), ("b", 1, 7));
        for i in 0..MAX_JOBS + 10 {
            c.record_write(&tag(&format!("j{i}"), 1, 0), 1, 0, 1);
        }
        let s = c.snapshot();
        assert_eq!(s.len(), MAX_JOBS + 1);
        assert!(s.iter().any(|j| j.job == OVERFLOW_JOB && j.write_ops >= 10));
    }

    #[test]
    fn switched_off_counts_no_job_but_the_request_sizes() {
        let c = Counters::switched(false);
        assert!(!c.enabled());
        c.record_read(&tag("a", 1, 0), 1, 0, 10);
        c.record_write(&tag("a", 1, 0), 1, 0, 10);
        c.record_request(10, None);
        assert!(c.snapshot().is_empty() && c.details().is_empty() && c.take_changed().is_empty());
        assert_eq!(c.traffic().sizes.total(), 1);
        assert!(Counters::new().enabled(), "on by default");
    }

    #[test]
    fn request_sizes_and_forwarded_requests() {
        let c = Counters::new();
        c.record_request(4096, None);
        c.record_request(1 << 20, Some(16));
        c.record_request(50, Some(1));
        let t = c.traffic();
        assert_eq!(t.sizes.counts[SizeHistogram::bucket(4096)], 1);
        assert_eq!(t.sizes.counts[4], 0, "1 MiB is in the 1-4 MiB bucket");
        assert_eq!(t.sizes.counts[5], 1);
        assert_eq!(t.sizes.counts[0], 1);
        assert_eq!((t.forwarded, t.forwarded_client_requests), (2, 17));
    }
}
