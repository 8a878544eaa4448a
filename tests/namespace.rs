//! Namespace semantics through real processes: rename corner cases, unlink of open files, link counts,
//! permissions of another uid, and the POSIX error codes.

use bytes::Bytes;
use tessera_client::{Caller, OpenOptions, RenameFlags};
use tessera_proto::error::ErrorCode;
use tessera_test_support::{pattern, Cluster};

fn code<T>(r: Result<T, tessera_proto::FsError>) -> ErrorCode {
    match r {
        Ok(_) => panic!("operation should have failed"),
        Err(e) => e.code,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_corner_cases() {
    let cluster = Cluster::start(2);
    let c = cluster.client().await;
    c.mkdir("/a", 0o755).await.unwrap();
    c.mkdir("/a/sub", 0o755).await.unwrap();
    c.write_file("/a/f", b"first").await.unwrap();
    c.write_file("/g", b"second").await.unwrap();

    // Plain file rename, then over an existing file: the target's content is replaced.
    c.rename("/a/f", "/a/f2").await.unwrap();
    assert_eq!(code(c.stat("/a/f").await), ErrorCode::NotFound);
    c.rename("/g", "/a/f2").await.unwrap();
    assert_eq!(c.read_file("/a/f2").await.unwrap(), b"second");
    assert_eq!(code(c.stat("/g").await), ErrorCode::NotFound);

    // Directory rename moves the subtree; a directory into its own subtree is EINVAL.
    c.rename("/a", "/b").await.unwrap();
    assert!(c.stat("/b/sub").await.is_ok());
    assert_eq!(code(c.rename("/b", "/b/sub/x").await), ErrorCode::Invalid);

    // Directory over an empty directory works; over a non-empty one is ENOTEMPTY.
    c.mkdir("/empty", 0o755).await.unwrap();
    c.mkdir("/d2", 0o755).await.unwrap();
    c.rename("/d2", "/empty").await.unwrap();
    assert_eq!(code(c.rename("/empty", "/b").await), ErrorCode::NotEmpty);
    // File over directory: EISDIR; directory over file: ENOTDIR.
    assert_eq!(code(c.rename("/b/f2", "/empty").await), ErrorCode::IsDir);
    assert_eq!(code(c.rename("/empty", "/b/f2").await), ErrorCode::NotDir);

    // RENAME_NOREPLACE and RENAME_EXCHANGE.
    c.write_file("/x", b"x").await.unwrap();
    c.write_file("/y", b"y").await.unwrap();
    let noreplace = RenameFlags { noreplace: true, exchange: false };
    assert_eq!(code(c.rename_with("/x", "/y", noreplace).await), ErrorCode::Exists);
    c.rename_with("/x", "/y", RenameFlags { noreplace: false, exchange: true }).await.unwrap();
    assert_eq!(c.read_file("/x").await.unwrap(), b"y");
    assert_eq!(c.read_file("/y").await.unwrap(), b"x");

    // Renaming a hard link onto its twin is a no-op.
    c.link("/x", "/x2").await.unwrap();
    c.rename("/x", "/x2").await.unwrap();
    assert!(c.stat("/x").await.is_ok() && c.stat("/x2").await.is_ok());

    // Directory link counts follow subdirectories through renames.
    assert_eq!(c.stat("/b").await.unwrap().nlink, 3);
    c.rename("/b/sub", "/sub").await.unwrap();
    assert_eq!(c.stat("/b").await.unwrap().nlink, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlink_open_file_and_link_counts() {
    let cluster = Cluster::start(2);
    let c = cluster.client().await;
    let data = pattern(9, 3 << 20);
    c.write_file("/open", &data).await.unwrap();

    let f = c.open("/open", OpenOptions { read: true, write: true, ..Default::default() }).await.unwrap();
    c.unlink("/open").await.unwrap();
    assert_eq!(code(c.stat("/open").await), ErrorCode::NotFound);
    // The open handle still reads and writes the data.
    assert_eq!(f.read_at(0, data.len() as u64).await.unwrap()[..], data[..]);
    f.write_at(0, Bytes::from_static(b"still here")).await.unwrap();
    assert_eq!(&f.read_at(0, 10).await.unwrap()[..], b"still here");
    f.close().await.unwrap();

    // Hard links.
    c.write_file("/l1", b"linked").await.unwrap();
    assert_eq!(c.link("/l1", "/l2").await.unwrap().nlink, 2);
    assert_eq!(c.stat("/l1").await.unwrap().nlink, 2);
    c.unlink("/l1").await.unwrap();
    assert_eq!(c.stat("/l2").await.unwrap().nlink, 1);
    assert_eq!(c.read_file("/l2").await.unwrap(), b"linked");
    c.mkdir("/dir", 0o755).await.unwrap();
    assert_eq!(code(c.link("/dir", "/dir2").await), ErrorCode::Perm);
    // Symlinks resolve; lstat sees the link.
    c.symlink("/l2", "/sym").await.unwrap();
    assert_eq!(c.readlink("/sym").await.unwrap(), "/l2");
    assert_eq!(c.read_file("/sym").await.unwrap(), b"linked");
    assert_eq!(c.lstat("/sym").await.unwrap().kind, tessera_client::FileKind::Symlink);
    c.symlink("/loop2", "/loop1").await.unwrap();
    c.symlink("/loop1", "/loop2").await.unwrap();
    assert_eq!(code(c.stat("/loop1").await), ErrorCode::Loop);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_permissions() {
    let cluster = Cluster::start(2);
    let owner = cluster.client().await;
    let me = Caller::current_process();
    owner.mkdir("/private", 0o755).await.unwrap();
    owner.mkdir("/private/d", 0o755).await.unwrap();
    owner.write_file("/private/file", b"secret").await.unwrap();
    owner.setattr("/private/file", tessera_client::SetAttrs { perm: Some(0o600), ..Default::default() }).await.unwrap();

    assert_eq!(code(owner.mkdir("/private", 0o755).await), ErrorCode::Exists);
    assert_eq!(code(owner.create("/private/file", 0o644, None).await), ErrorCode::Exists);
    assert_eq!(code(owner.rmdir("/private").await), ErrorCode::NotEmpty);
    assert_eq!(code(owner.stat("/nope/x").await), ErrorCode::NotFound);
    assert_eq!(code(owner.unlink("/private/d").await), ErrorCode::IsDir);
    assert_eq!(code(owner.rmdir("/private/file").await), ErrorCode::NotDir);
    assert_eq!(code(owner.stat("/private/file/x").await), ErrorCode::NotDir);
    let long = "n".repeat(256);
    assert_eq!(code(owner.mkdir(&format!("/{long}"), 0o755).await), ErrorCode::NameTooLong);
    owner.mkdir(&format!("/{}", "n".repeat(255)), 0o755).await.unwrap();

    // Another uid: no write in a 0755 directory it does not own, no read of a 0600 file, no chmod.
    let other_uid = if me.uid == 4242 { 4243 } else { 4242 };
    let other = cluster.client().await.with_caller(Caller { uid: other_uid, gid: other_uid, groups: vec![] });
    assert_eq!(code(other.mkdir("/private/mine", 0o755).await), ErrorCode::Access);
    assert_eq!(code(other.create("/private/new", 0o644, None).await), ErrorCode::Access);
    assert_eq!(code(other.unlink("/private/file").await), ErrorCode::Access);
    assert_eq!(code(other.read_file("/private/file").await), ErrorCode::Access);
    assert_eq!(
        code(
            other.setattr("/private/file", tessera_client::SetAttrs { perm: Some(0o777), ..Default::default() }).await
        ),
        ErrorCode::Perm
    );
    // But it may read what is world-readable.
    owner.write_file("/private/public", b"hello").await.unwrap();
    assert_eq!(other.read_file("/private/public").await.unwrap(), b"hello");
    // Sticky world-writable directory: others cannot remove the owner's files.
    owner.mkdir("/tmp", 0o777).await.unwrap();
    owner.setattr("/tmp", tessera_client::SetAttrs { perm: Some(0o1777), ..Default::default() }).await.unwrap();
    owner.write_file("/tmp/owned", b"o").await.unwrap();
    other.write_file("/tmp/theirs", b"t").await.unwrap();
    assert_eq!(code(other.unlink("/tmp/owned").await), ErrorCode::Perm);
    other.unlink("/tmp/theirs").await.unwrap();
}
