use super::online::{simulate, Baselines, Policy};
use super::table1::{self, PLATFORM};
use super::*;

/// The invariants of the spec, checked on a pattern: bandwidth limits hold on every interval (shared B and
/// per-node b), each instance moves exactly vol, an instance's transfer never overlaps its own compute nor
/// another of its instances, and a rejected application is never accepted later.
fn check(pat: &Pattern) {
    let p = *pat.platform();
    let t = pat.period();
    let apps = pat.apps();
    let ivs = pat.intervals();
    assert_eq!(ivs[0].0, 0.0);
    assert_eq!(ivs.last().unwrap().1, t);
    for w in ivs.windows(2) {
        assert_eq!(w[0].1, w[1].0, "intervals tile [0, T)");
    }
    // Recompute the shared bandwidth of every interval from the pieces.
    let mut sum = vec![0.0; ivs.len()];
    for (k, a) in apps.iter().enumerate() {
        let mut per_app = vec![0.0; ivs.len()];
        for inst in pat.instances(k) {
            let moved: f64 = inst.pieces.iter().map(|pc| pc.volume()).sum();
            assert!((moved - a.vol).abs() <= a.vol * 1e-9, "app {k} instance moves {moved}, vol {}", a.vol);
            for pc in &inst.pieces {
                assert!(pc.start >= 0.0 && pc.end <= t && pc.start < pc.end, "{pc:?}");
                assert!(pc.bw <= p.peak(a) * (1.0 + 1e-12), "app {k} above min(βb, B)");
                for (i, iv) in ivs.iter().enumerate() {
                    let ov = iv.1.min(pc.end) - iv.0.max(pc.start);
                    if ov > 0.0 {
                        assert!(ov >= (iv.1 - iv.0) * (1.0 - 1e-9), "a piece covers whole intervals");
                        per_app[i] += pc.bw;
                    }
                }
            }
        }
        for (i, u) in per_app.iter().enumerate() {
            // One transfer of App k at a time, so each node stays within b.
            assert!(*u <= p.peak(a) * (1.0 + 1e-9), "app {k} sends {u} in interval {i}: per-node limit b");
            sum[i] += u;
        }
        // Compute and transfers of App k never overlap: total busy time within one period.
        let n = pat.instances(k).len() as f64;
        let io_time: f64 = pat.instances(k).iter().flat_map(|i| &i.pieces).map(|pc| pc.end - pc.start).sum();
        assert!(n * a.w + io_time <= t * (1.0 + 1e-9), "app {k} is busy longer than T");
    }
    for (i, iv) in ivs.iter().enumerate() {
        assert!(iv.2 <= p.big_b * (1.0 + 1e-9), "interval {iv:?} above B");
        assert!((iv.2 - sum[i]).abs() <= p.big_b * 1e-9, "interval {i}: used {} vs pieces {}", iv.2, sum[i]);
    }
    let mut rejected = vec![false; apps.len()];
    for &(k, ok) in pat.attempts() {
        assert!(!(rejected[k] && ok), "app {k} accepted after a rejection");
        if !ok {
            rejected[k] = true;
        }
    }
}

/// Compute intervals of an instance do not overlap the instance's own transfer nor the next instance.
fn check_windows(pat: &Pattern) {
    let t = pat.period();
    for (k, a) in pat.apps().iter().enumerate() {
        let insts = pat.instances(k);
        for (i, inst) in insts.iter().enumerate() {
            // Unwrapped: the pieces follow the compute end in order, all before the next instance's compute.
            let next = insts[(i + 1) % insts.len()].compute_start;
            let mut next_u = next;
            while next_u <= inst.compute_start + 1e-9 * t {
                next_u += t;
            }
            let mut cur = inst.compute_start + a.w;
            for pc in &inst.pieces {
                let mut s = pc.start;
                while s < cur - 1e-6 * t {
                    s += t;
                }
                assert!(s + (pc.end - pc.start) <= next_u + 1e-6 * t, "app {k} instance {i} runs into the next");
                cur = s + (pc.end - pc.start);
            }
        }
    }
}

fn plan(set: usize) -> Plan {
    persched(&PLATFORM, &table1::set(set).unwrap(), Params::default()).unwrap()
}

