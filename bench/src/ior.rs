//! `tessera-bench ior`: an IOR-like workload generator — options, per-task offset generation for each
//! access pattern, the verification pattern, and the timed write/read phases.

use crate::backend::{join, parent_dir, Backend, ClusterArgs, PosixBackend, TesseraBackend};
use crate::report::{self, IorJson, PhaseLine};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Instant;
use tessera_client::{ClusterConfig, LayoutSpec};
use tessera_proto::units::{format_size, parse_size};
use tokio::sync::Barrier;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// The Tessera client library (paths in the Tessera namespace).
    Tessera,
    /// Local files through std::fs (a local directory or a FUSE mount).
    Posix,
}

impl Api {
    pub fn name(self) -> &'static str {
        match self {
            Api::Tessera => "TESSERA",
            Api::Posix => "POSIX",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Each task's transfers in file order within its blocks.
    Contiguous,
    /// Shared file: tasks interleave at transfer granularity within each segment (task k writes transfers
    /// k, k+N, k+2N, ...). File per task: the task walks its segments transfer by transfer (stride = block).
    Strided,
    /// A seeded random permutation of the task's contiguous offsets.
    Random,
}

/// IOR's options (same letters).
#[derive(clap::Args, Debug, Clone)]
pub struct IorArgs {
    /// API to drive.
    #[arg(short = 'a', long, value_enum, default_value = "tessera")]
    pub api: Api,
    /// Test file (with -F: prefix of the per-task files PATH.00000000...); an existing directory gets PATH/testFile.
    /// Default: /testFile for tessera, ./testFile for posix.
    #[arg(short = 'o', long = "test-file")]
    pub path: Option<String>,
    /// Write phase.
    #[arg(short = 'w', long)]
    pub write: bool,
    /// Read phase (neither -w nor -r: both).
    #[arg(short = 'r', long)]
    pub read: bool,
    /// Transfer size (bytes per I/O call), K/M/G suffixes.
    #[arg(short = 't', long = "transfer-size", value_parser = parse_size, default_value = "256k")]
    pub xfer: u64,
    /// Contiguous bytes per task per segment, K/M/G suffixes.
    #[arg(short = 'b', long = "block-size", value_parser = parse_size, default_value = "1m")]
    pub block: u64,
    /// Number of segments.
    #[arg(short = 's', long, default_value_t = 1)]
    pub segments: u64,
    /// One file per task instead of one shared file.
    #[arg(short = 'F', long = "file-per-task")]
    pub file_per_task: bool,
    /// fsync each file at the end of the write phase.
    #[arg(short = 'e', long)]
    pub fsync: bool,
    /// Read phase: task k reads the data task k+1 wrote (defeats client caches).
    #[arg(short = 'C', long = "reorder-tasks")]
    pub reorder: bool,
    /// Concurrent tasks (each with its own connection / thread).
    #[arg(short = 'N', long, default_value_t = 1)]
    pub tasks: usize,
    /// Repetitions.
    #[arg(short = 'i', long, default_value_t = 1)]
    pub iterations: u32,
    /// Order of each task's transfers.
    #[arg(long, value_enum, default_value = "contiguous")]
    pub pattern: Pattern,
    /// Seed of the random pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Stripe size of the created test file(s) (tessera).
    #[arg(short = 'S', long = "stripe-size", value_parser = parse_size)]
    pub stripe_size: Option<u64>,
    /// Stripe count of the created test file(s) (tessera; 0 = all data servers).
    #[arg(short = 'c', long = "stripe-count")]
    pub stripe_count: Option<u32>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Keep the test files (else they are removed after each iteration that wrote them).
    #[arg(short = 'k', long = "keep-file")]
    pub keep: bool,
    /// Write a pattern derived from offset and task and check every byte on read.
    #[arg(long)]
    pub verify: bool,
    /// Reads through the client engine's read-ahead, as the mount's (tessera; else each read is exact).
    #[arg(long = "read-ahead")]
    pub read_ahead: bool,
    /// Each transfer goes to the data servers as issued: written through, read exactly (tessera; IOR's
    /// `--posix.odirect`). Default: writes go into the client engine's write-behind.
    #[arg(long, conflicts_with = "read_ahead")]
    pub direct: bool,
}

/// Where each task's transfers go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub xfer: u64,
    pub block: u64,
    pub segments: u64,
    pub tasks: usize,
    pub file_per_task: bool,
}

