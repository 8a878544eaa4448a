//! Reading directories.

use super::{acl, Namespace};
use crate::perm::R;
use crate::store::{dirseq_key, T};
use tessera_proto::msg::{DirEntry, MdsReply};
use tessera_proto::{Caller, FsResult, Ino};

const READDIR_MAX: usize = 8192;

impl Namespace {
    pub(crate) fn readdir(&self, c: &Caller, ino: Ino, offset: u64, max: u32) -> FsResult<MdsReply> {
        let rd = self.store.begin();
        let d = rd.dir(ino)?;
        acl::check(&rd, c, &d.attr, R)?;
        let max = (max as usize).clamp(1, READDIR_MAX);
        let mut out = Vec::new();
        if offset == u64::MAX {
            return Ok(MdsReply::DirEntries(out));
        }
        let start = dirseq_key(ino, offset + 1);
        for kv in self.store.scan_from(T::Dirseq, &start, &ino.to_be_bytes()) {
            let (k, v) = kv?;
            let Ok(seq) = <[u8; 8]>::try_from(&k[8..]).map(u64::from_be_bytes) else { continue };
            let Ok(name) = std::str::from_utf8(&v) else { continue };
            // An entry removed or renamed since the scan started is skipped.
            match rd.dentry(ino, name)? {
                Some(de) if de.seq == seq => {
                    out.push(DirEntry { name: name.to_string(), ino: de.ino, kind: de.kind, next_offset: seq })
                }
                _ => continue,
            }
            if out.len() >= max {
                break;
            }
        }
        Ok(MdsReply::DirEntries(out))
    }
}
