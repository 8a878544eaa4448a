//! The `fuser::Filesystem`: every kernel request is answered from its own tokio task, with the calling
//! process's credentials sent to the MDS (which enforces permissions) and its job id on the data path.

use crate::creds::{Creds, Who};
use crate::locks::{self, LockWaits};
use bytes::Bytes;
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags as FuseOpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, RequestId, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tessera_client::cache::dir_lease::{self as dirlease, DirLeases};
use tessera_client::cache::name_leases::{Invalidate, NameLeases, Ticket};
use tessera_client::cache::write_behind::{privileged_bits, OpenInode};
use tessera_client::cache::{Handle, HandleOptions};
use tessera_client::mds_client::{LayoutReply, Opened};
use tessera_client::periodic::patterns as periodic;
use tessera_client::proto::locks::{LockKind, LockSpec, LockType};
use tessera_client::proto::types::NAME_MAX;
use tessera_client::{
    Attr, Caller, Client, ErrorCode, FileKind, FsError, FsResult, Ino, MdsClient, OpenFlags, RenameFlags, SetAttrs,
    TimeSet, Timestamp, XattrMode, ROOT_INO,
};

/// How long the kernel may cache attributes and entries.
pub const TTL: Duration = Duration::from_secs(1);
/// Largest write (and read) request: 1 MiB.
pub const MAX_WRITE: u32 = 1 << 20;
/// `st_blksize`: the I/O size programs should use.
const BLKSIZE: u32 = 1 << 20;
/// Directory entries asked from the MDS per kernel readdir (a reply holds about one page).
const READDIR_BATCH: u32 = 128;
/// The most one `copy_file_range` copies (its reply counts in 32 bits; the caller asks again for the rest).
const COPY_MAX: u64 = 1 << 30;
/// Directory parents remembered for "..".
const PARENTS_MAX: usize = 65536;
const FRESH_DIR_ATTRS_MAX: usize = 1024;
/// How long a directory stays one where this mount uses locks after its last lock request there.
const LOCK_DIR_KEEP: Duration = Duration::from_secs(60);

/// Mount-time choices that change behaviour.
#[derive(Clone, Debug, Default)]
pub struct FsOptions {
    /// Ask the kernel for READDIRPLUS (attributes with directory listings).
    pub readdirplus: bool,
    /// Reads and writes go through the kernel's page cache (`-o page_cache`), instead of the default
    /// direct I/O: see [`Inner::direct_io`].
    pub page_cache: bool,
    /// Every create and unlink waits for the MDS (`-o sync_creates`, and with `-o server_permissions`,
    /// since a create or unlink in a leased directory is checked by the kernel only): no directory leases.
    pub sync_creates: bool,
    /// `fcntl` and `flock` locks stay in this node's kernel (`-o local_locks`), instead of holding
    /// across every mount through the MDS.
    pub local_locks: bool,
    /// POSIX ACLs (`system.posix_acl_*`): the kernel checks them (as the MDS does) and sends the umask
    /// apart (FUSE_POSIX_ACL, FUSE_DONT_MASK), so a directory's default ACL can replace it. Off with
    /// `-o noacl` or `-o server_permissions` (the kernel's ACL checks need its permission checks).
    pub acl: bool,
    /// No leases on names and attributes (`-o nocache_leases`, and with `-o server_permissions`): the
    /// kernel caches them for [`TTL`] only. By default the mount watches for the MDS's recalls and lets
    /// the kernel cache what it answered until its lease ends (see `tessera_client::cache::name_leases`).
    pub no_cache_leases: bool,
}

struct Inner {
    client: Client,
    creds: Creds,
    opts: FsOptions,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    parents: Mutex<HashMap<Ino, Ino>>,
    /// Directory attributes a create or removal just returned, with when: the kernel drops its cached
    /// attributes of the parent after such a change and asks for them again before the next one, which
    /// this answers (once, within [`TTL`]) without a round trip to the MDS. Any other change to the
    /// directory through this mount forgets its entry.
    fresh_dir_attrs: Mutex<HashMap<Ino, (Attr, Instant)>>,
    /// Opens bypass the kernel's page cache (FOPEN_DIRECT_IO): a read or write reaches this process as one
    /// request of the caller's size, copied once, and writes to one file from several processes run in
    /// parallel (FOPEN_PARALLEL_DIRECT_WRITES), where the page-cache path holds the inode's lock per write
    /// and copies twice. Data is cached here anyway (read-ahead, write-behind). Set at INIT when the kernel
    /// can still mmap such files (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6) and `-o page_cache` is not given.
    direct_io: AtomicBool,
    /// Directories this mount leases, and the creates in them not sent yet.
    leases: DirLeases,
    /// Held from sending creates until their creating opens are attached, so a request on such an open
    /// that waits for it finds the handle.
    settling: tokio::sync::Mutex<()>,
    /// Shut down: the ticker stops.
    closed: AtomicBool,
    /// PerSched: each job's pattern as this mount follows it.
    patterns: periodic::Patterns,
    /// Tells the kernel to drop what it caches (set once the session exists).
    notifier: std::sync::OnceLock<fuser::Notifier>,
    /// Lock requests waiting at the MDS, which an interrupt ends.
    lock_waits: LockWaits,
    /// Directories holding files this mount locked lately, with when: the kernel caches no names or
    /// attributes there ([`Inner::entry_ttl`]).
    lock_dirs: Mutex<HashMap<Ino, Instant>>,
    /// Regular files' parents as looked up or created here (to find a locked file's directory).
    file_parents: Mutex<HashMap<Ino, Ino>>,
    /// Leases on names and attributes: how long the kernel may cache what the MDS answered.
    names: Arc<NameLeases>,
    /// Set at shutdown: the watch for recalls ends.
    watch_stop: Arc<AtomicBool>,
    /// Closes answered and still on their way to the MDS (`release`).
    background_closes: AtomicUsize,
}

/// Carries out the MDS's recalls in the kernel's caches.
struct KernelCaches(fuser::Notifier);

impl Invalidate for KernelCaches {
    fn attrs(&self, ino: Ino) {
        // Attributes only (offset < 0); an inode the kernel has forgotten needs nothing.
        let _ = self.0.inval_inode(INodeNo(ino), -1, 0);
    }

    fn entry(&self, parent: Ino, name: &str) {
        let _ = self.0.inval_entry(INodeNo(parent), OsStr::new(name));
    }
}

/// The POSIX ACL attributes' names start so (`system.posix_acl_access`, `_default`).
const ACL_XATTR_PREFIX: &str = "system.posix_acl_";

/// A handle on the file system's state that outlives the session (for a clean shutdown).
#[derive(Clone)]
pub struct FsState(Arc<Inner>);

impl FsState {
    /// The session's notifier, through which opens make the kernel drop stale attributes and recalls
    /// what it caches; with it the mount starts watching for the MDS's recalls (on `rt`).
    pub fn set_notifier(&self, n: fuser::Notifier, rt: &tokio::runtime::Handle) {
        let _ = self.0.notifier.set(n.clone());
        if !self.0.opts.no_cache_leases {
            let mds = self.0.client.mds().with_caller(Caller::root());
            let kernel: Arc<dyn Invalidate> = Arc::new(KernelCaches(n));
            rt.spawn(self.0.names.clone().run(mds, kernel, self.0.watch_stop.clone()));
        }
    }

