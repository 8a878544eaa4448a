//! `tessera-bench mdtest`: metadata rates like mdtest — each task creates, stats, reads (open, read
//! `-e` bytes, close) and removes its own files (empty, or `-w` bytes each) in its own subdirectory; each
//! phase is timed from a start barrier to the last task's end.

use crate::backend::{join, Backend, ClusterArgs, PosixBackend, TesseraBackend};
use crate::ior::Api;
use crate::report::{self, MdtestJson};
use anyhow::{bail, Context, Result};
use futures::stream::{FuturesUnordered, StreamExt};
use std::sync::Arc;
use std::time::Instant;
use tessera_client::ClusterConfig;
use tokio::sync::Barrier;

#[derive(clap::Args, Debug, Clone)]
pub struct MdtestArgs {
    /// API to drive.
    #[arg(short = 'a', long, value_enum, default_value = "tessera")]
    pub api: Api,
    /// Total number of files, split evenly over the tasks.
    #[arg(short = 'n', long, default_value_t = 10_000)]
    pub files: u64,
    /// Concurrent tasks (each with its own connection / thread).
    #[arg(short = 'N', long, default_value_t = 1)]
    pub tasks: usize,
    /// Test directory (tessera path, or a local directory for -a posix); created if missing.
    #[arg(short = 'd', long, default_value = "/mdtest")]
    pub dir: String,
    /// Bytes written into each file when it is created (mdtest's -w).
    #[arg(short = 'w', long, default_value_t = 0, value_parser = tessera_proto::units::parse_size)]
    pub write_bytes: u64,
    /// Bytes read from each file in the read phase (mdtest's -e; 0: open and close only).
    #[arg(short = 'e', long, default_value_t = 0, value_parser = tessera_proto::units::parse_size)]
    pub read_bytes: u64,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Files of `task` when `files` are split over `tasks` (the first `files % tasks` tasks get one more).
pub fn files_of_task(files: u64, tasks: usize, task: usize) -> u64 {
    let (n, t) = (tasks as u64, task as u64);
    files / n + u64::from(t < files % n)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Create,
    Stat,
    Read,
    Remove,
}

fn task_dir(dir: &str, task: usize) -> String {
    format!("{}/mdtest.task.{task}", dir.trim_end_matches('/'))
}

/// What each task does in a phase: its directory, file count and the bytes written / read per file.
struct TaskWork {
    dir: String,
    count: u64,
    write_bytes: u64,
    read_bytes: u64,
}

async fn md_task<B: Backend>(b: Arc<B>, w: TaskWork, phase: Phase, start: Arc<Barrier>) -> Result<(Instant, Instant)> {
    let names: Vec<String> = (0..w.count).map(|i| format!("{}/file.{i}", w.dir)).collect();
    let payload = bytes::Bytes::from(vec![0x6du8; w.write_bytes as usize]);
    let expect_read = w.read_bytes.min(w.write_bytes) as usize;
    start.wait().await;
    let t0 = Instant::now();
    for name in &names {
        match phase {
            Phase::Create => {
                let f = b.create(name, None).await?;
                if !payload.is_empty() {
                    b.write_at(&f, 0, payload.clone()).await.with_context(|| format!("write {name}"))?;
                }
                b.close(f).await.with_context(|| format!("close {name}"))?;
            }
            Phase::Stat => {
                let m = b.stat(name).await?;
                if m.is_dir || m.size != w.write_bytes {
                    bail!(
                        "stat {name}: expected a file of {} bytes, got size {} dir {}",
                        w.write_bytes,
                        m.size,
                        m.is_dir
                    );
                }
            }
            Phase::Read => {
                let f = b.open_read(name).await?;
                // As mdtest: read what -e asks for, of what -w wrote.
                if expect_read > 0 {
                    let got = b.read_at(&f, 0, expect_read).await.with_context(|| format!("read {name}"))?;
                    if got.len() != expect_read {
                        bail!("read {name}: {} bytes, expected {expect_read}", got.len());
                    }
                }
                b.close(f).await.with_context(|| format!("close {name}"))?;
            }
            Phase::Remove => b.unlink(name).await?,
        }
    }
    Ok((t0, Instant::now()))
}

async fn run_phase<B: Backend>(backends: &[Arc<B>], a: &MdtestArgs, phase: Phase) -> Result<f64> {
    let n = backends.len();
    let start = Arc::new(Barrier::new(n));
    let mut pending = FuturesUnordered::new();
    for (task, b) in backends.iter().enumerate() {
        let work = TaskWork {
            dir: task_dir(&a.dir, task),
            count: files_of_task(a.files, n, task),
            write_bytes: a.write_bytes,
            read_bytes: a.read_bytes,
        };
        let fut = md_task(b.clone(), work, phase, start.clone());
        pending.push(join(B::spawn(format!("mdtest-{task}"), fut)?, "task"));
    }
    let (mut first, mut last) = (None::<Instant>, None::<Instant>);
    while let Some(r) = pending.next().await {
        let (s, e) = r.with_context(|| format!("{phase:?} phase"))?;
        first = Some(first.map_or(s, |f| f.min(s)));
        last = Some(last.map_or(e, |l| l.max(e)));
    }
    let secs = match (first, last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f).as_secs_f64(),
        _ => 0.0,
    };
    Ok(report::rate(a.files, secs))
}

