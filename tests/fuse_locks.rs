//! File locks between mounts (issue 42): `fcntl` byte-range locks and `flock` locks taken through one
//! mount exclude those asked for through another (each mount is a client node of its own), through the
//! MDS's lock manager. Waiters wake when the holder unlocks, closes, exits, is killed, or when the
//! holder's whole mount is killed (eviction); deadlocks between mounts are EDEADLK; a signal ends a wait
//! with EINTR; locks survive an MDS restart; SQLite from two mounts keeps every row — and loses some with
//! `-o local_locks`, the kernel's node-local locks. Ignored where the build found no FUSE (build.rs).
//!
//! One test process holds files open through two mounts: to the MDS those are two clients, so their
//! locks are different owners even when one process asks.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_client::proto::locks::{LockKind, LockType};
use tessera_test_support::mount::{require_fuse, Mount};
use tessera_test_support::Cluster;

fn open_rw(p: &Path) -> File {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(p).unwrap()
}

fn flock_of(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: all-zero is a valid `flock`.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = typ as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_start = start;
    l.l_len = len;
    l
}

/// `fcntl(cmd)` with a lock of `typ` on `start`, `len` bytes: 0 or the errno.
fn fcntl_lock(f: &File, cmd: i32, typ: i32, start: i64, len: i64) -> i32 {
    let l = flock_of(typ, start, len);
    // SAFETY: a valid descriptor and a valid `flock`.
    if unsafe { libc::fcntl(f.as_raw_fd(), cmd, &l) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn setlk(f: &File, typ: i32, start: i64, len: i64) -> i32 {
    fcntl_lock(f, libc::F_SETLK, typ, start, len)
}

fn setlkw(f: &File, typ: i32, start: i64, len: i64) -> i32 {
    fcntl_lock(f, libc::F_SETLKW, typ, start, len)
}

/// `F_GETLK`: the type, start, length and pid of the lock in the way (`F_UNLCK` if none).
fn getlk(f: &File, typ: i32, start: i64, len: i64) -> (i32, i64, i64, i32) {
    let mut l = flock_of(typ, start, len);
    // SAFETY: a valid descriptor and a valid `flock` to fill.
    assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) }, 0, "{}", std::io::Error::last_os_error());
    (l.l_type as i32, l.l_start, l.l_len, l.l_pid)
}

fn flock(f: &File, op: i32) -> i32 {
    // SAFETY: a valid descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// A process that takes an exclusive `fcntl` lock on `path`, tells the parent through a pipe, and then
/// waits for its end (`-9`) or exits after `hold` (never, if `None`).
struct Holder {
    pid: libc::pid_t,
}

impl Holder {
    fn spawn(path: &Path, hold: Option<Duration>) -> Holder {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let mut fds = [0; 2];
        // SAFETY: a valid array for the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let l = flock_of(libc::F_WRLCK, 0, 0);
        let usecs = hold.map(|d| d.as_micros() as u32);
        // SAFETY: the child calls only async-signal-safe functions (open, fcntl, write, usleep, pause,
        // _exit) on values prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            unsafe {
                let fd = libc::open(c.as_ptr(), libc::O_RDWR);
                let ok: u8 = if fd >= 0 && libc::fcntl(fd, libc::F_SETLKW, &l) == 0 { 1 } else { 0 };
                libc::write(fds[1], &ok as *const u8 as *const libc::c_void, 1);
                match usecs {
                    Some(u) => {
                        libc::usleep(u);
                        libc::_exit(0);
                    }
                    None => loop {
                        libc::pause();
                    },
                }
            }
        }
        let mut ok = 0u8;
        // SAFETY: reads one byte into `ok`.
        let n = unsafe { libc::read(fds[0], &mut ok as *mut u8 as *mut libc::c_void, 1) };
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert!(n == 1 && ok == 1, "the holder process could not take its lock");
        Holder { pid }
    }

    fn kill9(&self) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    fn reap(&self) {
        let mut st = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(self.pid, &mut st, 0) };
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill9();
        self.reap();
    }
}

