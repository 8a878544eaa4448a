//! What `tessera up` decides as a supervisor, kept apart from the processes so that it can be tested
//! alone: when a server that ended is started again ([`Backoff`], after [`RestartPolicy`]), and the status
//! file `DIR/status.json` it keeps for `tessera status` ([`UpStatus`]: written atomically, read back,
//! printed as a table).

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
#[cfg(test)]
use tessera_ops::clusterdir::STATUS_FILE;

/// When a server that ended is started again. The delay before a restart starts at `first_delay` and
/// doubles with each exit that follows quickly on the one before, up to `max_delay`; a server that served
/// for `healthy_after` before it ended starts again from `first_delay`. A server that ends
/// `max_start_failures` times in a row before it is ready (its `READY` line) is given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    pub first_delay: Duration,
    pub max_delay: Duration,
    pub healthy_after: Duration,
    pub max_start_failures: u32,
}

impl Default for RestartPolicy {
    /// 0.5 s doubling to 30 s, reset after a minute of health, given up after 5 failed starts in a row.
    fn default() -> Self {
        RestartPolicy {
            first_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
            max_start_failures: 5,
        }
    }
}

/// What to do about a server that ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after this long.
    Restart(Duration),
    /// It failed to start this many times in a row: stop.
    GiveUp { start_failures: u32 },
}

/// One server's restart state under a [`RestartPolicy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    policy: RestartPolicy,
    /// Exits since the server last served for `healthy_after` (each doubles the delay).
    quick_exits: u32,
    /// Exits before `READY` since it was last ready.
    start_failures: u32,
}

impl Backoff {
    pub fn new(policy: RestartPolicy) -> Backoff {
        Backoff { policy, quick_exits: 0, start_failures: 0 }
    }

    /// The server printed `READY`: it started.
    pub fn ready(&mut self) {
        self.start_failures = 0;
    }

    /// The server ended; `served` is how long it had been ready, `None` if it never was (it failed to
    /// start: exited, or did not print `READY` in time).
    pub fn exited(&mut self, served: Option<Duration>) -> Decision {
        match served {
            None => {
                self.start_failures += 1;
                if self.start_failures >= self.policy.max_start_failures {
                    return Decision::GiveUp { start_failures: self.start_failures };
                }
            }
            Some(d) if d >= self.policy.healthy_after => self.quick_exits = 0,
            Some(_) => {}
        }
        let doublings = self.quick_exits.min(31);
        self.quick_exits = self.quick_exits.saturating_add(1);
        let delay = self.policy.first_delay.saturating_mul(1u32 << doublings);
        Decision::Restart(delay.min(self.policy.max_delay))
    }

    /// The policy it follows.
    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// Failed starts in a row so far.
    pub fn start_failures(&self) -> u32 {
        self.start_failures
    }
}

/// A server's state as `tessera status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildState {
    /// Not started yet: its stage waits for the one before.
    Waiting,
    /// Started, not `READY` yet.
    Starting,
    /// `READY`: serving.
    Running,
    /// Ended; starts again at `restart_at_ms`.
    Backoff,
    /// Kept failing at start; `tessera up` gave up.
    Failed,
    /// Being stopped (SIGTERM sent).
    Stopping,
    Stopped,
}

impl ChildState {
    pub fn name(self) -> &'static str {
        match self {
            ChildState::Waiting => "waiting",
            ChildState::Starting => "starting",
            ChildState::Running => "running",
            ChildState::Backoff => "backoff",
            ChildState::Failed => "failed",
            ChildState::Stopping => "stopping",
            ChildState::Stopped => "stopped",
        }
    }

    fn parse(s: &str) -> Option<ChildState> {
        [
            ChildState::Waiting,
            ChildState::Starting,
            ChildState::Running,
            ChildState::Backoff,
            ChildState::Failed,
            ChildState::Stopping,
            ChildState::Stopped,
        ]
        .into_iter()
        .find(|c| c.name() == s)
    }
}

/// One server in the status file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildStatus {
    /// `mds`, `ds0`, `ion1`.
    pub name: String,
    pub state: ChildState,
    /// Of the current process (none in backoff, failed, stopped, waiting).
    pub pid: Option<u32>,
    /// Times it was started again after it ended.
    pub restarts: u32,
    /// When the current process was started (Unix ms).
    pub started_at_ms: Option<u64>,
    /// How the previous process ended (`signal: 9 (SIGKILL)`, `exit status: 1`, `did not print READY...`).
    pub last_exit: Option<String>,
    pub last_exit_at_ms: Option<u64>,
    /// In backoff: when it starts again (Unix ms).
    pub restart_at_ms: Option<u64>,
    pub log: String,
}