#[test]
fn upper_bound_is_the_formula_for_every_set() {
    for set in 1..=10 {
        let apps = table1::set(set).unwrap();
        assert_eq!(apps.iter().map(|a| a.beta).sum::<f64>(), 640.0, "set {set} fills the machine");
        let ub = PLATFORM.upper_bound(&apps);
        let want = table1::TABLE4[set - 1].0;
        assert!((ub - want).abs() < 0.0005, "set {set}: UB {ub} vs Table 4 {want}");
    }
    // Set 1 by hand: ten T2, time_io = 235.8 / min(64 * 0.01, 3) = 368.4375 s.
    let rho = 76.8 / (76.8 + 368.4375);
    assert!((PLATFORM.upper_bound(&table1::set(1).unwrap()) - rho).abs() < 1e-12);
}

#[test]
fn time_io_uses_the_smaller_of_beta_b_and_b() {
    // T1: 512 nodes × 0.01 = 5.12 GB/s > B = 3 GB/s.
    assert!((PLATFORM.time_io(&table1::T1) - 128.2 / 3.0).abs() < 1e-12);
    // T2: 64 × 0.01 = 0.64 GB/s < B.
    assert!((PLATFORM.time_io(&table1::T2) - 235.8 / 0.64).abs() < 1e-12);
}

#[test]
fn every_returned_pattern_keeps_the_invariants() {
    for set in [1, 2, 3, 4, 6, 7, 8, 9, 10] {
        let pl = plan(set);
        check(&pl.pattern);
        check_windows(&pl.pattern);
        assert!(pl.loop2_iterations <= 100, "set {set}: loop 2 ran {} times", pl.loop2_iterations);
        assert!(pl.pattern.counts().iter().all(|&n| n >= 1), "set {set}: every app has an instance");
    }
}

#[test]
fn every_swept_pattern_keeps_the_invariants() {
    // Not only the returned one: every size loop 1 tries for a mixed set.
    let apps = table1::set(2).unwrap();
    let t_min = apps.iter().map(|a| a.w + PLATFORM.time_io(a)).fold(0.0, f64::max);
    let mut t = t_min;
    while t <= 3.0 * t_min {
        let pat = build(&PLATFORM, &apps, t);
        check(&pat);
        check_windows(&pat);
        t *= 1.07;
    }
}

#[test]
fn loop2_runs_at_most_ceil_one_over_epsilon_times() {
    for eps in [0.5, 0.3, 0.1, 0.05, 0.01] {
        for set in [1, 3, 7, 10] {
            let pl = persched(
                &PLATFORM,
                &table1::set(set).unwrap(),
                Params { k_prime: 3.0, epsilon: eps, sweep_from: None },
            )
            .unwrap();
            assert!(pl.loop2_iterations <= (1.0 / eps).ceil() as usize, "eps {eps} set {set}");
            check(&pl.pattern);
        }
    }
}

#[test]
fn rule_t_min_is_the_longest_congestion_free_instance() {
    let pl = plan(7);
    let want = (table1::T1.w + PLATFORM.time_io(&table1::T1)).max(table1::T2.w + PLATFORM.time_io(&table1::T2));
    assert_eq!(pl.t_min, want);
}

#[test]
fn rule_the_sweep_is_exponential_up_to_k_prime_t_min() {
    let pl = persched(&PLATFORM, &table1::set(10).unwrap(), Params { k_prime: 10.0, epsilon: 0.01, sweep_from: None })
        .unwrap();
    // T_min (1+ε)^i <= 10 T_min for i = 0..=231.
    let want = (10f64.ln() / 1.01f64.ln()).floor() as usize + 1;
    assert_eq!(pl.loop1_iterations, want);
    assert!(pl.t_sweep >= pl.t_min && pl.t_sweep <= 10.0 * pl.t_min * (1.0 + 1e-9));
}

