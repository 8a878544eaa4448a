//! `tessera fsck`'s decisions: what is inconsistent in a scan of the namespace and of the data
//! servers' objects, and what repair does about it (issue 18; no paper — the checks are e2fsck's and
//! LFSCK's namespace and layout checks). Pure: the scan is taken, and every finding confirmed under
//! the mutation lock and repaired, by [`online`] (the namespace's `fsck`).
//!
//! Online, the scan is not a snapshot: mutations go on while it reads. Two rules make its candidates
//! trustworthy, and [`online`] confirms each one against the store under the lock before it is
//! reported or repaired:
//! - **the ctime rule**: every change to the entries naming an inode updates that inode's ctime, and
//!   every change to a directory's entries updates the directory's ctime (link, unlink, rename, create,
//!   mkdir, rmdir). So for an inode whose ctime is still before the scan's `start` when confirmed, the
//!   scan saw its entries (and, for a directory, its children) exactly: counts about it are exact.
//!   Inodes changed since are left for the next run;
//! - **the object mark**: object ids grow monotonically and are allocated under the mutation lock by
//!   the mutation that commits them; `mark` is taken under that lock before the scan. An object above
//!   the mark (a create in flight) is never an orphan. One at or below it that no layout scanned
//!   afterwards names and the destroy log does not hold is named by nothing: a file deleted meanwhile
//!   had its objects in the destroy log, scanned after the inodes, or already destroyed, scanned after
//!   that.

pub mod online;

use crate::store::{xattr_key, Dentry, DestroyEntry, Inode, T};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tessera_proto::acl::{Acl, ACCESS_XATTR, DEFAULT_XATTR};
use tessera_proto::layout::{Layout, ReplicaState, StripeTarget};
use tessera_proto::{DsId, FileKind, FsResult, Ino, ObjectId, Timestamp, ROOT_INO};

/// Name of the directory under the root that unreachable inodes are moved to.
pub const LOST_FOUND: &str = "lost+found";

/// A record of another tree that belongs to an inode (xattrs, a directory's default layout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub tree: T,
    pub key: Vec<u8>,
    pub ino: Ino,
}

/// What one check pass read, in this order: inodes, entries, readdir positions, orphan markers and
/// other records, the destroy log, then each data server's objects.
#[derive(Default)]
pub struct Scan {
    /// Taken under the mutation lock before anything was read.
    pub start: Timestamp,
    pub mark: ObjectId,
    pub inodes: BTreeMap<Ino, Inode>,
    /// `(parent, name, entry)`.
    pub dentries: Vec<(Ino, String, Dentry)>,
    /// `(parent, seq, name)`.
    pub dirseq: Vec<(Ino, u64, String)>,
    pub orphan_markers: BTreeSet<Ino>,
    pub records: Vec<Record>,
    /// POSIX ACLs (`system.posix_acl_access`/`_default` attributes): `(inode, default?, key, value)`.
    pub acls: Vec<(Ino, bool, Vec<u8>, Vec<u8>)>,
    /// Records that do not decode: `(tree, key, error)`.
    pub corrupt: Vec<(T, Vec<u8>, String)>,
    /// `(key, entry)`.
    pub destroy: Vec<(Vec<u8>, DestroyEntry)>,
    /// The configured data servers.
    pub servers: Vec<DsId>,
    /// Each configured data server's objects with their sizes, or why they could not be listed.
    pub objects: BTreeMap<DsId, FsResult<Vec<(ObjectId, u64)>>>,
    /// Inodes with open handles when scanned.
    pub open: BTreeSet<Ino>,
    /// `--verify-mirrors`: (size, CRC-32) of the in-sync replicas of files not open, by (server, object).
    pub checksums: BTreeMap<(DsId, ObjectId), (u64, u32)>,
}

