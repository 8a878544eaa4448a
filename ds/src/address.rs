//! Object addresses in the server's volume (DESIGN.md): the k-th object given an address gets the base
//! `k * reservation`; a request's address is base + offset. The mapping is an append-only `bases` file
//! of checked (id, base) records, made durable before the object is first written, so addresses
//! survive restarts; a torn last record is dropped on load.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tessera_proto::{FsError, FsResult, ObjectId};

pub const BASES_FILE: &str = "bases";
const RECORD: usize = 24;
const MAGIC: u64 = 0x7465_7373_6572_6162; // "tesserab"

fn check(id: ObjectId, base: u64) -> u64 {
    id ^ base.rotate_left(17) ^ MAGIC
}

struct Log {
    file: File,
    next_base: u64,
}

pub struct Addresses {
    reservation: u64,
    path: PathBuf,
    map: Mutex<HashMap<ObjectId, u64>>,
    log: Mutex<Log>,
}

impl Addresses {
    /// Loads (creating) `<dir>/bases`.
    pub fn open(dir: &Path, reservation: u64) -> FsResult<Arc<Addresses>> {
        let path = dir.join(BASES_FILE);
        let ctx = |e: std::io::Error| {
            let mut err = FsError::from(e);
            err.detail = format!("{}: {}", path.display(), err.detail);
            err
        };
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(&path).map_err(ctx)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(ctx)?;
        let mut map = HashMap::new();
        let mut next_base = 0u64;
        let mut valid = 0usize;
        for rec in bytes.chunks_exact(RECORD) {
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&rec[i * 8..i * 8 + 8]);
                u64::from_le_bytes(w)
            };
            let (id, base) = (word(0), word(1));
            if word(2) != check(id, base) {
                break;
            }
            map.insert(id, base);
            next_base = next_base.max(base.saturating_add(reservation));
            valid += RECORD;
        }
        if valid != bytes.len() {
            tracing::warn!(path = %path.display(), dropped = bytes.len() - valid, "dropping a torn address record");
            file.set_len(valid as u64).map_err(ctx)?;
            file.sync_all().map_err(ctx)?;
        }
        Ok(Arc::new(Addresses {
            reservation,
            path: path.clone(),
            map: Mutex::new(map),
            log: Mutex::new(Log { file, next_base }),
        }))
    }

    pub fn reservation(&self) -> u64 {
        self.reservation
    }

    /// The object's base if it has one.
    pub fn lookup(&self, id: ObjectId) -> Option<u64> {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied()
    }

    /// The object's base, allocating (durably) the next one if it has none. Blocking.
    pub fn assign(&self, id: ObjectId) -> FsResult<u64> {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = self.lookup(id) {
            return Ok(b);
        }
        let base = log.next_base;
        let mut rec = [0u8; RECORD];
        rec[..8].copy_from_slice(&id.to_le_bytes());
        rec[8..16].copy_from_slice(&base.to_le_bytes());
        rec[16..].copy_from_slice(&check(id, base).to_le_bytes());
        let res = log.file.write_all(&rec).and_then(|()| log.file.sync_data());
        if let Err(e) = res {
            let mut err = FsError::from(e);
            err.detail = format!("{}: {}", self.path.display(), err.detail);
            return Err(err);
        }
        log.next_base = base.saturating_add(self.reservation);
        self.map.lock().unwrap_or_else(|p| p.into_inner()).insert(id, base);
        Ok(base)
    }

    /// The address of `offset` in the object: base + offset. An object without a base gets one when
    /// `create` (it is being written) or when it already exists at `existing` (from before addresses).
    /// `None`: a missing object that is only read.
    pub async fn address(
        self: &Arc<Self>,
        id: ObjectId,
        offset: u64,
        create: bool,
        existing: impl FnOnce() -> PathBuf,
    ) -> FsResult<Option<u64>> {
        if let Some(b) = self.lookup(id) {
            return Ok(Some(b.saturating_add(offset)));
        }
        let me = self.clone();
        let path = existing();
        let base = tokio::task::spawn_blocking(move || {
            if !create {
                match std::fs::metadata(&path) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(FsError::from(e)),
                }
            }
            me.assign(id).map(Some)
        })
        .await
        .map_err(|e| FsError::io(format!("address task failed: {e}")))??;
        Ok(base.map(|b| b.saturating_add(offset)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_order_persists_and_torn_record_dropped() {
        let d = tempfile::tempdir().unwrap();
        let res = 1u64 << 30;
        let a = Addresses::open(d.path(), res).unwrap();
        assert_eq!(a.assign(77).unwrap(), 0);
        assert_eq!(a.assign(5).unwrap(), res);
        assert_eq!(a.assign(77).unwrap(), 0, "stable");
        assert_eq!(a.assign(9).unwrap(), 2 * res);
        drop(a);
        let a = Addresses::open(d.path(), res).unwrap();
        assert_eq!((a.lookup(77), a.lookup(5), a.lookup(9), a.lookup(1)), (Some(0), Some(res), Some(2 * res), None));
        assert_eq!(a.assign(1).unwrap(), 3 * res);
        drop(a);
        // A crash mid-append leaves a partial record; a garbage record is as good as torn.
        let p = d.path().join(BASES_FILE);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(&[1, 2, 3, 4, 5]).unwrap();
        drop(f);
        let a = Addresses::open(d.path(), res).unwrap();
        assert_eq!(a.lookup(1), Some(3 * res));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4 * RECORD as u64);
        assert_eq!(a.assign(2).unwrap(), 4 * res);
        drop(a);
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        std::fs::write(&p, &bytes).unwrap();
        let a = Addresses::open(d.path(), res).unwrap();
        assert_eq!(a.lookup(2), None);
        assert_eq!(a.assign(3).unwrap(), 4 * res);
    }

    #[tokio::test]
    async fn address_is_base_plus_offset_and_reads_do_not_allocate() {
        let d = tempfile::tempdir().unwrap();
        let a = Addresses::open(d.path(), 1000).unwrap();
        let missing = d.path().join("nope");
        assert_eq!(a.address(4, 10, false, || missing.clone()).await.unwrap(), None);
        assert_eq!(a.address(4, 10, true, || missing.clone()).await.unwrap(), Some(10));
        assert_eq!(a.address(4, 20, false, || missing.clone()).await.unwrap(), Some(20));
        // An object stored before addresses existed gets one on its first read.
        let present = d.path().join("obj");
        std::fs::write(&present, b"x").unwrap();
        assert_eq!(a.address(8, 5, false, || present.clone()).await.unwrap(), Some(1005));
    }
}