impl Geometry {
    pub fn transfers_per_block(&self) -> u64 {
        self.block / self.xfer
    }
    /// Bytes one task moves per phase.
    pub fn bytes_per_task(&self) -> u64 {
        self.block * self.segments
    }
    /// Bytes all tasks move per phase.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_per_task() * self.tasks as u64
    }

    fn validate(&self) -> Result<()> {
        if self.xfer == 0 || self.block == 0 || self.segments == 0 || self.tasks == 0 {
            bail!("transfer size, block size, segments and tasks must all be positive");
        }
        if self.block % self.xfer != 0 {
            bail!("block size {} is not a multiple of transfer size {}", self.block, self.xfer);
        }
        if usize::try_from(self.xfer).is_err() {
            bail!("transfer size {} too large", self.xfer);
        }
        let total = (self.block as u128) * (self.segments as u128) * (self.tasks as u128);
        if total > u64::MAX as u128 / 2 {
            bail!("aggregate file size overflows");
        }
        Ok(())
    }

    /// Offsets of `task`'s transfers, in issue order, in its file (the shared file, or its own with -F).
    pub fn task_offsets(&self, task: usize, pattern: Pattern, seed: u64) -> Vec<u64> {
        let (t, b, n, k) = (self.xfer, self.block, self.tasks as u64, task as u64);
        let per_block = self.transfers_per_block();
        let mut out = Vec::with_capacity((per_block * self.segments) as usize);
        match (pattern, self.file_per_task) {
            (Pattern::Strided, false) => {
                for seg in 0..self.segments {
                    for i in 0..per_block {
                        out.push(seg * n * b + (i * n + k) * t);
                    }
                }
            }
            (Pattern::Strided, true) => {
                for i in 0..per_block {
                    for seg in 0..self.segments {
                        out.push(seg * b + i * t);
                    }
                }
            }
            (Pattern::Contiguous | Pattern::Random, fpp) => {
                for seg in 0..self.segments {
                    let base = if fpp { seg * b } else { (seg * n + k) * b };
                    for i in 0..per_block {
                        out.push(base + i * t);
                    }
                }
                if pattern == Pattern::Random {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    out.shuffle(&mut rng);
                }
            }
        }
        out
    }
}

/// The task whose data `task` reads: itself, or its successor with -C.
pub fn read_source(task: usize, tasks: usize, reorder: bool) -> usize {
    if reorder {
        (task + 1) % tasks
    } else {
        task
    }
}

/// The file `task` uses.
pub fn task_file(path: &str, task: usize, file_per_task: bool) -> String {
    if file_per_task {
        format!("{path}.{task:08}")
    } else {
        path.to_string()
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Fills `buf` with the verification pattern of file bytes `[offset, offset+len)` written by `task`:
/// each aligned 8-byte word of the file is a hash of (word index, task).
pub fn fill_pattern(buf: &mut [u8], offset: u64, task: usize) {
    let salt = (task as u64 + 1).wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let word = |x: u64| splitmix64((x / 8) ^ salt).to_le_bytes();
    // Unaligned head, then whole words, then the tail.
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    if head > 0 {
        let start = (offset % 8) as usize;
        buf[..head].copy_from_slice(&word(offset)[start..start + head]);
    }
    let mut x = offset + head as u64;
    let mut chunks = buf[head..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word(x));
        x += 8;
    }
    let tail = chunks.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&word(x)[..n]);
}

