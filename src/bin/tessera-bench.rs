//! `tessera-bench`: IOR-like benchmarks and experiments.
fn main() -> std::process::ExitCode {
    tessera_bench::main_entry()
}
