//! `tessera-bench experiment placement-tarazu`: the Tarazu paper's placement comparison scaled to this
//! machine (spec: `../shared/specs/placement.md`, paper: `../shared/papers/tarazu2024-load-balanced-placement.txt`).
//!
//! 7 data servers × 5 storage targets of equal configured capacity (the paper's 35 OSTs of 10 GB), the
//! hdd device model per target; each workload writes the same fraction of the cluster as in the paper,
//! then reads everything back; under `round-robin`, `lustre` and `balanced`, on an empty cluster and on
//! one pre-filled unevenly (targets at 10–60%, as a long-used system). Every job declares its files
//! first (name, expected size, stripe count), as Tarazu's predictor would; policies that do not use sizes
//! ignore the declaration.
//!
//! OST cost = max utilisation / mean utilisation over the targets. Two are recorded: `ost_cost`, of the
//! targets' whole use after the run (what a long-used system balances; on an empty cluster it is the
//! workload's alone), and `ost_cost_workload`, of the bytes the workload added.
//!
//! Composite (PFL) layouts: IOR file-per-process with the paper's Config 1 `[0,128M):1 [128M,512M):3
//! [512M,2G):8 [2G,EOF):16` and Config 2 `[0,128M):1 [128M,2G):12 [2G,EOF):32` (Table 8), and IOR shared
//! file with Config 1; the extent boundaries are scaled like the data (the paper's 10 GB target is
//! `--file-size` here), rounded to whole stripes. The layout is set on the job's directory (`setstripe -E`);
//! the files are declared with their whole size, so the MDS places every extent they will reach in the
//! declaration's batch and instantiates each on its planned targets when the files reach it.

use crate::experiments::{write_outputs, ExperimentArgs};
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::plots::{grouped_bars, BarPanel};
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_client::Client;
use tessera_proto::config::DeviceKind;
use tessera_proto::layout::{ExtentSpec, LayoutSpec, EOF};
use tessera_proto::msg::ost_cost;
use tessera_proto::units::format_size;

pub const NAME: &str = "placement-tarazu";
const SERVERS: usize = 7;
const TARGETS: u16 = 5;
const POLICIES: [&str; 3] = ["round-robin", "lustre", "balanced"];
/// Stripe size: Lustre's 1 MiB scaled like the capacities would make it tiny; 256 KiB keeps requests
/// realistic while a file still spans several stripe rows.
const STRIPE: u64 = 256 << 10;
/// The paper's target: 10 GB; its workloads' sizes are fractions of 35 of them.
const PAPER_TARGET_GB: f64 = 10.0;

/// One line of placement-tarazu.json.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TarazuRecord {
    pub workload: String,
    pub policy: String,
    pub prefill: String,
    pub ost_cost: f64,
    pub ost_cost_workload: f64,
    pub write_mib_s: f64,
    pub read_mib_s: f64,
    pub device_model: String,
    pub runs: u32,
    /// Utilisation of each target after the run (median run), server-major.
    pub utilisation: Vec<f64>,
}

/// One job of a workload: `files` files of `file_size` bytes with `count` stripes, written by one task each
/// (or, `shared`, one file written by `tasks` tasks in interleaved blocks).
#[derive(Clone, Debug)]
struct Job {
    name: &'static str,
    files: usize,
    file_size: u64,
    count: u32,
    shared_tasks: usize,
    /// HACC-I/O: each file holds 9 variables one after the other.
    hacc: bool,
    /// A composite layout (set on the job's own directory) instead of `count` stripes.
    composite: Option<Vec<ExtentSpec>>,
}

#[derive(Clone, Debug)]
struct Workload {
    name: &'static str,
    jobs: Vec<Job>,
}