/// Checks data read at `offset` against `task`'s pattern; the error names the first bad byte.
pub fn check_pattern(data: &[u8], offset: u64, task: usize, scratch: &mut Vec<u8>) -> Result<()> {
    scratch.resize(data.len(), 0);
    fill_pattern(scratch, offset, task);
    if let Some(i) = data.iter().zip(scratch.iter()).position(|(a, b)| a != b) {
        bail!(
            "verification failed at file offset {} (transfer at {offset}, written by task {task}): read {:#04x}, expected {:#04x}",
            offset + i as u64,
            data[i],
            scratch[i]
        );
    }
    Ok(())
}

/// Everything a task needs to run a phase.
struct Work {
    geo: Geometry,
    path: String,
    pattern: Pattern,
    seed: u64,
    layout: Option<LayoutSpec>,
    fsync: bool,
    verify: bool,
    reorder: bool,
}

/// Instants of one task's phase.
#[derive(Clone, Copy, Debug)]
struct TaskTimes {
    start: Instant,
    opened: Instant,
    io_done: Instant,
    end: Instant,
}

async fn write_task<B: Backend>(
    b: Arc<B>,
    w: Arc<Work>,
    task: usize,
    start: Arc<Barrier>,
    created: Arc<Barrier>,
) -> Result<TaskTimes> {
    let offsets = w.geo.task_offsets(task, w.pattern, w.seed);
    let xfer = w.geo.xfer as usize;
    let fixed = Bytes::from(vec![0xA5u8; xfer]);
    let path = task_file(&w.path, task, w.geo.file_per_task);
    start.wait().await;
    let t0 = Instant::now();
    let file = if w.geo.file_per_task {
        b.create(&path, w.layout).await?
    } else if task == 0 {
        // One task creates the shared file; the others open it once it exists (as IOR's rank 0 does).
        let f = b.create(&path, w.layout).await;
        created.wait().await;
        f?
    } else {
        created.wait().await;
        b.open_write(&path).await?
    };
    let opened = Instant::now();
    for &off in &offsets {
        let data = if w.verify {
            let mut v = vec![0u8; xfer];
            fill_pattern(&mut v, off, task);
            Bytes::from(v)
        } else {
            fixed.clone()
        };
        b.write_at(&file, off, data).await.with_context(|| format!("task {task}: {path}"))?;
    }
    let io_done = Instant::now();
    if w.fsync {
        b.fsync(&file).await.with_context(|| format!("task {task}: {path}"))?;
    }
    b.close(file).await.with_context(|| format!("task {task}: {path}"))?;
    Ok(TaskTimes { start: t0, opened, io_done, end: Instant::now() })
}

async fn read_task<B: Backend>(b: Arc<B>, w: Arc<Work>, task: usize, start: Arc<Barrier>) -> Result<TaskTimes> {
    let src = read_source(task, w.geo.tasks, w.reorder);
    let offsets = w.geo.task_offsets(src, w.pattern, w.seed);
    let xfer = w.geo.xfer as usize;
    let path = task_file(&w.path, src, w.geo.file_per_task);
    let mut scratch = Vec::new();
    start.wait().await;
    let t0 = Instant::now();
    let file = b.open_read(&path).await?;
    let opened = Instant::now();
    for &off in &offsets {
        if w.verify {
            let data = b.read_at(&file, off, xfer).await.with_context(|| format!("task {task}: {path}"))?;
            check_pattern(&data, off, src, &mut scratch).with_context(|| format!("task {task}: {path}"))?;
        } else {
            b.read_pieces(&file, off, xfer).await.with_context(|| format!("task {task}: {path}"))?;
        }
    }
    let io_done = Instant::now();
    b.close(file).await.with_context(|| format!("task {task}: {path}"))?;
    Ok(TaskTimes { start: t0, opened, io_done, end: Instant::now() })
}

