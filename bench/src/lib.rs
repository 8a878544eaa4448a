//! `tessera-bench`: IOR-like benchmarks and experiments.

pub mod backend; // the I/O API tasks drive: Tessera client library or POSIX std::fs
pub mod chaos; // `chaos`: the crash soak (kill -9 of random servers under fsync'ed writers, read back, fsck, ENOSPC)
pub mod cli; // the `tessera-bench` command line and entry point
pub mod experiment; // `experiment`: IOrchestrator figures on a local cluster it starts (CSV/JSON/PNG in results/)
pub mod fuzz; // `fuzz`: mutated frames over real QUIC + mutual TLS to a running server, which must stay up and bounded
pub mod fwd; // `experiment fwd-*`: the forwarding thesis's experiments (schedulers, IONs, TWINS windows, two apps)
pub mod ior; // `ior`: options, per-task offsets for each pattern, verification pattern, timed phases
pub mod localcluster; // a local MDS + data servers as child processes, with edited configs, for experiments
pub mod mdtest; // `mdtest`: create/stat/remove rates
pub mod model; // the parametric I/O model (pure): client → forwarding node → data server → disk, fit/replay/what-if
pub mod modelcmd; // `model fit|replay|what-if`: benchmark runs on a local cluster, counter logs, the model's errors
pub mod net; // `net`: the QUIC + TLS transport alone against sink servers, like lnet_selftest
pub mod persched; // `persched sim`: the PerSched paper's Table 4 from the model (planner in tessera-mds)
pub mod perschedlive; // `persched job` (the periodic IOR-like job) and `experiment persched-live`
pub use tessera_plots::figures as plots; // PNG figures (grouped bars, lines, LBA scatter, histograms)
pub mod report; // IOR/mdtest-style text, summary statistics, JSON results
pub mod tarazu; // `experiment placement-tarazu`: OST cost and bandwidth of the placement policies on 7 servers × 5 targets
pub mod trace; // lba-trace.csv parsing: LBA over time and reuse distances per program
pub mod workloads; // `workload`: the IOrchestrator paper's five benchmarks as access plans, and their runner

pub use cli::main_entry;
