//! Unit tests of the namespace on a temporary sled database, with in-memory data servers.

use super::*;
use crate::destroy;
use crate::dsclient::MemDataServers;
use crate::lease::Holder;
use std::path::Path;
use tessera_proto::layout::Layout;

const NDS: u32 = 4;

/// A namespace on a temporary database with `NDS` in-memory data servers.
pub(crate) fn open_ns(path: &Path) -> (Namespace, Arc<MemDataServers>) {
    let store = Arc::new(Store::open(path, Default::default()).unwrap());
    let data = Arc::new(MemDataServers::default());
    let stats = Arc::new(StatsView::new((0..NDS).map(|i| (i, format!("127.0.0.1:{}", 7410 + i))).collect()));
    let ns = Namespace::new(store, &Defaults::default(), stats, data.clone()).unwrap();
    (ns, data)
}

fn root() -> Caller {
    Caller::root()
}

fn user(uid: u32) -> Caller {
    Caller { uid, gid: uid, groups: vec![] }
}

fn code<T: std::fmt::Debug>(r: FsResult<T>) -> ErrorCode {
    r.expect_err("expected an error").code
}

fn attr_of(r: MdsReply) -> Attr {
    match r {
        MdsReply::Entry { attr, .. } | MdsReply::Attr(attr) | MdsReply::Opened { attr, .. } => attr,
        other => panic!("no attributes in {other:?}"),
    }
}

/// An exclusive create of regular file `name` in `parent`, mode 0644, the directory's layout.
fn create_req(parent: Ino, name: &str) -> MdsRequest {
    MdsRequest::Create {
        parent,
        name: name.into(),
        kind: FileKind::File,
        perm: 0o644,
        umask: 0,
        rdev: 0,
        exclusive: true,
        layout: None,
    }
}

async fn create(ns: &Namespace, c: &Caller, parent: Ino, name: &str) -> FsResult<Attr> {
    ns.handle(c, create_req(parent, name)).await.map(attr_of)
}

async fn mkdir(ns: &Namespace, c: &Caller, parent: Ino, name: &str) -> FsResult<Attr> {
    ns.handle(c, MdsRequest::Mkdir { parent, name: name.into(), perm: 0o755, umask: 0 }).await.map(attr_of)
}

async fn lookup(ns: &Namespace, c: &Caller, parent: Ino, name: &str) -> FsResult<Attr> {
    ns.handle(c, MdsRequest::Lookup { parent, name: name.into() }).await.map(attr_of)
}

async fn getattr(ns: &Namespace, ino: Ino) -> Attr {
    attr_of(ns.handle(&root(), MdsRequest::GetAttr { ino }).await.unwrap())
}

async fn unlink(ns: &Namespace, c: &Caller, parent: Ino, name: &str) -> FsResult<MdsReply> {
    ns.handle(c, MdsRequest::Unlink { parent, name: name.into() }).await
}

async fn rename(ns: &Namespace, p: Ino, n: &str, np: Ino, nn: &str, flags: RenameFlags) -> FsResult<MdsReply> {
    let req = MdsRequest::Rename { parent: p, name: n.into(), new_parent: np, new_name: nn.into(), flags };
    ns.handle(&root(), req).await
}

async fn setattr(ns: &Namespace, c: &Caller, ino: Ino, set: SetAttrs) -> FsResult<Attr> {
    ns.handle(c, MdsRequest::SetAttr { ino, set }).await.map(attr_of)
}

async fn layout(ns: &Namespace, ino: Ino) -> Layout {
    match ns.handle(&root(), MdsRequest::GetLayout { ino }).await.unwrap() {
        MdsReply::Layout(l) => l,
        other => panic!("{other:?}"),
    }
}

fn destroyed_objects(ns: &Namespace) -> Vec<ObjectId> {
    let mut v: Vec<ObjectId> = ns.store().destroy_entries().unwrap().into_iter().flat_map(|(_, e)| e.objects).collect();
    v.sort_unstable();
    v
}

fn objects(l: &Layout) -> Vec<ObjectId> {
    let mut v: Vec<ObjectId> = l.targets.iter().map(|t| t.object).collect();
    v.sort_unstable();
    v
}

async fn readdir_all(ns: &Namespace, ino: Ino) -> Vec<DirEntry> {
    match ns.handle(&root(), MdsRequest::ReadDir { ino, offset: 0, max: 100_000 }).await.unwrap() {
        MdsReply::DirEntries(e) => e,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn create_lookup_getattr_and_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let a = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    assert_eq!((a.kind, a.perm, a.nlink, a.size), (FileKind::File, 0o644, 1, 0));
    assert!(a.ino > ROOT_INO);
    assert_eq!(lookup(&ns, &r, ROOT_INO, "f").await.unwrap(), a);
    assert_eq!(getattr(&ns, a.ino).await, a);
    let l = layout(&ns, a.ino).await;
    assert_eq!(l.targets.len(), NDS as usize, "stripe_count 0 means all data servers");
    assert_eq!(l.stripe_size, 1 << 20);
    let mut ds: Vec<DsId> = l.targets.iter().map(|t| t.ds).collect();
    ds.sort_unstable();
    assert_eq!(ds, vec![0, 1, 2, 3]);
    let p = ns.handle(&r, MdsRequest::LookupPath { path: "/f".into(), follow: true }).await.unwrap();
    assert_eq!(attr_of(p), a);
    assert_eq!(code(create(&ns, &r, ROOT_INO, "f").await), ErrorCode::Exists);
    // O_CREAT without O_EXCL returns the existing file.
    let req = MdsRequest::Create {
        parent: ROOT_INO,
        name: "f".into(),
        kind: FileKind::File,
        perm: 0o600,
        umask: 0,
        rdev: 0,
        exclusive: false,
        layout: None,
    };
    assert_eq!(attr_of(ns.handle(&r, req).await.unwrap()).ino, a.ino);
    assert_eq!(code(mkdir(&ns, &r, ROOT_INO, "f").await), ErrorCode::Exists);
    let fifo = MdsRequest::Create {
        parent: ROOT_INO,
        name: "f".into(),
        kind: FileKind::Fifo,
        perm: 0o600,
        umask: 0,
        rdev: 0,
        exclusive: false,
        layout: None,
    };
    assert_eq!(code(ns.handle(&r, fifo).await), ErrorCode::Exists);
    // An explicit layout request.
    let req = MdsRequest::Create {
        parent: ROOT_INO,
        name: "g".into(),
        kind: FileKind::File,
        perm: 0o644,
        umask: 0,
        rdev: 0,
        exclusive: true,
        layout: Some(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: None }),
    };
    let g = attr_of(ns.handle(&r, req).await.unwrap());
    let gl = layout(&ns, g.ino).await;
    assert_eq!((gl.stripe_size, gl.targets.len()), (65536, 2));
    assert_ne!(gl.targets[0].ds, gl.targets[1].ds);
    let dev = MdsRequest::Create {
        parent: ROOT_INO,
        name: "dev".into(),
        kind: FileKind::CharDev,
        perm: 0o600,
        umask: 0,
        rdev: 0x0501,
        exclusive: true,
        layout: None,
    };
    let d = attr_of(ns.handle(&r, dev).await.unwrap());
    assert_eq!((d.kind, d.rdev), (FileKind::CharDev, 0x0501));
    assert_eq!(code(ns.handle(&r, MdsRequest::GetLayout { ino: d.ino }).await), ErrorCode::NoData);
    assert_eq!(getattr(&ns, ROOT_INO).await.size, 3);
}

#[tokio::test]
async fn name_and_lookup_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    assert_eq!(code(lookup(&ns, &r, ROOT_INO, "nope").await), ErrorCode::NotFound);
    assert_eq!(code(create(&ns, &r, ROOT_INO, &"x".repeat(256)).await), ErrorCode::NameTooLong);
    assert!(create(&ns, &r, ROOT_INO, &"x".repeat(255)).await.is_ok());
    for bad in ["", ".", "..", "a/b", "a\0b"] {
        assert_eq!(code(create(&ns, &r, ROOT_INO, bad).await), ErrorCode::Invalid, "{bad:?}");
    }
    let long = format!("/{}", "a/".repeat(2100));
    let req = MdsRequest::LookupPath { path: long, follow: true };
    assert_eq!(code(ns.handle(&r, req).await), ErrorCode::NameTooLong);
    let f = create(&ns, &r, ROOT_INO, "file").await.unwrap();
    assert_eq!(code(lookup(&ns, &r, f.ino, "x").await), ErrorCode::NotDir);
    let req = MdsRequest::LookupPath { path: "/file/x".into(), follow: true };
    assert_eq!(code(ns.handle(&r, req).await), ErrorCode::NotDir);
    let req = MdsRequest::LookupPath { path: "/file/".into(), follow: true };
    assert_eq!(code(ns.handle(&r, req).await), ErrorCode::NotDir);
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: 999_999 }).await), ErrorCode::NotFound);
}

#[tokio::test]
async fn symlinks_resolve_and_loop() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    let f = create(&ns, &r, d.ino, "f").await.unwrap();
    let sym = |parent: Ino, name: &str, target: &str| MdsRequest::Symlink {
        parent,
        name: name.into(),
        target: target.into(),
    };
    let l = attr_of(ns.handle(&r, sym(ROOT_INO, "abs", "/d/f")).await.unwrap());
    assert_eq!((l.kind, l.size), (FileKind::Symlink, 4));
    ns.handle(&r, sym(ROOT_INO, "rel", "d/../d")).await.unwrap();
    ns.handle(&r, sym(ROOT_INO, "a", "b")).await.unwrap();
    ns.handle(&r, sym(ROOT_INO, "b", "a")).await.unwrap();
    assert_eq!(ns.handle(&r, MdsRequest::Readlink { ino: l.ino }).await.unwrap(), MdsReply::Target("/d/f".into()));
    assert_eq!(code(ns.handle(&r, MdsRequest::Readlink { ino: f.ino }).await), ErrorCode::Invalid);
    let path = |p: &str, follow: bool| MdsRequest::LookupPath { path: p.into(), follow };
    assert_eq!(attr_of(ns.handle(&r, path("/abs", true)).await.unwrap()).ino, f.ino);
    assert_eq!(attr_of(ns.handle(&r, path("/abs", false)).await.unwrap()).ino, l.ino);
    assert_eq!(attr_of(ns.handle(&r, path("/rel/f", false)).await.unwrap()).ino, f.ino);
    assert_eq!(attr_of(ns.handle(&r, path("/rel/", false)).await.unwrap()).ino, d.ino);
    assert_eq!(attr_of(ns.handle(&r, path("/d/./../d/f", true)).await.unwrap()).ino, f.ino);
    assert_eq!(attr_of(ns.handle(&r, path("/", true)).await.unwrap()).ino, ROOT_INO);
    assert_eq!(code(ns.handle(&r, path("/a", true)).await), ErrorCode::Loop);
    assert_eq!(code(ns.handle(&r, path("/a/x", false)).await), ErrorCode::Loop);
    assert_eq!(attr_of(ns.handle(&r, path("/a", false)).await.unwrap()).kind, FileKind::Symlink);
    assert_eq!(code(ns.handle(&r, sym(ROOT_INO, "long", &"x".repeat(4097))).await), ErrorCode::NameTooLong);
    assert_eq!(attr_of(ns.handle(&r, MdsRequest::Lookup { parent: d.ino, name: "..".into() }).await.unwrap()).ino, 1);
}

#[tokio::test]
async fn mkdir_rmdir_nlink() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 2);
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    assert_eq!((d.kind, d.nlink), (FileKind::Dir, 2));
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 3);
    mkdir(&ns, &r, d.ino, "e").await.unwrap();
    create(&ns, &r, d.ino, "f").await.unwrap();
    assert_eq!(getattr(&ns, d.ino).await.nlink, 3, "files do not count");
    let rmdir = |p: Ino, n: &str| MdsRequest::Rmdir { parent: p, name: n.into() };
    assert_eq!(code(ns.handle(&r, rmdir(ROOT_INO, "d")).await), ErrorCode::NotEmpty);
    assert_eq!(code(ns.handle(&r, rmdir(d.ino, "f")).await), ErrorCode::NotDir);
    assert_eq!(code(unlink(&ns, &r, d.ino, "e").await), ErrorCode::IsDir);
    assert_eq!(code(ns.handle(&r, rmdir(d.ino, ".")).await), ErrorCode::Invalid);
    assert_eq!(code(ns.handle(&r, rmdir(d.ino, "zz")).await), ErrorCode::NotFound);
    ns.handle(&r, rmdir(d.ino, "e")).await.unwrap();
    assert_eq!(getattr(&ns, d.ino).await.nlink, 2);
    unlink(&ns, &r, d.ino, "f").await.unwrap();
    ns.handle(&r, rmdir(ROOT_INO, "d")).await.unwrap();
    let root_attr = getattr(&ns, ROOT_INO).await;
    assert_eq!((root_attr.nlink, root_attr.size), (2, 0));
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: d.ino }).await), ErrorCode::NotFound);
}

