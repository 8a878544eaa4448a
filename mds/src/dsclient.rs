//! The MDS as a client of the data servers: truncating and removing objects (a trait, so the
//! namespace can run against any implementation: RPC in the server, in-memory in unit tests), and
//! the orchestrator's serve commands.

use bytes::Bytes;
use futures::future::BoxFuture;
use std::collections::HashMap;
use tessera_proto::config::ClusterConfig;
use tessera_proto::layout::StripeTarget;
use tessera_proto::msg::{DsCall, DsReply, DsRequest, MAX_LIST_OBJECTS};
use tessera_proto::rpc::RpcPeer;
use tessera_proto::tls::NodeIdentity;
use tessera_proto::{DsId, FsError, FsResult, ObjectId, Role};

pub trait DataServers: Send + Sync {
    /// Sets an object's size (the data server creates it if needed).
    fn truncate(&self, ds: DsId, object: ObjectId, size: u64) -> BoxFuture<'_, FsResult<()>>;
    /// Removes objects (missing ones are fine).
    fn remove(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<()>>;
    /// One page of a shard's objects with their sizes, in id order, and whether more follow
    /// ([`DsRequest::ListObjects`]).
    fn list_objects(&self, ds: DsId, shard: u8, after: ObjectId) -> BoxFuture<'_, FsResult<ObjectPage>>;
    /// An object's size and the CRC-32 of its bytes ([`DsRequest::Checksum`]).
    fn checksum(&self, ds: DsId, object: ObjectId) -> BoxFuture<'_, FsResult<(u64, u32)>>;
    /// What each of `objects` (at most [`tessera_proto::msg::MAX_USAGE_OBJECTS`]) takes on `ds`'s disk, in bytes
    /// ([`DsRequest::Usage`]).
    fn usage(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<Vec<u64>>>;
    /// Has data server `ds`, `object`'s primary, copy it to replica `to` ([`DsRequest::Resync`]): what
    /// its log `log` of what `to` missed holds, or whole (`log` 0, or a log it no longer has); the bytes
    /// copied.
    fn resync(
        &self,
        ds: DsId,
        object: ObjectId,
        to: StripeTarget,
        gen: u64,
        replicas: Vec<StripeTarget>,
        log: u64,
    ) -> BoxFuture<'_, FsResult<u64>>;
}

/// A page of `(object, size)` and whether the shard holds more.
pub type ObjectPage = (Vec<(ObjectId, u64)>, bool);

/// Every object of data server `ds` with its size, in shard order (fsck), a page at a time.
pub async fn list_all_objects(data: &dyn DataServers, ds: DsId) -> FsResult<Vec<(ObjectId, u64)>> {
    let mut out = Vec::new();
    for shard in 0..=u8::MAX {
        let mut after = 0;
        loop {
            let (page, more) = data.list_objects(ds, shard, after).await?;
            let last = page.last().map(|&(id, _)| id);
            out.extend(page);
            match last {
                // Ids only grow along a shard's pages: a page that does not would loop forever.
                Some(last) if more && last > after => after = last,
                _ => break,
            }
        }
    }
    Ok(out)
}

/// One RPC peer per configured data server.
pub struct RpcDataServers {
    peers: HashMap<DsId, FsResult<RpcPeer>>,
}

impl RpcDataServers {
    pub fn new(cfg: &ClusterConfig, endpoint: &quinn::Endpoint, identity: &NodeIdentity) -> FsResult<RpcDataServers> {
        let mut peers = HashMap::new();
        for ds in &cfg.ds {
            // Resolved at every (re)connect: a data server that is not resolvable yet (containers starting)
            // or comes back at another address is found once it is there.
            let peer =
                RpcPeer::to_host(endpoint.clone(), identity, Role::Ds, &ds.addr, cfg.tuning()).inspect_err(|e| {
                    tracing::warn!(ds = ds.id, "data server unusable: {e}");
                });
            peers.insert(ds.id, peer);
        }
        Ok(RpcDataServers { peers })
    }

    /// One call to data server `ds` (the call names it, as every data request does).
    async fn call(&self, ds: DsId, req: DsRequest) -> FsResult<DsReply> {
        let peer = match self.peers.get(&ds) {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(FsError::unavailable(format!("data server {ds}: {e}"))),
            None => return Err(FsError::unavailable(format!("data server {ds} is not configured"))),
        };
        let (reply, _): (DsReply, Bytes) = peer.call(&DsCall::new(ds, req), Bytes::new()).await?;
        Ok(reply)
    }

    async fn call_ok(&self, ds: DsId, req: DsRequest) -> FsResult<()> {
        match self.call(ds, req).await? {
            DsReply::Ok => Ok(()),
            other => Err(FsError::protocol(format!("data server {ds}: unexpected reply {other:?}"))),
        }
    }
}

/// Serve commands of the orchestrator's driver go over the same connections.
impl crate::driver::Switchboard for RpcDataServers {
    fn servers(&self) -> Vec<DsId> {
        let mut ids: Vec<DsId> = self.peers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn serve(&self, ds: DsId, cmd: tessera_proto::msg::ServeCommand) -> BoxFuture<'_, FsResult<(u64, u64)>> {
        Box::pin(async move {
            match self.call(ds, DsRequest::Serve(cmd)).await? {
                DsReply::Switched { epoch, at_unix_us } => Ok((epoch, at_unix_us)),
                other => Err(FsError::protocol(format!("data server {ds}: unexpected reply to Serve: {other:?}"))),
            }
        })
    }
}

impl DataServers for RpcDataServers {
    fn truncate(&self, ds: DsId, object: ObjectId, size: u64) -> BoxFuture<'_, FsResult<()>> {
        Box::pin(self.call_ok(ds, DsRequest::Truncate { object, size }))
    }

    fn remove(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<()>> {
        Box::pin(self.call_ok(ds, DsRequest::Remove { objects }))
    }

    fn list_objects(&self, ds: DsId, shard: u8, after: ObjectId) -> BoxFuture<'_, FsResult<ObjectPage>> {
        Box::pin(async move {
            let max = MAX_LIST_OBJECTS as u32;
            match self.call(ds, DsRequest::ListObjects { shard, after, max }).await? {
                DsReply::Objects { objects, more } => Ok((objects, more)),
                other => Err(FsError::protocol(format!("data server {ds}: unexpected reply {other:?}"))),
            }
        })
    }

    fn checksum(&self, ds: DsId, object: ObjectId) -> BoxFuture<'_, FsResult<(u64, u32)>> {
        Box::pin(async move {
            match self.call(ds, DsRequest::Checksum { object }).await? {
                DsReply::Checksum { size, crc32 } => Ok((size, crc32)),
                other => Err(FsError::protocol(format!("data server {ds}: unexpected reply to Checksum: {other:?}"))),
            }
        })
    }