/// Runs `f` on a thread and returns its result and how long it took.
fn timed<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<(T, Duration)> {
    std::thread::spawn(move || {
        let t = Instant::now();
        let r = f();
        (r, t.elapsed())
    })
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_locks_exclude_each_other_across_mounts() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::write(a.p("f"), vec![7u8; 4096]).unwrap();
    let (fa, fb) = (open_rw(&a.p("f")), open_rw(&b.p("f")));
    const EAGAIN: i32 = libc::EAGAIN;

    // fcntl: exclusive against everything, on overlapping bytes only.
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 100), 0);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 0, 100), EAGAIN, "two mounts both hold an exclusive lock");
    assert_eq!(setlk(&fb, libc::F_RDLCK, 99, 1), EAGAIN, "a read lock on a written-locked byte");
    let (typ, start, len, pid) = getlk(&fb, libc::F_WRLCK, 0, 0);
    assert_eq!((typ, start, len), (libc::F_WRLCK, 0, 100), "F_GETLK names the lock in the way");
    assert_eq!(pid, 0, "a process of another client node is not named by a pid of this one");
    assert_eq!(setlk(&fb, libc::F_WRLCK, 100, 100), 0, "bytes not locked");
    assert_eq!(getlk(&fa, libc::F_WRLCK, 0, 100).0, libc::F_UNLCK, "an owner's own lock is not in its way");
    // Splitting: a hole unlocked in the middle of A's lock is free for B, the rest is not.
    assert_eq!(setlk(&fa, libc::F_UNLCK, 40, 20), 0);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 40, 20), 0);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 39, 1), EAGAIN);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 60, 1), EAGAIN);
    assert_eq!(setlk(&fa, libc::F_UNLCK, 0, 0), 0);
    assert_eq!(setlk(&fb, libc::F_UNLCK, 0, 0), 0);
    // Shared locks share; an upgrade waits for the other reader.
    assert_eq!(setlk(&fa, libc::F_RDLCK, 0, 0), 0);
    assert_eq!(setlk(&fb, libc::F_RDLCK, 0, 0), 0);
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 0), EAGAIN, "upgrade past another mount's reader");
    assert_eq!(setlk(&fb, libc::F_UNLCK, 0, 0), 0);
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 0), 0, "upgrade once alone");
    assert_eq!(setlk(&fa, libc::F_UNLCK, 0, 0), 0);

    // flock: whole-file, exclusive and shared, and independent of fcntl locks (Linux).
    assert_eq!(flock(&fa, libc::LOCK_EX | libc::LOCK_NB), 0);
    assert_eq!(flock(&fb, libc::LOCK_EX | libc::LOCK_NB), libc::EWOULDBLOCK, "two mounts both hold flock(LOCK_EX)");
    assert_eq!(flock(&fb, libc::LOCK_SH | libc::LOCK_NB), libc::EWOULDBLOCK);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 0, 0), 0, "fcntl locks do not see flock locks");
    assert_eq!(setlk(&fb, libc::F_UNLCK, 0, 0), 0);
    // Two open file descriptions on one mount are two flock owners too.
    let fa2 = open_rw(&a.p("f"));
    assert_eq!(flock(&fa2, libc::LOCK_EX | libc::LOCK_NB), libc::EWOULDBLOCK);
    assert_eq!(flock(&fa, libc::LOCK_UN), 0);
    assert_eq!(flock(&fb, libc::LOCK_SH | libc::LOCK_NB), 0);
    assert_eq!(flock(&fa, libc::LOCK_SH | libc::LOCK_NB), 0, "shared");
    assert_eq!(flock(&fa2, libc::LOCK_EX | libc::LOCK_NB), libc::EWOULDBLOCK);
    // The last close of an open file description releases its flock lock: FUSE sends that release
    // after close(2) has returned (in the background), so it is free moments later.
    drop(fb);
    drop(fa);
    let t = Instant::now();
    while flock(&fa2, libc::LOCK_EX | libc::LOCK_NB) != 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the closed descriptions' shared locks are still held");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The flock(1) tool across mounts: a holder on A keeps a `flock -n` on B out.
    let mut holder = Command::new("flock").arg("-o").arg(a.p("g")).args(["-c", "sleep 30"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let st = Command::new("flock").args(["-n"]).arg(b.p("g")).arg("true").status().unwrap();
    assert_eq!(st.code(), Some(1), "flock -n on mount B got the lock mount A's flock holds");
    holder.kill().unwrap(); // SIGKILL of flock(1) itself; with -o its command never had the descriptor
    holder.wait().unwrap();
    let t = Instant::now();
    let st = Command::new("flock").args(["-w", "20"]).arg(b.p("g")).arg("true").status().unwrap();
    assert!(st.success(), "flock -w on B after the holder on A was killed (waited {:?})", t.elapsed());

    // The library is a client like a mount: its locks and the mount's exclude each other.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lib = rt.block_on(cluster.client());
    let lf = rt.block_on(lib.open("/f", tessera_client::OpenOptions::read_write())).unwrap();
    rt.block_on(lf.lock(LockKind::Posix, LockType::Write, 0, 9, false)).unwrap();
    let fa = open_rw(&a.p("f"));
    assert_eq!(setlk(&fa, libc::F_WRLCK, 5, 1), libc::EAGAIN, "the mount got the library's lock");
    assert_eq!(getlk(&fa, libc::F_RDLCK, 0, 0).1, 0);
    assert_eq!(setlk(&fa, libc::F_WRLCK, 10, 10), 0);
    let theirs = rt.block_on(lf.test_lock(LockType::Read, 0, u64::MAX)).unwrap().expect("the mount's lock");
    assert_eq!((theirs.start, theirs.end), (10, 19));
    let e = rt.block_on(lf.lock(LockKind::Posix, LockType::Write, 15, 15, false)).unwrap_err();
    assert_eq!(e.code, tessera_client::ErrorCode::WouldBlock);
    rt.block_on(lf.close()).unwrap();
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 10), 0, "the library's close released its lock");
    drop(fa);

    // An open file description's lock (F_OFD_SETLK: the kernel names no owner at close) goes with the
    // mount's last descriptor of the file.
    drop(fa2);
    let fo = open_rw(&a.p("f"));
    assert_eq!(fcntl_lock(&fo, libc::F_OFD_SETLK, libc::F_WRLCK, 0, 0), 0);
    let fb = open_rw(&b.p("f"));
    assert_eq!(setlk(&fb, libc::F_WRLCK, 0, 0), libc::EAGAIN, "an OFD lock holds across mounts");
    drop(fo);
    let t = Instant::now();
    while setlk(&fb, libc::F_WRLCK, 0, 0) != 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the OFD lock outlived the last close of the file on its mount");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cluster whose MDS evicts a client after 3 s of silence, two mounts of it, and file `f`.
