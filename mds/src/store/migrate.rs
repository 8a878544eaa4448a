//! Format migration on open: a database of an older format is rewritten in the current one, one format
//! after the other (format 1: layouts without composite extents; 2: without mirrors; 3: attributes
//! without `blocks`); one newer than
//! this server understands is refused. Each step rewrites its records as one atomic batch, then records
//! its format; an interrupted step is run again (a record already rewritten is recognised and kept).

use super::error::{StoreError, StoreResult};
use super::records::{dec, enc, Inode, FORMAT_KEY, FORMAT_VERSION, T};
use super::Store;
use serde::{Deserialize, Serialize};
use sled::Tree;
use std::path::Path;
use tessera_proto::layout::{Component, ExtentSpec, Layout, LayoutSpec, StripeTarget};
use tessera_proto::{wire, Attr, FileKind, Ino, Timestamp};
use tracing::info;

/// Records the format of a new database; migrates an older one in place; refuses a newer one.
pub(super) fn check_format(store: &Store, dir: &Path) -> StoreResult<()> {
    let meta = store.tree(T::Meta);
    match meta.get(FORMAT_KEY)? {
        None => {
            meta.insert(FORMAT_KEY, enc(&FORMAT_VERSION)?)?;
        }
        Some(v) => {
            let mut ver: u32 = dec(&v)?;
            if ver == 0 || ver > FORMAT_VERSION {
                return Err(StoreError::Format { path: dir.to_path_buf(), found: ver, understood: FORMAT_VERSION });
            }
            let from = ver;
            if ver == 1 {
                let n = migrate_v1(store.tree(T::Inodes))?;
                ver = 2;
                meta.insert(FORMAT_KEY, enc(&ver)?)?;
                store.db.flush()?;
                info!("metadata database {}: format 1 to 2 ({n} layouts)", dir.display());
            }
            if ver == 2 {
                let n = migrate_v2(store.tree(T::Inodes), store.tree(T::DirLayouts))?;
                ver = 3;
                meta.insert(FORMAT_KEY, enc(&ver)?)?;
                store.db.flush()?;
                info!("metadata database {}: format 2 to 3 ({n} layouts)", dir.display());
            }
            if ver == 3 {
                let n = migrate_v3(store.tree(T::Inodes))?;
                ver = 4;
                meta.insert(FORMAT_KEY, enc(&ver)?)?;
                store.db.flush()?;
                info!(
                    "metadata database {}: format 3 to 4 ({n} files' blocks estimated from their sizes)",
                    dir.display()
                );
            }
            if from != ver {
                info!("metadata database {} migrated from format {from} to {ver}", dir.display());
            }
        }
    }
    Ok(())
}

/// Attributes up to format 3: no `blocks`.
#[derive(Serialize, Deserialize, Clone)]
struct AttrV3 {
    ino: Ino,
    kind: FileKind,
    perm: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    crtime: Timestamp,
    rdev: u32,
}

impl AttrV3 {
    /// Format 4's attributes: a file's blocks estimated from its size (what `stat` said before; the
    /// MDS measures them at the file's next write).
    fn current(self) -> Attr {
        let blocks = if self.kind == FileKind::File { self.size.div_ceil(512) } else { 0 };
        Attr {
            ino: self.ino,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            rdev: self.rdev,
            blocks,
        }
    }
}

/// Format 3's inode record: attributes without `blocks`.
#[derive(Serialize, Deserialize)]
struct InodeV3 {
    attr: AttrV3,
    layout: Option<Layout>,
    target: Option<String>,
    parent: Ino,
}

/// Format 1's inode record: layouts without extents.
#[derive(Serialize, Deserialize)]
struct InodeV1 {
    attr: AttrV3,
    layout: Option<LayoutV1>,
    target: Option<String>,
    parent: Ino,
}

#[derive(Serialize, Deserialize)]
struct LayoutV1 {
    stripe_size: u64,
    targets: Vec<StripeTarget>,
}