/// What repair does about a finding. Each is confirmed against the store under the mutation lock first
/// (see the module docs); `Report` findings are only reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fix {
    /// An entry whose inode (or parent directory) does not exist: removed.
    RemoveEntry {
        parent: Ino,
        name: String,
    },
    /// An entry whose kind is not its inode's: rewritten with the inode's.
    EntryKind {
        parent: Ino,
        name: String,
    },
    /// An entry readdir cannot see (no readdir position naming it): given a fresh position.
    AddSeq {
        parent: Ino,
        name: String,
    },
    /// A readdir position naming no entry: removed.
    DropSeq {
        parent: Ino,
        seq: u64,
    },
    /// Wrong link count: set.
    LinkCount {
        ino: Ino,
        nlink: u32,
    },
    /// A directory's size (its number of entries) is wrong: set.
    EntryCount {
        ino: Ino,
        size: u64,
    },
    /// A directory's `..` is not the directory whose entry names it: set.
    DirParent {
        ino: Ino,
        parent: Ino,
    },
    /// An inode with links that no entry names: linked into `/lost+found` as `#ino`.
    LostFound {
        ino: Ino,
    },
    /// A file with no links that nothing holds open: destroyed (its objects through the destroy log).
    Destroy {
        ino: Ino,
    },
    /// A layout stripe on a data server the cluster does not have: a new empty object on a configured
    /// server takes its place (its data reads as zeros), as LFSCK recreates lost OST objects.
    Replace {
        ino: Ino,
        stripe: usize,
    },
    /// An in-sync replica of a mirrored stripe that differs from the stripe's primary (size, or checksum
    /// with `--verify-mirrors`): marked stale, so the resync copies the primary's bytes to it again.
    MirrorStale {
        ino: Ino,
        stripe: usize,
        replica: StripeTarget,
    },
    /// Objects no layout names: destroyed through the destroy log.
    Orphans {
        ds: DsId,
        objects: Vec<ObjectId>,
    },
    /// A destroy-log entry for a data server the cluster does not have: dropped.
    DropDestroy {
        key: Vec<u8>,
    },
    /// A file smaller than its objects' data: its size set to what they hold (as Lustre takes the size
    /// from the OSTs).
    Size {
        ino: Ino,
        size: u64,
    },
    /// An orphan marker of an inode that is gone or has links again: dropped.
    DropMarker {
        ino: Ino,
    },
    /// A POSIX ACL that does not parse, or is where none can be (a default ACL on a non-directory, any on
    /// a symbolic link): removed (the mode alone decides, as before it was set).
    DropAcl {
        ino: Ino,
        key: Vec<u8>,
    },
    /// An access ACL whose owner, mask (or group) and other entries disagree with the inode's mode: they
    /// take the mode's bits (as a `chmod` would set them).
    AclFromMode {
        ino: Ino,
    },
    /// A record of an inode that does not exist (`of`), or one that does not decode (`of` None): removed.
    DropRecord {
        tree: T,
        key: Vec<u8>,
        of: Option<Ino>,
    },
    Report,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: &'static str,
    pub what: String,
    pub action: String,
    pub fix: Fix,
}

fn finding(kind: &'static str, what: String, action: impl Into<String>, fix: Fix) -> Finding {
    Finding { kind, what, action: action.into(), fix }
}

fn unreachable(ino: Ino, what: String) -> Finding {
    finding("unreachable", what, format!("move it to /{LOST_FOUND}/#{ino}"), Fix::LostFound { ino })
}

/// A mirrored file's replicas: those not in sync are reported (the resync driver works on them), those
/// on servers the cluster does not have too, and every in-sync replica must hold what the primary holds:
/// the same size (when both servers were listed) and, with `--verify-mirrors`, the same checksum. Files
/// open when scanned are skipped (their writes may be between replicas).
fn check_mirrors(
    out: &mut Vec<Finding>,
    scan: &Scan,
    objects: &HashMap<(DsId, ObjectId), u64>,
    ino: Ino,
    path: &str,
    l: &Layout,
) {
    let listed = |ds: DsId| scan.objects.get(&ds).is_some_and(|r| r.is_ok());
    for k in 0..l.stripe_count() {
        let reps = l.replicas(k);
        let Some(primary) = reps.first().map(|r| r.target) else { continue };
        for r in &reps[1..] {
            let t = r.target;
            if !scan.servers.contains(&t.ds) {
                let what = format!(
                    "{path}: stripe {k}'s replica {}:{} is on a data server the cluster does not have",
                    t.ds, t.object
                );
                out.push(finding(
                    "unknown-server",
                    what,
                    "none (tessera ds remove --rebuild replaces replicas)",
                    Fix::Report,
                ));
                continue;
            }
            if r.state != ReplicaState::InSync {
                let what = format!("{path}: stripe {k}'s replica {}:{} is {}", t.ds, t.object, r.state);
                out.push(finding(
                    "mirror-degraded",
                    what,
                    "none: resynced in the background (tessera mirror status)",
                    Fix::Report,
                ));
                continue;
            }
            if scan.open.contains(&ino) {
                continue;
            }
            let size = |x: StripeTarget| objects.get(&(x.ds, x.object)).copied().unwrap_or(0);
            let fix = Fix::MirrorStale { ino, stripe: k, replica: t };
            let action = "mark it stale: the resync copies the primary's bytes to it";
            if listed(t.ds) && listed(primary.ds) && size(t) != size(primary) {
                let what = format!(
                    "{path}: stripe {k}'s replica {}:{} holds {} bytes, its primary {}:{} {}",
                    t.ds,
                    t.object,
                    size(t),
                    primary.ds,
                    primary.object,
                    size(primary)
                );
                out.push(finding("mirror-size", what, action, fix));
                continue;
            }
            if let (Some(a), Some(b)) =
                (scan.checksums.get(&(t.ds, t.object)), scan.checksums.get(&(primary.ds, primary.object)))
            {
                if a != b {
                    let what = format!(
                        "{path}: stripe {k}'s replica {}:{} has checksum {:08x} ({} bytes), its primary {:08x} ({} bytes)",
                        t.ds, t.object, a.1, a.0, b.1, b.0
                    );
                    out.push(finding("mirror-checksum", what, action, fix));
                }
            }
        }
    }
}