fn two_mounts_evicting_after_3s() -> (Cluster, Mount, Mount) {
    let mut cluster = Cluster::prepared(2, Default::default());
    cluster.edit_mds_config(|c| c.mds[0].eviction_timeout_s = 3);
    cluster.boot();
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::write(a.p("f"), b"x").unwrap();
    (cluster, a, b)
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_lock_waiters_wake_on_unlock_close_exit_kill_and_eviction() {
    require_fuse();
    let (_cluster, a, b) = two_mounts_evicting_after_3s();
    let wait_on_b = |b_path: std::path::PathBuf| {
        timed(move || {
            let f = open_rw(&b_path);
            let r = setlkw(&f, libc::F_WRLCK, 0, 0);
            (r, f)
        })
    };
    let held = Duration::from_millis(800);

    // Unlock.
    let fa = open_rw(&a.p("f"));
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 0), 0);
    let w = wait_on_b(b.p("f"));
    std::thread::sleep(held);
    assert!(!w.is_finished(), "F_SETLKW on B returned while A held the lock");
    assert_eq!(setlk(&fa, libc::F_UNLCK, 0, 0), 0);
    let ((r, fb), took) = w.join().unwrap();
    assert_eq!(r, 0, "the waiter on B was not granted the lock");
    assert!(took >= held, "granted after {took:?}, while A held it");
    drop(fb); // its close releases B's lock

    // Close: any close of the file by the holding process releases its POSIX locks.
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 0), 0);
    let w = wait_on_b(b.p("f"));
    std::thread::sleep(held);
    assert!(!w.is_finished());
    drop(fa);
    let ((r, fb), _) = w.join().unwrap();
    assert_eq!(r, 0, "closing the holder's descriptor did not wake the waiter");
    drop(fb);

    // Exit: a holder process on A that exits.
    let h = Holder::spawn(&a.p("f"), Some(Duration::from_millis(1500)));
    let w = wait_on_b(b.p("f"));
    let ((r, fb), took) = w.join().unwrap();
    assert_eq!(r, 0, "the holder's exit did not wake the waiter");
    assert!(took >= Duration::from_millis(500), "granted after {took:?} while the holder lived");
    h.reap();
    drop(fb);

    // kill -9 of the holder process (which F_GETLK through its own mount names).
    let h = Holder::spawn(&a.p("f"), None);
    assert_eq!(getlk(&open_rw(&a.p("f")), libc::F_WRLCK, 0, 0).3, h.pid, "F_GETLK on the holder's node names it");
    let w = wait_on_b(b.p("f"));
    std::thread::sleep(held);
    assert!(!w.is_finished());
    h.kill9();
    let ((r, fb), _) = w.join().unwrap();
    assert_eq!(r, 0, "kill -9 of the holder did not wake the waiter");
    drop(fb);
    drop(h);

    // kill -9 of the holder's whole mount: the MDS evicts that client (3 s of silence) and frees its lock.
    let mut a = a;
    let h = Holder::spawn(&a.p("f"), None);
    let w = wait_on_b(b.p("f"));
    std::thread::sleep(held);
    assert!(!w.is_finished());
    a.child.as_mut().unwrap().signal(libc::SIGKILL);
    let ((r, fb), took) = w.join().unwrap();
    assert_eq!(r, 0, "the waiter was not granted the lock of an evicted mount");
    assert!(took >= Duration::from_secs(3), "granted after {took:?}: before the dead mount could be evicted");
    assert_eq!(getlk(&fb, libc::F_WRLCK, 0, 0).0, libc::F_UNLCK);
    h.kill9();
    drop(a); // unmounts what is left
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_lock_deadlock_between_mounts_is_edeadlk_and_a_signal_ends_a_wait() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::write(a.p("f"), b"xy").unwrap();
    let fa = std::sync::Arc::new(open_rw(&a.p("f")));
    let fb = open_rw(&b.p("f"));
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 1), 0);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 1, 1), 0);
    // A waits for B's byte 1 ...
    let fa2 = fa.clone();
    let w = timed(move || setlkw(&fa2, libc::F_WRLCK, 1, 1));
    std::thread::sleep(Duration::from_millis(800));
    assert!(!w.is_finished());
    // ... so B waiting for A's byte 0 would deadlock.
    assert_eq!(setlkw(&fb, libc::F_WRLCK, 0, 1), libc::EDEADLK, "a deadlock between two mounts");
    assert_eq!(setlk(&fb, libc::F_UNLCK, 1, 1), 0);
    let (r, _) = w.join().unwrap();
    assert_eq!(r, 0, "A's wait goes on once B gave up its byte");

    // A signal to a waiting thread ends its wait with EINTR, and it holds nothing after.
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: installs a handler that does nothing, without SA_RESTART, for SIGUSR1.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = nothing as *const () as usize;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let b_path = b.p("f");
    let w = timed(move || {
        // SAFETY: this thread's id.
        tx.send(unsafe { libc::pthread_self() } as usize).unwrap();
        let f = open_rw(&b_path);
        let r = setlkw(&f, libc::F_WRLCK, 0, 2);
        (r, f)
    });
    let thread = rx.recv().unwrap() as libc::pthread_t;
    std::thread::sleep(Duration::from_millis(800));
    assert!(!w.is_finished());
    // SAFETY: the waiting thread is alive (it has not returned).
    unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
    let ((r, fb2), took) = w.join().unwrap();
    assert_eq!(r, libc::EINTR, "a signal did not end the wait (after {took:?})");
    assert_eq!(setlk(&fa, libc::F_UNLCK, 0, 0), 0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(getlk(&fa, libc::F_WRLCK, 0, 0).0, libc::F_UNLCK, "the interrupted waiter got the lock after all");
    drop(fb2);
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_locks_survive_an_mds_restart_without_being_granted_twice() {
    require_fuse();
    let (mut cluster, a, b) = two_mounts_evicting_after_3s();
    let fa = open_rw(&a.p("f"));
    let fb = open_rw(&b.p("f"));
    assert_eq!(setlk(&fa, libc::F_WRLCK, 0, 10), 0);
    assert_eq!(flock(&fa, libc::LOCK_EX), 0);
    cluster.kill9_mds();
    cluster.start_mds();
    // Right after the restart (the grace period), during it, and after it: never granted to B.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(8) {
        assert_eq!(setlk(&fb, libc::F_WRLCK, 5, 1), libc::EAGAIN, "B got A's lock {:?} after the restart", t.elapsed());
        assert_eq!(flock(&fb, libc::LOCK_EX | libc::LOCK_NB), libc::EWOULDBLOCK, "B got A's flock lock");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(setlk(&fb, libc::F_WRLCK, 10, 10), 0, "bytes A never locked are free after the grace period");
    assert_eq!(getlk(&fb, libc::F_WRLCK, 0, 0).1, 0, "the lock in the way is A's, reasserted");
    drop(fa);
    assert_eq!(setlk(&fb, libc::F_WRLCK, 0, 10), 0, "A's close released its reasserted lock");
    assert_eq!(flock(&fb, libc::LOCK_EX | libc::LOCK_NB), 0);
}

/// Two `sqlite3` processes, one per mount, each inserting 1,000 rows, one transaction each, into one
/// database in rollback-journal mode. Returns the rows counted and `PRAGMA integrity_check`'s answer
/// (through mount `a`), or the first error a process printed.
fn sqlite_two_writers(a: &Mount, b: &Mount) -> Result<(u64, String), String> {
    let db = |m: &Mount| m.p("t.db");
    let run = |db: &Path, sql: &str| -> Result<String, String> {
        let out = Command::new("sqlite3").arg(db).arg(sql).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("sqlite3: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    run(&db(a), "PRAGMA journal_mode=DELETE; CREATE TABLE t(who TEXT, n INTEGER, pad TEXT);")?;
    let script = |who: &str| {
        let mut s = String::from(".timeout 120000\n");
        for n in 0..1000 {
            s.push_str(&format!("INSERT INTO t VALUES('{who}', {n}, hex(randomblob(100)));\n"));
        }
        s
    };
    let spawn = |m: &Mount, who: &str| {
        let mut c = Command::new("sqlite3")
            .arg(db(m))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = c.stdin.take().unwrap();
        let s = script(who);
        std::thread::spawn(move || std::io::Write::write_all(&mut stdin, s.as_bytes()));
        c
    };
    let (pa, pb) = (spawn(a, "a"), spawn(b, "b"));
    let mut errors = String::new();
    for p in [pa, pb] {
        let out = p.wait_with_output().unwrap();
        errors.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    if !errors.trim().is_empty() {
        // The first lines say enough (a process may print one per statement).
        return Err(errors.lines().take(3).collect::<Vec<_>>().join("\n"));
    }
    let count = run(&db(a), "SELECT count(*) FROM t;")?.parse::<u64>().map_err(|e| e.to_string())?;
    let check = run(&db(a), "PRAGMA integrity_check;")?;
    Ok((count, check))
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_sqlite_from_two_mounts_keeps_every_row_and_loses_some_with_local_locks() {
    require_fuse();
    assert!(
        Command::new("sqlite3").arg("-version").output().is_ok_and(|o| o.status.success()),
        "this test needs the sqlite3 command (.ci/run installs it)"
    );
    let cluster = Cluster::start(2);
    {
        let a = Mount::new(&cluster, "a");
        let b = Mount::new(&cluster, "b");
        let t = Instant::now();
        let r = sqlite_two_writers(&a, &b);
        eprintln!("two sqlite3 writers across mounts: {r:?} in {:?}", t.elapsed());
        assert_eq!(r, Ok((2000, "ok".to_string())), "SQLite from two mounts with cluster-wide locks");
    }
    // The same with each mount's locks local to its node: both write at once.
    let a = Mount::with_args(&cluster, "la", &["-o", "local_locks"]);
    let b = Mount::with_args(&cluster, "lb", &["-o", "local_locks"]);
    std::fs::remove_file(a.p("t.db")).unwrap();
    let r = sqlite_two_writers(&a, &b);
    eprintln!("two sqlite3 writers with local_locks: {r:?}");
    assert_ne!(r, Ok((2000, "ok".to_string())), "with node-local locks SQLite kept every row: the test shows nothing");
}
