//! The `tessera` command-line tool: file operations, `tessera up`, certificates (`tessera ca`).

/// Command line, entry point and the file, CA and orchestrator commands.
pub mod commands;
/// `tessera ion status|scheduler`: forwarding nodes' state and scheduler switch.
pub mod ion;
/// `tessera report --out`: the report's PNG plots.
pub mod jobplots;
/// `tessera jobstats` and `tessera report`: per-job counters and I/O characterisation.
pub mod jobreport;
/// Progress bars for long transfers.
pub mod progress;
/// What `tessera up` decides as a supervisor (restart policy) and the status file `tessera status` reads.
pub mod supervise;
/// `tessera up`: a whole cluster on loopback as supervised child processes, until Ctrl-C.
pub mod up;
/// `--watch`: a status redrawn every second until Ctrl-C.
pub mod watch;

pub use commands::main_entry;