/// What is wrong with ACL `value` (stored as the default ACL or not) of inode `i`, if anything: the
/// finding's kind and text, and whether its fix is to drop it (else: rewrite it from the mode).
pub fn acl_problem(i: &Inode, default: bool, value: &[u8]) -> Option<(&'static str, String, bool)> {
    let acl = match Acl::parse(value) {
        Ok(Some(a)) => a,
        Ok(None) => return Some(("acl-invalid", "an ACL with no entries".into(), true)),
        Err(e) => return Some(("acl-invalid", e.detail, true)),
    };
    if i.attr.kind == FileKind::Symlink || (default && i.attr.kind != FileKind::Dir) {
        let what = format!("a {} ACL on a {:?}", if default { "default" } else { "access" }, i.attr.kind);
        return Some(("acl-misplaced", what, true));
    }
    let (mode, _) = acl.equiv_mode(i.attr.perm);
    if !default && mode != i.attr.perm {
        let what = format!("access ACL {acl} says mode {:o}, the inode has {:o}", mode & 0o777, i.attr.perm & 0o777);
        return Some(("acl-mode", what, false));
    }
    None
}

/// Every stored ACL parses, is where one can be, and (access ACLs) agrees with its inode's mode.
fn check_acls(out: &mut Vec<Finding>, scan: &Scan, names: &Names<'_>) {
    for (ino, default, key, value) in &scan.acls {
        // One of an inode that does not exist is a stale record (above).
        let Some(i) = scan.inodes.get(ino) else { continue };
        if i.attr.ctime >= scan.start {
            continue;
        }
        let Some((kind, what, drop)) = acl_problem(i, *default, value) else { continue };
        let what = format!("{}: {what}", names.path(*ino));
        if drop {
            out.push(finding(kind, what, "remove the ACL", Fix::DropAcl { ino: *ino, key: key.clone() }));
        } else {
            out.push(finding(kind, what, "set its entries from the mode", Fix::AclFromMode { ino: *ino }));
        }
    }
}

/// Whether `key` of the xattr tree is an ACL of `ino`: `Some(default?)`.
pub fn acl_key(ino: Ino, key: &[u8]) -> Option<bool> {
    [(ACCESS_XATTR, false), (DEFAULT_XATTR, true)].into_iter().find(|(n, _)| xattr_key(ino, n) == key).map(|(_, d)| d)
}

/// Paths for messages, from the entries scanned (the first entry naming each directory).
struct Names<'a> {
    up: HashMap<Ino, (Ino, &'a str)>,
}

impl Names<'_> {
    fn path(&self, ino: Ino) -> String {
        if ino == ROOT_INO {
            return "/".into();
        }
        let mut parts = Vec::new();
        let mut cur = ino;
        // Bounded: a cycle of directories (corruption) must not loop.
        for _ in 0..256 {
            if cur == ROOT_INO {
                parts.reverse();
                return format!("/{}", parts.join("/"));
            }
            match self.up.get(&cur) {
                Some(&(parent, name)) => {
                    parts.push(name);
                    cur = parent;
                }
                None => break,
            }
        }
        format!("inode {ino}")
    }

    fn entry(&self, parent: Ino, name: &str) -> String {
        match self.path(parent).as_str() {
            "/" => format!("/{name}"),
            p => format!("{p}/{name}"),
        }
    }
}