/// The spec's workloads, with the paper's data volume expressed as a fraction of its 350 GB.
fn workloads(target_capacity: u64) -> Vec<Workload> {
    let scale = |paper_gb: f64| (paper_gb / (PAPER_TARGET_GB * 35.0) * 35.0 * target_capacity as f64) as u64;
    // IOR's blocks are whole rows of stripes (the stripe size times the count): every object of a file the
    // same size, as the paper's 1 MiB transfers over 1 MiB stripes are.
    let per = |total: u64, n: usize| (total / n as u64) / (STRIPE * 8) * (STRIPE * 8);
    let ior = |gb: f64| Job {
        name: "ior",
        files: 16,
        file_size: per(scale(gb), 16),
        count: 8,
        shared_tasks: 0,
        hacc: false,
        composite: None,
    };
    // PFL configurations (paper Table 8): (end in paper GB, count); the boundaries scaled like the data.
    let pfl = |extents: &[(f64, u32)]| {
        let specs: Vec<ExtentSpec> = extents
            .iter()
            .map(|&(gb, c)| ExtentSpec {
                end: if gb.is_infinite() { EOF } else { (scale(gb) / STRIPE).max(1) * STRIPE },
                stripe_size: Some(STRIPE),
                stripe_count: Some(c),
                mirrors: None,
            })
            .collect();
        Some(specs)
    };
    let config1 = pfl(&[(0.125, 1), (0.5, 3), (2.0, 8), (f64::INFINITY, 16)]);
    let config2 = pfl(&[(0.125, 1), (2.0, 12), (f64::INFINITY, 32)]);
    // HACC-I/O: 16 processes, ~38 bytes per particle in 9 variables; as much data as IOR 32 GB.
    let particles = per(scale(32.0), 16) / HACC_PARTICLE_BYTES;
    let hacc = Job {
        name: "hacc",
        files: 16,
        file_size: particles * HACC_PARTICLE_BYTES,
        count: 8,
        shared_tasks: 0,
        hacc: true,
        composite: None,
    };
    // IOR shared file: four runs of IOR, each one file written by 16 tasks.
    let shared = Job {
        name: "ior-shared",
        files: 4,
        file_size: per(scale(32.0), 4),
        count: 8,
        shared_tasks: 16,
        hacc: false,
        composite: None,
    };
    let composite =
        |job: Job, name: &'static str, c: &Option<Vec<ExtentSpec>>| Job { name, composite: c.clone(), ..job };
    vec![
        Workload { name: "ior-fpp-32g", jobs: vec![ior(32.0)] },
        Workload { name: "ior-fpp-128g", jobs: vec![ior(128.0)] },
        Workload { name: "ior-fpp-32g-pfl1", jobs: vec![composite(ior(32.0), "ior-pfl1", &config1)] },
        Workload { name: "ior-fpp-32g-pfl2", jobs: vec![composite(ior(32.0), "ior-pfl2", &config2)] },
        Workload { name: "hacc-io", jobs: vec![hacc.clone()] },
        Workload { name: "ior-shared", jobs: vec![shared.clone()] },
        Workload { name: "ior-shared-pfl1", jobs: vec![composite(shared, "ior-shared-pfl1", &config1)] },
        Workload { name: "ior+hacc", jobs: vec![ior(32.0), hacc] },
    ]
}

/// Writes sparse "old" objects into each target's store before the servers start: target k of the
/// cluster at 10% + 50% × (its rank in a fixed shuffle) / 34 of `capacity`.
fn prefill(lc_dir: &Path, capacity: u64) -> Result<Vec<u64>> {
    let n = SERVERS * usize::from(TARGETS);
    // A fixed permutation (multiplicative, 13 coprime with 35).
    let levels: Vec<u64> =
        (0..n).map(|k| ((0.10 + 0.50 * ((k * 13) % n) as f64 / (n - 1) as f64) * capacity as f64) as u64).collect();
    for ds in 0..SERVERS {
        for t in 0..TARGETS {
            let k = ds * usize::from(TARGETS) + usize::from(t);
            let root = match t {
                0 => lc_dir.join(format!("ds{ds}")),
                t => lc_dir.join(format!("ds{ds}")).join(format!("target{t}")),
            };
            // An id far above anything the MDS hands out, in this target; shard by its low byte.
            let id = tessera_proto::object_in(t, 0xffff_ff00_0000 | k as u64);
            let dir = root.join("objects").join(format!("{:02x}", id & 0xff));
            std::fs::create_dir_all(&dir)?;
            let f = std::fs::File::create(dir.join(format!("{id:016x}")))?;
            f.set_len(levels[k])?;
        }
    }
    Ok(levels)
}