#[tokio::test]
async fn rename_corner_cases() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let none = RenameFlags::default();
    // File over an existing file: the old target is destroyed.
    let a = create(&ns, &r, ROOT_INO, "a").await.unwrap();
    let b = create(&ns, &r, ROOT_INO, "b").await.unwrap();
    let bl = layout(&ns, b.ino).await;
    rename(&ns, ROOT_INO, "a", ROOT_INO, "b", none).await.unwrap();
    assert_eq!(lookup(&ns, &r, ROOT_INO, "b").await.unwrap().ino, a.ino);
    assert_eq!(code(lookup(&ns, &r, ROOT_INO, "a").await), ErrorCode::NotFound);
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: b.ino }).await), ErrorCode::NotFound);
    assert_eq!(destroyed_objects(&ns), objects(&bl));
    // Directories: over an empty one, not over a non-empty one; file/dir mismatches.
    let d1 = mkdir(&ns, &r, ROOT_INO, "d1").await.unwrap();
    let d2 = mkdir(&ns, &r, ROOT_INO, "d2").await.unwrap();
    create(&ns, &r, d1.ino, "x").await.unwrap();
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 4);
    rename(&ns, ROOT_INO, "d1", ROOT_INO, "d2", none).await.unwrap();
    assert_eq!(lookup(&ns, &r, ROOT_INO, "d2").await.unwrap().ino, d1.ino);
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: d2.ino }).await), ErrorCode::NotFound);
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 3);
    let d3 = mkdir(&ns, &r, ROOT_INO, "d3").await.unwrap();
    assert_eq!(code(rename(&ns, ROOT_INO, "d3", ROOT_INO, "d2", none).await), ErrorCode::NotEmpty);
    assert_eq!(code(rename(&ns, ROOT_INO, "b", ROOT_INO, "d3", none).await), ErrorCode::IsDir);
    assert_eq!(code(rename(&ns, ROOT_INO, "d3", ROOT_INO, "b", none).await), ErrorCode::NotDir);
    // Into its own subtree.
    let sub = mkdir(&ns, &r, d1.ino, "sub").await.unwrap();
    assert_eq!(code(rename(&ns, ROOT_INO, "d2", sub.ino, "loop", none).await), ErrorCode::Invalid);
    assert_eq!(code(rename(&ns, ROOT_INO, "d2", d1.ino, "self", none).await), ErrorCode::Invalid);
    // A directory moving to another parent: nlinks and "..".
    rename(&ns, d1.ino, "sub", d3.ino, "sub2", none).await.unwrap();
    assert_eq!(getattr(&ns, d1.ino).await.nlink, 2);
    assert_eq!(getattr(&ns, d3.ino).await.nlink, 3);
    assert_eq!(lookup(&ns, &r, sub.ino, "..").await.unwrap().ino, d3.ino);
    // Hard links of each other: no-op.
    ns.handle(&r, MdsRequest::Link { ino: a.ino, new_parent: ROOT_INO, new_name: "a2".into() }).await.unwrap();
    rename(&ns, ROOT_INO, "b", ROOT_INO, "a2", none).await.unwrap();
    assert_eq!(lookup(&ns, &r, ROOT_INO, "b").await.unwrap().ino, a.ino);
    assert_eq!(lookup(&ns, &r, ROOT_INO, "a2").await.unwrap().nlink, 2);
    // noreplace and exchange.
    let c = create(&ns, &r, ROOT_INO, "c").await.unwrap();
    let noreplace = RenameFlags { noreplace: true, exchange: false };
    let exchange = RenameFlags { noreplace: false, exchange: true };
    assert_eq!(code(rename(&ns, ROOT_INO, "c", ROOT_INO, "b", noreplace).await), ErrorCode::Exists);
    rename(&ns, ROOT_INO, "c", ROOT_INO, "c2", noreplace).await.unwrap();
    assert_eq!(code(rename(&ns, ROOT_INO, "c2", ROOT_INO, "missing", exchange).await), ErrorCode::NotFound);
    rename(&ns, ROOT_INO, "c2", d3.ino, "sub2", exchange).await.unwrap();
    assert_eq!(lookup(&ns, &r, ROOT_INO, "c2").await.unwrap().ino, sub.ino);
    assert_eq!(lookup(&ns, &r, d3.ino, "sub2").await.unwrap().ino, c.ino);
    assert_eq!(lookup(&ns, &r, sub.ino, "..").await.unwrap().ino, ROOT_INO);
    assert_eq!(getattr(&ns, d3.ino).await.nlink, 2);
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 5); // d2, d3, c2 (=sub) + 2
    assert_eq!(code(rename(&ns, ROOT_INO, "nope", ROOT_INO, "x", none).await), ErrorCode::NotFound);
}

#[tokio::test]
async fn a_silent_client_is_evicted_its_orphans_destroyed_and_it_is_told_once() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    ns.set_eviction_timeout(Duration::from_millis(300));
    let r = root();
    let (gone, live) = (Holder { conn: 1, client: 7 }, Holder { conn: 2, client: 8 });
    let open = |ino| MdsRequest::Open { ino, flags: OpenFlags { read: true, write: true, truncate: false } };
    let handle_of = |reply: MdsReply| match reply {
        MdsReply::Opened { handle, .. } => handle,
        o => panic!("{o:?}"),
    };
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    let l = layout(&ns, f.ino).await;
    let h7 = handle_of(ns.handle_client(&r, gone, open(f.ino)).await.unwrap());
    let h8 = handle_of(ns.handle_client(&r, live, open(f.ino)).await.unwrap());
    unlink(&ns, &r, ROOT_INO, "f").await.unwrap();
    // Client 7 falls silent; client 8 keeps its session.
    tokio::time::sleep(Duration::from_millis(400)).await;
    ns.handle_client(&r, live, MdsRequest::KeepAlive).await.unwrap();
    assert_eq!(ns.evict_silent().await, 1, "client 7 only");
    assert_eq!(getattr(&ns, f.ino).await.nlink, 0, "client 8 still holds the orphan");
    assert!(destroyed_objects(&ns).is_empty());
    // Client 7 is told once (its request is not applied), then goes on; its old handle is stale.
    assert_eq!(code(ns.handle_client(&r, gone, MdsRequest::GetAttr { ino: ROOT_INO }).await), ErrorCode::Evicted);
    ns.handle_client(&r, gone, MdsRequest::GetAttr { ino: ROOT_INO }).await.unwrap();
    let close7 = MdsRequest::Close { ino: f.ino, handle: h7, size: None, wrote: false };
    assert_eq!(code(ns.handle_client(&r, gone, close7).await), ErrorCode::Stale);
    // Client 8 falls silent too: the last handle closes and the orphan is destroyed.
    tokio::time::sleep(Duration::from_millis(400)).await;
    ns.handle_client(&r, gone, MdsRequest::KeepAlive).await.unwrap();
    assert_eq!(ns.evict_silent().await, 1, "client 8; client 7 kept its new session");
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: f.ino }).await), ErrorCode::NotFound);
    assert_eq!(destroyed_objects(&ns), objects(&l));
    match ns.handle_client(&r, live, MdsRequest::KeepAlive).await.unwrap() {
        MdsReply::Session { evicted, timeout_ms, .. } => assert!(evicted && timeout_ms == 300),
        o => panic!("{o:?}"),
    }
    let close8 = MdsRequest::Close { ino: f.ino, handle: h8, size: None, wrote: false };
    assert_eq!(code(ns.handle_client(&r, live, close8).await), ErrorCode::Stale);
}

#[tokio::test]
async fn unlink_open_file_becomes_orphan_until_last_close() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let r = root();
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    let l = layout(&ns, f.ino).await;
    let open = MdsRequest::Open { ino: f.ino, flags: OpenFlags { read: true, write: true, truncate: false } };
    let h1 = match ns.handle(&r, open.clone()).await.unwrap() {
        MdsReply::Opened { handle, .. } => handle,
        o => panic!("{o:?}"),
    };
    let h2 = match ns.handle(&r, open).await.unwrap() {
        MdsReply::Opened { handle, .. } => handle,
        o => panic!("{o:?}"),
    };
    unlink(&ns, &r, ROOT_INO, "f").await.unwrap();
    assert_eq!(getattr(&ns, f.ino).await.nlink, 0);
    assert!(destroyed_objects(&ns).is_empty());
    ns.handle(&r, MdsRequest::ReportWrite { ino: f.ino, size: 4096 }).await.unwrap();
    ns.handle(&r, MdsRequest::Close { ino: f.ino, handle: h1, size: Some(8192), wrote: true }).await.unwrap();
    assert_eq!(getattr(&ns, f.ino).await.size, 8192);
    ns.handle(&r, MdsRequest::Close { ino: f.ino, handle: h2, size: None, wrote: false }).await.unwrap();
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: f.ino }).await), ErrorCode::NotFound);
    assert_eq!(destroyed_objects(&ns), objects(&l));
    // The worker drains the log.
    assert!(!destroy::drain_once(ns.store(), data.as_ref()).await);
    assert!(destroyed_objects(&ns).is_empty());
    let mut removed: Vec<ObjectId> = data.removed.lock().unwrap().iter().map(|(_, o)| *o).collect();
    removed.sort_unstable();
    assert_eq!(removed, objects(&l));
    // A plain unlink destroys at once; a down data server defers it.
    let g = create(&ns, &r, ROOT_INO, "g").await.unwrap();
    let gl = layout(&ns, g.ino).await;
    data.down.lock().unwrap().push(gl.targets[0].ds);
    unlink(&ns, &r, ROOT_INO, "g").await.unwrap();
    assert!(destroy::drain_once(ns.store(), data.as_ref()).await);
    assert_eq!(destroyed_objects(&ns), vec![gl.targets[0].object]);
    data.down.lock().unwrap().clear();
    assert!(!destroy::drain_once(ns.store(), data.as_ref()).await);
}

#[tokio::test]
async fn create_open_is_one_round_trip_with_open_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _data) = open_ns(dir.path());
    let alice = user(1000);
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap();
    ns.handle(&root(), MdsRequest::SetAttr { ino: d.ino, set: SetAttrs { perm: Some(0o777), ..Default::default() } })
        .await
        .unwrap();
    let rw = OpenFlags { read: true, write: true, truncate: false };
    let create_open = |name: &str, perm: u32, exclusive: bool, flags: OpenFlags| MdsRequest::CreateOpen {
        parent: d.ino,
        name: name.into(),
        perm,
        umask: 0,
        exclusive,
        layout: None,
        flags,
    };
    // A new file: opened for writing although its mode grants its owner nothing (open(2) with O_CREAT).
    let (f, h) = match ns.handle(&alice, create_open("f", 0o000, true, rw)).await.unwrap() {
        MdsReply::Opened { attr, layout, handle, parent } => {
            assert!(layout.is_some());
            // The directory as the create left it (a FUSE client answers the kernel's next GETATTR).
            assert_eq!(parent, Some(getattr(&ns, d.ino).await));
            assert_eq!(parent.map(|p| p.size), Some(1));
            (attr, handle)
        }
        o => panic!("{o:?}"),
    };
    assert_eq!((f.uid, f.perm, f.nlink), (1000, 0o000, 1));
    // The handle counts: an unlink keeps the file until it is closed. Its reply: the parent's new attributes.
    let after = ns.handle(&alice, MdsRequest::Unlink { parent: d.ino, name: "f".into() }).await.unwrap();
    assert_eq!(after, MdsReply::Attr(getattr(&ns, d.ino).await));
    assert_eq!(getattr(&ns, f.ino).await.nlink, 0);
    ns.handle(&alice, MdsRequest::Close { ino: f.ino, handle: h, size: None, wrote: false }).await.unwrap();
    assert_eq!(code(ns.handle(&alice, MdsRequest::GetAttr { ino: f.ino }).await), ErrorCode::NotFound);
    // Exclusive on an existing name: EEXIST; not exclusive: an ordinary open of it, with its
    // permission check and O_TRUNC.
    let g = create(&ns, &alice, d.ino, "g").await.unwrap();
    ns.handle(&alice, MdsRequest::ReportWrite { ino: g.ino, size: 100 }).await.unwrap();
    assert_eq!(code(ns.handle(&alice, create_open("g", 0o644, true, rw)).await), ErrorCode::Exists);
    assert_eq!(code(ns.handle(&user(1001), create_open("g", 0o644, false, rw)).await), ErrorCode::Access);
    let trunc = OpenFlags { read: false, write: true, truncate: true };
    match ns.handle(&alice, create_open("g", 0o644, false, trunc)).await.unwrap() {
        MdsReply::Opened { attr, .. } => assert_eq!((attr.ino, attr.size), (g.ino, 0)),
        o => panic!("{o:?}"),
    }
    // Sync is answered (it makes everything durable).
    assert_eq!(ns.handle(&alice, MdsRequest::Sync).await.unwrap(), MdsReply::Ok);
}

