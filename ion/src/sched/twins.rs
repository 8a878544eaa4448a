//! TWINS, server time windows (`specs/forwarding.md`, "Schedulers" and "TWINS details"; thesis:
//! Bez 2016, §4.3, Algorithm 2).
//!
//! Rule: one FIFO queue per data server (`Params::servers`, in the cluster's order, n of them). Time
//! is cut into windows of `window_us` aligned to the cluster-wide `epoch_us`: slot
//! `s = (now_us - epoch_us) / window_us` (saturating: before the epoch it is slot 0). Forwarding
//! node k (`Params::ion_index`) serves server `(k + s) mod n` during slot s, so with aligned windows
//! and at most n forwarding nodes no two of them target the same server at the same time, without
//! talking to each other. In its window it releases only that server's requests; it never ends a
//! window early and never skips an empty server: if the window's server has nothing queued, `next`
//! answers `WaitUntil(end of the window)` even when other servers' queues are full.
//!
//! **Decisions** (where the thesis is silent):
//! - Releases are merged runs: the server's oldest request, then the oldest queued request of that
//!   server continuing the run ([`Req::continued_by`]), up to [`MAX_MERGE`] and
//!   [`MAX_MERGED_BYTES`](super::MAX_MERGED_BYTES). The window holds requests back, so runs form here
//!   (the thesis's Table 5.1 shows TWINS leaving larger requests); the dispatch stage may merge more.
//! - A request for a data server not in `Params::servers` (a configuration the forwarding node was not
//!   told about) is outside the rotation: it is queued apart and released first, in any window, so it
//!   is neither lost nor held forever. "One server per window" holds for the servers in the rotation.
//! - `new` refuses an empty server list, a zero window and a server listed twice. `ion_index` may be
//!   any number (taken mod n: nodes beyond n share rotations with nodes below).

use super::{by_arrival, take_run, Next, Params, Req, SchedError, Scheduler, MAX_MERGE};
use std::collections::{HashMap, VecDeque};
use tessera_proto::types::DsId;

pub struct Twins {
    servers: Vec<DsId>,
    /// Position of each server in `servers`.
    position: HashMap<DsId, usize>,
    /// One FIFO queue per server, by position.
    queues: Vec<VecDeque<Req>>,
    /// Requests for servers outside `servers`.
    others: VecDeque<Req>,
    ion_index: usize,
    window_us: u64,
    epoch_us: u64,
    len: usize,
}

impl Twins {
    pub fn new(p: &Params) -> Result<Twins, SchedError> {
        if p.servers.is_empty() {
            return Err(SchedError::NoServers);
        }
        if p.window_us == 0 {
            return Err(SchedError::ZeroWindow);
        }
        let mut position = HashMap::new();
        for (i, &ds) in p.servers.iter().enumerate() {
            if position.insert(ds, i).is_some() {
                return Err(SchedError::ServerTwice(ds));
            }
        }
        Ok(Twins {
            servers: p.servers.clone(),
            position,
            queues: vec![VecDeque::new(); p.servers.len()],
            others: VecDeque::new(),
            ion_index: p.ion_index,
            window_us: p.window_us,
            epoch_us: p.epoch_us,
            len: 0,
        })
    }

    /// The slot `now_us` falls in.
    pub fn slot(&self, now_us: u64) -> u64 {
        now_us.saturating_sub(self.epoch_us) / self.window_us
    }

    /// When the window containing `now_us` ends (the next slot's start).
    pub fn window_end(&self, now_us: u64) -> u64 {
        let start = self.epoch_us.saturating_add(self.slot(now_us).saturating_mul(self.window_us));
        start.saturating_add(self.window_us)
    }

    /// The data server this forwarding node serves at `now_us`.
    pub fn server_at(&self, now_us: u64) -> DsId {
        self.servers[self.position_at(now_us)]
    }

    fn position_at(&self, now_us: u64) -> usize {
        let n = self.servers.len() as u64;
        ((self.ion_index as u64 % n + self.slot(now_us) % n) % n) as usize
    }
}

