//! A file's layout as an open file sees it, kept current for composite (progressive) layouts: a write
//! reaching an extent not instantiated yet asks the MDS once to place it ([`LiveLayout::for_write`]) and
//! caches the answer; a read reaching past what this copy has instantiated asks the MDS for the layout
//! again ([`LiveLayout::for_read`]: another client may have instantiated it since our open — a region
//! the MDS has not instantiated either is a hole and reads as zeros). Plain layouts never ask.

use crate::mds_client::{LayoutReply, MdsClient};
use std::sync::{Arc, RwLock};
use tessera_proto::error::{FsError, FsResult};
use tessera_proto::layout::Layout;
use tessera_proto::types::Ino;

pub struct LiveLayout {
    ino: Ino,
    cur: RwLock<Arc<Layout>>,
    /// One instantiation asked at a time per open file: concurrent writers reaching the same extent
    /// (a shared file's tasks) ask the MDS once.
    asking: tokio::sync::Mutex<()>,
}

impl LiveLayout {
    pub fn new(ino: Ino, layout: Layout) -> LiveLayout {
        LiveLayout { ino, cur: RwLock::new(Arc::new(layout)), asking: tokio::sync::Mutex::new(()) }
    }

    /// The layout as last known.
    pub fn get(&self) -> Arc<Layout> {
        self.cur.read().map(|l| l.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Keeps `l` if it has instantiated at least as far as the copy held (answers can cross).
    fn offer(&self, l: Layout) -> Arc<Layout> {
        let mut cur = self.cur.write().unwrap_or_else(|p| p.into_inner());
        if l.instantiated_end() >= cur.instantiated_end() {
            *cur = Arc::new(l);
        }
        cur.clone()
    }

    /// The layout with every extent up to `end` (exclusive) instantiated, asking the MDS if needed.
    pub async fn for_write(&self, mds: &MdsClient, end: u64) -> FsResult<Arc<Layout>> {
        let cur = self.get();
        if end <= cur.instantiated_end() {
            return Ok(cur);
        }
        let _one = self.asking.lock().await;
        let cur = self.get();
        if end <= cur.instantiated_end() {
            return Ok(cur); // another writer had it placed meanwhile
        }
        let l = self.offer(mds.instantiate_extent(self.ino, end - 1).await?);
        if end > l.instantiated_end() {
            return Err(FsError::io(format!("the MDS did not instantiate inode {}'s extent at {}", self.ino, end - 1)));
        }
        Ok(l)
    }

    /// The layout to read `[.., end)` with: refreshed from the MDS when `end` passes what this copy has
    /// instantiated.
    pub async fn for_read(&self, mds: &MdsClient, end: u64) -> FsResult<Arc<Layout>> {
        let cur = self.get();
        if end <= cur.instantiated_end() {
            return Ok(cur);
        }
        match mds.get_layout(self.ino).await? {
            LayoutReply::File(l) => {
                l.validate()?;
                Ok(self.offer(l))
            }
            _ => Err(FsError::protocol(format!("MDS returned a directory layout for file {}", self.ino))),
        }
    }
}
