//! The experiment registry of `tessera-bench experiment NAME`: the experiments' names, what they are
//! asked for on the command line (shared by every paper's module) and their output files. The dispatch to
//! each paper's module (`iorchestrator/`, `forwarding/`, `tarazu/`, `persched/`) is the command line's
//! (`crate::cli`), so no paper's module and the registry import each other.

use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};
use tessera_proto::config::DeviceKind;
use tessera_proto::units::parse_size;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExperimentName {
    /// Figs. 2/5/6: two instances of each benchmark, read and write (barrier; collective, no-barrier).
    IorchHomogeneous,
    /// Fig. 7: mpi-io-test + noncontig(nc) + hpio(nc) together; off, even, iorchestrator.
    IorchHeterogeneous,
    /// Fig. 8: two mpi-io-test instances whose files are 0/10/20/30 GB apart on the emulated disk.
    IorchDistance,
    /// Fig. 9: scheduling window 125/250/500/1000 ms.
    IorchWindow,
    /// Figs. 3/4 only: LBA over time and reuse distances at one data server, off vs on.
    IorchTrace,
    /// Forwarding thesis: no forwarding and every ION scheduler, 3 patterns, reads and writes, 32/256 KiB.
    FwdSchedulers,
    /// Forwarding thesis: 1, 2 and 4 IONs with no forwarding, FIFO, HBRR and TWINS.
    FwdIons,
    /// Forwarding thesis: TWINS windows 0.125 / 1 / 8 ms against no forwarding and FIFO.
    FwdTwinsWindow,
    /// Forwarding thesis: two applications of half the processes each, small strided reads.
    FwdTwoApps,
    /// Tarazu: OST cost and bandwidth of round-robin, lustre and balanced placement, 7 servers × 5 targets.
    PlacementTarazu,
    /// PerSched live: periodic jobs at once under PerSched and no scheduler, SysEff/UB and Dilation (Fig. 6).
    PerschedLive,
}

impl ExperimentName {
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentName::IorchHomogeneous => "iorch-homogeneous",
            ExperimentName::IorchHeterogeneous => "iorch-heterogeneous",
            ExperimentName::IorchDistance => "iorch-distance",
            ExperimentName::IorchWindow => "iorch-window",
            ExperimentName::IorchTrace => "iorch-trace",
            ExperimentName::FwdSchedulers => "fwd-schedulers",
            ExperimentName::FwdIons => "fwd-ions",
            ExperimentName::FwdTwinsWindow => "fwd-twins-window",
            ExperimentName::FwdTwoApps => "fwd-two-apps",
            ExperimentName::PlacementTarazu => "placement-tarazu",
            ExperimentName::PerschedLive => "persched-live",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Barrier between I/O calls (Fig. 2).
    Barrier,
    /// Barrier and collective I/O (Fig. 5).
    Collective,
    /// Neither (Fig. 6).
    NoBarrier,
}

