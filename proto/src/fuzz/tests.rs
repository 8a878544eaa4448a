//! Structured fuzz tests of every decoder: arbitrary bytes, mutated frames and valid messages with
//! absurd fields never panic, never make the decoder allocate by a declared length, and valid messages
//! round-trip. The allocations are measured by a counting global allocator (this test binary's).

use super::{cases, mutate, value_from, Mutation, Rng};
use crate::error::FsResult;
use crate::frame::{self, parse_prefix, FrameError, MAX_PAYLOAD};
use crate::msg::*;
use crate::wire::{self, MAX_HEADER};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the live and peak heap bytes of the thread that asked for it.
struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn tracked(delta: isize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let live = LIVE.with(|l| {
                let v = l.get().saturating_add_signed(delta);
                l.set(v);
                v
            });
            PEAK.with(|p| p.set(p.get().max(live)));
        }
    });
}

// SAFETY: every call is passed on to the system allocator unchanged; only thread-local counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        tracked(layout.size() as isize);
        // SAFETY: the caller's layout, as the trait requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        tracked(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        tracked(-(layout.size() as isize));
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        tracked(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result and the most heap it held at once.
fn peak_heap<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    let r = f();
    TRACKING.with(|t| t.set(false));
    (r, PEAK.with(Cell::get))
}

/// Most heap a decode of `len` bytes may take, whatever the lengths they declare: a few times the input,
/// plus what serde sets aside for a sequence before its elements arrive (at most 1 MiB per nesting
/// level: `serde::de::size_hint::cautious`; four levels are the deepest our messages nest sequences).
fn heap_bound(len: usize) -> usize {
    16 * len + 4 * (1 << 20) + (64 << 10)
}

/// One wire type's decoder: the value it decodes from the bytes, encoded again.
type Decoder = fn(&[u8]) -> Option<Result<Vec<u8>, wire::WireError>>;

fn decoder<T: serde::de::DeserializeOwned + serde::Serialize>(b: &[u8]) -> Option<Result<Vec<u8>, wire::WireError>> {
    wire::decode::<T>(b).ok().map(|v| wire::encode(&v))
}

/// One wire type's generator: a value from raw bytes, encoded.
type Encoder = fn(&[u8]) -> Option<Vec<u8>>;

fn encoder<T: for<'a> arbitrary::Arbitrary<'a> + serde::Serialize>(b: &[u8]) -> Option<Vec<u8>> {
    value_from::<T>(b).map(|v| wire::encode(&v).expect("every value encodes"))
}

/// Every header a server or client decodes off the network, by name.
const TYPES: [(&str, Decoder, Encoder); 6] = [
    ("MdsCall", decoder::<MdsCall>, encoder::<MdsCall>),
    ("MdsResponse", decoder::<MdsResponse>, encoder::<MdsResponse>),
    ("DsCall", decoder::<DsCall>, encoder::<DsCall>),
    ("DsResponse", decoder::<DsResponse>, encoder::<DsResponse>),
    ("IonCall", decoder::<IonCall>, encoder::<IonCall>),
    ("IonResponse", decoder::<FsResult<IonReply>>, encoder::<FsResult<IonReply>>),
];

/// Decodes `bytes` as every type: no panic, bounded heap, and what decodes encodes again to bytes that
/// decode to the same value (checked on the encodings: reports carry floats, and NaN != NaN).
fn decode_all(bytes: &[u8]) -> Result<(), TestCaseError> {
    for (name, decode, _) in TYPES {
        let (r, peak) = peak_heap(|| decode(bytes));
        prop_assert!(
            peak <= heap_bound(bytes.len()),
            "{name}: {peak} bytes of heap for {} bytes of input",
            bytes.len()
        );
        if let Some(again) = r {
            let again = again.map_err(|e| TestCaseError::fail(format!("{name}: decoded but not encodable: {e}")))?;
            let twice =
                decode(&again).ok_or_else(|| TestCaseError::fail(format!("{name}: re-encoding undecodable")))?;
            prop_assert_eq!(twice.unwrap(), again, "{}: not stable across a round trip", name);
        }
    }
    Ok(())
}

