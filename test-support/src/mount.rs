//! A real FUSE mount for the cross-process tests: `tessera-fuse` mounted on a temporary directory for the
//! test's lifetime, unmounted (SIGTERM, then a lazy unmount) when dropped.

use crate::cluster::{bin, spawn_ready};
use crate::Cluster;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tessera_ops::child::Child;

/// Runs `sh -c script` as uid/gid (with extra groups) through setpriv (util-linux), as users of a mount
/// other than the one that mounted it; returns (success, stderr).
pub fn as_user(uid: u32, gid: u32, groups: &[u32], script: &str) -> (bool, String) {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={gid}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        cmd.arg(format!("--groups={}", groups.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(",")));
    }
    let out = cmd.args(["sh", "-c", script]).output().expect("setpriv");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Fails the test, with the reason, when FUSE cannot run here: /dev/fuse and either root (direct mount(2))
/// or fusermount3. The tests that call it are marked `#[cfg_attr(not(tessera_fuse), ignore = ...)]` (the
/// root package's build.rs probes the same at build time), so where FUSE is missing they are counted as
/// ignored and never get here; this catches a stale probe (e.g. fuse3 removed since the build).
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "this test needs /dev/fuse (the build found it: rebuild, or set TESSERA_FUSE_TESTS=0 to ignore the FUSE tests)"
    );
    let fusermount =
        Command::new("sh").args(["-c", "command -v fusermount3"]).output().is_ok_and(|o| o.status.success());
    assert!(
        is_root() || fusermount,
        "this test needs root or fusermount3 (the build found one: rebuild, or set TESSERA_FUSE_TESTS=0)"
    );
}

/// Fails the test when not root (for tests marked `#[cfg_attr(not(tessera_root), ignore = ...)]`).
pub fn require_root() {
    assert!(is_root(), "this test needs root (the build ran as root: rebuild as this user)");
}

pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// One mount of a cluster: a client node of its own (its own `tessera-fuse` process, session and caches).
pub struct Mount {
    /// The `tessera-fuse` process (`None` once stopped).
    pub child: Option<Child>,
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mount {
    /// Mounts `cluster` with `--allow-other` and the extra `args`; its log is `fuse-NAME`.
    pub fn with_args(cluster: &Cluster, name: &str, args: &[&str]) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).expect("mount point");
        let child = spawn_ready(
            &format!("tessera-fuse {name}"),
            Command::new(bin("tessera-fuse"))
                .arg(&path)
                .arg("--config")
                .arg(&cluster.files.client_config)
                .arg("--allow-other")
                .args(args),
            &cluster.log(&format!("fuse-{name}")),
        );
        Mount { child: Some(child), path, _dir: dir }
    }

    pub fn new(cluster: &Cluster, name: &str) -> Mount {
        Mount::with_args(cluster, name, &[])
    }

    /// `rel` under the mount point.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// SIGTERM and wait for a clean exit (the mount must be gone afterwards); panics otherwise.
    pub fn unmount(&mut self) {
        if let Some(mut c) = self.child.take() {
            let st = c.stop(Duration::from_secs(15));
            if st.killed {
                lazy_umount(&self.path);
                panic!("tessera-fuse did not exit on SIGTERM");
            }
            let st = st.status.expect("reaped");
            assert!(st.success(), "tessera-fuse exited with {st}");
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.stop(Duration::from_secs(5));
        }
        lazy_umount(&self.path);
    }
}

/// `umount2(MNT_DETACH)`; not mounted is fine.
pub fn lazy_umount(p: &Path) {
    if let Ok(c) = CString::new(p.as_os_str().as_bytes()) {
        // SAFETY: a valid path; failure (not mounted) is fine.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}
