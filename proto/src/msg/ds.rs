//! The data service: [`DsCall`] (the data server it is for, a [`DsRequest`], the forwarding node that
//! passed it on) and its [`DsReply`]; the runs of vectored requests and their checks.

use super::ds_report::DsReport;
use super::jobs::TraceRecord;
use super::orchestrator::ServeCommand;
use crate::error::FsResult;
use crate::types::*;
use serde::{Deserialize, Serialize};

/// Every data request names the data server it is for, so it can be routed: sent to that server
/// directly, or through a forwarding node that passes it on. A server refuses a call naming another.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct DsCall {
    pub ds: DsId,
    pub req: DsRequest,
    /// Set by a forwarding node on what it passes on (data servers accept it only from the `ion`
    /// role): the request then carries the data of `requests` client requests, merged.
    pub via: Option<Forwarded>,
    /// Set on calls about a mirrored stripe's object (see [`MirrorCall`]); `None` for an unmirrored one.
    pub mirror: Option<MirrorCall>,
}

impl DsCall {
    /// A call straight from its sender.
    pub fn new(ds: DsId, req: DsRequest) -> DsCall {
        DsCall { ds, req, via: None, mirror: None }
    }
}

/// What a data server needs to know of a call about a mirrored stripe (issue 36, primary fan-out).
///
/// A client sends a stripe's writes (and its fsync and fallocate) to the stripe's primary replica with
/// the other replicas to write (`replicas`); the primary applies the call and passes the same call on
/// to each of them (with `from_primary` set and no replicas), and answers once every one has it. The
/// primary is the stripe's one ordering point: overlapping writes are applied and passed on one after
/// the other, so every replica applies them in the same order. Reads go to any in-sync replica.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct MirrorCall {
    /// The layout's [`mirror_gen`](crate::layout::Layout::mirror_gen) the sender holds.
    pub gen: u64,
    /// The stripe's global index in its file's layout.
    pub stripe: u32,
    /// To a primary: the other replicas to write (those in sync or resyncing), at most
    /// [`MAX_MIRRORS`](crate::layout::MAX_MIRRORS) − 1. Empty on reads and on passed-on calls.
    pub replicas: Vec<crate::layout::StripeTarget>,
    /// Set by a primary on a call it passes on (accepted only from the `ds` role): apply it, pass it on
    /// to nobody.
    pub from_primary: bool,
    /// To an in-sync replica that is not the stripe's primary: the replicas the client could not reach
    /// (the primary among them). The receiver has the MDS mark them stale first, which makes it the
    /// primary, then serves the call as one (a takeover). At most
    /// [`MAX_MIRRORS`](crate::layout::MAX_MIRRORS) − 1.
    pub failed: Vec<crate::layout::StripeTarget>,
}

