//! `tessera ion status|scheduler`: the forwarding nodes' state, and switching their request scheduler
//! at run time.

use anyhow::{anyhow, bail};
use clap::Subcommand;
use tessera_client::proto::msg::{IonStatus, SchedulerSetting, SizeHistogram};
use tessera_client::proto::FsResult;
use tessera_client::Client;

#[derive(Subcommand, Debug)]
pub enum IonCmd {
    /// Each forwarding node's scheduler, window, queue depths, request-size histograms (leaving
    /// clients, arriving at the ION, leaving it, arriving at the data servers), mean offset distance,
    /// median inter-arrival time, and bytes and requests per job.
    Status {
        /// Refresh every second in place until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// A JSON list, one object per forwarding node.
        #[arg(long)]
        json: bool,
    },
    /// Switch the request scheduler at run time (admin configuration DIR/admin.toml, or root): queued
    /// requests move to the new scheduler in their order.
    Scheduler {
        /// fifo, hbrr, to, to-agg, sjf, mlf, sw or twins.
        name: String,
        /// TWINS's (and SW's) window, milliseconds (fractions allowed: 0.125).
        #[arg(long)]
        window: Option<f64>,
        /// HBRR's (and MLF's) requests per queue visit.
        #[arg(long)]
        quantum: Option<u32>,
        /// Only this forwarding node (index or name); default: all.
        #[arg(long)]
        ion: Option<String>,
    },
}

/// Runs an `ion` command.
pub async fn run(c: &Client, cmd: IonCmd) -> anyhow::Result<()> {
    let names: Vec<String> = c.config().ion.iter().map(|i| i.name.clone()).collect();
    if names.is_empty() {
        bail!("the cluster configuration lists no forwarding nodes (start one with `tessera up --ion M`)");
    }
    match cmd {
        IonCmd::Status { watch, json } => status(c, names.len(), watch, json).await,
        IonCmd::Scheduler { name, window, quantum, ion } => {
            let window_us = match window {
                Some(ms) if ms.is_finite() && ms > 0.0 => Some((ms * 1000.0).round().max(1.0) as u64),
                Some(ms) => bail!("--window {ms}: must be a positive number of milliseconds"),
                None => None,
            };
            let targets: Vec<usize> = match ion {
                None => (0..names.len()).collect(),
                Some(s) => vec![match s.parse::<usize>() {
                    Ok(k) if k < names.len() => k,
                    _ => names
                        .iter()
                        .position(|n| *n == s)
                        .ok_or_else(|| anyhow!("no forwarding node '{s}' (configured: {})", names.join(", ")))?,
                }],
            };
            for k in targets {
                let setting = SchedulerSetting { name: name.clone(), window_us, quantum };
                let st = c.set_ion_scheduler(k, setting).await.map_err(|e| {
                    if e.code == tessera_client::ErrorCode::Perm {
                        anyhow!("{}: {e}\n(use the admin configuration: --config DIR/admin.toml as written by `tessera up`)", names[k])
                    } else {
                        anyhow::Error::new(e).context(names[k].clone())
                    }
                })?;
                println!(
                    "{}: scheduler {} (window {} ms, quantum {})",
                    st.name,
                    st.scheduler,
                    window_ms(st.window_us),
                    st.quantum
                );
            }
            Ok(())
        }
    }
}

fn window_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Every forwarding node's status, and the request sizes arriving at the data servers (all of them).
async fn gather(c: &Client, n: usize) -> (Vec<FsResult<IonStatus>>, SizeHistogram) {
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        out.push(c.ion_status(k).await);
    }
    let mut at_servers = SizeHistogram::default();
    for ds in c.ds_ids() {
        if let Ok(r) = c.data().report(ds).await {
            at_servers.add(&r.sizes);
        }
    }
    (out, at_servers)
}

fn json_text(c: &Client, all: &[FsResult<IonStatus>], at_servers: &SizeHistogram) -> String {
    let list: Vec<serde_json::Value> = all
        .iter()
        .enumerate()
        .map(|(k, st)| match st {
            Ok(st) => {
                let mut v = serde_json::to_value(st).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("window_ms".into(), window_ms(st.window_us).into());
                    o.insert(
                        "sizes_arriving_at_data_servers".into(),
                        serde_json::to_value(at_servers).unwrap_or_default(),
                    );
                }
                v
            }
            Err(e) => serde_json::json!({ "name": c.config().ion[k].name, "error": e.to_string() }),
        })
        .collect();
    serde_json::to_string_pretty(&list).unwrap_or_default() + "\n"
}

