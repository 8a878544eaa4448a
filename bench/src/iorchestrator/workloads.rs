//! The IOrchestrator paper's five benchmarks as access plans (per process, per I/O call, the file pieces
//! it accesses) and a runner that drives one or several programs concurrently, each with its own job id.
//!
//! Geometry decisions (the paper gives only the outline of each benchmark):
//! - mpi-io-test: 64 KiB segments; call c, process p accesses segment c*N+p (the N segments of a call are
//!   adjacent in a row).
//! - ior-mpi-io: process p owns bytes [p*B, (p+1)*B), B = size/N rounded down to 64 KiB, and walks it in
//!   64 KiB requests, one per call.
//! - noncontig: the file is a matrix of N columns, each `elmtcount` = 1024 ints (4 KiB) wide; process p
//!   reads its column row by row, one request per row (the non-contiguous file view). A call covers the
//!   paper's 8 MiB buffer across all processes: 8 MiB / (N * 4 KiB) rows per process.
//! - hpio: N columns of regions; a cell is `region_size` (64 KiB) of data followed by `region_spacing`
//!   (10 B) of gap; `region_count` rows (4096, fewer if the file is smaller). Call c: process p accesses
//!   region c of its column (so requests straddle stripe boundaries, as the 10 B spacing makes them).
//! - mpi-tile-io: a 1 x N grid of tiles 8 KiB wide whose neighbours overlap by 64 B; one tile row per call.
//!   Row r of tile p starts at (r*N + p) * 8128, so in file order every access overlaps the next (the
//!   neighbouring tile's, or the next row's first) by exactly 64 B.
//!
//! Collective I/O (`--collective`) follows ROMIO's two-phase scheme: the pieces of all processes in a call
//! are merged, the call's extent is split into N contiguous file domains, and each process accesses the
//! covered span of its domain as one request (data sieving over small holes). Collective calls synchronise
//! the processes, so collective implies a barrier.

use crate::backend::{parent_dir, ClusterArgs};
pub use crate::experiments::{Kind, Op};
use crate::report::mib_per_sec;
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::future::try_join_all;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_client::{Client, ClusterConfig, FileKind, LayoutSpec, OpenOptions};
use tessera_proto::units::{format_size, parse_size};
use tokio::sync::Barrier;

pub const SEGMENT: u64 = 64 << 10;
/// noncontig: ints per column row (1024 * 4 B = a 4 KiB column row).
pub const NONCONTIG_ELMTCOUNT: u64 = 1024;
/// noncontig: file bytes covered by one call of all processes (the paper's buffer size).
pub const NONCONTIG_CALL_BYTES: u64 = 8 << 20;
pub const HPIO_REGION_COUNT: u64 = 4096;
pub const HPIO_REGION_SPACING: u64 = 10;
pub const HPIO_REGION_SIZE: u64 = 64 << 10;
pub const TILE_BYTES: u64 = 8 << 10;
pub const TILE_OVERLAP: u64 = 64;
/// Stripe of the benchmark files: the paper's 64 KiB units over all data servers.
pub const STRIPE: u64 = 64 << 10;

/// One contiguous file access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub len: u64,
}

/// What a program does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub kind: Kind,
    pub procs: usize,
    pub file_size: u64,
    pub barrier: bool,
    pub collective: bool,
}

/// `calls[p][c]`: the pieces process p accesses, in order, in its call c. Every process has the same
/// number of calls (padded with empty calls) so barriers always match.
pub type Plan = Vec<Vec<Vec<Piece>>>;

impl Spec {
    /// Processes synchronise between calls.
    pub fn synchronised(&self) -> bool {
        self.barrier || self.collective
    }

    pub fn validate(&self) -> Result<()> {
        if self.procs == 0 {
            bail!("a program needs at least one process");
        }
        let min = self.procs as u64 * (64 << 10);
        if self.file_size < min {
            bail!("file size {} too small for {} processes (at least {})", self.file_size, self.procs, min);
        }
        Ok(())
    }

