//! `tessera-ion`: a forwarding node.
fn main() -> std::process::ExitCode {
    tessera_ion::main_entry()
}
