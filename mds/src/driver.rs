//! The orchestrator's driver: window after window, tells every data server which scheduling object
//! is served now (`DsRequest::Serve`), in parallel, records the switch skew, and keeps slice
//! boundaries on absolute deadlines so that delays never accumulate.

use crate::orchestrator::Orchestrator;
use futures::future::BoxFuture;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::msg::{PlanSlice, ServeCommand, ServeTarget};
use tessera_proto::{DsId, FsError, FsResult};
use tokio::time::Instant;
use tracing::{debug, info, warn};

/// Where serve commands go: the data servers (RPC in the server, in memory in tests).
pub trait Switchboard: Send + Sync + 'static {
    fn servers(&self) -> Vec<DsId>;
    /// Sends one command; the reply is the (epoch, wall-clock µs) at which the server switched.
    fn serve(&self, ds: DsId, cmd: ServeCommand) -> BoxFuture<'_, FsResult<(u64, u64)>>;
}

/// How long the driver waits for the servers' answers to one command: well below the slice, so a
/// server that does not answer never delays the others' next switch.
pub fn reply_timeout(slice: Duration) -> Duration {
    (slice / 3).clamp(Duration::from_millis(20), Duration::from_millis(250))
}

pub struct Driver {
    orch: Arc<Orchestrator>,
    board: Arc<dyn Switchboard>,
    /// A server whose previous command is still in flight is skipped (no pile-up behind a dead one).
    busy: HashMap<DsId, Arc<AtomicBool>>,
    failing: HashSet<DsId>,
    /// Commands on their way; a stopping driver waits for them, so none reaches a server after the
    /// shutdown's release to work-conserving service.
    sends: tokio::task::JoinSet<()>,
}

/// What one command achieved.
#[derive(Debug, Default, PartialEq)]
pub struct SwitchOutcome {
    pub answered: usize,
    pub failed: usize,
    pub skew_us: Option<u64>,
}

impl Driver {
    pub fn new(orch: Arc<Orchestrator>, board: Arc<dyn Switchboard>) -> Driver {
        Driver { orch, board, busy: HashMap::new(), failing: HashSet::new(), sends: tokio::task::JoinSet::new() }
    }

    /// Runs until `stop` is notified, then waits (briefly) for the commands still on their way.
    pub async fn run(mut self, stop: Arc<tokio::sync::Notify>) {
        tokio::select! {
            _ = self.windows() => {}
            _ = stop.notified() => {}
        }
        let _ =
            tokio::time::timeout(Duration::from_millis(500), async { while self.sends.join_next().await.is_some() {} })
                .await;
    }

    async fn windows(&mut self) {
        let window = self.orch.params().window;
        let mut deadline = Instant::now();
        loop {
            let now = Instant::now();
            if now > deadline + window {
                // Far behind (suspended, overloaded): start afresh rather than rush through old slices.
                deadline = now;
            }
            let mode = self.orch.mode();
            let plan = self.orch.plan_window(now.into_std());
            for slice in &plan {
                // A mode switch takes effect at the next slice boundary: re-plan there.
                if self.orch.mode() != mode {
                    debug!("mode changed: re-planning at this slice boundary");
                    break;
                }
                let len = Duration::from_secs_f64((slice.slice_ms / 1000.0).max(0.001));
                let end = deadline + len;
                self.switch(slice, len).await;
                tokio::time::sleep_until(end).await;
                deadline = end;
            }
        }
    }

