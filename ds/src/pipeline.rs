//! The data server's I/O path: every data request (read, vectored read, write, fsync) takes the same
//! steps, in [`DataPath::serve`]:
//!
//! 1. **address**: where its data lies in the target's volume ([`Addresses`]: the object's base +
//!    offset; each run of a vectored read at its own). It feeds the device model and the observers
//!    only, so a failed lookup never fails the request.
//! 2. **arrival**: each [`Observer`] sees the request arrive and says whether it wants to see it served.
//! 3. **queue**: the [`Scheduler`] queues it by job and runs it when its policy releases the job.
//! 4. **device**: the target's [`Device`] performs the real I/O; the `hdd` model only adds its delay
//!    (seek, rotation, transfer per run), the same for every request.
//! 5. **served**: the observers that asked see the request served, its runs in the order the device
//!    served them: the target's statistics ([`TargetStats`]), the per-job traces ([`JobTraces`]), the
//!    locality monitor ([`Locality`]) and the request trace ([`Trace`]).
//!
//! Observers only record: none changes how a request is served or can fail it.

use crate::address::Addresses;
use crate::device::{Device, DeviceModel, DeviceOp, OpKind};
use crate::jobtrace::JobTraces;
use crate::locality::Locality;
pub use crate::observe::{Observer, Request, Run};
use crate::scheduler::{Orchestrated, Scheduler, ServeControl};
use crate::store::Store;
use crate::targetstats::TargetStats;
use crate::trace::Trace;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_proto::config::{DsOptions, OrchestratorOptions};
use tessera_proto::msg::Extent;
use tessera_proto::{DsId, FsError, FsResult, IoTag};

/// One storage target: its object store, the addresses of its objects and its device queue.
#[derive(Clone)]
pub struct Target {
    pub store: Store,
    pub addresses: Arc<Addresses>,
    pub device: Device,
    /// Its request sizes, latencies and per-job traffic (for the reports).
    pub stats: Arc<TargetStats>,
}

/// The data path: the targets, the scheduler in front of their devices, the orchestrator's serve
/// control (the scheduler's policy follows it) and the observers.
#[derive(Clone)]
pub struct DataPath {
    /// By index: object `o` lives in target [`tessera_proto::target_of`]`(o)`.
    pub targets: Arc<[Target]>,
    pub scheduler: Scheduler,
    pub locality: Arc<Locality>,
    pub serve: Arc<ServeControl>,
    pub trace: Option<Arc<Trace>>,
    /// Per-job traces (`tessera trace`).
    pub job_traces: Arc<JobTraces>,
}

/// How to assemble a data server's parts.
#[derive(Clone, Debug)]
pub struct Setup {
    pub ds: DsId,
    pub model: DeviceModel,
    pub queue_depth: u32,
    pub reservation: u64,
    pub trace: bool,
    /// Jobs silent for longer are not reported.
    pub job_idle: Duration,
    /// Fallback for serve commands that do not name one.
    pub fallback: Duration,
    /// Count reads and writes per job (`[metrics] job_counters`).
    pub job_counters: bool,
}

impl Setup {
    /// Defaults of the configuration, for data server `ds`.
    pub fn new(ds: DsId) -> Setup {
        Setup::from_options(ds, &DsOptions::default(), &OrchestratorOptions::default(), DeviceModel::None)
    }

    pub fn from_options(ds: DsId, d: &DsOptions, o: &OrchestratorOptions, model: DeviceModel) -> Setup {
        Setup {
            ds,
            model,
            queue_depth: d.device_queue_depth,
            reservation: d.object_reservation_bytes,
            trace: d.trace,
            job_idle: Duration::from_millis(o.job_idle_ms),
            fallback: Duration::from_millis((u64::from(o.fallback_windows) * u64::from(o.window_ms)).max(100)),
            job_counters: true,
        }
    }
}