impl Variant {
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Variant::Barrier => "",
            Variant::Collective => " [collective]",
            Variant::NoBarrier => " [no barrier]",
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct ExperimentArgs {
    #[arg(value_enum)]
    pub name: ExperimentName,
    /// Scaled down to finish in under two minutes (shorter runs, smaller files, 1 run unless --runs).
    #[arg(long)]
    pub quick: bool,
    /// The data servers' device: hdd (the emulated disk) or none (this machine's).
    #[arg(long, default_value = "hdd")]
    pub device_model: DeviceKind,
    /// Repetitions of each configuration (medians are reported); default 3, 1 with --quick.
    #[arg(long)]
    pub runs: Option<u32>,
    /// Output directory.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
    /// Data servers (default: 6, the IOrchestrator paper's; 4 for the forwarding experiments).
    #[arg(long)]
    pub n_ds: Option<usize>,
    /// Processes per program (default: 5, the IOrchestrator paper's; 128 for the forwarding experiments).
    #[arg(long)]
    pub procs: Option<usize>,
    /// Forwarding experiments: client instances the processes are spread over (each its own client id
    /// and connection; default 32, the thesis's 32 nodes).
    #[arg(long)]
    pub clients: Option<usize>,
    /// Seconds each configuration runs (default 15; --quick 2.5).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Size of each program's file (default 1g; --quick 128m). placement-tarazu: the capacity of each
    /// storage target, the paper's 10 GB scaled (default 128m; --quick 32m).
    #[arg(long, value_parser = parse_size)]
    pub file_size: Option<u64>,
    /// Capacity of the emulated disk in GB: the seek curve spans it, so it sets what a distance between
    /// files costs. Default: the paper's testbed disk (Seagate Barracuda 7200.10, 150 GB); 0 keeps the
    /// cluster configuration's default.
    #[arg(long, default_value_t = PAPER_DISK_GB)]
    pub disk_gb: f64,
    /// Benchmarks of iorch-homogeneous (default: all five).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub benchmarks: Vec<Kind>,
    /// Variants of iorch-homogeneous (default: barrier with --quick, all three otherwise).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub variants: Vec<Variant>,
    /// Forwarding experiments: merged requests each forwarding node has at the data servers at once
    /// (`ion_options.dispatch_depth`; default: the configuration's, 64).
    #[arg(long)]
    pub dispatch_depth: Option<u32>,
    /// Forwarding experiments: the emulated disk's elevator (`ds_options.hdd.elevator`): clook (default)
    /// or fifo (arrival order, as a server issuing one I/O at a time would have).
    #[arg(long)]
    pub hdd_elevator: Option<tessera_proto::config::Elevator>,
    /// Only redraw OUT/NAME.png from OUT/NAME.json (no cluster, no runs).
    #[arg(long)]
    pub replot: bool,
    /// Operations of iorch-homogeneous (default: read and write).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub ops: Vec<Op>,
    /// placement-tarazu: only these workloads (default: all; --quick: ior-fpp-32g and hacc-io).
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// persched-live: only these schedulers (default: persched, online-syseff, online-dilation, none).
    #[arg(long, value_delimiter = ',')]
    pub schedulers: Vec<String>,
}

/// The paper's data-server disk (Section IV: Seagate Barracuda 7200.10, 150 GB). Fig. 8's distances are
/// on it: 30 GB is a fifth of its stroke. On the model's 500 GB default disk 30 GB is 6% of the stroke,
/// a 3.5 ms instead of a 6.4 ms seek, and vanilla lost only ~30% at 30 GB instead of the paper's 48%.
pub const PAPER_DISK_GB: f64 = 150.0;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    MpiIoTest,
    IorMpiIo,
    Noncontig,
    Hpio,
    MpiTileIo,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::MpiIoTest, Kind::IorMpiIo, Kind::Noncontig, Kind::Hpio, Kind::MpiTileIo];

    /// The name used in results; noncontig and hpio are the paper's non-contiguous file variants.
    pub fn label(self) -> &'static str {
        match self {
            Kind::MpiIoTest => "mpi-io-test",
            Kind::IorMpiIo => "ior-mpi-io",
            Kind::Noncontig => "noncontig(nc)",
            Kind::Hpio => "hpio(nc)",
            Kind::MpiTileIo => "mpi-tile-io",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// Writes OUT/NAME.json (the records) and OUT/NAME.csv (`csv`): every experiment's output files.
pub(crate) fn write_outputs<T: Serialize>(out: &Path, name: &str, records: &[T], csv: &str) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    crate::report::write_json(&out.join(format!("{name}.json")), &records)?;
    let path = out.join(format!("{name}.csv"));
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))
}

/// The distinct values, in the order first seen (the groups and series of a figure).
pub(crate) fn uniq<S: AsRef<str>>(it: impl Iterator<Item = S>) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for x in it {
        if !v.iter().any(|y| y == x.as_ref()) {
            v.push(x.as_ref().to_string());
        }
    }
    v
}
