//! `tessera jobstats` (per-job counters per node, like Lustre's `job_stats`) and `tessera report JOB`
//! (the job's I/O criteria, `tessera_iostats::characterize`, as a text page, JSON and PNG plots).

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use tessera_client::client::Client;
use tessera_client::mds_client::LayoutReply;
use tessera_iostats::characterize::{self, JobReport, C_DEFAULT, SMALL_DEFAULT};
use tessera_proto::layout::Layout;
use tessera_proto::msg::{DsReply, DsRequest, TraceRecord, MAX_TRACE_PAGE};
use tessera_proto::msg::{JobDetail, JobInfo, SizeHistogram};
use tessera_proto::types::format_utc;
use tessera_proto::units::format_size;
use tessera_proto::DsId;

fn utc(us: u64) -> String {
    if us == 0 {
        "-".into()
    } else {
        format_utc((us / 1_000_000) as i64)
    }
}

fn sizes(h: &SizeHistogram) -> String {
    let parts: Vec<String> =
        SizeHistogram::LABELS.iter().zip(h.counts).filter(|(_, n)| *n > 0).map(|(l, n)| format!("{l}: {n}")).collect();
    format!("{{ {} }}", parts.join(", "))
}

fn node_text(out: &mut String, name: &str, d: &JobDetail) {
    let _ = writeln!(
        out,
        "  {name}:\n    read:  {{ requests: {}, bytes: {}, small: {} }}\n    write: {{ requests: {}, bytes: {}, small: {} }}",
        d.read_ops, d.read_bytes, d.read_small, d.write_ops, d.write_bytes, d.write_small
    );
    if d.read_ops > 0 {
        let _ = writeln!(out, "    read_sizes:  {}", sizes(&d.read_sizes));
    }
    if d.write_ops > 0 {
        let _ = writeln!(out, "    write_sizes: {}", sizes(&d.write_sizes));
    }
}

/// `tessera jobstats`'s text: one block per job, the MDS's metadata counters, each data server's and
/// each forwarding node's.
pub fn jobstats_text(jobs: &[JobInfo]) -> String {
    let mut out = String::from("job_stats:\n");
    if jobs.is_empty() {
        out.push_str("  (no jobs)\n");
    }
    for j in jobs {
        let m = &j.meta;
        let _ = writeln!(
            out,
            "- job_id: {}\n  user: {}\n  state: {}\n  first: {} UTC\n  last: {} UTC\n  clients: {}\n  processes: {}",
            j.job,
            j.uid,
            if j.running { "running" } else { "idle" },
            utc(j.first_unix_us),
            utc(j.last_unix_us),
            j.clients.len(),
            j.processes.len()
        );
        let _ = writeln!(
            out,
            "  mds: {{ opens: {}, closes: {}, creates: {}, unlinks: {}, readdirs: {}, inode_updates: {}, other: {} }}",
            m.opens, m.closes, m.creates, m.unlinks, m.readdirs, m.inode_updates, m.other
        );
        let mut total = JobDetail::default();
        for (ds, d) in &j.nodes {
            node_text(&mut out, &format!("ds{ds}"), d);
            total.add(d);
        }
        if j.nodes.len() > 1 {
            node_text(&mut out, "total", &total);
        }
        // The same requests again, as they passed the forwarding nodes (not in the total).
        for (ion, d) in &j.ions {
            node_text(&mut out, &format!("ion{ion}"), d);
        }
    }
    out
}

/// `tessera jobstats [--job J] [--watch] [--json]`.
pub async fn jobstats(c: &Client, job: Option<&str>, watch: bool, json: bool) -> Result<()> {
    let fetch = || async {
        let jobs = c.mds().job_stats(job).await?;
        if job.is_some() && jobs.is_empty() {
            bail!("no job '{}' in the registry", job.unwrap_or_default());
        }
        Ok(if json { serde_json::to_string_pretty(&jobs)? + "\n" } else { jobstats_text(&jobs) })
    };
    if !watch {
        print!("{}", fetch().await?);
        return Ok(());
    }
    crate::watch::every_second(|| async { fetch().await.unwrap_or_else(|e| format!("{e:#}\n")) }).await;
    Ok(())
}