impl Scheduler for Twins {
    fn name(&self) -> &'static str {
        "twins"
    }

    fn push(&mut self, r: Req) {
        match self.position.get(&r.ds) {
            Some(&i) => self.queues[i].push_back(r),
            None => self.others.push_back(r),
        }
        self.len += 1;
    }

    fn next(&mut self, now_us: u64) -> Next {
        if self.len == 0 {
            return Next::Idle;
        }
        let pos = self.position_at(now_us);
        let q = if self.others.is_empty() { &mut self.queues[pos] } else { &mut self.others };
        if q.is_empty() {
            return Next::WaitUntil(self.window_end(now_us));
        }
        let run = take_run(q, MAX_MERGE);
        self.len -= run.len();
        Next::Release(run)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn depths(&self) -> Vec<(String, usize)> {
        let mut out: Vec<_> =
            self.servers.iter().zip(&self.queues).map(|(ds, q)| (format!("ds {ds}"), q.len())).collect();
        if !self.others.is_empty() {
            out.push(("other ds".to_string(), self.others.len()));
        }
        out
    }

    fn take_all(&mut self) -> Vec<Req> {
        self.len = 0;
        let mut all: Vec<Req> = self.others.drain(..).collect();
        for q in &mut self.queues {
            all.extend(q.drain(..));
        }
        by_arrival(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::tests::{released, req, seqs};
    use crate::sched::Op;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::{BTreeMap, BTreeSet};

    fn params(servers: &[DsId], ion_index: usize, window_us: u64, epoch_us: u64) -> Params {
        Params { window_us, quantum: 8, servers: servers.to_vec(), ion_index, epoch_us }
    }

    /// A request to server `ds` (object per server, offsets far apart: nothing merges).
    fn to(seq: u64, ds: DsId) -> Req {
        req(seq, ds, 1, Op::Read, seq * 1000, 10)
    }

    #[test]
    fn twins_new_refuses_bad_params() {
        assert!(Twins::new(&params(&[], 0, 1000, 0)).is_err());
        assert!(Twins::new(&params(&[1, 2], 0, 0, 0)).is_err());
        assert!(Twins::new(&params(&[1, 2, 1], 0, 1000, 0)).is_err());
        assert!(Twins::new(&params(&[1], 5, 1, 0)).is_ok());
    }

    #[test]
    fn twins_rotation_follows_ion_index_and_epoch() {
        let t = Twins::new(&params(&[10, 20, 30, 40], 1, 100, 1000)).unwrap();
        assert_eq!(t.slot(1000), 0);
        assert_eq!(t.server_at(1000), 20); // ION 1 starts at the second server
        assert_eq!(t.server_at(1099), 20);
        assert_eq!(t.server_at(1100), 30);
        assert_eq!(t.server_at(1250), 40);
        assert_eq!(t.server_at(1350), 10); // (1 + 3) mod 4
        assert_eq!(t.server_at(1450), 20);
        assert_eq!(t.window_end(1250), 1300);
        // Before the epoch: slot 0, which ends one window after the epoch.
        assert_eq!(t.slot(5), 0);
        assert_eq!(t.window_end(5), 1100);
        // ion_index 5 with 4 servers rotates like ion_index 1.
        let t5 = Twins::new(&params(&[10, 20, 30, 40], 5, 100, 1000)).unwrap();
        assert!((1000..2000).step_by(37).all(|now| t5.server_at(now) == t.server_at(now)));
    }

    #[test]
    fn twins_releases_only_the_window_server_and_waits_out_the_window() {
        let mut t = Twins::new(&params(&[0, 1, 2, 3], 0, 100, 0)).unwrap();
        t.push(to(0, 1));
        t.push(to(1, 2));
        t.push(to(2, 1));
        // Slot 0 is server 0's: nothing for it, so wait for the end of the window, although servers 1
        // and 2 have requests.
        assert_eq!(t.next(0), Next::WaitUntil(100));
        assert_eq!(t.next(99), Next::WaitUntil(100));
        // Slot 1: server 1's requests, in arrival order, then wait again (server 2 must wait its turn).
        assert_eq!(released(t.next(100)), vec![0]);
        assert_eq!(released(t.next(150)), vec![2]);
        assert_eq!(t.next(150), Next::WaitUntil(200));
        assert_eq!(released(t.next(200)), vec![1]);
        assert_eq!(t.next(200), Next::Idle);
    }

    #[test]
    fn twins_never_skips_an_empty_server() {
        let mut t = Twins::new(&params(&[0, 1, 2, 3], 0, 100, 0)).unwrap();
        t.push(to(0, 3));
        assert_eq!(t.next(0), Next::WaitUntil(100)); // server 0
        assert_eq!(t.next(100), Next::WaitUntil(200)); // server 1
        assert_eq!(t.next(200), Next::WaitUntil(300)); // server 2
        assert_eq!(released(t.next(300)), vec![0]); // server 3
                                                    // Next round: still one window per server.
        t.push(to(1, 0));
        assert_eq!(t.next(350), Next::WaitUntil(400));
        assert_eq!(released(t.next(400)), vec![1]);
    }

    #[test]
    fn twins_merges_contiguous_runs_of_the_window_server() {
        let mut t = Twins::new(&params(&[0, 1], 0, 100, 0)).unwrap();
        t.push(req(0, 0, 1, Op::Read, 0, 10));
        t.push(req(1, 1, 1, Op::Read, 10, 10)); // contiguous offsets but another server's object
        t.push(req(2, 0, 1, Op::Read, 20, 10)); // gap
        t.push(req(3, 0, 1, Op::Read, 10, 10));
        let mut b = req(4, 0, 1, Op::Read, 30, 10);
        b.job = "job-b".into();
        t.push(b);
        for i in 0..20 {
            t.push(req(10 + i, 0, 2, Op::Write, i * 10, 10));
        }
        assert_eq!(released(t.next(0)), vec![0, 3, 2]);
        assert_eq!(released(t.next(0)), vec![4]);
        assert_eq!(released(t.next(0)), (10..26).collect::<Vec<_>>()); // MAX_MERGE
        assert_eq!(released(t.next(0)), (26..30).collect::<Vec<_>>());
        assert_eq!(t.next(0), Next::WaitUntil(100));
        assert_eq!(released(t.next(100)), vec![1]);
    }

    #[test]
    fn twins_releases_unknown_servers_in_any_window() {
        let mut t = Twins::new(&params(&[0, 1], 0, 100, 0)).unwrap();
        t.push(to(0, 1));
        t.push(to(1, 7)); // server 7 is not in the rotation
        assert_eq!(t.depths(), vec![("ds 0".to_string(), 0), ("ds 1".to_string(), 1), ("other ds".to_string(), 1)]);
        assert_eq!(released(t.next(0)), vec![1]);
        assert_eq!(t.next(0), Next::WaitUntil(100));
        assert_eq!(released(t.next(100)), vec![0]);
    }

    #[test]
    fn twins_take_all_is_arrival_order() {
        let mut t = Twins::new(&params(&[0, 1, 2], 0, 100, 0)).unwrap();
        for (seq, ds) in [(0, 2), (1, 0), (2, 9), (3, 1), (4, 2)] {
            t.push(to(seq, ds));
        }
        assert_eq!(released(t.next(0)), vec![2]);
        assert_eq!(seqs(&t.take_all()), vec![0, 1, 3, 4]);
        assert_eq!(t.len(), 0);
        assert_eq!(t.next(0), Next::Idle);
    }

    /// Runs `ions` TWINS nodes (ion_index 0..ions, same epoch and window) over `slots` windows with
    /// random arrivals and random times of asking; returns, per ION, the `(slot, server)` of every
    /// request released, and checks every request was released exactly once.
    fn simulate(
        seed: u64,
        servers: &[DsId],
        ions: usize,
        window_us: u64,
        epoch_us: u64,
        slots: u64,
    ) -> Vec<Vec<(u64, DsId)>> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut nodes: Vec<Twins> =
            (0..ions).map(|k| Twins::new(&params(servers, k, window_us, epoch_us)).unwrap()).collect();
        let mut out = vec![Vec::new(); ions];
        let mut pushed = vec![BTreeSet::new(); ions];
        let mut now = epoch_us;
        let end = epoch_us + slots * window_us;
        let mut seq = 0;
        while now < end {
            for (k, node) in nodes.iter_mut().enumerate() {
                for _ in 0..rng.gen_range(0..3) {
                    let ds = servers[rng.gen_range(0..servers.len())];
                    let mut r = req(seq, ds, rng.gen_range(1..4), Op::Read, rng.gen_range(0..8) * 10, 10);
                    r.arrival_us = now;
                    pushed[k].insert(seq);
                    seq += 1;
                    node.push(r);
                }
                for _ in 0..rng.gen_range(0..4) {
                    match node.next(now) {
                        Next::Release(run) => {
                            assert!(!run.is_empty() && run.len() <= MAX_MERGE);
                            for r in run {
                                assert!(pushed[k].remove(&r.seq), "seq {} released twice or never pushed", r.seq);
                                out[k].push((node.slot(now), r.ds));
                            }
                        }
                        Next::WaitUntil(t) => assert!(t > now && t <= node.window_end(now)),
                        Next::Idle => assert!(node.is_empty()),
                    }
                }
            }
            now += rng.gen_range(1..window_us / 2);
        }
        for (k, node) in nodes.iter_mut().enumerate() {
            for r in node.take_all() {
                assert!(pushed[k].remove(&r.seq));
            }
            assert!(pushed[k].is_empty(), "ION {k} lost requests");
        }
        out
    }

    #[test]
    fn twins_invariant_one_server_per_window() {
        let servers = [3, 1, 4, 0, 5];
        for seed in 0..5 {
            let epoch = 1_700_000_000_000_000 + seed * 333;
            for (k, got) in simulate(seed, &servers, 3, 1000, epoch, 60).into_iter().enumerate() {
                assert!(!got.is_empty());
                let mut per_slot: BTreeMap<u64, BTreeSet<DsId>> = BTreeMap::new();
                for (slot, ds) in got {
                    per_slot.entry(slot).or_default().insert(ds);
                }
                for (slot, targets) in per_slot {
                    let expected = servers[(k + slot as usize) % servers.len()];
                    assert_eq!(targets, BTreeSet::from([expected]), "ION {k} slot {slot}");
                }
            }
        }
    }

    #[test]
    fn twins_invariant_aligned_ions_never_share_a_server_in_a_slot() {
        let servers = [0, 1, 2, 3];
        for ions in 1..=servers.len() {
            for seed in 0..4 {
                let runs = simulate(100 + seed, &servers, ions, 125, 42, 80);
                let mut targets: BTreeMap<(u64, DsId), BTreeSet<usize>> = BTreeMap::new();
                for (k, got) in runs.iter().enumerate() {
                    for &(slot, ds) in got {
                        targets.entry((slot, ds)).or_default().insert(k);
                    }
                }
                assert!(targets.len() > 40, "too few releases to test ({})", targets.len());
                for ((slot, ds), nodes) in targets {
                    assert_eq!(nodes.len(), 1, "{ions} IONs: slot {slot} server {ds} targeted by {nodes:?}");
                }
            }
        }
    }
}
