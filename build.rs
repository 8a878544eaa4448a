//! Which of the cross-process tests in `tests/` can run where they are built (issue 35): a test that needs
//! FUSE or root is marked `#[cfg_attr(not(tessera_fuse), ignore = "...")]` and counted as ignored by the
//! test runner where it cannot run, instead of passing without running.
//!
//! - `tessera_fuse`: `/dev/fuse` exists and the build runs as root (direct mount(2)) or `fusermount3` is on
//!   the PATH.
//! - `tessera_root`: the build runs as root (mounting a tmpfs, switching users).
//!
//! `TESSERA_FUSE_TESTS=1` (or `0`) forces `tessera_fuse` on (off). The probe runs at build time: after
//! becoming root or installing fuse3 without a rebuild, `touch build.rs` (CI builds fresh).

use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tessera_fuse)");
    println!("cargo::rustc-check-cfg=cfg(tessera_root)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=/dev/fuse");
    println!("cargo::rerun-if-env-changed=TESSERA_FUSE_TESTS");
    let root = effective_uid() == Some(0);
    let fuse = match std::env::var("TESSERA_FUSE_TESTS").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => Path::new("/dev/fuse").exists() && (root || on_path("fusermount3")),
    };
    if fuse {
        println!("cargo::rustc-cfg=tessera_fuse");
    }
    if root {
        println!("cargo::rustc-cfg=tessera_root");
    }
}

/// The effective user id, from `/proc/self/status` (`Uid: real effective saved fs`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}