#[tokio::test]
async fn hard_links() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    let link = |ino: Ino, p: Ino, n: &str| MdsRequest::Link { ino, new_parent: p, new_name: n.into() };
    let a = attr_of(ns.handle(&r, link(f.ino, d.ino, "g")).await.unwrap());
    assert_eq!(a.nlink, 2);
    assert_eq!(code(ns.handle(&r, link(f.ino, d.ino, "g")).await), ErrorCode::Exists);
    assert_eq!(code(ns.handle(&r, link(d.ino, ROOT_INO, "dd")).await), ErrorCode::Perm);
    unlink(&ns, &r, ROOT_INO, "f").await.unwrap();
    assert_eq!(lookup(&ns, &r, d.ino, "g").await.unwrap().nlink, 1);
    assert!(destroyed_objects(&ns).is_empty());
    unlink(&ns, &r, d.ino, "g").await.unwrap();
    assert_eq!(destroyed_objects(&ns).len(), NDS as usize);
}

#[tokio::test]
async fn permissions() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let (alice, bob) = (user(1000), user(1001));
    let priv_dir = mkdir(&ns, &r, ROOT_INO, "priv").await.unwrap();
    assert_eq!(code(create(&ns, &alice, priv_dir.ino, "x").await), ErrorCode::Access);
    setattr(&ns, &r, priv_dir.ino, SetAttrs { perm: Some(0o700), ..Default::default() }).await.unwrap();
    assert_eq!(code(lookup(&ns, &alice, priv_dir.ino, "x").await), ErrorCode::Access);
    let req = MdsRequest::ReadDir { ino: priv_dir.ino, offset: 0, max: 10 };
    assert_eq!(code(ns.handle(&alice, req).await), ErrorCode::Access);
    let req = MdsRequest::LookupPath { path: "/priv/x".into(), follow: true };
    assert_eq!(code(ns.handle(&alice, req).await), ErrorCode::Access);

    // Sticky /tmp.
    let tmp = mkdir(&ns, &r, ROOT_INO, "tmp").await.unwrap();
    setattr(&ns, &r, tmp.ino, SetAttrs { perm: Some(0o1777), ..Default::default() }).await.unwrap();
    let f = create(&ns, &alice, tmp.ino, "af").await.unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    assert_eq!(code(unlink(&ns, &bob, tmp.ino, "af").await), ErrorCode::Perm);
    let req = MdsRequest::Rename {
        parent: tmp.ino,
        name: "af".into(),
        new_parent: tmp.ino,
        new_name: "bf".into(),
        flags: RenameFlags::default(),
    };
    assert_eq!(code(ns.handle(&bob, req.clone()).await), ErrorCode::Perm);
    ns.handle(&alice, req).await.unwrap();
    let req = MdsRequest::Open { ino: f.ino, flags: OpenFlags { read: true, write: false, truncate: false } };
    ns.handle(&bob, req).await.unwrap(); // 0644: others may read
    let req = MdsRequest::Open { ino: f.ino, flags: OpenFlags { read: false, write: true, truncate: false } };
    assert_eq!(code(ns.handle(&bob, req).await), ErrorCode::Access);
    let req = MdsRequest::Open { ino: tmp.ino, flags: OpenFlags { read: false, write: true, truncate: false } };
    assert_eq!(code(ns.handle(&r, req).await), ErrorCode::IsDir);
    assert_eq!(code(ns.handle(&bob, MdsRequest::Access { ino: f.ino, mask: 2 }).await), ErrorCode::Access);
    ns.handle(&bob, MdsRequest::Access { ino: f.ino, mask: 4 }).await.unwrap();
    ns.handle(&bob, MdsRequest::Access { ino: f.ino, mask: 0 }).await.unwrap();
    assert_eq!(code(ns.handle(&r, MdsRequest::Access { ino: f.ino, mask: 1 }).await), ErrorCode::Access);

    // chmod / chown / utimes.
    let set = |s: SetAttrs| s;
    assert_eq!(
        code(setattr(&ns, &bob, f.ino, set(SetAttrs { perm: Some(0o777), ..Default::default() })).await),
        ErrorCode::Perm
    );
    assert_eq!(
        code(setattr(&ns, &alice, f.ino, SetAttrs { uid: Some(1001), ..Default::default() }).await),
        ErrorCode::Perm
    );
    assert_eq!(
        code(setattr(&ns, &alice, f.ino, SetAttrs { gid: Some(5), ..Default::default() }).await),
        ErrorCode::Perm
    );
    let alice_in_5 = Caller { uid: 1000, gid: 1000, groups: vec![5] };
    let a = setattr(&ns, &alice_in_5, f.ino, SetAttrs { gid: Some(5), ..Default::default() }).await.unwrap();
    assert_eq!(a.gid, 5);
    let a = setattr(&ns, &alice, f.ino, SetAttrs { perm: Some(0o2755), ..Default::default() }).await.unwrap();
    assert_eq!(a.perm, 0o0755, "setgid cleared: alice is not in group 5");
    let a = setattr(&ns, &alice_in_5, f.ino, SetAttrs { perm: Some(0o6755), ..Default::default() }).await.unwrap();
    assert_eq!(a.perm, 0o6755);
    let a = setattr(&ns, &r, f.ino, SetAttrs { uid: Some(1001), ..Default::default() }).await.unwrap();
    assert_eq!((a.uid, a.perm), (1001, 0o0755), "chown clears setuid and (group-exec) setgid");
    let t = Timestamp { secs: 1000, nanos: 5 };
    let explicit = SetAttrs { mtime: Some(TimeSet::At(t)), ..Default::default() };
    let now = SetAttrs { mtime: Some(TimeSet::Now), atime: Some(TimeSet::Now), ..Default::default() };
    assert_eq!(code(setattr(&ns, &alice, f.ino, explicit.clone()).await), ErrorCode::Perm);
    assert_eq!(code(setattr(&ns, &alice, f.ino, now.clone()).await), ErrorCode::Access);
    assert_eq!(setattr(&ns, &bob, f.ino, explicit).await.unwrap().mtime, t);
    setattr(&ns, &r, f.ino, SetAttrs { perm: Some(0o666), ..Default::default() }).await.unwrap();
    setattr(&ns, &alice, f.ino, now).await.unwrap();

    // setgid directories pass on their group.
    let sg = mkdir(&ns, &r, ROOT_INO, "sg").await.unwrap();
    setattr(&ns, &r, sg.ino, SetAttrs { perm: Some(0o2777), gid: Some(77), ..Default::default() }).await.unwrap();
    let sub = mkdir(&ns, &alice, sg.ino, "sub").await.unwrap();
    assert_eq!((sub.gid, sub.perm & 0o2000), (77, 0o2000));
    let file = create(&ns, &alice, sg.ino, "file").await.unwrap();
    assert_eq!((file.gid, file.perm), (77, 0o644));
}

#[tokio::test]
async fn readdir_cookies_are_stable() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    for i in 0..10 {
        create(&ns, &r, d.ino, &format!("f{i}")).await.unwrap();
    }
    let page = |offset: u64| {
        let ns = &ns;
        async move {
            match ns.handle(&root(), MdsRequest::ReadDir { ino: d.ino, offset, max: 3 }).await.unwrap() {
                MdsReply::DirEntries(e) => e,
                o => panic!("{o:?}"),
            }
        }
    };
    let p1 = page(0).await;
    assert_eq!(p1.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["f0", "f1", "f2"]);
    // Changes between pages: removed entries vanish, old ones are neither repeated nor skipped.
    unlink(&ns, &r, d.ino, "f1").await.unwrap();
    unlink(&ns, &r, d.ino, "f4").await.unwrap();
    create(&ns, &r, d.ino, "new").await.unwrap();
    let mut names: Vec<String> = p1.iter().map(|e| e.name.clone()).collect();
    let mut cookie = p1.last().unwrap().next_offset;
    loop {
        let p = page(cookie).await;
        if p.is_empty() {
            break;
        }
        cookie = p.last().unwrap().next_offset;
        names.extend(p.into_iter().map(|e| e.name));
    }
    assert_eq!(names, ["f0", "f1", "f2", "f3", "f5", "f6", "f7", "f8", "f9", "new"]);
    let all = readdir_all(&ns, d.ino).await;
    assert_eq!(all.len(), 9);
    assert!(all.windows(2).all(|w| w[0].next_offset < w[1].next_offset));
    assert_eq!(getattr(&ns, d.ino).await.size, 9);
}

#[tokio::test]
async fn xattrs_and_layout_attribute() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    let get = |ino: Ino, name: &str| MdsRequest::GetXattr { ino, name: name.into() };
    let set = |ino: Ino, name: &str, v: &[u8], mode: XattrMode| MdsRequest::SetXattr {
        ino,
        name: name.into(),
        value: v.to_vec(),
        mode,
    };
    assert_eq!(code(ns.handle(&r, get(f.ino, "user.a")).await), ErrorCode::NoData);
    ns.handle(&r, set(f.ino, "user.a", b"1", XattrMode::Any)).await.unwrap();
    assert_eq!(ns.handle(&r, get(f.ino, "user.a")).await.unwrap(), MdsReply::Xattr(b"1".to_vec()));
    assert_eq!(code(ns.handle(&r, set(f.ino, "user.a", b"2", XattrMode::Create)).await), ErrorCode::Exists);
    assert_eq!(code(ns.handle(&r, set(f.ino, "user.b", b"2", XattrMode::Replace)).await), ErrorCode::NoData);
    ns.handle(&r, set(f.ino, "user.a", b"3", XattrMode::Replace)).await.unwrap();
    ns.handle(&r, set(f.ino, "trusted.t", b"x", XattrMode::Any)).await.unwrap();
    let alice = user(1000);
    assert_eq!(code(ns.handle(&alice, set(f.ino, "trusted.u", b"x", XattrMode::Any)).await), ErrorCode::Perm);
    assert_eq!(code(ns.handle(&alice, get(f.ino, "trusted.t")).await), ErrorCode::Perm);
    assert_eq!(code(ns.handle(&alice, set(f.ino, "user.z", b"x", XattrMode::Any)).await), ErrorCode::Access);
    let big = vec![0u8; XATTR_SIZE_MAX + 1];
    assert_eq!(code(ns.handle(&r, set(f.ino, "user.big", &big, XattrMode::Any)).await), ErrorCode::Range);
    assert_eq!(code(ns.handle(&r, set(f.ino, "bogus", b"", XattrMode::Any)).await), ErrorCode::Unsupported);
    let list = |c: &Caller| {
        let ns = &ns;
        let c = c.clone();
        async move { ns.handle(&c, MdsRequest::ListXattr { ino: f.ino }).await.unwrap() }
    };
    assert_eq!(list(&r).await, MdsReply::XattrNames(vec!["trusted.t".into(), "user.a".into()]));
    assert_eq!(list(&alice).await, MdsReply::XattrNames(vec!["user.a".into()]));
    ns.handle(&r, MdsRequest::RemoveXattr { ino: f.ino, name: "user.a".into() }).await.unwrap();
    assert_eq!(
        code(ns.handle(&r, MdsRequest::RemoveXattr { ino: f.ino, name: "user.a".into() }).await),
        ErrorCode::NoData
    );
    let sym = attr_of(
        ns.handle(&r, MdsRequest::Symlink { parent: ROOT_INO, name: "s".into(), target: "f".into() }).await.unwrap(),
    );
    assert_eq!(code(ns.handle(&r, set(sym.ino, "user.a", b"1", XattrMode::Any)).await), ErrorCode::Perm);

    // tessera.layout on a file.
    let l = layout(&ns, f.ino).await;
    let text = match ns.handle(&r, get(f.ino, "tessera.layout")).await.unwrap() {
        MdsReply::Xattr(v) => String::from_utf8(v).unwrap(),
        o => panic!("{o:?}"),
    };
    let objs: Vec<String> = l.targets.iter().map(|t| format!("{}:{}", t.ds, t.object)).collect();
    assert_eq!(text, format!("stripe_size=1048576 stripe_count=4 objects={}", objs.join(",")));
    // ... and on a directory: its default, inherited by new files and subdirectories.
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    assert_eq!(code(ns.handle(&r, get(d.ino, "tessera.layout")).await), ErrorCode::NoData);
    ns.handle(&r, set(d.ino, "tessera.layout", b"stripe_size=65536 stripe_count=2", XattrMode::Any)).await.unwrap();
    assert_eq!(
        ns.handle(&r, get(d.ino, "tessera.layout")).await.unwrap(),
        MdsReply::Xattr(b"stripe_size=65536 stripe_count=2".to_vec())
    );
    assert_eq!(
        ns.handle(&r, MdsRequest::GetLayout { ino: d.ino }).await.unwrap(),
        MdsReply::DirLayout(LayoutSpec { stripe_size: Some(65536), stripe_count: Some(2), mirrors: None })
    );
    let g = create(&ns, &r, d.ino, "g").await.unwrap();
    let gl = layout(&ns, g.ino).await;
    assert_eq!((gl.stripe_size, gl.targets.len()), (65536, 2));
    let sub = mkdir(&ns, &r, d.ino, "sub").await.unwrap();
    let h = create(&ns, &r, sub.ino, "h").await.unwrap();
    assert_eq!(layout(&ns, h.ino).await.targets.len(), 2);
    ns.handle(&r, set(d.ino, "tessera.layout", b"stripe_count=1", XattrMode::Any)).await.unwrap();
    let g2 = create(&ns, &r, d.ino, "g2").await.unwrap();
    assert_eq!(layout(&ns, g2.ino).await.targets.len(), 1);
    assert_eq!(
        code(ns.handle(&r, set(d.ino, "tessera.layout", b"stripe_size=1000", XattrMode::Any)).await),
        ErrorCode::Invalid
    );
    assert_eq!(
        code(ns.handle(&r, set(d.ino, "tessera.layout", b"color=red", XattrMode::Any)).await),
        ErrorCode::Invalid
    );
    // Sizes take the suffixes of the command line (`setstripe -S 1MiB`).
    ns.handle(&r, set(d.ino, "tessera.layout", b"stripe_size=1MiB stripe_count=2", XattrMode::Any)).await.unwrap();
    assert_eq!(
        ns.handle(&r, get(d.ino, "tessera.layout")).await.unwrap(),
        MdsReply::Xattr(b"stripe_size=1048576 stripe_count=2".to_vec())
    );
}

