//! The FUSE mount through real processes: a cluster, `tessera-fuse` mounted into a temporary directory,
//! and std::fs / libc / real programs on the mount. Ignored (in the
//! test runner's count) where the build found no FUSE: see build.rs.

use std::ffi::CString;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_test_support::mount::{as_user, is_root, require_fuse, Mount};
use tessera_test_support::{pattern, Cluster};

fn fuse_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tessera-fuse"))
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// The names a listing of `dir` returns, sorted.
fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => panic!("operation should have failed"),
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

fn have(prog: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {prog}")]).output().is_ok_and(|o| o.status.success())
}

fn sh(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().expect("sh");
    assert!(
        out.status.success(),
        "`{script}` failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn utimens(p: &Path, atime: libc::timespec, mtime: libc::timespec) -> i32 {
    let times = [atime, mtime];
    // SAFETY: valid path and two timespecs.
    unsafe { libc::utimensat(libc::AT_FDCWD, cstr(p).as_ptr(), times.as_ptr(), 0) }
}

fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec { tv_sec: sec, tv_nsec: nsec }
}

fn renameat2(a: &Path, b: &Path, flags: u32) -> i32 {
    // SAFETY: valid paths.
    unsafe { libc::renameat2(libc::AT_FDCWD, cstr(a).as_ptr(), libc::AT_FDCWD, cstr(b).as_ptr(), flags) }
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_posix_semantics() {
    require_fuse();
    let cluster = Cluster::start(2);
    let mut m = Mount::new(&cluster, "posix");

    // Write, read back, sizes.
    let data = pattern(1, 3 << 20 | 12345);
    std::fs::write(m.p("f"), &data).unwrap();
    assert_eq!(std::fs::read(m.p("f")).unwrap(), data);
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().len(), data.len() as u64);

    // Error codes.
    assert_eq!(errno_of(std::fs::File::open(m.p("missing"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::OpenOptions::new().write(true).create_new(true).open(m.p("f"))), libc::EEXIST);
    std::fs::create_dir(m.p("d")).unwrap();
    assert_eq!(errno_of(std::fs::create_dir(m.p("d"))), libc::EEXIST);
    assert_eq!(errno_of(std::fs::File::open(m.p("f/x"))), libc::ENOTDIR);
    assert_eq!(errno_of(std::fs::OpenOptions::new().write(true).open(m.p("d"))), libc::EISDIR);
    std::fs::write(m.p("d/inner"), b"x").unwrap();
    assert_eq!(errno_of(std::fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::write(m.p(&"n".repeat(300)), b"x")), libc::ENAMETOOLONG);
    std::os::unix::fs::symlink("loop2", m.p("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", m.p("loop2")).unwrap();
    assert_eq!(errno_of(std::fs::File::open(m.p("loop1"))), libc::ELOOP);
    std::fs::create_dir(m.p("d/sub")).unwrap();
    assert_eq!(errno_of(std::fs::rename(m.p("d"), m.p("d/sub/x"))), libc::EINVAL);
    assert_eq!(errno_of(std::fs::remove_file(m.p("d"))), libc::EISDIR);

    // Symlinks and hard links.
    std::os::unix::fs::symlink("f", m.p("lnk")).unwrap();
    assert_eq!(std::fs::read_link(m.p("lnk")).unwrap(), Path::new("f"));
    assert_eq!(std::fs::read(m.p("lnk")).unwrap().len(), data.len());
    std::fs::hard_link(m.p("f"), m.p("hard")).unwrap();
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().nlink(), 2);
    std::fs::remove_file(m.p("hard")).unwrap();
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().nlink(), 1);
    assert_eq!(std::fs::metadata(m.p("d")).unwrap().nlink(), 3);

    // Timestamps: utimens with explicit times, UTIME_OMIT and UTIME_NOW; a write moves mtime and ctime.
    assert_eq!(utimens(&m.p("f"), ts(1_000_000_000, 5), ts(1_000_000_100, 7)), 0);
    let md = std::fs::metadata(m.p("f")).unwrap();
    assert_eq!((md.atime(), md.atime_nsec(), md.mtime(), md.mtime_nsec()), (1_000_000_000, 5, 1_000_000_100, 7));
    assert_eq!(utimens(&m.p("f"), ts(0, libc::UTIME_OMIT), ts(1_200_000_000, 0)), 0);
    let md = std::fs::metadata(m.p("f")).unwrap();
    assert_eq!((md.atime(), md.mtime()), (1_000_000_000, 1_200_000_000));
    assert_eq!(utimens(&m.p("f"), ts(0, libc::UTIME_NOW), ts(0, libc::UTIME_OMIT)), 0);
    let md = std::fs::metadata(m.p("f")).unwrap();
    assert!(md.atime() > 1_600_000_000 && md.mtime() == 1_200_000_000);
    let before = std::fs::metadata(m.p("f")).unwrap();
    {
        let mut f = std::fs::OpenOptions::new().write(true).open(m.p("f")).unwrap();
        f.write_all(b"changed").unwrap();
    }
    let after = std::fs::metadata(m.p("f")).unwrap();
    assert!(after.mtime() > before.mtime() && after.ctime() >= before.ctime(), "write moves mtime");
    let ct = std::fs::metadata(m.p("f")).unwrap().ctime_nsec()
        + std::fs::metadata(m.p("f")).unwrap().ctime() * 1_000_000_000;
    std::thread::sleep(Duration::from_millis(20));
    std::fs::set_permissions(m.p("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let md = std::fs::metadata(m.p("f")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o600);
    assert!(md.ctime_nsec() + md.ctime() * 1_000_000_000 > ct, "chmod moves ctime");

    // Rename corner cases, RENAME_NOREPLACE and RENAME_EXCHANGE.
    std::fs::write(m.p("x"), b"x").unwrap();
    std::fs::write(m.p("y"), b"y").unwrap();
    assert_eq!(renameat2(&m.p("x"), &m.p("y"), libc::RENAME_NOREPLACE), -1);
    assert_eq!(last_errno(), libc::EEXIST);
    assert_eq!(renameat2(&m.p("x"), &m.p("y"), libc::RENAME_EXCHANGE), 0);
    assert_eq!(std::fs::read(m.p("x")).unwrap(), b"y");
    assert_eq!(std::fs::read(m.p("y")).unwrap(), b"x");
    std::fs::rename(m.p("x"), m.p("y")).unwrap();
    assert_eq!(std::fs::read(m.p("y")).unwrap(), b"y");
    assert_eq!(errno_of(std::fs::metadata(m.p("x"))), libc::ENOENT);
    std::fs::create_dir(m.p("e1")).unwrap();
    std::fs::create_dir(m.p("e2")).unwrap();
    std::fs::rename(m.p("e1"), m.p("e2")).unwrap();
    assert_eq!(errno_of(std::fs::rename(m.p("e2"), m.p("d"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(std::fs::rename(m.p("y"), m.p("e2"))), libc::EISDIR);
    assert_eq!(errno_of(std::fs::rename(m.p("e2"), m.p("y"))), libc::ENOTDIR);

    // Truncate and extend with holes; O_TRUNC; O_APPEND.
    {
        let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(m.p("t")).unwrap();
        let mut f = f;
        f.write_all(b"0123456789").unwrap();
        f.set_len(4).unwrap();
        f.seek(SeekFrom::Start(100)).unwrap();
        f.write_all(b"end").unwrap();
        f.set_len(200).unwrap();
    }
    let t = std::fs::read(m.p("t")).unwrap();
    assert_eq!(t.len(), 200);
    assert_eq!(&t[..4], b"0123");
    assert!(t[4..100].iter().all(|&b| b == 0));
    assert_eq!(&t[100..103], b"end");
    assert!(t[103..].iter().all(|&b| b == 0));
    std::fs::write(m.p("t"), b"short").unwrap();
    assert_eq!(std::fs::read(m.p("t")).unwrap(), b"short");
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(m.p("t")).unwrap();
        f.write_all(b"+more").unwrap();
    }
    assert_eq!(std::fs::read(m.p("t")).unwrap(), b"short+more");
    // Created read-only, still writable through the creating descriptor.
    {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o444).open(m.p("ro")).unwrap();
        f.write_all(b"ok").unwrap();
    }
    assert_eq!(std::fs::read(m.p("ro")).unwrap(), b"ok");

    // SEEK_DATA / SEEK_HOLE.
    {
        let f = std::fs::File::open(m.p("t")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: valid descriptor.
        let (d, h) =
            unsafe { (libc::lseek(f.as_raw_fd(), 2, libc::SEEK_DATA), libc::lseek(f.as_raw_fd(), 2, libc::SEEK_HOLE)) };
        assert_eq!((d, h), (2, 10));
        // SAFETY: valid descriptor.
        assert_eq!(unsafe { libc::lseek(f.as_raw_fd(), 50, libc::SEEK_DATA) }, -1);
        assert_eq!(last_errno(), libc::ENXIO);
    }

    // Extended attributes, with the size probe, and tessera.layout.
    let fc = cstr(&m.p("t"));
    let name = CString::new("user.color").unwrap();
    // SAFETY: valid strings and buffers below.
    unsafe {
        assert_eq!(libc::setxattr(fc.as_ptr(), name.as_ptr(), b"blue".as_ptr().cast(), 4, 0), 0);
        assert_eq!(libc::setxattr(fc.as_ptr(), name.as_ptr(), b"red".as_ptr().cast(), 3, libc::XATTR_CREATE), -1);
        assert_eq!(last_errno(), libc::EEXIST);
        assert_eq!(libc::getxattr(fc.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0), 4);
        let mut buf = [0u8; 16];
        assert_eq!(libc::getxattr(fc.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 2), -1);
        assert_eq!(last_errno(), libc::ERANGE);
        assert_eq!(libc::getxattr(fc.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 16), 4);
        assert_eq!(&buf[..4], b"blue");
        let n = libc::listxattr(fc.as_ptr(), buf.as_mut_ptr().cast(), 0);
        assert!(n >= 11);
        let mut list = vec![0u8; n as usize];
        assert_eq!(libc::listxattr(fc.as_ptr(), list.as_mut_ptr().cast(), list.len()), n);
        assert!(list.split(|&b| b == 0).any(|s| s == b"user.color"));
        assert_eq!(libc::removexattr(fc.as_ptr(), name.as_ptr()), 0);
        assert_eq!(libc::getxattr(fc.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 16), -1);
        assert_eq!(last_errno(), libc::ENODATA);
        let lay = CString::new("tessera.layout").unwrap();
        let mut lb = [0u8; 512];
        let n = libc::getxattr(fc.as_ptr(), lay.as_ptr(), lb.as_mut_ptr().cast(), lb.len());
        assert!(n > 0, "tessera.layout readable: errno {}", last_errno());
        assert!(String::from_utf8_lossy(&lb[..n as usize]).contains("stripe"));
        let dc = cstr(&m.p("d"));
        let v = b"stripe_size=65536 stripe_count=1";
        assert_eq!(libc::setxattr(dc.as_ptr(), lay.as_ptr(), v.as_ptr().cast(), v.len(), 0), 0);
    }
    std::fs::write(m.p("d/laid"), pattern(3, 300_000)).unwrap();
    assert_eq!(std::fs::read(m.p("d/laid")).unwrap(), pattern(3, 300_000));

    // FIFOs, sockets and device nodes.
    let fifo = cstr(&m.p("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    assert!(std::fs::metadata(m.p("fifo")).unwrap().file_type().is_fifo());
    let fifo_path = m.p("fifo");
    let writer = std::thread::spawn(move || std::fs::write(fifo_path, b"through the pipe").unwrap());
    let mut got = String::new();
    std::fs::File::open(m.p("fifo")).unwrap().read_to_string(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got, "through the pipe");
    let sock = std::os::unix::net::UnixListener::bind(m.p("sock")).unwrap();
    assert!(std::fs::metadata(m.p("sock")).unwrap().file_type().is_socket());
    let mut cl = std::os::unix::net::UnixStream::connect(m.p("sock")).unwrap();
    cl.write_all(b"hi").unwrap();
    let (mut srv, _) = sock.accept().unwrap();
    let mut b2 = [0u8; 2];
    srv.read_exact(&mut b2).unwrap();
    assert_eq!(&b2, b"hi");
    if is_root() {
        let dev = cstr(&m.p("null"));
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) }, 0);
        let md = std::fs::metadata(m.p("null")).unwrap();
        assert!(md.file_type().is_char_device());
        assert_eq!(md.rdev(), libc::makedev(1, 3));
    }

    // statfs and readdir with . and ..
    // SAFETY: zeroed statvfs is valid output storage.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and output.
    assert_eq!(unsafe { libc::statvfs(cstr(&m.path).as_ptr(), &mut sv) }, 0);
    assert!(sv.f_bsize > 0 && sv.f_namemax == 255);
    let ls = sh(&format!("ls -a {}", m.p("d").display()));
    let names: Vec<&str> = ls.lines().collect();
    assert_eq!(names, vec![".", "..", "inner", "laid", "sub"]);

    m.unmount();
    assert!(!sh("cat /proc/self/mountinfo").contains(&m.path.display().to_string()), "unmounted on SIGTERM");
}

#[test]
#[cfg_attr(not(all(tessera_fuse, tessera_root)), ignore = "needs /dev/fuse and root")]
fn fuse_permissions() {
    require_fuse();
    tessera_test_support::mount::require_root();
    assert!(have("setpriv"), "fuse_permissions switches users with setpriv (util-linux)");
    let cluster = Cluster::start(1);
    let m = Mount::new(&cluster, "perm");
    let f = m.p("secret");
    std::fs::write(&f, b"data").unwrap();
    std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::set_permissions(&m.path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fs = f.display().to_string();
    // Owner: read and write.
    assert!(as_user(1000, 1000, &[], &format!("cat {fs} >/dev/null && echo more >> {fs}")).0);
    // Group (primary and supplementary): read only.
    assert!(as_user(1001, 1000, &[], &format!("cat {fs} >/dev/null")).0);
    let (ok, err) = as_user(1001, 1000, &[], &format!("echo x >> {fs}"));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert!(as_user(1003, 1003, &[1000], &format!("cat {fs} >/dev/null")).0);
    // Other: nothing.
    let (ok, err) = as_user(1002, 1002, &[], &format!("cat {fs}"));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // Root reads anything.
    assert!(std::fs::read(&f).unwrap().starts_with(b"data"));
    // chown by a non-owner / non-root is EPERM; chmod by a non-owner is EPERM.
    let (ok, err) = as_user(1000, 1000, &[], &format!("chown 1002 {fs}"));
    assert!(!ok && err.contains("not permitted"), "{err}");
    let (ok, err) = as_user(1002, 1002, &[], &format!("chmod 777 {fs}"));
    assert!(!ok && err.contains("not permitted"), "{err}");
    // A directory without write permission: no creates; without search permission: no lookups.
    std::fs::create_dir(m.p("locked")).unwrap();
    std::fs::write(m.p("locked/in"), b"x").unwrap();
    std::fs::set_permissions(m.p("locked"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let lk = m.p("locked").display().to_string();
    let (ok, err) = as_user(1002, 1002, &[], &format!("touch {lk}/new"));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, err) = as_user(1002, 1002, &[], &format!("rm -f {lk}/in"));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    std::fs::set_permissions(m.p("locked"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (ok, _) = as_user(1002, 1002, &[], &format!("ls {lk}"));
    assert!(!ok);
    // access(2) goes to the MDS with the caller's credentials.
    assert!(as_user(1000, 1000, &[], &format!("test -w {fs}")).0);
    assert!(!as_user(1001, 1000, &[], &format!("test -w {fs}")).0);
    // Sticky directory: others' files cannot be removed.
    std::fs::create_dir(m.p("tmp")).unwrap();
    std::fs::set_permissions(m.p("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let tmp = m.p("tmp").display().to_string();
    assert!(as_user(1000, 1000, &[], &format!("echo a > {tmp}/mine")).0);
    let (ok, err) = as_user(1002, 1002, &[], &format!("rm -f {tmp}/mine"));
    assert!(!ok && err.contains("not permitted"), "{err}");
    // FIFO opens never reach the file system: the kernel checks the mode (default_permissions), as on ext4
    // (pjdfstest open/06.t).
    let fifo = m.p("fifo");
    let c = cstr(&fifo);
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo: {}", last_errno());
    let ff = fifo.display().to_string();
    let (ok, err) = as_user(1002, 1002, &[], &format!("exec 3<>{ff}"));
    assert!(!ok && err.contains("ermission denied"), "fifo opened by other: {err}");
    std::os::unix::fs::chown(&fifo, Some(1002), Some(1002)).unwrap();
    assert!(as_user(1002, 1002, &[], &format!("exec 3<>{ff}")).0);
    // A write or truncate by a non-owner clears S_ISUID/S_ISGID (the kernel's chmod as that caller must be
    // let through; a direct write carries FUSE_WRITE_KILL_SUIDGID instead), as on ext4 (pjdfstest
    // chmod/12.t); the non-owner still cannot chmod itself.
    let su = m.p("suid");
    std::fs::write(&su, b"").unwrap();
    let sus = su.display().to_string();
    for (mode, how) in [
        (0o4777, "echo x >> {f}"),
        (0o6777, "truncate -s 1 {f}"),
        (0o2777, "echo y > {f}"),
        (0o6777, "printf z | dd of={f} conv=notrunc status=none"),
    ] {
        std::fs::set_permissions(&su, std::fs::Permissions::from_mode(mode)).unwrap();
        let (ok, err) = as_user(1002, 1002, &[], &how.replace("{f}", &sus));
        assert!(ok, "{how} by non-owner of a {mode:o} file: {err}");
        let got = std::fs::metadata(&su).unwrap().permissions().mode() & 0o7777;
        assert_eq!(got, 0o777, "{how} left mode {got:o}");
    }
    let (ok, err) = as_user(1002, 1002, &[], &format!("chmod 755 {sus}"));
    assert!(!ok && err.contains("not permitted"), "{err}");
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_two_mounts_mmap_append_readdir() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");

    // Close-to-open between the mounts, a multi-stripe file written in odd sizes.
    let data = pattern(7, 9 << 20 | 777);
    {
        let mut f = std::fs::File::create(a.p("shared")).unwrap();
        for chunk in data.chunks(300_001) {
            f.write_all(chunk).unwrap();
        }
    }
    assert_eq!(std::fs::read(b.p("shared")).unwrap(), data);
    // Write-behind keeps overlapping writes in order: a write that continues one buffered stream but
    // overlaps another (older) buffer must land after it (found by fsx). Many rounds, since a wrong
    // order only shows when the two buffers' transfers finish the wrong way round.
    {
        use std::os::unix::fs::FileExt;
        let f =
            std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(a.p("order")).unwrap();
        const K: u64 = 64 << 10;
        for round in 0..40u64 {
            let base = round * 4 * K;
            f.write_all_at(&vec![1u8; K as usize], base + K).unwrap(); // older buffer [K, 2K)
            f.write_all_at(&vec![2u8; K as usize], base).unwrap(); // a new stream [0, K)
            f.write_all_at(&vec![3u8; (K / 2) as usize], base + K).unwrap(); // continues it, overlaps [K, 2K)
        }
        f.sync_all().unwrap();
        let got = std::fs::read(b.p("order")).unwrap();
        for round in 0..40usize {
            let base = round * 4 * (64 << 10);
            let at = |k: usize| got[base + k];
            assert_eq!((at(0), at(65536), at(65536 + 32767), at(65536 + 32768)), (2, 3, 3, 1), "round {round}");
        }
    }
    // Scattered small writes, rewrites and overlaps (batched by the write-behind) against a model of
    // the file, with reads through the writing descriptor between them; then read by the other mount.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(a.p("scatter"))
            .unwrap();
        let size = 6usize << 20;
        let mut model = vec![0u8; size];
        let mut written_end = 0;
        let rnd = pattern(99, 3 * 4000 * 8);
        let word = |i: usize| u64::from_le_bytes(rnd[i * 8..i * 8 + 8].try_into().unwrap()) as usize;
        for i in 0..4000 {
            let len = match word(3 * i) % 10 {
                0 => 1 + word(3 * i + 1) % (300 << 10),
                1..=3 => 1 + word(3 * i + 1) % 5000,
                _ => 4096,
            };
            let off = word(3 * i + 2) % (size - len);
            let off = if len == 4096 { off & !4095 } else { off };
            let data = pattern(1000 + i as u64, len);
            f.write_all_at(&data, off as u64).unwrap();
            model[off..off + len].copy_from_slice(&data);
            written_end = written_end.max(off + len);
            if i % 500 == 499 {
                let mut back = vec![0u8; 8192];
                let at = word(3 * i) % (size - 8192);
                f.read_exact_at(&mut back, at as u64).unwrap();
                assert!(back[..] == model[at..at + 8192], "read after write {i} at {at}");
            }
        }
        drop(f);
        let got = std::fs::read(b.p("scatter")).unwrap();
        assert_eq!(got.len(), written_end);
        assert!(got[..] == model[..written_end], "scattered writes read back differently through the other mount");
        // Strided readers through the other mount (fetched along their stride as vectored reads): two
        // processes each reading every other 32 KiB block, a sparse stride of small blocks running past
        // the end of the file, and a stride interrupted by a write through the reading descriptor.
        let model = &got;
        let path = b.p("scatter");
        std::thread::scope(|sc| {
            for (first, block, stride) in
                [(0u64, 32u64 << 10, 64u64 << 10), (32 << 10, 32 << 10, 64 << 10), (777, 4000, 512 << 10)]
            {
                let path = path.clone();
                sc.spawn(move || {
                    let f = std::fs::File::open(&path).unwrap();
                    let mut buf = vec![0u8; block as usize];
                    let mut at = first;
                    while at < model.len() as u64 + 2 * stride {
                        let n = f.read_at(&mut buf, at).unwrap();
                        let want = &model[(at as usize).min(model.len())..((at + block) as usize).min(model.len())];
                        assert!(buf[..n] == want[..], "strided read at {at} ({block} every {stride})");
                        at += stride;
                    }
                });
            }
        });
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut expect = model.clone();
        let mut buf = vec![0u8; 16 << 10];
        for k in 0..100u64 {
            let at = k * (48 << 10);
            if k == 40 {
                // Blocks fetched ahead now hold old data: the write must show in the next reads.
                let patch = pattern(5, 200 << 10);
                f.write_all_at(&patch, at + (48 << 10)).unwrap();
                expect[(at + (48 << 10)) as usize..][..patch.len()].copy_from_slice(&patch);
            }
            f.read_exact_at(&mut buf, at).unwrap();
            assert!(buf[..] == expect[at as usize..][..buf.len()], "strided read at {at} after a write");
        }
    }
    // Rename and unlink on one mount are seen on the other within the attribute timeout.
    std::fs::rename(a.p("shared"), a.p("moved")).unwrap();
    wait_gone(&b.p("shared"));
    assert!(std::fs::metadata(b.p("shared")).is_err() && std::fs::metadata(b.p("moved")).is_ok());
    std::fs::remove_file(a.p("moved")).unwrap();
    wait_gone(&b.p("moved"));
    assert_eq!(errno_of(std::fs::metadata(b.p("moved"))), libc::ENOENT);

    // A shared writable mapping: written, msync'ed, unmapped, read back through the other mount.
    let len = 3 * 4096 + 100;
    std::fs::write(a.p("mm"), vec![b'.'; len]).unwrap();
    {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(a.p("mm")).unwrap();
        // SAFETY: a fresh shared mapping of the file's length, used only inside this block.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let s = std::slice::from_raw_parts_mut(p as *mut u8, len);
            assert_eq!(s[0], b'.');
            s[0..5].copy_from_slice(b"hello");
            s[len - 5..].copy_from_slice(b"world");
            assert_eq!(libc::msync(p, len, libc::MS_SYNC), 0);
            assert_eq!(libc::munmap(p, len), 0);
        }
    }
    let back = std::fs::read(b.p("mm")).unwrap();
    assert_eq!(back.len(), len);
    assert_eq!(&back[..5], b"hello");
    assert_eq!(&back[len - 5..], b"world");
    // A private read mapping on the other mount sees the same.
    {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(b.p("mm")).unwrap();
        // SAFETY: read-only mapping used inside this block.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, f.as_raw_fd(), 0);
            assert_ne!(p, libc::MAP_FAILED);
            let s = std::slice::from_raw_parts(p as *const u8, len);
            assert_eq!(&s[..5], b"hello");
            libc::munmap(p, len);
        }
    }

    // O_APPEND from two processes: no line lost or torn.
    let ap = a.p("log").display().to_string();
    let procs: Vec<std::process::Child> = (0..2)
        .map(|i| {
            Command::new("sh")
                .args(["-c", &format!("for n in $(seq 1 200); do echo proc{i}-line$n >> {ap}; done")])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(a.p("log")).unwrap();
    assert_eq!(log.lines().count(), 400);
    assert!(log.lines().all(|l| l.starts_with("proc") && l.contains("-line")));
    assert_eq!(std::fs::read_to_string(b.p("log")).unwrap(), log);

    // readdir while another process creates: no duplicates, every old entry seen, all at the end.
    std::fs::create_dir(a.p("busy")).unwrap();
    for i in 0..300 {
        std::fs::write(a.p(&format!("busy/old{i:04}")), b"").unwrap();
    }
    let dir = a.p("busy");
    let creator = std::thread::spawn(move || {
        for i in 0..300 {
            std::fs::write(dir.join(format!("new{i:04}")), b"").unwrap();
        }
    });
    for _ in 0..5 {
        let names: Vec<String> =
            std::fs::read_dir(b.p("busy")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate entries in a listing");
        assert!(sorted.iter().filter(|n| n.starts_with("old")).count() == 300);
    }
    creator.join().unwrap();
    assert_eq!(std::fs::read_dir(b.p("busy")).unwrap().count(), 600);

    // A composite layout (set with the CLI on a directory): a file written through one mount across
    // the extent boundary (the second extent is placed by that write) reads back through the other,
    // and its `tessera.layout` attribute shows both extents.
    std::fs::create_dir(a.p("pfl")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("--config")
        .arg(&cluster.files.client_config)
        .args(["setstripe", "-E", "1M", "-c", "1", "-E", "-1", "-c", "2", "/pfl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let data = pattern(11, (3 << 20) + 333);
    {
        let mut f = std::fs::File::create(a.p("pfl/f")).unwrap();
        for chunk in data.chunks(200_003) {
            f.write_all(chunk).unwrap();
        }
    }
    assert!(std::fs::read(b.p("pfl/f")).unwrap() == data, "composite file read back differently");
    let name = CString::new("tessera.layout").unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid path and name, buffer of the length given.
    let n = unsafe { libc::getxattr(cstr(&b.p("pfl/f")).as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0, "getxattr tessera.layout: errno {}", last_errno());
    let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
    assert!(text.contains("extent=1048576-EOF") && !text.contains("objects=none"), "{text}");
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_real_programs() {
    require_fuse();
    let cluster = Cluster::start(2);
    let m = Mount::new(&cluster, "progs");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mnt = m.path.display().to_string();
    let work = tempfile::tempdir().unwrap();
    let w = work.path().display().to_string();
    let proto = src.join("proto").display().to_string();

    // tar in and out, compare.
    sh(&format!("tar -C {proto} -cf - . | tar -C {mnt} -xf - && mkdir {mnt}/../x 2>/dev/null; true"));
    sh(&format!("mkdir -p {w}/out && tar -C {mnt} -cf - . | tar -C {w}/out -xf - && diff -r {proto} {w}/out"));
    // cp -a keeps modes and times.
    sh(&format!("mkdir {mnt}/cpa && cp -a {proto}/src {mnt}/cpa/ && diff -r {proto}/src {mnt}/cpa/src"));
    let orig = std::fs::metadata(src.join("proto/src/lib.rs")).unwrap();
    let copy = std::fs::metadata(m.p("cpa/src/lib.rs")).unwrap();
    assert_eq!((orig.mtime(), orig.mode()), (copy.mtime(), copy.mode()));
    // sort of a large file.
    sh(&format!("seq 1 400000 | awk '{{print ($1 * 7919) % 400009}}' > {w}/big && cp {w}/big {mnt}/big"));
    sh(&format!("sort -n {mnt}/big > {mnt}/sorted && sort -n {w}/big > {w}/sorted && cmp {w}/sorted {mnt}/sorted"));
    // git.
    if have("git") {
        sh(&format!(
            "cd {mnt} && mkdir repo && cd repo && git init -q && cp -r {proto}/src . && git add . && \
             git -c user.email=t@t -c user.name=t commit -qm init && git status --porcelain && git log --oneline | grep -q init && git fsck --no-progress"
        ));
    } else {
        println!("SKIPPED git part: git not installed");
    }
    // fio with verification.
    if have("fio") {
        for rw in ["write", "randwrite"] {
            sh(&format!(
                "fio --name=v --directory={mnt} --rw={rw} --bs=64k --size=16m --verify=crc32c --do_verify=1 \
                 --ioengine=psync --numjobs=1 --output=/dev/null"
            ));
        }
    } else {
        println!("SKIPPED fio part: fio not installed");
    }
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_mount_errors_and_crash() {
    require_fuse();
    let mut cluster = Cluster::start(1);
    let cfg = cluster.files.client_config.clone();
    // Mount point missing, or busy.
    let out = Command::new(fuse_bin()).arg("/nonexistent/mnt").arg("--config").arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let mut m = Mount::new(&cluster, "crash");
    let out = Command::new(fuse_bin()).arg(&m.path).arg("--config").arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"), "{}", String::from_utf8_lossy(&out.stderr));

    // Data requests carry the job id of the process that opened the file.
    sh(&format!("TESSERA_JOB=fuse-job-42 dd if=/dev/zero of={} bs=64k count=16 2>/dev/null", m.p("jobfile").display()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let jobs: Vec<String> = rt.block_on(async {
        let c = cluster.client().await;
        let mut jobs = Vec::new();
        for ds in c.ds_ids() {
            jobs.extend(c.data().report(ds).await.unwrap().jobs.into_iter().map(|j| j.job));
        }
        jobs
    });
    assert!(jobs.iter().any(|j| j == "fuse-job-42"), "jobs seen by the data servers: {jobs:?}");

    // Creates and removes in a directory the mount leases reach the MDS in batches sent later (by
    // whichever request flushes them): the job registry still counts each under the job that made it.
    let md = m.p("md-job").display().to_string();
    sh(&format!("TESSERA_JOB=fuse-md-7 sh -c 'mkdir {md} && for i in $(seq 20); do : > {md}/f$i; done && rm {md}/f1 {md}/f2 {md}/f3 && sync'"));
    // The batch goes out when the mount flushes it (its timer, or the next request that needs it).
    let meta = rt.block_on(async {
        let c = cluster.client().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let meta = c.mds().job_stats(Some("fuse-md-7")).await.unwrap().into_iter().next().map(|j| j.meta);
            let meta = meta.expect("job fuse-md-7 is registered");
            if (meta.creates, meta.unlinks) == (20, 3) || Instant::now() > deadline {
                break meta;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    assert_eq!((meta.creates, meta.unlinks), (20, 3), "{meta:?}");

    // Kill -9 mid-write: the mount point can be unmounted, the cluster stays healthy, a new mount works.
    let target = m.p("victim").display().to_string();
    let mut writer = Command::new("dd")
        .args(["if=/dev/zero", &format!("of={target}"), "bs=1M", "count=100000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    m.child.take().unwrap().kill().expect("reaped");
    let _ = writer.wait();
    let t = Instant::now();
    let st = Command::new("umount").arg("-l").arg(&m.path).status().unwrap();
    assert!(st.success() && t.elapsed() < Duration::from_secs(10));
    assert!(cluster_alive(&mut cluster));
    rt.block_on(async {
        let c = cluster.client().await;
        c.write_file("/after", b"fine").await.unwrap();
        assert_eq!(c.read_file("/after").await.unwrap(), b"fine");
    });
    let m2 = Mount::new(&cluster, "crash2");
    assert_eq!(std::fs::read(m2.p("after")).unwrap(), b"fine");
    let _ = std::fs::metadata(m2.p("victim"));
    m.path = PathBuf::new();
}

/// Waits until `p` is gone, at most 3 s (a kernel keeps an entry for the attribute timeout).
fn wait_gone(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::fs::metadata(p).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The MDS and every data server still run.
fn cluster_alive(c: &mut Cluster) -> bool {
    let n = c.files.ds_configs.len();
    std::iter::once("mds".to_string()).chain((0..n).map(|i| format!("ds{i}"))).all(|name| c.pid(&name).is_some())
}

/// Creates in a directory the mount made (and leases) do not wait for the MDS; another mount still sees
/// every one of them at once, and the first mount sees the other's changes after it.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_async_creates_in_leased_directory() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::create_dir(a.p("d")).unwrap();
    let create = |name: &str| {
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o640).open(a.p(&format!("d/{name}")))
    };
    // The first create leases the directory; creates take the reserved inode numbers from the top down,
    // where the MDS hands out ascending ones.
    drop(create("f0").unwrap());
    drop(create("f1").unwrap());
    let (f0, f1) = (std::fs::metadata(a.p("d/f0")).unwrap().ino(), std::fs::metadata(a.p("d/f1")).unwrap().ino());
    assert!(f1 < f0, "f1 ({f1}) after f0 ({f0}) was not created from the lease's reserve");
    for i in 2..200 {
        let mut f = create(&format!("f{i}")).unwrap();
        if i % 10 == 0 {
            f.write_all(format!("data {i}").as_bytes()).unwrap();
        }
    }
    assert_eq!(errno_of(create("f1")), libc::EEXIST, "O_EXCL on a name created here");
    assert_eq!(std::fs::metadata(a.p("d")).unwrap().len(), 200, "the directory's size counts its entries");
    // The other mount's listing waits for this mount's creates (it recalls the lease).
    let mut want: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
    want.sort();
    assert_eq!(sorted_names(&b.p("d")), want);
    let m = std::fs::metadata(b.p("d/f5")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.len()), (0o640, 0, 0));
    assert_eq!(std::fs::read(b.p("d/f30")).unwrap(), b"data 30");
    // And this mount sees the other's changes after that.
    std::fs::write(b.p("d/from_b"), b"b").unwrap();
    std::fs::remove_file(b.p("d/f3")).unwrap();
    assert_eq!(std::fs::read(a.p("d/from_b")).unwrap(), b"b");
    // (Its kernel may keep f3's entry for the attribute timeout.)
    wait_gone(&a.p("d/f3"));
    assert_eq!(errno_of(std::fs::metadata(a.p("d/f3"))), libc::ENOENT);
    // A new leased directory: a file still open from its create, unlinked, then written and read back.
    std::fs::create_dir(a.p("e")).unwrap();
    let mut f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(a.p("e/tmp")).unwrap();
    std::fs::remove_file(a.p("e/tmp")).unwrap();
    f.write_all(b"still here").unwrap();
    f.rewind().unwrap();
    let mut got = String::new();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "still here");
    assert_eq!(std::fs::read_dir(b.p("e")).unwrap().count(), 0);
}

/// A directory's times change only when an operation changes them (issue 42, tar's "file changed as we
/// read it" after `git commit`): creates and unlinks in a leased directory show times at once, and those
/// stay when the batch reaches the MDS later and when another mount looks.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_directory_times_do_not_move_after_the_fact() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::create_dir(a.p("d")).unwrap();
    for i in 0..20 {
        std::fs::write(a.p(&format!("d/f{i}")), b"x").unwrap();
    }
    for i in 0..5 {
        std::fs::remove_file(a.p(&format!("d/f{i}"))).unwrap();
    }
    let times = |m: std::fs::Metadata| (m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec());
    let shown = times(std::fs::metadata(a.p("d")).unwrap());
    // Past the batch's sending and the kernel's attribute timeout (1 s), nothing touching the directory.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(times(std::fs::metadata(a.p("d")).unwrap()), shown, "the directory's times moved by themselves");
    assert_eq!(times(std::fs::metadata(b.p("d")).unwrap()), shown, "another mount sees other times");
    assert_eq!(std::fs::read_dir(b.p("d")).unwrap().count(), 15);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(times(std::fs::metadata(a.p("d")).unwrap()), shown, "moved once another mount listed it");
}

/// Unlinks in a directory the mount leases do not wait for the MDS either: another mount sees exactly
/// what is left, names unlinked and made again hold the new files, and an open file unlinked lives on.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_async_unlinks_in_leased_directory() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::create_dir(a.p("d")).unwrap();
    for i in 0..300 {
        std::fs::write(a.p(&format!("d/f{i}")), format!("old {i}")).unwrap();
    }
    let mut open = std::fs::OpenOptions::new().read(true).write(true).open(a.p("d/f7")).unwrap();
    for i in (0..300).filter(|i| i % 3 != 0) {
        std::fs::remove_file(a.p(&format!("d/f{i}"))).unwrap();
    }
    assert_eq!(errno_of(std::fs::remove_file(a.p("d/f1"))), libc::ENOENT, "already gone");
    assert_eq!(errno_of(std::fs::metadata(a.p("d/f2"))), libc::ENOENT);
    for i in (0..300).filter(|i| i % 6 == 1) {
        std::fs::write(a.p(&format!("d/f{i}")), format!("new {i}")).unwrap();
    }
    assert_eq!(open.metadata().unwrap().nlink(), 0, "unlinked while open");
    open.write_all(b"after").unwrap();
    let want: Vec<String> = (0..300).filter(|i| i % 3 == 0 || i % 6 == 1).map(|i| format!("f{i}")).collect();
    assert_eq!(std::fs::metadata(a.p("d")).unwrap().len(), want.len() as u64);
    // The other mount's listing waits for this mount's changes (it recalls the lease).
    let mut sorted = want.clone();
    sorted.sort();
    assert_eq!(sorted_names(&b.p("d")), sorted);
    assert_eq!(std::fs::read(b.p("d/f9")).unwrap(), b"old 9");
    assert_eq!(std::fs::read(b.p("d/f13")).unwrap(), b"new 13");
    assert_eq!(std::fs::metadata(b.p("d")).unwrap().len(), want.len() as u64);
    open.rewind().unwrap();
    let mut got = String::new();
    open.read_to_string(&mut got).unwrap();
    assert_eq!(got, "after");
    drop(open);
    // With the lease given up, unlinks go to the MDS: the other mount's are seen here too.
    std::fs::remove_file(b.p("d/f0")).unwrap();
    std::fs::remove_file(a.p("d/f3")).unwrap();
    let left = std::fs::read_dir(b.p("d")).unwrap().count();
    assert_eq!(left, want.len() - 2);
    // A directory the other mount filled: after the first unlink this mount leases it with its names
    // (a subdirectory among them) and removes the rest here.
    std::fs::create_dir_all(b.p("r/sub")).unwrap();
    for i in 0..100 {
        std::fs::write(b.p(&format!("r/f{i}")), b"x").unwrap();
    }
    std::os::unix::fs::symlink("f0", b.p("r/link")).unwrap();
    for i in 0..100 {
        std::fs::remove_file(a.p(&format!("r/f{i}"))).unwrap();
    }
    assert_eq!(errno_of(std::fs::metadata(a.p("r/f5"))), libc::ENOENT);
    assert_eq!(errno_of(std::fs::remove_file(a.p("r/sub"))), libc::EISDIR);
    std::fs::remove_file(a.p("r/link")).unwrap();
    std::fs::write(a.p("r/new"), b"new").unwrap();
    assert_eq!(sorted_names(&b.p("r")), ["new", "sub"]);
    assert_eq!(std::fs::read(b.p("r/new")).unwrap(), b"new");
}

/// fallocate through the mount: mode 0 reserves and grows the file, KEEP_SIZE does not grow it,
/// PUNCH_HOLE and ZERO_RANGE make a range read as zeros (across stripes, right after buffered writes),
/// and another mount sees the same bytes.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_fallocate_reserves_punches_and_zeroes() {
    require_fuse();
    use std::os::fd::AsRawFd;
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let fallocate = |f: &std::fs::File, mode: i32, off: i64, len: i64| -> std::io::Result<()> {
        // SAFETY: a plain syscall on an open descriptor.
        match unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    let mut f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(a.p("f")).unwrap();
    // posix_fallocate's mode 0: the size grows, the bytes read as zeros.
    fallocate(&f, 0, 0, 3 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3 << 20);
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 8 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3 << 20, "KEEP_SIZE");
    let data = pattern(7, 3 << 20);
    f.write_all(&data).unwrap();
    // Straight after the (buffered) writes: a hole across the stripe boundary at 1 MiB.
    let (hole, hole_len) = ((1 << 20) - 5000, 10_000usize);
    fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, hole as i64, hole_len as i64).unwrap();
    let mut want = data.clone();
    want[hole..hole + hole_len].fill(0);
    // ZERO_RANGE past the end grows the file.
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, (3 << 20) - 100, 1100).unwrap();
    want[(3 << 20) - 100..].fill(0);
    want.resize((3 << 20) + 1000, 0);
    assert_eq!(f.metadata().unwrap().len(), want.len() as u64);
    f.rewind().unwrap();
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert!(got == want, "the same mount reads the holes");
    assert!(std::fs::read(b.p("f")).unwrap() == want, "another mount reads the holes");
    // Growing again after a truncate (found by fsx): the size the mount knew before the truncate must
    // not hide the growth (it did: the size stayed at the truncated one, for this mount's and the
    // kernel's stat, lseek(SEEK_END) and the other mount).
    use std::io::Seek;
    for (round, mode) in [0, libc::FALLOC_FL_ZERO_RANGE].into_iter().enumerate() {
        f.set_len(3 << 20).unwrap();
        f.sync_all().unwrap();
        let mut tail = [0u8; 100];
        // A read across the end: the mount asks the MDS for the size (3 MiB) and keeps it.
        let read = std::os::unix::fs::FileExt::read_at(&f, &mut tail, (3 << 20) - 10).unwrap();
        f.set_len(1 << 20).unwrap();
        let end = (2 << 20) + round as u64 * 12_345;
        fallocate(&f, mode, (1 << 20) + 4096, (end - (1 << 20) - 4096) as i64).unwrap();
        assert_eq!(f.metadata().unwrap().len(), end, "fstat after growing past a truncate, mode {mode:#x}");
        assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), end, "SEEK_END, mode {mode:#x}");
        assert_eq!(std::fs::metadata(a.p("f")).unwrap().len(), end, "stat, mode {mode:#x}");
        let other = std::fs::File::open(b.p("f")).unwrap();
        assert_eq!(other.metadata().unwrap().len(), end, "the other mount's open, mode {mode:#x}");
        assert_eq!(read, 10, "a read across the end of a file just shrunk, mode {mode:#x}");
    }

    // What Linux refuses, and a descriptor open for reading only.
    assert_eq!(errno_of(fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE, 0, 10)), libc::EOPNOTSUPP, "punch without KEEP_SIZE");
    assert_eq!(errno_of(fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)), libc::EOPNOTSUPP);
    let ro = std::fs::File::open(a.p("f")).unwrap();
    assert_eq!(errno_of(fallocate(&ro, 0, 0, 10)), libc::EBADF);
}

/// copy_file_range through the mount (issue 34: the kernel's fallback copied in 4 KiB pieces): a copy
/// between files across stripes, one that grows the destination, one short at the source's end, one
/// within a file, one from bytes still in the page cache of a shared mapping; the same mount and another
/// one read what was copied, and the sizes agree.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_copy_file_range_copies_across_stripes() {
    require_fuse();
    use std::os::fd::AsRawFd;
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let copy = |src: &std::fs::File, off_in: i64, dst: &std::fs::File, off_out: i64, len: usize| -> usize {
        let (mut i, mut o) = (off_in, off_out);
        // SAFETY: a plain syscall on open descriptors and two offsets on the stack.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, dst.as_raw_fd(), &mut o, len, 0) };
        assert!(n >= 0, "copy_file_range: {}", std::io::Error::last_os_error());
        n as usize
    };
    let rw = |p: &Path| std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(p).unwrap();
    let data = pattern(11, (9 << 20) + 123);
    let src = rw(&a.p("src"));
    (&src).write_all(&data).unwrap(); // still in the write-behind buffer when the copy starts
    let dst = rw(&a.p("dst"));
    (&dst).write_all(&pattern(12, 1 << 20)).unwrap();
    let mut want = pattern(12, 1 << 20);
    // Between files, across stripes, growing the destination past its end.
    let n = copy(&src, 1000, &dst, (1 << 20) - 77, 6 << 20);
    assert_eq!(n, 6 << 20);
    want.truncate((1 << 20) - 77);
    want.extend_from_slice(&data[1000..1000 + (6 << 20)]);
    // Short at the source's end.
    let at = want.len() as i64;
    let n = copy(&src, (9 << 20) - 500, &dst, at, 1 << 20);
    assert_eq!(n, 623, "a copy stops at the source's end");
    want.extend_from_slice(&data[(9 << 20) - 500..]);
    assert_eq!(copy(&src, data.len() as i64 + 10, &dst, 0, 4096), 0, "past the source's end");
    // Within one file, ranges apart.
    assert_eq!(copy(&dst, 0, &dst, (5 << 20) + 3, 4096), 4096);
    let head = want[..4096].to_vec();
    want[(5 << 20) + 3..(5 << 20) + 3 + 4096].copy_from_slice(&head);
    assert_eq!(dst.metadata().unwrap().len(), want.len() as u64, "fstat");
    assert!(std::fs::read(a.p("dst")).unwrap() == want, "the same mount reads the copy");
    dst.sync_all().unwrap(); // close-to-open: another mount sees what was written once it is synced or closed
    assert!(std::fs::read(b.p("dst")).unwrap() == want, "another mount reads the copy");
    // From bytes written through a shared mapping and not yet written back: the kernel writes them
    // back before asking the mount to copy.
    let mapped = rw(&a.p("mapped"));
    mapped.set_len(1 << 20).unwrap();
    // SAFETY: a fresh shared mapping of a file this test owns, unmapped before the file is used again.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            1 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            mapped.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>(), 1 << 20);
        let out = rw(&a.p("from-map"));
        assert_eq!(copy(&mapped, 0, &out, 0, 1 << 20), 1 << 20);
        libc::munmap(p, 1 << 20);
    }
    assert!(std::fs::read(b.p("from-map")).unwrap() == data[..1 << 20], "a copy of mapped bytes");
    // A destination open for reading only.
    let ro = std::fs::File::open(a.p("dst")).unwrap();
    let (mut i, mut o) = (0i64, 0i64);
    // SAFETY: as above.
    let r = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut i, ro.as_raw_fd(), &mut o, 10, 0) };
    assert_eq!((r, last_errno()), (-1, libc::EBADF));
}

/// Eviction (issue 18): a mount stopped (SIGSTOP) for longer than the MDS's eviction timeout is evicted:
/// the file it held open after unlinking it is destroyed (its objects leave the data servers); when the
/// mount runs again, the descriptor it held fails with EIO, and new opens on the same mount work.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_a_silent_mount_is_evicted_and_its_unlinked_open_file_destroyed() {
    require_fuse();
    let mut cluster = Cluster::prepared(2, Default::default());
    cluster.edit_mds_config(|c| c.mds[0].eviction_timeout_s = 2);
    cluster.boot();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let admin = rt.block_on(cluster.client());
    let objects = || -> u64 {
        let s = rt.block_on(admin.cluster_status()).unwrap();
        s.iter().filter_map(|d| d.report.as_ref()).map(|r| r.objects).sum()
    };
    let wait_for = |what: &str, ok: &dyn Fn(u64) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = objects();
            if ok(n) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: still {n} objects after 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let mut a = Mount::new(&cluster, "a");
    let data = pattern(3, 4 << 20);
    let mut f =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(a.p("held")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    std::fs::remove_file(a.p("held")).unwrap();
    wait_for("the held file's objects are reported", &|n| n >= 2);
    // Held open, it outlives its name for as long as the mount lives and talks to the MDS.
    std::thread::sleep(Duration::from_secs(3));
    assert!(objects() >= 2, "an open unlinked file of a live mount is kept");
    let mut buf = vec![0u8; 4096];
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, data[..4096]);

    let child = a.child.as_mut().unwrap();
    child.signal(libc::SIGSTOP);
    wait_for("the MDS evicts the stopped mount and destroys its unlinked file", &|n| n == 0);
    child.signal(libc::SIGCONT);

    // A new file at once works, whether the mount learns of its eviction from its keep-alive first or
    // from the MDS refusing this create (which the client then sends again).
    std::fs::write(a.p("after"), b"new session").unwrap();
    // The old descriptor fails.
    let deadline = Instant::now() + Duration::from_secs(15);
    let e = loop {
        match f.seek(SeekFrom::Start(0)).and_then(|_| f.write_all(b"late")).and_then(|_| f.sync_all()) {
            Err(e) => break e,
            Ok(()) => assert!(Instant::now() < deadline, "the evicted descriptor still works after 15 s"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(errno_of(f.read(&mut buf)), libc::EIO);
    drop(f);
    // The mount itself works on.
    assert_eq!(std::fs::read(a.p("after")).unwrap(), b"new session");
    std::fs::write(a.p("later"), b"still").unwrap();
    assert_eq!(std::fs::read(a.p("later")).unwrap(), b"still");
    assert!(cluster.all_alive());
    a.unmount();
}