    /// Tells every data server to serve `slice`'s object now.
    pub async fn switch(&mut self, slice: &PlanSlice, len: Duration) -> SwitchOutcome {
        let epoch = self.orch.next_epoch();
        let cmd = ServeCommand {
            epoch,
            target: slice.target.clone(),
            slice_ms: (len.as_secs_f64() * 1000.0).ceil().min(f64::from(u32::MAX)) as u32,
            fallback_ms: self.orch.params().fallback_ms(),
        };
        let limit = reply_timeout(len);
        while self.sends.try_join_next().is_some() {}
        let mut waits = Vec::new();
        let mut out = SwitchOutcome::default();
        for ds in self.board.servers() {
            let flag = self.busy.entry(ds).or_default().clone();
            if flag.swap(true, Ordering::AcqRel) {
                out.failed += 1;
                continue;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let board = self.board.clone();
            let cmd = cmd.clone();
            self.sends.spawn(async move {
                let r = board.serve(ds, cmd).await;
                flag.store(false, Ordering::Release);
                let _ = tx.send(r);
            });
            waits.push(async move {
                let r = match tokio::time::timeout(limit, rx).await {
                    Ok(Ok(r)) => r,
                    Ok(Err(_)) => Err(FsError::io("serve task ended without an answer")),
                    Err(_) => Err(FsError::unavailable(format!("no answer within {limit:?}"))),
                };
                (ds, r)
            });
        }
        let mut at = Vec::new();
        for (ds, r) in futures::future::join_all(waits).await {
            match r {
                Ok((e, t)) if e == epoch => {
                    at.push(t);
                    if self.failing.remove(&ds) {
                        info!(ds, "data server follows the orchestrator again");
                    }
                }
                Ok((e, _)) => {
                    out.failed += 1;
                    debug!(ds, epoch, replied = e, "data server answered with another epoch");
                }
                Err(err) => {
                    out.failed += 1;
                    if self.failing.insert(ds) {
                        warn!(ds, "data server did not take a serve command: {err}");
                    } else {
                        debug!(ds, "serve command failed: {err}");
                    }
                }
            }
        }
        out.answered = at.len();
        if let (Some(lo), Some(hi)) = (at.iter().min(), at.iter().max()) {
            if at.len() >= 2 {
                let skew = hi - lo;
                self.orch.record_skew(skew);
                out.skew_us = Some(skew);
            }
        }
        if let ServeTarget::Job(j) = &slice.target {
            self.orch.mark_served(j, std::time::Instant::now());
        }
        out
    }
}

/// The running driver.
pub struct DriverTask {
    task: tokio::task::JoinHandle<()>,
    stop: Arc<tokio::sync::Notify>,
}

impl DriverTask {
    /// Stops the driver once the commands it has on their way are answered (or 500 ms passed), so
    /// that [`release_all`] afterwards is the last command every server gets.
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

/// Starts the driver task.
pub fn spawn(orch: Arc<Orchestrator>, board: Arc<dyn Switchboard>) -> DriverTask {
    let stop = Arc::new(tokio::sync::Notify::new());
    DriverTask { task: tokio::spawn(Driver::new(orch, board).run(stop.clone())), stop }
}

/// Best effort at shutdown: every data server back to work-conserving service now rather than
/// after its fallback delay.
pub async fn release_all(orch: &Orchestrator, board: Arc<dyn Switchboard>) {
    let cmd = ServeCommand {
        epoch: orch.next_epoch(),
        target: ServeTarget::All,
        slice_ms: orch.params().window_ms(),
        fallback_ms: orch.params().fallback_ms(),
    };
    let calls = board.servers().into_iter().map(|ds| {
        let board = board.clone();
        let cmd = cmd.clone();
        async move { tokio::time::timeout(Duration::from_millis(300), board.serve(ds, cmd)).await }
    });
    futures::future::join_all(calls).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrator::Params;
    use std::sync::Mutex;
    use tessera_proto::msg::{JobLocality, LocalityReport, OrchestratorMode};

    /// Data servers in memory: record commands, answer after a delay (`None`: never).
    struct Board {
        delay: Vec<Option<Duration>>,
        log: Mutex<Vec<(DsId, ServeCommand)>>,
    }

    impl Switchboard for Board {
        fn servers(&self) -> Vec<DsId> {
            (0..self.delay.len() as DsId).collect()
        }
        fn serve(&self, ds: DsId, cmd: ServeCommand) -> BoxFuture<'_, FsResult<(u64, u64)>> {
            Box::pin(async move {
                match self.delay[ds as usize] {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
                let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros();
                self.log.lock().unwrap().push((ds, cmd.clone()));
                Ok((cmd.epoch, at as u64))
            })
        }
    }

    fn orch(window_ms: u32) -> Arc<Orchestrator> {
        let p = Params::from_options(&tessera_proto::config::OrchestratorOptions { window_ms, ..Default::default() });
        Arc::new(Orchestrator::new(p, OrchestratorMode::IOrchestrator, vec![0, 1, 2]))
    }

    #[tokio::test]
    async fn a_silent_server_does_not_block_the_others() {
        let o = orch(300);
        let board = Arc::new(Board {
            delay: vec![Some(Duration::ZERO), Some(Duration::from_millis(2)), None],
            log: Mutex::default(),
        });
        let mut d = Driver::new(o.clone(), board.clone());
        let slice = PlanSlice { label: "(all)".into(), target: ServeTarget::All, slice_ms: 150.0, rd_us: None };
        // The third server never answers: waiting for it would never end, so a generous bound is enough.
        let out = tokio::time::timeout(Duration::from_secs(10), d.switch(&slice, Duration::from_millis(150)))
            .await
            .expect("the switch waited for the silent server");
        assert_eq!((out.answered, out.failed), (2, 1));
        assert!(out.skew_us.is_some());
        // The silent server's call is still in flight: it is skipped, not piled up.
        let out = d.switch(&slice, Duration::from_millis(150)).await;
        assert_eq!((out.answered, out.failed), (2, 1));
        let log = board.log.lock().unwrap();
        assert_eq!(log.len(), 4);
        assert!(log[0].1.epoch < log[3].1.epoch);
        assert_eq!(log[0].1.fallback_ms, 600);
        assert_eq!(o.status(std::time::Instant::now()).last_switch_skew_us, out.skew_us);
    }

    #[tokio::test]
    async fn runs_windows_and_serves_an_eligible_program() {
        let o = orch(100);
        let board = Arc::new(Board { delay: vec![Some(Duration::ZERO); 3], log: Mutex::default() });
        let now = std::time::Instant::now();
        for ds in 0..3 {
            let jobs = vec![
                JobLocality { job: "seq".into(), sl: 0.0, requests: 5, ..Default::default() },
                JobLocality { job: "rnd".into(), sl: 3e9, requests: 5, ..Default::default() },
            ];
            o.record(LocalityReport { ds, sl: 3e9, seek_time_us: 8000.0, jobs, ..Default::default() }, now);
        }
        let task = spawn(o.clone(), board.clone());
        tokio::time::sleep(Duration::from_millis(250)).await;
        o.set_mode(OrchestratorMode::Off);
        tokio::time::sleep(Duration::from_millis(250)).await;
        task.stop().await;
        let log = board.log.lock().unwrap();
        let seq = log.iter().filter(|(_, c)| c.target == ServeTarget::Job("seq".into())).count();
        let others = log.iter().filter(|(_, c)| matches!(c.target, ServeTarget::Others { .. })).count();
        assert!(seq >= 3 && others >= 3, "{seq} {others}");
        assert!(log.windows(2).all(|w| w[0].1.epoch <= w[1].1.epoch));
        assert!(matches!(log.last().unwrap().1.target, ServeTarget::All), "off mode ends in All");
        assert!(o.status(std::time::Instant::now()).windows_run >= 3);
    }
}