/// A frame's prefix and header as a server reads them, off an in-memory frame: no panic, an error or
/// a header decoded within the heap bound.
fn read_frame_bytes(frame: &[u8]) -> Result<(), TestCaseError> {
    let Some(p) = frame.get(..frame::PREFIX) else { return Ok(()) };
    let p: [u8; frame::PREFIX] = p.try_into().unwrap();
    match parse_prefix(&p, MAX_PAYLOAD) {
        Ok((hlen, plen)) => {
            prop_assert!(hlen <= MAX_HEADER && plen <= MAX_PAYLOAD);
            let body = &frame[frame::PREFIX..];
            decode_all(&body[..hlen.min(body.len())])
        }
        Err(FrameError::BadMagic | FrameError::Version { .. } | FrameError::HeaderTooLarge(_)) => Ok(()),
        Err(FrameError::PayloadTooLarge(..)) => Ok(()),
        Err(e) => Err(TestCaseError::fail(format!("unexpected prefix error {e}"))),
    }
}

fn config(default_cases: u32) -> ProptestConfig {
    ProptestConfig { cases: cases(default_cases), failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn random_bytes_never_panic_nor_allocate_by_declared_lengths(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        decode_all(&bytes)?;
    }

    #[test]
    fn biased_bytes_never_panic_nor_allocate_by_declared_lengths(seed in any::<u64>(), len in 0usize..400) {
        decode_all(&Rng::new(seed).biased_bytes(len))?;
    }

    #[test]
    fn valid_messages_round_trip(seed in any::<u64>(), len in 0usize..2000) {
        let bytes = Rng::new(seed).biased_bytes(len);
        for (name, decode, encode) in TYPES {
            let Some(encoded) = encode(&bytes) else { continue };
            let back = decode(&encoded).ok_or_else(|| TestCaseError::fail(format!("{name}: a valid value does not decode")))?;
            prop_assert_eq!(back.unwrap(), encoded, "{}", name);
        }
    }

    #[test]
    fn mutated_frames_never_panic_nor_allocate_by_declared_lengths(seed in any::<u64>(), len in 0usize..1000) {
        let mut rng = Rng::new(seed);
        let bytes = rng.biased_bytes(len);
        let frames: Vec<Vec<u8>> = TYPES
            .iter()
            .filter_map(|(_, _, encode)| encode(&bytes))
            .map(|h| [&frame::prefix(h.len(), 0)[..], &h].concat())
            .collect();
        prop_assume!(frames.len() >= 2);
        for m in Mutation::ALL {
            let a = &frames[rng.index(frames.len())];
            let b = &frames[rng.index(frames.len())];
            read_frame_bytes(&mutate(&mut rng, m, a, b))?;
        }
    }
}

#[test]
fn huge_declared_lengths_are_refused_without_allocating_them() {
    // MdsCall { caller: { uid 0, gid 0, groups: [] }, origin: { job: <len>, .. }, .. }: a job id declared
    // as 2^63, 2^32-1, 1 MiB and 64 KiB long, followed by nothing.
    for len in [
        &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f][..],
        &[0xfc, 0xff, 0xff, 0xff, 0xff],
        &[0xfc, 0, 0, 0x10, 0],
        &[0xfb, 0xff, 0xff],
    ] {
        let evil = [&[0u8, 0, 0][..], len].concat();
        let (r, peak) = peak_heap(|| wire::decode::<MdsCall>(&evil));
        assert!(r.is_err());
        assert!(peak <= 32 << 10, "declared {len:?}: {peak} bytes allocated");
    }
    // The same lengths as a sequence: a DsRequest::Remove of 2^32-1 objects carried in 10 bytes.
    let evil = [0u8, 0, 7, 0xfc, 0xff, 0xff, 0xff, 0xff, 1, 2];
    let (r, peak) = peak_heap(|| wire::decode::<DsCall>(&evil));
    assert!(r.is_err());
    assert!(peak <= (1 << 20) + (16 << 10), "{peak} bytes");
    // Long strings that are really there still decode (the limit follows the input).
    for len in [100, 5000, 70_000, MAX_HEADER / 2] {
        let big = MdsCall {
            caller: Default::default(),
            origin: Default::default(),
            req: MdsRequest::Symlink { parent: 1, name: "l".into(), target: "x".repeat(len) },
            seq: 0,
        };
        let bytes = wire::encode(&big).unwrap();
        assert_eq!(wire::decode::<MdsCall>(&bytes).unwrap(), big);
    }
}