    /// The independent access plan.
    pub fn independent_plan(&self) -> Plan {
        let n = self.procs as u64;
        let size = self.file_size;
        let mut plan: Plan = vec![Vec::new(); self.procs];
        match self.kind {
            Kind::MpiIoTest => {
                let segs = size / SEGMENT;
                for c in 0..segs.div_ceil(n) {
                    for (p, calls) in plan.iter_mut().enumerate() {
                        let s = c * n + p as u64;
                        calls.push(if s < segs { vec![Piece { offset: s * SEGMENT, len: SEGMENT }] } else { vec![] });
                    }
                }
            }
            Kind::IorMpiIo => {
                let block = size / n / SEGMENT * SEGMENT;
                for (p, calls) in plan.iter_mut().enumerate() {
                    for c in 0..block / SEGMENT {
                        calls.push(vec![Piece { offset: p as u64 * block + c * SEGMENT, len: SEGMENT }]);
                    }
                }
            }
            Kind::Noncontig => {
                let w = NONCONTIG_ELMTCOUNT * 4;
                let rows = size / (n * w);
                let per_call = (NONCONTIG_CALL_BYTES / (n * w)).max(1);
                for (p, calls) in plan.iter_mut().enumerate() {
                    let mut r = 0;
                    while r < rows {
                        let end = (r + per_call).min(rows);
                        calls.push((r..end).map(|row| Piece { offset: (row * n + p as u64) * w, len: w }).collect());
                        r = end;
                    }
                }
            }
            Kind::Hpio => {
                let cell = HPIO_REGION_SIZE + HPIO_REGION_SPACING;
                let rows = (size / (n * cell)).min(HPIO_REGION_COUNT);
                for (p, calls) in plan.iter_mut().enumerate() {
                    for r in 0..rows {
                        calls.push(vec![Piece { offset: (r * n + p as u64) * cell, len: HPIO_REGION_SIZE }]);
                    }
                }
            }
            Kind::MpiTileIo => {
                let step = TILE_BYTES - TILE_OVERLAP;
                let row = n * step;
                let rows = size.saturating_sub(TILE_OVERLAP) / row;
                for (p, calls) in plan.iter_mut().enumerate() {
                    for r in 0..rows {
                        calls.push(vec![Piece { offset: (r * n + p as u64) * step, len: TILE_BYTES }]);
                    }
                }
            }
        }
        pad(&mut plan);
        plan
    }

    /// The plan as the program runs it (collective: two-phase aggregated).
    pub fn plan(&self) -> Plan {
        let ind = self.independent_plan();
        if self.collective {
            collective(&ind)
        } else {
            ind
        }
    }
}

fn pad(plan: &mut Plan) {
    let calls = plan.iter().map(Vec::len).max().unwrap_or(0);
    for p in plan.iter_mut() {
        p.resize(calls, Vec::new());
    }
}

/// Merges sorted, possibly overlapping or touching pieces into disjoint runs.
pub fn merge_runs(mut pieces: Vec<Piece>) -> Vec<Piece> {
    pieces.sort_by_key(|p| p.offset);
    let mut out: Vec<Piece> = Vec::with_capacity(pieces.len());
    for p in pieces.into_iter().filter(|p| p.len > 0) {
        match out.last_mut() {
            Some(last) if p.offset <= last.offset + last.len => {
                let end = (last.offset + last.len).max(p.offset + p.len);
                last.len = end - last.offset;
            }
            _ => out.push(p),
        }
    }
    out
}

/// ROMIO two-phase: each call's pieces of all processes are split into N contiguous file domains;
/// process p accesses the covered span of domain p as one request.
pub fn collective(ind: &Plan) -> Plan {
    let n = ind.len();
    let calls = ind.first().map(Vec::len).unwrap_or(0);
    let mut plan: Plan = vec![Vec::with_capacity(calls); n];
    for c in 0..calls {
        let runs = merge_runs(ind.iter().flat_map(|p| p[c].iter().copied()).collect());
        let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
            plan.iter_mut().for_each(|p| p.push(Vec::new()));
            continue;
        };
        let (lo, hi) = (first.offset, last.offset + last.len);
        let dom = (hi - lo).div_ceil(n as u64);
        for (p, calls) in plan.iter_mut().enumerate() {
            let (d0, d1) = ((lo + p as u64 * dom).min(hi), (lo + (p as u64 + 1) * dom).min(hi));
            let covered: Vec<(u64, u64)> =
                runs.iter().map(|r| (r.offset.max(d0), (r.offset + r.len).min(d1))).filter(|(a, b)| a < b).collect();
            calls.push(match (covered.first(), covered.last()) {
                (Some(&(a, _)), Some(&(_, b))) => vec![Piece { offset: a, len: b - a }],
                _ => Vec::new(),
            });
        }
    }
    plan
}

