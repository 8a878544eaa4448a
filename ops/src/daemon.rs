//! Start-up shared by every Tessera binary: the allocator's settings, logging and the async runtime; and
//! the load of this process (CPU and memory shares from procfs).

use std::time::{Duration, Instant};

/// Largest allocation that glibc serves from its heaps instead of a fresh `mmap` (its maximum, 32 MiB on
/// 64-bit): write-behind chunks (8 MiB), read-ahead units and request payloads (1-4 MiB) fall below it.
pub const HEAP_ALLOCATION_MAX: usize = 32 << 20;
/// Free memory a glibc heap keeps for reuse before it gives some back to the kernel.
pub const HEAP_KEEP: usize = 256 << 20;

/// Makes glibc recycle the large buffers the data path allocates and frees at a high rate, instead of
/// mapping fresh memory for each one and unmapping it after use. Every fresh page costs a fault and
/// zeroing: on the 2-core VM of `results/core`, a 512 MiB mount write made 30,000-44,000 faults in the
/// mount and as many in the data servers. By default glibc does that for blocks above 128 KiB until a
/// free of a mapped block raises its threshold, and trims any heap with more than twice that threshold
/// free at its top. Settings a user gives in `GLIBC_TUNABLES` win. No effect on other C libraries.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
        // SAFETY: mallopt only changes allocator parameters; it is called before the program starts threads.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_ALLOCATION_MAX as libc::c_int);
            libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_KEEP as libc::c_int);
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`; openraft's own log off: a replica logs its
/// leadership changes itself, and openraft warns several times a second while a replica is down). A second
/// call is harmless.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=off"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// The multi-thread tokio runtime every binary runs on; the error names the program.
/// What every binary does first: the allocator settings, logging, and its async runtime (`None`, with
/// the reason printed, if the runtime cannot start).
pub fn start(program: &str) -> Option<tokio::runtime::Runtime> {
    tune_allocator();
    init_logging();
    runtime(program).map_err(|e| eprintln!("{}", tessera_proto::error::chain(&e))).ok()
}

pub fn runtime(program: &str) -> Result<tokio::runtime::Runtime, RuntimeError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| RuntimeError { program: program.to_string(), source })
}

/// The async runtime did not start ([`runtime`]).
#[derive(Debug, thiserror::Error)]
#[error("{program}: cannot start the async runtime")]
pub struct RuntimeError {
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far.
    fn thread_faults() -> i64 {
        // SAFETY: getrusage writes into the zeroed struct we pass.
        unsafe {
            let mut u: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut u);
            u.ru_minflt
        }
    }

    /// Touches every page of a fresh 8 MiB block and frees it; returns the faults that took.
    fn faults_of_a_fresh_block() -> i64 {
        let before = thread_faults();
        let mut v: Vec<u8> = Vec::with_capacity(8 << 20);
        v.resize(8 << 20, 1);
        std::hint::black_box(&v);
        drop(v);
        thread_faults() - before
    }

    #[test]
    fn large_blocks_are_reused_without_faulting_again() {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return; // The user's settings apply instead.
        }
        tune_allocator();
        faults_of_a_fresh_block(); // The heap grows once.
        let again = faults_of_a_fresh_block();
        // Mapped afresh each time, the block would fault on each of its 2,048 pages.
        assert!(again < 200, "an 8 MiB block re-allocated after a free faulted {again} times");
    }
}

// ---- Load of this process (the MDS's placement deferral, the data servers' reports) ----

/// This process's share of the machine's CPU since the previous sample, and of its memory, from procfs
/// (`None` where procfs is missing).
#[derive(Default)]
pub struct LoadProbe {
    last: Option<(Instant, f64)>,
    cpu: f64,
    memory: f64,
    /// Reports `cpu` and `memory` as given, never sampling ([`LoadProbe::fixed`]).
    fixed: bool,
}

impl LoadProbe {
    /// A probe that always reports these shares (tests of what load changes).
    pub fn fixed(cpu: f64, memory: f64) -> LoadProbe {
        LoadProbe { last: None, cpu, memory, fixed: true }
    }

    /// Samples at most once a second; returns the latest (cpu, memory) shares.
    pub fn sample(&mut self, now: Instant) -> (f64, f64) {
        if self.fixed || self.last.is_some_and(|(at, _)| now.duration_since(at) < Duration::from_secs(1)) {
            return (self.cpu, self.memory);
        }
        if let Some(busy) = process_cpu_seconds() {
            if let Some((at, before)) = self.last {
                let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
                let wall = now.duration_since(at).as_secs_f64();
                self.cpu = ((busy - before) / (wall * cores)).clamp(0.0, 1.0);
            }
            self.last = Some((now, busy));
        }
        self.memory = memory_share().unwrap_or(0.0);
        (self.cpu, self.memory)
    }
}

/// User plus system CPU seconds of this process (`/proc/self/stat` fields 14 and 15).
pub fn process_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (f64, f64) = (fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?);
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| (utime + stime) / ticks as f64)
}

/// This process's resident bytes (`/proc/self/statm`).
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|p| pages * p)
}

/// This process's resident memory over the machine's (`/proc/self/statm`, `/proc/meminfo`).
pub fn memory_share() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total_kib: f64 =
        meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    (total_kib > 0.0).then(|| pages * page / (total_kib * 1024.0))
}

/// How every daemon (`tessera-mds`, `tessera-ds`, `tessera-ion`, `tessera-fuse`) takes its configuration:
/// the file (`--config`, else `$TESSERA_CONFIG`), and any of its values over it (`--set KEY=VALUE`).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ConfigArgs {
    /// Cluster configuration file (`tessera up` writes them into its directory).
    #[arg(long, env = tessera_proto::config::CONFIG_ENV, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// A value of the configuration, over the file's (repeatable): a dotted key, e.g.
    /// `--set ds_options.device_model=hdd` or `--set ds.1.data_dir=/data/ds1`; the value is TOML, or a
    /// string when it is not.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

impl ConfigArgs {
    /// The file at `path` with no values set over it.
    pub fn file(path: impl Into<std::path::PathBuf>) -> ConfigArgs {
        ConfigArgs { config: Some(path.into()), set: Vec::new() }
    }

    /// Loads the configuration, the values set over it, and checks it.
    pub fn load(&self) -> Result<tessera_proto::config::ClusterConfig, tessera_proto::config::ConfigError> {
        tessera_proto::config::ClusterConfig::locate_with(self.config.as_deref(), &self.set)
    }
}

#[cfg(test)]
mod load_tests {
    use super::*;

    #[test]
    fn procfs_gives_this_processs_cpu_time_and_memory() {
        assert!(process_cpu_seconds().is_some_and(|s| s >= 0.0));
        assert!(rss_bytes().is_some_and(|b| b > 1 << 20), "a test binary holds more than 1 MiB");
        assert!(memory_share().is_some_and(|m| m > 0.0 && m < 1.0));
    }
}
