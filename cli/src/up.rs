//! `tessera up`: a whole cluster on loopback, kept running as a supervisor would (systemd, a process
//! manager). The cluster directory (certificates and configs) is written by
//! [`tessera_ops::clusterdir::prepare`]; [`up`] starts its servers stage by stage and watches them until
//! Ctrl-C/SIGTERM. The processes are a [`LocalCluster`]'s, the type `tessera-bench` and the tests run
//! their clusters with; the supervisor adds what a process manager does. A server that ends is logged and
//! started again, with the same arguments, after a delay that grows while it keeps ending
//! ([`crate::supervise::RestartPolicy`]); the others keep running. `up` itself ends only on Ctrl-C/SIGTERM (it then stops the forwarding nodes, the
//! data servers and the MDS last) or when a server keeps failing to start (it then says why, with the
//! end of that server's log). The servers' state is kept in DIR/status.json for `tessera status`.

use crate::supervise::{now_ms, short_duration, up_process_alive, Backoff, ChildState, ChildStatus, Decision};
use crate::supervise::{RestartPolicy, UpStatus};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tessera_ops::child::{Signals, READY_TIMEOUT, STOP_GRACE};
use tessera_ops::cluster::LocalCluster;
use tessera_ops::clusterdir::{existing_ds_count, ClusterFiles, Server, Shape, STATUS_FILE};
use tessera_proto::config::{ClusterConfig, Defaults};
use tessera_proto::types::format_utc;

/// What `tessera up` was asked for.
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub dir: PathBuf,
    /// `None`: the existing cluster's count, else 4.
    pub n_ds: Option<usize>,
    /// Forwarding nodes; `None`: the existing cluster's count, else none.
    pub n_ion: Option<usize>,
    /// Metadata replicas; `None`: the existing cluster's count, else one.
    pub n_mds: Option<usize>,
    pub port_base: u16,
    pub stripe_size: Option<u64>,
    pub stripe_count: Option<u32>,
    /// Storage targets per data server, and each one's capacity (new clusters only).
    pub targets: u16,
    pub target_capacity: Option<u64>,
    /// Placement policy (new clusters only).
    pub placement: Option<tessera_proto::config::Placement>,
}

/// How often the supervisor looks at its servers.
const TICK: Duration = Duration::from_millis(50);
/// How often the status file is rewritten when nothing changed (its `updated_at_ms` shows `up` lives).
const REFRESH: Duration = Duration::from_secs(2);

/// A server's state; its process, when it has one, is the [`LocalCluster`]'s.
enum Run {
    /// Its stage has not started yet.
    Waiting,
    /// Started at `since`, not `READY` yet.
    Starting {
        since: Instant,
    },
    /// `READY` since `since`.
    Running {
        since: Instant,
    },
    /// Ended; started again at `until` (`at_ms` in Unix time, for the status file).
    Backoff {
        until: Instant,
        at_ms: u64,
    },
    /// Kept failing at start.
    Failed,
    /// SIGTERM sent while stopping the cluster.
    Stopping,
    Stopped,
}

/// One supervised server.
struct Supervised {
    server: Server,
    log: PathBuf,
    /// Its start stage (0: the MDS, 1: data servers, 2: forwarding nodes).
    stage: usize,
    backoff: Backoff,
    run: Run,
    /// Times it was started again.
    restarts: u32,
    /// It was `READY` at least once (its stage may be followed by the next).
    ever_ready: bool,
    /// When the current process started (Unix ms).
    started_at_ms: Option<u64>,
    /// How the last process ended, when (Unix ms), and its pid (none if it could not be started).
    last_exit: Option<(String, u64, Option<u32>)>,
}

