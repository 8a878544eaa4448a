//! Child processes of launchers and tests: start a server or mount, wait for the `READY <addr>` line it
//! prints once it serves, forward SIGINT/SIGTERM by stopping children, and stop them cleanly (SIGTERM,
//! a grace period, then SIGKILL). Used by `tessera up`, the benchmark's local cluster and sink servers,
//! `tessera-fuse --daemon` and the cross-process tests.
//!
//! The child's stdout is read by a thread (so blocking and async callers share one implementation); lines
//! other than the first `READY` are appended to the log, which also receives the child's stderr. An error
//! about a child that did not become ready names it and quotes the last lines of its log.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Tells the launcher this process is ready: prints the `READY <what>` line [`Child::ready`] waits for
/// (an address, a mount point) and flushes it.
pub fn announce_ready(what: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "READY {what}");
    let _ = out.flush();
}

/// How long a server may take to print `READY`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child gets to exit after SIGTERM before it is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Environment variable overriding where the server binaries are looked for.
pub const BIN_DIR_ENV: &str = "TESSERA_BIN_DIR";
/// Lines of the log quoted when a child fails to become ready.
const TAIL_LINES: usize = 10;
/// How often exits are polled.
const POLL: Duration = Duration::from_millis(20);

/// Path of a Tessera binary: next to the running executable, or in `$TESSERA_BIN_DIR`.
pub fn server_binary(name: &str) -> std::io::Result<PathBuf> {
    let dir = match std::env::var_os(BIN_DIR_ENV) {
        Some(d) => PathBuf::from(d),
        None => {
            let exe = std::env::current_exe()
                .map_err(|e| std::io::Error::other(format!("cannot find the running executable: {e}")))?;
            exe.parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| std::io::Error::other(format!("executable {} has no directory", exe.display())))?
        }
    };
    let bin = dir.join(name);
    if !bin.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{name} not found in {} (build it with `cargo build --bins`, or set {BIN_DIR_ENV} to its directory)",
                dir.display()
            ),
        ));
    }
    Ok(bin)
}

/// Makes the kernel SIGTERM the child when the thread that spawned it (and so, in practice, the
/// launcher) dies, so servers never outlive a crashed `tessera up` or test.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        })
    }
}

/// What the stdout reader has seen so far.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Nothing,
    /// What followed `READY` on its line.
    Ready(String),
    /// Stdout closed (or failed) before `READY`.
    Closed,
}

#[derive(Debug)]
struct ReadyLine {
    seen: Mutex<Seen>,
    changed: Condvar,
}

impl ReadyLine {
    fn set(&self, s: Seen) {
        let mut g = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if *g == Seen::Nothing {
            *g = s;
        }
        self.changed.notify_all();
    }

    fn get(&self) -> Seen {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A started child process. Dropping it kills the child unless it was [`detach`](Child::detach)ed or
/// has been reaped already.
#[derive(Debug)]
pub struct Child {
    name: String,
    inner: std::process::Child,
    log: Option<PathBuf>,
    ready: Arc<ReadyLine>,
    status: Option<ExitStatus>,
    detached: bool,
}

/// Starts `cmd` as child `name` (used in messages): stdin from /dev/null, stdout read for `READY`, stderr
/// appended to `log` (created if missing), or inherited when `log` is `None`.
pub fn spawn(name: &str, cmd: &mut Command, log: Option<&Path>) -> std::io::Result<Child> {
    let stderr = match log {
        Some(log) => {
            let f =
                std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("{name}: opening log {}: {e}", log.display()))
                })?;
            Stdio::from(f)
        }
        None => Stdio::inherit(),
    };
    let mut inner = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| std::io::Error::new(e.kind(), format!("starting {name} ({:?}): {e}", cmd.get_program())))?;
    let stdout = inner.stdout.take().expect("stdout is piped");
    let ready = Arc::new(ReadyLine { seen: Mutex::new(Seen::Nothing), changed: Condvar::new() });
    let (r, log_copy) = (ready.clone(), log.map(Path::to_path_buf));
    std::thread::Builder::new().name(format!("{name}-stdout")).spawn(move || {
        // Reading to the end also keeps the child from blocking on a full pipe.
        let mut lines = BufReader::new(stdout).lines();
        let mut ready_seen = false;
        while let Some(Ok(line)) = lines.next() {
            if !ready_seen {
                if let Some(rest) = line.strip_prefix("READY") {
                    ready_seen = true;
                    r.set(Seen::Ready(rest.trim().to_string()));
                    continue;
                }
            }
            if let Some(log) = &log_copy {
                if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(log) {
                    let _ = writeln!(f, "{line}");
                }
            }
        }
        r.set(Seen::Closed);
    })?;
    Ok(Child { name: name.to_string(), inner, log: log.map(Path::to_path_buf), ready, status: None, detached: false })
}