    fn usage(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<Vec<u64>>> {
        Box::pin(async move {
            let n = objects.len();
            match self.call(ds, DsRequest::Usage { objects }).await? {
                DsReply::Usage(v) if v.len() == n => Ok(v),
                other => Err(FsError::protocol(format!("data server {ds}: unexpected reply to Usage: {other:?}"))),
            }
        })
    }

    fn resync(
        &self,
        ds: DsId,
        object: ObjectId,
        to: StripeTarget,
        gen: u64,
        replicas: Vec<StripeTarget>,
        log: u64,
    ) -> BoxFuture<'_, FsResult<u64>> {
        Box::pin(async move {
            match self.call(ds, DsRequest::Resync { object, to, gen, replicas, log }).await? {
                DsReply::Resynced { bytes } => Ok(bytes),
                other => Err(FsError::protocol(format!("data server {ds}: unexpected reply to Resync: {other:?}"))),
            }
        })
    }
}

/// Records calls in memory; a data server can be marked down. For unit tests.
#[cfg(test)]
#[derive(Default)]
pub struct MemDataServers {
    pub truncates: std::sync::Mutex<Vec<(DsId, ObjectId, u64)>>,
    /// Each resync's replica and the log it named.
    pub resync_logs: std::sync::Mutex<Vec<(StripeTarget, u64)>>,
    pub removed: std::sync::Mutex<Vec<(DsId, ObjectId)>>,
    pub down: std::sync::Mutex<Vec<DsId>>,
    /// The objects each server holds, with their sizes (truncate creates, remove removes).
    pub objects: std::sync::Mutex<std::collections::BTreeMap<(DsId, ObjectId), u64>>,
    /// Objects whose checksum comes out wrong.
    pub corrupt: std::sync::Mutex<Vec<(DsId, ObjectId)>>,
    /// Bytes objects take on disk where a test says (others: whole 4 KiB blocks of their size).
    pub allocated: std::sync::Mutex<std::collections::BTreeMap<(DsId, ObjectId), u64>>,
}