/// The largest valid messages of each kind decode: the limit counts decoded memory (8 bytes per u64),
/// not encoded bytes, so a header within [`MAX_HEADER`] may still be refused if it nears it.
#[test]
fn the_largest_valid_messages_decode() {
    use crate::types::*;
    let per_name = LEASE_NAME_BYTES_MAX / LEASE_NAMES_MAX;
    let entries = (0..LEASE_NAMES_MAX).map(|i| (format!("{i:0per_name$}"), FileKind::Symlink)).collect();
    let attr = Attr::new(u64::MAX, FileKind::Dir, 0o7777, u32::MAX, u32::MAX, Timestamp::now());
    let inos = vec![u64::MAX; crate::msg::LEASE_NAMES_MAX / 128];
    let lease = DirLease { dir: u64::MAX, token: u64::MAX, valid_ms: u32::MAX, inos, attr, entries };
    let grant: MdsResponse = Ok(MdsReply::Lease(lease));
    assert_eq!(wire::decode::<MdsResponse>(&wire::encode(&grant).unwrap()).unwrap(), grant);
    let objects = Ok(DsReply::Objects { objects: vec![(u64::MAX, u64::MAX); MAX_LIST_OBJECTS], more: true });
    assert_eq!(wire::decode::<DsResponse>(&wire::encode(&objects).unwrap()).unwrap(), objects);
    let remove = DsCall::new(u32::MAX, DsRequest::Remove { objects: vec![u64::MAX; MAX_REMOVE_OBJECTS] });
    assert_eq!(wire::decode::<DsCall>(&wire::encode(&remove).unwrap()).unwrap(), remove);
    let tag = IoTag { origin: Origin { job: "j".repeat(JOB_ID_MAX), client: u64::MAX, pid: u32::MAX }, ino: u64::MAX };
    let extents = vec![Extent { offset: u64::MAX, len: u32::MAX }; MAX_EXTENTS];
    let writev = DsCall::new(0, DsRequest::WriteV { tag, object: u64::MAX, extents, sync: true });
    assert_eq!(wire::decode::<DsCall>(&wire::encode(&writev).unwrap()).unwrap(), writev);
    // A data server's report with the most jobs it keeps apart, each with the longest job id.
    let job = |i: usize| JobCounters {
        job: format!("{i:0JOB_ID_MAX$}"),
        read_ops: u64::MAX,
        read_bytes: u64::MAX,
        write_ops: u64::MAX,
        write_bytes: u64::MAX,
    };
    let report = DsReport { jobs: (0..MAX_JOBS).map(job).collect(), ..Default::default() };
    let call = MdsCall {
        caller: Caller::root(),
        origin: Origin::default(),
        req: MdsRequest::DsReport(Box::new(report)),
        seq: 0,
    };
    let bytes = wire::encode(&call).unwrap();
    assert!(bytes.len() <= MAX_HEADER, "{} bytes", bytes.len());
    assert_eq!(wire::decode::<MdsCall>(&bytes).unwrap(), call);
}

#[test]
fn unknown_enum_tags_are_errors() {
    // Every enum at the front of a header, with each tag one past its last variant and the largest.
    let past = |n: u32| -> Vec<Vec<u8>> { vec![wire::encode(&n).unwrap(), wire::encode(&u32::MAX).unwrap()] };
    for tag in past(4) {
        assert!(wire::decode::<IonCall>(&tag).is_err());
    }
    for tag in past(2) {
        // FsResult: Ok = 0, Err = 1.
        assert!(wire::decode::<MdsResponse>(&tag).is_err());
        assert!(wire::decode::<DsResponse>(&tag).is_err());
    }
    let call = |tag: &[u8]| [&[0u8, 0, 0, 0, 0, 0][..], tag].concat();
    let n_mds = crate::requests::NAMES.len() as u32;
    for tag in past(n_mds) {
        assert!(wire::decode::<MdsCall>(&call(&tag)).is_err());
    }
    // DsCall { ds: 0, req: <tag> }
    for tag in past(12) {
        assert!(wire::decode::<DsCall>(&[&[0u8][..], &tag].concat()).is_err());
    }
}

#[test]
fn the_mutations_spoil_frames_in_their_own_ways() {
    let h = wire::encode(&DsCall::new(0, DsRequest::Ping)).unwrap();
    let f = [&frame::prefix(h.len(), 0)[..], &h].concat();
    let mut rng = Rng::new(1);
    for m in Mutation::ALL {
        let seen: std::collections::HashSet<Vec<u8>> = (0..50).map(|_| mutate(&mut rng, m, &f, &f)).collect();
        assert!(seen.len() > 1 || m == Mutation::Truncate, "{}: always the same", m.name());
        assert!(seen.iter().any(|s| s != &f), "{}: never changes the frame", m.name());
    }
    assert_eq!(&mutate(&mut rng, Mutation::PrefixLength, &f, &f)[..4], &f[..4], "magic and version kept");
}
