//! `tessera-bench locks`: what file locks cost through a mount (issue 42), with `fcntl` as programs use
//! it. Three phases, each run `--reps` times for `--seconds`, alternating, medians reported:
//! - `lock+unlock`: one process locks and unlocks one byte in a loop through `FILE` (two round trips to
//!   the lock manager per pair; nobody else locks);
//! - `getlk`: `F_GETLK` in a loop (one round trip each);
//! - `ping-pong` (with `--other FILE2`, the same file through another mount): two threads, one per
//!   mount, each taking the whole file's write lock with `F_SETLKW`, then releasing it: every grant
//!   waits for the other mount's release, so a grant is a hand-over between two client nodes.
//!
//! Any POSIX file system works (a local one gives the kernel's own cost, for comparison).

use crate::report::{median, write_json};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct LocksArgs {
    /// The file to lock (created if missing), e.g. on a Tessera mount.
    pub file: PathBuf,
    /// The same file through another mount (another client node): adds the ping-pong phase.
    #[arg(long)]
    pub other: Option<PathBuf>,
    /// Seconds per phase run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Repetitions of each phase (medians reported).
    #[arg(short = 'i', long, default_value_t = 3)]
    pub reps: u32,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Debug, Clone)]
pub struct LockPhase {
    pub phase: String,
    /// Operations per second of each repetition (a lock+unlock pair, an F_GETLK, a grant).
    pub per_sec: Vec<f64>,
    pub median_per_sec: f64,
    /// Median time per operation, microseconds.
    pub median_us: f64,
}

fn open(p: &PathBuf) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(p)
        .with_context(|| format!("opening {}", p.display()))
}

/// `fcntl(cmd)` with `typ` on `len` bytes from 0.
fn fcntl(f: &File, cmd: i32, typ: i32, len: i64) -> std::io::Result<()> {
    // SAFETY: all-zero is a valid `flock`.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = typ as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_len = len;
    // SAFETY: a valid descriptor and a valid `flock`.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &mut l) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Runs `op` in a loop for `secs`; returns operations per second.
fn rate(secs: f64, mut op: impl FnMut() -> std::io::Result<()>) -> Result<f64> {
    let t = Instant::now();
    let d = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while t.elapsed() < d {
        op()?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

fn lock_unlock(f: &File) -> std::io::Result<()> {
    fcntl(f, libc::F_SETLK, libc::F_WRLCK, 1)?;
    fcntl(f, libc::F_SETLK, libc::F_UNLCK, 1)
}

/// Two threads handing the whole file's write lock back and forth; grants per second.
fn ping_pong(a: &PathBuf, b: &PathBuf, secs: f64) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    let t = Instant::now();
    for p in [a, b] {
        let f = open(p)?;
        let (stop, grants) = (stop.clone(), grants.clone());
        threads.push(std::thread::spawn(move || -> std::io::Result<()> {
            while !stop.load(Ordering::Relaxed) {
                fcntl(&f, libc::F_SETLKW, libc::F_WRLCK, 0)?;
                grants.fetch_add(1, Ordering::Relaxed);
                fcntl(&f, libc::F_SETLK, libc::F_UNLCK, 0)?;
            }
            Ok(())
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for th in threads {
        th.join().map_err(|_| anyhow::anyhow!("a ping-pong thread panicked"))??;
    }
    Ok(grants.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64())
}

pub async fn run(a: LocksArgs) -> Result<()> {
    if a.seconds <= 0.0 || a.reps == 0 {
        bail!("--seconds and --reps must be positive");
    }
    let args = a.clone();
    let phases = tokio::task::spawn_blocking(move || measure(&args)).await??;
    println!("{:<12} {:>12} {:>12}  runs (/s)", "phase", "median /s", "median us");
    for p in &phases {
        let runs: Vec<String> = p.per_sec.iter().map(|r| format!("{r:.0}")).collect();
        println!("{:<12} {:>12.0} {:>12.1}  {}", p.phase, p.median_per_sec, p.median_us, runs.join(" "));
    }
    if let Some(j) = &a.json {
        write_json(j, &phases)?;
    }
    Ok(())
}

fn measure(a: &LocksArgs) -> Result<Vec<LockPhase>> {
    let f = open(&a.file)?;
    let mut names = vec!["lock+unlock", "getlk"];
    if a.other.is_some() {
        names.push("ping-pong");
    }
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..a.reps {
        runs[0].push(rate(a.seconds, || lock_unlock(&f))?);
        runs[1].push(rate(a.seconds, || fcntl(&f, libc::F_GETLK, libc::F_WRLCK, 0))?);
        if let Some(b) = &a.other {
            runs[2].push(ping_pong(&a.file, b, a.seconds)?);
        }
    }
    Ok(names
        .iter()
        .zip(runs)
        .map(|(n, r)| {
            let m = median(&r);
            LockPhase { phase: n.to_string(), per_sec: r, median_per_sec: m, median_us: 1e6 / m }
        })
        .collect())
}