#[tokio::test]
async fn truncate_and_set_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let r = root();
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    let l = layout(&ns, f.ino).await;
    // SetLayout on an empty file: fresh objects, the old ones destroyed.
    let spec = LayoutSpec { stripe_size: Some(4096), stripe_count: Some(2), mirrors: None };
    ns.handle(&r, MdsRequest::SetLayout { ino: f.ino, spec }).await.unwrap();
    let l2 = layout(&ns, f.ino).await;
    assert_eq!((l2.stripe_size, l2.targets.len()), (4096, 2));
    assert_eq!(destroyed_objects(&ns), objects(&l));
    ns.handle(&r, MdsRequest::ReportWrite { ino: f.ino, size: 3 * 4096 + 10 }).await.unwrap();
    assert_eq!(code(ns.handle(&r, MdsRequest::SetLayout { ino: f.ino, spec }).await), ErrorCode::Busy);
    // Truncate: every object gets its share.
    let a = setattr(&ns, &r, f.ino, SetAttrs { size: Some(4096 + 100), ..Default::default() }).await.unwrap();
    assert_eq!(a.size, 4196);
    let mut t = data.truncates.lock().unwrap().clone();
    t.sort_unstable();
    let mut want = vec![(l2.targets[0].ds, l2.targets[0].object, 4096), (l2.targets[1].ds, l2.targets[1].object, 100)];
    want.sort_unstable();
    assert_eq!(t, want);
    // An unreachable data server fails the truncate and leaves the size alone.
    data.down.lock().unwrap().push(l2.targets[1].ds);
    let e = setattr(&ns, &r, f.ino, SetAttrs { size: Some(0), ..Default::default() }).await;
    assert_eq!(code(e), ErrorCode::Unavailable);
    assert_eq!(getattr(&ns, f.ino).await.size, 4196);
    data.down.lock().unwrap().clear();
    // O_TRUNC.
    let req = MdsRequest::Open { ino: f.ino, flags: OpenFlags { read: false, write: true, truncate: true } };
    match ns.handle(&r, req).await.unwrap() {
        MdsReply::Opened { attr, layout, .. } => {
            assert_eq!(attr.size, 0);
            assert_eq!(layout.unwrap(), l2);
        }
        o => panic!("{o:?}"),
    }
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    let e = setattr(&ns, &r, d.ino, SetAttrs { size: Some(0), ..Default::default() }).await;
    assert_eq!(code(e), ErrorCode::IsDir);
}

#[tokio::test]
async fn statfs_reports_and_cluster_status() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    create(&ns, &r, ROOT_INO, "f").await.unwrap();
    for ds in 0..2 {
        // A disk with blocks reserved for root: a quarter used, half available.
        let rep = DsReport { ds, capacity: 1 << 30, free: 1 << 29, used: 1 << 28, ..Default::default() };
        ns.stats().record(rep);
    }
    match ns.handle(&r, MdsRequest::StatFs).await.unwrap() {
        MdsReply::StatFs(s) => {
            assert_eq!(s.block_size, 4096);
            assert_eq!(s.blocks, 2 * (1 << 30) / 4096);
            assert_eq!(s.blocks_free, 2 * (3 << 28) / 4096, "free: not used");
            assert_eq!(s.blocks_avail, (1 << 30) / 4096, "available: as the servers report");
            assert_eq!(s.files, 2);
            assert_eq!(s.name_max, 255);
        }
        o => panic!("{o:?}"),
    }
    match ns.handle(&r, MdsRequest::ClusterStatus).await.unwrap() {
        MdsReply::Cluster(v) => {
            assert_eq!(v.len(), NDS as usize);
            assert!(v[0].report.is_some() && v[3].report.is_none() && v[3].report_age_ms.is_none());
        }
        o => panic!("{o:?}"),
    }
    assert_eq!(ns.handle(&r, MdsRequest::Ping).await.unwrap(), MdsReply::Pong { version: PROTOCOL_VERSION });
}

#[tokio::test]
async fn reopen_keeps_everything_and_destroys_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let r = root();
    let (f, d, orphan_objects, xattr_val) = {
        let (ns, _) = open_ns(dir.path());
        let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
        let f = create(&ns, &r, d.ino, "f").await.unwrap();
        ns.handle(&r, MdsRequest::ReportWrite { ino: f.ino, size: 12345 }).await.unwrap();
        let req =
            MdsRequest::SetXattr { ino: f.ino, name: "user.k".into(), value: b"v".to_vec(), mode: XattrMode::Any };
        ns.handle(&r, req).await.unwrap();
        ns.handle(&r, MdsRequest::Symlink { parent: ROOT_INO, name: "s".into(), target: "/d/f".into() }).await.unwrap();
        let o = create(&ns, &r, ROOT_INO, "o").await.unwrap();
        let ol = layout(&ns, o.ino).await;
        let req = MdsRequest::Open { ino: o.ino, flags: OpenFlags { read: true, write: false, truncate: false } };
        ns.handle(&r, req).await.unwrap();
        unlink(&ns, &r, ROOT_INO, "o").await.unwrap();
        assert!(destroyed_objects(&ns).is_empty());
        (f, d, objects(&ol), b"v".to_vec())
    };
    let (ns, _) = open_ns(dir.path());
    assert_eq!(lookup(&ns, &r, ROOT_INO, "d").await.unwrap().ino, d.ino);
    let f2 = lookup(&ns, &r, d.ino, "f").await.unwrap();
    assert_eq!((f2.ino, f2.size), (f.ino, 12345));
    let req = MdsRequest::LookupPath { path: "/s".into(), follow: true };
    assert_eq!(attr_of(ns.handle(&r, req).await.unwrap()).ino, f.ino);
    let req = MdsRequest::GetXattr { ino: f.ino, name: "user.k".into() };
    assert_eq!(ns.handle(&r, req).await.unwrap(), MdsReply::Xattr(xattr_val));
    assert_eq!(getattr(&ns, ROOT_INO).await.nlink, 3);
    assert_eq!(readdir_all(&ns, ROOT_INO).await.len(), 2);
    assert!(destroyed_objects(&ns).is_empty(), "orphans are kept for the grace period");
    ns.set_eviction_timeout(Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(ns.end_recovery().await, 1);
    assert_eq!(destroyed_objects(&ns), orphan_objects, "orphans no handle reasserted are destroyed after it");
    // New ids never collide with old ones.
    let g = create(&ns, &r, ROOT_INO, "g").await.unwrap();
    assert!(g.ino > f.ino);
}