/// When a run stops (whichever comes first); none = the whole plan.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limit {
    pub time: Option<Duration>,
    /// Bytes per program.
    pub bytes: Option<u64>,
}

/// Truncates a plan so the program moves at most `bytes` (whole calls).
fn truncate_plan(plan: &mut Plan, bytes: u64) {
    let calls = plan.first().map(Vec::len).unwrap_or(0);
    let mut total = 0;
    for c in 0..calls {
        if total >= bytes {
            plan.iter_mut().for_each(|p| p.truncate(c));
            return;
        }
        total += plan.iter().flat_map(|p| p[c].iter()).map(|x| x.len).sum::<u64>();
    }
}

/// One program of a run.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    pub client: Client,
    pub path: String,
    pub spec: Spec,
}

/// What one program achieved.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramResult {
    pub name: String,
    pub job: String,
    pub bytes: u64,
    pub secs: f64,
}

impl ProgramResult {
    pub fn mib_s(&self) -> f64 {
        mib_per_sec(self.bytes, self.secs)
    }
}

/// All programs of a run plus the system view.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    pub programs: Vec<ProgramResult>,
    /// From the common start to the end of the last program.
    pub secs: f64,
}

impl RunResult {
    pub fn total_bytes(&self) -> u64 {
        self.programs.iter().map(|p| p.bytes).sum()
    }
    pub fn system_mib_s(&self) -> f64 {
        mib_per_sec(self.total_bytes(), self.secs)
    }
}

