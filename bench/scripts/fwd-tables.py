#!/usr/bin/env python3
"""The forwarding experiments' results as markdown tables, with the issue's comparisons against the thesis.

    python3 bench/scripts/fwd-tables.py [RESULTS_DIR]     (default: results)

Reads RESULTS_DIR/fwd-{schedulers,ions,twins-window,two-apps}.json (and the *-trace.json files when present)
written by `tessera-bench experiment fwd-*`, and prints what the closing note of issue 14 quotes.
"""
import json
import os
import sys

out = sys.argv[1] if len(sys.argv) > 1 else "results"


def load(name):
    path = os.path.join(out, name + ".json")
    return json.load(open(path)) if os.path.exists(path) else None


def label(r):
    w = r.get("window_ms")
    return f"twins {w:g} ms" if r["scheduler"] == "twins" and w is not None else r["scheduler"]


def uniq(items):
    """The distinct items, in first-seen order."""
    return list(dict.fromkeys(items))


def pct(a, b):
    if a != a or b != b or not b:  # a configuration the run did not measure (--quick)
        return "n/a"
    return f"{(a / b - 1) * 100:+.0f}%"


sched = load("fwd-schedulers")
if sched:
    names = uniq(label(r) for r in sched)
    print("### fwd-schedulers (4 IONs; MiB/s, medians of %d)" % sched[0]["runs"])
    print("| pattern | op | KiB | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    keys = uniq((r["pattern"], r["op"], r["request_kib"]) for r in sched)
    val = {(r["pattern"], r["op"], r["request_kib"], label(r)): r["throughput_mib_s"] for r in sched}
    for k in keys:
        row = [f"{val.get(k + (n,), float('nan')):.1f}" for n in names]
        best = max(names, key=lambda n: val.get(k + (n,), 0))
        row = [f"**{v}**" if n == best else v for n, v in zip(names, row)]
        print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(row) + " |")
    print()

    def v(p, op, kib, n):
        return val.get((p, op, kib, n), float("nan"))

    print("| comparison | thesis | here |")
    print("|---|---|---|")
    tw = "twins 1 ms"
    for p, th in (("strided", "+46.9% / +24% (+22.3% over HBRR)"), ("contiguous", "+43.7% / +19.9%")):
        print(f"| small {p} reads: TWINS vs none / FIFO / HBRR | {th} | "
              f"{pct(v(p, 'read', 32, tw), v(p, 'read', 32, 'none'))} / {pct(v(p, 'read', 32, tw), v(p, 'read', 32, 'fifo'))} / "
              f"{pct(v(p, 'read', 32, tw), v(p, 'read', 32, 'hbrr'))} |")
    print("| small reads: FIFO vs none (fpp / contiguous / strided) | up to +35.8% | " + " / ".join(
        pct(v(p, "read", 32, "fifo"), v(p, "read", 32, "none")) for p in ("fpp", "contiguous", "strided")) + " |")
    print("| small reads: FIFO vs HBRR (fpp / contiguous / strided) | no difference | " + " / ".join(
        pct(v(p, "read", 32, "fifo"), v(p, "read", 32, "hbrr")) for p in ("fpp", "contiguous", "strided")) + " |")
    print(f"| small strided reads: MLF vs FIFO | +14.2% | {pct(v('strided', 'read', 32, 'mlf'), v('strided', 'read', 32, 'fifo'))} |")
    print("| SW vs FIFO (small reads: fpp / contiguous / strided) | no gain | " + " / ".join(
        pct(v(p, "read", 32, "sw"), v(p, "read", 32, "fifo")) for p in ("fpp", "contiguous", "strided")) + " |")
    print(f"| large strided reads: TWINS vs none / HBRR | +24.7% / +21.1% | "
          f"{pct(v('strided', 'read', 256, tw), v('strided', 'read', 256, 'none'))} / {pct(v('strided', 'read', 256, tw), v('strided', 'read', 256, 'hbrr'))} |")
    print("| writes: FIFO vs none (32 KiB fpp / contiguous / strided) | no gain, slower | " + " / ".join(
        pct(v(p, "write", 32, "fifo"), v(p, "write", 32, "none")) for p in ("fpp", "contiguous", "strided")) + " |")
    print("| writes: FIFO vs none (256 KiB fpp / contiguous / strided) | no gain, slower | " + " / ".join(
        pct(v(p, "write", 256, "fifo"), v(p, "write", 256, "none")) for p in ("fpp", "contiguous", "strided")) + " |")
    print()

ions = load("fwd-ions")
if ions:
    print("### fwd-ions (reads; MiB/s; 'none' measured on each cluster)")
    print("| pattern | KiB | IONs | none | fifo | hbrr | twins 1 ms | best |")
    print("|---|---|---|---|---|---|---|---|")
    # Records come per cluster in order: none (ions 0) then the schedulers of that cluster.
    groups, cur = [], []
    for r in ions:
        if r["scheduler"] == "none" and cur:
            groups.append(cur)
            cur = []
        cur.append(r)
    if cur:
        groups.append(cur)
    for g in groups:
        n = max(r["ions"] for r in g)
        d = {label(r): r["throughput_mib_s"] for r in g}
        best = max(d, key=d.get)
        print(f"| {g[0]['pattern']} | {g[0]['request_kib']} | {n} | " + " | ".join(
            f"{d.get(k, float('nan')):.1f}" for k in ("none", "fifo", "hbrr", "twins 1 ms")) + f" | {best} |")
    print()

win = load("fwd-twins-window")
if win:
    print("### fwd-twins-window (4 IONs, 32 KiB reads; MiB/s)")
    names = uniq(label(r) for r in win)
    print("| pattern | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for p in ("strided", "contiguous"):
        d = {label(r): r["throughput_mib_s"] for r in win if r["pattern"] == p}
        if d:
            print(f"| {p} | " + " | ".join(f"{d.get(n, float('nan')):.1f}" for n in names) + " |")
    print()

two = load("fwd-two-apps")
if two:
    print("### fwd-two-apps (two applications of 64 processes, 32 KiB strided reads, 4 IONs)")
    print("| scheduler | MiB/s | makespan s | app0 s | app1 s |")
    print("|---|---|---|---|---|")
    for r in two:
        a = r.get("app_makespans_s") or [float("nan")] * 2
        print(f"| {label(r)} | {r['throughput_mib_s']:.1f} | {r['makespan_s']:.2f} | {a[0]:.2f} | {a[1]:.2f} |")
    print()

for name in ("fwd-schedulers-trace", "fwd-twins-window-trace"):
    t = load(name)
    if not t:
        continue
    print(f"### {name} (32 KiB strided reads, first run; per data server, mean over the servers)")
    print("| scheduler | requests/server | mean gap KiB | contiguous | process-group switches |")
    print("|---|---|---|---|---|")
    for s in uniq(r["scheduler"] for r in t):
        rs = [r for r in t if r["scheduler"] == s]
        m = lambda k: sum(r[k] for r in rs) / len(rs)
        print(f"| {s} | {m('requests'):.0f} | {m('mean_gap_kib'):.0f} | {m('contiguous_fraction') * 100:.0f}% | "
              f"{m('source_switch_fraction') * 100:.0f}% |")
    print()