/// Runs one phase on all tasks and turns their instants into IOR's numbers. The first failing task
/// fails the phase (tasks stuck at a barrier are abandoned; the process exits).
async fn run_phase<B: Backend>(
    backends: &[Arc<B>],
    work: &Arc<Work>,
    write: bool,
    iteration: u32,
) -> Result<PhaseLine> {
    let n = backends.len();
    let start = Arc::new(Barrier::new(n));
    let created = Arc::new(Barrier::new(n));
    let mut pending = FuturesUnordered::new();
    for (task, b) in backends.iter().enumerate() {
        let (b, w, s, c) = (b.clone(), work.clone(), start.clone(), created.clone());
        let name = format!("ior-{task}");
        let rx = if write {
            B::spawn(name, write_task(b, w, task, s, c))?
        } else {
            B::spawn(name, read_task(b, w, task, s))?
        };
        pending.push(join(rx, "task"));
    }
    let mut times = Vec::with_capacity(n);
    while let Some(r) = pending.next().await {
        times
            .push(r.with_context(|| format!("{} phase, iteration {iteration}", if write { "write" } else { "read" }))?);
    }
    Ok(phase_line(&times, &work.geo, write, iteration))
}

fn phase_line(times: &[TaskTimes], geo: &Geometry, write: bool, iteration: u32) -> PhaseLine {
    let secs = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64();
    let first = times.iter().map(|t| t.start).min();
    let last = times.iter().map(|t| t.end).max();
    let total_s = match (first, last) {
        (Some(a), Some(b)) => secs(a, b),
        _ => 0.0,
    };
    let longest = |f: &dyn Fn(&TaskTimes) -> f64| times.iter().map(f).fold(0.0, f64::max);
    PhaseLine {
        access: if write { "write" } else { "read" },
        iteration,
        bytes: geo.total_bytes(),
        transfers: geo.total_bytes() / geo.xfer,
        block: geo.block,
        xfer: geo.xfer,
        open_s: longest(&|t| secs(t.start, t.opened)),
        io_s: longest(&|t| secs(t.opened, t.io_done)),
        close_s: longest(&|t| secs(t.io_done, t.end)),
        total_s,
    }
}

/// Validated parameters of a run.
struct Plan {
    args: IorArgs,
    geo: Geometry,
    write: bool,
    read: bool,
    layout: Option<LayoutSpec>,
}

fn plan(args: IorArgs) -> Result<Plan> {
    let geo = Geometry {
        xfer: args.xfer,
        block: args.block,
        segments: args.segments,
        tasks: args.tasks,
        file_per_task: args.file_per_task,
    };
    geo.validate()?;
    if args.iterations == 0 {
        bail!("iterations must be positive");
    }
    let (write, read) = if !args.write && !args.read { (true, true) } else { (args.write, args.read) };
    let layout = if args.stripe_size.is_some() || args.stripe_count.is_some() {
        let l = LayoutSpec { stripe_size: args.stripe_size, stripe_count: args.stripe_count, mirrors: None };
        l.validate()?;
        Some(l)
    } else {
        None
    };
    if args.api == Api::Posix && (layout.is_some() || args.cluster.job.is_some() || args.read_ahead || args.direct) {
        tracing::warn!("--stripe-size/--stripe-count/--job/--read-ahead/--direct only apply to -a tessera; ignored");
    }
    Ok(Plan { args, geo, write, read, layout })
}

/// Entry point of `tessera-bench ior`.
pub async fn run(args: IorArgs) -> Result<()> {
    let p = plan(args)?;
    match p.args.api {
        Api::Tessera => {
            let cfg = ClusterConfig::locate(p.args.cluster.config.as_deref())?;
            let mut backends = Vec::with_capacity(p.geo.tasks);
            for _ in 0..p.geo.tasks {
                let b = TesseraBackend::connect(&cfg, p.args.cluster.job.as_deref()).await?;
                backends.push(Arc::new(b.with_read_ahead(p.args.read_ahead).with_direct(p.args.direct)));
            }
            run_with(&p, &backends).await
        }
        Api::Posix => run_with(&p, &(0..p.geo.tasks).map(|_| Arc::new(PosixBackend)).collect::<Vec<_>>()).await,
    }
}