/// Per-target used bytes, server-major, as the latest reports give them.
async fn used(admin: &Client) -> Result<Vec<(u64, u64)>> {
    let mut status = admin.cluster_status().await.map_err(|e| anyhow!("{e}"))?;
    status.sort_by_key(|s| s.ds);
    Ok(status.iter().flat_map(|s| s.target_reports()).map(|t| (t.used, t.capacity)).collect())
}

/// Waits until two reports after `since` have come from every server (what was written is counted).
async fn settle(admin: &Client, expect_targets: usize) -> Result<Vec<(u64, u64)>> {
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let u = used(admin).await?;
    if u.len() != expect_targets {
        return Err(anyhow!("{} targets reported, {expect_targets} expected", u.len()));
    }
    Ok(u)
}

const XFER: u64 = 1 << 20;
/// HACC-I/O's particle: x, y, z, vx, vy, vz, phi (f32), pid (i64), mask (u16).
const HACC_VARIABLES: [u64; 9] = [4, 4, 4, 4, 4, 4, 4, 8, 2];
const HACC_PARTICLE_BYTES: u64 = 38;

/// The (offset, length) pieces a task writes its file in: HACC-I/O each of its 9 variables' arrays one
/// after the other in transfers of at most [`XFER`], the others the file in transfers of [`XFER`].
fn pieces(job: &Job) -> Vec<(u64, u64)> {
    let spans: Vec<(u64, u64)> = match job.hacc {
        true => {
            let n = job.file_size / HACC_PARTICLE_BYTES;
            let mut at = 0;
            HACC_VARIABLES
                .iter()
                .map(|b| {
                    let span = (at, n * b);
                    at += n * b;
                    span
                })
                .collect()
        }
        false => vec![(0, job.file_size)],
    };
    let mut out = Vec::new();
    for (start, len) in spans {
        let mut off = 0;
        while off < len {
            let l = XFER.min(len - off);
            out.push((start + off, l));
            off += l;
        }
    }
    out
}

/// `len` pseudo-random bytes (xorshift from `seed`): data no layer can compress or deduplicate.
pub fn pattern(len: usize, seed: u64) -> Bytes {
    let mut v = vec![0u8; len];
    let mut x = seed | 1;
    for chunk in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (b, s) in chunk.iter_mut().zip(x.to_le_bytes()) {
            *b = s;
        }
    }
    Bytes::from(v)
}

/// The directory of a job's files: the run's, or for a composite layout the job's own (which holds it).
fn job_dir(job: &Job, run_dir: &str) -> String {
    match job.composite {
        Some(_) => format!("{run_dir}/{}.d", job.name),
        None => run_dir.to_string(),
    }
}

/// The paths of a job's files.
fn paths(job: &Job, run_dir: &str) -> Vec<String> {
    (0..job.files).map(|i| format!("{}/{}.{i:04}", job_dir(job, run_dir), job.name)).collect()
}