/// Which forwarding node passed a data call on, and how many client requests it merged into it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Forwarded {
    /// The forwarding node's index in the cluster configuration.
    pub ion: u32,
    pub requests: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum DsRequest {
    Ping,
    /// Reads up to `len` bytes; bytes past the object's end are not returned (short read), holes read
    /// as zeros. Reply: `Data { len }` with the bytes as payload.
    Read {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        len: u32,
    },
    /// Reads several runs of one object (a strided reader's blocks): each run as a [`DsRequest::Read`]
    /// of its own. Reply: `DataV { lens }`, what each run got (short past the object's end), with their
    /// bytes one after the other as payload. Checked by [`check_read_extents`] before anything is read.
    ReadV {
        tag: IoTag,
        object: ObjectId,
        extents: Vec<Extent>,
    },
    /// Writes the payload at `offset`. `sync`: fdatasync before replying.
    Write {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        sync: bool,
    },
    /// Writes several runs of one object (a client's batch of small writes): the payload is their bytes,
    /// in the order of `extents`. Reply: `Written { len }`, the payload's length. Checked by
    /// [`check_extents`] before anything is written.
    WriteV {
        tag: IoTag,
        object: ObjectId,
        extents: Vec<Extent>,
        sync: bool,
    },
    /// `fallocate(2)` on `[offset, offset+len)` of an object, never changing its size (the file's size
    /// is the MDS's): `punch` deallocates the range so it reads as zeros (PUNCH_HOLE; a missing object
    /// needs nothing), otherwise space is reserved for it (creating the object if needed).
    Fallocate {
        tag: IoTag,
        object: ObjectId,
        offset: u64,
        len: u64,
        punch: bool,
    },
    /// Sets an object's size (creating it if needed).
    Truncate {
        object: ObjectId,
        size: u64,
    },
    /// Removes objects (missing ones are fine: removal is idempotent for the destroy log); at most
    /// [`MAX_REMOVE_OBJECTS`].
    Remove {
        objects: Vec<ObjectId>,
    },
    /// Makes an object's data durable.
    Fsync {
        tag: IoTag,
        object: ObjectId,
    },
    /// This server's report (the same it sends to the MDS).
    Report,
    /// Orchestrator: which requests to release from now on (role mds only).
    Serve(ServeCommand),
    /// Lists objects with their sizes (`tessera fsck`; roles mds and admin): those of shard `shard`
    /// (objects are kept in 256 shards by the low byte of their id) with ids above `after`, in id order,
    /// at most `max` (capped at [`MAX_LIST_OBJECTS`]). Reply: `Objects`.
    ListObjects {
        shard: u8,
        after: ObjectId,
        max: u32,
    },
    /// The object's size and the CRC-32 of its bytes (roles mds and admin: `tessera fsck
    /// --verify-mirrors`); a missing object is 0 bytes. Reply: `Checksum`.
    Checksum {
        object: ObjectId,
    },
    /// What each of `objects` takes on this server's disk, in bytes (`st_blocks` × 512; a missing object
    /// 0): the MDS's measure of files' `st_blocks` (roles mds and admin), at most
    /// [`MAX_USAGE_OBJECTS`]. Reply: `Usage`, one number per object in order.
    Usage {
        objects: Vec<ObjectId>,
    },
    /// Where the next data (`hole` false) or the next hole (`hole` true) of `object` starts at or after
    /// `offset`: `lseek(SEEK_DATA/SEEK_HOLE)` on its file, the end of the object being a hole. Reply:
    /// `Seek(None)` when no data follows (or the object does not exist).
    Seek {
        object: ObjectId,
        offset: u64,
        hole: bool,
    },
    /// Resync (role mds only): this server, `object`'s primary, copies the object to replica `to`
    /// (another data server's object), holding each range against concurrent writes while it copies it,
    /// then cuts `to` to the object's size. What it copies: the ranges its log `log` of what `to` missed
    /// holds, if it has that log open, else the whole object (`log` 0: whole). From now on its writes of
    /// `object` go to `replicas` (every replica written, `to` among them) whatever an older layout (`gen`
    /// before this one) names. Reply: `Resynced`.
    Resync {
        object: ObjectId,
        to: crate::layout::StripeTarget,
        gen: u64,
        replicas: Vec<crate::layout::StripeTarget>,
        log: u64,
    },
    /// A job's request trace here (`tessera trace start|stop|export`): `set` switches it on or off
    /// (kept in a bounded ring of [`MAX_TRACE_RECORDS`](super::MAX_TRACE_RECORDS) per job, at most
    /// [`MAX_TRACED_JOBS`](super::MAX_TRACED_JOBS) jobs); then the records numbered from `after` on, at
    /// most `max` (capped at [`MAX_TRACE_PAGE`](super::MAX_TRACE_PAGE)).
    /// Reply: `JobTrace`.
    JobTrace {
        job: String,
        set: Option<bool>,
        after: u64,
        max: u32,
    },
}

/// One run of a [`DsRequest::WriteV`] (the next `len` bytes of the payload go to object offset `offset`)
/// or of a [`DsRequest::ReadV`] (`len` bytes from `offset`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub struct Extent {
    pub offset: u64,
    pub len: u32,
}

/// Most objects one [`DsRequest::Remove`] may name (the MDS's destroy log sends a burst of unlinks'
/// objects to each data server in requests of at most this many).
pub const MAX_REMOVE_OBJECTS: usize = 4096;

/// Most objects one [`DsRequest::ListObjects`] answers with.
pub const MAX_LIST_OBJECTS: usize = 16384;

