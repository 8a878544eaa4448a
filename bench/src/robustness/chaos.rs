//! `tessera-bench chaos`: the crash soak (issue 18). IOR-like writers (each a file per round, written
//! and fsync'ed a block at a time, retrying a failed block until it is durable) run on a local cluster
//! while a random server — the MDS, a data server or a forwarding node — is killed with SIGKILL at a
//! random moment and restarted after a random downtime, once per round. After each round every byte
//! whose fsync returned is read back and compared, and `fsck` must find nothing. Older rounds' files
//! are removed, so unlinks and the destroy log meet the kills too. Then, as root, a full target: data
//! server 1's store is a small tmpfs, filled until ENOSPC while everything else keeps working.
//!
//! With `--mirrors 2` (issue 36) the files are mirrored, only data servers are killed (replica kills),
//! `--wipes N` of the kills also wipe the server's store before it restarts (a lost disk), a reader
//! reads the last round's files back throughout each round, and any error a writer or the reader sees
//! counts as an application error on a mirrored file (there must be none). After each round the soak
//! waits for every replica to be in sync again (`tessera mirror status`), then verifies and runs fsck;
//! at the end fsck compares every replica by checksum (`--verify-mirrors`).

use crate::ior::fill_pattern;
use crate::localcluster::{ClusterOptions, LocalCluster};
use crate::report::{median, write_json};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_client::{Client, ErrorCode, LayoutSpec, OpenOptions};
use tessera_proto::units::parse_size;