impl Supervised {
    /// Its status; `pid`: its current process (`Starting`, `Running`, `Stopping`), the cluster's.
    fn status(&self, pid: Option<u32>) -> ChildStatus {
        let (state, restart_at_ms) = match &self.run {
            Run::Waiting => (ChildState::Waiting, None),
            Run::Starting { .. } => (ChildState::Starting, None),
            Run::Running { .. } => (ChildState::Running, None),
            Run::Backoff { at_ms, .. } => (ChildState::Backoff, Some(*at_ms)),
            Run::Failed => (ChildState::Failed, None),
            Run::Stopping => (ChildState::Stopping, None),
            Run::Stopped => (ChildState::Stopped, None),
        };
        ChildStatus {
            name: self.server.name.clone(),
            state,
            pid,
            restarts: self.restarts,
            started_at_ms: pid.and(self.started_at_ms),
            last_exit: self.last_exit.as_ref().map(|e| e.0.clone()),
            last_exit_at_ms: self.last_exit.as_ref().map(|e| e.1),
            restart_at_ms,
            log: self.log.display().to_string(),
        }
    }
}

/// What happened to a server since the last look.
enum Event {
    Ready,
    /// Its process ended: after serving this long (`None`: before `READY`), for this reason (short, and in
    /// full with the log's tail).
    Ended {
        served: Option<Duration>,
        why: String,
        detail: String,
    },
    /// Its backoff is over.
    Restart,
}

/// A server that failed to start too many times in a row: `tessera up` gives up and stops the cluster.
#[derive(Debug, thiserror::Error)]
#[error("{name} failed to start {start_failures} times in a row; the last time it {why}; {detail}")]
struct GaveUp {
    name: String,
    start_failures: u32,
    /// What happened the last time, short.
    why: String,
    /// The last start's output (the log's tail), or the error in full.
    detail: String,
}

/// The servers of one `tessera up` and the status file it keeps.
struct Supervisor {
    cluster: LocalCluster,
    kids: Vec<Supervised>,
    status_path: PathBuf,
    dir: String,
    /// starting, running, stopping, stopped or failed.
    state: &'static str,
    message: Option<String>,
    written: Option<Instant>,
    write_failed: bool,
}

/// The first line of a child's error, without its name in front and the log's path and tail behind.
fn short_reason(name: &str, e: &str) -> String {
    let first = e.lines().next().unwrap_or_default();
    let first = first.split("; log ").next().unwrap_or(first);
    first.strip_prefix(name).map(str::trim_start).unwrap_or(first).to_string()
}

impl Supervisor {
    fn new(cluster: LocalCluster, policy: RestartPolicy) -> Self {
        let files = &cluster.files;
        let kids = files
            .start_stages()
            .into_iter()
            .enumerate()
            .flat_map(|(stage, servers)| servers.into_iter().map(move |s| (stage, s)))
            .map(|(stage, server)| Supervised {
                log: files.log_path(&server.name),
                server,
                stage,
                backoff: Backoff::new(policy),
                run: Run::Waiting,
                restarts: 0,
                ever_ready: false,
                started_at_ms: None,
                last_exit: None,
            })
            .collect();
        Supervisor {
            status_path: files.status_path(),
            dir: files.dir.display().to_string(),
            cluster,
            kids,
            state: "starting",
            message: None,
            written: None,
            write_failed: false,
        }
    }

    fn stages(&self) -> usize {
        self.kids.iter().map(|k| k.stage + 1).max().unwrap_or(0)
    }

    /// Rewrites DIR/status.json (atomically).
    fn write_status(&mut self) {
        let st = UpStatus {
            dir: self.dir.clone(),
            pid: std::process::id(),
            state: self.state.to_string(),
            message: self.message.clone(),
            updated_at_ms: now_ms(),
            children: self.kids.iter().map(|k| k.status(self.cluster.process_id(&k.server.name))).collect(),
        };
        self.written = Some(Instant::now());
        if let Err(e) = st.write(&self.status_path) {
            if !self.write_failed {
                eprintln!(
                    "tessera up: cannot write {}: {e} (`tessera status` will not see this cluster)",
                    self.status_path.display()
                );
                self.write_failed = true;
            }
        }
    }

    /// Rewrites the status file if nothing did for [`REFRESH`].
    fn refresh_status(&mut self) {
        if self.written.is_none_or(|t| t.elapsed() >= REFRESH) {
            self.write_status();
        }
    }

