//! The engine of one client: its data servers and the table of the inodes open through it. Every open
//! of a regular file — a mount's handle, a library [`crate::File`] — is a [`Handle`] made here, over the
//! inode's one [`OpenInode`] (its write-behind, size and layout), so two opens of one file in one client
//! see each other's writes, and the last to close drops the inode's state.

use super::open_file::Handle;
use super::write_behind::{privileged_bits, OpenInode};
use crate::data::DataPlane;
use crate::mds_client::{LayoutReply, MdsClient, Opened};
use crate::periodic::Periodic;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tessera_proto::error::{ErrorCode, FsError, FsResult};
use tessera_proto::msg::OpenFlags;
use tessera_proto::types::{FileKind, Ino};

/// How a handle reads and writes.
#[derive(Clone, Debug, Default)]
pub struct HandleOptions {
    /// The flags the MDS granted the open with (write access, truncate).
    pub flags: OpenFlags,
    /// Writes go into the inode's write-behind ([`super::write_behind`]); without, each write reaches the
    /// data servers before it returns.
    pub write_behind: bool,
    /// Reads of a stream are fetched ahead ([`super::read_ahead`]); without, each read reads exactly its
    /// range (as `POSIX_FADV_RANDOM` asks of a local file system).
    pub read_ahead: bool,
    /// The opener's job's PerSched state (inactive: never delayed).
    pub periodic: Arc<Periodic>,
    /// `[persched] detect`: the handle's first transfer starts following the job's pattern (a client's
    /// own opens; a mount follows each job's pattern itself).
    pub detect_periodic: bool,
}

/// The data servers and the open-inode table of one client (its clones share it).
pub struct Engine {
    data: Arc<DataPlane>,
    /// Open inodes with the number of handles on each.
    inodes: Mutex<HashMap<Ino, (usize, Arc<OpenInode>)>>,
}

impl Engine {
    pub fn new(data: DataPlane) -> Engine {
        Engine { data: Arc::new(data), inodes: Mutex::new(HashMap::new()) }
    }

    /// The data servers' connections.
    pub fn data(&self) -> &Arc<DataPlane> {
        &self.data
    }

    /// The state of `ino` while a handle has it open.
    pub fn open_inode(&self, ino: Ino) -> Option<Arc<OpenInode>> {
        self.inodes.lock().ok()?.get(&ino).map(|(_, i)| i.clone())
    }

    /// The handle over an open the MDS granted (`mds`: the opener's credentials, job and process). A
    /// handle that is not a regular file's, or whose layout cannot be had, is closed at the MDS again.
    pub async fn open(self: &Arc<Self>, mds: &MdsClient, opened: Opened, opts: HandleOptions) -> FsResult<Handle> {
        let ino = opened.attr.ino;
        let fail = |e: FsError| async move {
            // Release the handle the MDS counted before refusing.
            let _ = mds.close(ino, opened.handle, None, false).await;
            Err(e)
        };
        if opened.attr.kind != FileKind::File {
            let code = if opened.attr.kind == FileKind::Dir { ErrorCode::IsDir } else { ErrorCode::Invalid };
            return fail(FsError::new(code, format!("inode {ino} is not a regular file"))).await;
        }
        let layout = match opened.layout {
            Some(l) => l,
            None => match mds.get_layout(ino).await {
                Ok(LayoutReply::File(l)) => l,
                Ok(LayoutReply::Dir(_) | LayoutReply::DirComposite(_)) => {
                    return fail(FsError::protocol(format!("MDS returned a directory layout for file {ino}"))).await
                }
                Err(e) => return fail(e).await,
            },
        };
        let inode = {
            let mut m = self.inodes.lock().map_err(|_| FsError::io("inode table poisoned"))?;
            let e = m
                .entry(ino)
                .or_insert_with(|| (0, Arc::new(OpenInode::new(ino, layout, self.data.clone(), Some(mds.clone())))));
            e.0 += 1;
            e.1.clone()
        };
        if opts.flags.truncate {
            inode.truncated(0);
        }
        inode.privileged.store(privileged_bits(opened.attr.perm) != 0, Ordering::Relaxed);
        Ok(Handle::new(self.clone(), inode, opened.handle, mds.clone(), opened.attr.size, opts))
    }

    /// A handle on `ino` closed: the last one drops the inode's state.
    pub(super) fn detach(&self, ino: Ino) {
        if let Ok(mut m) = self.inodes.lock() {
            if let Some(e) = m.get_mut(&ino) {
                e.0 -= 1;
                if e.0 == 0 {
                    m.remove(&ino);
                }
            }
        }
    }

    /// Inodes open now.
    pub fn open_inodes(&self) -> usize {
        self.inodes.lock().map_or(0, |m| m.len())
    }
}