/// Rewrites every format-1 inode record of `inodes` in format 2 (a v1 layout is a plain layout: one
/// extent to EOF), as one atomic batch. A record that already decodes only as format 2 (a migration
/// interrupted after its batch, before the format key) is left as it is; v1 and v2 records differ only
/// for files, and a v2 file record read as v1 always leaves trailing bytes. Returns how many records
/// held a layout.
pub(super) fn migrate_v1(inodes: &Tree) -> StoreResult<usize> {
    let mut batch = sled::Batch::default();
    let mut layouts = 0;
    for kv in inodes.iter() {
        let (k, v) = kv?;
        let new = match wire::decode::<InodeV1>(&v) {
            Ok(old) => InodeV2 {
                attr: old.attr,
                layout: old.layout.map(|l| LayoutV2 {
                    stripe_size: l.stripe_size,
                    targets: l.targets,
                    extents: vec![],
                }),
                target: old.target,
                parent: old.parent,
            },
            Err(_) => dec::<InodeV2>(&v)?,
        };
        layouts += usize::from(new.layout.is_some());
        batch.insert(k, enc(&new)?);
    }
    inodes.apply_batch(batch)?;
    Ok(layouts)
}

/// Format 2's inode record: layouts without mirrors.
#[derive(Serialize, Deserialize)]
struct InodeV2 {
    attr: AttrV3,
    layout: Option<LayoutV2>,
    target: Option<String>,
    parent: Ino,
}

#[derive(Serialize, Deserialize)]
struct LayoutV2 {
    stripe_size: u64,
    targets: Vec<StripeTarget>,
    extents: Vec<ComponentV2>,
}

#[derive(Serialize, Deserialize)]
struct ComponentV2 {
    start: u64,
    end: u64,
    stripe_size: u64,
    stripe_count: u32,
    targets: Vec<StripeTarget>,
}

/// Format 2's directory default (plain).
#[derive(Serialize, Deserialize)]
struct LayoutSpecV2 {
    stripe_size: Option<u64>,
    stripe_count: Option<u32>,
}

/// Format 2's extent of a composite directory default.
#[derive(Serialize, Deserialize)]
struct ExtentSpecV2 {
    end: u64,
    stripe_size: Option<u64>,
    stripe_count: Option<u32>,
}

/// Rewrites every format-2 record in format 3, as one atomic batch: layouts get one copy of each stripe
/// (mirror count 1, generation 0), directory defaults an unset mirror count. A record already in format 3
/// (an interrupted migration) is kept: a format-3 layout or spec read as format 2 leaves trailing bytes.
/// Returns how many records held a layout.
pub(super) fn migrate_v2(inodes: &Tree, dir_layouts: &Tree) -> StoreResult<usize> {
    let mut batch = sled::Batch::default();
    let mut layouts = 0;
    for kv in inodes.iter() {
        let (k, v) = kv?;
        let new = match wire::decode::<InodeV2>(&v) {
            Ok(old) => InodeV3 {
                attr: old.attr,
                layout: old.layout.map(|l| Layout {
                    extents: l
                        .extents
                        .into_iter()
                        .map(|e| Component {
                            start: e.start,
                            end: e.end,
                            stripe_size: e.stripe_size,
                            stripe_count: e.stripe_count,
                            targets: e.targets,
                            mirror_count: 1,
                            mirrors: Vec::new(),
                        })
                        .collect(),
                    ..Layout::plain(l.stripe_size, l.targets)
                }),
                target: old.target,
                parent: old.parent,
            },
            Err(_) => dec::<InodeV3>(&v)?,
        };
        layouts += usize::from(new.layout.is_some());
        batch.insert(k, enc(&new)?);
    }
    let mut dirs = sled::Batch::default();
    for kv in dir_layouts.iter() {
        let (k, v) = kv?;
        let new = if k.len() == 8 {
            match wire::decode::<LayoutSpecV2>(&v) {
                Ok(old) => {
                    enc(&LayoutSpec { stripe_size: old.stripe_size, stripe_count: old.stripe_count, mirrors: None })?
                }
                Err(_) => enc(&dec::<LayoutSpec>(&v)?)?,
            }
        } else {
            match wire::decode::<Vec<ExtentSpecV2>>(&v) {
                Ok(old) => enc(&old
                    .into_iter()
                    .map(|e| ExtentSpec {
                        end: e.end,
                        stripe_size: e.stripe_size,
                        stripe_count: e.stripe_count,
                        mirrors: None,
                    })
                    .collect::<Vec<_>>())?,
                Err(_) => enc(&dec::<Vec<ExtentSpec>>(&v)?)?,
            }
        };
        dirs.insert(k, new);
    }
    // One batch per tree; a crash between them leaves format 2 recorded and this step runs again.
    inodes.apply_batch(batch)?;
    dir_layouts.apply_batch(dirs)?;
    Ok(layouts)
}

