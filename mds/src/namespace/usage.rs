//! What files take on the data servers' disks (issue 42: `du`, `st_blocks`). A file's `blocks` are
//! measured from its objects' allocated space (`st_blocks` of each object file, every replica counted)
//! shortly after its writes are reported, so a sparse file shows what it holds. Until measured, a
//! write report or close raises `blocks` to what its size would take (never lowering it); a truncate
//! lowers it to at most that. A task of its own measures what was queued, a round a second; a file whose
//! data server did not answer, or whose layout changed meanwhile, is queued again.

use super::Namespace;
use crate::store::Inode;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tessera_proto::layout::Layout;
use tessera_proto::msg::MAX_USAGE_OBJECTS;
use tessera_proto::{DsId, FileKind, FsResult, Ino, ObjectId};

/// Most files measured in one round; the rest wait for the next tick.
const ROUND_MAX: usize = 8192;
/// Most files waiting (memory bounded): beyond it a file is measured after its next write instead.
const QUEUE_MAX: usize = 1 << 20;

/// Files written since they were last measured.
#[derive(Default)]
pub(super) struct UsageQueue {
    dirty: Mutex<HashSet<Ino>>,
}

impl UsageQueue {
    fn push(&self, ino: Ino) {
        let mut d = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        if d.len() < QUEUE_MAX {
            d.insert(ino);
        }
    }

    fn take(&self, max: usize) -> Vec<Ino> {
        let mut d = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
        let out: Vec<Ino> = d.iter().take(max).copied().collect();
        for i in &out {
            d.remove(i);
        }
        out
    }
}

/// What `size` bytes take when written densely, in 512-byte units.
fn dense_blocks(size: u64) -> u64 {
    size.div_ceil(512)
}

impl Namespace {
    /// `i` (a regular file) was written up to its size: its blocks are at least what the size takes,
    /// until measured.
    pub(super) fn note_written(&self, i: &mut Inode) {
        if i.attr.kind == FileKind::File {
            i.attr.blocks = i.attr.blocks.max(dense_blocks(i.attr.size));
            self.usage.push(i.attr.ino);
        }
    }

    /// `i` was truncated to its size: at most what the size takes, until measured.
    pub(super) fn note_truncated(&self, i: &mut Inode) {
        if i.attr.kind == FileKind::File {
            i.attr.blocks = i.attr.blocks.min(dense_blocks(i.attr.size));
            self.usage.push(i.attr.ino);
        }
    }

    /// Measures a round of the files written since their last measure: each data server is asked about
    /// their objects (a request per [`MAX_USAGE_OBJECTS`]), and each file whose layout did not change
    /// meanwhile gets the sum. A file with an object on a server that did not answer keeps what it has.
    pub(crate) async fn measure_usage(&self) {
        let inos = self.usage.take(ROUND_MAX);
        if inos.is_empty() {
            return;
        }
        let files: Vec<(Ino, Layout)> = {
            let rd = self.store.begin();
            inos.into_iter()
                .filter_map(|ino| rd.get_inode(ino).ok().flatten())
                .filter(|i| i.attr.kind == FileKind::File)
                .filter_map(|i| i.layout.map(|l| (i.attr.ino, l)))
                .collect()
        };
        let mut per_ds: HashMap<DsId, Vec<(usize, ObjectId)>> = HashMap::new();
        for (k, (_, l)) in files.iter().enumerate() {
            for t in l.all_objects() {
                per_ds.entry(t.ds).or_default().push((k, t.object));
            }
        }
        let mut bytes: Vec<Option<u64>> = vec![Some(0); files.len()];
        let asks = per_ds.iter().flat_map(|(&ds, objs)| objs.chunks(MAX_USAGE_OBJECTS).map(move |c| (ds, c)));
        let answers = futures::future::join_all(asks.map(|(ds, chunk)| async move {
            (chunk, self.data.usage(ds, chunk.iter().map(|&(_, o)| o).collect()).await)
        }))
        .await;
        for (chunk, r) in answers {
            match r {
                Ok(got) => {
                    for (&(k, _), b) in chunk.iter().zip(got) {
                        bytes[k] = bytes[k].map(|sum| sum.saturating_add(b));
                    }
                }
                Err(e) => {
                    tracing::debug!("measuring files' space: {e}");
                    for &(k, _) in chunk {
                        bytes[k] = None;
                    }
                }
            }
        }
        match crate::offload::offload(|| self.apply_usage(&files, &bytes)) {
            Ok(again) => again.into_iter().for_each(|ino| self.usage.push(ino)),
            Err(e) => {
                tracing::warn!("recording files' space: {e}");
                files.iter().for_each(|(ino, _)| self.usage.push(*ino));
            }
        }
    }

    /// Records what was measured; returns the files to measure again (a server did not answer, or the
    /// layout changed since it was read).
    fn apply_usage(&self, files: &[(Ino, Layout)], bytes: &[Option<u64>]) -> FsResult<Vec<Ino>> {
        let _g = self.lock();
        let mut tx = self.store.begin();
        let mut changed = false;
        let mut again = Vec::new();
        for ((ino, l), b) in files.iter().zip(bytes) {
            let Some(mut i) = tx.get_inode(*ino)? else { continue };
            let Some(b) = b.filter(|_| i.layout.as_ref() == Some(l)) else {
                again.push(*ino);
                continue;
            };
            let blocks = b.div_ceil(512);
            if i.attr.blocks != blocks {
                i.attr.blocks = blocks;
                tx.put_inode(&i)?;
                changed = true;
            }
        }
        if changed {
            self.commit(tx)?;
        }
        Ok(again)
    }
}