    /// Sends waiting creates and every buffered write, gives up leases, and closes every handle still open (the daemon is going away).
    pub async fn shutdown(&self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.settle().await;
        while self.0.background_closes.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.0.give_up_lease(None).await;
        self.0.watch_stop.store(true, Ordering::Release);
        if !self.0.opts.no_cache_leases {
            self.0.names.leave(&self.0.client.mds().with_caller(Caller::root())).await;
        }
        let handles: Vec<(u64, Arc<Handle>)> = match self.0.handles.lock() {
            Ok(mut m) => m.drain().collect(),
            Err(_) => return,
        };
        for (_, h) in handles {
            if let Err(e) = h.release().await {
                tracing::warn!(ino = h.inode.ino, "release at shutdown (writes may be lost): {e}");
            }
        }
    }
}

/// The file system handed to fuser.
pub struct TesseraFs {
    inner: Arc<Inner>,
    rt: tokio::runtime::Handle,
}

/// Answers a read with data kept in pieces: one `writev` to the kernel, no gathering copy.
fn reply_pieces(reply: ReplyData, pieces: &[Bytes]) {
    match pieces {
        [one] => reply.data(one),
        // writev takes at most IOV_MAX (1024) slices, the reply's header one of them.
        _ if pieces.len() >= 1000 => reply.data(&pieces.concat()),
        _ => {
            let iov: Vec<std::io::IoSlice<'_>> = pieces.iter().map(|p| std::io::IoSlice::new(p)).collect();
            reply.data_vectored(&iov)
        }
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.code.errno())
}

fn err(code: ErrorCode, msg: &str) -> FsError {
    FsError::new(code, msg)
}

/// A file name from the kernel as the MDS wants it.
fn name_of(name: &OsStr) -> FsResult<String> {
    let s = name.to_str().ok_or_else(|| FsError::invalid("file names must be UTF-8"))?;
    if s.len() > NAME_MAX {
        return Err(err(ErrorCode::NameTooLong, "name longer than 255 bytes"));
    }
    Ok(s.to_string())
}

fn file_type(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        // A file's: what its objects take on the data servers (the MDS measures them after writes).
        blocks: if a.kind == FileKind::File { a.blocks } else { a.size.div_ceil(512) },
        atime: a.atime.to_system_time(),
        mtime: a.mtime.to_system_time(),
        ctime: a.ctime.to_system_time(),
        crtime: a.crtime.to_system_time(),
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLKSIZE,
        flags: 0,
    }
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(Timestamp::from_system_time(t)),
    }
}

/// Who is asking, from the request header (resolved inside the task: it reads /proc).
#[derive(Clone, Copy)]
struct Key {
    pid: u32,
    uid: u32,
    gid: u32,
}

/// Whether mode bits `new` are `cur` with only S_ISUID and/or S_ISGID cleared (the kernel's "kill privileges").
fn kills_only_privs(cur: u32, new: u32) -> bool {
    const PRIVS: u32 = 0o6000;
    let cur = cur & 0o7777;
    new != cur && new & !cur == 0 && (cur & !new) & !PRIVS == 0
}

/// What the MDS needs of open(2) flags (O_TRUNC implies writing).
fn open_flags(flags: i32) -> OpenFlags {
    let acc = flags & libc::O_ACCMODE;
    let truncate = flags & libc::O_TRUNC != 0;
    let write = acc == libc::O_WRONLY || acc == libc::O_RDWR || truncate;
    OpenFlags { read: acc == libc::O_RDONLY || acc == libc::O_RDWR, write, truncate }
}

fn key(req: &Request) -> Key {
    Key { pid: req.pid(), uid: req.uid(), gid: req.gid() }
}

impl Inner {
    /// Sends the creates waiting in leased directories and attaches their creating opens.
    async fn settle(&self) {
        if self.leases.has_pending() {
            let _one = self.settling.lock().await;
            let opened = self.leases.settle(&self.client.mds().with_caller(Caller::root())).await;
            self.attach_created(opened).await;
        }
    }

    /// The creating opens of files that just reached the MDS become ordinary handles, under the same
    /// file handle numbers the kernel has.
    async fn attach_created(&self, opened: Vec<dirlease::Opened>) {
        for o in opened {
            let mds = o.who.mds(self.client.mds());
            let op = Opened { attr: o.attr, layout: Some(o.layout), handle: o.handle, parent: None };
            if let Err(e) = self.attach_as(Some(o.fh), &mds, op, o.flags).await {
                tracing::warn!(fh = o.fh, "open of a created file: {e}");
            }
            self.leases.attached(o.fh);
        }
    }

    /// Before a change other than a create in `dir` (`None`: anywhere): this mount stops answering for it.
    async fn give_up_lease(&self, dir: Option<Ino>) {
        if !self.leases.leases_any(dir) {
            return;
        }
        let _one = self.settling.lock().await;
        let opened = self.leases.give_up(&self.client.mds().with_caller(Caller::root()), dir).await;
        self.attach_created(opened).await;
    }

