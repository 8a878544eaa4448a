//! A real `tessera up` for the tests of the embedded default: started on a directory, waited for until it
//! prints `TESSERA UP <client config>`, its stderr kept (and echoed), its `status.json` read, stopped with
//! SIGINT (Ctrl-C) or SIGTERM, killed when the test ends.

use crate::cluster::bin;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `tessera up` and what it printed on stderr so far.
pub struct Up {
    pub child: Child,
    /// The cluster directory (canonical).
    pub dir: PathBuf,
    /// The client configuration it printed.
    pub config: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Up {
    /// `tessera up --ds DS --ion ION --port-base 0 --dir DIR`, waited for (90 s at most).
    pub fn start(dir: &Path, ds: usize, ion: usize) -> Up {
        let mut child = Command::new(bin("tessera"))
            .args(["up", "--ds", &ds.to_string(), "--ion", &ion.to_string(), "--port-base", "0", "--dir"])
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tessera up");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(p) = line.strip_prefix("TESSERA UP ") {
                    let _ = tx.send(PathBuf::from(p.trim()));
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (err, lines) = (child.stderr.take().unwrap(), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("[up] {line}");
                lines.lock().unwrap().push(line);
            }
        });
        let config = rx.recv_timeout(Duration::from_secs(90)).expect("tessera up did not come up");
        Up { child, dir: dir.canonicalize().unwrap(), config, stderr }
    }

    /// `DIR/status.json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.join("status.json")).expect("status.json");
        serde_json::from_str(&text).expect("status.json is JSON")
    }

    /// What it printed on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Sends `sig` to `tessera up` itself.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our child's pid.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Waits up to `limit` for `tessera up` to exit.
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // Let the reader thread take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return st;
            }
            assert!(Instant::now() < deadline, "tessera up did not exit within {limit:?}:\n{}", self.stderr_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ctrl-C: SIGINT, then `up` must exit successfully within 20 s.
    pub fn stop(mut self) {
        self.signal(libc::SIGINT);
        let status = self.wait(Duration::from_secs(20));
        assert!(status.success(), "tessera up exited with {status}:\n{}", self.stderr_text());
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        // A failed test: its servers die with it (they get SIGTERM when `up` dies).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tessera --config CONFIG ARGS...`, its output whatever the outcome.
pub fn tessera(config: &Path, args: &[&str]) -> Output {
    Command::new(bin("tessera")).arg("--config").arg(config).args(args).output().expect("run tessera")
}

/// [`tessera`], which must succeed; its stdout.
pub fn tessera_ok(config: &Path, args: &[&str]) -> String {
    let out = tessera(config, args);
    assert!(out.status.success(), "tessera {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
