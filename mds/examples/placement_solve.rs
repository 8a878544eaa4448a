//! A quick, pure simulation of the placement policies (issue 15; spec `../shared/specs/placement.md`):
//!
//!     nice cargo run --release -p tessera-mds --example placement_solve
//!
//! 1. Solve time: a batch of 1,000 declared creates (stripe count 8) on 35 targets (7 servers × 5, unevenly
//!    used), median / min / max of 21 repetitions per policy; and the same 1,000 creates one at a time;
//!    `declare`: the same 1,000 as one declaration through the MDS's placer (`balanced`'s solve, the
//!    exchanges after it and the bookkeeping); `declare 10k`: the largest declaration (10,000 files of
//!    4.5–10.5 MiB, objects of unequal sizes), 5 repetitions.
//! 2. OST cost (max utilisation / mean) each policy reaches after placing N files of equal size on 35 targets
//!    of 10 GiB, from an empty cluster and from one pre-filled unevenly (10–60% per target). `work` is the
//!    paper's metric (bytes the workload stored / capacity); `fill` counts the pre-fill too. No I/O: every
//!    stripe holds exactly its share of the file. `balanced` places the N files as one declared batch;
//!    `balanced-1` places them one at a time (creates not declared). `lustre` is averaged over 10 seeds.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_mds::placement::{by_name, ost_cost, Balanced, CreateRequest, Lustre, Placement, TargetInfo};
use tessera_mds::placer::{DeclaredCreate, Placer};
use tessera_mds::stats::StatsView;
use tessera_proto::msg::{DsReport, TargetReport};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn cluster(prefill: bool) -> Vec<TargetInfo> {
    (0..35u32)
        .map(|i| {
            let capacity = 10 * GIB;
            // Deterministic "random" 10–60% per target.
            let pct = if prefill { 10 + (i as u64 * 37 + 11) % 51 } else { 0 };
            TargetInfo {
                server: i / 5,
                target: (i % 5) as u16,
                capacity,
                used: capacity / 100 * pct,
                server_load: 0.0,
                usable: true,
                domain: i / 5,
            }
        })
        .collect()
}

fn request(count: usize, size: u64) -> CreateRequest {
    CreateRequest { stripe_count: count, stripe_size: MIB, expected_size: size, exclude: vec![], mirrors: 1 }
}