/// Runs `programs` concurrently: every process opens its file, all start together, each stops at the
/// limit. A failing process fails the run.
pub async fn run_programs(programs: &[Program], op: Op, limit: Limit) -> Result<RunResult> {
    let total_procs: usize = programs.iter().map(|p| p.spec.procs).sum();
    let start = Arc::new(Barrier::new(total_procs));
    let mut futs = Vec::new();
    for prog in programs {
        prog.spec.validate()?;
        let mut plan = prog.spec.plan();
        if let Some(b) = limit.bytes {
            truncate_plan(&mut plan, b);
        }
        let prog = prog.clone();
        let start = start.clone();
        futs.push(tokio::spawn(async move {
            let name = prog.name.clone();
            run_one(prog, plan, op, limit.time, start).await.with_context(|| format!("program {name}"))
        }));
    }
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut first_err = None;
    for f in futs {
        match f.await {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(anyhow::anyhow!("program task failed: {e}"));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let starts: Vec<Instant> = results.iter().map(|r| r.1).collect();
    let common = starts.iter().min().copied().unwrap_or(t0);
    let end = results.iter().map(|r| r.2).max().unwrap_or(common);
    Ok(RunResult {
        programs: results.into_iter().map(|r| r.0).collect(),
        secs: end.saturating_duration_since(common).as_secs_f64(),
    })
}

/// One program: its processes as concurrent futures; returns its result, start and end.
async fn run_one(
    prog: Program,
    plan: Plan,
    op: Op,
    time: Option<Duration>,
    start: Arc<Barrier>,
) -> Result<(ProgramResult, Instant, Instant)> {
    let n = plan.len();
    let sync = Arc::new(Barrier::new(n));
    let stop_call = Arc::new(AtomicU64::new(u64::MAX));
    let t_start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let max_len = plan.iter().flatten().flatten().map(|p| p.len).max().unwrap_or(0) as usize;
    let filler = Bytes::from(vec![0x5Au8; max_len]);
    let procs = plan.into_iter().enumerate().map(|(p, calls)| {
        let (client, path) = (prog.client.clone(), prog.path.clone());
        let (sync, stop_call, start, t_start, filler) =
            (sync.clone(), stop_call.clone(), start.clone(), t_start.clone(), filler.clone());
        let synced = prog.spec.synchronised();
        async move {
            let opts = match op {
                Op::Read => OpenOptions::read_only(),
                Op::Write => OpenOptions { write: true, ..Default::default() },
            };
            let f = client.open(&path, opts).await.with_context(|| format!("process {p}: open {path}"))?;
            start.wait().await;
            let t0 = *t_start.get_or_init(Instant::now);
            let deadline = time.map(|t| t0 + t);
            let mut bytes = 0u64;
            for (c, call) in calls.iter().enumerate() {
                let late = deadline.is_some_and(|d| Instant::now() >= d);
                if synced {
                    // Everyone agrees at the barrier on the first call not to run (see module docs).
                    if late {
                        stop_call.fetch_min(c as u64, Ordering::AcqRel);
                    }
                    sync.wait().await;
                    if c as u64 >= stop_call.load(Ordering::Acquire) {
                        break;
                    }
                } else if late {
                    break;
                }
                for piece in call {
                    match op {
                        Op::Read => {
                            let d = f
                                .read_at(piece.offset, piece.len)
                                .await
                                .with_context(|| format!("process {p}: read {} at {}", piece.len, piece.offset))?;
                            if d.len() as u64 != piece.len {
                                bail!(
                                    "process {p}: short read at {} ({} of {} bytes)",
                                    piece.offset,
                                    d.len(),
                                    piece.len
                                );
                            }
                        }
                        Op::Write => f
                            .write_at(piece.offset, filler.slice(..piece.len as usize))
                            .await
                            .with_context(|| format!("process {p}: write {} at {}", piece.len, piece.offset))?,
                    }
                    bytes += piece.len;
                }
            }
            let end = Instant::now();
            f.close().await.with_context(|| format!("process {p}: close {path}"))?;
            Ok::<(u64, Instant), anyhow::Error>((bytes, end))
        }
    });
    let done = try_join_all(procs).await?;
    let t0 = t_start.get().copied().unwrap_or_else(Instant::now);
    let end = done.iter().map(|d| d.1).max().unwrap_or(t0);
    let bytes = done.iter().map(|d| d.0).sum();
    let secs = end.saturating_duration_since(t0).as_secs_f64();
    let _ = n;
    Ok((ProgramResult { name: prog.name, job: prog.client.job().to_string(), bytes, secs }, t0, end))
}

/// Creates `path` (64 KiB stripes over all servers) and fills it to `size`, unless it already has that size.
pub async fn prepare_file(client: &Client, path: &str, size: u64) -> Result<()> {
    if let Ok(a) = client.stat(path).await {
        if a.kind == FileKind::File && a.size >= size {
            return Ok(());
        }
        client.unlink(path).await.with_context(|| format!("removing the short {path}"))?;
    }
    if let Some(parent) = parent_dir(path) {
        client.mkdir_all(&parent, 0o755).await?;
    }
    let layout = LayoutSpec { stripe_size: Some(STRIPE), stripe_count: Some(0), mirrors: None };
    let f = client.create(path, 0o644, Some(layout)).await.with_context(|| format!("create {path}"))?;
    const CHUNK: u64 = 4 << 20;
    let buf = Bytes::from(vec![0xC3u8; CHUNK as usize]);
    let offsets: Vec<u64> = (0..size.div_ceil(CHUNK)).map(|i| i * CHUNK).collect();
    // A few chunks in flight, in file order, so objects fill sequentially.
    for group in offsets.chunks(4) {
        try_join_all(group.iter().map(|&o| {
            let len = CHUNK.min(size - o) as usize;
            f.write_at(o, buf.slice(..len))
        }))
        .await
        .with_context(|| format!("filling {path}"))?;
    }
    f.fsync().await.with_context(|| format!("fsync {path}"))?;
    f.close().await.with_context(|| format!("close {path}"))?;
    Ok(())
}

/// `tessera-bench workload NAME ...`
#[derive(clap::Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Benchmark.
    #[arg(value_enum)]
    pub name: Kind,
    /// Processes (concurrent workers, one outstanding request each).
    #[arg(short = 'n', long, default_value_t = 5)]
    pub procs: usize,
    #[arg(long, value_enum, default_value = "read")]
    pub op: Op,
    /// All processes synchronise between I/O calls.
    #[arg(long)]
    pub barrier: bool,
    /// Collective I/O (two-phase aggregation; implies synchronisation).
    #[arg(long)]
    pub collective: bool,
    /// File size (prepared first if it does not exist with this size).
    #[arg(long, value_parser = parse_size, default_value = "1g")]
    pub size: u64,
    /// Stop after this many seconds.
    #[arg(long)]
    pub time: Option<f64>,
    /// Stop after this many bytes.
    #[arg(long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// File in the Tessera namespace.
    #[arg(long, default_value = "/iorch/workload.dat")]
    pub file: String,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(serde::Serialize)]
struct WorkloadJson<'a> {
    benchmark: &'a str,
    op: &'a str,
    procs: usize,
    barrier: bool,
    collective: bool,
    bytes: u64,
    secs: f64,
    throughput_mib_s: f64,
}