    /// The open flags every open and create replies with.
    /// The open flags of the reply to an open or create with `flags`. An `O_APPEND` descriptor always
    /// bypasses the page cache: its writes land where the MDS puts them (see `write`), not where the
    /// kernel's cached size says, and the kernel must not keep them at the offset it chose.
    fn fopen_flags(&self, flags: i32) -> FopenFlags {
        if self.direct_io.load(Ordering::Relaxed) {
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
        } else if flags & libc::O_APPEND != 0 {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// Close-to-open: the kernel's cached attributes of a file just opened may predate another
    /// client's close, which the open's reply from the MDS holds. They are dropped before the open
    /// returns, so the `fstat`, `lseek(SEEK_END)` or read at the end that follows asks again. (The
    /// kernel does not ask at open by itself while its attribute timeout runs.)
    fn revalidate(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get() {
            // Attributes only (offset < 0); an inode the kernel has forgotten needs nothing.
            let _ = n.inval_inode(ino, -1, 0);
        }
    }

    /// `setlk`/`flock` through handle `fh` (kernel request `unique`): see [`crate::locks`]. Once a lock
    /// is granted, what the kernel caches of the file may predate the previous holder's writes: its
    /// attributes (and, with `-o page_cache`, its pages) are dropped.
    async fn set_lock(
        &self,
        fh: FileHandle,
        unique: u64,
        owner: u64,
        spec: FsResult<LockSpec>,
        sleep: bool,
    ) -> FsResult<()> {
        let h = self.handle(fh)?;
        let spec = spec?;
        let wait = sleep.then(|| self.lock_waits.begin(unique, owner, &h.mds));
        let r = h.lock(owner, spec, wait.as_deref()).await;
        if wait.is_some() {
            self.lock_waits.end(unique);
        }
        let parent = self.file_parents.lock().ok().and_then(|p| p.get(&h.inode.ino).copied());
        if let (Some(parent), Ok(mut dirs)) = (parent, self.lock_dirs.lock()) {
            dirs.retain(|_, at| at.elapsed() < LOCK_DIR_KEEP);
            dirs.insert(parent, Instant::now());
        }
        if r.is_ok() && spec.typ != LockType::Unlock {
            if let Some(n) = self.notifier.get() {
                let pages = if self.direct_io.load(Ordering::Relaxed) { -1 } else { 0 };
                let _ = n.inval_inode(INodeNo(h.inode.ino), pages, 0);
            }
        }
        r
    }

    /// How long the kernel may cache a name in `parent` and its attributes: [`TTL`], but nothing in a
    /// directory holding files this mount locked lately. Programs that coordinate through locks also
    /// look for each other's files there (SQLite's journal next to its database: a name another mount
    /// removed a moment ago, still cached here, reads as a hot journal that cannot be opened). NFS users
    /// get the same with `lookupcache=none`, which SQLite's documentation advises for NFS.
    fn entry_ttl(&self, parent: Ino) -> Duration {
        match self.lock_dirs.lock() {
            Ok(d) if d.get(&parent).is_some_and(|at| at.elapsed() < LOCK_DIR_KEEP) => Duration::ZERO,
            _ => TTL,
        }
    }

    /// How long the kernel may cache entry `name` in `parent` (giving `ino`'s attributes) that the MDS
    /// answered to the request `t` was taken for: until the lease ends if leased ([`NameLeases`]), else
    /// [`TTL`]; nothing in a directory holding files locked lately ([`Inner::entry_ttl`]).
    fn leased_entry_ttl(&self, t: &Ticket, parent: Ino, name: &str, a: &Attr) -> Duration {
        let ttl = self.entry_ttl(parent);
        if ttl.is_zero() || self.opts.no_cache_leases {
            return ttl;
        }
        self.names.track_entry(t, parent, name, a.ino, Some(a)).unwrap_or(TTL)
    }

    /// How long the kernel may cache `ino`'s attributes answered to the request `t` was taken for.
    /// `keep`: the attributes may be answered again from the lease (`NameLeases::attrs`).
    fn leased_attr_ttl(&self, t: &Ticket, a: &Attr, keep: bool) -> Duration {
        if self.opts.no_cache_leases {
            return TTL;
        }
        self.names.track_attrs(t, a.ino, keep.then_some(a)).unwrap_or(TTL)
    }

    fn who(&self, k: Key) -> Arc<Who> {
        self.creds.get(k.pid, k.uid, k.gid)
    }

    fn mds(&self, k: Key) -> MdsClient {
        self.who(k).mds(self.client.mds())
    }

    /// The open handle `fh` (EIO once an eviction closed it at the MDS).
    fn handle(&self, fh: FileHandle) -> FsResult<Arc<Handle>> {
        let h = self
            .handles
            .lock()
            .map_err(|_| FsError::io("handle table poisoned"))?
            .get(&fh.0)
            .cloned()
            .ok_or_else(|| err(ErrorCode::Invalid, "unknown file handle"))?;
        h.check_session()?;
        Ok(h)
    }

    fn open_inode(&self, ino: Ino) -> Option<Arc<OpenInode>> {
        self.client.engine().open_inode(ino)
    }

    /// Attributes as this mount sees them: our unreported writes extend the size and move mtime.
    fn fix(&self, mut a: Attr) -> Attr {
        if a.kind == FileKind::File {
            if let Some(i) = self.open_inode(a.ino) {
                let (end, last) = i.local_state();
                if end > a.size {
                    // Written here, not yet reported: at least what it takes densely.
                    a.blocks = a.blocks.max(end.div_ceil(512));
                }
                a.size = a.size.max(end);
                if let Some(t) = last {
                    a.mtime = a.mtime.max(t);
                    a.ctime = a.ctime.max(t);
                }
            }
        }
        a
    }

    fn fattr(&self, a: Attr) -> FileAttr {
        file_attr(&self.fix(a))
    }

    fn note_parent(&self, a: &Attr, parent: Ino) {
        let parents = match a.kind {
            FileKind::Dir => &self.parents,
            FileKind::File => &self.file_parents,
            _ => return,
        };
        if let Ok(mut p) = parents.lock() {
            if p.len() >= PARENTS_MAX {
                p.clear();
            }
            p.insert(a.ino, parent);
        }
    }

    fn remember_dir_attr(&self, a: Attr) {
        if let Ok(mut m) = self.fresh_dir_attrs.lock() {
            if m.len() >= FRESH_DIR_ATTRS_MAX {
                m.clear();
            }
            // Concurrent changes may answer out of order: keep the latest state.
            if m.get(&a.ino).is_none_or(|(old, _)| old.ctime <= a.ctime) {
                m.insert(a.ino, (a, Instant::now()));
            }
        }
    }

    /// After any other change to `ino` (or to unknown directories: `None`), its remembered attributes
    /// are out of date.
    fn forget_dir_attr(&self, ino: Option<Ino>) {
        if let Ok(mut m) = self.fresh_dir_attrs.lock() {
            match ino {
                Some(i) => drop(m.remove(&i)),
                None => m.clear(),
            }
        }
    }

    /// The attributes a create or removal returned for directory `ino`, if taken within [`TTL`] (used up).
    fn take_fresh_dir_attr(&self, ino: Ino) -> Option<Attr> {
        let (a, at) = self.fresh_dir_attrs.lock().ok()?.remove(&ino)?;
        (at.elapsed() < TTL).then_some(a)
    }

    fn parent_of(&self, ino: Ino) -> Ino {
        if ino == ROOT_INO {
            return ROOT_INO;
        }
        self.parents.lock().ok().and_then(|p| p.get(&ino).copied()).unwrap_or(ino)
    }

    /// Opens `ino` with `flags` (open(2) flags); `mds` carries the caller's credentials, job and process.
    async fn open(&self, mds: &MdsClient, ino: Ino, flags: i32) -> FsResult<(u64, Attr)> {
        let of = open_flags(flags);
        let opened = mds.open(ino, of).await?;
        self.attach(mds, opened, of).await
    }

    /// Open-file state for a handle the MDS granted (released again if it is not a regular file).
    async fn attach(&self, mds: &MdsClient, opened: Opened, of: OpenFlags) -> FsResult<(u64, Attr)> {
        self.attach_as(None, mds, opened, of).await
    }

    /// [`Inner::attach`] under file handle number `fh` (`None`: a new one): the engine's handle, with the
    /// write-behind and read-ahead on and the job's PerSched pattern as this mount follows it.
    async fn attach_as(
        &self,
        fh: Option<u64>,
        mds: &MdsClient,
        opened: Opened,
        of: OpenFlags,
    ) -> FsResult<(u64, Attr)> {
        let attr = opened.attr.clone();
        let periodic = self.patterns.of(mds).await;
        let opts = HandleOptions { flags: of, write_behind: true, read_ahead: true, periodic, detect_periodic: false };
        let h = Arc::new(self.client.engine().open(mds, opened, opts).await?);
        let fh = fh.unwrap_or_else(|| self.next_fh.fetch_add(1, Ordering::Relaxed));
        self.handles.lock().map_err(|_| FsError::io("handle table poisoned"))?.insert(fh, h);
        Ok((fh, self.fix(attr)))
    }

    async fn release(&self, fh: FileHandle) -> FsResult<()> {
        let (h, owners) = {
            let mut handles = self.handles.lock().map_err(|_| FsError::io("handle table poisoned"))?;
            let h = handles.remove(&fh.0).ok_or_else(|| err(ErrorCode::Invalid, "unknown file handle"))?;
            // Only a file this client holds locks on is looked for among the other handles.
            let mut owners = h.mds.session().lock_owners_on(h.inode.ino);
            if !owners.is_empty() && handles.values().any(|o| o.inode.ino == h.inode.ino) {
                owners.clear();
            }
            (h, owners)
        };
        {
            // No descriptor of the file is open on this node any more, so no owner here can hold a lock
            // on it: whatever the kernel did not name at a flush or release (an open file description's
            // F_OFD_SETLK lock, a close whose flush failed) is released too.
            for (owner, kind) in owners {
                if let Err(e) = h.unlock_all(owner, kind).await {
                    tracing::warn!(ino = h.inode.ino, "releasing a lock at the last close: {e}");
                }
            }
        }
        h.release().await
    }

    async fn setattr(&self, k: Key, ino: Ino, set: SetAttrs, fh: Option<FileHandle>) -> FsResult<Attr> {
        let mds = self.mds(k);
        let inode = self.open_inode(ino);
        if let Some(i) = &inode {
            if set.size.is_some() || set.mtime.is_some() {
                // Earlier writes land (and are reported) before the truncate or the explicit mtime.
                let h = fh.and_then(|fh| self.handle(fh).ok());
                let m = h.as_ref().map(|h| h.mds.clone()).unwrap_or_else(|| mds.clone());
                i.flush(&m).await?;
            }
        }
        let only_size = set.perm.is_none() && set.uid.is_none() && set.gid.is_none() && set.atime.is_none();
        let writable_fh = fh.and_then(|fh| self.handle(fh).ok()).is_some_and(|h| h.writable);
        let attr = if set == SetAttrs::default() {
            mds.getattr(ino).await?
        } else if only_size && set.mtime.is_none() && writable_fh {
            // ftruncate on a descriptor open for writing: allowed whatever the mode is now.
            mds.with_caller(Caller::root()).setattr(ino, set.clone()).await?
        } else {
            match mds.setattr(ino, set.clone()).await {
                Err(e) if e.code == ErrorCode::Perm && set.perm.is_some() => {
                    self.kill_privs(&mds, ino, &set, e).await?
                }
                r => r?,
            }
        };
        if let Some(i) = &inode {
            if let Some(s) = set.size {
                i.truncated(s);
            }
            i.privileged.store(privileged_bits(attr.perm) != 0, Ordering::Relaxed);
        }
        Ok(self.fix(attr))
    }

    /// After a write or truncate by a caller that is not the owner, the kernel clears S_ISUID/S_ISGID with a
    /// chmod sent as that caller, which the MDS refuses to a non-owner. A caller that may write the file may
    /// have those bits cleared (as a local file system does on write): only the clearing runs as root, the
    /// rest of the change (a truncate) as the caller. Anything else gets the MDS's refusal `denied`.
    async fn kill_privs(&self, mds: &MdsClient, ino: Ino, set: &SetAttrs, denied: FsError) -> FsResult<Attr> {
        let (Some(new), None, None) = (set.perm, set.uid, set.gid) else { return Err(denied) };
        let cur = mds.getattr(ino).await?;
        if !kills_only_privs(cur.perm, new) || mds.access(ino, libc::W_OK as u32).await.is_err() {
            return Err(denied);
        }
        let rest = SetAttrs { perm: None, ..set.clone() };
        if rest != SetAttrs::default() {
            mds.setattr(ino, rest).await?;
        }
        mds.with_caller(Caller::root()).setattr(ino, SetAttrs { perm: Some(new), ..SetAttrs::default() }).await
    }

    /// A direct write by a caller without CAP_FSETID (the kernel's FUSE_WRITE_KILL_SUIDGID) clears the
    /// file's S_ISUID/S_ISGID first, as the page-cache path's SETATTR does: as root, since the caller may
    /// write the file (its handle is open for writing) but need not own it.
    async fn clear_privileges(&self, h: &Handle) -> FsResult<()> {
        let root = h.mds.with_caller(Caller::root());
        let cur = root.getattr(h.inode.ino).await?;
        let bits = privileged_bits(cur.perm);
        if bits != 0 {
            root.setattr(h.inode.ino, SetAttrs { perm: Some(cur.perm & !bits), ..SetAttrs::default() }).await?;
        }
        h.inode.privileged.store(false, Ordering::Relaxed);
        Ok(())
    }

    async fn readdir_page(&self, k: Key, ino: Ino, offset: u64) -> FsResult<Vec<(Ino, u64, FileKind, String)>> {
        let mut out = Vec::new();
        if offset == 0 {
            out.push((ino, 1, FileKind::Dir, ".".to_string()));
        }
        if offset <= 1 {
            out.push((self.parent_of(ino), 2, FileKind::Dir, "..".to_string()));
        }
        let cookie = offset.saturating_sub(2);
        for e in self.mds(k).readdir(ino, cookie, READDIR_BATCH).await? {
            let next = e.next_offset.checked_add(2).ok_or_else(|| FsError::protocol("readdir cookie overflow"))?;
            out.push((e.ino, next, e.kind, e.name));
        }
        Ok(out)
    }
}

impl TesseraFs {
    pub fn new(client: Client, opts: FsOptions, rt: tokio::runtime::Handle) -> TesseraFs {
        let patterns = periodic::Patterns::new(client.config().persched.lease_ms);
        let inner = Inner {
            client,
            creds: Creds::new(),
            opts,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            parents: Mutex::new(HashMap::new()),
            fresh_dir_attrs: Mutex::new(HashMap::new()),
            direct_io: AtomicBool::new(false),
            leases: DirLeases::default(),
            settling: tokio::sync::Mutex::new(()),
            closed: AtomicBool::new(false),
            patterns,
            notifier: std::sync::OnceLock::new(),
            lock_waits: LockWaits::default(),
            lock_dirs: Mutex::new(HashMap::new()),
            file_parents: Mutex::new(HashMap::new()),
            names: Arc::default(),
            watch_stop: Arc::default(),
            background_closes: AtomicUsize::new(0),
        };
        let inner = Arc::new(inner);
        {
            // Forgets the patterns of jobs gone from this mount.
            let weak = Arc::downgrade(&inner);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(periodic::IDLE / 6).await;
                    let Some(inner) = weak.upgrade() else { break };
                    if inner.closed.load(Ordering::Acquire) {
                        break;
                    }
                    inner.patterns.prune();
                }
            });
        }
        if !inner.opts.sync_creates {
            // Sends waiting creates, renews leases in use and gives up idle ones, while the mount lives.
            let weak = Arc::downgrade(&inner);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(dirlease::BATCH_AGE / 2).await;
                    let Some(inner) = weak.upgrade() else { break };
                    if inner.closed.load(Ordering::Acquire) {
                        break;
                    }
                    let _one = inner.settling.lock().await;
                    let opened = inner.leases.tick(&inner.client.mds().with_caller(Caller::root())).await;
                    inner.attach_created(opened).await;
                }
            });
        }
        TesseraFs { inner, rt }
    }

    /// A write that must wait (its file is not at the MDS yet, set-id bits must be cleared first, or the
    /// write-behind is full): on a task, its bytes copied so the request buffer can be reused at once.
    /// `kill_privs`: the kernel asked for S_ISUID/S_ISGID to be cleared (FUSE_WRITE_KILL_SUIDGID).
    fn write_on_task(
        &self,
        fh: FileHandle,
        offset: u64,
        append: bool,
        data: &[u8],
        kill_privs: bool,
        reply: ReplyWrite,
    ) {
        let data = bytes::Bytes::copy_from_slice(data);
        self.spawn(move |inner| async move {
            let r = async {
                let h = inner.handle(fh)?;
                if kill_privs && h.inode.privileged.load(Ordering::Relaxed) {
                    inner.clear_privileges(&h).await?;
                }
                let rate = periodic::gate(&h.periodic, data.len() as u64).await;
                let t0 = Instant::now();
                // An O_APPEND write goes where the MDS says, not where the kernel's cached size put it
                // (libfuse: without the writeback cache the file system handles O_APPEND itself). The
                // MDS orders the appends of every client; the kernel, those through this mount.
                let offset = if append { h.mds.append(h.inode.ino, data.len() as u64).await? } else { offset };
                h.write(offset, &data).await?;
                periodic::pace(&h.periodic, rate, data.len() as u64, t0).await;
                Ok(())
            };
            match r.await {
                Ok(()) => reply.written(data.len() as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    pub fn state(&self) -> FsState {
        FsState(self.inner.clone())
    }

    /// Runs `f` with the shared state on the runtime: slow requests never hold up others.
    /// Creates this mount made without waiting reach the MDS first, so it sees every change in order.
    fn spawn<F, Fut>(&self, f: F)
    where
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let inner = self.inner.clone();
        let fut = f(inner.clone());
        self.rt.spawn(async move {
            inner.settle().await;
            fut.await
        });
    }
}

macro_rules! name_or_reply {
    ($name:expr, $reply:expr) => {
        match name_of($name) {
            Ok(n) => n,
            Err(e) => return $reply.error(errno(&e)),
        }
    };
}

/// Replies with the entry `name` in `parent` the MDS answered to the request `t` was taken for.
fn reply_entry(inner: &Inner, reply: ReplyEntry, r: FsResult<Attr>, t: &Ticket, parent: Ino, name: &str) {
    let ttl = match &r {
        Ok(a) => inner.leased_entry_ttl(t, parent, name, a),
        Err(_) => TTL,
    };
    reply_entry_for(inner, reply, r, ttl)
}

fn reply_entry_for(inner: &Inner, reply: ReplyEntry, r: FsResult<Attr>, ttl: Duration) {
    match r {
        Ok(a) => reply.entry(&ttl, &inner.fattr(a), Generation(0)),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: FsResult<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn reply_xattr(reply: ReplyXattr, size: u32, r: FsResult<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(&e)),
    }
}

impl Filesystem for TesseraFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(MAX_WRITE);
        // As much read-ahead as the kernel allows (it caps it at what it offered).
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let mut wanted = vec![
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
        ];
        if !self.inner.opts.page_cache {
            let mmap_ok = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP).is_ok();
            self.inner.direct_io.store(mmap_ok, Ordering::Relaxed);
            if !mmap_ok {
                tracing::info!("kernel cannot mmap direct-I/O files: reads and writes use its page cache");
            }
        }
        if !self.inner.opts.local_locks {
            // Locks hold between mounts (the MDS's lock manager), not only in this node's kernel.
            wanted.push(InitFlags::FUSE_POSIX_LOCKS);
            wanted.push(InitFlags::FUSE_FLOCK_LOCKS);
        }
        if self.inner.opts.acl {
            wanted.push(InitFlags::FUSE_POSIX_ACL);
            wanted.push(InitFlags::FUSE_DONT_MASK);
        }
        if self.inner.opts.readdirplus {
            wanted.push(InitFlags::FUSE_DO_READDIRPLUS);
            wanted.push(InitFlags::FUSE_READDIRPLUS_AUTO);
        }
        for f in wanted {
            if config.add_capabilities(f).is_err() {
                tracing::debug!("kernel lacks FUSE capability {f:?}");
            }
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!(name, reply);
        if let Some(r) = self.inner.leases.lookup(parent.0, &name) {
            return reply_entry_for(&self.inner, reply, r, self.inner.entry_ttl(parent.0));
        }
        // A name leased here (looked up or created through this mount, not recalled nor changed here since):
        // answered here, however long ago the kernel's own timeout ran out.
        if !self.inner.entry_ttl(parent.0).is_zero() {
            if let Some((a, ttl)) = self.inner.names.entry(parent.0, &name) {
                return reply.entry(&ttl, &self.inner.fattr(a), Generation(0));
            }
        }
        let k = key(req);
        let known = self.inner.leases.knows(parent.0, &name);
        let lookup = move |inner: Arc<Inner>| async move {
            let t = inner.names.ticket();
            let r = inner.mds(k).lookup(parent.0, &name).await.map(|(a, _)| a);
            let ttl = match &r {
                Ok(a) => {
                    inner.note_parent(a, parent.0);
                    inner.leased_entry_ttl(&t, parent.0, &name, a)
                }
                Err(_) => TTL,
            };
            reply_entry_for(&inner, reply, r, ttl);
        };
        if known {
            // Nothing waiting to be sent changes the answer: no need to wait for the next batch.
            self.rt.spawn(lookup(self.inner.clone()));
        } else {
            self.spawn(lookup);
        }
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(a) = self.inner.leases.getattr(ino.0) {
            // A leased directory or a file created in one: the batch that tells the MDS leases it here.
            let ttl = self.inner.leased_attr_ttl(&self.inner.names.ticket(), &a, false);
            return reply.attr(&ttl, &self.inner.fattr(a));
        }
        if let Some((a, ttl)) = self.inner.names.attrs(ino.0) {
            return reply.attr(&ttl, &self.inner.fattr(a));
        }
        if let Some(a) = self.inner.take_fresh_dir_attr(ino.0) {
            return reply.attr(&TTL, &self.inner.fattr(a));
        }
        let k = key(req);
        self.spawn(move |inner| async move {
            let t = inner.names.ticket();
            match inner.mds(k).getattr(ino.0).await {
                Ok(a) => reply.attr(&inner.leased_attr_ttl(&t, &a, true), &inner.fattr(a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let changing = self.inner.names.changing(&[ino.0], false);
        let k = key(req);
        let set = SetAttrs {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
        };
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(ino.0)).await;
            let t = inner.names.ticket();
            let r = inner.setattr(k, ino.0, set, fh).await;
            inner.forget_dir_attr(Some(ino.0));
            match r {
                Ok(a) => reply.attr(&inner.leased_attr_ttl(&t, &a, true), &file_attr(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let k = key(req);
        self.spawn(move |inner| async move {
            match inner.mds(k).readlink(ino.0).await {
                Ok(t) => reply.data(t.as_bytes()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let changing = self.inner.names.changing(&[parent.0], false);
        let name = name_or_reply!(name, reply);
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            let t = inner.names.ticket();
            let kind = if mode & libc::S_IFMT == 0 { Some(FileKind::File) } else { FileKind::from_mode(mode) };
            let r = match kind {
                None | Some(FileKind::Dir) | Some(FileKind::Symlink) => Err(FsError::invalid("mknod of this type")),
                Some(kind) => {
                    inner.give_up_lease(Some(parent.0)).await;
                    let perm = (mode & 0o7777, umask);
                    inner.mds(k).create(parent.0, &name, kind, perm, rdev, true, None).await.map(|(a, _)| a)
                }
            };
            inner.forget_dir_attr(Some(parent.0));
            reply_entry(&inner, reply, r, &t, parent.0, &name);
        });
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let changing = self.inner.names.changing(&[parent.0], false);
        let name = name_or_reply!(name, reply);
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(parent.0)).await;
            let t = inner.names.ticket();
            let r = inner.mds(k).mkdir(parent.0, &name, (mode & 0o7777, umask)).await;
            inner.forget_dir_attr(Some(parent.0));
            if let Ok(a) = &r {
                inner.note_parent(a, parent.0);
                if !inner.opts.sync_creates {
                    inner.leases.note_made(a.ino);
                }
            }
            reply_entry(&inner, reply, r, &t, parent.0, &name);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        // This mount's own change: the MDS recalls nothing from it (see `NameLeases::changing`).
        let changing = self.inner.names.removing(parent.0, &name.to_string_lossy());
        let name = name_or_reply!(name, reply);
        // In a directory leased here: removed at once, sent to the MDS with the next batch.
        let k = key(req);
        if !self.inner.opts.sync_creates && self.inner.leases.try_unlink(parent.0, &name, &self.inner.who(k)) {
            return reply.ok();
        }
        self.spawn(move |inner| async move {
            let _changing = changing;
            let mds = inner.mds(k);
            if !inner.opts.sync_creates && inner.leases.take_candidate(parent.0) {
                // Files are being removed here: lease the directory, then remove here.
                inner.leases.acquire(&mds, parent.0).await;
                if inner.leases.try_unlink(parent.0, &name, &inner.who(k)) {
                    return reply.ok();
                }
            }
            // A lease held or being granted here stays: its holder's own requests pass, and the name
            // goes from it once removed.
            let r = mds.unlink(parent.0, &name).await.map(|p| inner.remember_dir_attr(p));
            if r.is_ok() && !inner.opts.sync_creates {
                inner.leases.note_unlinked(parent.0, &name);
            }
            reply_empty(reply, r)
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        // This mount's own change: the MDS recalls nothing from it (see `NameLeases::changing`).
        let changing = self.inner.names.removing(parent.0, &name.to_string_lossy());
        let name = name_or_reply!(name, reply);
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            // The directory removed may be leased here, and the MDS holds removals while any is.
            inner.give_up_lease(None).await;
            let r = inner.mds(k).rmdir(parent.0, &name).await.map(|p| inner.remember_dir_attr(p));
            reply_empty(reply, r)
        });
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let changing = self.inner.names.changing(&[parent.0], false);
        let name = name_or_reply!(link_name, reply);
        let Some(target) = target.to_str().map(str::to_string) else {
            return reply.error(Errno::EINVAL);
        };
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(parent.0)).await;
            let t = inner.names.ticket();
            let r = inner.mds(k).symlink(parent.0, &name, &target).await;
            inner.forget_dir_attr(Some(parent.0));
            reply_entry(&inner, reply, r, &t, parent.0, &name);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        // This mount's own change: the MDS recalls nothing from it (see `NameLeases::changing`).
        let changing = [
            self.inner.names.removing(parent.0, &name.to_string_lossy()),
            self.inner.names.removing(newparent.0, &newname.to_string_lossy()),
        ];
        let name = name_or_reply!(name, reply);
        let newname = name_or_reply!(newname, reply);
        let known = fuser::RenameFlags::RENAME_NOREPLACE | fuser::RenameFlags::RENAME_EXCHANGE;
        if !known.contains(flags) {
            return reply.error(Errno::EINVAL);
        }
        let rf = RenameFlags {
            noreplace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
        };
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(None).await;
            let r = inner.mds(k).rename(parent.0, &name, newparent.0, &newname, rf).await;
            // Both parents and a moved directory itself changed.
            inner.forget_dir_attr(None);
            reply_empty(reply, r)
        });
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let changing = self.inner.names.changing(&[ino.0, newparent.0], false);

        let name = name_or_reply!(newname, reply);
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(newparent.0)).await;
            let t = inner.names.ticket();
            let r = inner.mds(k).link(ino.0, newparent.0, &name).await;
            inner.forget_dir_attr(Some(newparent.0));
            reply_entry(&inner, reply, r, &t, newparent.0, &name);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: FuseOpenFlags, reply: ReplyOpen) {
        let changing = (flags.0 & libc::O_TRUNC != 0).then(|| self.inner.names.changing(&[ino.0], false));
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            let who = inner.who(k);
            let mds = who.mds(inner.client.mds());
            match inner.open(&mds, ino.0, flags.0).await {
                Ok((fh, _)) => {
                    inner.revalidate(ino);
                    reply.opened(FileHandle(fh), inner.fopen_flags(flags.0))
                }
                // The inode is gone (removed through another mount while this kernel still had its name
                // cached): ESTALE makes the kernel look the name up again and retry the open (an
                // O_CREAT open then creates), where ENOENT would fail it.
                Err(e) if e.code == ErrorCode::NotFound => reply.error(Errno::from_i32(libc::ESTALE)),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let pending = self.inner.leases.is_pending_fh(fh.0);
        let h = if pending {
            None
        } else {
            match self.inner.handle(fh) {
                Ok(h) => Some(h),
                Err(e) => return reply.error(errno(&e)),
            }
        };
        let Some(h) = h.filter(|h| !h.periodic.active()) else {
            // The creating open of a file the MDS does not have yet: it gets it first. A job with a
            // PerSched pattern: the read waits for its interval.
            return self.spawn(move |inner| async move {
                match inner.handle(fh) {
                    Ok(h) => {
                        let rate = periodic::gate(&h.periodic, u64::from(size)).await;
                        let t0 = Instant::now();
                        match h.read(offset, size as u64).await {
                            Ok(d) => {
                                let len = d.iter().map(|b| b.len() as u64).sum();
                                periodic::pace(&h.periodic, rate, len, t0).await;
                                reply_pieces(reply, &d)
                            }
                            Err(e) => reply.error(errno(&e)),
                        }
                    }
                    Err(e) => reply.error(errno(&e)),
                }
            });
        };
        // A sequential reader's data is usually in the read-ahead already: answer from this thread.
        let pending = {
            let _rt = self.rt.enter();
            match h.try_read(offset, size as u64) {
                Ok(Ok(d)) => return reply_pieces(reply, &d),
                Ok(Err(e)) => return reply.error(errno(&e)),
                Err(pending) => pending,
            }
        };
        self.spawn(move |_inner| async move {
            match h.finish_read(offset, size as u64, pending).await {
                Ok(d) => reply_pieces(reply, &d),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: FuseOpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.inner.names.forget_attrs(_ino.0);
        let kill_privs = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let append = flags.0 & libc::O_APPEND != 0;
        if self.inner.leases.is_pending_fh(fh.0) {
            // The creating open of a file the MDS does not have yet: it gets it first.
            return self.write_on_task(fh, offset, append, data, kill_privs, reply);
        }
        let h = match self.inner.handle(fh) {
            Ok(h) => h,
            Err(e) => return reply.error(errno(&e)),
        };
        if (kill_privs && h.inode.privileged.load(Ordering::Relaxed)) || h.periodic.active() || append {
            // A job with a PerSched pattern: the write waits for its interval. An append asks the MDS
            // where it goes.
            return self.write_on_task(fh, offset, append, data, kill_privs, reply);
        }
        // Most writes only append to the write-behind buffer: answer them from this thread, with one
        // copy and no task.
        {
            let _rt = self.rt.enter();
            match h.try_write(offset, data) {
                Some(Ok(())) => return reply.written(data.len() as u32),
                Some(Err(e)) => return reply.error(errno(&e)),
                None => {}
            }
        }
        self.write_on_task(fh, offset, append, data, kill_privs, reply);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        // Written here: the size and times the MDS gets now are not the ones leased.
        let wrote = self.inner.handle(fh).is_ok_and(|h| h.wrote.load(Ordering::Acquire));
        let changing = wrote.then(|| self.inner.names.changing(&[_ino.0], false));
        // A pending file's creating open has written nothing (a write sends the create first) nor locked.
        if self.inner.leases.is_pending_fh(fh.0) {
            return reply.ok();
        }
        // Nothing written through this handle and no lock of the closing process on the file (most
        // closes): nothing to drain, report or release.
        let (h, locked) = match self.inner.handle(fh) {
            Ok(h) => {
                let locked = h.mds.session().holds_lock(h.inode.ino, lock_owner.0, LockKind::Posix);
                if !locked && !h.wrote.load(Ordering::Acquire) {
                    return reply.ok();
                }
                (h, locked)
            }
            Err(e) => return reply.error(errno(&e)),
        };
        self.spawn(move |_inner| async move {
            let _changing = changing;
            // What is still buffered goes in the job's interval.
            if h.inode.has_pending() {
                periodic::gate(&h.periodic, 0).await;
            }
            let mut r = h.flush().await;
            if locked {
                // POSIX: any close of the file releases the process's locks on it.
                let u = h.unlock_all(lock_owner.0, LockKind::Posix).await;
                r = r.and(u);
            }
            reply_empty(reply, r)
        });
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: FuseOpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Written here: the size and times the MDS gets now are not the ones leased.
        let wrote = self.inner.handle(fh).is_ok_and(|h| h.wrote.load(Ordering::Acquire));
        let changing = wrote.then(|| self.inner.names.changing(&[_ino.0], false));
        if self.inner.leases.release_fh(fh.0) {
            return reply.ok();
        }
        // A handle that wrote nothing, on a file this client holds no lock on (most closes of files
        // opened to read): nothing to drain or release here, so the kernel is answered at once and the
        // MDS told in the background, as creates and unlinks in a leased directory are.
        let quiet = self
            .inner
            .handle(fh)
            .is_ok_and(|h| !h.wrote.load(Ordering::Acquire) && h.mds.session().lock_owners_on(h.inode.ino).is_empty());
        if quiet {
            self.inner.background_closes.fetch_add(1, Ordering::AcqRel);
            reply.ok();
            return self.spawn(move |inner| async move {
                if let Err(e) = inner.release(fh).await {
                    tracing::warn!("release: {e}");
                }
                inner.background_closes.fetch_sub(1, Ordering::AcqRel);
            });
        }
        self.spawn(move |inner| async move {
            let _changing = changing;
            if let (Some(o), Ok(h)) = (lock_owner, inner.handle(fh)) {
                // The last close of an open file description releases its flock lock.
                if let Err(e) = h.unlock_all(o.0, LockKind::Flock).await {
                    tracing::warn!(ino = h.inode.ino, "releasing a flock lock at close: {e}");
                }
            }
            let r = inner.release(fh).await;
            if let Err(e) = &r {
                tracing::warn!("release: {e}");
            }
            reply_empty(reply, r)
        });
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.spawn(move |inner| async move {
            let r = async {
                let h = inner.handle(fh)?;
                h.mds.test_lock(h.inode.ino, lock_owner.0, locks::posix_spec(start, end, typ, pid)?).await
            }
            .await;
            match r {
                Ok(Some(l)) => {
                    let typ = if l.write { libc::F_WRLCK } else { libc::F_RDLCK };
                    // The kernel takes offsets up to OFFSET_MAX (a library client's "to the end" is
                    // u64::MAX), and a pid of this node only: another node's process is reported as 0.
                    let max = i64::MAX as u64;
                    let pid = if l.owner.client == inner.client.client_id() { l.pid } else { 0 };
                    reply.locked(l.start.min(max), l.end.min(max), typ, pid)
                }
                Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setlk(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let unique = req.unique().0;
        let spec = locks::posix_spec(start, end, typ, pid);
        self.spawn(move |inner| async move {
            reply_empty(reply, inner.set_lock(fh, unique, lock_owner.0, spec, sleep).await)
        });
    }

    fn flock(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        typ: i32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let unique = req.unique().0;
        let spec = locks::flock_spec(typ);
        self.spawn(move |inner| async move {
            reply_empty(reply, inner.set_lock(fh, unique, lock_owner.0, spec, sleep).await)
        });
    }

    fn interrupt(&self, _req: &Request, unique: RequestId) -> bool {
        self.inner.lock_waits.interrupt(unique.0, &self.rt);
        true
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let changing = self.inner.names.changing(&[_ino.0], false);
        self.spawn(move |inner| async move {
            let _changing = changing;
            let r = match inner.handle(fh) {
                Ok(h) => h.fsync().await,
                Err(e) => Err(e),
            };
            reply_empty(reply, r)
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: FuseOpenFlags, reply: ReplyOpen) {
        let k = key(req);
        self.spawn(move |inner| async move {
            match inner.mds(k).access(ino.0, libc::R_OK as u32).await {
                Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdir(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let k = key(req);
        self.spawn(move |inner| async move {
            match inner.readdir_page(k, ino.0, offset).await {
                Ok(entries) => {
                    for (ino, next, kind, name) in entries {
                        if reply.add(INodeNo(ino), next, file_type(kind), &name) {
                            break;
                        }
                    }
                    reply.ok()
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let k = key(req);
        self.spawn(move |inner| async move {
            let entries = match inner.readdir_page(k, ino.0, offset).await {
                Ok(e) => e,
                Err(e) => return reply.error(errno(&e)),
            };
            let mds = inner.mds(k);
            let attrs = futures::future::join_all(entries.iter().map(|(i, _, _, _)| mds.getattr(*i))).await;
            for ((ino, next, _, name), attr) in entries.into_iter().zip(attrs) {
                // An entry removed meanwhile is skipped.
                let Ok(attr) = attr else { continue };
                if reply.add(INodeNo(ino), next, &name, &TTL, &inner.fattr(attr), Generation(0)) {
                    break;
                }
            }
            reply.ok()
        });
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: FuseOpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Acknowledged metadata changes survive an MDS crash; this makes them survive a power loss.
        let k = key(req);
        self.spawn(move |inner| async move { reply_empty(reply, inner.mds(k).sync().await) });
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let k = key(req);
        self.spawn(move |inner| async move {
            match inner.mds(k).statfs().await {
                Ok(s) => {
                    let bs = s.block_size.max(512);
                    let name_max = if s.name_max == 0 { NAME_MAX as u32 } else { s.name_max };
                    reply.statfs(s.blocks, s.blocks_free, s.blocks_avail, s.files, s.files_free, bs, name_max, bs)
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let changing = self.inner.names.changing(&[ino.0], false);
        let name = name_or_reply!(name, reply);
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let mode = match flags {
            0 => XattrMode::Any,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        if !self.inner.opts.acl && name.starts_with(ACL_XATTR_PREFIX) {
            // Without ACLs in this kernel's checks, one set here would bind only the MDS.
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let value = value.to_vec();
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(ino.0)).await;
            let r = inner.mds(k).setxattr(ino.0, &name, value, mode).await;
            inner.forget_dir_attr(Some(ino.0));
            reply_empty(reply, r)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name_or_reply!(name, reply);
        let k = key(req);
        self.spawn(move |inner| async move {
            let r = inner.mds(k).getxattr(ino.0, &name).await;
            reply_xattr(reply, size, r)
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let k = key(req);
        self.spawn(move |inner| async move {
            let r = inner.mds(k).listxattr(ino.0).await.map(|names| {
                let mut out = Vec::new();
                for n in names {
                    out.extend_from_slice(n.as_bytes());
                    out.push(0);
                }
                out
            });
            reply_xattr(reply, size, r)
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let changing = self.inner.names.changing(&[ino.0], false);
        let name = name_or_reply!(name, reply);
        if !self.inner.opts.acl && name.starts_with(ACL_XATTR_PREFIX) {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let k = key(req);
        self.spawn(move |inner| async move {
            let _changing = changing;
            inner.give_up_lease(Some(ino.0)).await;
            let r = inner.mds(k).removexattr(ino.0, &name).await;
            inner.forget_dir_attr(Some(ino.0));
            reply_empty(reply, r)
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let k = key(req);
        self.spawn(
            move |inner| async move { reply_empty(reply, inner.mds(k).access(ino.0, mask.bits() as u32).await) },
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let changing = self.inner.names.changing(&[parent.0], false);
        let name = name_or_reply!(name, reply);
        let k = key(req);
        if !self.inner.opts.sync_creates && mode & libc::S_IFMT == libc::S_IFREG {
            // In a directory leased here: created at once, sent to the MDS with the next batch.
            let who = self.inner.who(k);
            let fh = self.inner.next_fh.fetch_add(1, Ordering::Relaxed);
            let perm = mode & 0o7777 & !umask;
            let t = self.inner.names.ticket();
            if let Some(a) = self.inner.leases.try_create(parent.0, &name, perm, &who, open_flags(flags), fh) {
                // The batch that tells the MDS leases the name and the file here.
                return reply.created(
                    &self.inner.leased_entry_ttl(&t, parent.0, &name, &a),
                    &file_attr(&a),
                    Generation(0),
                    FileHandle(fh),
                    self.inner.fopen_flags(flags),
                );
            }
        }
        self.spawn(move |inner| async move {
            let _changing = changing;
            let t = inner.names.ticket();
            let r: FsResult<(u64, Attr)> = async {
                let kind = if mode & libc::S_IFMT == 0 { Some(FileKind::File) } else { FileKind::from_mode(mode) };
                if kind != Some(FileKind::File) {
                    return Err(FsError::invalid("create of a non-regular file"));
                }
                let who = inner.who(k);
                let mds = who.mds(inner.client.mds());
                let perm = mode & 0o7777 & !umask;
                let excl = flags & libc::O_EXCL != 0;
                // One round trip: the MDS creates and opens (its creator may open a new file as asked
                // whatever its mode), or opens what is there when not exclusive.
                let of = open_flags(flags);
                if !inner.opts.sync_creates && inner.leases.take_candidate(parent.0) {
                    // The first create in a directory this mount made: lease it, then create here.
                    inner.leases.acquire(&mds, parent.0).await;
                    let fh = inner.next_fh.fetch_add(1, Ordering::Relaxed);
                    if let Some(a) = inner.leases.try_create(parent.0, &name, perm, &who, of, fh) {
                        return Ok((fh, a));
                    }
                }
                let opened = mds.create_open(parent.0, &name, (mode & 0o7777, umask), excl, None, of).await?;
                inner.leases.note_created(parent.0, &name);
                if let Some(p) = opened.parent.clone() {
                    inner.remember_dir_attr(p);
                }
                inner.attach(&mds, opened, of).await
            }
            .await;
            match r {
                Ok((fh, a)) => {
                    inner.note_parent(&a, parent.0);
                    let ttl = inner.leased_entry_ttl(&t, parent.0, &name, &a);
                    reply.created(&ttl, &file_attr(&a), Generation(0), FileHandle(fh), inner.fopen_flags(flags))
                }
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let changing = self.inner.names.changing(&[_ino.0], false);
        let (keep, punch, zero) = (libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE, libc::FALLOC_FL_ZERO_RANGE);
        // As Linux: a hole is punched only with KEEP_SIZE, never together with ZERO_RANGE; COLLAPSE_RANGE,
        // INSERT_RANGE and the rest are not supported.
        if mode & !(keep | punch | zero) != 0 || (mode & punch != 0 && (mode & keep == 0 || mode & zero != 0)) {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if length == 0 {
            return reply.error(Errno::EINVAL);
        }
        self.spawn(move |inner| async move {
            let _changing = changing;
            let r = match inner.handle(fh) {
                Ok(h) => h.fallocate(offset, length, mode).await,
                Err(e) => Err(e),
            };
            reply_empty(reply, r)
        });
    }

    /// `copy_file_range(2)` within the mount: the mount copies through its engine in pieces of
    /// [`tessera_client::cache::open_file::COPY_PIECE`], instead of the kernel's fallback of one 4 KiB read and
    /// write after another (which made large copies crawl). The VFS has already refused overlapping ranges
    /// in one file, O_APPEND destinations and files on other mounts.
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let changing = self.inner.names.changing(&[_ino_out.0], false);
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        // The reply counts bytes in 32 bits; a shorter copy makes the caller ask again for the rest.
        let len = len.min(COPY_MAX);
        self.spawn(move |inner| async move {
            let _changing = changing;
            let r = async {
                let (src, dst) = (inner.handle(fh_in)?, inner.handle(fh_out)?);
                let rate = periodic::gate(&dst.periodic, len).await;
                let t0 = Instant::now();
                let n = src.copy_range(offset_in, &dst, offset_out, len).await?;
                periodic::pace(&dst.periodic, rate, n, t0).await;
                Ok(n)
            };
            match r.await {
                Ok(n) => reply.written(n as u32),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        self.spawn(move |inner| async move {
            // SEEK_DATA/SEEK_HOLE (the kernel answers the others): the holes the data servers' objects
            // have, after this client's writes reached them.
            let r: Result<i64, Errno> = async {
                let hole = match whence {
                    libc::SEEK_DATA => false,
                    libc::SEEK_HOLE => true,
                    _ => return Err(Errno::EINVAL),
                };
                let offset = u64::try_from(offset).map_err(|_| Errno::from_i32(libc::ENXIO))?;
                let h = inner.handle(fh).map_err(|e| errno(&e))?;
                h.inode.flush(&h.mds).await.map_err(|e| errno(&e))?;
                let size = h.size(true).await.map_err(|e| errno(&e))?;
                let mut layout = h.inode.layout.get();
                if layout.is_mirrored() {
                    // Which replicas are in sync now (a stale one could answer "hole" where data is).
                    if let Ok(LayoutReply::File(l)) = h.mds.get_layout(h.inode.ino).await {
                        layout = Arc::new(l);
                    }
                }
                let at = inner.client.data().seek(&layout, size, offset, hole).await.map_err(|e| errno(&e))?;
                i64::try_from(at).map_err(|_| Errno::EOVERFLOW)
            }
            .await;
            match r {
                Ok(o) => reply.offset(o),
                Err(e) => reply.error(e),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_privs_is_only_clearing_suid_sgid() {
        assert!(kills_only_privs(0o104777, 0o777));
        assert!(kills_only_privs(0o6777, 0o2777));
        assert!(kills_only_privs(0o2775, 0o775));
        assert!(!kills_only_privs(0o777, 0o777), "nothing cleared");
        assert!(!kills_only_privs(0o4777, 0o4775), "other bits changed");
        assert!(!kills_only_privs(0o4755, 0o757), "bits added");
        assert!(!kills_only_privs(0o755, 0o4755), "suid set");
    }

    #[test]
    fn names_and_attrs() {
        assert!(name_of(OsStr::new("ok")).is_ok());
        assert_eq!(name_of(OsStr::new(&"x".repeat(256))).unwrap_err().code, ErrorCode::NameTooLong);
        let a = Attr {
            ino: 7,
            kind: FileKind::Fifo,
            perm: 0o4755,
            nlink: 2,
            uid: 1,
            gid: 2,
            size: 513,
            atime: Timestamp { secs: 5, nanos: 6 },
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            rdev: 0,
            blocks: 99,
        };
        let f = file_attr(&a);
        assert_eq!((f.ino, f.kind, f.perm, f.blocks, f.nlink), (INodeNo(7), FileType::NamedPipe, 0o4755, 2, 2));
        // A regular file's blocks are the MDS's measure, not its size's.
        let f = file_attr(&Attr { kind: FileKind::File, ..a });
        assert_eq!((f.size, f.blocks), (513, 99));
        assert_eq!(f.atime, Timestamp { secs: 5, nanos: 6 }.to_system_time());
        assert_eq!(time_set(TimeOrNow::Now), TimeSet::Now);
    }
}
