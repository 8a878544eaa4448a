//! `tessera jobstats` (per-job counters per node, like Lustre's `job_stats`) and `tessera report JOB`
//! (the job's I/O criteria, `tessera_proto::characterize`, as a text page, JSON and PNG plots).

use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use tessera_client::client::Client;
use tessera_proto::characterize::{self, JobReport, C_DEFAULT, SMALL_DEFAULT};
use tessera_proto::msg::{JobDetail, JobInfo, SizeHistogram};
use tessera_proto::types::format_utc;
use tessera_proto::units::format_size;

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

/// `tessera jobstats`'s text: one block per job, the MDS's metadata counters and each data server's.
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

/// The report of `job` from the MDS's registry and counters.
pub async fn compute(c: &Client, job: &str) -> Result<JobReport> {
    let mut jobs = c.mds().job_stats(Some(job)).await?;
    let Some(info) = jobs.pop() else { bail!("no job '{job}' in the registry") };
    Ok(characterize::report(&characterize::inputs_from_info(&info, C_DEFAULT, SMALL_DEFAULT)))
}

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
pub async fn report(c: &Client, job: &str, json: Option<&Path>, out: Option<&Path>) -> Result<()> {
    let r = compute(c, job).await?;
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