/// Writes every job's files (all at once), returns the bytes written.
async fn write_jobs(client: &Client, jobs: &[Job], run_dir: &str) -> Result<u64> {
    let mut tasks = Vec::new();
    for job in jobs {
        // A composite job's directory carries its layout; its files are declared with their whole size
        // and the directory's layout (no count of their own): the MDS places every extent that size
        // reaches in the declaration's batch, and uses it as the files reach each extent.
        let (declared_size, declared_count) = match &job.composite {
            Some(specs) => {
                let dir = job_dir(job, run_dir);
                client.mkdir_all(&dir, 0o755).await.map_err(|e| anyhow!("{dir}: {e}"))?;
                client.set_composite_layout(&dir, specs.clone()).await.map_err(|e| anyhow!("{dir}: {e}"))?;
                (job.file_size, None)
            }
            None => (job.file_size, Some(job.count)),
        };
        let declared: Vec<(String, u64, Option<u32>)> =
            paths(job, run_dir).into_iter().map(|p| (p, declared_size, declared_count)).collect();
        client.declare(&declared).await.map_err(|e| anyhow!("declare: {e}"))?;
        for (i, path) in paths(job, run_dir).into_iter().enumerate() {
            let (client, job) = (client.clone(), job.clone());
            tasks.push(tokio::spawn(async move {
                let spec = LayoutSpec { stripe_size: None, stripe_count: Some(job.count), mirrors: None };
                let spec = job.composite.is_none().then_some(spec);
                let f = client.create(&path, 0o644, spec).await.map_err(|e| anyhow!("{path}: {e}"))?;
                let f = std::sync::Arc::new(f);
                let data = pattern(XFER as usize, i as u64 + 1);
                let writers = job.shared_tasks.max(1) as u64;
                // Shared: task w writes blocks w, w+writers, ... (IOR's segmented shared file); the
                // file-per-process and HACC cases write their file front to back (HACC's 9 variables one
                // after the other are exactly that).
                let pieces = std::sync::Arc::new(pieces(&job));
                let mut w = Vec::new();
                for k in 0..writers {
                    let (f, data, pieces) = (f.clone(), data.clone(), pieces.clone());
                    w.push(async move {
                        for &(off, len) in pieces.iter().skip(k as usize).step_by(writers as usize) {
                            f.write_at(off, data.slice(..len as usize)).await?;
                        }
                        Ok::<(), tessera_proto::FsError>(())
                    });
                }
                futures::future::try_join_all(w).await.map_err(|e| anyhow!("{path}: {e}"))?;
                let f = std::sync::Arc::try_unwrap(f).map_err(|_| anyhow!("{path}: file still shared"))?;
                f.close().await.map_err(|e| anyhow!("{path}: {e}"))?;
                Ok::<u64, anyhow::Error>(job.file_size)
            }));
        }
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total)
}

/// Reads every job's files back (all at once), returns the bytes read.
async fn read_jobs(client: &Client, jobs: &[Job], run_dir: &str) -> Result<u64> {
    let mut tasks = Vec::new();
    for job in jobs {
        for path in paths(job, run_dir) {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let f = client
                    .open(&path, tessera_client::OpenOptions::read_only())
                    .await
                    .map_err(|e| anyhow!("{path}: {e}"))?;
                let size = f.attr().size;
                let mut off = 0;
                while off < size {
                    let got = f.read_at(off, XFER).await.map_err(|e| anyhow!("{path}: {e}"))?;
                    if got.is_empty() {
                        return Err(anyhow!("{path}: short read at {off} of {size}"));
                    }
                    off += got.len() as u64;
                }
                f.close().await.map_err(|e| anyhow!("{path}: {e}"))?;
                Ok::<u64, anyhow::Error>(size)
            }));
        }
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total)
}

struct RunOutcome {
    cost: f64,
    cost_workload: f64,
    write_mib_s: f64,
    read_mib_s: f64,
    utilisation: Vec<f64>,
}

