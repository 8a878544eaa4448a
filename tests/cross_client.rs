//! What one client node must see of another's work (issue 34): two FUSE mounts of one cluster (two client
//! nodes, each its own `tessera-fuse` process) and two library clients. Close-to-open (as NFS): an open
//! sees everything closed before it, `O_APPEND` writes land at the file's current end; the namespace
//! (creates, unlinks, renames, exclusive creates, directories changing while listed) as the MDS orders it,
//! whatever either side caches (kernel attributes and entries, directory leases, creates not sent yet).
//! The FUSE tests are ignored (in the test runner's count) where the build found no FUSE: see build.rs.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use tessera_client::{ErrorCode, OpenOptions};
use tessera_test_support::mount::{require_fuse, Mount};
use tessera_test_support::{pattern, Cluster};

fn append_line(path: &std::path::Path, line: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    // close: the line is the file's from now on, for every later open anywhere.
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => panic!("operation should have failed"),
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// The case: mount A appends a line and closes, and mount B appends one right after (well within
/// the kernel's attribute timeout, so B's kernel still holds the size from before A's line). Every
/// acknowledged line must be there, in order; before the fix B's line landed on A's.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn appends_from_two_mounts_in_quick_succession_keep_every_line() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let mut want = String::new();
    for i in 0..40 {
        let (la, lb) = (format!("a{i:03} from mount A\n"), format!("b{i:03} from mount B, a bit longer\n"));
        append_line(&a.p("job.log"), &la);
        // B has the file's attributes cached from its own last append (or the stat below).
        let _ = std::fs::metadata(b.p("job.log"));
        append_line(&b.p("job.log"), &lb);
        want.push_str(&la);
        want.push_str(&lb);
    }
    for m in [&a, &b] {
        assert_eq!(std::fs::read_to_string(m.p("job.log")).unwrap(), want, "the log through {}", m.path.display());
        let len = std::fs::File::open(m.p("job.log")).unwrap().metadata().unwrap().len();
        assert_eq!(len, want.len() as u64, "fstat after open through {}", m.path.display());
    }

    // Several processes on each mount appending at once: no line lost or torn, each process's lines in
    // its order.
    let procs: Vec<std::process::Child> = [&a, &a, &b, &b]
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let p = m.p("shared.log").display().to_string();
            std::process::Command::new("sh")
                .args(["-c", &format!("for n in $(seq 100 199); do echo writer{k}-line$n >> {p}; done")])
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in procs {
        assert!(p.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(b.p("shared.log")).unwrap();
    assert_eq!(log, std::fs::read_to_string(a.p("shared.log")).unwrap());
    assert_eq!(log.lines().count(), 400, "lines lost:\n{log}");
    for k in 0..4 {
        let mine: Vec<&str> = log.lines().filter(|l| l.starts_with(&format!("writer{k}-"))).collect();
        let expect: Vec<String> = (100..200).map(|n| format!("writer{k}-line{n}")).collect();
        assert_eq!(mine, expect, "writer {k}'s lines");
    }
}

/// Size and content after close: whatever B cached of the file before (attributes, its data), an open
/// after A's close sees A's size (`fstat`, `lseek(SEEK_END)`) and A's bytes — grown, rewritten, shrunk.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn an_open_sees_the_size_and_content_closed_before_it_on_another_mount() {
    require_fuse();
    use std::io::Seek;
    let cluster = Cluster::start(3);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    // Sizes that grow, shrink and cross stripes, all within one attribute timeout of B's last look.
    let sizes = [1usize, 4097, (1 << 20) + 3, 100, 3 << 20, 0, 777_777, 65_536];
    for (i, &size) in sizes.iter().enumerate() {
        let data = pattern(i as u64 + 1, size);
        std::fs::write(a.p("f"), &data).unwrap();
        let mut f = std::fs::File::open(b.p("f")).unwrap();
        assert_eq!(f.metadata().unwrap().len(), size as u64, "fstat after open, round {i}");
        assert_eq!(f.seek(std::io::SeekFrom::End(0)).unwrap(), size as u64, "SEEK_END, round {i}");
        f.rewind().unwrap();
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        assert!(got == data, "content after A's close, round {i} ({} bytes read of {size})", got.len());
        drop(f);
        // And the other way round, through a descriptor B keeps open for writing.
        let back = pattern(100 + i as u64, size / 2 + 1);
        std::fs::OpenOptions::new().write(true).open(b.p("f")).unwrap().write_all(&back).unwrap();
        let mut expect = data.clone();
        expect.resize(expect.len().max(back.len()), 0);
        expect[..back.len()].copy_from_slice(&back);
        assert!(std::fs::read(a.p("f")).unwrap() == expect, "A reads B's rewrite, round {i}");
    }
    // A file extended by fallocate and by truncate on one mount: the other's open sees the size.
    let f = std::fs::OpenOptions::new().write(true).open(a.p("f")).unwrap();
    f.set_len(5 << 20).unwrap();
    drop(f);
    assert_eq!(std::fs::File::open(b.p("f")).unwrap().metadata().unwrap().len(), 5 << 20);
}

/// `path`, removed through another mount, stops being found (stat, open) within the kernel's entry and
/// attribute timeout (1 s; the other mount's kernel may hold the name until then, as NFS clients hold
/// theirs for their attribute cache time), and then stays gone.
fn gone_within_entry_timeout(path: &std::path::Path) {
    let t0 = Instant::now();
    while std::fs::metadata(path).is_ok() || std::fs::File::open(path).is_ok() {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{} still found {:?} after its removal",
            path.display(),
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(errno_of(std::fs::File::open(path)), libc::ENOENT, "{}", path.display());
    assert_eq!(errno_of(std::fs::metadata(path)), libc::ENOENT, "{}", path.display());
}

/// Creates, unlinks and renames on one mount, seen by the other: a name created is found at once (even
/// in a directory the other mount leases), a name removed or renamed away stops being found within the
/// kernel's entry timeout.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn creates_unlinks_and_renames_on_one_mount_are_seen_by_the_other() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::create_dir(a.p("d")).unwrap();
    for round in 0..3 {
        // Each side creates in d in turn (whoever leases it must give it up or the MDS recalls it).
        for i in 0..30 {
            let (mine, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
            let name = format!("d/r{round}-f{i:02}");
            std::fs::write(mine.p(&name), name.as_bytes()).unwrap();
            assert_eq!(std::fs::read(other.p(&name)).unwrap(), name.as_bytes(), "{name} through the other mount");
        }
        let names = |m: &Mount| {
            let mut v: Vec<String> =
                std::fs::read_dir(m.p("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            v.sort();
            v
        };
        assert_eq!(names(&a), names(&b));
        assert_eq!(names(&a).len(), 30);
        // Removed on one side: the other cannot open it any more, and soon cannot stat it.
        for i in 0..30 {
            let (mine, other) = if i % 2 == 0 { (&b, &a) } else { (&a, &b) };
            let name = format!("d/r{round}-f{i:02}");
            if i % 3 == 0 {
                std::fs::rename(mine.p(&name), mine.p(&format!("{name}.moved"))).unwrap();
                assert_eq!(std::fs::read(other.p(&format!("{name}.moved"))).unwrap(), name.as_bytes());
                std::fs::remove_file(other.p(&format!("{name}.moved"))).unwrap();
            } else {
                std::fs::remove_file(mine.p(&name)).unwrap();
            }
            gone_within_entry_timeout(&other.p(&name));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !(names(&a).is_empty() && names(&b).is_empty()) {
            assert!(Instant::now() < deadline, "listings after removal: {:?} / {:?}", names(&a), names(&b));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The directory removed on B; A cannot create in it any more.
    std::fs::remove_dir(b.p("d")).unwrap();
    let e = errno_of(std::fs::write(a.p("d/late"), b"x"));
    assert!(e == libc::ENOENT, "create in a removed directory: errno {e}");
}

/// `O_EXCL` creates and `mkdir` of one name from both mounts at the same moment: exactly one wins, the
/// other gets EEXIST, and both then see the winner's file.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn exclusive_creates_and_mkdir_race_between_mounts() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Arc::new(Mount::new(&cluster, "a"));
    let b = Arc::new(Mount::new(&cluster, "b"));
    std::fs::create_dir(a.p("race")).unwrap();
    for round in 0..40 {
        let barrier = Arc::new(Barrier::new(2));
        let go = |m: Arc<Mount>, who: &'static str| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let (file, dir) = (m.p(&format!("race/f{round}")), m.p(&format!("race/d{round}")));
                barrier.wait();
                let created = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&file) {
                    Ok(mut f) => {
                        f.write_all(who.as_bytes()).unwrap();
                        true
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
                    Err(e) => panic!("O_EXCL create through mount {who}: {e}"),
                };
                let made = match std::fs::create_dir(&dir) {
                    Ok(()) => true,
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
                    Err(e) => panic!("mkdir through mount {who}: {e}"),
                };
                (created, made)
            })
        };
        let (ta, tb) = (go(a.clone(), "A"), go(b.clone(), "B"));
        let ((ca, ma), (cb, mb)) = (ta.join().unwrap(), tb.join().unwrap());
        assert!(ca ^ cb, "round {round}: O_EXCL create won by A {ca}, B {cb}");
        assert!(ma ^ mb, "round {round}: mkdir won by A {ma}, B {mb}");
        let winner = if ca { "A" } else { "B" };
        for m in [&a, &b] {
            assert_eq!(std::fs::read_to_string(m.p(&format!("race/f{round}"))).unwrap(), winner, "round {round}");
            assert!(std::fs::metadata(m.p(&format!("race/d{round}"))).unwrap().is_dir());
        }
    }
}

/// A directory filled by one mount while the other lists it (no duplicates, nothing that existed before the
/// listing missing) and empties it while the first keeps creating; at the end both see the same listing,
/// and the directory can be removed once empty.
#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn a_directory_filled_by_one_mount_is_listed_and_emptied_by_the_other() {
    require_fuse();
    let cluster = Cluster::start(2);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    std::fs::create_dir(a.p("busy")).unwrap();
    for i in 0..200 {
        std::fs::write(a.p(&format!("busy/old{i:04}")), b"old").unwrap();
    }
    let dir = a.p("busy");
    let filler = std::thread::spawn(move || {
        for i in 0..400 {
            std::fs::write(dir.join(format!("new{i:04}")), b"new").unwrap();
        }
    });
    let listing = |m: &Mount| -> Vec<String> {
        std::fs::read_dir(m.p("busy")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
    };
    let mut removed = 0;
    while !filler.is_finished() || removed == 0 {
        let names = listing(&b);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicates in a listing");
        // Every old file not removed yet is listed.
        let old = sorted.iter().filter(|n| n.starts_with("old")).count();
        assert_eq!(old, 200 - removed.min(200), "old files listed");
        // B removes some of what it listed, old and new, while A creates.
        for n in sorted.iter().filter(|n| n.starts_with("old")).take(20) {
            std::fs::remove_file(b.p(&format!("busy/{n}"))).unwrap();
            removed += 1;
        }
        for n in sorted.iter().filter(|n| n.starts_with("new")).take(10) {
            std::fs::remove_file(b.p(&format!("busy/{n}"))).unwrap();
        }
        if removed >= 200 && filler.is_finished() {
            break;
        }
    }
    filler.join().unwrap();
    // Both listings agree; B empties the rest and removes the directory, which A then does not see.
    let (mut la, mut lb) = (listing(&a), listing(&b));
    la.sort();
    lb.sort();
    assert_eq!(la, lb);
    assert!(la.iter().all(|n| n.starts_with("new")), "{la:?}");
    for n in &lb {
        std::fs::remove_file(b.p(&format!("busy/{n}"))).unwrap();
    }
    std::fs::remove_dir(b.p("busy")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::metadata(a.p("busy")).is_ok() {
        assert!(Instant::now() < deadline, "A still sees the removed directory");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The same promises between two library clients (two client ids, sessions and caches of their own).
#[test]
fn two_library_clients_see_each_others_closes() {
    let cluster = Cluster::start(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (c1, c2) = (cluster.client().await, cluster.client().await);
        assert_ne!(c1.client_id(), c2.client_id());
        // Appends: each opens, appends one record and closes, in turn; every record stays, in order.
        let append = OpenOptions { write: true, create: true, append: true, ..Default::default() };
        let mut want = Vec::new();
        for i in 0..30u8 {
            for (k, c) in [&c1, &c2].into_iter().enumerate() {
                let rec = vec![b'a' + k as u8; 100 + i as usize];
                let f = c.open("/log", append).await.unwrap();
                f.append(rec.clone().into()).await.unwrap();
                f.close().await.unwrap();
                want.extend_from_slice(&rec);
            }
        }
        assert!(c1.read_file("/log").await.unwrap() == want, "appended records");
        assert_eq!(c2.stat("/log").await.unwrap().size, want.len() as u64);
        // Size and content after close; a descriptor the other held open since before sees the file grow
        // (a read past what it knew asks again).
        let held = c2.open("/grow", OpenOptions { read: true, create: true, ..Default::default() }).await.unwrap();
        for (i, size) in [10usize, 5000, 1 << 20, 3 << 20].into_iter().enumerate() {
            let data = pattern(i as u64, size);
            c1.write_file("/grow", &data).await.unwrap();
            let f = c2.open("/grow", OpenOptions::read_only()).await.unwrap();
            assert_eq!(f.size().await.unwrap(), size as u64, "size after the other's close, round {i}");
            assert!(f.read_at(0, size as u64 + 100).await.unwrap() == data[..], "content, round {i}");
            f.close().await.unwrap();
            assert_eq!(held.read_at(0, size as u64 + 100).await.unwrap().len(), size, "round {i}");
        }
        held.close().await.unwrap();
        // Exclusive creates racing: one winner, one EEXIST.
        let excl = OpenOptions { write: true, create: true, exclusive: true, ..Default::default() };
        for round in 0..30 {
            let p = format!("/excl{round}");
            let (r1, r2) = tokio::join!(c1.open(&p, excl), c2.open(&p, excl));
            let won = [r1.is_ok(), r2.is_ok()];
            assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}: {won:?}");
            for r in [r1, r2] {
                match r {
                    Ok(f) => f.close().await.unwrap(),
                    Err(e) => assert_eq!(e.code, ErrorCode::Exists, "round {round}: {e}"),
                }
            }
            let d = format!("/dir{round}");
            let (m1, m2) = tokio::join!(c1.mkdir(&d, 0o755), c2.mkdir(&d, 0o755));
            assert_eq!([m1.is_ok(), m2.is_ok()].iter().filter(|w| **w).count(), 1, "mkdir round {round}");
        }
        // Renames and unlinks by one, seen by the other at once.
        c1.write_file("/x", b"x").await.unwrap();
        c2.rename("/x", "/y").await.unwrap();
        assert_eq!(c1.read_file("/y").await.unwrap(), b"x");
        assert_eq!(c1.stat("/x").await.unwrap_err().code, ErrorCode::NotFound);
        c1.unlink("/y").await.unwrap();
        assert_eq!(c2.open("/y", OpenOptions::read_only()).await.err().map(|e| e.code), Some(ErrorCode::NotFound));
    });
}