impl Child {
    /// The name given at [`spawn`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.inner.id()
    }

    /// The log its stderr goes to.
    pub fn log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// Waits up to `timeout` for the `READY` line; returns what followed `READY`. The error says whether
    /// the child exited, closed its output or timed out, and quotes the end of its log.
    pub fn wait_ready(&mut self, timeout: Duration) -> std::io::Result<String> {
        let deadline = Instant::now() + timeout;
        let seen = {
            let mut g = self.ready.seen.lock().unwrap_or_else(|e| e.into_inner());
            while *g == Seen::Nothing {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                g = self.ready.changed.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
            }
            g.clone()
        };
        self.ready_outcome(seen, timeout)
    }

    /// [`wait_ready`](Child::wait_ready) for async callers (cancel-safe: nothing is lost if dropped).
    pub async fn ready(&mut self, timeout: Duration) -> std::io::Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = self.ready.get();
        while seen == Seen::Nothing && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
            seen = self.ready.get();
        }
        self.ready_outcome(seen, timeout)
    }

    /// [`wait_ready`](Child::wait_ready) without waiting, for a caller that watches several children:
    /// `None` while the child has printed neither `READY` nor closed its output (or has closed it but not
    /// exited yet), else what `wait_ready` would return.
    pub fn poll_ready(&mut self) -> Option<std::io::Result<String>> {
        match self.ready.get() {
            Seen::Nothing => None,
            Seen::Closed if self.try_wait().is_none() => None,
            seen => Some(self.ready_outcome(seen, Duration::ZERO)),
        }
    }

    /// The error of a child that did not print `READY` within `timeout` (as [`wait_ready`](Child::wait_ready)
    /// gives it, with the end of its log), for a caller that keeps the time itself.
    pub fn not_ready_error(&mut self, timeout: Duration) -> std::io::Error {
        match self.ready_outcome(Seen::Nothing, timeout) {
            Ok(_) => unreachable!("Seen::Nothing is never ready"),
            Err(e) => e,
        }
    }

    fn ready_outcome(&mut self, seen: Seen, timeout: Duration) -> std::io::Result<String> {
        let why = match seen {
            Seen::Ready(rest) => return Ok(rest),
            Seen::Closed => {
                // It usually exits right after closing its output; give it a moment to be reaped.
                let deadline = Instant::now() + Duration::from_secs(2);
                while self.try_wait().is_none() && Instant::now() < deadline {
                    std::thread::sleep(POLL);
                }
                match self.status {
                    Some(st) => format!("exited ({st}) before printing READY"),
                    None => "closed its output before printing READY".to_string(),
                }
            }
            Seen::Nothing => format!("did not print READY within {timeout:?}"),
        };
        let mut msg = format!("{} {why}", self.name);
        if let Some(log) = &self.log {
            msg.push_str(&format!("; log {}", log.display()));
            let tail = log_tail(log, TAIL_LINES);
            if !tail.is_empty() {
                msg.push_str(":\n");
                msg.push_str(&tail);
            }
        }
        Err(std::io::Error::other(msg))
    }

    /// Its exit status if it has exited (reaping it), else `None`.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.inner.try_wait().ok().flatten();
        }
        self.status
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// Sends `sig` if it still runs.
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.running() {
            // SAFETY: plain kill(2) on our own unreaped child (its pid cannot have been reused).
            unsafe {
                libc::kill(self.inner.id() as libc::pid_t, sig);
            }
        }
    }

    /// SIGTERM: asks it to stop.
    pub fn terminate(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// SIGKILL, like a crash, and reap it.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.signal(libc::SIGKILL);
        if self.status.is_none() {
            self.status = self.inner.wait().ok();
        }
        self.status
    }

    /// Stops it: SIGTERM, up to `grace` to exit, then SIGKILL. Returns its exit status and whether it
    /// had to be killed.
    pub fn stop(&mut self, grace: Duration) -> Stopped {
        stop_all(std::slice::from_mut(self), grace).remove(0)
    }

    /// Leaves the child running when this handle is dropped (a daemon).
    pub fn detach(mut self) {
        self.detached = true;
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.detached {
            self.kill();
        }
    }
}