async fn one_run(
    dir: &Path,
    device: DeviceKind,
    capacity: u64,
    policy: &str,
    uneven: bool,
    w: &Workload,
) -> Result<RunOutcome> {
    let mut o = ClusterOptions::plain(SERVERS, 0);
    o.device_model = device;
    o.stripe_size = STRIPE;
    let policy_name = policy.to_string();
    let prepared = LocalCluster::prepare_edited(dir, &o, |c| {
        c.defaults.placement = policy_name.parse().expect("the experiment's policies are placement names");
        for d in &mut c.ds {
            d.targets = Some(TARGETS);
            d.capacity = Some(capacity);
        }
    })?;
    let before = if uneven { prefill(dir, capacity)? } else { vec![0; SERVERS * usize::from(TARGETS)] };
    let mut lc = prepared.boot().await?;
    let res = async {
        let client = Client::connect(&lc.client_cfg).await.map_err(|e| anyhow!("{e}"))?;
        let admin = Client::connect(&lc.admin_cfg).await.map_err(|e| anyhow!("{e}"))?;
        // The first reports, so placement sees the targets' fill.
        settle(&admin, before.len()).await?;
        client.mkdir_all("/tarazu", 0o755).await.map_err(|e| anyhow!("{e}"))?;
        let t0 = Instant::now();
        let written = write_jobs(&client, &w.jobs, "/tarazu").await?;
        let wsec = t0.elapsed().as_secs_f64();
        let after = settle(&admin, before.len()).await?;
        let t1 = Instant::now();
        let read = read_jobs(&client, &w.jobs, "/tarazu").await?;
        let rsec = t1.elapsed().as_secs_f64();
        let utilisation: Vec<f64> = after.iter().map(|(u, c)| *u as f64 / (*c).max(1) as f64).collect();
        let added: Vec<f64> =
            after.iter().zip(&before).map(|((u, c), b)| u.saturating_sub(*b) as f64 / (*c).max(1) as f64).collect();
        Ok::<RunOutcome, anyhow::Error>(RunOutcome {
            cost: ost_cost(&utilisation),
            cost_workload: ost_cost(&added),
            write_mib_s: written as f64 / (1 << 20) as f64 / wsec,
            read_mib_s: read as f64 / (1 << 20) as f64 / rsec,
            utilisation,
        })
    }
    .await;
    lc.stop().await;
    res
}

fn median(v: Vec<f64>) -> f64 {
    crate::report::median(&v)
}