/// Every inconsistency of `scan`, in a repair-friendly order (entries before the counts and inodes
/// they decide).
pub fn check(scan: &Scan) -> Vec<Finding> {
    let mut out = Vec::new();
    let names = Names { up: scan.dentries.iter().map(|(p, n, d)| (d.ino, (*p, n.as_str()))).collect() };
    for (tree, key, e) in &scan.corrupt {
        let what = format!("a {tree:?} record (key {}) does not decode: {e}", hex(key));
        out.push(finding(
            "corrupt-record",
            what,
            "remove the record",
            Fix::DropRecord { tree: *tree, key: key.clone(), of: None },
        ));
    }

    // Entries: what they name, and the counts they make.
    let seqs: HashMap<(Ino, u64), &str> = scan.dirseq.iter().map(|(p, s, n)| ((*p, *s), n.as_str())).collect();
    let mut refs: HashMap<Ino, u32> = HashMap::new();
    let mut entries: HashMap<Ino, u64> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    let mut named_in: HashMap<Ino, Ino> = HashMap::new();
    let positions: HashMap<(Ino, &str), u64> =
        scan.dentries.iter().map(|(p, n, d)| ((*p, n.as_str()), d.seq)).collect();
    for (parent, name, d) in &scan.dentries {
        let path = names.entry(*parent, name);
        let remove = Fix::RemoveEntry { parent: *parent, name: name.clone() };
        match scan.inodes.get(parent) {
            Some(p) if p.attr.kind == FileKind::Dir => {}
            Some(_) => {
                let what = format!("entry {path} is in inode {parent}, which is not a directory");
                out.push(finding("dangling-entry", what, "remove the entry", remove));
                continue;
            }
            None => {
                let what = format!("entry '{name}' is in directory {parent}, which does not exist");
                out.push(finding("dangling-entry", what, "remove the entry", remove));
                continue;
            }
        }
        let Some(i) = scan.inodes.get(&d.ino) else {
            let what = format!("entry {path} names inode {}, which does not exist", d.ino);
            out.push(finding("dangling-entry", what, "remove the entry", remove));
            continue;
        };
        *refs.entry(d.ino).or_default() += 1;
        *entries.entry(*parent).or_default() += 1;
        named_in.entry(d.ino).or_insert(*parent);
        if i.attr.kind == FileKind::Dir {
            *subdirs.entry(*parent).or_default() += 1;
        }
        if i.attr.kind != d.kind {
            let what = format!("entry {path} says {:?}, inode {} is a {:?}", d.kind, d.ino, i.attr.kind);
            let action = format!("rewrite the entry as a {:?}", i.attr.kind);
            out.push(finding("entry-kind", what, action, Fix::EntryKind { parent: *parent, name: name.clone() }));
        }
        if seqs.get(&(*parent, d.seq)) != Some(&name.as_str()) {
            let what = format!("entry {path} has no readdir position (readdir does not list it)");
            let fix = Fix::AddSeq { parent: *parent, name: name.clone() };
            out.push(finding("readdir-index", what, "give it a readdir position", fix));
        }
    }
    for (parent, seq, name) in &scan.dirseq {
        let fix = Fix::DropSeq { parent: *parent, seq: *seq };
        if !scan.inodes.contains_key(parent) {
            let what = format!("readdir position {seq} of directory {parent}, which does not exist");
            out.push(finding("stale-record", what, "remove it", fix));
        } else if positions.get(&(*parent, name.as_str())) != Some(seq) {
            let what =
                format!("readdir position {seq} of {} names '{name}', which is not its entry", names.path(*parent));
            out.push(finding("readdir-index", what, "remove the readdir position", fix));
        }
    }

    // Inodes: reachable, counted right, laid out on servers that exist, as large as their data.
    let objects: HashMap<(DsId, ObjectId), u64> = scan
        .objects
        .iter()
        .filter_map(|(ds, r)| r.as_ref().ok().map(|l| (ds, l)))
        .flat_map(|(ds, l)| l.iter().map(move |(o, size)| ((*ds, *o), *size)))
        .collect();
    for (&ino, i) in &scan.inodes {
        let path = names.path(ino);
        if let Some(l) = &i.layout {
            for (k, t) in l.all_targets().enumerate() {
                if !scan.servers.contains(&t.ds) {
                    let what =
                        format!("{path}: stripe {k} is on data server {}, which the cluster does not have", t.ds);
                    let action = "place a new empty object on a configured server (the stripe's data is lost)";
                    out.push(finding("unknown-server", what, action, Fix::Replace { ino, stripe: k }));
                }
            }
        }
        if let Some(l) = i.layout.as_ref().filter(|l| l.is_mirrored()) {
            check_mirrors(&mut out, scan, &objects, ino, &path, l);
        }
        // The ctime rule: counts about an inode changed since the scan began are not exact.
        if i.attr.ctime >= scan.start {
            continue;
        }
        let n = refs.get(&ino).copied().unwrap_or(0);
        if i.attr.kind == FileKind::Dir {
            if ino != ROOT_INO && n == 0 {
                out.push(unreachable(ino, format!("directory {ino} is named by no entry")));
                continue;
            }
            let want = 2 + subdirs.get(&ino).copied().unwrap_or(0);
            if i.attr.nlink != want {
                let what = format!("{path}: {} links, its subdirectories make {want}", i.attr.nlink);
                out.push(finding("link-count", what, format!("set it to {want}"), Fix::LinkCount { ino, nlink: want }));
            }
            let size = entries.get(&ino).copied().unwrap_or(0);
            if i.attr.size != size {
                let what = format!("{path}: size {}, it holds {size} entries", i.attr.size);
                out.push(finding("entry-count", what, format!("set it to {size}"), Fix::EntryCount { ino, size }));
            }
            let parent = if ino == ROOT_INO { ROOT_INO } else { named_in.get(&ino).copied().unwrap_or(i.parent) };
            if i.parent != parent {
                let what = format!("{path}: '..' is inode {}, its entry is in {}", i.parent, names.path(parent));
                let fix = Fix::DirParent { ino, parent };
                out.push(finding("dir-parent", what, format!("set '..' to inode {parent}"), fix));
            }
            continue;
        }
        if n == 0 {
            if i.attr.nlink == 0 {
                if !(scan.orphan_markers.contains(&ino) && scan.open.contains(&ino)) {
                    let what = format!("inode {ino} has no links and is not open");
                    out.push(finding("unlinked-inode", what, "destroy it", Fix::Destroy { ino }));
                }
            } else {
                let what = format!("inode {ino} ({:?}, {} links) is named by no entry", i.attr.kind, i.attr.nlink);
                out.push(unreachable(ino, what));
            }
            continue;
        }
        if i.attr.nlink != n {
            let what = format!("{path}: {} links, {n} entries name it", i.attr.nlink);
            out.push(finding("link-count", what, format!("set it to {n}"), Fix::LinkCount { ino, nlink: n }));
        }
        if scan.orphan_markers.contains(&ino) {
            let what = format!("{path}: marked unlinked-while-open, but entries name it");
            out.push(finding("stale-record", what, "drop the marker", Fix::DropMarker { ino }));
        }
        if let (FileKind::File, Some(l), false) = (i.attr.kind, &i.layout, scan.open.contains(&ino)) {
            let held = data_size(l, &objects);
            if held > i.attr.size {
                let what = format!("{path}: size {} but its objects hold data up to {held}", i.attr.size);
                out.push(finding("size", what, format!("set the size to {held}"), Fix::Size { ino, size: held }));
            }
        }
    }
    for &ino in &scan.orphan_markers {
        if !scan.inodes.contains_key(&ino) {
            let what = format!("an unlinked-while-open marker of inode {ino}, which does not exist");
            out.push(finding("stale-record", what, "drop the marker", Fix::DropMarker { ino }));
        }
    }
    for r in &scan.records {
        if !scan.inodes.contains_key(&r.ino) {
            let what = format!("a {:?} record of inode {}, which does not exist", r.tree, r.ino);
            out.push(finding(
                "stale-record",
                what,
                "remove it",
                Fix::DropRecord { tree: r.tree, key: r.key.clone(), of: Some(r.ino) },
            ));
        }
    }

    check_acls(&mut out, scan, &names);

    // The destroy log, and objects nothing names.
    let mut named: BTreeSet<(DsId, ObjectId)> = BTreeSet::new();
    for i in scan.inodes.values() {
        if let Some(l) = &i.layout {
            // Every replica of a mirrored stripe is named too: none of them is an orphan.
            named.extend(l.all_objects().map(|t| (t.ds, t.object)));
        }
    }
    for (key, e) in &scan.destroy {
        named.extend(e.objects.iter().map(|o| (e.ds, *o)));
        let id = key.as_slice().try_into().map(u64::from_be_bytes).unwrap_or(u64::MAX);
        if !scan.servers.contains(&e.ds) {
            let what = format!(
                "destroy-log entry {id}: {} objects of data server {}, which the cluster does not have",
                e.objects.len(),
                e.ds
            );
            out.push(finding("destroy-log", what, "drop the entry", Fix::DropDestroy { key: key.clone() }));
        } else if id <= scan.mark {
            // Queued before this run, and still there after the run's own drain pass.
            let why = match scan.objects.get(&e.ds) {
                Some(Err(e)) => format!(" ({e})"),
                _ => String::new(),
            };
            let what = format!(
                "destroy-log entry {id}: {} objects of data server {} not destroyed{why}",
                e.objects.len(),
                e.ds
            );
            out.push(finding(
                "destroy-log",
                what,
                "keep it: the destroyer retries until the server answers",
                Fix::Report,
            ));
        }
    }
    for (&ds, listed) in &scan.objects {
        match listed {
            Err(e) => {
                let what = format!("data server {ds} could not be listed: {e}");
                out.push(finding("server-unreachable", what, "none: its objects were not checked", Fix::Report));
            }
            Ok(list) => {
                for &(o, size) in list {
                    // The mark is a sequence number; an object id also names its target (top bits).
                    if (o & tessera_proto::OBJECT_SEQ_MAX) <= scan.mark && !named.contains(&(ds, o)) {
                        let what = format!("object {o:#x} ({size} bytes) on data server {ds} is in no layout");
                        out.push(finding("orphan-object", what, "destroy it", Fix::Orphans { ds, objects: vec![o] }));
                    }
                }
            }
        }
    }
    out
}