/// Most objects one [`DsRequest::Usage`] asks about.
pub const MAX_USAGE_OBJECTS: usize = 4096;

/// Most runs one [`DsRequest::WriteV`] or [`DsRequest::ReadV`] may carry.
pub const MAX_EXTENTS: usize = 1024;

/// The bytes of a vectored request's runs: at most [`MAX_EXTENTS`], none empty or ending past the
/// largest offset.
fn runs_total(extents: &[Extent]) -> crate::FsResult<u64> {
    use crate::FsError;
    if extents.is_empty() || extents.len() > MAX_EXTENTS {
        return Err(FsError::invalid(format!(
            "a vectored request carries {} runs (1 to {MAX_EXTENTS})",
            extents.len()
        )));
    }
    let mut total: u64 = 0;
    for e in extents {
        if e.len == 0 || e.offset.checked_add(u64::from(e.len)).is_none() {
            return Err(FsError::invalid(format!("bad run of {} bytes at offset {}", e.len, e.offset)));
        }
        total += u64::from(e.len);
    }
    Ok(total)
}

/// Checks a vectored read's runs ([`runs_total`]'s rules), together at most `max` bytes; returns their total.
pub fn check_read_extents(extents: &[Extent], max: usize) -> crate::FsResult<u64> {
    let total = runs_total(extents)?;
    if total > max as u64 {
        return Err(crate::FsError::invalid(format!("a vectored read of {total} bytes exceeds the limit of {max}")));
    }
    Ok(total)
}

/// Checks a vectored write's runs against its payload: at most [`MAX_EXTENTS`], none empty or ending
/// past the largest offset, together exactly the payload.
pub fn check_extents(extents: &[Extent], payload_len: usize) -> crate::FsResult<()> {
    use crate::FsError;
    let total = runs_total(extents)?;
    if total != payload_len as u64 {
        return Err(FsError::protocol(format!("runs of {total} bytes with a payload of {payload_len}")));
    }
    Ok(())
}

/// A vectored write's runs as (object offset, its bytes of the payload), after [`check_extents`].
pub fn split_runs<'a>(
    extents: &'a [Extent],
    payload: &'a bytes::Bytes,
) -> crate::FsResult<impl Iterator<Item = (u64, bytes::Bytes)> + 'a> {
    check_extents(extents, payload.len())?;
    let mut at = 0;
    Ok(extents.iter().map(move |e| {
        let run = payload.slice(at..at + e.len as usize);
        at += e.len as usize;
        (e.offset, run)
    }))
}

/// True for the requests that carry data in their payload.
pub fn carries_data(req: &DsRequest) -> bool {
    matches!(req, DsRequest::Write { .. } | DsRequest::WriteV { .. })
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(any(test, feature = "arbitrary"), derive(arbitrary::Arbitrary))]
pub enum DsReply {
    Ok,
    Pong {
        version: u16,
        ds: DsId,
    },
    /// Payload carries `len` bytes.
    Data {
        len: u32,
    },
    /// A [`DsRequest::ReadV`]'s: each run's bytes, one after the other in the payload.
    DataV {
        lens: Vec<u32>,
    },
    Written {
        len: u32,
    },
    Report(DsReport),
    /// A `Serve` command was applied at this wall-clock time (microseconds since the Unix epoch).
    Switched {
        epoch: u64,
        at_unix_us: u64,
    },
    /// A `ListObjects`'s page: `(id, size)` in id order; `more` when the shard holds further objects.
    Objects {
        objects: Vec<(ObjectId, u64)>,
        more: bool,
    },
    /// A job's trace records numbered `first..next`; `dropped`: older records no longer kept.
    JobTrace {
        on: bool,
        first: u64,
        next: u64,
        dropped: u64,
        records: Vec<TraceRecord>,
    },
    Checksum {
        size: u64,
        crc32: u32,
    },
    /// A `Usage`'s bytes per object, in the order asked.
    Usage(Vec<u64>),
    /// A `Seek`'s answer (object offset), `None`: no data at or after the offset.
    Seek(Option<u64>),
    /// A `Resync` copied `bytes` bytes.
    Resynced {
        bytes: u64,
    },
}

pub type DsResponse = FsResult<DsReply>;

