#!/usr/bin/env python3
"""Medians per build of ab.sh's JSON lines, and new ÷ base.
usage: summary.py AB.jsonl"""
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def flat(r):
    out = {}
    for k in ("mdtest", "ior"):
        for m, v in r.get(k, {}).items():
            out[f"{k} {m}"] = v
    for m, v in r.get("fio", {}).items():
        for s, x in v.items():
            out[f"fio {m} {s}"] = x
    return out
by = {}
for r in rows:
    by.setdefault(r["label"], []).append(flat(r))
keys = list(flat(rows[0]).keys())
print(f"{'metric':40} {'base':>12} {'new':>12} {'new/base':>9}   (medians of {len(by.get('base', []))} and {len(by.get('new', []))} runs)")
ratios = {}
for k in keys:
    med = {l: statistics.median(x[k] for x in v if x.get(k) is not None) for l, v in by.items()}
    b, n = med.get("base"), med.get("new")
    ratio = n / b if b else float("nan")
    ratios[k] = ratio
    print(f"{k:40} {b:12.1f} {n:12.1f} {ratio:9.2f}")
