//! What `du` and `SEEK_DATA`/`SEEK_HOLE` say through the mount (issue 42): a file's `st_blocks` are
//! what its objects take on the data servers' disks (a sparse file's few blocks, a dense file's whole
//! size), seen through another mount too, and lseek finds the holes the objects have, across stripes;
//! `cp` through the mount keeps a sparse file sparse. Ignored where the build found no FUSE (build.rs).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_proto::config::Defaults;
use tessera_test_support::mount::{require_fuse, Mount};
use tessera_test_support::Cluster;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Bytes every object file of data server `dir` takes on its disk (`st_blocks` × 512).
fn object_bytes(dir: &Path) -> u64 {
    fn walk(p: &Path, sum: &mut u64) {
        let Ok(entries) = std::fs::read_dir(p) else { return };
        for e in entries.flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                walk(&e.path(), sum);
            } else if e.file_name().len() == 16
                && e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_hexdigit())
            {
                *sum += m.blocks() * 512;
            }
        }
    }
    let mut sum = 0;
    walk(&dir.join("objects"), &mut sum);
    sum
}

/// `st_blocks` × 512 of `p`, once it equals `want` (the MDS measures shortly after a close), or what it
/// was after 10 s.
fn du_settles(p: &Path, want: u64) -> u64 {
    let t = Instant::now();
    loop {
        let got = std::fs::metadata(p).unwrap().blocks() * 512;
        if got == want || t.elapsed() > Duration::from_secs(10) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `lseek(fd, offset, whence)`: the offset, or the errno.
fn seek(f: &File, offset: u64, whence: i32) -> Result<u64, i32> {
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as i64, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(r as u64)
    }
}

#[test]
#[cfg_attr(not(tessera_fuse), ignore = "needs /dev/fuse and root or fusermount3")]
fn fuse_du_counts_what_objects_hold_and_lseek_finds_their_holes() {
    require_fuse();
    // Two data servers, 1 MiB stripes over both.
    let defaults = Defaults { stripe_size: MIB, stripe_count: 2, ..Defaults::default() };
    let cluster = Cluster::start_with(2, defaults);
    let a = Mount::new(&cluster, "a");
    let b = Mount::new(&cluster, "b");
    let on_servers = || (0..2).map(|i| object_bytes(&cluster.ds_data_dir(i))).sum::<u64>();

    // Sparse: 3 bytes at 100 GiB. Its size says 100 GiB, its blocks what the object holds (a block).
    let sparse = a.p("sparse");
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&sparse)
        .unwrap()
        .write_all_at(b"abc", 100 * GIB)
        .unwrap();
    let held = on_servers();
    assert!(held > 0 && held <= 64 * 1024, "the data servers hold {held} bytes for 3 bytes of data");
    let bp = b.p("sparse");
    assert_eq!(du_settles(&bp, held), held, "st_blocks through another mount against the data servers' bytes");
    assert_eq!(std::fs::metadata(&bp).unwrap().len(), 100 * GIB + 3);
    let du = Command::new("du").args(["-B1", "--apparent-size"]).arg(&bp).output().unwrap();
    assert!(String::from_utf8_lossy(&du.stdout).starts_with(&(100 * GIB + 3).to_string()));
    let du = Command::new("du").arg("-B1").arg(&bp).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&du.stdout).split_whitespace().next(), Some(held.to_string().as_str()));

    // lseek: the data at 100 GiB, holes before and at the end; nothing past the end.
    let f = File::open(&bp).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), Ok(0));
    assert_eq!(seek(&f, 0, libc::SEEK_DATA), Ok(100 * GIB));
    assert_eq!(seek(&f, 100 * GIB, libc::SEEK_HOLE), Ok(100 * GIB + 3));
    assert_eq!(seek(&f, 100 * GIB + 3, libc::SEEK_DATA), Err(libc::ENXIO));

    // Dense, striped: 4 MiB written, then a 3 MiB hole, then 1 MiB (two stripes, each on its own server).
    let dense = a.p("dense");
    {
        let w = OpenOptions::new().write(true).create(true).truncate(true).open(&dense).unwrap();
        w.write_all_at(&vec![7u8; 4 * MIB as usize], 0).unwrap();
        w.write_all_at(&vec![9u8; MIB as usize], 7 * MIB).unwrap();
    }
    let held_both = on_servers();
    let dense_held = held_both - held;
    assert!((5 * MIB..5 * MIB + 256 * 1024).contains(&dense_held), "{dense_held} bytes for 5 MiB of data");
    assert_eq!(du_settles(&b.p("dense"), dense_held), dense_held);
    let f = File::open(b.p("dense")).unwrap();
    assert_eq!(seek(&f, 0, libc::SEEK_HOLE), Ok(4 * MIB), "the hole after 4 MiB of data");
    assert_eq!(seek(&f, 4 * MIB, libc::SEEK_DATA), Ok(7 * MIB), "the data after the 3 MiB hole");
    assert_eq!(seek(&f, 5 * MIB + 10, libc::SEEK_DATA), Ok(7 * MIB));
    assert_eq!(seek(&f, MIB + 5, libc::SEEK_DATA), Ok(MIB + 5), "inside data: where it is");
    assert_eq!(seek(&f, 7 * MIB, libc::SEEK_HOLE), Ok(8 * MIB), "the end is a hole");

    // A truncate gives the space back; cp through the mount keeps the holes.
    std::fs::OpenOptions::new().write(true).open(a.p("dense")).unwrap().set_len(MIB).unwrap();
    let after = on_servers() - held;
    assert!(after <= MIB + 64 * 1024, "{after} bytes after cutting to 1 MiB");
    assert_eq!(du_settles(&b.p("dense"), after), after);
    let local = tempfile::tempdir().unwrap();
    let copy: PathBuf = local.path().join("sparse-copy");
    let cp = Command::new("cp").arg("--sparse=auto").arg(&bp).arg(&copy).status().unwrap();
    assert!(cp.success());
    let m = std::fs::metadata(&copy).unwrap();
    assert_eq!(m.len(), 100 * GIB + 3);
    assert!(m.blocks() * 512 <= 1 << 20, "cp wrote {} bytes of a 3-byte sparse file", m.blocks() * 512);
    let mut tail = [0u8; 3];
    File::open(&copy).unwrap().read_exact_at(&mut tail, 100 * GIB).unwrap();
    assert_eq!(&tail, b"abc");
}