/// Rewrites every format-3 inode record in format 4 (attributes with `blocks`, a file's estimated from
/// its size), as one atomic batch; a record already in format 4 (an interrupted migration: read as
/// format 3 it leaves trailing bytes) is kept. Returns how many records were files.
pub(super) fn migrate_v3(inodes: &Tree) -> StoreResult<usize> {
    let mut batch = sled::Batch::default();
    let mut files = 0;
    for kv in inodes.iter() {
        let (k, v) = kv?;
        let new = match wire::decode::<InodeV3>(&v) {
            Ok(old) => Inode { attr: old.attr.current(), layout: old.layout, target: old.target, parent: old.parent },
            Err(_) => dec::<Inode>(&v)?,
        };
        files += usize::from(new.attr.kind == FileKind::File);
        batch.insert(k, enc(&new)?);
    }
    inodes.apply_batch(batch)?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::{ino_key, TREE_NAMES};
    use tessera_proto::config::MetadataCommit;
    use tessera_proto::FileKind;

    /// Attributes as formats 1 to 3 kept them.
    fn old_attr(ino: Ino, kind: FileKind, perm: u32) -> AttrV3 {
        let t = Timestamp::now();
        let nlink = if kind == FileKind::Dir { 2 } else { 1 };
        AttrV3 { ino, kind, perm, nlink, uid: 0, gid: 0, size: 0, atime: t, mtime: t, ctime: t, crtime: t, rdev: 0 }
    }

    #[test]
    fn a_format_3_database_gets_blocks_estimated_from_sizes() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            let inodes = db.open_tree(TREE_NAMES[T::Inodes as usize]).unwrap();
            let f = InodeV3 {
                attr: AttrV3 { size: 5000, ..old_attr(10, FileKind::File, 0o644) },
                layout: Some(Layout::plain(65536, vec![StripeTarget { ds: 0, object: 7 }])),
                target: None,
                parent: 1,
            };
            let d = InodeV3 {
                attr: AttrV3 { size: 3, ..old_attr(11, FileKind::Dir, 0o755) },
                layout: None,
                target: None,
                parent: 1,
            };
            inodes.insert(ino_key(10), wire::encode(&f).unwrap()).unwrap();
            inodes.insert(ino_key(11), wire::encode(&d).unwrap()).unwrap();
            db.open_tree(TREE_NAMES[T::Meta as usize])
                .unwrap()
                .insert(FORMAT_KEY, wire::encode(&3u32).unwrap())
                .unwrap();
            db.flush().unwrap();
        }
        for _ in 0..2 {
            let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
            let rd = s.begin();
            let f = rd.inode(10).unwrap();
            assert_eq!((f.attr.size, f.attr.blocks, f.layout.unwrap().targets.len()), (5000, 10, 1));
            assert_eq!((rd.inode(11).unwrap().attr.size, rd.inode(11).unwrap().attr.blocks), (3, 0));
            let ver: u32 = dec(&s.tree(T::Meta).get(FORMAT_KEY).unwrap().unwrap()).unwrap();
            assert_eq!(ver, FORMAT_VERSION);
        }
        // An interrupted migration (records rewritten, format key still 3) keeps them.
        let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
        assert_eq!(migrate_v3(s.tree(T::Inodes)).unwrap(), 1);
        assert_eq!(s.begin().inode(10).unwrap().attr.blocks, 10);
    }

    #[test]
    fn a_format_1_database_is_migrated_and_its_layouts_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let target = |ds, object| StripeTarget { ds, object };
        let file = |ino: Ino, targets: Vec<StripeTarget>| InodeV1 {
            attr: old_attr(ino, FileKind::File, 0o644),
            layout: Some(LayoutV1 { stripe_size: 65536, targets }),
            target: None,
            parent: 1,
        };
        {
            // A database as format 1 wrote it.
            let db = sled::open(dir.path()).unwrap();
            let inodes = db.open_tree(TREE_NAMES[T::Inodes as usize]).unwrap();
            inodes.insert(ino_key(10), wire::encode(&file(10, vec![target(0, 7), target(1, 8)])).unwrap()).unwrap();
            inodes.insert(ino_key(11), wire::encode(&file(11, vec![target(2, 9)])).unwrap()).unwrap();
            let d = InodeV1 { attr: old_attr(12, FileKind::Dir, 0o755), layout: None, target: None, parent: 1 };
            inodes.insert(ino_key(12), wire::encode(&d).unwrap()).unwrap();
            let meta = db.open_tree(TREE_NAMES[T::Meta as usize]).unwrap();
            meta.insert(FORMAT_KEY, wire::encode(&1u32).unwrap()).unwrap();
            db.flush().unwrap();
        }
        for _ in 0..2 {
            // Opened twice: the second open finds format 2 and changes nothing.
            let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
            let rd = s.begin();
            let l = rd.inode(10).unwrap().layout.unwrap();
            assert_eq!(l, Layout::plain(65536, vec![target(0, 7), target(1, 8)]));
            assert!(!l.is_composite());
            assert_eq!(rd.inode(11).unwrap().layout.unwrap().targets, vec![target(2, 9)]);
            assert!(rd.inode(12).unwrap().layout.is_none());
            let ver: u32 = dec(&s.tree(T::Meta).get(FORMAT_KEY).unwrap().unwrap()).unwrap();
            assert_eq!(ver, FORMAT_VERSION);
        }
        // An interrupted migration (records already rewritten in format 3, format key still 2) completes.
        let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
        s.tree(T::Meta).insert(FORMAT_KEY, enc(&2u32).unwrap()).unwrap();
        for ino in [10, 11, 12] {
            let i = s.begin().inode(ino).unwrap();
            let a = i.attr;
            let attr = AttrV3 { size: a.size, nlink: a.nlink, ..old_attr(a.ino, a.kind, a.perm) };
            let v3 = InodeV3 { attr, layout: i.layout, target: i.target, parent: i.parent };
            s.tree(T::Inodes).insert(ino_key(ino), enc(&v3).unwrap()).unwrap();
        }
        assert_eq!(migrate_v2(s.tree(T::Inodes), s.tree(T::DirLayouts)).unwrap(), 2);
        assert_eq!(migrate_v3(s.tree(T::Inodes)).unwrap(), 2);
        assert_eq!(s.begin().inode(10).unwrap().layout.unwrap().targets.len(), 2);
    }

    #[test]
    fn a_format_2_database_gets_unmirrored_layouts_and_specs_without_a_mirror_count() {
        let dir = tempfile::tempdir().unwrap();
        let target = |ds, object| StripeTarget { ds, object };
        {
            let db = sled::open(dir.path()).unwrap();
            let inodes = db.open_tree(TREE_NAMES[T::Inodes as usize]).unwrap();
            let file = InodeV2 {
                attr: old_attr(10, FileKind::File, 0o644),
                layout: Some(LayoutV2 {
                    stripe_size: 65536,
                    targets: vec![target(0, 7)],
                    extents: vec![ComponentV2 {
                        start: 1 << 20,
                        end: u64::MAX,
                        stripe_size: 65536,
                        stripe_count: 2,
                        targets: vec![],
                    }],
                }),
                target: None,
                parent: 1,
            };
            inodes.insert(ino_key(10), wire::encode(&file).unwrap()).unwrap();
            let dirs = db.open_tree(TREE_NAMES[T::DirLayouts as usize]).unwrap();
            dirs.insert(
                ino_key(1),
                wire::encode(&LayoutSpecV2 { stripe_size: Some(8192), stripe_count: Some(2) }).unwrap(),
            )
            .unwrap();
            let composite = vec![ExtentSpecV2 { end: u64::MAX, stripe_size: None, stripe_count: Some(3) }];
            dirs.insert(crate::store::records::composite_key(1), wire::encode(&composite).unwrap()).unwrap();
            let meta = db.open_tree(TREE_NAMES[T::Meta as usize]).unwrap();
            meta.insert(FORMAT_KEY, wire::encode(&2u32).unwrap()).unwrap();
            db.flush().unwrap();
        }
        for _ in 0..2 {
            let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
            let rd = s.begin();
            let l = rd.inode(10).unwrap().layout.unwrap();
            assert_eq!((l.mirror_count, l.mirrors.len(), l.mirror_gen), (1, 0, 0));
            assert_eq!((l.extents[0].mirror_count, l.extents[0].stripe_count), (1, 2));
            assert!(!l.is_mirrored());
            l.validate().unwrap();
            let spec = rd.dir_layout(1).unwrap().unwrap();
            assert_eq!(spec, LayoutSpec { stripe_size: Some(8192), stripe_count: Some(2), mirrors: None });
            assert_eq!(rd.dir_composite(1).unwrap().unwrap()[0].stripe_count, Some(3));
            let ver: u32 = dec(&s.tree(T::Meta).get(FORMAT_KEY).unwrap().unwrap()).unwrap();
            assert_eq!(ver, FORMAT_VERSION);
        }
    }
}
