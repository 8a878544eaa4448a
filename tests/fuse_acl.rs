//! POSIX ACLs through two mounts (issue 42): `setfacl` through one mount, `getfacl` and access by other
//! users through the other (each mount a client node of its own; data through a forwarding node), the
//! mask and `chmod`'s effect on it, named users and groups, default ACLs inherited by new files and
//! directories instead of the umask, the owner alone may set them, the MDS enforcing them by itself (a
//! mount whose kernel checks nothing), and ACLs surviving an MDS restart and passing `tessera fsck`.
//! Uses the real `setfacl`/`getfacl` (the `acl` package, installed by `.ci/run`) and `setpriv`. Ignored
//! where the build found no FUSE (build.rs).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_ops::clusterdir::Shape;
use tessera_test_support::mount::{as_user, require_fuse, require_root, Mount};
use tessera_test_support::Cluster;

/// Runs `sh -c script` as root; panics unless it succeeds; its stdout.
fn root(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `getfacl` of `p` without header or effective-rights comments, numeric ids; `-d`: the default ACL.
fn getfacl(p: &Path, default: bool) -> String {
    let d = if default { "-d " } else { "" };
    root(&format!("getfacl -n -E -p --omit-header {d}{}", p.display())).trim().to_string()
}

/// Waits (at most 5 s: the other mount's kernel may keep attributes and ACLs for its 1 s cache time)
/// until `probe` says `want`; returns whether it did.
fn eventually(want: bool, probe: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if probe() == want {
            return true;
        }
        if t.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The ACL of `p` becomes `want` (through another mount than the change: within its cache time).
fn assert_acl(p: &Path, want: &str) {
    eventually(true, || getfacl(p, false) == want);
    assert_eq!(getfacl(p, false), want);
}

fn can(uid: u32, groups: &[u32], script: &str) -> bool {
    as_user(uid, uid, groups, script).0
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_acls_hold_across_mounts_with_mask_inheritance_and_chmod() {
    require_fuse();
    require_root();
    let mut cluster = Cluster::start_shape(Shape { ds: 2, ion: 1, ..Shape::default() }, Default::default());
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let (pa, pb) = (a.p("proj"), b.p("proj"));
    let (fa, fb) = (a.p("proj/f"), b.p("proj/f"));
    root(&format!(
        "mkdir -m 0750 {0} && echo data > {1} && chmod 0640 {1} && chown -R 1000:1000 {0}",
        pa.display(),
        fa.display()
    ));
    let read_f = format!("cat {} >/dev/null", fb.display());

    // Without an ACL: uid 1001 (not in group 1000) cannot even enter the directory.
    assert!(!can(1001, &[], &read_f));
    assert!(getfacl(&fb, false).ends_with("other::---"), "{}", getfacl(&fb, false));

    // A named user, through mount A; read through mount B.
    root(&format!("setfacl -m u:1001:rx {} && setfacl -m u:1001:r {}", pa.display(), fa.display()));
    assert!(eventually(true, || can(1001, &[], &read_f)), "u:1001:r set through A does not let 1001 read through B");
    assert_acl(&fb, "user::rw-\nuser:1001:r--\ngroup::r--\nmask::r--\nother::---");
    assert!(root(&format!("ls -ld {}", fb.display())).split_whitespace().next().unwrap().ends_with('+'));
    assert!(!can(1001, &[], &format!("echo x >> {}", fb.display())), "r-- does not grant writing");
    assert!(!can(1003, &[], &read_f), "an unnamed user gets other's bits");
    // A change through A reaches getfacl through B with nothing there checking permissions on the file
    // (the kernel keeps an inode's ACL until its own permission check refreshes the attributes; the
    // mount drops it when fresh attributes show a change).
    root(&format!("setfacl -m u:1001:rw {}", fa.display()));
    assert_acl(&fb, "user::rw-\nuser:1001:rw-\ngroup::r--\nmask::rw-\nother::---");
    root(&format!("setfacl -m u:1001:r {}", fa.display()));
    assert_acl(&fb, "user::rw-\nuser:1001:r--\ngroup::r--\nmask::r--\nother::---");

    // The mask: chmod's group bits are the mask (ACL entries stay, their effect goes), and back.
    root(&format!("chmod 0600 {}", fa.display()));
    assert!(eventually(false, || can(1001, &[], &read_f)), "a mask of --- still lets the named user read");
    assert_acl(&fb, "user::rw-\nuser:1001:r--\ngroup::r--\nmask::---\nother::---");
    root(&format!("chmod 0640 {}", fa.display()));
    assert!(eventually(true, || can(1001, &[], &read_f)));
    // setfacl's mask sets the mode's group bits.
    root(&format!("setfacl -m m::rw {}", fa.display()));
    assert!(eventually(true, || root(&format!("stat -c %a {}", fb.display())).trim() == "660"));

    // A named group, for a member by a supplementary group only.
    root(&format!("setfacl -m g:2000:rw {} && setfacl -m g:2000:x {}", fa.display(), pa.display()));
    let append = format!("echo more >> {}", fb.display());
    assert!(eventually(true, || can(1002, &[2000], &append)), "g:2000:rw does not let a member write");
    assert!(!can(1002, &[], &append), "a non-member of 2000 writes");

    // Only the owner (or root) sets ACLs.
    let (ok, err) = as_user(1001, 1001, &[], &format!("setfacl -m u:1001:rwx {}", fb.display()));
    assert!(!ok && err.contains("Operation not permitted"), "a non-owner set an ACL: {err}");

    // Default ACLs: new entries inherit them instead of the umask, directories the default too.
    root(&format!("setfacl -d -m u:1001:rwx {}", pa.display()));
    // (setfacl starts a default ACL from the access ACL's owner, group and other entries.)
    assert_eq!(getfacl(&pb, true), "user::rwx\nuser:1001:rwx\ngroup::r-x\nmask::rwx\nother::---");
    let (ok, err) = as_user(1000, 1000, &[], &format!("umask 077 && echo x > {0}/new && mkdir {0}/sub", pb.display()));
    assert!(ok, "{err}");
    assert_eq!(root(&format!("stat -c %a {}/new", pa.display())).trim(), "660", "umask applied despite a default ACL");
    assert_eq!(getfacl(&a.p("proj/new"), false), "user::rw-\nuser:1001:rwx\ngroup::r-x\nmask::rw-\nother::---");
    assert_eq!(root(&format!("stat -c %a {}/sub", pa.display())).trim(), "770");
    assert_eq!(getfacl(&a.p("proj/sub"), true), getfacl(&pb, true), "a subdirectory inherits the default ACL");
    assert!(can(1001, &[], &format!("echo y >> {}/new", pb.display())), "the inherited u:1001 (mask rw-) cannot write");
    // Where no default ACL is, the umask applies as ever.
    root(&format!("mkdir {0}/plain && chown 1000:1000 {0}/plain && setfacl -k {0}", a.p("").display()));
    let (ok, err) = as_user(1000, 1000, &[], &format!("umask 077 && echo x > {}/plain/g", b.p("").display()));
    assert!(ok, "{err}");
    assert_eq!(root(&format!("stat -c %a {}/plain/g", a.p("").display())).trim(), "600");

    // Removing the ACL leaves the mode; 1001 is back to other's bits.
    root(&format!("setfacl -b {}", fa.display()));
    assert!(eventually(false, || can(1001, &[], &read_f)), "1001 still reads after setfacl -b");
    // (setfacl -b keeps the owning group's own entry: the mask's rw- goes with the ACL.)
    assert_acl(&fb, "user::rw-\ngroup::r--\nother::---");

    // The MDS decides by itself: a mount whose kernel checks nothing (-o server_permissions).
    let c = Mount::with_args(&cluster, "c", &["-o", "server_permissions"]);
    let read_c = format!("cat {} >/dev/null", c.p("proj/f").display());
    // Such a mount takes no ACLs itself (its kernel would not check them).
    let (ok, err) = as_user(0, 0, &[], &format!("setfacl -m u:1002:r {}", c.p("proj/f").display()));
    assert!(!ok && err.contains("Operation not supported"), "setfacl through a mount without ACLs: {err}");
    assert!(!can(1001, &[], &read_c), "the MDS let 1001 read without an ACL");
    root(&format!("setfacl -m u:1001:r {}", fa.display()));
    assert!(eventually(true, || can(1001, &[], &read_c)), "the MDS ignores u:1001:r");
    drop(c);

    // ACLs are durable: an MDS killed and restarted still has them; fsck finds nothing wrong.
    cluster.kill9_mds();
    cluster.start_mds();
    let t = Instant::now();
    let want = "user::rw-\nuser:1001:r--\ngroup::r--\nmask::r--\nother::---";
    while getfacl_quiet(&fb).as_deref() != Some(want) && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(getfacl_quiet(&fb).as_deref(), Some(want), "the ACL after an MDS restart");
    let (_, report) = cluster.fsck(&[]);
    assert_eq!(report["findings"].as_array().map(Vec::len), Some(0), "fsck: {report}");
}

fn getfacl_quiet(p: &Path) -> Option<String> {
    let out = Command::new("getfacl").args(["-n", "-E", "-p", "--omit-header"]).arg(p).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