fn hist_line(label: &str, h: &SizeHistogram) -> String {
    let mut s = format!("    {label:<22}");
    for (b, n) in SizeHistogram::LABELS.iter().zip(h.counts) {
        if n > 0 {
            s += &format!(" {b}:{n}");
        }
    }
    if h.total() == 0 {
        s += " -";
    }
    s + "\n"
}

/// The status as text.
pub fn status_text(st: &IonStatus, at_servers: &SizeHistogram) -> String {
    let mut s = format!(
        "{} (#{}): scheduler {}, window {} ms, quantum {}, {} in flight\n",
        st.name,
        st.index,
        st.scheduler,
        window_ms(st.window_us),
        st.quantum,
        st.in_flight
    );
    let queued: u64 = st.queues.iter().map(|(_, n)| n).sum();
    s += &format!("  queued {queued}");
    for (q, n) in st.queues.iter().filter(|(_, n)| *n > 0) {
        s += &format!("  [{q}: {n}]");
    }
    s += "\n";
    s += &format!(
        "  forwarded {} requests, {} ({} sent to data servers after merging), {} metadata calls\n",
        st.requests_forwarded,
        tessera_client::proto::units::format_size(st.bytes_forwarded),
        st.dispatched,
        st.metadata_calls
    );
    s += &format!(
        "  mean offset distance {}, median inter-arrival {}\n",
        tessera_client::proto::units::format_size(st.mean_offset_distance as u64),
        st.median_interarrival_us.map_or("-".to_string(), |us| format!("{us} µs"))
    );
    s += "  request sizes (count per bucket):\n";
    s += &hist_line("leaving clients", &st.sizes_leaving_clients);
    s += &hist_line("arriving at the ION", &st.sizes_arriving);
    s += &hist_line("leaving the ION", &st.sizes_leaving);
    s += &hist_line("at data servers (all)", at_servers);
    if !st.jobs.is_empty() {
        s += "  per job:\n";
        for j in &st.jobs {
            s += &format!(
                "    {:<24} {:>10} requests {:>10}\n",
                j.job,
                j.requests,
                tessera_client::proto::units::format_size(j.bytes)
            );
        }
    }
    s
}

async fn status(c: &Client, n: usize, watch: bool, json: bool) -> anyhow::Result<()> {
    let render = |all: &[FsResult<IonStatus>], at: &SizeHistogram| -> String {
        if json {
            return json_text(c, all, at);
        }
        all.iter()
            .enumerate()
            .map(|(k, st)| match st {
                Ok(st) => status_text(st, at),
                Err(e) => format!("{}: {e}\n", c.config().ion[k].name),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !watch {
        let (all, at) = gather(c, n).await;
        print!("{}", render(&all, &at));
        return if all.iter().any(|s| s.is_err()) {
            Err(anyhow!("some forwarding nodes did not answer"))
        } else {
            Ok(())
        };
    }
    crate::watch::every_second(|| async {
        let (all, at) = gather(c, n).await;
        render(&all, &at)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_client::proto::msg::IonJob;

    #[test]
    fn status_text_shows_what_the_issue_asks() {
        let mut st = IonStatus {
            name: "ion0".into(),
            scheduler: "twins".into(),
            window_us: 125,
            quantum: 8,
            queues: vec![("ds 0".into(), 3), ("ds 1".into(), 0)],
            requests_forwarded: 10,
            bytes_forwarded: 10 << 20,
            median_interarrival_us: Some(42),
            jobs: vec![IonJob { job: "j1".into(), requests: 10, bytes: 10 << 20 }],
            ..Default::default()
        };
        st.sizes_arriving.record(32 << 10);
        let t = status_text(&st, &SizeHistogram::default());
        for want in ["scheduler twins", "window 0.125 ms", "queued 3", "[ds 0: 3]", "10K-100K:1", "42 µs", "j1"] {
            assert!(t.contains(want), "{want:?} missing from:\n{t}");
        }
    }
}