/// The file size a layout's objects imply: the end of the furthest byte any of them (any replica) holds.
pub fn data_size(l: &Layout, objects: &HashMap<(DsId, ObjectId), u64>) -> u64 {
    let sizes = l.stripe_objects().map(|(k, t)| match objects.get(&(t.ds, t.object)) {
        Some(&size) => l.file_size_from_object(k, size),
        None => 0,
    });
    sizes.max().unwrap_or(0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_proto::layout::StripeTarget;
    use tessera_proto::{Attr, FsError};

    const T0: Timestamp = Timestamp { secs: 1000, nanos: 0 };
    const START: Timestamp = Timestamp { secs: 2000, nanos: 0 };

    fn inode(ino: Ino, kind: FileKind, nlink: u32, parent: Ino) -> Inode {
        let mut attr = Attr::new(ino, kind, 0o644, 0, 0, T0);
        attr.nlink = nlink;
        Inode { attr, layout: None, target: None, parent }
    }

    /// A consistent namespace: `/d` (ino 2), `/d/f` (ino 3, striped over ds 1 and 2 as objects 30 and
    /// 31), data servers 1 and 2 holding those objects; the mark above every id.
    fn clean() -> Scan {
        let mut s = Scan { start: START, mark: 1000, servers: vec![1, 2], ..Default::default() };
        let mut root = inode(ROOT_INO, FileKind::Dir, 3, ROOT_INO);
        root.attr.size = 1;
        let mut d = inode(2, FileKind::Dir, 2, ROOT_INO);
        d.attr.size = 1;
        let mut f = inode(3, FileKind::File, 1, 2);
        let targets = vec![StripeTarget { ds: 1, object: 30 }, StripeTarget { ds: 2, object: 31 }];
        f.layout = Some(Layout::plain(100, targets));
        f.attr.size = 150;
        s.inodes = [(ROOT_INO, root), (2, d), (3, f)].into_iter().collect();
        s.dentries = vec![
            (ROOT_INO, "d".into(), Dentry { ino: 2, kind: FileKind::Dir, seq: 10 }),
            (2, "f".into(), Dentry { ino: 3, kind: FileKind::File, seq: 11 }),
        ];
        s.dirseq = vec![(ROOT_INO, 10, "d".into()), (2, 11, "f".into())];
        s.objects = [(1, Ok(vec![(30, 100)])), (2, Ok(vec![(31, 50)]))].into_iter().collect();
        s
    }

    fn kinds(s: &Scan) -> Vec<(&'static str, Fix)> {
        check(s).into_iter().map(|f| (f.kind, f.fix)).collect()
    }

    #[test]
    fn a_consistent_namespace_has_no_findings() {
        assert_eq!(kinds(&clean()), vec![]);
    }

    #[test]
    fn an_entry_naming_a_missing_inode_is_removed_and_counts_follow() {
        let mut s = clean();
        s.inodes.remove(&3);
        s.objects = BTreeMap::new();
        let k = kinds(&s);
        assert_eq!(k[0], ("dangling-entry", Fix::RemoveEntry { parent: 2, name: "f".into() }));
        // /d now holds no live entry.
        assert!(k.contains(&("entry-count", Fix::EntryCount { ino: 2, size: 0 })), "{k:?}");
        let f = check(&s);
        assert!(f[0].what.contains("/d/f"), "{}", f[0].what);
    }

    #[test]
    fn an_entry_in_a_missing_or_non_directory_parent_is_removed() {
        let mut s = clean();
        s.dentries.push((99, "x".into(), Dentry { ino: 3, kind: FileKind::File, seq: 12 }));
        s.dentries.push((3, "y".into(), Dentry { ino: 2, kind: FileKind::Dir, seq: 13 }));
        let k = kinds(&s);
        assert!(k.contains(&("dangling-entry", Fix::RemoveEntry { parent: 99, name: "x".into() })), "{k:?}");
        assert!(k.contains(&("dangling-entry", Fix::RemoveEntry { parent: 3, name: "y".into() })), "{k:?}");
        // Neither counts as a link.
        assert!(!k.iter().any(|(kind, _)| *kind == "link-count"), "{k:?}");
    }

    #[test]
    fn an_inode_no_entry_names_goes_to_lost_found_and_one_without_links_is_destroyed() {
        let mut s = clean();
        s.inodes.insert(4, inode(4, FileKind::File, 1, 2));
        s.inodes.insert(5, inode(5, FileKind::Dir, 2, 2));
        s.inodes.insert(6, inode(6, FileKind::File, 0, 2));
        let k = kinds(&s);
        assert!(k.contains(&("unreachable", Fix::LostFound { ino: 4 })), "{k:?}");
        assert!(k.contains(&("unreachable", Fix::LostFound { ino: 5 })), "{k:?}");
        assert!(k.contains(&("unlinked-inode", Fix::Destroy { ino: 6 })), "{k:?}");
    }

    #[test]
    fn an_unlinked_file_held_open_is_no_finding() {
        let mut s = clean();
        s.inodes.insert(6, inode(6, FileKind::File, 0, 2));
        s.orphan_markers.insert(6);
        s.open.insert(6);
        assert_eq!(kinds(&s), vec![]);
        s.open.clear();
        assert_eq!(kinds(&s), vec![("unlinked-inode", Fix::Destroy { ino: 6 })]);
    }

    #[test]
    fn link_counts_are_the_entries_naming_a_file_and_two_plus_subdirectories_for_a_directory() {
        let mut s = clean();
        s.inodes.get_mut(&3).unwrap().attr.nlink = 5;
        s.inodes.get_mut(&ROOT_INO).unwrap().attr.nlink = 7;
        let k = kinds(&s);
        assert!(k.contains(&("link-count", Fix::LinkCount { ino: 3, nlink: 1 })), "{k:?}");
        assert!(k.contains(&("link-count", Fix::LinkCount { ino: ROOT_INO, nlink: 3 })), "{k:?}");
        // A hard link makes two.
        s.dentries.push((ROOT_INO, "h".into(), Dentry { ino: 3, kind: FileKind::File, seq: 12 }));
        s.dirseq.push((ROOT_INO, 12, "h".into()));
        s.inodes.get_mut(&ROOT_INO).unwrap().attr.size = 2;
        let k = kinds(&s);
        assert!(k.contains(&("link-count", Fix::LinkCount { ino: 3, nlink: 2 })), "{k:?}");
    }

    #[test]
    fn counts_of_inodes_changed_since_the_scan_began_are_not_judged() {
        let mut s = clean();
        let f = s.inodes.get_mut(&3).unwrap();
        f.attr.nlink = 5;
        f.attr.ctime = START;
        let mut unnamed = inode(4, FileKind::File, 1, 2);
        unnamed.attr.ctime = START;
        s.inodes.insert(4, unnamed);
        assert_eq!(kinds(&s), vec![]);
    }

    #[test]
    fn entry_kind_readdir_positions_and_dot_dot_are_checked() {
        let mut s = clean();
        s.dentries[1].2.kind = FileKind::Symlink;
        s.dirseq[0].2 = "other".into();
        s.inodes.get_mut(&2).unwrap().parent = 3;
        let k = kinds(&s);
        assert!(k.contains(&("entry-kind", Fix::EntryKind { parent: 2, name: "f".into() })), "{k:?}");
        assert!(k.contains(&("readdir-index", Fix::AddSeq { parent: ROOT_INO, name: "d".into() })), "{k:?}");
        assert!(k.contains(&("readdir-index", Fix::DropSeq { parent: ROOT_INO, seq: 10 })), "{k:?}");
        assert!(k.contains(&("dir-parent", Fix::DirParent { ino: 2, parent: ROOT_INO })), "{k:?}");
    }

    #[test]
    fn objects_no_layout_names_are_orphans_unless_above_the_mark_or_queued_for_destruction() {
        let mut s = clean();
        // Object 40 of target 2 is below the mark too: the mark compares sequence numbers.
        let in_t2 = tessera_proto::object_in(2, 40);
        let above_in_t2 = tessera_proto::object_in(2, 2000);
        s.objects.insert(1, Ok(vec![(30, 100), (40, 7), (2000, 7), (41, 1), (in_t2, 3), (above_in_t2, 3)]));
        s.destroy.push((1001u64.to_be_bytes().to_vec(), DestroyEntry { ds: 1, objects: vec![41] }));
        let k = kinds(&s);
        assert_eq!(
            k,
            vec![
                ("orphan-object", Fix::Orphans { ds: 1, objects: vec![40] }),
                ("orphan-object", Fix::Orphans { ds: 1, objects: vec![in_t2] })
            ]
        );
    }

    #[test]
    fn a_destroy_log_that_does_not_drain_is_reported_and_entries_for_unknown_servers_dropped() {
        let mut s = clean();
        s.destroy.push((5u64.to_be_bytes().to_vec(), DestroyEntry { ds: 9, objects: vec![50] }));
        s.destroy.push((6u64.to_be_bytes().to_vec(), DestroyEntry { ds: 2, objects: vec![51] }));
        s.objects.insert(2, Err(FsError::unavailable("connection refused")));
        let k = kinds(&s);
        assert!(k.contains(&("destroy-log", Fix::DropDestroy { key: 5u64.to_be_bytes().to_vec() })), "{k:?}");
        assert!(k.contains(&("destroy-log", Fix::Report)), "{k:?}");
        assert!(k.contains(&("server-unreachable", Fix::Report)), "{k:?}");
    }

    #[test]
    fn a_layout_on_an_unknown_server_is_re_placed() {
        let mut s = clean();
        s.servers = vec![1];
        s.objects.remove(&2);
        assert_eq!(kinds(&s), vec![("unknown-server", Fix::Replace { ino: 3, stripe: 1 })]);
    }

    #[test]
    fn a_file_smaller_than_its_objects_data_grows_to_it_unless_open() {
        let mut s = clean();
        // Object 31 (stripe 1) holds 80 bytes: the file reaches 100 + 80.
        s.objects.insert(2, Ok(vec![(31, 80)]));
        assert_eq!(kinds(&s), vec![("size", Fix::Size { ino: 3, size: 180 })]);
        s.open.insert(3);
        assert_eq!(kinds(&s), vec![]);
    }

    #[test]
    fn records_and_markers_of_missing_inodes_are_stale_and_undecodable_records_removed() {
        let mut s = clean();
        s.records.push(Record { tree: T::Xattrs, key: vec![0, 0, 0, 0, 0, 0, 0, 77, 0, b'a'], ino: 77 });
        s.records.push(Record { tree: T::Xattrs, key: vec![0, 0, 0, 0, 0, 0, 0, 3, 0, b'a'], ino: 3 });
        s.orphan_markers.insert(78);
        s.corrupt.push((T::Inodes, vec![1, 2], "bad".into()));
        let k = kinds(&s);
        assert_eq!(k.len(), 3, "{k:?}");
        assert!(k.contains(&("stale-record", Fix::DropMarker { ino: 78 })), "{k:?}");
        assert!(k.iter().any(|(kind, fix)| *kind == "stale-record" && matches!(fix, Fix::DropRecord { .. })));
        assert!(
            k.contains(&("corrupt-record", Fix::DropRecord { tree: T::Inodes, key: vec![1, 2], of: None })),
            "{k:?}"
        );
    }
}