#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// Server kills to survive (one per round; SIGKILL at a random moment, then a restart).
    #[arg(long, default_value_t = 100)]
    pub kills: usize,
    /// Data servers.
    #[arg(long, default_value_t = 2)]
    pub ds: usize,
    /// Forwarding nodes (half the writers go through them, and they are killed too).
    #[arg(long, default_value_t = 1)]
    pub ion: usize,
    /// Writers (one file each per round).
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// What a writer writes and fsyncs at a time.
    #[arg(long, value_parser = parse_size, default_value = "256K")]
    pub block: u64,
    /// Pause between a writer's blocks, milliseconds (so writers are writing when the kill falls, and
    /// the kept rounds fit the full-target store).
    #[arg(long, default_value_t = 30)]
    pub pace_ms: u64,
    /// The most a writer writes per round.
    #[arg(long, value_parser = parse_size, default_value = "64M")]
    pub file_size: u64,
    /// Length of a round, seconds (the kill falls within it).
    #[arg(long, default_value_t = 3.0)]
    pub round_s: f64,
    /// Rounds whose files are kept (and checked again at the end); older ones are removed.
    #[arg(long, default_value_t = 3)]
    pub keep_rounds: usize,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Skip the full-target phase (it needs root: data server 1's store is a tmpfs of --full-size).
    #[arg(long)]
    pub no_full_target: bool,
    #[arg(long, value_parser = parse_size, default_value = "512M")]
    pub full_size: u64,
    /// Mirror count of the files written (1: unmirrored, every kind of server killed; 2 or 3: only
    /// data servers are killed, and no writer or reader may see an error).
    #[arg(long, default_value_t = 1)]
    pub mirrors: u8,
    /// Of the kills (with --mirrors 2 or 3), this many also wipe the data server's store before its
    /// restart, spread over the soak.
    #[arg(long, default_value_t = 0)]
    pub wipes: usize,
    /// Working directory (cluster, logs; default: a temporary one, removed at the end).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize, Default)]
struct Results {
    kills: usize,
    kills_by_server: BTreeMap<String, usize>,
    rounds: usize,
    writers: usize,
    bytes_fsynced: u64,
    bytes_verified: u64,
    bytes_lost: u64,
    /// Failed writes, fsyncs and opens that were retried (a server was down).
    retried_errors: u64,
    /// Writers that could not make their last block durable within a minute of the round's end.
    stuck_writers: u64,
    fsck_runs: usize,
    fsck_findings: u64,
    mirrors: u8,
    /// Stores wiped before a restart (a lost disk).
    wipes: usize,
    /// Errors the writers and the reader saw on mirrored files (there must be none).
    mirror_app_errors: u64,
    /// Bytes the reader read back (and compared) while servers were killed.
    bytes_read_during: u64,
    /// Seconds from each round's end until every replica was in sync again.
    resync_wait_s_median: f64,
    resync_wait_s_max: f64,
    /// Seconds from each restart's spawn to the server's READY.
    restart_s_median: f64,
    restart_s_max: f64,
    full_target: Option<FullTarget>,
    elapsed_s: f64,
    seed: u64,
}

#[derive(Serialize, Default)]
struct FullTarget {
    store_bytes: u64,
    filled_bytes: u64,
    /// The error the filler got.
    filler_error: String,
    /// A write to a file striped over every server, while the target is full.
    striped_write_error: String,
    /// The data servers of a file created with the default layout (all servers) while the target is
    /// full: without server 1 once its free space was reported (depends on the report's timing).
    created_while_full_on: Vec<u32>,
    /// A file on another server only, written and fsync'ed while the target is full.
    other_server_bytes: u64,
    /// Every kept file read back while the target was full.
    kept_files_verified: bool,
    /// Seconds from removing the filler until a striped write succeeds again.
    space_back_s: f64,
    fsck_findings: u64,
}

/// One writer's file and how much of it is durable.
#[derive(Clone)]
struct Written {
    path: String,
    task: usize,
    durable: u64,
}

/// Everything a writer needs.
struct Writer {
    client: Client,
    path: String,
    task: usize,
    block: u64,
    size: u64,
    layout: Option<LayoutSpec>,
    pace: Duration,
    stop: Arc<AtomicBool>,
    errors: Arc<AtomicU64>,
}

impl Writer {
    /// Writes and fsyncs block after block until `size` or until told to stop; a failed block is retried
    /// (on a reopened file) until it is durable, so the file never ends with data past its size.
    /// Returns the file and whether it gave up (a minute after being told to stop).
    async fn run(self) -> (Written, bool) {
        let mut done = Written { path: self.path.clone(), task: self.task, durable: 0 };
        let mut file = None;
        let mut buf = vec![0u8; self.block as usize];
        let mut stop_seen: Option<Instant> = None;
        // A block failed and is not durable yet: it is finished before the writer stops.
        let mut retrying = false;
        while done.durable < self.size {
            if self.stop.load(Ordering::Relaxed) {
                let t = *stop_seen.get_or_insert_with(Instant::now);
                if !retrying {
                    break;
                }
                if t.elapsed() > Duration::from_secs(60) {
                    return (done, true);
                }
            }
            let f = match file.take() {
                Some(f) => f,
                None => {
                    let opts = OpenOptions { read: true, write: true, create: true, perm: 0o644, ..Default::default() };
                    let opened = match &self.layout {
                        Some(l) if done.durable == 0 => match self.client.create(&self.path, 0o644, Some(*l)).await {
                            Err(e) if e.code == ErrorCode::Exists => self.client.open(&self.path, opts).await,
                            r => r,
                        },
                        _ => self.client.open(&self.path, opts).await,
                    };
                    match opened {
                        Ok(f) => f,
                        Err(_) => {
                            self.errors.fetch_add(1, Ordering::Relaxed);
                            if stop_seen.is_some_and(|t| t.elapsed() > Duration::from_secs(60)) {
                                return (done, true);
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
            };
            let n = self.block.min(self.size - done.durable);
            fill_pattern(&mut buf[..n as usize], done.durable, self.task);
            let data = bytes::Bytes::copy_from_slice(&buf[..n as usize]);
            match f.write_at(done.durable, data).await {
                Ok(()) => match f.fsync().await {
                    Ok(()) => {
                        done.durable += n;
                        retrying = false;
                        file = Some(f);
                        tokio::time::sleep(self.pace).await;
                        continue;
                    }
                    Err(_) => self.errors.fetch_add(1, Ordering::Relaxed),
                },
                Err(_) => self.errors.fetch_add(1, Ordering::Relaxed),
            };
            retrying = true;
            // Reopened for the retry; the failed handle is closed if the MDS answers.
            let _ = tokio::time::timeout(Duration::from_secs(2), f.close()).await;
            file = Some(match self.client.open(&self.path, OpenOptions::read_write()).await {
                Ok(f) => f,
                Err(_) => {
                    // Not even an open: try again from scratch after a moment.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let stuck = stop_seen.is_some_and(|t| t.elapsed() > Duration::from_secs(60));
                    if stuck {
                        return (done, true);
                    }
                    continue;
                }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(f) = file {
            let _ = tokio::time::timeout(Duration::from_secs(5), f.close()).await;
        }
        (done, false)
    }
}

/// Reads a file's durable part back, `chunk` bytes at a time; returns the bytes that differ from the
/// pattern (or are missing).
async fn compare(c: &Client, w: &Written, chunk: u64) -> tessera_client::FsResult<u64> {
    let f = c.open(&w.path, OpenOptions::read_only()).await?;
    let mut lost = 0u64;
    let mut off = 0u64;
    let mut want = Vec::new();
    while off < w.durable {
        let n = (w.durable - off).min(chunk);
        let got = f.read_at(off, n).await?;
        want.resize(n as usize, 0);
        fill_pattern(&mut want, off, w.task);
        lost += (n - got.len() as u64) + got.iter().zip(&want).filter(|(a, b)| a != b).count() as u64;
        off += n;
    }
    let _ = f.close().await;
    Ok(lost)
}

/// [`compare`], retried for 30 s while the file cannot be read (a server restarting).
async fn verify(c: &Client, w: &Written) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let attempt = compare(c, w, 4 << 20);
        match attempt.await {
            Ok(lost) => return Ok(lost),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("verify {}: {e}; retrying", w.path);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("reading {} back: {e}", w.path),
        }
    }
}

/// Waits until the MDS and every data server answer.
async fn healthy(c: &Client) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut ok = c.ping().await.is_ok();
        for ds in c.ds_ids() {
            ok &= c.ping_ds(ds).await.is_ok();
        }
        if ok {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster is not healthy a minute after the restart");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads `files` back and compares them, again and again until `stop`; errors are counted in `errors`
/// (a reader of mirrored files must see none). Returns the bytes read.
async fn read_while(c: &Client, files: &[Written], stop: &AtomicBool, errors: &AtomicU64) -> u64 {
    let mut read = 0;
    while !stop.load(Ordering::Relaxed) {
        for w in files {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let r = compare(c, w, 1 << 20);
            match r.await {
                Ok(0) => read += w.durable,
                Ok(bad) => {
                    eprintln!("  reader: {} read back with {bad} bytes wrong", w.path);
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    eprintln!("  reader: {}: {e}", w.path);
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    read
}

/// Waits until no replica is degraded (`tessera mirror status`); the seconds it took.
async fn in_sync(admin: &Client) -> Result<f64> {
    let t = Instant::now();
    loop {
        match admin.mds().mirror_status().await {
            Ok(s) if s.degraded_objects == 0 => return Ok(t.elapsed().as_secs_f64()),
            Ok(s) if t.elapsed() > Duration::from_secs(120) => {
                bail!("replicas not in sync 2 minutes after the round: {s:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Runs fsck (check only); returns its findings, printed.
async fn fsck(admin: &Client) -> Result<u64> {
    let r = admin.mds().fsck(false).await.map_err(|e| anyhow!("fsck: {e}"))?;
    for f in &r.findings {
        eprintln!("  fsck: {} {} -> {}", f.kind, f.what, f.action);
    }
    Ok(r.findings.len() as u64 + r.omitted)
}

/// Unmounts the full-target tmpfs when the soak ends.
struct Tmpfs(PathBuf);
impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

pub async fn run(a: ChaosArgs) -> Result<()> {
    let t0 = Instant::now();
    let seed = a.seed.unwrap_or_else(|| rand::random::<u64>() >> 1);
    let mut rng = StdRng::seed_from_u64(seed);
    let tmp;
    let base = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    std::fs::create_dir_all(&base)?;
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let full = !a.no_full_target && root && a.ds >= 2;
    let store = base.join("ds1-store");
    let _tmpfs = if full {
        std::fs::create_dir_all(&store)?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={}", a.full_size), "tmpfs"])
            .arg(&store)
            .status()?;
        if !ok.success() {
            bail!("mounting a tmpfs on {}", store.display());
        }
        Some(Tmpfs(store.clone()))
    } else {
        if !a.no_full_target {
            eprintln!("chaos: full-target phase skipped (needs root and 2 data servers)");
        }
        None
    };
    let o = ClusterOptions::plain(a.ds, a.ion);
    let ds1_store = full.then(|| store.clone());
    let mut cluster = LocalCluster::start_edited(&base.join("cluster"), &o, |c| {
        if let (Some(s), Some(d)) = (&ds1_store, c.ds.get_mut(1)) {
            d.data_dir = Some(s.clone());
        }
    })
    .await?;
    let res = soak(&a, &mut cluster, &mut rng, seed, full, t0).await;
    cluster.stop().await;
    let r = res?;
    println!(
        "chaos: {} kills ({}) in {} rounds; {} fsync'ed, {} verified, {} bytes lost; {} retried errors, {} stuck writers; \
         fsck {} findings in {} runs; restart median {:.2} s; {:.0} s",
        r.kills,
        r.kills_by_server.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
        r.rounds,
        tessera_proto::units::format_size(r.bytes_fsynced),
        tessera_proto::units::format_size(r.bytes_verified),
        r.bytes_lost,
        r.retried_errors,
        r.stuck_writers,
        r.fsck_findings,
        r.fsck_runs,
        r.restart_s_median,
        r.elapsed_s
    );
    if let Some(f) = &r.full_target {
        println!(
            "full target: data server 1's {} store filled with {} (filler: {}); a striped write meanwhile: {}; \
             a file created meanwhile on servers {:?}; {} written on the other server; kept files read back: {}; space back {:.2} s after removing the filler; \
             fsck {} findings",
            tessera_proto::units::format_size(f.store_bytes),
            tessera_proto::units::format_size(f.filled_bytes),
            f.filler_error,
            f.striped_write_error,
            f.created_while_full_on,
            tessera_proto::units::format_size(f.other_server_bytes),
            f.kept_files_verified,
            f.space_back_s,
            f.fsck_findings
        );
    }
    if let Some(p) = &a.json {
        write_json(p, &r)?;
    }
    if r.mirrors > 1 {
        println!(
            "mirrors {}: {} wiped stores; {} application errors on mirrored files; {} read back during the kills; \
             in sync again {:.2} s (median) / {:.2} s (max) after a round",
            r.mirrors,
            r.wipes,
            r.mirror_app_errors,
            tessera_proto::units::format_size(r.bytes_read_during),
            r.resync_wait_s_median,
            r.resync_wait_s_max
        );
    }
    if r.bytes_lost > 0 || r.fsck_findings > 0 || r.stuck_writers > 0 || r.mirror_app_errors > 0 {
        bail!("the soak lost data, left fsck findings or stuck writers (above)");
    }
    Ok(())
}

async fn soak(
    a: &ChaosArgs,
    cluster: &mut LocalCluster,
    rng: &mut StdRng,
    seed: u64,
    full: bool,
    t0: Instant,
) -> Result<Results> {
    let mut r = Results { writers: a.writers, seed, mirrors: a.mirrors.max(1), ..Default::default() };
    let mirrored = a.mirrors > 1;
    if a.wipes > 0 && !mirrored {
        bail!("--wipes needs --mirrors 2 or 3: an unmirrored file on a wiped store is lost");
    }
    let layout =
        mirrored.then_some(LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(2), mirrors: Some(a.mirrors) });
    let data_dirs = cluster.ds_data_dirs();
    // The rounds whose kill also wipes the store: spread evenly.
    let wipe_rounds: std::collections::BTreeSet<usize> =
        (0..a.wipes.min(a.kills)).map(|i| i * a.kills / a.wipes.max(1) + a.kills / a.wipes.max(1) / 2).collect();
    let mut resync_waits = Vec::new();
    let direct = cluster.client("chaos").await?;
    let via_ion = if a.ion > 0 { Some(cluster.client_via(Some(0), "chaos").await?) } else { None };
    let admin = Client::connect(&cluster.admin_cfg).await.map_err(|e| anyhow!("admin client: {e}"))?;
    let names: Vec<String> = cluster.server_names().into_iter().filter(|n| !mirrored || n.starts_with("ds")).collect();
    let errors = Arc::new(AtomicU64::new(0));
    let mut kept: Vec<Vec<Written>> = Vec::new();
    let mut restarts = Vec::new();
    direct.mkdir_all("/chaos", 0o755).await?;
    for round in 0..a.kills {
        let dir = format!("/chaos/r{round}");
        while let Err(e) = direct.mkdir(&dir, 0o755).await {
            if e.code == ErrorCode::Exists {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..a.writers)
            .map(|k| {
                let client = match (&via_ion, k % 2) {
                    (Some(c), 1) => c.clone(),
                    _ => direct.clone(),
                };
                let w = Writer {
                    client,
                    path: format!("{dir}/w{k}"),
                    task: round * 1000 + k,
                    block: a.block,
                    size: a.file_size,
                    layout,
                    pace: Duration::from_millis(a.pace_ms),
                    stop: stop.clone(),
                    errors: errors.clone(),
                };
                tokio::spawn(w.run())
            })
            .collect();
        // The reader: the last round's files, read back and compared over and over until the round ends.
        let reader = (mirrored && !kept.is_empty()).then(|| {
            let files = kept.last().cloned().unwrap_or_default();
            let (c, stop, errors) = (direct.clone(), stop.clone(), errors.clone());
            tokio::spawn(async move { read_while(&c, &files, &stop, &errors).await })
        });
        let round_len = Duration::from_secs_f64(a.round_s);
        let kill_at = Duration::from_secs_f64(rng.gen_range(0.1..a.round_s * 0.6));
        let down = Duration::from_secs_f64(rng.gen_range(0.0..1.5));
        let victim = names[rng.gen_range(0..names.len())].clone();
        let started = Instant::now();
        tokio::time::sleep(kill_at).await;
        cluster.kill9(&victim)?;
        if wipe_rounds.contains(&round) {
            let i: usize =
                victim.trim_start_matches("ds").parse().map_err(|_| anyhow!("{victim} is not a data server"))?;
            let d = data_dirs.get(i).ok_or_else(|| anyhow!("no data directory for {victim}"))?;
            std::fs::remove_dir_all(d).with_context(|| format!("wiping {}", d.display()))?;
            std::fs::create_dir_all(d)?;
            r.wipes += 1;
        }
        tokio::time::sleep(down).await;
        let t = Instant::now();
        cluster.restart(&victim).await?;
        restarts.push(t.elapsed().as_secs_f64());
        *r.kills_by_server.entry(victim.clone()).or_default() += 1;
        r.kills += 1;
        if let Some(rest) = round_len.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
        stop.store(true, Ordering::Relaxed);
        let mut files = Vec::new();
        for t in tasks {
            let (w, stuck) = t.await?;
            r.stuck_writers += stuck as u64;
            r.bytes_fsynced += w.durable;
            files.push(w);
        }
        if let Some(t) = reader {
            r.bytes_read_during += t.await?;
        }
        healthy(&admin).await?;
        if mirrored {
            resync_waits.push(in_sync(&admin).await?);
        }
        let mut lost = 0;
        for w in &files {
            lost += verify(&direct, w).await?;
            r.bytes_verified += w.durable;
        }
        r.bytes_lost += lost;
        let findings = fsck(&admin).await?;
        r.fsck_runs += 1;
        r.fsck_findings += findings;
        r.rounds += 1;
        let fsynced: u64 = files.iter().map(|w| w.durable).sum();
        println!(
            "round {:>3}/{}: killed {victim:<4} at {:.2} s, down {:.2} s, ready {:.2} s after restart; {} fsync'ed, \
             {lost} bytes lost; fsck {findings} findings; {} retried errors so far",
            round + 1,
            a.kills,
            kill_at.as_secs_f64(),
            down.as_secs_f64(),
            restarts.last().copied().unwrap_or(0.0),
            tessera_proto::units::format_size(fsynced),
            errors.load(Ordering::Relaxed)
        );
        kept.push(files);
        if kept.len() > a.keep_rounds {
            let old = kept.remove(0);
            if let Some(w) = old.first() {
                let dir = w.path.rsplit_once('/').map_or(w.path.as_str(), |(d, _)| d).to_string();
                direct.remove_all(&dir).await.map_err(|e| anyhow!("removing {dir}: {e}"))?;
            }
        }
    }
    // Everything kept is read back once more at the end.
    for w in kept.iter().flatten() {
        r.bytes_lost += verify(&direct, w).await?;
    }
    if full {
        r.full_target = Some(full_target(a, &direct, &admin, &kept).await?);
    }
    r.retried_errors = errors.load(Ordering::Relaxed);
    if mirrored {
        r.mirror_app_errors = r.retried_errors;
        r.resync_wait_s_median = median(&resync_waits);
        r.resync_wait_s_max = resync_waits.iter().copied().fold(0.0, f64::max);
        let v = admin.mds().fsck_with(false, true).await.map_err(|e| anyhow!("fsck --verify-mirrors: {e}"))?;
        for f in &v.findings {
            eprintln!("  fsck --verify-mirrors: {} {} -> {}", f.kind, f.what, f.action);
        }
        r.fsck_runs += 1;
        r.fsck_findings += v.findings.len() as u64 + v.omitted;
    }
    r.restart_s_max = restarts.iter().copied().fold(0.0, f64::max);
    r.restart_s_median = median(&restarts);
    r.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Creates files with one stripe until one lands on data server `ds`.
async fn file_on(c: &Client, name: &str, ds: u32) -> Result<tessera_client::File> {
    let spec = LayoutSpec { stripe_size: Some(1 << 20), stripe_count: Some(1), mirrors: None };
    for i in 0..64 {
        let path = format!("{name}.{i}");
        let f = c.create(&path, 0o644, Some(spec)).await.map_err(|e| anyhow!("{path}: {e}"))?;
        if f.layout().targets[0].ds == ds {
            return Ok(f);
        }
        f.close().await?;
        c.unlink(&path).await?;
    }
    bail!("no file of {name} was placed on data server {ds}")
}

async fn full_target(a: &ChaosArgs, c: &Client, admin: &Client, kept: &[Vec<Written>]) -> Result<FullTarget> {
    let mut ft = FullTarget { store_bytes: a.full_size, ..Default::default() };
    c.mkdir_all("/chaos/full", 0o755).await?;
    let filler = file_on(c, "/chaos/full/filler", 1).await?;
    // A file striped over every server, created while the target has room: once it is full, the MDS
    // leaves a full target out of new files' layouts (as Lustre skips full OSTs), so a file created
    // after the filler may not touch it at all.
    let striped = c.create("/chaos/full/striped", 0o644, None).await?;
    if !striped.layout().targets.iter().any(|t| t.ds == 1) {
        bail!("a file striped over every server has no stripe on data server 1: {:?}", striped.layout());
    }
    let block = bytes::Bytes::from(vec![7u8; 1 << 20]);
    loop {
        match filler.write_at(ft.filled_bytes, block.clone()).await.and(filler.fsync().await) {
            Ok(()) => ft.filled_bytes += block.len() as u64,
            Err(e) => {
                if e.code != ErrorCode::NoSpace {
                    bail!("the filler failed with {e}, not ENOSPC");
                }
                ft.filler_error = format!("{} ({})", e.code, e.errno());
                break;
            }
        }
        if ft.filled_bytes > a.full_size * 2 {
            bail!("wrote twice the target's size without ENOSPC");
        }
    }
    // The striped file cannot take a full stripe's worth while the target is full.
    let big = bytes::Bytes::from(vec![1u8; 4 << 20]);
    ft.striped_write_error = match striped.write_at(0, big.clone()).await.and(striped.fsync().await) {
        Ok(()) => bail!("a write striped over the full target succeeded"),
        Err(e) if e.code == ErrorCode::NoSpace => format!("{} ({})", e.code, e.errno()),
        Err(e) => bail!("a striped write failed with {e}, not ENOSPC"),
    };
    let late = c.create("/chaos/full/created-while-full", 0o644, None).await?;
    ft.created_while_full_on = late.layout().targets.iter().map(|t| t.ds).collect();
    late.close().await?;
    c.unlink("/chaos/full/created-while-full").await?;
    // Another server's file, the metadata server and every kept file work as before.
    let other = file_on(c, "/chaos/full/other", 0).await?;
    for k in 0..16u64 {
        other.write_at(k << 20, block.clone()).await?;
    }
    other.fsync().await?;
    ft.other_server_bytes = 16 << 20;
    other.close().await?;
    let mut lost = 0;
    for w in kept.iter().flatten() {
        lost += verify(c, w).await?;
    }
    ft.kept_files_verified = lost == 0;
    // Space back: the filler removed (destroyed in the background), the striped write goes through.
    let filler_ino = filler.ino();
    let _ = filler.close().await;
    for e in c.readdir("/chaos/full").await? {
        if e.ino == filler_ino {
            c.unlink(&format!("/chaos/full/{}", e.name)).await?;
        }
    }
    let t = Instant::now();
    loop {
        match striped.write_at(0, big.clone()).await.and(striped.fsync().await) {
            Ok(()) => break,
            Err(e) if t.elapsed() > Duration::from_secs(60) => bail!("no space back a minute after: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    ft.space_back_s = t.elapsed().as_secs_f64();
    striped.close().await?;
    ft.fsck_findings = fsck(admin).await?;
    Ok(ft)
}
