//! Start-up shared by every Tessera binary: logging and the async runtime.

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). A second call is harmless.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// The multi-thread tokio runtime every binary runs on; the error names the program.
pub fn runtime(program: &str) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("{program}: cannot start the async runtime: {e}"))
}