#[test]
fn rule_loop2_shortens_a_period_holding_the_same_instances() {
    // One application alone: every size holds one instance once T >= w + time_io, and the sweep keeps
    // T_min; loop 2 then finds no shorter size (below T_min the instance does not fit).
    let app = App { beta: 10.0, w: 100.0, vol: 10.0 };
    let p = Platform { nodes: 10.0, b: 0.1, big_b: 1.0 };
    let pl = persched(&p, &[app], Params::default()).unwrap();
    assert_eq!(pl.pattern.counts(), vec![1]);
    assert!((pl.pattern.period() - 110.0).abs() < 1e-9);
    assert!(!pl.loop2_shortened);
    assert_eq!(pl.loop2_iterations, 1);
    assert!((pl.pattern.dilation() - 1.0).abs() < 1e-9);
    // Two apps whose best pattern has slack: loop 2 must shorten it while the counts stay.
    let apps = table1::set(1).unwrap();
    let pl = persched(&PLATFORM, &apps, Params::default()).unwrap();
    if pl.loop2_shortened {
        assert!(pl.pattern.period() < pl.t_sweep);
        assert_eq!(pl.pattern.counts(), build(&PLATFORM, &apps, pl.t_sweep).counts());
    }
}

#[test]
fn rule_loop2_stops_at_the_first_size_that_loses_an_instance() {
    // Period slightly above what three instances of a lone app need: loop 2 shortens to just above 3 × 110.
    let app = App { beta: 10.0, w: 100.0, vol: 10.0 };
    let p = Platform { nodes: 10.0, b: 0.1, big_b: 1.0 };
    let pat = build(&p, &[app], 335.0);
    assert_eq!(pat.counts(), vec![3]);
    let pat = build(&p, &[app], 329.0);
    assert_eq!(pat.counts(), vec![2]);
}

#[test]
fn rule_worst_dilation_first_and_every_app_gets_a_first_instance_first() {
    let apps = table1::set(2).unwrap();
    let pat = build(&PLATFORM, &apps, 20000.0);
    // The first K attempts are the first instances of all K apps.
    let first: Vec<usize> = pat.attempts().iter().take(apps.len()).map(|&(k, _)| k).collect();
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(sorted, (0..apps.len()).collect::<Vec<_>>());
    // Ties at infinite dilation go to the larger w / time_io: AP (index 8) before any T2.
    assert_eq!(first[0], 8);
    // Later: each accepted pick had the largest ρ/ρ̃ among the candidates (replayed on a fresh pattern).
    let mut replay = Pattern::new(PLATFORM, apps.clone(), 20000.0);
    let mut out: Vec<bool> = vec![false; apps.len()];
    for &(k, ok) in pat.attempts() {
        let dil = |kk: usize| {
            let r = replay.rho_tilde(kk);
            if r > 0.0 {
                PLATFORM.rho(&apps[kk]) / r
            } else {
                f64::INFINITY
            }
        };
        for (j, &gone) in out.iter().enumerate() {
            if !gone {
                assert!(dil(j) <= dil(k), "picked {k} ({}) while {j} had {}", dil(k), dil(j));
            }
        }
        assert_eq!(replay.insert(k), ok);
        if !ok {
            out[k] = true;
        }
    }
}

#[test]
fn rule_a_rejected_app_is_never_tried_again() {
    let apps = table1::set(3).unwrap();
    let mut pat = build(&PLATFORM, &apps, 12000.0);
    for k in 0..apps.len() {
        assert!(pat.rejected(k), "the build ends only when every app was rejected once");
        let before = pat.counts();
        assert!(!pat.insert(k));
        assert_eq!(pat.counts(), before);
    }
}

#[test]
fn rule_next_instance_follows_the_last_inserted_one() {
    // A lone app: instances back to back, compute then transfer at min(βb, B).
    let app = App { beta: 10.0, w: 100.0, vol: 10.0 };
    let p = Platform { nodes: 10.0, b: 0.1, big_b: 1.0 };
    let pat = build(&p, &[app], 400.0);
    let insts = pat.instances(0);
    assert_eq!(insts.len(), 3);
    for (i, inst) in insts.iter().enumerate() {
        assert_eq!(inst.pieces.len(), 1);
        assert!((inst.pieces[0].bw - 1.0).abs() < 1e-12);
        let cs = (insts[0].compute_start + 110.0 * i as f64).rem_euclid(400.0);
        assert!((inst.compute_start - cs).abs() < 1e-9, "instance {i} at {}", inst.compute_start);
    }
}

#[test]
fn rule_insertion_takes_only_the_residual_bandwidth() {
    // Two apps each able to use all of B: the second's transfer avoids or shares what the first holds.
    let a = App { beta: 10.0, w: 50.0, vol: 50.0 };
    let p = Platform { nodes: 20.0, b: 0.1, big_b: 1.0 };
    let pat = build(&p, &[a, a], 200.0);
    check(&pat);
    for (s, e, u) in pat.intervals() {
        assert!(u <= 1.0 + 1e-12, "[{s}, {e}) uses {u}");
    }
}