pub fn limit_of(time: Option<f64>, bytes: Option<u64>) -> Result<Limit> {
    let time = match time {
        Some(t) if !(t > 0.0 && t.is_finite()) => bail!("--time must be a positive number of seconds"),
        Some(t) => Some(Duration::from_secs_f64(t)),
        None => None,
    };
    Ok(Limit { time, bytes })
}

/// Entry point of `tessera-bench workload`.
pub async fn run(a: WorkloadArgs) -> Result<()> {
    let spec = Spec { kind: a.name, procs: a.procs, file_size: a.size, barrier: a.barrier, collective: a.collective };
    spec.validate()?;
    let limit = limit_of(a.time, a.bytes)?;
    let cfg = ClusterConfig::locate(a.cluster.config.as_deref())?;
    let job = a.cluster.job.clone().unwrap_or_else(|| format!("{}-{}", a.name.label(), std::process::id()));
    let client = Client::connect(&cfg).await.context("connecting to the Tessera cluster")?.with_job(job);
    println!("preparing {} ({})", a.file, format_size(a.size));
    prepare_file(&client, &a.file, a.size).await?;
    let prog = Program { name: a.name.label().to_string(), client, path: a.file.clone(), spec };
    let r = run_programs(&[prog], a.op, limit).await?;
    let p = &r.programs[0];
    println!(
        "{} {} procs={} barrier={} collective={}: {} in {:.2} s = {:.2} MiB/s (job {})",
        p.name,
        a.op.as_str(),
        a.procs,
        a.barrier,
        a.collective,
        format_size(p.bytes),
        p.secs,
        p.mib_s(),
        p.job
    );
    if let Some(j) = &a.cluster.json {
        crate::report::write_json(
            j,
            &WorkloadJson {
                benchmark: &p.name,
                op: a.op.as_str(),
                procs: a.procs,
                barrier: a.barrier,
                collective: a.collective,
                bytes: p.bytes,
                secs: p.secs,
                throughput_mib_s: p.mib_s(),
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: Kind, size: u64) -> Spec {
        Spec { kind, procs: 5, file_size: size, barrier: true, collective: false }
    }

    fn all_pieces(plan: &Plan) -> Vec<Piece> {
        plan.iter().flatten().flatten().copied().collect()
    }

    #[test]
    fn plans_are_padded_and_in_bounds() {
        for kind in Kind::ALL {
            for size in [5 << 16, (7 << 20) + 12345, 64 << 20] {
                for collective in [false, true] {
                    let s = Spec { collective, ..spec(kind, size) };
                    let plan = s.plan();
                    assert_eq!(plan.len(), 5);
                    assert!(plan.iter().all(|p| p.len() == plan[0].len()), "{kind:?}");
                    assert!(all_pieces(&plan).iter().all(|p| p.len > 0 && p.offset + p.len <= size), "{kind:?}");
                }
            }
        }
    }

    #[test]
    fn mpi_io_test_segments_adjacent_in_a_row() {
        let plan = spec(Kind::MpiIoTest, 10 * SEGMENT + 100).plan();
        assert_eq!(plan[0].len(), 2);
        for (p, calls) in plan.iter().enumerate() {
            for (c, call) in calls.iter().enumerate() {
                assert_eq!(*call, vec![Piece { offset: (c as u64 * 5 + p as u64) * SEGMENT, len: SEGMENT }]);
            }
        }
        // A last partial row pads the missing processes with empty calls.
        let plan = spec(Kind::MpiIoTest, 7 * SEGMENT).plan();
        assert_eq!(plan[1][1], vec![Piece { offset: 6 * SEGMENT, len: SEGMENT }]);
        assert!(plan[2][1].is_empty());
    }

    #[test]
    fn ior_mpi_io_each_owns_a_fifth() {
        let size = 5 * 8 * SEGMENT;
        let plan = spec(Kind::IorMpiIo, size).plan();
        for (p, calls) in plan.iter().enumerate() {
            let offs: Vec<u64> = calls.iter().flatten().map(|x| x.offset).collect();
            let want: Vec<u64> = (0..8).map(|c| p as u64 * 8 * SEGMENT + c * SEGMENT).collect();
            assert_eq!(offs, want);
        }
    }

    #[test]
    fn noncontig_reads_its_column_row_by_row() {
        let w = NONCONTIG_ELMTCOUNT * 4;
        assert_eq!(w, 4096);
        let size = 5 * w * 1000;
        let plan = spec(Kind::Noncontig, size).plan();
        let per_call = NONCONTIG_CALL_BYTES / (5 * w);
        assert_eq!(plan[0][0].len() as u64, per_call);
        for (p, calls) in plan.iter().enumerate() {
            let pieces: Vec<Piece> = calls.iter().flatten().copied().collect();
            assert_eq!(pieces.len(), 1000);
            for (r, x) in pieces.iter().enumerate() {
                assert_eq!(*x, Piece { offset: (r as u64 * 5 + p as u64) * w, len: w });
            }
        }
    }

    #[test]
    fn hpio_columns_with_spacing() {
        let cell = HPIO_REGION_SIZE + HPIO_REGION_SPACING;
        let plan = spec(Kind::Hpio, 5 * cell * 3).plan();
        assert_eq!(plan[0].len(), 3);
        assert_eq!(plan[2][1], vec![Piece { offset: (5 + 2) * cell, len: HPIO_REGION_SIZE }]);
        // Neighbouring regions in a row are 10 bytes apart.
        let (a, b) = (plan[0][0][0], plan[1][0][0]);
        assert_eq!(b.offset - (a.offset + a.len), HPIO_REGION_SPACING);
        // The region count is capped at 4096 rows.
        let big = spec(Kind::Hpio, 5 * cell * 5000).plan();
        assert_eq!(big[0].len() as u64, HPIO_REGION_COUNT);
    }

    #[test]
    fn tiles_overlap_by_64_bytes() {
        let plan = spec(Kind::MpiTileIo, 1 << 20).plan();
        let mut pieces = all_pieces(&plan);
        pieces.sort_by_key(|p| p.offset);
        assert!(pieces.iter().all(|p| p.len == TILE_BYTES));
        for w in pieces.windows(2) {
            assert_eq!(w[0].offset + w[0].len - w[1].offset, TILE_OVERLAP, "{w:?}");
        }
        // Within a call, the processes' tiles are neighbours.
        assert_eq!(plan[1][0][0].offset, TILE_BYTES - TILE_OVERLAP);
    }

    #[test]
    fn collective_aggregates_into_contiguous_domains() {
        // mpi-io-test: each call's 5 adjacent segments become 5 equal contiguous domains.
        let s = Spec { collective: true, ..spec(Kind::MpiIoTest, 10 * SEGMENT) };
        let plan = s.plan();
        assert_eq!(plan[3][1], vec![Piece { offset: 5 * SEGMENT + 3 * SEGMENT, len: SEGMENT }]);
        // noncontig: a call's rows of all columns are one contiguous extent, split in 5 large requests.
        let w = NONCONTIG_ELMTCOUNT * 4;
        let s = Spec { collective: true, ..spec(Kind::Noncontig, 5 * w * 1000) };
        let ind = Spec { collective: false, ..s }.plan();
        let plan = s.plan();
        let per_call = NONCONTIG_CALL_BYTES / (5 * w);
        for calls in &plan {
            assert_eq!(calls[0].len(), 1);
        }
        let total: u64 = (0..5).map(|p| plan[p][0][0].len).sum();
        assert_eq!(total, per_call * 5 * w);
        assert_eq!(plan[0][0][0].offset, 0);
        for p in 0..4 {
            assert_eq!(plan[p][0][0].offset + plan[p][0][0].len, plan[p + 1][0][0].offset);
        }
        assert_eq!(ind[0].len(), plan[0].len());
        assert!(s.synchronised());
    }

    #[test]
    fn merging_and_truncation() {
        let r = merge_runs(vec![
            Piece { offset: 10, len: 5 },
            Piece { offset: 0, len: 10 },
            Piece { offset: 20, len: 1 },
            Piece { offset: 12, len: 1 },
        ]);
        assert_eq!(r, vec![Piece { offset: 0, len: 15 }, Piece { offset: 20, len: 1 }]);
        let mut plan = spec(Kind::MpiIoTest, 20 * SEGMENT).plan();
        truncate_plan(&mut plan, 6 * SEGMENT);
        assert_eq!(plan[0].len(), 2, "whole calls until the limit is reached");
    }

    #[test]
    fn limits_parse() {
        assert_eq!(limit_of(Some(1.5), None).unwrap().time, Some(Duration::from_millis(1500)));
        assert!(limit_of(Some(0.0), None).is_err());
        assert!(limit_of(Some(f64::NAN), None).is_err());
        assert_eq!(limit_of(None, Some(7)).unwrap(), Limit { time: None, bytes: Some(7) });
    }
}
