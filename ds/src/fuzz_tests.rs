//! Structured fuzzing of the data server's request handling, in process, on a temporary store: sequences
//! of plausible data calls with now and then an absurd field or an arbitrary value
//! (`tessera_proto::fuzz`) — reads past the end, runs that do not match their payload, offsets near the
//! largest, misrouted and falsely forwarded calls, objects removed while others write them — from peers
//! of every role the server accepts. Every call must be answered within [`HANG`], with a payload that
//! matches its reply, and the server must still serve an ordinary write and read afterwards.
//! `TESSERA_FUZZ_CASES` runs more sequences.

use crate::server::tests::service;
use crate::server::DsService;
use bytes::Bytes;
use std::time::Duration;
use tessera_proto::fuzz::{self, Known};
use tessera_proto::msg::{DsCall, DsReply, DsRequest};
use tessera_proto::{IoTag, Origin, Role};

const STEPS: usize = 60;
const HANG: Duration = Duration::from_secs(10);
/// The data server [`service`] makes.
const DS: u32 = 2;

fn role(rng: &mut fuzz::Rng) -> Role {
    [Role::Client, Role::Client, Role::Client, Role::Ion, Role::Admin, Role::Mds][rng.index(6)]
}

/// Serves one call; checks the payload matches the reply.
async fn serve(s: &DsService, role: Role, call: DsCall, payload: Bytes) -> Option<DsReply> {
    let what = format!("{:?} from {role}", call.req);
    let (r, data) = tokio::time::timeout(HANG, s.call(role, call, payload))
        .await
        .unwrap_or_else(|_| panic!("no answer within {HANG:?} to {what}"));
    match &r {
        Ok(DsReply::Data { len }) => assert_eq!(*len as usize, data.len(), "{what}"),
        Ok(DsReply::DataV { lens }) => {
            assert_eq!(lens.iter().map(|&l| l as usize).sum::<usize>(), data.len(), "{what}")
        }
        _ => assert!(data.is_empty(), "{what}: a payload with {r:?}"),
    }
    r.ok()
}

/// Runs one sequence from `seed` on `s` (where earlier sequences left their objects), then checks the
/// server still serves an ordinary write and read.
async fn sequence(s: &DsService, seed: u64) {
    let mut rng = fuzz::Rng::new(seed);
    let known = Known::default();
    for _ in 0..STEPS {
        let (mut call, payload) = fuzz::ds_call(&mut rng, DS, &known);
        let role = role(&mut rng);
        if let (Role::Mds, DsRequest::Serve(cmd)) = (role, &mut call.req) {
            // The MDS is trusted with how long a slice holds other programs' requests: a real one sends
            // its window's slices, not days.
            cmd.fallback_ms = cmd.fallback_ms.min(200);
        }
        serve(s, role, call, Bytes::from(payload)).await;
    }
    let tag = IoTag { origin: Origin { job: "ok".into(), client: 1, pid: 1 }, ino: 1 };
    // An object of its own in target 0 (an id no generated request names), so earlier sequences cannot
    // have touched it.
    let object = 0x7e57_0000_0000 | (seed & 0xffff_ffff);
    let write = DsRequest::Write { tag: tag.clone(), object, offset: 4096, sync: false };
    let r = serve(s, Role::Client, DsCall::new(DS, write), Bytes::from_static(b"still here")).await;
    assert_eq!(r, Some(DsReply::Written { len: 10 }), "an ordinary write after the sequence");
    let read = DsRequest::Read { tag, object, offset: 4096, len: 100 };
    let (r, data) = s.call(Role::Client, DsCall::new(DS, read), Bytes::new()).await;
    assert_eq!((r.unwrap(), &data[..]), (DsReply::Data { len: 10 }, &b"still here"[..]));
}

/// Sequences from random seeds (the first printed, for a rerun with `TESSERA_FUZZ_SEED`), on one server.
#[test]
fn any_sequence_of_calls_is_answered_and_the_server_keeps_serving() {
    let base = fuzz::seed();
    eprintln!("sequences from seed {base} (TESSERA_FUZZ_SEED={base} repeats them)");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (_d, s) = service();
        for k in 0..u64::from(fuzz::cases(30)) {
            sequence(&s, base.wrapping_add(k)).await;
        }
    });
}

/// Arbitrary values of every request (any variant, any field), from every role, one after the other on
/// one server; space-reserving fallocates capped ([`fuzz::defuse`]) so the test never fills the disk.
#[test]
fn arbitrary_requests_are_answered() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let (_d, s) = service();
        let mut rng = fuzz::Rng::new(fuzz::seed());
        for _ in 0..fuzz::cases(400) {
            let Some(mut call) = fuzz::arbitrary_value::<DsCall>(&mut rng, 64) else { continue };
            if rng.percent(50) {
                call.ds = DS;
            }
            fuzz::defuse(&mut call.req);
            let role = role(&mut rng);
            if let DsRequest::Serve(cmd) = &mut call.req {
                cmd.fallback_ms = cmd.fallback_ms.min(200);
            }
            let len = rng.index(64);
            serve(&s, role, call, Bytes::from(rng.biased_bytes(len))).await;
        }
    });
}