async fn run_with<B: Backend>(p: &Plan, backends: &[Arc<B>]) -> Result<()> {
    let a = &p.args;
    let b0 = &backends[0];
    let mut path = a.path.clone().unwrap_or_else(|| match a.api {
        Api::Tessera => "/testFile".into(),
        Api::Posix => "testFile".into(),
    });
    if b0.stat(&path).await.map(|m| m.is_dir).unwrap_or(false) {
        path = format!("{}/testFile", path.trim_end_matches('/'));
    }
    if p.write {
        if let Some(parent) = parent_dir(&path) {
            b0.mkdir_all(&parent).await?;
        }
    }
    let work = Arc::new(Work {
        geo: p.geo,
        path: path.clone(),
        pattern: a.pattern,
        seed: a.seed,
        layout: p.layout,
        fsync: a.fsync,
        verify: a.verify,
        reorder: a.reorder,
    });

    print_header(p, &path);
    let mut lines = Vec::new();
    for it in 0..a.iterations {
        if p.write {
            let l = run_phase(backends, &work, true, it).await?;
            println!("{}", report::format_phase(&l));
            lines.push(l);
        }
        if p.read {
            let l = run_phase(backends, &work, false, it).await?;
            println!("{}", report::format_phase(&l));
            lines.push(l);
        }
        // Only files this run wrote are removed; a read-only run never deletes its input.
        if p.write && !a.keep {
            let files = if p.geo.file_per_task { p.geo.tasks } else { 1 };
            for t in 0..files {
                b0.unlink(&task_file(&path, t, p.geo.file_per_task)).await?;
            }
        }
    }
    println!();
    print!("{}", report::format_summary(&lines));
    println!("Finished            : {}", now_string());

    if let Some(jp) = &a.cluster.json {
        let bws = |acc: &str| lines.iter().filter(|l| l.access == acc).map(PhaseLine::bw_mib).collect::<Vec<_>>();
        let (w, r) = (bws("write"), bws("read"));
        let j = IorJson {
            api: a.api.name().to_lowercase(),
            write_mib_s: report::Stats::of(&w).max,
            read_mib_s: report::Stats::of(&r).max,
            write_mib_s_all: w,
            read_mib_s_all: r,
            tasks: p.geo.tasks,
            transfer_size: p.geo.xfer,
            block_size: p.geo.block,
            segments: p.geo.segments,
            file_per_task: p.geo.file_per_task,
            fsync: a.fsync,
            iterations: a.iterations,
            total_bytes: p.geo.total_bytes(),
        };
        report::write_json(jp, &j)?;
    }
    Ok(())
}

fn now_string() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("{secs} (unix seconds)")
}