#[test]
fn rule_first_instance_goes_where_its_transfer_is_shortest() {
    // App 0 (B-saturating) is placed first at 0; app 1's first transfer must start where B is free.
    let big = App { beta: 10.0, w: 1000.0, vol: 100.0 }; // w/time_io = 10: placed first
    let small = App { beta: 5.0, w: 100.0, vol: 25.0 }; // 0.5 GB/s, time_io 50
    let p = Platform { nodes: 15.0, b: 0.1, big_b: 1.0 };
    let mut pat = Pattern::new(p, vec![big, small], 1200.0);
    assert!(pat.insert(0));
    assert_eq!(pat.instances(0)[0].pieces, vec![Piece { start: 0.0, end: 100.0, bw: 1.0 }]);
    assert!(pat.insert(1));
    let pc = pat.instances(1)[0].pieces[0];
    assert_eq!(pc.start, 100.0, "starts when the big transfer ends");
    assert!((pc.end - 150.0).abs() < 1e-9 && (pc.bw - 0.5).abs() < 1e-12);
}

#[test]
fn rule_an_instance_fails_when_the_next_one_would_be_reached() {
    let app = App { beta: 10.0, w: 100.0, vol: 10.0 };
    let p = Platform { nodes: 10.0, b: 0.1, big_b: 1.0 };
    let mut pat = Pattern::new(p, vec![app], 219.0);
    assert!(pat.insert(0));
    assert!(!pat.insert(0), "a second instance needs 220 s");
    assert_eq!(pat.counts(), vec![1]);
    assert!(!pat.insert(0), "and stays rejected");
}

#[test]
fn rule_best_pattern_has_the_largest_syseff() {
    let apps = table1::set(4).unwrap();
    let pl = persched(&PLATFORM, &apps, Params { k_prime: 2.0, epsilon: 0.05, sweep_from: None }).unwrap();
    let mut t = pl.t_min;
    while t <= 2.0 * pl.t_min {
        assert!(build(&PLATFORM, &apps, t).syseff() <= pl.pattern.syseff() + 1e-12);
        t *= 1.05;
    }
}

#[test]
fn invalid_models_get_no_plan() {
    let p = Platform { nodes: 10.0, b: 0.1, big_b: 1.0 };
    assert!(persched(&p, &[], Params::default()).is_none());
    assert!(persched(&p, &[App { beta: 0.0, w: 1.0, vol: 1.0 }], Params::default()).is_none());
    assert!(persched(&p, &[App { beta: 1.0, w: f64::NAN, vol: 1.0 }], Params::default()).is_none());
    assert!(persched(&p, &[App { beta: 11.0, w: 1.0, vol: 1.0 }], Params::default()).is_none());
    let bad = Params { k_prime: f64::NAN, epsilon: -1.0, sweep_from: None };
    assert!(persched(&p, &[App { beta: 1.0, w: 1.0, vol: 1.0 }], bad).is_some());
}

#[test]
fn online_alone_an_app_runs_congestion_free() {
    let a = table1::T2;
    for pol in Policy::ALL {
        let o = simulate(&PLATFORM, &[a], pol, 100_000.0);
        assert!((o.rho_tilde[0] - PLATFORM.rho(&a)).abs() < 1e-9, "{pol:?}");
        assert!((o.dilation - 1.0).abs() < 1e-9);
    }
}

#[test]
fn online_no_scheduler_shares_per_node() {
    // Ten T2 in lockstep: 640 nodes want 0.01 each, B = 3 gives each 3/640: transfer 235.8 / 0.3 s.
    let apps = table1::set(1).unwrap();
    let o = simulate(&PLATFORM, &apps, Policy::Fair, 50_000.0);
    let cycle = 76.8 + 235.8 / 0.3;
    for r in &o.rho_tilde {
        assert!((r - 76.8 / cycle).abs() < 1e-6, "{r}");
    }
}