/// The whole `tessera up` as DIR/status.json holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpStatus {
    /// The cluster directory.
    pub dir: String,
    /// Of `tessera up` itself.
    pub pid: u32,
    /// starting, running, stopping, stopped or failed.
    pub state: String,
    /// Why it stopped or failed.
    pub message: Option<String>,
    pub updated_at_ms: u64,
    pub children: Vec<ChildStatus>,
}

/// Unix time in milliseconds, now.
pub fn now_ms() -> u64 {
    tessera_proto::types::unix_us() / 1000
}

impl UpStatus {
    /// The JSON of the status file; `now_ms` gives each running server's `uptime_s`.
    pub fn to_json(&self, now_ms: u64) -> Value {
        let children: Vec<Value> = self
            .children
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "state": c.state.name(),
                    "pid": c.pid,
                    "restarts": c.restarts,
                    "started_at_ms": c.started_at_ms,
                    "uptime_s": c.uptime(now_ms).map(|d| d.as_secs_f64()),
                    "last_exit": c.last_exit,
                    "last_exit_at_ms": c.last_exit_at_ms,
                    "restart_at_ms": c.restart_at_ms,
                    "log": c.log,
                })
            })
            .collect();
        json!({
            "dir": self.dir,
            "pid": self.pid,
            "state": self.state,
            "message": self.message,
            "updated_at_ms": self.updated_at_ms,
            "children": children,
        })
    }

    /// Reads what [`to_json`](UpStatus::to_json) wrote.
    pub fn from_json(v: &Value) -> anyhow::Result<UpStatus> {
        use anyhow::Context;
        let s = |v: &Value, k: &str| v[k].as_str().map(str::to_string);
        let u = |v: &Value, k: &str| v[k].as_u64();
        let children = v["children"]
            .as_array()
            .context("no \"children\" list")?
            .iter()
            .map(|c| {
                let name = s(c, "name").context("a server without \"name\"")?;
                let state = c["state"]
                    .as_str()
                    .and_then(ChildState::parse)
                    .with_context(|| format!("{name}: unknown \"state\" {}", c["state"]))?;
                Ok(ChildStatus {
                    name,
                    state,
                    pid: u(c, "pid").map(|p| p as u32),
                    restarts: u(c, "restarts").unwrap_or(0) as u32,
                    started_at_ms: u(c, "started_at_ms"),
                    last_exit: s(c, "last_exit"),
                    last_exit_at_ms: u(c, "last_exit_at_ms"),
                    restart_at_ms: u(c, "restart_at_ms"),
                    log: s(c, "log").unwrap_or_default(),
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(UpStatus {
            dir: s(v, "dir").unwrap_or_default(),
            pid: u(v, "pid").context("no \"pid\"")? as u32,
            state: s(v, "state").context("no \"state\"")?,
            message: s(v, "message"),
            updated_at_ms: u(v, "updated_at_ms").unwrap_or(0),
            children,
        })
    }

    /// Writes it to `path` atomically: a reader sees the old file or the new one, never part of one.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let tmp = path.with_extension("json.tmp");
        let mut text = serde_json::to_string_pretty(&self.to_json(now_ms())).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)
    }

    /// Reads the status file at `path`.
    pub fn read(path: &Path) -> anyhow::Result<UpStatus> {
        use anyhow::Context;
        let at = || path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(at)?;
        let v: Value = serde_json::from_str(&text).with_context(at)?;
        UpStatus::from_json(&v).with_context(at)
    }

    /// Whether `tessera up` runs and every server serves.
    pub fn healthy(&self, up_alive: bool) -> bool {
        up_alive && self.state == "running" && self.children.iter().all(|c| c.state == ChildState::Running)
    }

    /// The table `tessera status` prints; `up_alive`: whether the `tessera up` process still runs.
    pub fn table(&self, now_ms: u64, up_alive: bool) -> String {
        let mut out = String::new();
        // A status left behind is shown as it was then.
        let then = if up_alive { now_ms } else { self.updated_at_ms };
        if up_alive {
            out.push_str(&format!("tessera up (pid {}) in {}: {}", self.pid, self.dir, self.state));
        } else {
            out.push_str(&format!(
                "tessera up (pid {}) in {} is not running; its last status ({}, {} ago):",
                self.pid,
                self.dir,
                self.state,
                ago(now_ms, self.updated_at_ms)
            ));
        }
        if let Some(m) = &self.message {
            out.push_str(&format!(" ({m})"));
        }
        out.push('\n');
        let rows: Vec<[String; 6]> = self
            .children
            .iter()
            .map(|c| {
                let mut state = c.state.name().to_string();
                if let (ChildState::Backoff, Some(at)) = (c.state, c.restart_at_ms) {
                    let left = Duration::from_millis(at.saturating_sub(then));
                    state = format!("backoff, restart in {}", short_duration(left));
                }
                let last = match (&c.last_exit, c.last_exit_at_ms) {
                    (Some(e), Some(at)) => format!("{e}, {} ago", ago(then, at)),
                    (Some(e), None) => e.clone(),
                    _ => "-".to_string(),
                };
                [
                    c.name.clone(),
                    state,
                    c.pid.map_or("-".to_string(), |p| p.to_string()),
                    c.restarts.to_string(),
                    c.uptime(then).map_or("-".to_string(), short_duration),
                    last,
                ]
            })
            .collect();
        let head = ["SERVER", "STATE", "PID", "RESTARTS", "UPTIME", "LAST EXIT"];
        let mut width = head.map(str::len);
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut line = |cells: [&str; 6]| {
            let mut l = String::new();
            for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
                if i + 1 == cells.len() {
                    l.push_str(cell);
                } else {
                    l.push_str(&format!("{cell:<w$}  "));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(head);
        for r in &rows {
            line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
        }
        out
    }
}

impl ChildStatus {
    /// How long its current process has run (starting or running only).
    pub fn uptime(&self, now_ms: u64) -> Option<Duration> {
        match self.state {
            ChildState::Starting | ChildState::Running | ChildState::Stopping => {
                self.started_at_ms.map(|t| Duration::from_millis(now_ms.saturating_sub(t)))
            }
            _ => None,
        }
    }
}

fn ago(now_ms: u64, then_ms: u64) -> String {
    short_duration(Duration::from_millis(now_ms.saturating_sub(then_ms)))
}

/// `850ms`, `4.2s`, `3m05s`, `2h07m`, `3d04h`.
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600)
    }
}