/// The report of `job` from the MDS's registry and counters, and its trace where the data servers
/// kept one (spatial classes in file offsets, same-file concurrency).
/// `dt_s`: windows of this length (a multiple of the series' own, which is rounded to); `c`: the threshold.
pub async fn compute(c: &Client, job: &str, dt_s: Option<f64>, threshold: Option<u64>) -> Result<JobReport> {
    let mut jobs = c.mds().job_stats(Some(job)).await?;
    let Some(info) = jobs.pop() else { bail!("no job '{job}' in the registry") };
    let mut inputs = characterize::inputs_from_info(&info, threshold.unwrap_or(C_DEFAULT), SMALL_DEFAULT);
    if let Some(dt) = dt_s {
        let factor = (dt / inputs.dt_s).round().max(1.0) as usize;
        inputs.series = characterize::coarsen(&inputs.series, factor);
        inputs.dt_s *= factor as f64;
    }
    let trace = traced_requests(c, &fetch_trace(c, job, None).await?).await;
    if !trace.is_empty() {
        let traced = characterize::trace_files(&trace, inputs.processes, info.dt_us);
        let inos: HashMap<String, u64> = info.files.iter().map(|f| (f.path.clone(), f.ino)).collect();
        characterize::apply_trace(&mut inputs.files, &traced, |p| {
            inos.get(p).copied().or_else(|| p.strip_prefix("inode ").and_then(|i| i.parse().ok()))
        });
        inputs.spatial_source = "trace".into();
    }
    Ok(characterize::report(&inputs))
}

/// Every data server's trace of `job` (switched on or off first with `set`), all its records.
pub async fn fetch_trace(c: &Client, job: &str, set: Option<bool>) -> Result<Vec<(DsId, TraceRecord)>> {
    let mut out = Vec::new();
    for ds in c.data().ids() {
        let mut after = 0;
        let mut set = set;
        loop {
            let req = DsRequest::JobTrace { job: job.to_string(), set: set.take(), after, max: MAX_TRACE_PAGE as u32 };
            let (reply, _) =
                c.data().route().call(ds, req, Bytes::new()).await.with_context(|| format!("data server {ds}"))?;
            let DsReply::JobTrace { next, records, .. } = reply else { bail!("data server {ds}: unexpected reply") };
            let done = records.is_empty();
            out.extend(records.into_iter().map(|r| (ds, r)));
            if done || next <= after {
                break;
            }
            after = next;
        }
    }
    Ok(out)
}

/// A traced request's offset in its file, from the file's layout (`None`: layout unknown, e.g. removed).
fn file_offset(layout: &Layout, ds: DsId, r: &TraceRecord) -> Option<u64> {
    let k = layout.targets.iter().position(|t| t.ds == ds && t.object == r.object)? as u64;
    let (s, n) = (layout.stripe_size.max(1), layout.targets.len() as u64);
    Some((r.offset / s) * s * n + k * s + r.offset % s)
}

async fn layouts(c: &Client, records: &[(DsId, TraceRecord)]) -> HashMap<u64, Option<Layout>> {
    let mut m = HashMap::new();
    for (_, r) in records {
        if let std::collections::hash_map::Entry::Vacant(e) = m.entry(r.ino) {
            let l = match c.mds().get_layout(r.ino).await {
                Ok(LayoutReply::File(l)) => Some(l),
                _ => None,
            };
            e.insert(l);
        }
    }
    m
}

/// The trace as requests in file offsets (object offsets when the layout is gone; each object its own
/// stream then, as the data servers' counters see it).
async fn traced_requests(c: &Client, records: &[(DsId, TraceRecord)]) -> Vec<characterize::TracedRequest> {
    let layouts = layouts(c, records).await;
    records
        .iter()
        .map(|(ds, r)| {
            let off = layouts.get(&r.ino).and_then(|l| l.as_ref()).and_then(|l| file_offset(l, *ds, r));
            characterize::TracedRequest {
                ino: r.ino,
                // Without the layout, one stream per object: the object in the client's place.
                client: if off.is_some() { r.client } else { r.client ^ r.object.rotate_left(32) },
                pid: r.pid,
                offset: off.unwrap_or(r.offset),
                len: r.len,
                write: r.write,
                start_us: r.start_us,
            }
        })
        .collect()
}