/// Entry point of `tessera-bench mdtest`.
pub async fn run(a: MdtestArgs) -> Result<()> {
    if a.tasks == 0 {
        bail!("tasks must be positive");
    }
    if a.write_bytes > 64 << 20 || a.read_bytes > 64 << 20 {
        bail!("-w and -e are at most 64 MiB per file");
    }
    match a.api {
        Api::Tessera => {
            let cfg = ClusterConfig::locate(a.cluster.config.as_deref())?;
            let mut backends = Vec::with_capacity(a.tasks);
            for _ in 0..a.tasks {
                backends.push(Arc::new(TesseraBackend::connect(&cfg, a.cluster.job.as_deref()).await?));
            }
            run_with(&a, &backends).await
        }
        Api::Posix => run_with(&a, &(0..a.tasks).map(|_| Arc::new(PosixBackend)).collect::<Vec<_>>()).await,
    }
}

async fn run_with<B: Backend>(a: &MdtestArgs, backends: &[Arc<B>]) -> Result<()> {
    println!("tessera-bench mdtest: metadata benchmark");
    println!("api                 : {}", a.api.name());
    println!("directory           : {}", a.dir);
    println!(
        "{} tasks, {} files, {} bytes written and {} read per file",
        a.tasks, a.files, a.write_bytes, a.read_bytes
    );
    println!();
    let j = iteration(a, backends).await?;
    let (create, stat, read, remove) = (j.create_ops_s, j.stat_ops_s, j.read_ops_s, j.remove_ops_s);
    println!("SUMMARY rate: (of 1 iteration)");
    println!("   File creation     : {create:>14.3} ops/sec");
    println!("   File stat         : {stat:>14.3} ops/sec");
    println!("   File read         : {read:>14.3} ops/sec");
    println!("   File removal      : {remove:>14.3} ops/sec");
    println!();
    println!("File creation: {create:.2} ops/sec");
    println!("File stat: {stat:.2} ops/sec");
    println!("File read: {read:.2} ops/sec");
    println!("File removal: {remove:.2} ops/sec");
    if let Some(jp) = &a.cluster.json {
        report::write_json(jp, &j)?;
    }
    Ok(())
}

/// One iteration, quietly: the tree set up, the four timed phases (each task's files created, stat'ed
/// and checked, read, removed), the tree removed. The first error ends it.
pub async fn iteration<B: Backend>(a: &MdtestArgs, backends: &[Arc<B>]) -> Result<MdtestJson> {
    let b0 = &backends[0];
    // The tree is set up and torn down outside the timed phases, as mdtest does.
    for task in 0..a.tasks {
        let d = task_dir(&a.dir, task);
        b0.remove_all(&d).await.ok();
        b0.mkdir_all(&d).await?;
    }
    let create = run_phase(backends, a, Phase::Create).await?;
    let stat = run_phase(backends, a, Phase::Stat).await?;
    let read = run_phase(backends, a, Phase::Read).await?;
    let remove = run_phase(backends, a, Phase::Remove).await?;
    for task in 0..a.tasks {
        b0.remove_all(&task_dir(&a.dir, task)).await?;
    }
    Ok(MdtestJson {
        api: a.api.name().to_lowercase(),
        create_ops_s: create,
        stat_ops_s: stat,
        read_ops_s: read,
        remove_ops_s: remove,
        files: a.files,
        tasks: a.tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_split_evenly() {
        assert_eq!((0..3).map(|t| files_of_task(10, 3, t)).collect::<Vec<_>>(), vec![4, 3, 3]);
        assert_eq!((0..4).map(|t| files_of_task(8, 4, t)).sum::<u64>(), 8);
        assert_eq!(files_of_task(1, 2, 1), 0);
        assert_eq!(task_dir("/x/", 2), "/x/mdtest.task.2");
    }

    #[test]
    fn posix_end_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let a = MdtestArgs {
            api: Api::Posix,
            files: 25,
            tasks: 3,
            dir: dir.path().to_str().unwrap().into(),
            write_bytes: 3000,
            read_bytes: 4096,
            cluster: ClusterArgs { json: Some(dir.path().join("r.json")), ..Default::default() },
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(run(a)).unwrap();
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
        assert_eq!(j["files"], 25);
        assert!(j["create_ops_s"].as_f64().unwrap() > 0.0);
        assert!(j["read_ops_s"].as_f64().unwrap() > 0.0);
        // Only the JSON file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
