//! Leases on names and attributes and their recalls (issue 38), through two mounts (two client nodes):
//! mount A's kernel caches what it looked up (its metadata through a forwarding node) for as long as its lease lasts (seconds, not the 1 s of an
//! uncached mount), and every change mount B makes — attributes (chmod, chown, times, size by a write
//! and by truncate), names (create, unlink, rename, link, mkdir/rmdir) and data — is seen by A at once,
//! with no wait: the MDS recalls A's copy before it answers B. A mount without leases
//! (`-o nocache_leases`) is the control: its kernel serves the stale answer, which shows the checks can
//! tell. A stopped mount (SIGSTOP) holds B's change up until its lease ends, no longer. Ignored where the
//! build found no FUSE (build.rs).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_ops::clusterdir::Shape;
use tessera_test_support::mount::{require_fuse, require_root, Mount};
use tessera_test_support::Cluster;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Stats every path through mount `m` twice (the kernel caches them).
fn warm(paths: &[&Path]) {
    for _ in 0..2 {
        for p in paths {
            let _ = std::fs::symlink_metadata(p);
        }
    }
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_changes_through_one_mount_recall_what_another_caches() {
    require_fuse();
    require_root();
    // Metadata through a forwarding node: the recall channel passes it like any other call.
    let cluster = Cluster::start_shape(Shape { ds: 2, ion: 1, ..Shape::default() }, Default::default());
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let control = Mount::with_args(&cluster, "c", &["-o", "nocache_leases"]);
    std::fs::create_dir(b.p("d")).unwrap();
    std::fs::write(b.p("d/f"), b"0123456789").unwrap();
    std::fs::set_permissions(b.p("d/f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(b.p("d/x"), b"x").unwrap();
    std::thread::sleep(Duration::from_millis(300));

    // Attributes: mode, owner, times, size.
    let (fa, fb, fc) = (a.p("d/f"), b.p("d/f"), control.p("d/f"));
    warm(&[&fa, &fc]);
    assert_eq!(mode(&fa), 0o644);
    let t0 = Instant::now();
    std::fs::set_permissions(&fb, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(mode(&fa), 0o600, "A served its cached mode after B's chmod returned");
    if t0.elapsed() < Duration::from_millis(500) {
        // The control: an uncached mount's kernel still has the old mode for its 1 s.
        assert_eq!(mode(&fc), 0o644, "the control mount's kernel did not cache: the check above cannot fail");
    }
    warm(&[&fa]);
    std::os::unix::fs::chown(&fb, Some(1234), Some(4321)).unwrap();
    let m = std::fs::metadata(&fa).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 4321), "chown through B");
    warm(&[&fa]);
    let out = Command::new("touch").args(["-m", "-d", "2001-02-03 04:05:06"]).arg(&fb).status().unwrap();
    assert!(out.success());
    assert_eq!(std::fs::metadata(&fa).unwrap().mtime(), std::fs::metadata(&fb).unwrap().mtime(), "mtime set through B");
    warm(&[&fa]);
    std::fs::OpenOptions::new().append(true).open(&fb).unwrap().write_all(b"abc").unwrap();
    assert_eq!(std::fs::metadata(&fa).unwrap().len(), 13, "size after B's write and close");
    warm(&[&fa]);
    std::fs::OpenOptions::new().write(true).open(&fb).unwrap().set_len(4).unwrap();
    assert_eq!(std::fs::metadata(&fa).unwrap().len(), 4, "size after B's truncate");

    // Data: A read the file; B rewrites it; A reads it again.
    assert_eq!(std::fs::read(&fa).unwrap(), b"0123");
    std::fs::write(&fb, b"abcd").unwrap();
    assert_eq!(std::fs::read(&fa).unwrap(), b"abcd", "A read its old data after B's close");

    // Names: removed, created, renamed, linked, directories.
    let (xa, xb) = (a.p("d/x"), b.p("d/x"));
    warm(&[&xa, &a.p("d/y"), &a.p("d/z")]);
    assert!(exists(&xa));
    std::fs::rename(&xb, b.p("d/y")).unwrap();
    assert!(!exists(&xa), "A still found the name B renamed away");
    assert!(exists(&a.p("d/y")), "A did not find the name B renamed to");
    warm(&[&a.p("d/y")]);
    std::fs::hard_link(b.p("d/y"), b.p("d/z")).unwrap();
    assert!(exists(&a.p("d/z")));
    assert_eq!(std::fs::metadata(a.p("d/y")).unwrap().nlink(), 2, "A's cached link count after B's link");
    warm(&[&a.p("d/y"), &a.p("d/z")]);
    std::fs::remove_file(b.p("d/y")).unwrap();
    assert!(!exists(&a.p("d/y")), "A still found the name B removed");
    assert_eq!(std::fs::metadata(a.p("d/z")).unwrap().nlink(), 1, "A's cached link count after B's unlink");
    warm(&[&a.p("d/sub")]);
    std::fs::create_dir(b.p("d/sub")).unwrap();
    assert!(a.p("d/sub").is_dir());
    let nlink = std::fs::metadata(a.p("d")).unwrap().nlink();
    warm(&[&a.p("d/sub"), &a.p("d")]);
    std::fs::remove_dir(b.p("d/sub")).unwrap();
    assert!(!exists(&a.p("d/sub")), "A still found the directory B removed");
    assert_eq!(std::fs::metadata(a.p("d")).unwrap().nlink(), nlink - 1, "A's cached parent after B's rmdir");
    // Past the kernel's own timeouts (they end with the lease, 5 s): A's mount answers from what it holds
    // leased, and B's change recalls that too.
    warm(&[&a.p("d/z")]);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(mode(&a.p("d/z")), 0o644, "A's answer from its own cache");
    std::fs::set_permissions(b.p("d/z"), std::fs::Permissions::from_mode(0o604)).unwrap();
    assert_eq!(mode(&a.p("d/z")), 0o604, "A's mount served its cached mode after B's chmod");
    std::fs::remove_file(b.p("d/z")).unwrap();
    assert!(!exists(&a.p("d/z")), "A's mount served a name B removed");
    std::fs::write(b.p("d/z"), b"z").unwrap();
    std::fs::set_permissions(b.p("d/z"), std::fs::Permissions::from_mode(0o644)).unwrap();
    // And the other way round: B's cache is recalled by A's changes.
    warm(&[&b.p("d/z")]);
    std::fs::set_permissions(a.p("d/z"), std::fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(mode(&b.p("d/z")), 0o640);
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_a_stopped_mount_holds_changes_up_only_until_its_lease_ends() {
    require_fuse();
    require_root();
    let cluster = Cluster::start_shape(Shape { ds: 1, ..Shape::default() }, Default::default());
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::write(b.p("f"), b"x").unwrap();
    std::fs::set_permissions(b.p("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    warm(&[&a.p("f")]);
    assert_eq!(mode(&a.p("f")), 0o644);
    let pid = a.child.as_ref().expect("mount A runs as a child").id();
    assert!(Command::new("kill").args(["-STOP", &pid.to_string()]).status().unwrap().success());
    let t0 = Instant::now();
    std::fs::set_permissions(b.p("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let held = t0.elapsed();
    assert!(Command::new("kill").args(["-CONT", &pid.to_string()]).status().unwrap().success());
    // A's kernel may serve its cached mode until A's lease ends, so B waits that long (5 s), no longer.
    assert!(held >= Duration::from_secs(2), "B's chmod did not wait for the stopped mount's lease ({held:?})");
    assert!(held < Duration::from_secs(12), "B's chmod waited {held:?}");
    assert_eq!(mode(&a.p("f")), 0o600, "A's lease ended: its kernel asks again");
}
