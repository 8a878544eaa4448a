//! `tessera-mds`: the metadata server.
fn main() -> std::process::ExitCode {
    tessera_mds::main_entry()
}
