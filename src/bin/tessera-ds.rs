//! `tessera-ds`: a data server.
fn main() -> std::process::ExitCode {
    tessera_ds::main_entry()
}