#[cfg(test)]
impl MemDataServers {
    fn up(&self, ds: DsId) -> FsResult<()> {
        if self.down.lock().unwrap().contains(&ds) {
            return Err(FsError::unavailable(format!("data server {ds} down")));
        }
        Ok(())
    }
}

#[cfg(test)]
impl DataServers for MemDataServers {
    fn truncate(&self, ds: DsId, object: ObjectId, size: u64) -> BoxFuture<'_, FsResult<()>> {
        Box::pin(async move {
            self.up(ds)?;
            self.truncates.lock().unwrap().push((ds, object, size));
            self.objects.lock().unwrap().insert((ds, object), size);
            Ok(())
        })
    }

    fn remove(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<()>> {
        Box::pin(async move {
            self.up(ds)?;
            let mut held = self.objects.lock().unwrap();
            for &o in &objects {
                held.remove(&(ds, o));
            }
            self.removed.lock().unwrap().extend(objects.into_iter().map(|o| (ds, o)));
            Ok(())
        })
    }

    /// Pages of two objects, so tests page too.
    fn list_objects(&self, ds: DsId, shard: u8, after: ObjectId) -> BoxFuture<'_, FsResult<ObjectPage>> {
        Box::pin(async move {
            self.up(ds)?;
            let held = self.objects.lock().unwrap();
            let mut page: Vec<(ObjectId, u64)> = held
                .iter()
                .filter(|((d, o), _)| *d == ds && *o as u8 == shard && *o > after)
                .map(|((_, o), size)| (*o, *size))
                .collect();
            let more = page.len() > 2;
            page.truncate(2);
            Ok((page, more))
        })
    }

    /// Whole 4 KiB blocks of the recorded size (or what a test set in `allocated`).
    fn usage(&self, ds: DsId, objects: Vec<ObjectId>) -> BoxFuture<'_, FsResult<Vec<u64>>> {
        Box::pin(async move {
            self.up(ds)?;
            let held = self.objects.lock().unwrap();
            let set = self.allocated.lock().unwrap();
            Ok(objects
                .iter()
                .map(|o| {
                    set.get(&(ds, *o))
                        .copied()
                        .unwrap_or_else(|| held.get(&(ds, *o)).map_or(0, |s| s.div_ceil(4096) * 4096))
                })
                .collect())
        })
    }

    /// The recorded size, and a checksum made of it (and of `corrupt`, a test's way to make two
    /// replicas of one size differ).
    fn checksum(&self, ds: DsId, object: ObjectId) -> BoxFuture<'_, FsResult<(u64, u32)>> {
        Box::pin(async move {
            self.up(ds)?;
            let size = self.objects.lock().unwrap().get(&(ds, object)).copied().unwrap_or(0);
            let bad = self.corrupt.lock().unwrap().contains(&(ds, object));
            Ok((size, size as u32 ^ u32::from(bad)))
        })
    }

    /// Copies the object's recorded size (and records the log named).
    fn resync(
        &self,
        ds: DsId,
        object: ObjectId,
        to: StripeTarget,
        _gen: u64,
        _replicas: Vec<StripeTarget>,
        log: u64,
    ) -> BoxFuture<'_, FsResult<u64>> {
        Box::pin(async move {
            self.up(ds)?;
            self.up(to.ds)?;
            self.resync_logs.lock().unwrap().push((to, log));
            let mut held = self.objects.lock().unwrap();
            let size = held.get(&(ds, object)).copied().unwrap_or(0);
            held.insert((to.ds, to.object), size);
            Ok(size)
        })
    }
}
