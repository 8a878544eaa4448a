//! `tessera-bench`: IOR-like benchmarks, the papers' experiments, simulators and robustness tools.
//!
//! Common tools:
pub mod backend; // the I/O API tasks drive: Tessera client library or POSIX std::fs
pub mod cli; // the `tessera-bench` command line and entry point
pub mod ior; // `ior`: options, per-task offsets for each pattern, verification pattern, timed phases
pub mod localcluster; // a local MDS + data servers as child processes, with edited configs, for experiments
pub mod locks; // `locks`: fcntl lock/unlock, F_GETLK and cross-mount hand-over rates through a mount
pub mod mdtest; // `mdtest`: create/stat/remove rates
pub mod net; // `net`: the QUIC + TLS transport alone against sink servers, like lnet_selftest
pub use tessera_plots::figures as plots; // PNG figures (grouped bars, lines, LBA scatter, histograms)
pub mod report; // IOR/mdtest-style text, summary statistics, CSV and JSON results

// The experiments, one module per paper, and their registry:
pub mod experiments; // `experiment NAME`: names, arguments, output files, dispatch to the papers' modules
pub mod forwarding; // `experiment fwd-*`: the forwarding thesis (schedulers, IONs, TWINS windows, two apps)
pub mod iorchestrator; // `experiment iorch-*`: IOrchestrator's figures, its five workloads, LBA traces
pub mod persched; // `persched sim` (the paper's Table 4 from the planner, tessera-persched), `persched job`, `experiment persched-live`
pub mod tarazu; // `experiment placement-tarazu`: OST cost and bandwidth of the placement policies on 7 servers × 5 targets

// Models and robustness:
pub mod model; // the parametric I/O model (pure): client → forwarding node → data server → disk; `model fit|replay|what-if`
pub mod robustness; // `chaos` (the crash soak) and `fuzz` (the network fuzzer)

pub use cli::main_entry;