/// How a stopped child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    pub status: Option<ExitStatus>,
    /// It did not exit within the grace period and was SIGKILLed.
    pub killed: bool,
}

/// Sends SIGTERM to every running child, gives them `grace` to exit, then SIGKILLs the rest.
pub fn stop_all(children: &mut [Child], grace: Duration) -> Vec<Stopped> {
    terminate(children);
    let deadline = Instant::now() + grace;
    while children.iter_mut().any(Child::running) && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    finish(children)
}

/// [`stop_all`] for async callers.
pub async fn stop_all_async(children: &mut [Child], grace: Duration) -> Vec<Stopped> {
    terminate(children);
    let deadline = tokio::time::Instant::now() + grace;
    while children.iter_mut().any(Child::running) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    finish(children)
}

fn terminate(children: &mut [Child]) {
    for c in children.iter_mut() {
        c.signal(libc::SIGTERM);
    }
}

fn finish(children: &mut [Child]) -> Vec<Stopped> {
    children
        .iter_mut()
        .map(|c| {
            let killed = c.running();
            if killed {
                tracing::warn!("{} did not stop after SIGTERM; killing it", c.name);
            }
            Stopped { status: c.kill(), killed }
        })
        .collect()
}

/// Waits until one of `children` exits; returns its index and status. Pending forever if `children` is
/// empty.
pub async fn any_exit(children: &mut [Child]) -> (usize, ExitStatus) {
    loop {
        for (i, c) in children.iter_mut().enumerate() {
            if let Some(st) = c.try_wait() {
                return (i, st);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Resolves at the first SIGINT or SIGTERM to this process (a launcher then stops its children), with the
/// signal's name. Install it before starting children so no signal is missed.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Watches SIGINT and SIGTERM (needs a tokio runtime).
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    /// The next SIGINT or SIGTERM.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}

/// The last `n` lines of a log file.
pub fn log_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn ready_line_gives_the_address_and_stop_terminates() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        let mut c =
            spawn("sleeper", &mut sh("echo hello; echo READY 127.0.0.1:1; echo after; exec sleep 30"), Some(&log))
                .unwrap();
        assert_eq!(c.wait_ready(Duration::from_secs(10)).unwrap(), "127.0.0.1:1");
        assert!(c.running());
        // Other stdout lines land in the log (copied by the reader thread, so shortly). Waited for before
        // the stop: on a loaded machine the shell may not have written "after" yet when READY is read.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut text = std::fs::read_to_string(&log).unwrap();
        while !text.contains("after") && Instant::now() < deadline {
            std::thread::sleep(POLL);
            text = std::fs::read_to_string(&log).unwrap();
        }
        assert!(text.contains("hello") && text.contains("after") && !text.contains("READY"), "{text}");
        let st = c.stop(Duration::from_secs(10));
        assert!(!st.killed, "sleep exits on SIGTERM, within the grace");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st.status.unwrap()), Some(libc::SIGTERM));
    }

    #[test]
    fn a_child_that_exits_first_is_reported_with_its_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("b.log");
        let mut c = spawn("broken", &mut sh("echo 'bad config: no [mds]' >&2; exit 3"), Some(&log)).unwrap();
        let t = Instant::now();
        let e = c.wait_ready(Duration::from_secs(30)).unwrap_err().to_string();
        assert!(t.elapsed() < Duration::from_secs(10), "noticed at exit, not at the timeout");
        assert!(e.contains("broken exited") && e.contains("before printing READY"), "{e}");
        assert!(e.contains("bad config: no [mds]"), "the stderr tail is quoted: {e}");
    }

    #[test]
    fn a_silent_child_times_out() {
        let mut c = spawn("silent", &mut sh("exec sleep 30"), None).unwrap();
        let e = c.wait_ready(Duration::from_millis(300)).unwrap_err().to_string();
        assert!(e.contains("silent did not print READY within"), "{e}");
        let pid = c.id();
        drop(c);
        // SAFETY: signal 0 only checks existence; the dropped child was killed and reaped.
        assert_ne!(unsafe { libc::kill(pid as libc::pid_t, 0) }, 0, "dropping kills the child");
    }

    #[test]
    fn poll_ready_answers_without_waiting() {
        let poll = |c: &mut Child| {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(r) = c.poll_ready() {
                    return r;
                }
                assert!(Instant::now() < deadline, "{} never answered", c.name());
                std::thread::sleep(POLL);
            }
        };
        let mut c = spawn("poller", &mut sh("sleep 0.5; echo READY here; exec sleep 30"), None).unwrap();
        assert!(c.poll_ready().is_none(), "nothing printed yet");
        assert_eq!(poll(&mut c).unwrap(), "here");
        let mut q = spawn("quitter", &mut sh("echo 'no port' >&2; exit 2"), None).unwrap();
        let e = poll(&mut q).unwrap_err().to_string();
        assert!(e.contains("quitter exited") && e.contains("before printing READY"), "{e}");
        let mut s = spawn("silent", &mut sh("exec sleep 30"), None).unwrap();
        assert!(s.poll_ready().is_none());
        let e = s.not_ready_error(Duration::from_secs(1)).to_string();
        assert!(e.contains("silent did not print READY within 1s"), "{e}");
        s.terminate();
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.running() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&s.try_wait().unwrap()), Some(libc::SIGTERM));
    }

    #[test]
    fn stop_escalates_to_sigkill() {
        let mut c = spawn("stubborn", &mut sh("trap '' TERM; echo READY x; while :; do sleep 1; done"), None).unwrap();
        c.wait_ready(Duration::from_secs(10)).unwrap();
        let t = Instant::now();
        let st = c.stop(Duration::from_millis(500));
        assert!(st.killed, "SIGTERM is ignored, so it is killed");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st.status.unwrap()), Some(libc::SIGKILL));
        assert!(t.elapsed() >= Duration::from_millis(500) && t.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn async_ready_and_stop_all() {
        let mut kids = vec![
            spawn("a", &mut sh("echo READY 127.0.0.1:7; exec sleep 30"), None).unwrap(),
            spawn("b", &mut sh("sleep 0.2; echo READY 127.0.0.1:8; exec sleep 30"), None).unwrap(),
        ];
        assert_eq!(kids[0].ready(Duration::from_secs(10)).await.unwrap(), "127.0.0.1:7");
        assert_eq!(kids[1].ready(Duration::from_secs(10)).await.unwrap(), "127.0.0.1:8");
        kids.push(spawn("c", &mut sh("exit 4"), None).unwrap());
        let (i, st) = tokio::time::timeout(Duration::from_secs(10), any_exit(&mut kids)).await.unwrap();
        assert_eq!((i, st.code()), (2, Some(4)));
        let stopped = stop_all_async(&mut kids, Duration::from_secs(10)).await;
        assert!(stopped.iter().all(|s| !s.killed && s.status.is_some()), "{stopped:?}");
    }
}