/// After a restart (or a failover), files unlinked while open stay for the grace period; those whose
/// handles a client reasserts stay until their last close, the others go when it ends; a reasserted
/// handle of a file that is gone is answered stale; the keep-alive says which start answers.
#[tokio::test]
async fn reasserted_handles_keep_their_unlinked_files_through_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = root();
    let client = Holder { conn: 1, client: 7 };
    let open = |ino| MdsRequest::Open { ino, flags: OpenFlags { read: true, write: true, truncate: false } };
    let handle_of = |reply: MdsReply| match reply {
        MdsReply::Opened { handle, .. } => handle,
        o => panic!("{o:?}"),
    };
    let boot_of = |reply: MdsReply| match reply {
        MdsReply::Session { boot, .. } => boot,
        o => panic!("{o:?}"),
    };
    let (kept, dropped, hk, hd, boot1) = {
        let (ns, _) = open_ns(dir.path());
        let boot1 = boot_of(ns.handle_client(&r, client, MdsRequest::KeepAlive).await.unwrap());
        let kept = create(&ns, &r, ROOT_INO, "kept").await.unwrap();
        let dropped = create(&ns, &r, ROOT_INO, "dropped").await.unwrap();
        let hk = handle_of(ns.handle_client(&r, client, open(kept.ino)).await.unwrap());
        let hd = handle_of(ns.handle_client(&r, client, open(dropped.ino)).await.unwrap());
        unlink(&ns, &r, ROOT_INO, "kept").await.unwrap();
        unlink(&ns, &r, ROOT_INO, "dropped").await.unwrap();
        ns.store().flush_sync().unwrap();
        ((kept.ino, layout(&ns, kept.ino).await), (dropped.ino, layout(&ns, dropped.ino).await), hk, hd, boot1)
    };
    let (ns, _) = open_ns(dir.path());
    ns.set_eviction_timeout(Duration::from_millis(300));
    let boot2 = boot_of(ns.handle_client(&r, client, MdsRequest::KeepAlive).await.unwrap());
    assert_ne!(boot1, boot2, "a new start says so");
    assert_eq!(ns.end_recovery().await, 0, "within the grace period nothing goes");
    let held = |ino, handle| tessera_proto::msg::HeldHandle { ino, handle };
    let reopen = MdsRequest::Reopen { handles: vec![held(kept.0, hk), held(999_999, 5)] };
    assert_eq!(ns.handle_client(&r, client, reopen.clone()).await.unwrap(), MdsReply::Reopened { stale: vec![5] });
    // Twice is once.
    ns.handle_client(&r, client, reopen).await.unwrap();
    let too_many = MdsRequest::Reopen { handles: vec![held(kept.0, hk); tessera_proto::msg::MAX_REOPEN + 1] };
    assert_eq!(code(ns.handle_client(&r, client, too_many).await), ErrorCode::Invalid);
    // A new handle is never a reasserted one.
    let f = create(&ns, &r, ROOT_INO, "new").await.unwrap();
    let hn = handle_of(ns.handle_client(&r, client, open(f.ino)).await.unwrap());
    assert!(hn != hk && hn != hd);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(ns.end_recovery().await, 1, "the file no handle reasserted");
    assert_eq!(destroyed_objects(&ns), objects(&dropped.1));
    assert_eq!(getattr(&ns, kept.0).await.nlink, 0, "the reasserted one lives on");
    let close = MdsRequest::Close { ino: kept.0, handle: hk, size: None, wrote: false };
    ns.handle_client(&r, client, close).await.unwrap();
    assert_eq!(code(ns.handle(&r, MdsRequest::GetAttr { ino: kept.0 }).await), ErrorCode::NotFound);
    let mut both = objects(&dropped.1);
    both.extend(objects(&kept.1));
    both.sort();
    let mut gone = destroyed_objects(&ns);
    gone.sort();
    assert_eq!(gone, both, "and goes at its last close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_and_renames() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let ns = Arc::new(ns);
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..4 {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                create(&ns, &root(), d.ino, &format!("t{t}-{i}")).await.unwrap();
                // Racing renames of shared names must fail cleanly or succeed, never corrupt.
                let _ = rename(&ns, d.ino, &format!("t{t}-{i}"), d.ino, "shared", RenameFlags::default()).await;
                let _ = rename(&ns, d.ino, "shared", d.ino, &format!("back{t}-{i}"), RenameFlags::default()).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let entries = readdir_all(&ns, d.ino).await;
    let da = getattr(&ns, d.ino).await;
    assert_eq!(entries.len() as u64, da.size);
    // Every created file is either still there or was replaced (destroyed) by a rename over "shared".
    let replaced = ns.store().destroy_entries().unwrap().len() / NDS as usize;
    assert_eq!(entries.len() + replaced, 400);
    for e in entries {
        assert_eq!(getattr(&ns, e.ino).await.nlink, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_creates_finish() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let ns = Arc::new(ns);
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..32 {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..40 {
                create(&ns, &root(), ROOT_INO, &format!("t{t}-{i}")).await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(60), t).await.unwrap().unwrap();
    }
    eprintln!("1280 creates in {:?}", t0.elapsed());
    assert_eq!(getattr(&ns, ROOT_INO).await.size, 1280);
}

fn async_create(ino: Ino, name: &str, open: bool) -> DirOp {
    let open = open.then_some(OpenFlags { read: true, write: true, truncate: false });
    DirOp::Create(AsyncCreate {
        ino,
        name: name.into(),
        perm: 0o640,
        uid: 1000,
        gid: 1000,
        time: Timestamp::now(),
        open,
        job: String::new(),
        pid: 0,
    })
}

fn async_unlink(name: &str) -> DirOp {
    DirOp::Unlink { name: name.into(), job: String::new(), pid: 0, time: Timestamp::now() }
}

/// A lease holder's batch on connection 1: its results, the directory's attributes and the renewed lease.
async fn batch(
    ns: &Namespace,
    dir: Ino,
    token: u64,
    entries: Vec<DirOp>,
) -> (Vec<BatchResult>, Attr, Option<DirLease>) {
    let req = MdsRequest::DirBatch { dir, token, entries, keep: true };
    match ns.handle_client(&root(), conn(1), req).await.unwrap() {
        MdsReply::Batch { results, dir_attr, lease } => (results, dir_attr, lease),
        other => panic!("not a batch reply: {other:?}"),
    }
}

/// Connection 1 gives its lease on `dir` up.
async fn give_up(ns: &Namespace, dir: Ino, token: u64) {
    let req = MdsRequest::DirBatch { dir, token, entries: vec![], keep: false };
    ns.handle_client(&root(), conn(1), req).await.unwrap();
}

#[tokio::test]
async fn a_lease_holder_unlinks_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    let l = leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
    let (made, _, l2) = batch(&ns, d, l.token, vec![async_create(l.inos[0], "kept", false)]).await;
    assert_eq!(made[0].result, Ok(None));
    assert!(l2.is_some());
    mkdir(&ns, &root(), d, "sub").await.unwrap();
    let entries = vec![
        async_create(l.inos[1], "open", true),
        async_create(l.inos[2], "gone", false),
        async_unlink("open"),
        async_unlink("gone"),
        async_unlink("kept"),
        async_unlink("missing"),
        async_unlink("sub"),
        async_create(l.inos[3], "gone", false),
    ];
    let (results, dir_attr, lease) = batch(&ns, d, l.token, entries).await;
    assert!(lease.is_some(), "renewed");
    let handle = match &results[0].result {
        Ok(Some((h, _))) => *h,
        other => panic!("not opened: {other:?}"),
    };
    assert_eq!((results[2].ino, results[3].ino, results[4].ino), (l.inos[1], l.inos[2], l.inos[0]));
    assert!(results[2..5].iter().all(|r| r.result == Ok(None)), "{results:?}");
    assert_eq!(results[5].result.as_ref().unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(results[6].result.as_ref().unwrap_err().code, ErrorCode::IsDir, "a directory is not unlinked");
    assert_eq!(results[7].result, Ok(None), "a name removed earlier in the batch is free again");
    assert_eq!(dir_attr.size, 2, "sub and the new gone");
    assert_eq!(lookup(&ns, &root(), d, "gone").await.unwrap().ino, l.inos[3]);
    assert_eq!(code(lookup(&ns, &root(), d, "kept").await), ErrorCode::NotFound);
    // The file opened by the batch and unlinked in it lives on as an orphan until its close.
    assert_eq!(getattr(&ns, l.inos[1]).await.nlink, 0);
    assert!(!destroy::drain_once(ns.store(), data.as_ref()).await);
    let removed: Vec<ObjectId> = data.removed.lock().unwrap().iter().map(|(_, o)| *o).collect();
    assert_eq!(removed.len(), 2 * NDS as usize, "kept's and the first gone's objects, not the open file's");
    let close = MdsRequest::Close { ino: l.inos[1], handle, size: None, wrote: false };
    ns.handle(&root(), close).await.unwrap();
    assert_eq!(code(ns.handle(&root(), MdsRequest::GetAttr { ino: l.inos[1] }).await), ErrorCode::NotFound);
}

/// The times a lease holder showed are the ones recorded: a batch applied later (here, with times a
/// second before now) sets the directory's mtime and ctime to its last change's time, and a created
/// file's times to its create's, not to when the batch arrived (tar's "file changed as we read it").
#[tokio::test]
async fn a_batch_records_the_times_its_holder_showed() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    let l = leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
    let earlier = |ms: i64| {
        let now = Timestamp::now();
        let nanos = i64::from(now.nanos) - ms * 1_000_000;
        Timestamp { secs: now.secs + nanos.div_euclid(1_000_000_000), nanos: nanos.rem_euclid(1_000_000_000) as u32 }
    };
    let (created_at, unlinked_at) = (earlier(1500), earlier(1000));
    let mut create = async_create(l.inos[0], "a", false);
    if let DirOp::Create(c) = &mut create {
        c.time = created_at;
    }
    let mut second = async_create(l.inos[1], "b", false);
    if let DirOp::Create(c) = &mut second {
        c.time = created_at;
    }
    let (_, after_creates, _) = batch(&ns, d, l.token, vec![create, second]).await;
    assert_eq!((after_creates.mtime, after_creates.ctime), (created_at, created_at));
    let a = getattr(&ns, l.inos[0]).await;
    assert_eq!((a.mtime, a.ctime, a.crtime), (created_at, created_at, created_at));
    let unlink = DirOp::Unlink { name: "b".into(), job: String::new(), pid: 0, time: unlinked_at };
    let (_, after_unlink, _) = batch(&ns, d, l.token, vec![unlink]).await;
    assert_eq!((after_unlink.mtime, after_unlink.ctime), (unlinked_at, unlinked_at));
    let now = getattr(&ns, d).await;
    assert_eq!((now.mtime, now.ctime), (unlinked_at, unlinked_at), "no time moved after the fact");
}

fn leased(r: FsResult<MdsReply>) -> DirLease {
    match r.unwrap() {
        MdsReply::Lease(l) => l,
        other => panic!("not a lease: {other:?}"),
    }
}

#[tokio::test]
async fn a_lease_holder_creates_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    let full = mkdir(&ns, &root(), ROOT_INO, "full").await.unwrap().ino;
    create(&ns, &root(), full, "x").await.unwrap();
    let lease_req = |dir| MdsRequest::LeaseDir { dir };
    let f = leased(ns.handle_client(&root(), conn(1), lease_req(full)).await);
    assert_eq!(f.entries, vec![("x".to_string(), FileKind::File)], "a directory's names come with its grant");
    give_up(&ns, full, f.token).await;
    assert_eq!(code(ns.handle_client(&user(1000), conn(1), lease_req(d)).await), ErrorCode::Access, "not writable");
    let l = leased(ns.handle_client(&root(), conn(1), lease_req(d)).await);
    assert_eq!(l.inos.len(), crate::lease::RESERVED_INOS);
    assert_eq!(code(ns.handle_client(&root(), conn(2), lease_req(d)).await), ErrorCode::Busy, "held by connection 1");
    let entries = vec![
        async_create(l.inos[0], "a", false),
        async_create(l.inos[1], "b", true),
        async_create(l.inos[2], "a", false),
        async_create(999_999, "c", false),
    ];
    let (results, dir_attr, lease) = batch(&ns, d, l.token, entries.clone()).await;
    assert_eq!(results[0].result, Ok(None));
    assert!(matches!(&results[1].result, Ok(Some((_, l))) if !l.targets.is_empty()), "opened with its layout");
    assert_eq!(results[2].result.as_ref().unwrap_err().code, ErrorCode::Exists, "a name taken");
    assert_eq!(results[3].result.as_ref().unwrap_err().code, ErrorCode::Invalid, "an inode not reserved");
    assert_eq!(dir_attr.size, 2);
    let renewed = lease.expect("renewed");
    assert_eq!(renewed.inos.len(), 4, "the inode numbers used are replaced");
    let a = lookup(&ns, &root(), d, "a").await.unwrap();
    assert_eq!((a.ino, a.uid, a.gid, a.perm, a.nlink), (l.inos[0], 1000, 1000, 0o640, 1));
    // Sent again (a lost reply): the entries made are taken as done.
    let again = MdsRequest::DirBatch { dir: d, token: l.token, entries: entries[..2].to_vec(), keep: false };
    let MdsReply::Batch { results, lease, .. } = ns.handle_client(&root(), conn(1), again).await.unwrap() else {
        panic!("not a batch reply")
    };
    assert!(results.iter().all(|r| r.result.is_ok()), "{results:?}");
    assert!(lease.is_none(), "given up");
    assert_eq!(getattr(&ns, d).await.size, 2);
    // Given up: another connection may take it once the directory is empty again.
    let again = leased(ns.handle_client(&root(), conn(2), lease_req(d)).await);
    let mut names: Vec<_> = again.entries.into_iter().map(|(n, _)| n).collect();
    names.sort();
    assert_eq!(names, ["a", "b"], "another connection takes it once given up");
}

#[tokio::test]
async fn a_directory_whose_names_do_not_fit_in_a_grant_is_not_leased() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    let long = "n".repeat(250);
    // Just within the bound of name bytes, then one name more.
    let fit = LEASE_NAME_BYTES_MAX / 254;
    for i in 0..fit {
        create(&ns, &root(), d, &format!("{long}{i:04}")).await.unwrap();
    }
    let l = leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
    assert_eq!(l.entries.len(), fit);
    give_up(&ns, d, l.token).await;
    create(&ns, &root(), d, &format!("{long}{fit:04}")).await.unwrap();
    assert_eq!(code(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await), ErrorCode::Busy);
}