/// `tessera trace start|stop|export JOB`.
pub async fn trace(c: &Client, action: &str, job: &str, out: Option<&Path>) -> Result<()> {
    match action {
        "start" | "stop" => {
            let on = action == "start";
            fetch_trace(c, job, Some(on)).await?;
            let n = c.data().ids().len();
            println!("trace of job {job} {} on {n} data servers", if on { "started" } else { "stopped" });
        }
        "export" => {
            let records = fetch_trace(c, job, None).await?;
            let layouts = layouts(c, &records).await;
            let paths: HashMap<u64, String> = c
                .mds()
                .job_stats(Some(job))
                .await
                .ok()
                .and_then(|mut v| v.pop())
                .map(|i| i.files.into_iter().map(|f| (f.ino, f.path)).collect())
                .unwrap_or_default();
            let mut rows: Vec<(u64, Vec<String>)> = Vec::with_capacity(records.len());
            for (ds, r) in &records {
                let path = paths.get(&r.ino).cloned().unwrap_or_else(|| format!("inode {}", r.ino));
                let off = layouts.get(&r.ino).and_then(|l| l.as_ref()).and_then(|l| file_offset(l, *ds, r));
                let row = vec![
                    job.to_string(),
                    r.client.to_string(),
                    r.pid.to_string(),
                    path,
                    off.map_or(String::new(), |o| o.to_string()),
                    r.len.to_string(),
                    if r.write { "write" } else { "read" }.to_string(),
                    r.start_us.to_string(),
                    r.end_us.to_string(),
                    ds.to_string(),
                    r.object.to_string(),
                    r.offset.to_string(),
                ];
                rows.push((r.start_us, row));
            }
            rows.sort();
            // The csv crate quotes a job id or path holding a separator, quote or line break.
            let mut w = csv::Writer::from_writer(Vec::new());
            w.write_record(TRACE_COLUMNS)?;
            for (_, r) in rows {
                w.write_record(r)?;
            }
            let text = String::from_utf8(w.into_inner().map_err(|e| anyhow::anyhow!("{}", e.error()))?)?;
            match out {
                Some(p) => {
                    std::fs::write(p, text).with_context(|| p.display().to_string())?;
                    println!("{} records of job {job} written to {}", records.len(), p.display());
                }
                None => print!("{text}"),
            }
        }
        other => bail!("unknown trace action '{other}' (start, stop, export)"),
    }
    Ok(())
}

/// The columns of `tessera trace export`.
const TRACE_COLUMNS: [&str; 12] =
    ["job", "client", "pid", "file", "offset", "size", "op", "t_start_us", "t_end_us", "ds", "object", "object_offset"];

fn mib(b: u64) -> String {
    format_size(b)
}

