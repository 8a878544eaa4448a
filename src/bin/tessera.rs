//! `tessera`: the command-line tool (see `tessera --help`).
fn main() -> std::process::ExitCode {
    tessera_cli::main_entry()
}