fn print_header(p: &Plan, path: &str) {
    let a = &p.args;
    let g = &p.geo;
    println!("tessera-bench ior: IOR-like parallel I/O benchmark");
    println!("Began               : {}", now_string());
    println!("Command line        : {}", std::env::args().collect::<Vec<_>>().join(" "));
    println!();
    println!("Options: ");
    println!("api                 : {}", a.api.name());
    println!("test filename       : {path}");
    println!("access              : {}", if g.file_per_task { "file-per-process" } else { "single-shared-file" });
    println!("pattern             : {}", format!("{:?}", a.pattern).to_lowercase());
    println!("type                : independent");
    println!("segments            : {}", g.segments);
    println!("ordering in a file  : {}", if a.pattern == Pattern::Random { "random offsets" } else { "sequential" });
    println!("ordering inter file : {}", if a.reorder { "constant task offset (1)" } else { "no tasks offsets" });
    println!("tasks               : {}", g.tasks);
    println!("repetitions         : {}", a.iterations);
    println!("xfersize            : {}", format_size(g.xfer));
    println!("blocksize           : {}", format_size(g.block));
    println!("aggregate filesize  : {}", format_size(g.total_bytes()));
    println!("fsync               : {}", if a.fsync { "yes" } else { "no" });
    println!("verify              : {}", if a.verify { "yes" } else { "no" });
    if let Some(l) = p.layout {
        let sz = l.stripe_size.map(format_size).unwrap_or_else(|| "default".into());
        let cnt = l.stripe_count.map(|c| c.to_string()).unwrap_or_else(|| "default".into());
        println!("layout              : stripe size {sz}, stripe count {cnt}");
    }
    if let Some(j) = &a.cluster.job {
        println!("job                 : {j}");
    }
    println!();
    println!("Results: ");
    println!();
    println!("{}", report::results_header());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(tasks: usize, fpp: bool) -> Geometry {
        Geometry { xfer: 4, block: 16, segments: 3, tasks, file_per_task: fpp }
    }

    /// Every byte of the shared file is covered by exactly one transfer of exactly one task.
    fn assert_exact_cover(g: Geometry, pattern: Pattern) {
        let size = g.total_bytes() as usize;
        let mut hits = vec![0u32; size];
        for task in 0..g.tasks {
            let offs = g.task_offsets(task, pattern, 7);
            assert_eq!(offs.len() as u64, g.bytes_per_task() / g.xfer);
            for o in offs {
                for h in &mut hits[o as usize..(o + g.xfer) as usize] {
                    *h += 1;
                }
            }
        }
        assert!(hits.iter().all(|&h| h == 1), "{pattern:?}: {hits:?}");
    }

    #[test]
    fn shared_file_written_exactly_once() {
        for p in [Pattern::Contiguous, Pattern::Strided, Pattern::Random] {
            for n in [1, 2, 3, 5] {
                assert_exact_cover(geo(n, false), p);
            }
        }
    }

    #[test]
    fn file_per_task_written_exactly_once() {
        for p in [Pattern::Contiguous, Pattern::Strided, Pattern::Random] {
            let g = geo(3, true);
            for task in 0..3 {
                let mut offs = g.task_offsets(task, p, 7);
                offs.sort_unstable();
                let want: Vec<u64> = (0..g.bytes_per_task() / g.xfer).map(|i| i * g.xfer).collect();
                assert_eq!(offs, want, "{p:?}");
            }
        }
    }

    #[test]
    fn segmented_layout_matches_ior() {
        let g = geo(2, false);
        // (segment * tasks + task) * block + i * xfer
        assert_eq!(g.task_offsets(1, Pattern::Contiguous, 0), vec![16, 20, 24, 28, 48, 52, 56, 60, 80, 84, 88, 92]);
        assert_eq!(g.task_offsets(1, Pattern::Strided, 0)[..4], [4, 12, 20, 28]);
        assert_eq!(geo(2, true).task_offsets(1, Pattern::Strided, 0)[..4], [0, 16, 32, 4]);
    }

    #[test]
    fn random_is_seeded_and_shuffled() {
        let g = Geometry { xfer: 1, block: 64, segments: 1, tasks: 2, file_per_task: false };
        let a = g.task_offsets(0, Pattern::Random, 3);
        assert_eq!(a, g.task_offsets(0, Pattern::Random, 3));
        assert_ne!(a, g.task_offsets(0, Pattern::Contiguous, 3));
        assert_ne!(a, g.task_offsets(0, Pattern::Random, 4));
    }

    #[test]
    fn reorder_shifts_tasks() {
        assert_eq!((0..4).map(|t| read_source(t, 4, true)).collect::<Vec<_>>(), vec![1, 2, 3, 0]);
        assert_eq!((0..4).map(|t| read_source(t, 4, false)).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(read_source(0, 1, true), 0);
        assert_eq!(task_file("/d/f", 3, true), "/d/f.00000003");
        assert_eq!(task_file("/d/f", 3, false), "/d/f");
    }

    #[test]
    fn pattern_is_position_and_task_dependent() {
        let mut whole = vec![0u8; 64];
        fill_pattern(&mut whole, 100, 2);
        let mut part = vec![0u8; 13];
        fill_pattern(&mut part, 105, 2);
        assert_eq!(&whole[5..18], &part[..]);
        let mut scratch = Vec::new();
        check_pattern(&whole, 100, 2, &mut scratch).unwrap();
        assert!(check_pattern(&whole, 100, 3, &mut scratch).is_err());
        assert!(check_pattern(&whole, 108, 2, &mut scratch).is_err());
        whole[40] ^= 1;
        let e = check_pattern(&whole, 100, 2, &mut scratch).unwrap_err().to_string();
        assert!(e.contains("offset 140"), "{e}");
    }

    #[test]
    fn geometry_validation() {
        assert!(Geometry { xfer: 3, block: 16, segments: 1, tasks: 1, file_per_task: false }.validate().is_err());
        assert!(Geometry { xfer: 0, block: 16, segments: 1, tasks: 1, file_per_task: false }.validate().is_err());
        assert!(Geometry { xfer: 4, block: 16, segments: 1, tasks: 0, file_per_task: false }.validate().is_err());
        assert!(geo(2, false).validate().is_ok());
    }

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        a: IorArgs,
    }

    fn parse(args: &[&str]) -> IorArgs {
        use clap::Parser;
        Cmd::try_parse_from(std::iter::once("ior").chain(args.iter().copied())).unwrap().a
    }

    #[test]
    fn option_letters() {
        let a =
            parse(&["-a", "posix", "-o", "/x", "-w", "-t", "1m", "-b", "16M", "-s", "2", "-F", "-e", "-C", "-N", "3"]);
        assert_eq!((a.api, a.path.as_deref(), a.write, a.read), (Api::Posix, Some("/x"), true, false));
        assert_eq!((a.xfer, a.block, a.segments, a.tasks), (1 << 20, 16 << 20, 2, 3));
        assert!(a.file_per_task && a.fsync && a.reorder && !a.keep && !a.read_ahead);
        assert!(parse(&["--read-ahead"]).read_ahead);
        assert!(parse(&["--direct"]).direct);
        let p = plan(parse(&["-S", "64k", "-c", "2", "--tasks", "2", "-i", "3", "-k"])).unwrap();
        assert!(p.write && p.read, "neither -w nor -r means both");
        assert_eq!(p.layout, Some(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: None }));
        assert_eq!((p.geo.tasks, p.args.iterations, p.args.keep), (2, 3, true));
        assert!(plan(parse(&["-S", "1000"])).is_err());
        assert!(plan(parse(&["-t", "3k", "-b", "1m"])).is_err());
    }

    #[test]
    fn posix_end_to_end_with_verify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/f").to_str().unwrap().to_string();
        let json = dir.path().join("r.json");
        let rt = tokio::runtime::Runtime::new().unwrap();
        for extra in
            [&[][..], &["-F", "-C"][..], &["--pattern", "strided", "-C"][..], &["--pattern", "random", "-s", "2"][..]]
        {
            let mut args =
                vec!["-a", "posix", "-o", &path, "-t", "4k", "-b", "64k", "-N", "3", "-e", "--verify", "-i", "2"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--json", json.to_str().unwrap()]);
            rt.block_on(run(parse(&args))).unwrap();
            let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(j["total_bytes"], 3 * 65536 * j["segments"].as_u64().unwrap());
            assert_eq!(j["write_mib_s_all"].as_array().unwrap().len(), 2);
            assert!(j["read_mib_s"].as_f64().unwrap() > 0.0);
            // Without -k the test files are gone.
            assert_eq!(std::fs::read_dir(dir.path().join("sub")).unwrap().count(), 0);
        }
        // Corrupted data fails verification.
        rt.block_on(run(parse(&["-a", "posix", "-o", &path, "-t", "4k", "-b", "64k", "-w", "-k", "--verify"])))
            .unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"zz", 5000).unwrap();
        let e = rt.block_on(run(parse(&["-a", "posix", "-o", &path, "-t", "4k", "-b", "64k", "-r", "--verify"])));
        assert!(format!("{:#}", e.unwrap_err()).contains("verification failed at file offset 500"));
        assert!(std::path::Path::new(&path).exists(), "a read-only run keeps its input");
    }
}
