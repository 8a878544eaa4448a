//! Format migration on open: a database of an older format is rewritten in the current one (format 1:
//! layouts without composite extents), one newer than this server understands is refused.

use super::error::{StoreError, StoreResult};
use super::records::{dec, enc, Inode, FORMAT_KEY, FORMAT_VERSION, T};
use super::Store;
use serde::{Deserialize, Serialize};
use sled::Tree;
use std::path::Path;
use tessera_proto::layout::{Layout, StripeTarget};
use tessera_proto::{wire, Attr, Ino};
use tracing::info;

/// Records the format of a new database; migrates an older one in place; refuses a newer one.
pub(super) fn check_format(store: &Store, dir: &Path) -> StoreResult<()> {
    let meta = store.tree(T::Meta);
    match meta.get(FORMAT_KEY)? {
        None => {
            meta.insert(FORMAT_KEY, enc(&FORMAT_VERSION)?)?;
        }
        Some(v) => {
            let ver: u32 = dec(&v)?;
            if ver == 1 {
                let n = migrate_v1(store.tree(T::Inodes))?;
                meta.insert(FORMAT_KEY, enc(&FORMAT_VERSION)?)?;
                store.db.flush()?;
                info!("metadata database {} migrated from format 1 to {FORMAT_VERSION} ({n} layouts)", dir.display());
            } else if ver != FORMAT_VERSION {
                return Err(StoreError::Format { path: dir.to_path_buf(), found: ver, understood: FORMAT_VERSION });
            }
        }
    }
    Ok(())
}

/// Format 1's inode record: layouts without extents.
#[derive(Serialize, Deserialize)]
struct InodeV1 {
    attr: Attr,
    layout: Option<LayoutV1>,
    target: Option<String>,
    parent: Ino,
}

#[derive(Serialize, Deserialize)]
struct LayoutV1 {
    stripe_size: u64,
    targets: Vec<StripeTarget>,
}

/// Rewrites every format-1 inode record of `inodes` in the current format (a v1 layout is a plain
/// layout: one extent to EOF), as one atomic batch. A record that already decodes only as the current
/// format (a migration interrupted after its batch, before the format key) is left as it is; v1 and v2
/// records differ only for files, and a v2 file record read as v1 always leaves trailing bytes.
/// Returns how many records held a layout.
pub(super) fn migrate_v1(inodes: &Tree) -> StoreResult<usize> {
    let mut batch = sled::Batch::default();
    let mut layouts = 0;
    for kv in inodes.iter() {
        let (k, v) = kv?;
        let new = match wire::decode::<InodeV1>(&v) {
            Ok(old) => Inode {
                attr: old.attr,
                layout: old.layout.map(|l| Layout::plain(l.stripe_size, l.targets)),
                target: old.target,
                parent: old.parent,
            },
            Err(_) => dec::<Inode>(&v)?,
        };
        layouts += usize::from(new.layout.is_some());
        batch.insert(k, enc(&new)?);
    }
    inodes.apply_batch(batch)?;
    Ok(layouts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::{ino_key, TREE_NAMES};
    use tessera_proto::config::MetadataCommit;
    use tessera_proto::FileKind;

    #[test]
    fn a_format_1_database_is_migrated_and_its_layouts_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let target = |ds, object| StripeTarget { ds, object };
        let file = |ino: Ino, targets: Vec<StripeTarget>| InodeV1 {
            attr: Attr::new(ino, FileKind::File, 0o644, 0, 0, tessera_proto::Timestamp::now()),
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
            let d = InodeV1 {
                attr: Attr::new(12, FileKind::Dir, 0o755, 0, 0, tessera_proto::Timestamp::now()),
                layout: None,
                target: None,
                parent: 1,
            };
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
        // An interrupted migration (records already rewritten, format key still 1) completes.
        let s = Store::open(dir.path(), MetadataCommit::Fsync).unwrap();
        s.tree(T::Meta).insert(FORMAT_KEY, enc(&1u32).unwrap()).unwrap();
        assert_eq!(migrate_v1(s.tree(T::Inodes)).unwrap(), 2);
        assert_eq!(s.begin().inode(10).unwrap().layout.unwrap().targets.len(), 2);
    }
}