#[tokio::test]
async fn another_clients_request_waits_for_the_holders_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let ns = Arc::new(ns);
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    let l = leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
    let other = tokio::spawn({
        let ns = ns.clone();
        async move {
            let req = MdsRequest::Lookup { parent: d, name: "f".into() };
            ns.leases().admit(conn(2), &req).await;
            ns.handle_client(&root(), conn(2), req).await.map(attr_of)
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!other.is_finished(), "held while the lease lasts");
    let batch =
        MdsRequest::DirBatch { dir: d, token: l.token, entries: vec![async_create(l.inos[0], "f", false)], keep: true };
    let MdsReply::Batch { lease, .. } = ns.handle_client(&root(), conn(1), batch).await.unwrap() else { panic!() };
    assert!(lease.is_none(), "recalled: the reply says so");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(!other.is_finished(), "held until the holder gives it up");
    give_up(&ns, d, l.token).await;
    let found = tokio::time::timeout(std::time::Duration::from_secs(1), other).await.unwrap().unwrap().unwrap();
    assert_eq!(found.ino, l.inos[0], "the waiting lookup sees the holder's create");
}

#[tokio::test]
async fn a_batch_after_an_mds_restart_uses_the_inode_numbers_reserved_before() {
    let dir = tempfile::tempdir().unwrap();
    let (d, l, used) = {
        let (ns, _) = open_ns(dir.path());
        let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
        let used = create(&ns, &root(), ROOT_INO, "used").await.unwrap().ino;
        let l = leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
        ns.store().flush_sync().unwrap();
        (d, l, used)
    };
    let (ns, _) = open_ns(dir.path());
    let entries = vec![async_create(l.inos[0], "a", false), async_create(used, "b", false)];
    let batch = MdsRequest::DirBatch { dir: d, token: l.token, entries, keep: true };
    let MdsReply::Batch { results, lease, .. } = ns.handle_client(&root(), conn(7), batch).await.unwrap() else {
        panic!()
    };
    assert_eq!(results[0].result, Ok(None), "reserved before the restart");
    assert_eq!(results[1].result.as_ref().unwrap_err().code, ErrorCode::Invalid, "an inode number in use");
    assert!(lease.is_none(), "the restart ended the lease");
    assert_eq!(lookup(&ns, &root(), d, "a").await.unwrap().ino, l.inos[0]);
}

#[tokio::test]
async fn after_a_restart_directories_wait_out_the_leases_of_the_previous_run() {
    let dir = tempfile::tempdir().unwrap();
    let lookup = MdsRequest::Lookup { parent: ROOT_INO, name: "d".into() };
    let quick = std::time::Duration::from_millis(300);
    {
        let (ns, _) = open_ns(dir.path());
        let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
        assert!(
            tokio::time::timeout(quick, ns.leases().admit(conn(5), &lookup)).await.is_ok(),
            "no lease yet: no wait"
        );
        leased(ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await);
        ns.store().flush_sync().unwrap();
    }
    let (ns, _) = open_ns(dir.path());
    assert!(
        tokio::time::timeout(quick, ns.leases().admit(conn(5), &lookup)).await.is_err(),
        "a holder from before the restart may still answer for the directory"
    );
    let batch = MdsRequest::DirBatch { dir: ROOT_INO, token: 1, entries: vec![], keep: false };
    assert!(
        tokio::time::timeout(quick, ns.leases().admit(conn(5), &batch)).await.is_ok(),
        "a holder's batch is let through"
    );
    assert!(tokio::time::timeout(crate::lease::LEASE_TIME * 2, ns.leases().admit(conn(5), &lookup)).await.is_ok());
}

/// Client `n` on a connection of its own.
fn conn(n: u64) -> crate::lease::Holder {
    crate::lease::Holder { conn: n, client: n }
}

/// The kinds of a report's findings, sorted.
fn fsck_kinds(r: &FsckReport) -> Vec<&str> {
    let mut k: Vec<&str> = r.findings.iter().map(|f| f.kind.as_str()).collect();
    k.sort_unstable();
    k.dedup();
    k
}

#[tokio::test]
async fn fsck_finds_injected_corruptions_repairs_them_and_a_second_run_is_clean() {
    use crate::store::{ino_key, xattr_key, T};
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    mkdir(&ns, &r, d.ino, "sub").await.unwrap();
    let a = create(&ns, &r, d.ino, "a").await.unwrap();
    let b = create(&ns, &r, d.ino, "b").await.unwrap();
    let c = create(&ns, &r, d.ino, "c").await.unwrap();
    let e = create(&ns, &r, ROOT_INO, "e").await.unwrap();
    // Every file's objects exist; a's first one holds 5000 bytes the MDS never heard of.
    for f in [&a, &c, &e] {
        let l = layout(&ns, f.ino).await;
        for t in &l.targets {
            data.objects.lock().unwrap().insert((t.ds, t.object), 0);
        }
    }
    let la = layout(&ns, a.ino).await;
    data.objects.lock().unwrap().insert((la.targets[0].ds, la.targets[0].object), 5000);
    assert_eq!(fsck_kinds(&ns.fsck(false).await.unwrap()), vec!["size"], "only a's size before the injections");
    let clean = || async {
        let r = ns.fsck(false).await.unwrap();
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
    };
    // Repairing a's size leaves a clean namespace.
    assert_eq!(ns.fsck(true).await.unwrap().repaired, 1);
    assert_eq!(getattr(&ns, a.ino).await.size, 5000);
    let orphan = ns.store().new_id().unwrap();
    data.objects.lock().unwrap().insert((1, orphan), 42); // an object no layout names

    // The injections, straight into the store.
    let mut tx = ns.store().begin();
    tx.del(T::Inodes, &ino_key(b.ino)); // /d/b: an entry naming nothing
    let dc = tx.dentry(d.ino, "c").unwrap().unwrap();
    tx.del_dentry(d.ino, "c", &dc); // c: an inode no entry names
    tx.update_inode(e.ino, |i| {
        i.attr.nlink = 3; // wrong link count
        i.layout.as_mut().unwrap().targets[0].ds = 99; // a stripe on a server the cluster lacks
    })
    .unwrap();
    tx.destroy_objects(99, vec![12345]).unwrap(); // a destroy-log entry that can never drain
    data.down.lock().unwrap().push(99);
    tx.put(T::Xattrs, &xattr_key(777_777, "user.x"), b"v".to_vec()); // a record of no inode
    tx.commit().unwrap();

    let before = ns.fsck(false).await.unwrap();
    let mut want = vec![
        "dangling-entry",
        "destroy-log",
        "entry-count",
        "link-count",
        "orphan-object",
        "stale-record",
        "unknown-server",
        "unreachable",
    ];
    want.sort_unstable();
    assert_eq!(fsck_kinds(&before), want, "{:#?}", before.findings);
    assert_eq!(before.repaired, 0);
    assert!(before.findings.iter().any(|f| f.kind == "dangling-entry" && f.what.contains("/d/b")), "{before:#?}");
    // Checking changed nothing.
    assert_eq!(code(lookup(&ns, &r, ROOT_INO, "lost+found").await), ErrorCode::NotFound);
    assert_eq!(getattr(&ns, e.ino).await.nlink, 3);

    let repaired = ns.fsck(true).await.unwrap();
    assert!(repaired.repaired >= want.len() as u64, "{repaired:#?}");
    clean().await;
    // What repair did.
    let lf = lookup(&ns, &r, ROOT_INO, "lost+found").await.unwrap();
    let moved = lookup(&ns, &r, lf.ino, &format!("#{}", c.ino)).await.unwrap();
    assert_eq!((moved.ino, moved.nlink), (c.ino, 1));
    assert_eq!(code(lookup(&ns, &r, d.ino, "b").await), ErrorCode::NotFound);
    assert_eq!(getattr(&ns, d.ino).await.size, 2, "a and sub");
    assert_eq!(getattr(&ns, e.ino).await.nlink, 1);
    assert!(layout(&ns, e.ino).await.targets.iter().all(|t| t.ds < NDS));
    destroy::drain_once(ns.store(), data.as_ref()).await;
    assert!(!data.objects.lock().unwrap().contains_key(&(1, orphan)), "the orphan object was destroyed");
    assert!(ns.store().destroy_entries().unwrap().is_empty());
    let names: Vec<String> = readdir_all(&ns, d.ino).await.into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"a".to_string()) && !names.contains(&"b".to_string()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsck_leaves_alone_what_changes_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let ns = Arc::new(ns);
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    // Creates, hard links, renames and unlinks race with checks: no check may find anything. The work
    // goes on until a few checks ran alongside it (a check's scans run on a blocking thread, which a
    // loaded machine may give little time), up to a bound.
    let checks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let work = {
        let (ns, checks) = (ns.clone(), checks.clone());
        tokio::spawn(async move {
            for n in 0.. {
                if (n >= 300 && checks.load(std::sync::atomic::Ordering::Relaxed) >= 3) || n >= 5000 {
                    break;
                }
                // The truncate makes the data servers create the objects (with the sizes a file of 10
                // bytes gives them), as a client's writes would.
                let f = create(&ns, &root(), d.ino, &format!("f{n}")).await.unwrap();
                let req = MdsRequest::SetAttr { ino: f.ino, set: SetAttrs { size: Some(10), ..Default::default() } };
                ns.handle(&root(), req).await.unwrap();
                let link = MdsRequest::Link { ino: f.ino, new_parent: ROOT_INO, new_name: format!("l{n}") };
                ns.handle(&root(), link).await.unwrap();
                if n % 3 == 0 {
                    rename(&ns, d.ino, &format!("f{n}"), ROOT_INO, &format!("r{n}"), RenameFlags::default())
                        .await
                        .unwrap();
                }
                if n % 2 == 0 {
                    unlink(&ns, &root(), ROOT_INO, &format!("l{n}")).await.unwrap();
                }
                tokio::task::yield_now().await;
            }
        })
    };
    while !work.is_finished() {
        let report = ns.fsck(false).await.unwrap();
        assert!(report.findings.is_empty(), "{:#?}", report.findings);
        checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
    work.await.unwrap();
    let checks = checks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(checks >= 3, "the checks ran alongside the changes ({checks})");
    destroy::drain_once(ns.store(), data.as_ref()).await;
    let report = ns.fsck(false).await.unwrap();
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}

#[tokio::test]
async fn fsck_leaves_the_size_of_a_file_being_truncated_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let f = create(&ns, &root(), ROOT_INO, "f").await.unwrap();
    let l = layout(&ns, f.ino).await;
    // A truncate upward has extended the objects and not yet committed the size.
    data.objects.lock().unwrap().insert((l.targets[0].ds, l.targets[0].object), 4096);
    ns.truncating().insert(f.ino, 1);
    let r = ns.fsck(true).await.unwrap();
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert_eq!(getattr(&ns, f.ino).await.size, 0);
    ns.truncating().clear();
    assert_eq!(fsck_kinds(&ns.fsck(false).await.unwrap()), vec!["size"]);
}

#[tokio::test]
async fn a_removed_files_size_is_the_prediction_for_the_next_file_at_its_path_and_policies_are_attributes() {
    let d = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(d.path());
    let r = root();
    let dir = mkdir(&ns, &r, ROOT_INO, "run").await.unwrap();
    let f = create(&ns, &r, dir.ino, "out.0").await.unwrap();
    setattr(&ns, &r, f.ino, SetAttrs { size: Some(3 << 20), ..Default::default() }).await.unwrap();
    assert_eq!(ns.placer.predict(dir.ino, "out.0"), 0);
    unlink(&ns, &r, dir.ino, "out.0").await.unwrap();
    assert_eq!(ns.placer.predict(dir.ino, "out.0"), 3 << 20, "the next run's out.0 is expected at 3 MiB");
    // A directory's policy is an attribute, checked, and inherited by subdirectories.
    let set = |ino, v: &[u8]| MdsRequest::SetXattr {
        ino,
        name: "tessera.placement".into(),
        value: v.to_vec(),
        mode: XattrMode::Any,
    };
    assert_eq!(code(ns.handle(&r, set(dir.ino, b"nope")).await), ErrorCode::Invalid);
    ns.handle(&r, set(dir.ino, b"tarazu")).await.unwrap();
    let sub = mkdir(&ns, &r, dir.ino, "sub").await.unwrap();
    let get = |ino| MdsRequest::GetXattr { ino, name: "tessera.placement".into() };
    assert_eq!(ns.handle(&r, get(sub.ino)).await.unwrap(), MdsReply::Xattr(b"balanced".to_vec()));
    create(&ns, &r, sub.ino, "g").await.unwrap();
    assert_eq!(ns.placer.status().last.unwrap().policy, "balanced", "a file in it is placed by its policy");
}

async fn instantiate(ns: &Namespace, ino: Ino, offset: u64) -> Layout {
    match ns.handle(&root(), MdsRequest::InstantiateExtent { ino, offset }).await.unwrap() {
        MdsReply::Layout(l) => l,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn composite_layouts_place_extents_when_reached_on_distinct_targets() {
    use tessera_proto::layout::{text, ExtentSpec, EOF};
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "pfl").await.unwrap();
    let e = |end, c| ExtentSpec { end, stripe_size: Some(65536), stripe_count: Some(c), mirrors: None };
    // NDS = 4 targets: 1 + 2 stripes, then "all" gets the one target left (the file stops growing).
    let specs = vec![e(1 << 20, 1), e(4 << 20, 2), e(EOF, 0)];
    ns.handle(&r, MdsRequest::SetCompositeLayout { ino: d.ino, extents: specs.clone() }).await.unwrap();
    let bad = vec![e(1 << 20, 1)];
    assert_eq!(
        code(ns.handle(&r, MdsRequest::SetCompositeLayout { ino: d.ino, extents: bad }).await),
        ErrorCode::Invalid
    );
    for ino in [d.ino, mkdir(&ns, &r, d.ino, "sub").await.unwrap().ino] {
        let got = ns.handle(&r, MdsRequest::GetLayout { ino }).await.unwrap();
        assert_eq!(got, MdsReply::DirComposite(specs.clone()), "set, and inherited by subdirectories");
    }
    let shown = ns.handle(&r, MdsRequest::GetXattr { ino: d.ino, name: text::XATTR_NAME.into() }).await.unwrap();
    assert_eq!(shown, MdsReply::Xattr(text::format_extents(&specs).into_bytes()));

    let f = create(&ns, &r, d.ino, "f").await.unwrap();
    let l = layout(&ns, f.ino).await;
    assert!(l.is_composite());
    assert_eq!((l.targets.len(), l.extents.len(), l.instantiated_end()), (1, 2, 1 << 20));
    assert!(l.extents.iter().all(|e| e.targets.is_empty()), "later extents wait until the file reaches them");
    assert_eq!(instantiate(&ns, f.ino, 1000).await, l, "inside the first extent: nothing to do");
    let l1 = instantiate(&ns, f.ino, 1 << 20).await;
    assert_eq!((l1.extents[0].targets.len(), l1.extents[1].targets.len()), (2, 0));
    assert_eq!(instantiate(&ns, f.ino, (1 << 20) + 5).await, l1, "idempotent");
    // A truncate past the last extent's start instantiates it and sizes every object.
    setattr(&ns, &r, f.ino, SetAttrs { size: Some(5 << 20), ..Default::default() }).await.unwrap();
    let l2 = layout(&ns, f.ino).await;
    assert_eq!(l2.extents[1].targets.len(), 1);
    let mut servers: Vec<DsId> = l2.all_targets().map(|t| t.ds).collect();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(servers.len(), 4, "distinct targets across the extents: {l2:?}");
    for (k, t) in l2.all_targets().enumerate() {
        assert_eq!(data.objects.lock().unwrap().get(&(t.ds, t.object)), Some(&l2.object_size(k, 5 << 20)));
    }
    // fsck names the objects of every extent: none is an orphan, and the size they imply is right.
    let report = ns.fsck(false).await.unwrap();
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
    // Removing the file destroys the objects of every extent.
    unlink(&ns, &r, d.ino, "f").await.unwrap();
    let mut all: Vec<ObjectId> = l2.all_targets().map(|t| t.object).collect();
    all.sort_unstable();
    assert_eq!(destroyed_objects(&ns), all);
    // A plain layout set on the directory replaces the composite default.
    let spec = LayoutSpec { stripe_size: None, stripe_count: Some(2), mirrors: None };
    ns.handle(&r, MdsRequest::SetLayout { ino: d.ino, spec }).await.unwrap();
    assert_eq!(ns.handle(&r, MdsRequest::GetLayout { ino: d.ino }).await.unwrap(), MdsReply::DirLayout(spec));
    let g = create(&ns, &r, d.ino, "g").await.unwrap();
    assert!(!layout(&ns, g.ino).await.is_composite());
    // The attribute's text sets a composite default too (setfattr through the mount).
    let value = b"extent=0-1M stripe_count=1 extent=1M-EOF stripe_count=2".to_vec();
    let name = text::XATTR_NAME.to_string();
    ns.handle(&r, MdsRequest::SetXattr { ino: d.ino, name, value, mode: XattrMode::Any }).await.unwrap();
    let plain = |end, c| ExtentSpec { end, stripe_size: None, stripe_count: Some(c), mirrors: None };
    let want = vec![plain(1 << 20, 1), plain(EOF, 2)];
    assert_eq!(ns.handle(&r, MdsRequest::GetLayout { ino: d.ino }).await.unwrap(), MdsReply::DirComposite(want));
}

#[tokio::test]
async fn declared_files_in_a_composite_directory_get_the_extents_they_reach_planned_at_declaration() {
    use tessera_proto::layout::{ExtentSpec, EOF};
    use tessera_proto::msg::DeclaredFile;
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let d = mkdir(&ns, &r, ROOT_INO, "pfl").await.unwrap();
    let e = |end, c| ExtentSpec { end, stripe_size: Some(65536), stripe_count: Some(c), mirrors: None };
    let specs = vec![e(1 << 20, 1), e(4 << 20, 2), e(EOF, 0)];
    ns.handle(&r, MdsRequest::SetCompositeLayout { ino: d.ino, extents: specs }).await.unwrap();
    // "a" will reach the second extent (3 MiB), "b"'s size is unknown.
    let decl = |name: &str, expected_size| DeclaredFile {
        parent: d.ino,
        name: name.into(),
        expected_size,
        stripe_count: None,
    };
    let files = vec![decl("a", 3 << 20), decl("b", 0)];
    assert_eq!(ns.handle(&r, MdsRequest::Declare { files }).await.unwrap(), MdsReply::Declared { count: 2 });
    assert_eq!(ns.placer.status().solves, 2, "the first extents, then the second extents, each one batch");
    let a = create(&ns, &r, d.ino, "a").await.unwrap();
    let b = create(&ns, &r, d.ino, "b").await.unwrap();
    let la = instantiate(&ns, a.ino, 2 << 20).await;
    assert_eq!(ns.placer.planned_counts(), (1, 0), "a's second extent on its planned targets");
    assert_eq!(la.extents[0].targets.len(), 2);
    let mut servers: Vec<DsId> = la.all_targets().map(|t| t.ds).collect();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(servers.len(), 3, "distinct targets across the extents: {la:?}");
    // b had no plan beyond its first extent: placed when reached. a's third extent was not reached by its
    // declared size: placed when reached too.
    let lb = instantiate(&ns, b.ino, 2 << 20).await;
    assert_eq!(lb.extents[0].targets.len(), 2);
    instantiate(&ns, a.ino, 5 << 20).await;
    assert_eq!(ns.placer.planned_counts(), (1, 0));
}

#[tokio::test]
async fn appends_are_given_the_files_end_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let alice = user(1000);
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap();
    setattr(&ns, &root(), d.ino, SetAttrs { perm: Some(0o777), ..Default::default() }).await.unwrap();
    let f = create(&ns, &alice, d.ino, "log").await.unwrap();
    let append = |len| MdsRequest::Append { ino: f.ino, len };
    // The end as the MDS knows it, whoever wrote it: a write reported by another client counts.
    ns.handle(&alice, MdsRequest::ReportWrite { ino: f.ino, size: 100 }).await.unwrap();
    let before = getattr(&ns, f.ino).await;
    assert_eq!(ns.handle(&alice, append(10)).await.unwrap(), MdsReply::Appended { offset: 100 });
    assert_eq!(ns.handle(&alice, append(5)).await.unwrap(), MdsReply::Appended { offset: 110 });
    let after = getattr(&ns, f.ino).await;
    assert_eq!(after.size, 115);
    assert!(after.mtime >= before.mtime && after.ctime >= before.ctime);
    // A later report of a smaller end does not take the appends back.
    ns.handle(&alice, MdsRequest::ReportWrite { ino: f.ino, size: 105 }).await.unwrap();
    assert_eq!(ns.handle(&alice, append(1)).await.unwrap(), MdsReply::Appended { offset: 115 });
    // Refused: past the largest file size (nothing changes), a directory, a caller who may not write.
    assert_eq!(code(ns.handle(&alice, append(u64::MAX - 10)).await), ErrorCode::TooBig);
    assert_eq!(code(ns.handle(&alice, append(i64::MAX as u64)).await), ErrorCode::TooBig);
    assert_eq!(getattr(&ns, f.ino).await.size, 116);
    assert_eq!(code(ns.handle(&alice, MdsRequest::Append { ino: d.ino, len: 1 }).await), ErrorCode::IsDir);
    setattr(&ns, &alice, f.ino, SetAttrs { perm: Some(0o644), ..Default::default() }).await.unwrap();
    assert_eq!(code(ns.handle(&user(1001), append(1)).await), ErrorCode::Access);
    assert_eq!(code(ns.handle(&alice, MdsRequest::Append { ino: 999_999, len: 1 }).await), ErrorCode::NotFound);
}

/// A long mutation (a directory lease's grant: the directory's names listed under the lock) blocked in its synchronous
/// section — here waiting for the mutation lock, as it would behind another's journal write(2), sled
/// transaction or placement solve — does not stall the runtime's worker: with one worker, another request
/// is served meanwhile, and the grant completes once unblocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_blocked_mutation_leaves_the_worker_to_other_requests() {
    let dir = tempfile::tempdir().unwrap();
    let ns = Arc::new(open_ns(dir.path()).0);
    let d = mkdir(&ns, &root(), ROOT_INO, "d").await.unwrap().ino;
    // Another thread holds the mutation lock until told to let go.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let ns = ns.clone();
        std::thread::spawn(move || {
            let _g = ns.lock();
            held_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        })
    };
    held_rx.recv().unwrap();
    let mutation = {
        let ns = ns.clone();
        tokio::spawn(async move { ns.handle_client(&root(), conn(1), MdsRequest::LeaseDir { dir: d }).await })
    };
    // Time for the mutation to reach the lock on the only worker (std sleeps: the timer needs a worker).
    std::thread::sleep(Duration::from_millis(200));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    {
        let ns = ns.clone();
        tokio::spawn(async move { done_tx.send(ns.handle(&root(), MdsRequest::GetAttr { ino: ROOT_INO }).await) });
    }
    let served = done_rx.recv_timeout(Duration::from_secs(10));
    let waiting = !mutation.is_finished();
    release_tx.send(()).unwrap();
    holder.join().unwrap();
    let granted = mutation.await.unwrap();
    assert!(
        matches!(served, Ok(Ok(MdsReply::Attr(_)))),
        "a getattr was not served while a mutation blocked: {served:?}"
    );
    assert!(waiting, "the mutation finished while the lock was held: {granted:?}");
    assert!(matches!(granted, Ok(MdsReply::Lease(_))), "the lease is granted once unblocked: {granted:?}");
}

