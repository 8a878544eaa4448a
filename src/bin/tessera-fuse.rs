//! `tessera-fuse`: mounts Tessera through FUSE.
fn main() -> std::process::ExitCode {
    tessera_fuse::main_entry()
}
