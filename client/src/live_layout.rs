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

/// How long a mirrored file's call is retried on a fresh layout before its error is the application's.
pub const MIRROR_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

pub struct LiveLayout {
    ino: Ino,
    /// Where a newer layout comes from (mirrored files: replicas that went stale, a new primary).
    mds: Option<MdsClient>,
    cur: RwLock<Arc<Layout>>,
    /// One instantiation asked at a time per open file: concurrent writers reaching the same extent
    /// (a shared file's tasks) ask the MDS once.
    asking: tokio::sync::Mutex<()>,
}

impl LiveLayout {
    pub fn new(ino: Ino, layout: Layout) -> LiveLayout {
        LiveLayout { ino, mds: None, cur: RwLock::new(Arc::new(layout)), asking: tokio::sync::Mutex::new(()) }
    }

    /// [`LiveLayout::new`], refreshed from `mds` when a mirrored file's replicas refuse a call.
    pub fn with_mds(ino: Ino, layout: Layout, mds: MdsClient) -> LiveLayout {
        LiveLayout { mds: Some(mds), ..LiveLayout::new(ino, layout) }
    }

    /// Runs `op` on the layout; for a mirrored file whose replicas could not serve it (a replica went
    /// stale or down and the layout moved on: a new primary, other replicas in sync), the layout is
    /// fetched again and `op` retried, backing off, for up to [`MIRROR_RETRY_FOR`]. Every data call
    /// a file makes is safe to repeat (the same bytes to the same offsets).
    pub async fn retrying<T, F, Fut>(&self, op: F) -> FsResult<T>
    where
        F: Fn(Arc<Layout>) -> Fut,
        Fut: std::future::Future<Output = FsResult<T>>,
    {
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(50);
        loop {
            let layout = self.get();
            match op(layout.clone()).await {
                Err(e)
                    if layout.is_mirrored()
                        && crate::data::replica_unusable(&e)
                        && start.elapsed() < MIRROR_RETRY_FOR =>
                {
                    tracing::debug!(ino = self.ino, "mirrored file: {e}; the layout again, then a retry");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                    if let Some(mds) = &self.mds {
                        if let Ok(LayoutReply::File(l)) = mds.get_layout(self.ino).await {
                            if l.validate().is_ok() {
                                self.offer(l);
                            }
                        }
                    }
                }
                r => return r,
            }
        }
    }

    /// The layout as last known.
    pub fn get(&self) -> Arc<Layout> {
        self.cur.read().map(|l| l.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Keeps `l` if it has instantiated at least as far as the copy held and its replicas are as recent
    /// (answers can cross).
    fn offer(&self, l: Layout) -> Arc<Layout> {
        let mut cur = self.cur.write().unwrap_or_else(|p| p.into_inner());
        if l.instantiated_end() >= cur.instantiated_end() && l.mirror_gen >= cur.mirror_gen {
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