impl DataPath {
    /// Builds the data path of the targets `stores` (by index; at least one) as `s` says: each target's
    /// addresses, device and statistics, the scheduler, the locality monitor and the request trace. Needs
    /// a runtime.
    pub fn assemble(stores: &[Store], s: &Setup) -> FsResult<DataPath> {
        let first = stores.first().ok_or_else(|| FsError::invalid("a data server needs at least one target"))?;
        let trace = if s.trace { Some(Trace::start(first.root())?) } else { None };
        let targets = stores
            .iter()
            .map(|store| {
                Ok(Target {
                    store: store.clone(),
                    addresses: Addresses::open(store.root(), s.reservation)?,
                    device: Device::start(s.model)?,
                    stats: Arc::new(TargetStats::new(s.job_counters)),
                })
            })
            .collect::<FsResult<Vec<_>>>()?;
        let locality = Locality::new(s.ds, s.model, s.job_idle);
        let serve = ServeControl::new(locality.clone(), s.fallback);
        let scheduler = Scheduler::start(s.queue_depth, Orchestrated::new(serve.clone()));
        Ok(DataPath { targets: targets.into(), scheduler, locality, serve, trace, job_traces: Arc::default() })
    }
}

/// Most observers of a request: the target's statistics, job traces, locality, trace.
const OBSERVERS: usize = 4;

impl DataPath {
    /// Serves request `op` of `tag`'s job on `target`: `work` is its real I/O; `extents` are its runs
    /// when it has several (a vectored read), else empty (`op` is its one run).
    pub async fn serve<T>(
        &self,
        target: &Target,
        tag: &IoTag,
        op: DeviceOp,
        extents: &[Extent],
        work: impl Future<Output = FsResult<T>>,
    ) -> FsResult<T> {
        let addr = address(target, &op).await;
        let runs = match extents {
            [] => vec![Run { offset: op.offset, len: op.len, addr }],
            _ => {
                // The object's base address, then each run's.
                let base = addr.map(|a| a - op.offset);
                let run = |e: &Extent| Run {
                    offset: e.offset,
                    len: e.len.into(),
                    addr: base.map(|b| b.saturating_add(e.offset)),
                };
                extents.iter().map(run).collect()
            }
        };
        let job: Arc<str> = Arc::from(tag.job());
        let arrived_us = tessera_proto::types::unix_us();
        let mut req = Request { tag, job: job.clone(), op, runs, arrived: Instant::now(), arrived_us };
        let observers: [Option<&dyn Observer>; OBSERVERS] = [
            Some(&*target.stats),
            Some(&*self.job_traces),
            Some(&*self.locality),
            self.trace.as_deref().map(|t| t as &dyn Observer),
        ];
        let watching = observers.map(|o| o.filter(|o| o.arrived(&req)));
        self.scheduler
            .submit_arc(job, async move {
                let at: Vec<(u64, u64)> = req.runs.iter().filter_map(|r| Some((r.addr?, r.len))).collect();
                let done = target.device.perform(&at, work).await;
                if let Some(order) = done.order.filter(|o| o.len() == req.runs.len()) {
                    req.runs = order.iter().filter_map(|&i| req.runs.get(i).copied()).collect();
                }
                if done.result.is_ok() {
                    for o in watching.iter().flatten() {
                        o.served(&req, done.real);
                    }
                }
                done.result
            })
            .await
    }
}