/// A numbered request resent (its reply lost) gets its first answer, not a second application: a create
/// is not answered EEXIST, an unlink not ENOENT, also after the MDS restarted; requests numbered the
/// same while the first is served wait for it; a change marked applied whose answer was lost says so;
/// the cache keeps a window per client and an evicted client's replies go.
#[tokio::test]
async fn a_resent_numbered_request_gets_its_first_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let c = root();
    let mk = |name: &str| create_req(ROOT_INO, name);
    let first = ns.serve_once(7, 1, ns.handle(&c, mk("a")), None).await.unwrap();
    let again = ns.serve_once(7, 1, ns.handle(&c, mk("a")), None).await.unwrap();
    assert_eq!(first, again, "the resend is answered with the first answer");
    // Not numbered: applied again, EEXIST.
    assert_eq!(code(ns.handle(&c, mk("a")).await), ErrorCode::Exists);
    let rm = || MdsRequest::Unlink { parent: ROOT_INO, name: "a".into() };
    ns.serve_once(7, 2, ns.handle(&c, rm()), None).await.unwrap();
    ns.serve_once(7, 2, ns.handle(&c, rm()), None).await.unwrap();
    // Two at once with one number: one applies, the other waits and gets its answer.
    let (x, y) = tokio::join!(
        ns.serve_once(7, 3, ns.handle(&c, mk("b")), None),
        ns.serve_once(7, 3, ns.handle(&c, mk("b")), None)
    );
    let b = x.unwrap();
    assert_eq!(b, y.unwrap());
    // A failure is an answer too.
    let e1 = ns.serve_once(7, 4, ns.handle(&c, mk("b")), None).await.unwrap_err();
    let e2 = ns.serve_once(7, 4, ns.handle(&c, mk("b")), None).await.unwrap_err();
    assert_eq!((e1.code, e2.code), (ErrorCode::Exists, ErrorCode::Exists));
    // Applied, its answer lost (by a run before this one: client 9 is new here): the change carries the
    // mark, the resend is told.
    let mut tx = ns.store().begin();
    tx.mark_applied(9, 5).unwrap();
    tx.commit().unwrap();
    let lost = ns.serve_once(9, 5, ns.handle(&c, mk("c")), None).await.unwrap_err();
    assert!(lost.detail.contains("applied"), "{lost}");
    assert!(ns.store().begin().dentry(ROOT_INO, "c").unwrap().is_none(), "not applied a second time");
    // With the request at hand its answer is rebuilt from what the change left (a leader died between
    // the change's commit and its answer's; client 10 is new here, as to a new leader): the entry made,
    // not EEXIST; a removal's parent attributes.
    let made = ns.handle(&c, mk("c2")).await.unwrap();
    let mut tx = ns.store().begin();
    tx.mark_applied(10, 6).unwrap();
    tx.mark_applied(10, 7).unwrap();
    tx.commit().unwrap();
    let again = ns.serve_once(10, 6, ns.handle(&c, mk("c2")), Some((&c, &mk("c2")))).await.unwrap();
    assert_eq!(attr_of(again).ino, attr_of(made).ino, "the resend gets the entry the first send made");
    let rm_c2 = MdsRequest::Unlink { parent: ROOT_INO, name: "gone".into() };
    let r = ns.serve_once(10, 7, ns.handle(&c, rm_c2.clone()), Some((&c, &rm_c2))).await.unwrap();
    assert!(matches!(r, MdsReply::Attr(ref a) if a.ino == ROOT_INO), "{r:?}");
    // The mark is written in the change's own transaction.
    let marked = ns.serve_once(8, 1, ns.handle(&c, mk("d")), None).await.unwrap();
    assert!(
        matches!(ns.store().replied(8, 1).unwrap(), Some(crate::store::Replied::Answer(ref r)) if **r == Ok(marked.clone()))
    );
    // After a restart; also when a client's first request after it is a new one, then a resend.
    drop(ns);
    let (ns, _) = open_ns(dir.path());
    assert_eq!(ns.serve_once(7, 3, ns.handle(&c, mk("b")), None).await.unwrap(), b);
    ns.serve_once(8, 2, ns.handle(&c, mk("d2")), None).await.unwrap();
    assert_eq!(ns.serve_once(8, 1, ns.handle(&c, mk("d")), None).await.unwrap(), marked, "not EEXIST");
    // A window per client: number 1 goes once number 1 + REPLY_WINDOW is kept.
    let w = crate::store::REPLY_WINDOW;
    ns.serve_once(7, 1 + w, ns.handle(&c, mk("e")), None).await.unwrap();
    assert!(ns.store().replied(7, 1).unwrap().is_none());
    ns.store().forget_replies(7).unwrap();
    assert!(ns.store().replied(7, 3).unwrap().is_none());
    assert!(ns.store().replied(8, 1).unwrap().is_some(), "another client's stay");
}