    /// Starts the servers of `stage`.
    fn start_stage(&mut self, stage: usize) -> Result<(), GaveUp> {
        for i in 0..self.kids.len() {
            if self.kids[i].stage == stage && matches!(self.kids[i].run, Run::Waiting) {
                self.start(i)?;
            }
        }
        Ok(())
    }

    /// Whether every server of `stage` has been `READY`.
    fn stage_ready(&self, stage: usize) -> bool {
        self.kids.iter().filter(|k| k.stage == stage).all(|k| k.ever_ready)
    }

    /// Starts server `i` (again): its output goes to its log, appended to; a restart is noted there.
    /// An error is the give-up message.
    fn start(&mut self, i: usize) -> Result<(), GaveUp> {
        let k = &mut self.kids[i];
        // Each start is marked in the log (appended to, over restarts and runs of `up`).
        let now = format_utc((now_ms() / 1000) as i64);
        let note = match &k.last_exit {
            Some((why, at, pid)) => format!(
                "{LOG_MARK}: restart {} of {} at {now} UTC; the previous {} ended at {} UTC: {why} ===",
                k.restarts,
                k.server.name,
                pid.map_or("attempt".to_string(), |p| format!("process (pid {p})")),
                format_utc((at / 1000) as i64),
            ),
            None => format!("{LOG_MARK} (pid {}): start of {} at {now} UTC ===", std::process::id(), k.server.name),
        };
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&k.log) {
            let _ = writeln!(f, "{note}");
        }
        // Its own process group (the cluster's setting): a Ctrl-C on the terminal reaches only us, and we
        // stop the servers in order.
        match self.cluster.spawn(&k.server.name) {
            Ok(()) => {
                k.started_at_ms = Some(now_ms());
                k.run = Run::Starting { since: Instant::now() };
                Ok(())
            }
            Err(e) => {
                let e = e.to_string();
                self.ended(i, None, None, format!("could not be started: {e}"), e)
            }
        }
    }

    /// Server `i`'s process ended (`pid`, after serving for `served`): started again after a delay, or
    /// given up on (the error).
    fn ended(
        &mut self,
        i: usize,
        pid: Option<u32>,
        served: Option<Duration>,
        why: String,
        detail: String,
    ) -> Result<(), GaveUp> {
        let k = &mut self.kids[i];
        self.cluster.forget(&k.server.name);
        k.run = Run::Stopped;
        k.last_exit = Some((why.clone(), now_ms(), pid));
        let name = k.server.name.clone();
        let pid_text = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        let log = k.log.display().to_string();
        match k.backoff.exited(served) {
            Decision::Restart(d) => {
                k.run = Run::Backoff { until: Instant::now() + d, at_ms: now_ms() + d.as_millis() as u64 };
                match served {
                    Some(s) => eprintln!(
                        "tessera up: {name}{pid_text} ended after {}: {why}; starting it again in {} (log {log})",
                        short_duration(s),
                        short_duration(d)
                    ),
                    None => eprintln!(
                        "tessera up: {name}{pid_text} failed to start ({} of {} in a row): {why}; trying again in {} (log {log})",
                        k.backoff.start_failures(),
                        k.backoff.policy().max_start_failures,
                        short_duration(d)
                    ),
                }
                Ok(())
            }
            Decision::GiveUp { start_failures } => {
                k.run = Run::Failed;
                let tail = last_start_output(&k.log, TAIL_LINES);
                let detail = if tail.trim().is_empty() { detail } else { format!("its log {log} ends:\n{tail}") };
                Err(GaveUp { name, start_failures, why, detail })
            }
        }
    }

    /// Looks at every server once: readiness, exits, backoffs that are over. Returns whether anything
    /// changed, or the give-up message.
    fn tick(&mut self) -> Result<bool, GaveUp> {
        let mut changed = false;
        for i in 0..self.kids.len() {
            let k = &mut self.kids[i];
            let name = k.server.name.clone();
            let child = match &k.run {
                Run::Starting { .. } | Run::Running { .. } => self.cluster.child(&name).ok(),
                _ => None,
            };
            let event = match (&mut k.run, child) {
                (Run::Starting { since }, Some(child)) => match child.poll_ready() {
                    Some(Ok(_)) => Event::Ready,
                    Some(Err(e)) => {
                        let e = e.to_string();
                        Event::Ended { served: None, why: short_reason(&name, &e), detail: e }
                    }
                    None if since.elapsed() >= READY_TIMEOUT => {
                        let e = child.not_ready_error(READY_TIMEOUT).to_string();
                        child.kill();
                        Event::Ended { served: None, why: short_reason(&name, &e), detail: e }
                    }
                    None => continue,
                },
                (Run::Running { since }, Some(child)) => match child.try_wait() {
                    Some(st) => {
                        let why = st.to_string();
                        Event::Ended { served: Some(since.elapsed()), detail: why.clone(), why }
                    }
                    None => continue,
                },
                // Not the cluster's any more (cannot happen while it runs): ended, reason unknown.
                (Run::Starting { .. } | Run::Running { .. }, None) => {
                    let why = "its process is not known to the cluster".to_string();
                    Event::Ended { served: None, detail: why.clone(), why }
                }
                (Run::Backoff { until, .. }, _) if Instant::now() >= *until => Event::Restart,
                _ => continue,
            };
            changed = true;
            match event {
                Event::Ready => {
                    let pid = self.cluster.process_id(&name).unwrap_or_default();
                    k.run = Run::Running { since: Instant::now() };
                    k.backoff.ready();
                    k.ever_ready = true;
                    if let Some((_, at, _)) = &k.last_exit {
                        eprintln!(
                            "tessera up: {name} is back (pid {pid}, restart {}), {} after its last process ended",
                            k.restarts,
                            short_duration(Duration::from_millis(now_ms().saturating_sub(*at)))
                        );
                    }
                }
                Event::Ended { served, why, detail } => {
                    let pid = self.cluster.process_id(&name);
                    self.ended(i, pid, served, why, detail)?;
                }
                Event::Restart => {
                    k.restarts += 1;
                    self.start(i)?;
                }
            }
        }
        Ok(changed)
    }

    /// Stops the servers, forwarding nodes first and the MDS last: each stage gets SIGTERM and
    /// [`STOP_GRACE`] to exit, then SIGKILL. Another SIGINT/SIGTERM meanwhile kills what is left at once.
    async fn stop(&mut self, signals: &mut Signals) {
        let mut hurry = false;
        for stage in (0..self.stages()).rev() {
            for k in self.kids.iter_mut().filter(|k| k.stage == stage) {
                k.run = match std::mem::replace(&mut k.run, Run::Stopped) {
                    Run::Starting { .. } | Run::Running { .. } => match self.cluster.child(&k.server.name) {
                        Ok(child) => {
                            if hurry {
                                child.kill();
                            } else {
                                child.terminate();
                            }
                            Run::Stopping
                        }
                        Err(_) => Run::Stopped,
                    },
                    Run::Failed => Run::Failed,
                    _ => Run::Stopped,
                };
            }
            self.write_status();
            let deadline = Instant::now() + STOP_GRACE;
            loop {
                let mut left = 0;
                for k in self.kids.iter().filter(|k| k.stage == stage && matches!(k.run, Run::Stopping)) {
                    if self.cluster.child(&k.server.name).is_ok_and(|c| c.running()) {
                        left += 1;
                    }
                }
                if left == 0 {
                    break;
                }
                if hurry || Instant::now() >= deadline {
                    for k in self.kids.iter().filter(|k| k.stage == stage && matches!(k.run, Run::Stopping)) {
                        if let Ok(child) = self.cluster.child(&k.server.name) {
                            if child.running() {
                                if !hurry {
                                    eprintln!(
                                        "tessera up: {} did not stop within {STOP_GRACE:?}; killed it",
                                        k.server.name
                                    );
                                }
                                child.kill();
                            }
                        }
                    }
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(TICK) => {}
                    sig = signals.recv() => {
                        eprintln!("tessera up: {sig} again: killing the servers that are left");
                        hurry = true;
                    }
                }
            }
            let mut stopped = Vec::new();
            for k in self.kids.iter_mut().filter(|k| k.stage == stage) {
                if let Run::Stopping = k.run {
                    self.cluster.forget(&k.server.name);
                    k.run = Run::Stopped;
                    stopped.push(k.server.name.clone());
                }
            }
            if !stopped.is_empty() {
                eprintln!("tessera up: stopped {}", stopped.join(", "));
            }
            self.write_status();
        }
    }
}