/// Step 1: the address of `op` in `target`'s volume (none for an fsync). Addresses only feed the model
/// and the statistics: a failed lookup is logged, never the request's error.
async fn address(target: &Target, op: &DeviceOp) -> Option<u64> {
    if op.kind == OpKind::Fsync {
        return None;
    }
    let path = || target.store.object_path(op.object);
    match target.addresses.address(op.object, op.offset, op.kind == OpKind::Write, path).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(object = op.object, "no address for the request: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tessera_proto::msg::DsReply;

    fn path_with(setup: &Setup) -> (tempfile::TempDir, DataPath) {
        let d = tempfile::tempdir().unwrap();
        let path = DataPath::assemble(&[Store::open(d.path(), setup.ds).unwrap()], setup).unwrap();
        (d, path)
    }

    fn tag(job: &str) -> IoTag {
        IoTag { origin: tessera_proto::Origin { job: job.into(), client: 1, pid: 42 }, ino: 5 }
    }

    async fn write(path: &DataPath, job: &str, object: u64, offset: u64, data: &'static [u8]) {
        let target = &path.targets[0];
        let (store, len) = (target.store.clone(), data.len() as u64);
        let op = DeviceOp { kind: OpKind::Write, object, offset, len };
        let work = async move { store.write(object, offset, Bytes::from_static(data), false).await };
        path.serve(target, &tag(job), op, &[], work).await.unwrap();
    }

    async fn read_v(path: &DataPath, job: &str, object: u64, extents: &[Extent]) -> FsResult<Vec<u32>> {
        let target = &path.targets[0];
        let store = target.store.clone();
        let total = extents.iter().map(|e| u64::from(e.len)).sum();
        let op = DeviceOp { kind: OpKind::Read, object, offset: extents[0].offset, len: total };
        let runs = extents.iter().map(|e| (e.offset, e.len as usize)).collect();
        let work = async move { store.read_v(object, runs).await };
        path.serve(target, &tag(job), op, extents, work).await.map(|(lens, _)| lens)
    }

    #[tokio::test]
    async fn every_observer_sees_each_run_at_its_own_address_and_failures_not_at_all() {
        let (d, path) = path_with(&Setup { reservation: 1 << 20, trace: true, ..Setup::new(2) });
        let target = &path.targets[0];
        // Object 5 gets base 0 when first written, object 6 base 1 MiB.
        write(&path, "w", 5, 0, b"abc").await;
        write(&path, "w", 6, 100, b"abc").await;
        path.job_traces.request("r", Some(true), 0, 0).unwrap();
        let extents = [Extent { offset: 100, len: 2 }, Extent { offset: 4000, len: 8 }];
        assert_eq!(read_v(&path, "r", 6, &extents).await.unwrap(), [2, 0]);
        // A failed request is seen arriving (the locality monitor counts arrivals), never served.
        let op = DeviceOp { kind: OpKind::Read, object: 6, offset: 0, len: 1 };
        let failing = async { Err::<(), _>(tessera_proto::FsError::io("x")) };
        assert!(path.serve(target, &tag("r"), op, &[], failing).await.is_err());
        // Target statistics: one request each (a vectored read is one request of all its bytes).
        assert_eq!(target.stats.sizes().total(), 3);
        let r = target.stats.jobs().into_iter().find(|j| j.job == "r").unwrap();
        assert_eq!((r.read_ops, r.read_bytes), (1, 10));
        // Locality and job traces: each run as the request it stands for.
        let rep = path.locality.report(false);
        let r = rep.jobs.iter().find(|j| j.job == "r").unwrap();
        assert_eq!((r.requests, r.bytes), (2, 10));
        let DsReply::JobTrace { records, .. } = path.job_traces.request("r", None, 0, 10).unwrap() else { panic!() };
        let runs: Vec<(u64, u64)> = records.iter().map(|r| (r.offset, r.len)).collect();
        assert_eq!(runs, [(100, 2), (4000, 8)]);
        // The request trace: base + offset of each run.
        path.trace.as_ref().unwrap().flush(Duration::from_secs(5));
        let text = std::fs::read_to_string(d.path().join(crate::trace::TRACE_FILE)).unwrap();
        let rows: Vec<Vec<&str>> = text.lines().skip(1).map(|l| l.split(',').skip(1).take(4).collect()).collect();
        let mib = 1u64 << 20;
        let (a, b) = ((mib + 100).to_string(), (mib + 4000).to_string());
        assert_eq!(
            rows,
            [
                vec!["w", "0", "3", "write"],
                vec!["w", &a, "3", "write"],
                vec!["r", &a, "2", "read"],
                vec!["r", &b, "8", "read"]
            ]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_emulated_disk_seeks_to_each_run_of_a_vectored_read() {
        let hdd = DeviceModel::parse("hdd", &tessera_proto::config::HddParams::default()).unwrap();
        let (_d, path) = path_with(&Setup { model: hdd, ..Setup::new(2) });
        let Device::Hdd(h) = &path.targets[0].device else { unreachable!() };
        let m = *h.model();
        write(&path, "a", 1, 0, b"0123").await;
        // The head is at 4; the runs lie at 0 (behind it) and 100 GB: the elevator goes on to 100 GB,
        // then back to 0, two seeks with a rotation each.
        let far = 100_000_000_000u64;
        let t = Instant::now();
        let extents = [Extent { offset: 0, len: 4 }, Extent { offset: far, len: 4 }];
        assert_eq!(read_v(&path, "a", 1, &extents).await.unwrap(), [4, 0]);
        let took = t.elapsed();
        let modelled = m.service(4, far, 4) + m.service(far + 4, 0, 4);
        assert!(took >= modelled, "{took:?} < {modelled:?}");
        assert!(modelled > Duration::from_millis(2 * 4), "{modelled:?}: two rotations at least");
    }
}
