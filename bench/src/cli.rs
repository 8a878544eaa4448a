//! The `tessera-bench` command line: one subcommand per benchmark, run on a multi-thread tokio runtime.

use crate::iorchestrator::workloads;
use crate::model::cmd as modelcmd;
use crate::robustness::{chaos, failover, fuzz};
use crate::{experiments, ior, locks, mdtest, net, persched};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "tessera-bench",
    version,
    about = "Tessera benchmarks: IOR-like workloads, metadata rates, paper workloads, experiments and fuzzing"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// IOR-like bandwidth benchmark (IOR's option letters).
    Ior(ior::IorArgs),
    /// mdtest-like metadata benchmark: file create, stat and remove rates.
    Mdtest(mdtest::MdtestArgs),
    /// One of the IOrchestrator paper's benchmarks (mpi-io-test, ior-mpi-io, noncontig, hpio, mpi-tile-io).
    Workload(workloads::WorkloadArgs),
    /// What file locks cost through a mount: fcntl lock+unlock and F_GETLK rates, and (with --other, the
    /// same file through another mount) a write lock handed back and forth between two client nodes.
    Locks(locks::LocksArgs),
    /// The transport alone (like lnet_selftest): bulk RPCs to sink server processes, MiB/s and CPU per MiB.
    Net(net::NetArgs),
    /// Crash soak: writers with fsync while random servers are killed (SIGKILL) and restarted; every fsync'ed
    /// byte is read back and fsck run after each round; then a full target (ENOSPC).
    Chaos(chaos::ChaosArgs),
    /// Metadata failover: the leading metadata replica killed (or paused) under mdtest and a probe; time
    /// to a new leader, time without service, and that nothing acknowledged is lost (fsck clean).
    Failover(failover::FailoverArgs),
    /// Structured fuzzing of a server over QUIC + mutual TLS: N mutated frames; reports whether it stayed
    /// up, the answers a well-behaved client got meanwhile, and its memory.
    Fuzz(fuzz::FuzzArgs),
    /// Reproduce a figure: starts a local cluster, runs the comparison, writes results/NAME.{csv,json,png}.
    Experiment(experiments::ExperimentArgs),
    /// Periodic I/O scheduling (PerSched): `sim` reproduces the paper's Table 4 from the model; `job` runs a
    /// periodic IOR-like job.
    Persched(persched::PerschedArgs),
    /// Parametric I/O model (client → forwarding node → data server → disk): `fit` to benchmark runs or
    /// counter logs, `replay` a job's counter log, `what-if` with a changed parameter.
    Model(modelcmd::ModelArgs),
}

/// Parses the command line, runs the benchmark on a multi-thread tokio runtime, maps errors to exit code 1.
pub fn main_entry() -> ExitCode {
    let cli = Cli::parse();
    let Some(rt) = tessera_ops::daemon::start("tessera-bench") else { return ExitCode::FAILURE };
    let res = rt.block_on(async {
        match cli.cmd {
            Cmd::Ior(a) => ior::run(a).await,
            Cmd::Mdtest(a) => mdtest::run(a).await,
            Cmd::Workload(a) => workloads::run(a).await,
            Cmd::Experiment(a) => run_experiment(a).await,
            Cmd::Net(a) => net::run(a).await,
            Cmd::Locks(a) => locks::run(a).await,
            Cmd::Chaos(a) => chaos::run(a).await,
            Cmd::Failover(a) => failover::run(a).await,
            Cmd::Fuzz(a) => fuzz::run(a).await,
            Cmd::Persched(a) => persched::run(a).await,
            Cmd::Model(a) => modelcmd::run(a).await,
        }
    });
    // Tasks abandoned at a barrier after another task failed must not hold up the exit.
    rt.shutdown_background();
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `tessera-bench experiment`, the registry's dispatch: each experiment goes to its paper's module; `--replot`
/// redraws OUT/NAME.png from OUT/NAME.json.
async fn run_experiment(a: experiments::ExperimentArgs) -> anyhow::Result<()> {
    use crate::{forwarding, iorchestrator, persched, tarazu};
    use anyhow::Context;
    use experiments::ExperimentName;
    let fwd = forwarding::Experiment::of(a.name);
    if a.replot {
        let name = a.name.as_str();
        let json = a.out.join(format!("{name}.json"));
        let text = std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?;
        let png = a.out.join(format!("{name}.png"));
        match fwd {
            Some(e) => forwarding::plot(e, &serde_json::from_str::<Vec<forwarding::FwdRecord>>(&text)?, &png)?,
            None if a.name == ExperimentName::PlacementTarazu => {
                tarazu::replot(&a.out, &serde_json::from_str::<Vec<tarazu::TarazuRecord>>(&text)?)?
            }
            None if a.name == ExperimentName::PerschedLive => {
                persched::live::plot(&serde_json::from_str::<Vec<persched::live::LiveRecord>>(&text)?, &png)?
            }
            None => {
                let records: Vec<iorchestrator::Record> = serde_json::from_str(&text)?;
                let device = records.first().map(|r| r.device_model.clone()).unwrap_or_default();
                iorchestrator::plot(a.name, &records, &png, &device)?
            }
        }
        println!("wrote {}", png.display());
        return Ok(());
    }
    match a.name {
        _ if fwd.is_some() => forwarding::run(fwd.expect("checked"), &a).await,
        ExperimentName::PlacementTarazu => tarazu::run(&a).await,
        ExperimentName::PerschedLive => persched::live::run(&a).await,
        _ => iorchestrator::run(&a).await,
    }
}