/// How the lines `tessera up` writes into a server's log begin.
const LOG_MARK: &str = "=== tessera up";
/// Lines of a server's log quoted when it is given up on.
const TAIL_LINES: usize = 20;

/// The last `n` lines a server wrote to its log since its last start (the last [`LOG_MARK`] line).
fn last_start_output(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.iter().rposition(|l| l.starts_with(LOG_MARK)).map_or(0, |i| i + 1);
    let lines = &lines[from..];
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Refuses a second `tessera up` on a directory another one runs.
fn refuse_if_running(dir: &Path) -> anyhow::Result<()> {
    let Ok(prev) = UpStatus::read(&dir.join(STATUS_FILE)) else { return Ok(()) };
    if prev.pid != std::process::id()
        && up_process_alive(prev.pid)
        && !matches!(prev.state.as_str(), "stopped" | "failed")
    {
        anyhow::bail!(
            "tessera up (pid {pid}) already runs the cluster in {dir}: use it (`tessera status --dir {dir}`), or stop \
             it first (Ctrl-C there, or kill {pid})",
            pid = prev.pid,
            dir = dir.display(),
        );
    }
    Ok(())
}

/// Runs `tessera up`; returns the process exit code.
pub async fn up(opts: UpOptions) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::new().context("installing the SIGINT/SIGTERM handlers")?;
    refuse_if_running(&opts.dir)?;

    let existing = existing_ds_count(&opts.dir)?;
    let n_ds = opts.n_ds.or(existing).unwrap_or(4);
    let n_ion = match opts.n_ion {
        Some(n) => n,
        None if existing.is_some() => ClusterConfig::load(&opts.dir.join("mds.toml"))?.ion.len(),
        None => 0,
    };
    let shaping = opts.stripe_size.is_some()
        || opts.stripe_count.is_some()
        || opts.targets > 1
        || opts.target_capacity.is_some()
        || opts.placement.is_some();
    if existing.is_some() && shaping {
        eprintln!(
            "tessera up: reusing the cluster in {}; --stripe-size/--stripe-count/--targets/--target-capacity/--placement are ignored",
            opts.dir.display()
        );
    }
    let mut defaults = Defaults::default();
    if let Some(s) = opts.stripe_size {
        defaults.stripe_size = s;
    }
    if let Some(c) = opts.stripe_count {
        defaults.stripe_count = c;
    }
    if let Some(p) = opts.placement {
        defaults.placement = p;
    }
    let n_mds = match opts.n_mds {
        Some(n) => n,
        None if existing.is_some() => ClusterConfig::load(&opts.dir.join("mds.toml"))?.mds.len(),
        None => 1,
    };
    let shape =
        Shape { mds: n_mds, ds: n_ds, ion: n_ion, targets: opts.targets, target_capacity: opts.target_capacity };
    let cluster = LocalCluster::prepare(&opts.dir, shape, opts.port_base, defaults)?.with_own_process_groups();
    let files = cluster.files.clone();
    let cfg = ClusterConfig::load(&files.client_config)?;
    // Every binary is looked up first, so a missing one starts nothing.
    cluster.locate_binaries()?;
    let mut sup = Supervisor::new(cluster, RestartPolicy::default());
    sup.write_status();

    // Stage by stage (the MDS, the data servers, the forwarding nodes), each once the one before is
    // ready; then watch them all.
    let mut stage = 0;
    let stages = sup.stages();
    let started = sup.start_stage(0);
    let outcome = match started {
        Err(e) => Err(e),
        Ok(()) => loop {
            tokio::select! {
                sig = signals.recv() => break Ok(sig),
                _ = tokio::time::sleep(TICK) => {}
            }
            let changed = match sup.tick() {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            if sup.state == "starting" && sup.stage_ready(stage) {
                stage += 1;
                if stage < stages {
                    if let Err(e) = sup.start_stage(stage) {
                        break Err(e);
                    }
                } else {
                    sup.state = "running";
                    sup.write_status();
                    announce(&files, &cfg);
                }
            }
            if changed {
                sup.write_status();
            } else {
                sup.refresh_status();
            }
        },
    };

    let code = match outcome {
        Ok(sig) => {
            if sup.state == "starting" {
                eprintln!("tessera up: {sig} during startup; stopping");
            } else {
                eprintln!("tessera up: {sig}: stopping the cluster (forwarding nodes, data servers, then the MDS)");
            }
            sup.state = "stopping";
            sup.message = Some(format!("stopped by {sig}"));
            sup.stop(&mut signals).await;
            sup.state = "stopped";
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tessera up: a server keeps failing to start; stopping the cluster");
            sup.state = "stopping";
            let e = e.to_string();
            sup.message = e.lines().next().and_then(|l| l.split("; its log").next()).map(str::to_string);
            sup.stop(&mut signals).await;
            sup.state = "failed";
            eprintln!("tessera up: {e}");
            ExitCode::FAILURE
        }
    };
    sup.write_status();
    Ok(code)
}

/// Prints where the cluster is and how to use it, ending with the `TESSERA UP <client config>` line
/// scripts wait for.
fn announce(files: &ClusterFiles, cfg: &ClusterConfig) {
    let client_cfg = files.client_config.display().to_string();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "Tessera cluster running in {}", files.dir.display());
    for (m, s) in cfg.mds.iter().zip(files.mds_servers()) {
        let what = if cfg.mds.len() > 1 { format!("MDS replica {}", s.name) } else { "MDS".into() };
        let _ = writeln!(out, "  {what:<12} {} (log {})", m.addr, files.log_path(&s.name).display());
    }
    for ds in &cfg.ds {
        let _ = writeln!(
            out,
            "  data server {} {} (log {})",
            ds.id,
            ds.addr,
            files.log_path(&format!("ds{}", ds.id)).display()
        );
    }
    for (k, ion) in cfg.ion.iter().enumerate() {
        let _ = writeln!(
            out,
            "  forwarding node {} {} (log {}; scheduler {})",
            ion.name,
            ion.addr,
            files.log_path(&format!("ion{k}")).display(),
            cfg.ion_options.scheduler
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Mount it (FUSE; mounted by root it serves every user, each checked as themselves):");
    let _ = writeln!(out, "  mkdir -p /mnt/tessera && tessera --config {client_cfg} mount /mnt/tessera --daemon");
    let _ = writeln!(out, "  fusermount3 -u /mnt/tessera      (to unmount)");
    let _ = writeln!(out, "Use it:");
    let _ = writeln!(out, "  export TESSERA_CONFIG={client_cfg}");
    let _ = writeln!(out, "  tessera put ./some-file /some-file");
    let _ = writeln!(out, "  tessera ls -l /");
    let _ = writeln!(out, "  tessera getstripe /some-file");
    let _ = writeln!(out, "  tessera df");
    if !cfg.ion.is_empty() {
        let _ = writeln!(
            out,
            "  tessera ion status        (clients go through the forwarding nodes; TESSERA_ION=none: direct)"
        );
    }
    let _ = writeln!(out, "  tessera-bench ior -w -r -t 1m -b 64m");
    let _ =
        writeln!(out, "  tessera status --dir {}   (each server's state, pid, restarts, uptime)", files.dir.display());
    let _ = writeln!(
        out,
        "Administer it (fsck, ds remove, mds add/remove, orchestrator mode, ca): tessera --config {} ...",
        files.admin_config.display()
    );
    let _ = writeln!(out, "A server that ends is started again; stop the cluster with Ctrl-C.");
    let _ = writeln!(out, "TESSERA UP {client_cfg}");
    let _ = out.flush();
    drop(out);
}
