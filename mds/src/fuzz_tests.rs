//! Structured fuzzing of the metadata server's request handling, in process: sequences of plausible
//! requests with now and then an absurd field or an arbitrary value (`tessera_proto::fuzz`), in any order
//! (a close before its open, a write report for an inode that is gone, a batch with a stale token, a lease
//! on a file...), from peers of every role, through the service's one dispatch (senders, origin check,
//! leases, namespace, orchestrator). Every request must be answered — no panic, no hang, no `EIO` — and
//! the server must still serve an ordinary client afterwards. `TESSERA_FUZZ_CASES` runs more sequences.

use crate::namespace::tests::open_ns;
use crate::orchestrator::{Orchestrator, Params};
use crate::server::MdsService;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tessera_proto::error::ErrorCode;
use tessera_proto::fuzz::{self, Known};
use tessera_proto::msg::{MdsCall, MdsReply, MdsRequest, OrchestratorMode};
use tessera_proto::rpc::{PeerInfo, Service};
use tessera_proto::{Caller, FileKind, Origin, Role, ROOT_INO};

/// Requests per sequence.
const STEPS: usize = 100;
/// Longest a request may take before it counts as a hang.
const HANG: Duration = Duration::from_secs(10);

fn service(dir: &std::path::Path) -> MdsService {
    let ns = Arc::new(open_ns(dir).0);
    let orch = Orchestrator::new(Params::from_options(&Default::default()), OrchestratorMode::Off, vec![0, 1, 2, 3]);
    MdsService::new(ns).with_orchestrator(Arc::new(orch))
}

/// A peer of a random role; one connection and one client throughout, so that a directory lease the
/// sequence takes never holds its own later requests up (other clients wait for a lease by design).
fn peer(rng: &mut fuzz::Rng) -> Arc<PeerInfo> {
    let role = match rng.below(20) {
        0..=13 => Role::Client,
        14 | 15 => Role::Admin,
        16 => Role::Ion,
        17 => Role::Mds,
        _ => Role::Ds,
    };
    Arc::new(PeerInfo { role, name: "fuzz".into(), addr: "127.0.0.1:1".parse().unwrap(), conn: 1 })
}

async fn call(svc: &MdsService, peer: Arc<PeerInfo>, caller: Caller, origin: Origin, req: MdsRequest) -> MdsReply {
    let what = format!("{req:?}");
    let call = MdsCall { caller, origin, req, seq: 0 };
    let (r, payload) = tokio::time::timeout(HANG, svc.handle(peer, call, Bytes::new()))
        .await
        .unwrap_or_else(|_| panic!("no answer within {HANG:?} to {what}"));
    assert!(payload.is_empty(), "a metadata reply carries no payload");
    match r {
        Ok(reply) => reply,
        Err(e) => {
            // EIO would mean the server failed itself (its database, a task), not the request.
            assert_ne!(e.code, ErrorCode::Io, "{what}: {e}");
            MdsReply::Ok
        }
    }
}

/// Runs one sequence from `seed` on `svc` (where earlier sequences left their files), then checks the
/// server still serves an ordinary client.
async fn sequence(svc: &MdsService, seed: u64) {
    let mut rng = fuzz::Rng::new(seed);
    let mut known = Known::default();
    for _ in 0..STEPS {
        let req = fuzz::mds_request(&mut rng, &known);
        let (peer, caller, origin) = (peer(&mut rng), fuzz::caller(&mut rng), fuzz::origin(&mut rng, 1));
        let reply = call(svc, peer, caller, origin, req).await;
        known.learn_mds(&mut rng, &reply);
    }
    // The same client (another would wait, by design, for the leases the sequence holds to run out).
    let ok =
        Arc::new(PeerInfo { role: Role::Client, name: "ok".into(), addr: "127.0.0.1:1".parse().unwrap(), conn: 1 });
    let origin = Origin { job: "ok".into(), client: 1, pid: 1 };
    let mkdir = MdsRequest::Mkdir { parent: ROOT_INO, name: format!("ok-{seed}"), perm: 0o755, umask: 0 };
    let reply = call(svc, ok.clone(), Caller::root(), origin.clone(), mkdir).await;
    let MdsReply::Entry { attr, .. } = reply else { panic!("an ordinary mkdir after the sequence: {reply:?}") };
    assert_eq!(attr.kind, FileKind::Dir);
    let lookup = MdsRequest::Lookup { parent: ROOT_INO, name: format!("ok-{seed}") };
    let reply = call(svc, ok, Caller::root(), origin, lookup).await;
    assert!(matches!(reply, MdsReply::Entry { attr: ref a, .. } if a.ino == attr.ino), "{reply:?}");
}