/// File locks (issue 42): a start after one that granted locks holds a grace period in which only
/// reasserted locks are granted; a start after one without locks (or whose locks were all released long
/// enough before it stopped) holds none; an evicted client's locks are released.
#[tokio::test]
async fn locks_granted_before_a_restart_hold_a_grace_period_for_their_reassertion() {
    use tessera_proto::locks::{LockKind, LockSpec, LockType};
    let dir = tempfile::tempdir().unwrap();
    let wr = LockSpec { kind: LockKind::Posix, typ: LockType::Write, start: 0, end: 9, pid: 1 };
    let lock = |ino: Ino, owner: u64, reclaim: bool| MdsRequest::Lock {
        ino,
        owner,
        spec: wr,
        wait_ms: 0,
        wait_id: 0,
        reclaim,
    };
    let f;
    {
        let (ns, _) = open_ns(dir.path());
        f = create(&ns, &root(), ROOT_INO, "f").await.unwrap().ino;
        assert!(!ns.locks().in_grace(), "a first start has nothing to wait for");
        let r = ns.handle_client(&root(), conn(1), lock(f, 7, false)).await;
        assert_eq!(r, Ok(MdsReply::Lock { granted: true }));
        let r = ns.handle_client(&root(), conn(2), lock(f, 7, false)).await;
        assert_eq!(code(r), ErrorCode::WouldBlock, "client 2 is another owner");
        ns.store().flush_sync().unwrap();
    }
    let (ns, _) = open_ns(dir.path());
    assert!(ns.locks().in_grace(), "locks were held: the grace period is on");
    let r = ns.handle_client(&root(), conn(2), lock(f, 7, false)).await;
    assert_eq!(code(r), ErrorCode::WouldBlock, "a new lock waits for the grace period");
    let r = ns.handle_client(&root(), conn(1), lock(f, 7, true)).await;
    assert_eq!(r, Ok(MdsReply::Lock { granted: true }), "the holder reasserts its lock");
    let r = ns.handle_client(&root(), conn(2), lock(f, 8, true)).await;
    assert_eq!(code(r), ErrorCode::WouldBlock, "a conflicting reclaim is refused: never granted twice");
    // Client 1 falls silent and is evicted: its lock goes.
    ns.set_eviction_timeout(std::time::Duration::from_millis(100));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    ns.handle_client(&root(), conn(2), MdsRequest::KeepAlive).await.unwrap();
    ns.evict_silent().await;
    ns.tidy_locks().await;
    assert!(ns.locks().is_empty(), "the silent client's lock was released");
    assert!(!ns.locks().in_grace(), "and the shortened grace period is over");
    let r = ns.handle_client(&root(), conn(2), lock(f, 8, false)).await;
    assert_eq!(r, Ok(MdsReply::Lock { granted: true }));
    let none = lock(999_999, 8, false);
    assert_eq!(code(ns.handle_client(&root(), conn(2), none).await), ErrorCode::NotFound);
}

/// An ACL in Linux's xattr form from getfacl's short text (`u::rw-,u:11:r--,g::r--,m::r--,o::---`).
fn acl_bytes(text: &str) -> Vec<u8> {
    use tessera_proto::acl::{Acl, AclEntry, GROUP, GROUP_OBJ, MASK, OTHER, UNDEFINED_ID, USER, USER_OBJ};
    let entries = text
        .split(',')
        .map(|e| {
            let mut p = e.split(':');
            let (tag, id, perm) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
            let tag = match (tag, id.is_empty()) {
                ("u", true) => USER_OBJ,
                ("u", false) => USER,
                ("g", true) => GROUP_OBJ,
                ("g", false) => GROUP,
                ("m", _) => MASK,
                _ => OTHER,
            };
            let perm = perm.chars().zip([4, 2, 1]).filter(|(c, _)| *c != '-').map(|(_, b)| b).sum();
            AclEntry { tag, perm, id: id.parse().unwrap_or(UNDEFINED_ID) }
        })
        .collect();
    Acl { entries }.to_bytes()
}

#[tokio::test]
async fn acls_decide_access_inherit_follow_chmod_and_fsck_checks_them() {
    use crate::store::{xattr_key, T};
    use tessera_proto::acl::{ACCESS_XATTR, DEFAULT_XATTR};
    let dir = tempfile::tempdir().unwrap();
    let (ns, _) = open_ns(dir.path());
    let r = root();
    let (owner, named, other) = (user(10), user(11), user(12));
    let set = |ino: Ino, name: &str, v: Vec<u8>| MdsRequest::SetXattr {
        ino,
        name: name.into(),
        value: v,
        mode: XattrMode::Any,
    };
    let get = |ino: Ino, name: &str| MdsRequest::GetXattr { ino, name: name.into() };
    let access = |ino: Ino, mask: u32| MdsRequest::Access { ino, mask };
    let d = mkdir(&ns, &r, ROOT_INO, "d").await.unwrap();
    let f = create(&ns, &r, d.ino, "f").await.unwrap();
    for (ino, perm) in [(d.ino, 0o750), (f.ino, 0o640)] {
        setattr(&ns, &r, ino, SetAttrs { uid: Some(10), gid: Some(10), perm: Some(perm), ..Default::default() })
            .await
            .unwrap();
    }
    assert_eq!(code(ns.handle(&named, access(f.ino, 4)).await), ErrorCode::Access);

    // Only the owner sets an ACL; it decides for a named user, limited by the mask, and sets the mode.
    let acl = acl_bytes("u::rw-,u:11:rw-,g::r--,m::r--,o::---");
    assert_eq!(code(ns.handle(&other, set(f.ino, ACCESS_XATTR, acl.clone())).await), ErrorCode::Perm);
    ns.handle(&owner, set(f.ino, ACCESS_XATTR, acl.clone())).await.unwrap();
    ns.handle(&owner, set(d.ino, ACCESS_XATTR, acl_bytes("u::rwx,u:11:--x,g::r-x,m::r-x,o::---"))).await.unwrap();
    ns.handle(&named, access(f.ino, 4)).await.unwrap();
    assert_eq!(code(ns.handle(&named, access(f.ino, 2)).await), ErrorCode::Access, "the mask r-- allows no write");
    assert_eq!(code(ns.handle(&other, access(f.ino, 4)).await), ErrorCode::Access);
    lookup(&ns, &named, d.ino, "f").await.unwrap();
    assert_eq!(code(lookup(&ns, &other, d.ino, "f").await), ErrorCode::Access);
    assert_eq!(ns.handle(&other, get(f.ino, ACCESS_XATTR)).await.unwrap(), MdsReply::Xattr(acl), "anyone reads an ACL");
    assert_eq!(getattr(&ns, f.ino).await.perm, 0o640);
    // chmod: the mask follows the group bits.
    setattr(&ns, &owner, f.ino, SetAttrs { perm: Some(0o660), ..Default::default() }).await.unwrap();
    ns.handle(&named, access(f.ino, 6)).await.unwrap();
    assert_eq!(
        ns.handle(&r, get(f.ino, ACCESS_XATTR)).await.unwrap(),
        MdsReply::Xattr(acl_bytes("u::rw-,u:11:rw-,g::r--,m::rw-,o::---"))
    );
    // A three-entry ACL is the mode: stored as the mode alone.
    ns.handle(&owner, set(f.ino, ACCESS_XATTR, acl_bytes("u::rw-,g::---,o::r--"))).await.unwrap();
    assert_eq!(getattr(&ns, f.ino).await.perm, 0o604);
    assert_eq!(code(ns.handle(&r, get(f.ino, ACCESS_XATTR)).await), ErrorCode::NoData);
    let malformed = vec![2, 0, 0, 0, 1, 0];
    assert_eq!(code(ns.handle(&owner, set(f.ino, ACCESS_XATTR, malformed)).await), ErrorCode::Invalid);

    // Default ACLs: directories only; inherited instead of the umask; a subdirectory keeps it.
    let default = acl_bytes("u::rwx,u:11:rwx,g::r-x,m::rwx,o::---");
    assert_eq!(code(ns.handle(&owner, set(f.ino, DEFAULT_XATTR, default.clone())).await), ErrorCode::Access);
    ns.handle(&owner, set(d.ino, DEFAULT_XATTR, default.clone())).await.unwrap();
    let req = MdsRequest::Create {
        parent: d.ino,
        name: "new".into(),
        kind: FileKind::File,
        perm: 0o666,
        umask: 0o077,
        rdev: 0,
        exclusive: true,
        layout: None,
    };
    let new = attr_of(ns.handle(&owner, req).await.unwrap());
    assert_eq!(new.perm, 0o660, "the umask applied under a default ACL");
    assert_eq!(
        ns.handle(&r, get(new.ino, ACCESS_XATTR)).await.unwrap(),
        MdsReply::Xattr(acl_bytes("u::rw-,u:11:rwx,g::r-x,m::rw-,o::---"))
    );
    assert_eq!(code(ns.handle(&r, get(new.ino, DEFAULT_XATTR)).await), ErrorCode::NoData, "a file has no default");
    let sub = MdsRequest::Mkdir { parent: d.ino, name: "sub".into(), perm: 0o777, umask: 0o077 };
    let sub = attr_of(ns.handle(&owner, sub).await.unwrap());
    assert_eq!(sub.perm, 0o770);
    assert_eq!(ns.handle(&r, get(sub.ino, DEFAULT_XATTR)).await.unwrap(), MdsReply::Xattr(default));
    let plain = MdsRequest::Mkdir { parent: ROOT_INO, name: "plain".into(), perm: 0o777, umask: 0o027 };
    assert_eq!(attr_of(ns.handle(&r, plain).await.unwrap()).perm, 0o750, "no default ACL: the umask");
    // No lease on a directory with a default ACL (its creates need the MDS).
    let holder = Holder { conn: 1, client: 1 };
    assert_eq!(code(ns.lease_dir(&owner, holder, d.ino)), ErrorCode::Busy);
    // Removal: the mode stays.
    ns.handle(&owner, MdsRequest::RemoveXattr { ino: d.ino, name: DEFAULT_XATTR.into() }).await.unwrap();
    assert_eq!(code(ns.handle(&r, get(d.ino, DEFAULT_XATTR)).await), ErrorCode::NoData);

    // fsck: an ACL that does not parse, one where none can be, one disagreeing with the mode.
    let clean = ns.fsck(false).await.unwrap();
    assert!(clean.findings.is_empty(), "{:#?}", clean.findings);
    let mut tx = ns.store().begin();
    tx.put(T::Xattrs, &xattr_key(f.ino, ACCESS_XATTR), vec![2, 0, 0, 0, 9]);
    tx.put(T::Xattrs, &xattr_key(new.ino, DEFAULT_XATTR), acl_bytes("u::rwx,g::r-x,o::---"));
    tx.put(T::Xattrs, &xattr_key(sub.ino, ACCESS_XATTR), acl_bytes("u::rwx,u:11:rwx,g::r-x,m::r-x,o::---"));
    tx.commit().unwrap();
    let found = ns.fsck(false).await.unwrap();
    assert_eq!(fsck_kinds(&found), vec!["acl-invalid", "acl-misplaced", "acl-mode"], "{:#?}", found.findings);
    assert_eq!(ns.fsck(true).await.unwrap().repaired, 3);
    let after = ns.fsck(false).await.unwrap();
    assert!(after.findings.is_empty(), "{:#?}", after.findings);
    assert_eq!(code(ns.handle(&r, get(f.ino, ACCESS_XATTR)).await), ErrorCode::NoData);
    assert_eq!(code(ns.handle(&r, get(new.ino, DEFAULT_XATTR)).await), ErrorCode::NoData);
    assert_eq!(
        ns.handle(&r, get(sub.ino, ACCESS_XATTR)).await.unwrap(),
        MdsReply::Xattr(acl_bytes("u::rwx,u:11:rwx,g::r-x,m::rwx,o::---")),
        "the mask set from the mode's group bits (0770)"
    );
}

#[tokio::test]
async fn files_blocks_are_estimated_at_writes_then_measured_on_the_data_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, data) = open_ns(dir.path());
    let r = root();
    let f = create(&ns, &r, ROOT_INO, "f").await.unwrap();
    assert_eq!(f.blocks, 0);
    // A write report up to 1 GiB: blocks as if dense, until measured.
    ns.handle(&r, MdsRequest::ReportWrite { ino: f.ino, size: 1 << 30 }).await.unwrap();
    assert_eq!(getattr(&ns, f.ino).await.blocks, (1 << 30) / 512);
    // Its objects hold 4 KiB each (sparse): the measure replaces the estimate.
    let l = layout(&ns, f.ino).await;
    for t in &l.targets {
        data.allocated.lock().unwrap().insert((t.ds, t.object), 4096);
    }
    ns.measure_usage().await;
    assert_eq!(getattr(&ns, f.ino).await.blocks, l.targets.len() as u64 * 8);
    // Nothing queued: nothing changes (a later estimate is not undone by an old measure).
    data.allocated.lock().unwrap().clear();
    ns.measure_usage().await;
    assert_eq!(getattr(&ns, f.ino).await.blocks, l.targets.len() as u64 * 8);
    // A truncate to 1 KiB: at most what 1 KiB takes at once, then measured (whole 4 KiB blocks of the
    // sizes the in-memory servers record).
    setattr(&ns, &r, f.ino, SetAttrs { size: Some(1024), ..Default::default() }).await.unwrap();
    assert_eq!(getattr(&ns, f.ino).await.blocks, 2);
    ns.measure_usage().await;
    let held: u64 = l
        .targets
        .iter()
        .map(|t| data.objects.lock().unwrap().get(&(t.ds, t.object)).map_or(0, |s| s.div_ceil(4096) * 8))
        .sum();
    assert_eq!(getattr(&ns, f.ino).await.blocks, held);
    // A data server that does not answer leaves the number as it is.
    ns.handle(&r, MdsRequest::ReportWrite { ino: f.ino, size: 1 << 20 }).await.unwrap();
    data.down.lock().unwrap().push(l.targets[0].ds);
    ns.measure_usage().await;
    assert_eq!(getattr(&ns, f.ino).await.blocks, (1 << 20) / 512);
    // It was queued again: measured once the server answers.
    data.down.lock().unwrap().clear();
    ns.measure_usage().await;
    assert_eq!(getattr(&ns, f.ino).await.blocks, held);
}