/// The report as a readable page.
pub fn report_text(r: &JobReport) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "I/O report of job {}  ({} processes, {:.1} s)", r.job, r.processes, r.duration_s);
    let _ = writeln!(
        o,
        "criteria: Δt = {} s, threshold c = {} per window, small requests ≤ {}\n",
        r.dt_s,
        mib(r.threshold_bytes),
        mib(r.small_request_bytes)
    );
    let _ = writeln!(o, "1 Volume and rate                      read          write");
    let _ = writeln!(o, "  data S                        {:>12}   {:>12}", mib(r.bytes_read), mib(r.bytes_written));
    let _ = writeln!(o, "  requests N                    {:>12}   {:>12}", r.requests_read, r.requests_written);
    let _ = writeln!(
        o,
        "  bandwidth max B_max           {:>8.1} MiB/s {:>8.1} MiB/s   (both: {:.1} MiB/s)",
        r.bandwidth_read_max_mib_s, r.bandwidth_write_max_mib_s, r.bandwidth_max_mib_s
    );
    let _ = writeln!(
        o,
        "  bandwidth mean B̄              {:>8.1} MiB/s {:>8.1} MiB/s   (both: {:.1} MiB/s)",
        r.bandwidth_read_mean_mib_s, r.bandwidth_write_mean_mib_s, r.bandwidth_mean_mib_s
    );
    let _ = writeln!(
        o,
        "  IOPS max Γ_max                {:>12.1}   {:>12.1}   (both: {:.1}, mean Γ̄ {:.1})",
        r.iops_read_max, r.iops_write_max, r.iops_max, r.iops_mean
    );
    let _ = writeln!(
        o,
        "  intensity I                   {:>12.3}   {:>12.3}   (both: {:.3})",
        r.intensity_read, r.intensity_write, r.intensity
    );
    let _ = writeln!(
        o,
        "  files created / opened / closed / removed: {} / {} / {} / {}\n",
        r.files_created, r.files_opened, r.files_closed, r.files_removed
    );
    let _ = writeln!(o, "2 Pattern");
    let _ = writeln!(
        o,
        "  small requests f(s_small)     {:>12.3}   {:>12.3}   (both: {:.3})",
        r.small_request_fraction_read, r.small_request_fraction_write, r.small_request_fraction
    );
    let _ = writeln!(o, "  read share: {:.3} of requests, {:.3} of bytes", r.read_share_requests, r.read_share_bytes);
    let _ = writeln!(
        o,
        "  burstiness ρ                  {:>12.3}   {:>12.3}   (both: {:.3})",
        r.burstiness_read, r.burstiness_write, r.burstiness
    );
    let _ = writeln!(o, "  request sizes (count, CDF)    read                 write");
    for (k, label) in r.size_buckets.iter().enumerate() {
        if r.read_sizes[k] + r.write_sizes[k] == 0 {
            continue;
        }
        let _ = writeln!(
            o,
            "    {label:<10}                {:>9}  {:>6.3}    {:>9}  {:>6.3}",
            r.read_sizes[k], r.read_size_cdf[k], r.write_sizes[k], r.write_size_cdf[k]
        );
    }
    let _ = writeln!(
        o,
        "  files: {} task-local, {} shared (spatial classes from {})",
        r.files_task_local, r.files_shared, r.spatial_source
    );
    for f in &r.files {
        let stride = f.stride_bytes.map(|s| format!(" stride {}", mib(s))).unwrap_or_default();
        let access = match f.access {
            characterize::Access::TaskLocal => "task-local",
            characterize::Access::Shared => "shared",
        };
        let _ = writeln!(
            o,
            "    {}  {access} ({} processes, A_f {:.2})  {}{stride}  read {} write {}",
            f.path,
            f.processes,
            f.access_fraction,
            f.spatial,
            mib(f.read_bytes),
            mib(f.write_bytes)
        );
    }
    let _ = writeln!(o, "\n3 Parallelism");
    let _ = writeln!(o, "  P'_IO {:.3}   P_IO {:.3}", r.parallelism_raw, r.parallelism);
    o
}

/// `tessera report JOB [--json FILE] [--out DIR]`.
pub async fn report(
    c: &Client,
    job: &str,
    json: Option<&Path>,
    out: Option<&Path>,
    dt_s: Option<f64>,
    threshold: Option<u64>,
) -> Result<()> {
    let r = compute(c, job, dt_s, threshold).await?;
    match json {
        Some(p) if p == Path::new("-") => println!("{}", serde_json::to_string_pretty(&r)?),
        Some(p) => {
            std::fs::write(p, serde_json::to_string_pretty(&r)? + "\n").with_context(|| p.display().to_string())?;
            print!("{}", report_text(&r));
            println!("\nJSON written to {}", p.display());
        }
        None => print!("{}", report_text(&r)),
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let stem = file_stem(&r.job);
        let p = dir.join(format!("{stem}.json"));
        std::fs::write(&p, serde_json::to_string_pretty(&r)? + "\n").with_context(|| p.display().to_string())?;
        println!("report written to {}", p.display());
        for w in crate::jobplots::draw(&r, dir, &stem)? {
            println!("plot written to {}", w.display());
        }
    }
    Ok(())
}

/// A job id as a file name.
fn file_stem(job: &str) -> String {
    job.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}