/// Sequences from random seeds (the first printed, for a rerun with `TESSERA_FUZZ_SEED`), on one server:
/// a fresh database costs more than a sequence.
#[test]
fn any_sequence_of_requests_is_answered_and_the_server_keeps_serving() {
    let base = fuzz::seed();
    eprintln!("sequences from seed {base} (TESSERA_FUZZ_SEED={base} repeats them)");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let svc = service(dir.path());
    for k in 0..u64::from(fuzz::cases(200)) {
        rt.block_on(sequence(&svc, base.wrapping_add(k)));
    }
}

/// Orders a client never sends, each on a fresh namespace: a close of a handle never opened, a write
/// report and a batch for a directory that does not exist, a batch with a stale token after the lease
/// was given up, a lease on a file.
#[tokio::test]
async fn valid_requests_in_invalid_orders_get_clean_errors() {
    let dir = tempfile::tempdir().unwrap();
    let svc = service(dir.path());
    let client =
        || Arc::new(PeerInfo { role: Role::Client, name: "c".into(), addr: "127.0.0.1:1".parse().unwrap(), conn: 1 });
    let origin = Origin { job: "j".into(), client: 1, pid: 1 };
    let ask = |req: MdsRequest| {
        let call = MdsCall { caller: Caller::root(), origin: origin.clone(), req, seq: 0 };
        svc.handle(client(), call, Bytes::new())
    };
    let code = |r: tessera_proto::FsResult<MdsReply>| r.expect_err("an error").code;
    // A close of a handle never opened: nothing to close (idempotent), and nothing changed.
    let r = ask(MdsRequest::Close { ino: 12345, handle: 7, size: Some(u64::MAX), wrote: true }).await.0;
    assert!(r.is_ok() || code(r.clone()) == ErrorCode::Stale || code(r) == ErrorCode::NotFound);
    assert_eq!(code(ask(MdsRequest::ReportWrite { ino: 12345, size: u64::MAX }).await.0), ErrorCode::NotFound);
    let batch = |dir, token, keep| MdsRequest::DirBatch { dir, token, entries: vec![], keep };
    assert!(ask(batch(99_999, 1, true)).await.0.is_err(), "a batch for a directory that does not exist");
    let MdsReply::Lease(l) = ask(MdsRequest::LeaseDir { dir: ROOT_INO }).await.0.unwrap() else { panic!() };
    ask(batch(ROOT_INO, l.token, false)).await.0.unwrap();
    // Given up: the same token again renews nothing.
    let MdsReply::Batch { lease, .. } = ask(batch(ROOT_INO, l.token, true)).await.0.unwrap() else { panic!() };
    assert!(lease.is_none(), "a stale token renews nothing");
    let create = MdsRequest::CreateOpen {
        parent: ROOT_INO,
        name: "f".into(),
        perm: 0o644,
        umask: 0,
        exclusive: true,
        layout: None,
        flags: Default::default(),
    };
    let MdsReply::Opened { attr, handle, .. } = ask(create).await.0.unwrap() else { panic!() };
    assert_eq!(code(ask(MdsRequest::LeaseDir { dir: attr.ino }).await.0), ErrorCode::NotDir);
    // A close twice: the second finds nothing to close.
    ask(MdsRequest::Close { ino: attr.ino, handle, size: None, wrote: false }).await.0.unwrap();
    let again = ask(MdsRequest::Close { ino: attr.ino, handle, size: None, wrote: false }).await.0;
    assert!(again.is_ok() || code(again) == ErrorCode::Stale);
}