pub async fn run(a: &ExperimentArgs) -> Result<()> {
    let runs = a.runs.unwrap_or(if a.quick { 1 } else { 3 }).max(1);
    // Target capacity: the paper's 10 GB scaled to this machine.
    let capacity: u64 = a.file_size.unwrap_or(if a.quick { 32 << 20 } else { 128 << 20 });
    let all = workloads(capacity);
    let known: Vec<&str> = all.iter().map(|w| w.name).collect();
    if let Some(bad) = a.workloads.iter().find(|w| !known.contains(&w.as_str())) {
        return Err(anyhow!("unknown workload '{bad}' (known: {})", known.join(", ")));
    }
    let chosen: Vec<Workload> = if !a.workloads.is_empty() {
        all.into_iter().filter(|w| a.workloads.iter().any(|n| n == w.name)).collect()
    } else if a.quick {
        all.into_iter().filter(|w| w.name == "ior-fpp-32g" || w.name == "hacc-io").collect()
    } else {
        all
    };
    std::fs::create_dir_all(&a.out)?;
    let scratch = std::env::temp_dir().join(format!("tessera-{NAME}-{}", std::process::id()));
    println!(
        "experiment {NAME}: {SERVERS} servers × {TARGETS} targets of {} (the paper's 10 GB), device model {}, {runs} run(s) each",
        format_size(capacity),
        a.device_model.as_str()
    );
    let mut records = Vec::new();
    for w in &chosen {
        for prefill in ["empty", "uneven"] {
            for policy in POLICIES {
                let mut outs = Vec::new();
                for r in 0..runs {
                    let out = one_run(&scratch, a.device_model, capacity, policy, prefill == "uneven", w)
                        .await
                        .with_context(|| format!("{} {policy} {prefill} run {r}", w.name))?;
                    println!(
                        "  {:<13} {:<12} {:<7} run {r}: OST cost {:.3} (workload's bytes {:.3}), write {:.1} MiB/s, read {:.1} MiB/s",
                        w.name, policy, prefill, out.cost, out.cost_workload, out.write_mib_s, out.read_mib_s
                    );
                    outs.push(out);
                }
                let mid = median(outs.iter().map(|o| o.cost).collect());
                let util = outs
                    .iter()
                    .min_by(|a, b| (a.cost - mid).abs().total_cmp(&(b.cost - mid).abs()))
                    .map(|o| o.utilisation.clone())
                    .unwrap_or_default();
                records.push(TarazuRecord {
                    workload: w.name.into(),
                    policy: policy.into(),
                    prefill: prefill.into(),
                    ost_cost: mid,
                    ost_cost_workload: median(outs.iter().map(|o| o.cost_workload).collect()),
                    write_mib_s: median(outs.iter().map(|o| o.write_mib_s).collect()),
                    read_mib_s: median(outs.iter().map(|o| o.read_mib_s).collect()),
                    device_model: a.device_model.as_str().into(),
                    runs,
                    utilisation: util,
                });
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let header = "workload,policy,prefill,ost_cost,ost_cost_workload,write_mib_s,read_mib_s,device_model,runs";
    let rows = records.iter().map(|r| {
        [
            r.workload.to_string(),
            r.policy.to_string(),
            r.prefill.to_string(),
            format!("{:.4}", r.ost_cost),
            format!("{:.4}", r.ost_cost_workload),
            format!("{:.2}", r.write_mib_s),
            format!("{:.2}", r.read_mib_s),
            r.device_model.to_string(),
            r.runs.to_string(),
        ]
    });
    let csv = crate::report::csv_text(&header.split(',').collect::<Vec<_>>(), rows)?;
    write_outputs(&a.out, NAME, &records, &csv)?;
    replot(&a.out, &records)?;
    println!("wrote {}/{NAME}.{{json,csv,png}} and {NAME}-targets.png", a.out.display());
    println!("{}", summary(&records));
    Ok(())
}

/// The table of the closing note: cost per workload and policy, and balanced against lustre.
pub fn summary(records: &[TarazuRecord]) -> String {
    let mut s = String::from(
        "| workload | prefill | round-robin | lustre | balanced | balanced vs lustre | read MiB/s lustre → balanced |\n|---|---|---|---|---|---|---|\n",
    );
    let find =
        |w: &str, p: &str, pol: &str| records.iter().find(|r| r.workload == w && r.prefill == p && r.policy == pol);
    let mut seen: Vec<(String, String)> = Vec::new();
    for r in records {
        let key = (r.workload.clone(), r.prefill.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let (rr, lu, ba) = (
            find(&r.workload, &r.prefill, "round-robin"),
            find(&r.workload, &r.prefill, "lustre"),
            find(&r.workload, &r.prefill, "balanced"),
        );
        let c = |x: Option<&TarazuRecord>| x.map(|x| format!("{:.3}", x.ost_cost)).unwrap_or("-".into());
        let red = match (lu, ba) {
            (Some(l), Some(b)) => format!("{:+.1}%", (b.ost_cost - l.ost_cost) / l.ost_cost * 100.0),
            _ => "-".into(),
        };
        let rd = match (lu, ba) {
            (Some(l), Some(b)) => format!(
                "{:.0} → {:.0} ({:+.0}%)",
                l.read_mib_s,
                b.read_mib_s,
                (b.read_mib_s / l.read_mib_s - 1.0) * 100.0
            ),
            _ => "-".into(),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.workload,
            r.prefill,
            c(rr),
            c(lu),
            c(ba),
            red,
            rd
        ));
    }
    s
}

/// Both figures of `records` into `out` (`tessera-bench experiment placement-tarazu --replot`).
pub fn replot(out: &Path, records: &[TarazuRecord]) -> Result<()> {
    plot(records, &out.join(format!("{NAME}.png")))?;
    plot_targets(records, &out.join(format!("{NAME}-targets.png")))
}

fn plot(records: &[TarazuRecord], png: &Path) -> Result<()> {
    let mut panels = Vec::new();
    for prefill in ["empty", "uneven"] {
        let mut groups: Vec<String> = Vec::new();
        for r in records.iter().filter(|r| r.prefill == prefill) {
            if !groups.contains(&r.workload) {
                groups.push(r.workload.clone());
            }
        }
        let series = POLICIES
            .iter()
            .map(|p| {
                let v = groups
                    .iter()
                    .map(|w| {
                        records
                            .iter()
                            .find(|r| &r.workload == w && r.policy == *p && r.prefill == prefill)
                            .map(|r| r.ost_cost)
                            .unwrap_or(f64::NAN)
                    })
                    .collect();
                (p.to_string(), v)
            })
            .collect();
        panels.push(BarPanel {
            title: format!("OST cost, {prefill} cluster before the run (1.0 = perfect)"),
            groups,
            series,
        });
    }
    let device = records.first().map(|r| r.device_model.as_str()).unwrap_or("?");
    grouped_bars(
        png,
        &format!("Tarazu placement: OST cost per workload and policy (device model {device})"),
        "max/mean utilisation",
        &panels,
    )
}

/// Utilisation of every target after each run (the paper's Figs. 15–20): one panel per workload and
/// prefill, one group per target, one bar per policy.
fn plot_targets(records: &[TarazuRecord], png: &Path) -> Result<()> {
    let mut by: HashMap<(String, String), Vec<&TarazuRecord>> = HashMap::new();
    let mut order = Vec::new();
    for r in records {
        let k = (r.workload.clone(), r.prefill.clone());
        if !by.contains_key(&k) {
            order.push(k.clone());
        }
        by.entry(k).or_default().push(r);
    }
    let panels: Vec<BarPanel> = order
        .iter()
        .map(|k| {
            let rs = &by[k];
            let n = rs.iter().map(|r| r.utilisation.len()).max().unwrap_or(0);
            let groups = (0..n).map(|i| format!("{}.{}", i / usize::from(TARGETS), i % usize::from(TARGETS))).collect();
            let series =
                rs.iter().map(|r| (r.policy.clone(), r.utilisation.iter().map(|u| u * 100.0).collect())).collect();
            BarPanel {
                title: format!("{} ({} before): utilisation per target (server.target), %", k.0, k.1),
                groups,
                series,
            }
        })
        .collect();
    grouped_bars(png, "Tarazu placement: utilisation of each target after the run", "%", &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composite_workloads_scale_the_papers_extents_to_whole_stripes() {
        let cap = 128 << 20;
        let all = workloads(cap);
        let find = |n: &str| all.iter().find(|w| w.name == n).unwrap_or_else(|| panic!("{n}")).jobs[0].clone();
        for (name, counts) in [("ior-fpp-32g-pfl1", vec![1, 3, 8, 16]), ("ior-fpp-32g-pfl2", vec![1, 12, 32])] {
            let job = find(name);
            let specs = job.composite.clone().unwrap();
            tessera_proto::layout::validate_extents(&specs).unwrap();
            assert_eq!(specs.iter().map(|e| e.stripe_count.unwrap()).collect::<Vec<_>>(), counts);
            assert!(specs.iter().all(|e| e.end == EOF || e.end % STRIPE == 0));
            // The paper's 2 GB files (32 GB over 16) reach the extent ending at 2 GB, not the last one.
            let two_gb = specs[specs.len() - 2].end;
            assert!(job.file_size <= two_gb && job.file_size > specs[specs.len() - 3].end, "{job:?}");
            assert_eq!(job.file_size, find("ior-fpp-32g").file_size, "the same data as the plain workload");
        }
        assert!(find("ior-shared-pfl1").composite.is_some() && find("ior-shared-pfl1").shared_tasks == 16);
    }
}
