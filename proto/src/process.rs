//! Start-up shared by every Tessera binary: the allocator's settings, logging and the async runtime.

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

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). A second call is harmless.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// The multi-thread tokio runtime every binary runs on; the error names the program.
/// What every binary does first: the allocator settings, logging, and its async runtime (`None`, with
/// the reason printed, if the runtime cannot start).
pub fn start(program: &str) -> Option<tokio::runtime::Runtime> {
    tune_allocator();
    init_logging();
    runtime(program).map_err(|e| eprintln!("{e}")).ok()
}

pub fn runtime(program: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("{program}: cannot start the async runtime: {e}"))
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
