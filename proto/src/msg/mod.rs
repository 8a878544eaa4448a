//! Request and response messages of the metadata service (MDS) and the data service (DS).
//!
//! One RPC is one bidirectional QUIC stream: a request frame (header + optional raw payload), then a
//! response frame. Headers are the types below; data travels only as raw payload (see [`crate::frame`]).
//!
//! One file per service, every type re-exported here (`msg::X`):
//! - `common`: attribute changes, open/rename/xattr flags, directory entries, statfs, size histograms.
//! - `mds`: the metadata service's calls and replies, directory leases, declarations, placement, fsck.
//! - `ds`: the data service's calls and replies, vectored runs and their checks.
//! - `ion`: forwarding nodes' calls, replies and status.
//! - `ds_report`: what a data server reports to the MDS (space, targets, latency, jobs).
//! - `orchestrator`: IOrchestrator's locality reports, serve commands and status.
//! - `periodic`: PerSched's profiles, grants and status.
//! - `jobs`: per-job counters, the job registry, traced requests.
//!
//! Where a type is defined changes nothing on the wire (bincode follows a type's shape: the order of its
//! fields and variants).

mod common;
mod ds;
mod ds_report;
mod ion;
mod jobs;
mod mds;
mod orchestrator;
mod periodic;

pub use common::*;
pub use ds::*;
pub use ds_report::*;
pub use ion::*;
pub use jobs::*;
pub use mds::*;
pub use orchestrator::*;
pub use periodic::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{decode, encode};
    use rand::{Rng, SeedableRng};

    #[test]
    fn round_trip_and_garbage_never_panics() {
        let call = MdsCall {
            caller: crate::Caller { uid: 5, gid: 6, groups: vec![7] },
            origin: crate::Origin { job: "j".into(), client: 9, pid: 10 },
            req: MdsRequest::Lookup { parent: 1, name: "x".into() },
            seq: 0,
        };
        let b = encode(&call).unwrap();
        assert_eq!(decode::<MdsCall>(&b).unwrap(), call);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let n = rng.gen_range(0..64);
            let junk: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let _ = decode::<MdsCall>(&junk);
            let _ = decode::<DsRequest>(&junk);
        }
        // A huge claimed string length must be refused, not allocated.
        let mut evil = vec![0u8, 0, 5, 1];
        evil.extend_from_slice(&[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(decode::<MdsCall>(&evil).is_err());
        assert!(decode::<MdsCall>(&b[..b.len() - 1]).is_err());
    }
}