impl DsRequest {
    /// The object a data request is about (reads, writes, fallocate, fsync, truncate).
    pub fn object(&self) -> Option<ObjectId> {
        match self {
            DsRequest::Read { object, .. }
            | DsRequest::ReadV { object, .. }
            | DsRequest::Write { object, .. }
            | DsRequest::WriteV { object, .. }
            | DsRequest::Fallocate { object, .. }
            | DsRequest::Fsync { object, .. }
            | DsRequest::Seek { object, .. }
            | DsRequest::Truncate { object, .. } => Some(*object),
            _ => None,
        }
    }

    /// The object a data request is about (reads, writes, fallocate, fsync, truncate), to change it:
    /// the same request to another replica.
    pub fn object_mut(&mut self) -> Option<&mut ObjectId> {
        match self {
            DsRequest::Read { object, .. }
            | DsRequest::ReadV { object, .. }
            | DsRequest::Write { object, .. }
            | DsRequest::WriteV { object, .. }
            | DsRequest::Fallocate { object, .. }
            | DsRequest::Fsync { object, .. }
            | DsRequest::Truncate { object, .. } => Some(object),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectored_write_runs_must_match_the_payload() {
        let runs = |v: &[(u64, u32)]| v.iter().map(|&(offset, len)| Extent { offset, len }).collect::<Vec<_>>();
        assert!(check_extents(&runs(&[(0, 4096), (8192, 10)]), 4106).is_ok());
        assert!(check_extents(&runs(&[(0, 4096), (8192, 10)]), 4105).is_err(), "payload short");
        assert!(check_extents(&runs(&[(0, 4096)]), 4097).is_err(), "payload long");
        assert!(check_extents(&[], 0).is_err(), "no runs");
        assert!(check_extents(&runs(&[(5, 0)]), 0).is_err(), "empty run");
        assert!(check_extents(&runs(&[(u64::MAX - 2, 4)]), 4).is_err(), "past the largest offset");
        let many = vec![Extent { offset: 0, len: 1 }; MAX_EXTENTS + 1];
        assert!(check_extents(&many, MAX_EXTENTS + 1).is_err(), "too many runs");
        assert!(check_extents(&many[..MAX_EXTENTS], MAX_EXTENTS).is_ok());
        // u32 lengths summed in u64: a thousand 4 GiB runs do not wrap.
        let huge = vec![Extent { offset: 0, len: u32::MAX }; MAX_EXTENTS];
        assert!(check_extents(&huge, 0).is_err());
        let payload = bytes::Bytes::from_static(b"xyzab");
        let split: Vec<_> = split_runs(&runs(&[(10, 3), (0, 2)]), &payload).unwrap().collect();
        assert_eq!(split, [(10, payload.slice(0..3)), (0, payload.slice(3..5))]);
        assert!(split_runs(&runs(&[(0, 4)]), &payload).is_err(), "checked first");
    }

    #[test]
    fn vectored_read_runs_are_bounded_in_count_and_bytes() {
        let runs = |v: &[(u64, u32)]| v.iter().map(|&(offset, len)| Extent { offset, len }).collect::<Vec<_>>();
        assert_eq!(check_read_extents(&runs(&[(0, 4096), (65536, 10)]), 1 << 20).unwrap(), 4106);
        assert!(check_read_extents(&runs(&[(0, 4096), (65536, 10)]), 4105).is_err(), "over the byte limit");
        assert!(check_read_extents(&[], 1 << 20).is_err(), "no runs");
        assert!(check_read_extents(&runs(&[(5, 0)]), 1 << 20).is_err(), "empty run");
        assert!(check_read_extents(&runs(&[(u64::MAX, 1)]), 1 << 20).is_err(), "past the largest offset");
        let huge = vec![Extent { offset: 0, len: u32::MAX }; MAX_EXTENTS];
        assert!(check_read_extents(&huge, usize::MAX).is_ok(), "summed in u64");
        assert!(check_read_extents(&huge, 64 << 20).is_err());
        let many = vec![Extent { offset: 0, len: 1 }; MAX_EXTENTS + 1];
        assert!(check_read_extents(&many, usize::MAX).is_err(), "too many runs");
    }
}