fn median(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort_unstable();
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn policy(name: &str, seed: u64) -> Box<dyn Placement> {
    match name {
        "lustre" => Box::new(Lustre::with_seed(seed)),
        "balanced" | "balanced-1" => Box::new(Balanced::new(Lustre::with_seed(seed), 1.0)),
        other => by_name(other).expect("known policy"),
    }
}

/// Places `files` files of `size` bytes with `count` stripes; returns (work cost, fill cost).
fn simulate(name: &str, seed: u64, prefill: bool, files: usize, count: usize, size: u64) -> (f64, f64) {
    let mut t = cluster(prefill);
    let start: Vec<u64> = t.iter().map(|x| x.used).collect();
    let p = policy(name, seed);
    let reqs = vec![request(count, size); files];
    let share = size.div_ceil(count as u64);
    let layouts = if name == "balanced" {
        p.place_batch(&t, &reqs).expect("placed")
    } else {
        let mut out = Vec::new();
        for (k, r) in reqs.iter().enumerate() {
            p.set_now(Duration::from_millis(k as u64 * 10));
            let l = p.place(&t, r).expect("placed");
            for &i in &l {
                t[i].used += share;
            }
            out.push(l);
        }
        t = cluster(prefill);
        out
    };
    for l in &layouts {
        for &i in l {
            t[i].used += share;
        }
    }
    let work: Vec<f64> = t.iter().zip(&start).map(|(x, s)| (x.used - s) as f64 / x.capacity as f64).collect();
    let fill: Vec<f64> = t.iter().map(|x| x.used as f64 / x.capacity as f64).collect();
    (ost_cost(&work), ost_cost(&fill))
}

/// A placer whose statistics show the targets `t` (7 servers × 5).
fn declared_placer(t: &[TargetInfo]) -> Placer {
    let stats = StatsView::new((0..7).map(|i| (i, String::new())).collect())
        .with_target_counts((0..7).map(|i| (i, 5)).collect());
    for ds in 0..7u32 {
        let targets = t
            .iter()
            .filter(|x| x.server == ds)
            .map(|x| TargetReport {
                target: x.target,
                capacity: x.capacity,
                used: x.used,
                free: x.free(),
                enforced: true,
                ..Default::default()
            })
            .collect();
        stats.record(DsReport { ds, targets, ..Default::default() });
    }
    Placer::new(Arc::new(stats), "balanced", Duration::from_secs(1)).expect("placer")
}

/// Median, min and max over `reps` of one declaration of `files` files of `size(k)` bytes and 8 stripes
/// under `balanced`, each on a fresh placer over the targets `t`.
fn time_declare(
    t: &[TargetInfo],
    reps: usize,
    files: usize,
    size: impl Fn(usize) -> u64,
) -> (Duration, Duration, Duration) {
    let mut times = Vec::new();
    for _ in 0..reps {
        let placer = declared_placer(t);
        let batch = (0..files).map(|k| DeclaredCreate::plain(1, format!("f{k}"), request(8, size(k)))).collect();
        let s = Instant::now();
        assert_eq!(placer.declare(Some("balanced"), batch).expect("declared"), files);
        times.push(s.elapsed());
    }
    median(times)
}

fn main() {
    println!("# Solve time: 1,000 creates x 8 stripes (64 MiB each) on 7 x 5 targets of 10 GiB, 10-60% used");
    println!("{:<12} {:>12} {:>12} {:>12} {:>16}", "policy", "median", "min", "max", "one-at-a-time");
    let t = cluster(true);
    let batch = vec![request(8, 64 * MIB); 1000];
    for name in ["round-robin", "lustre", "balanced"] {
        let p = policy(name, 1);
        let mut times = Vec::new();
        for _ in 0..21 {
            let s = Instant::now();
            let out = p.place_batch(&t, &batch).expect("placed");
            times.push(s.elapsed());
            assert_eq!(out.len(), 1000);
        }
        if let Some(s) = p.last_solve() {
            assert!(!s.fallback, "balanced fell back");
        }
        let (med, min, max) = median(times);
        // One at a time: 1,000 single-request calls (the caller accounts each file's space).
        let mut singles = Vec::new();
        for _ in 0..21 {
            let mut t = t.clone();
            let s = Instant::now();
            for r in &batch {
                for i in p.place(&t, r).expect("placed") {
                    t[i].used += 8 * MIB;
                }
            }
            singles.push(s.elapsed());
        }
        let (one, _, _) = median(singles);
        println!("{name:<12} {med:>12.2?} {min:>12.2?} {max:>12.2?} {one:>16.2?}");
    }
    // What `tessera declare` costs the MDS: the placer's whole declaration (the view, the solve, the
    // exchanges after it, the bookkeeping), a fresh placer each time.
    let (med, min, max) = time_declare(&t, 21, 1000, |_| 64 * MIB);
    println!("{:<12} {med:>12.2?} {min:>12.2?} {max:>12.2?} {:>16}", "declare", "-");
    // The largest declaration the MDS takes (10,000 files), of sizes that are not whole stripe rows (so the
    // objects differ and the exchanges after the solve have work): bounded by REFINE_WORK.
    let (med, min, max) = time_declare(&t, 5, 10_000, |k| (4 + k as u64 % 7) * MIB + 512 * 1024);
    println!("{:<12} {med:>12.2?} {min:>12.2?} {max:>12.2?} {:>16}", "declare 10k", "-");

    println!();
    println!("# OST cost = max/mean utilisation after N equal files on 35 x 10 GiB (work: workload bytes; fill: incl. pre-fill)");
    let workloads: [(&str, usize, usize, u64); 5] = [
        ("IOR FPP 32 GB (16 x 2 GiB, c8)", 16, 8, 2 * GIB),
        ("IOR FPP 128 GB (16 x 8 GiB, c8)", 16, 8, 8 * GIB),
        ("HACC-I/O 16 x 0.73 GiB, c8", 16, 8, 11_700 * MIB / 16),
        ("100 x 1 GiB, c4", 100, 4, GIB),
        ("1000 x 64 MiB, c8", 1000, 8, 64 * MIB),
    ];
    let policies = ["round-robin", "lustre", "balanced", "balanced-1"];
    for prefill in [false, true] {
        println!();
        println!("## prefill: {}", if prefill { "uneven 10-60%" } else { "empty" });
        print!("{:<34}", "workload");
        for p in policies {
            print!(" {:>20}", format!("{p} work/fill"));
        }
        println!();
        for (label, files, count, size) in workloads {
            print!("{label:<34}");
            for name in policies {
                let seeds: Vec<u64> = if name == "lustre" { (1..=10).collect() } else { vec![1] };
                let runs: Vec<(f64, f64)> =
                    seeds.iter().map(|&s| simulate(name, s, prefill, files, count, size)).collect();
                let n = runs.len() as f64;
                let work = runs.iter().map(|r| r.0).sum::<f64>() / n;
                let fill = runs.iter().map(|r| r.1).sum::<f64>() / n;
                print!(" {:>20}", format!("{work:.2}/{fill:.2}"));
            }
            println!();
        }
    }
}