#[test]
fn online_greedy_serves_in_priority_order() {
    // Two apps request at once, each able to take all of B. MaxSysEff serves the larger β w / vol first.
    let p = Platform { nodes: 20.0, b: 0.1, big_b: 1.0 };
    let a = App { beta: 10.0, w: 100.0, vol: 100.0 }; // β w / vol = 10
    let b = App { beta: 10.0, w: 100.0, vol: 50.0 }; // 20
    let o = simulate(&p, &[a, b], Policy::MaxSysEff, 251.0);
    // b: compute 100, transfer 50 s alone → done at 150; a waits then transfers 100 s → done at 250.
    assert_eq!(o.instances, vec![1, 1]);
    assert!((o.rho_tilde[1] - 100.0 / 150.0).abs() < 1e-9);
    assert!((o.rho_tilde[0] - 100.0 / 250.0).abs() < 1e-9);
    // MinDilation: nobody is done at 100 (both infinite): earliest request, then the lower index, a first.
    let o = simulate(&p, &[a, b], Policy::MinDilation, 251.0);
    assert!((o.rho_tilde[0] - 100.0 / 200.0).abs() < 1e-9);
    assert!((o.rho_tilde[1] - 100.0 / 250.0).abs() < 1e-9);
}

#[test]
fn measures_never_exceed_the_upper_bound() {
    for set in [3, 7, 10] {
        let apps = table1::set(set).unwrap();
        let pl = plan(set);
        let base = Baselines::run(&PLATFORM, &apps, 50.0 * pl.t_min);
        assert!(pl.pattern.syseff() <= PLATFORM.upper_bound(&apps) + 1e-12);
        assert!(base.none.syseff <= PLATFORM.upper_bound(&apps) + 1e-12);
        assert!(base.online_syseff() <= PLATFORM.upper_bound(&apps) + 1e-12);
    }
}

/// The periods the authors' own run reports next to Table 4's numbers (results.txt of their simulator,
/// github.com/vlefevre/IO-scheduling-simu, whose lines 1–10 are Table 4's PerSched columns to all digits).
pub(crate) const PAPER_PERIODS: [f64; 10] =
    [8441.55, 15898.6, 15974.7, 111375.0, 494902.0, 157571.0, 36326.0, 3.95992e6, 141221.0, 126680.0];

/// Table 6: the largest number of instances of one application in the paper's pattern of each set.
const TABLE6_N_INST: [usize; 10] = [11, 25, 33, 247, 1086, 353, 81, 251, 9, 28];

#[test]
fn insert_in_pattern_reproduces_table4_at_the_papers_periods() {
    // Our instance scheduling at the period the paper chose gives the paper's pattern: Table 4's dilation
    // and SysEff to their printed digits and Table 6's instance counts, on every set.
    for set in 1..=10 {
        let apps = table1::set(set).unwrap();
        let pat = build(&PLATFORM, &apps, PAPER_PERIODS[set - 1]);
        check(&pat);
        let (_, dil, se, _, _) = table1::TABLE4[set - 1];
        assert!((pat.dilation() - dil).abs() < 0.0015, "set {set}: dilation {} vs {dil}", pat.dilation());
        assert!((pat.syseff() - se).abs() < 0.0006, "set {set}: SysEff {} vs {se}", pat.syseff());
        assert_eq!(pat.counts().into_iter().max(), Some(TABLE6_N_INST[set - 1]), "set {set}");
    }
}

#[test]
fn persched_swept_from_the_authors_starts_reproduces_table4() {
    // PERSCHED as a whole (both loops), started where the authors' sweep of each set started: it keeps
    // their period and lands on Table 4's PerSched columns (the issue asks within 2%; it is within 0.1%).
    for set in 1..=10 {
        let apps = table1::set(set).unwrap();
        let params = Params { sweep_from: Some(table1::PAPER_SWEEP_FROM[set - 1]), ..Params::default() };
        let pl = persched(&PLATFORM, &apps, params).unwrap();
        check(&pl.pattern);
        let (_, dil, se, _, _) = table1::TABLE4[set - 1];
        let period = pl.pattern.period();
        assert!((period / PAPER_PERIODS[set - 1] - 1.0).abs() < 1e-4, "set {set}: period {period}");
        assert!((pl.pattern.dilation() / dil - 1.0).abs() < 0.001, "set {set}: dilation {}", pl.pattern.dilation());
        assert!((pl.pattern.syseff() / se - 1.0).abs() < 0.001, "set {set}: SysEff {}", pl.pattern.syseff());
    }
}