/// Whether process `pid` runs and is a `tessera up` (not a zombie, not another program that got the pid).
pub fn up_process_alive(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.first().is_some_and(|a| a.ends_with(b"tessera")) && args.iter().any(|a| *a == b"up")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn restart(d: Decision) -> Duration {
        match d {
            Decision::Restart(d) => d,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_first_restart_comes_after_half_a_second() {
        let mut b = Backoff::new(RestartPolicy::default());
        assert_eq!(b.exited(Some(Duration::from_secs(5))), Decision::Restart(ms(500)));
        let mut b = Backoff::new(RestartPolicy::default());
        assert_eq!(b.exited(None), Decision::Restart(ms(500)), "a failed start too");
    }

    #[test]
    fn each_quick_exit_doubles_the_delay() {
        let mut b = Backoff::new(RestartPolicy::default());
        let delays: Vec<Duration> = (0..5).map(|_| restart(b.exited(Some(Duration::from_secs(1))))).collect();
        assert_eq!(delays, [ms(500), ms(1000), ms(2000), ms(4000), ms(8000)]);
    }

    #[test]
    fn the_delay_is_capped_at_30_seconds() {
        let mut b = Backoff::new(RestartPolicy::default());
        let delays: Vec<Duration> = (0..40).map(|_| restart(b.exited(Some(ms(10))))).collect();
        assert_eq!(&delays[5..8], [ms(16_000), ms(30_000), ms(30_000)]);
        assert_eq!(*delays.last().unwrap(), ms(30_000), "and stays there, without overflowing");
    }

    #[test]
    fn a_minute_of_health_resets_the_delay() {
        let mut b = Backoff::new(RestartPolicy::default());
        for _ in 0..4 {
            b.exited(Some(Duration::from_secs(2)));
        }
        assert_eq!(b.exited(Some(Duration::from_secs(59))), Decision::Restart(ms(8000)), "59 s is not a minute");
        assert_eq!(b.exited(Some(Duration::from_secs(60))), Decision::Restart(ms(500)));
        assert_eq!(b.exited(Some(Duration::from_secs(1))), Decision::Restart(ms(1000)), "and doubles again from there");
    }

    #[test]
    fn it_gives_up_on_a_server_that_keeps_failing_at_start() {
        let mut b = Backoff::new(RestartPolicy::default());
        let delays: Vec<Duration> = (0..4).map(|_| restart(b.exited(None))).collect();
        assert_eq!(delays, [ms(500), ms(1000), ms(2000), ms(4000)]);
        assert_eq!(b.start_failures(), 4);
        assert_eq!(b.exited(None), Decision::GiveUp { start_failures: 5 });
    }

    #[test]
    fn a_start_that_succeeds_resets_the_count_of_failed_starts() {
        let mut b = Backoff::new(RestartPolicy::default());
        for _ in 0..4 {
            b.exited(None);
        }
        b.ready();
        assert_eq!(b.start_failures(), 0);
        assert!(matches!(b.exited(Some(ms(100))), Decision::Restart(_)), "a crash after READY is no failed start");
        for _ in 0..4 {
            assert!(matches!(b.exited(None), Decision::Restart(_)));
        }
        assert!(matches!(b.exited(None), Decision::GiveUp { .. }));
        // A server that starts every time but ends soon after is restarted for ever, every 30 s at most.
        let mut b = Backoff::new(RestartPolicy::default());
        for _ in 0..100 {
            b.ready();
            assert!(restart(b.exited(Some(ms(100)))) <= Duration::from_secs(30));
        }
    }

    fn sample() -> UpStatus {
        UpStatus {
            dir: "/tmp/c".into(),
            pid: 42,
            state: "running".into(),
            message: None,
            updated_at_ms: 1_000_000,
            children: vec![
                ChildStatus {
                    name: "mds".into(),
                    state: ChildState::Running,
                    pid: Some(100),
                    restarts: 0,
                    started_at_ms: Some(1_000_000 - 65_000),
                    last_exit: None,
                    last_exit_at_ms: None,
                    restart_at_ms: None,
                    log: "/tmp/c/logs/mds.log".into(),
                },
                ChildStatus {
                    name: "ds1".into(),
                    state: ChildState::Backoff,
                    pid: None,
                    restarts: 2,
                    started_at_ms: None,
                    last_exit: Some("signal: 9 (SIGKILL)".into()),
                    last_exit_at_ms: Some(1_000_000 - 300),
                    restart_at_ms: Some(1_000_000 + 1500),
                    log: "/tmp/c/logs/ds1.log".into(),
                },
            ],
        }
    }

    #[test]
    fn the_status_file_round_trips_and_is_replaced_whole() {
        let s = sample();
        let v = s.to_json(1_000_000);
        assert_eq!(v["children"][0]["uptime_s"].as_f64(), Some(65.0));
        assert!(v["children"][1]["uptime_s"].is_null() && v["children"][1]["pid"].is_null());
        assert_eq!(UpStatus::from_json(&v).unwrap(), s);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STATUS_FILE);
        s.write(&path).unwrap();
        let mut t = s.clone();
        t.children[1].state = ChildState::Running;
        t.write(&path).unwrap();
        assert_eq!(UpStatus::read(&path).unwrap(), t);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, [STATUS_FILE], "no temporary file left behind");
        assert!(UpStatus::from_json(
            &json!({"pid": 1, "state": "running", "children": [{"name": "x", "state": "odd"}]})
        )
        .unwrap_err()
        .to_string()
        .contains("unknown \"state\""));
    }

    #[test]
    fn the_table_shows_state_pid_restarts_uptime_and_last_exit() {
        let s = sample();
        let t = s.table(1_000_000, true);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "tessera up (pid 42) in /tmp/c: running");
        assert!(lines[1].starts_with("SERVER") && lines[1].contains("RESTARTS"), "{t}");
        let mds: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(mds, ["mds", "running", "100", "0", "1m05s", "-"], "{t}");
        assert!(
            lines[3].contains("backoff, restart in 1.5s") && lines[3].contains("signal: 9 (SIGKILL), 300ms ago"),
            "{t}"
        );
        assert!(!s.healthy(true));
        let t = s.table(1_010_000, false);
        assert!(
            t.starts_with("tessera up (pid 42) in /tmp/c is not running; its last status (running, 10.0s ago)"),
            "{t}"
        );
        let mut ok = s.clone();
        ok.children.truncate(1);
        assert!(ok.healthy(true) && !ok.healthy(false));
    }

    #[test]
    fn durations_print_short() {
        assert_eq!(short_duration(ms(850)), "850ms");
        assert_eq!(short_duration(ms(4240)), "4.2s");
        assert_eq!(short_duration(Duration::from_secs(185)), "3m05s");
        assert_eq!(short_duration(Duration::from_secs(7620)), "2h07m");
        assert_eq!(short_duration(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d04h");
    }

    #[test]
    fn only_a_live_tessera_up_counts() {
        assert!(!up_process_alive(std::process::id()), "a test binary is not `tessera up`");
        assert!(!up_process_alive(u32::MAX));
    }
}
