#!/usr/bin/env bash
# Small metadata operations against two MDS binaries side by side (issue 35 A11): two loopback clusters that
# differ only in their MDS — cluster A's binaries are all $A_BIN's, cluster B's are a copy of them with
# $B_MDS as tessera-mds — and every round runs `tessera-bench mdtest -a tessera` (the client library, no
# FUSE) on A then B (B then A in even rounds), for each task count in TASKS. Device model none (the
# default): the data servers write to this machine's disk through its page cache; mdtest writes no data.
#
#   flock /tmp/bench.lock bench/scripts/mds-offload-ab.sh [OUT_DIR]
#   env: A_BIN=/work/wt-mds-basebin B_MDS=target/release/tessera-mds REPS=4 DS=2 FILES=4000 TASKS="1 4"
# Writes OUT_DIR/runs.tsv (round tasks cluster phase ops/s) and OUT_DIR/summary.md (medians, B/A).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a_bin=${A_BIN:?A_BIN: the directory of the baseline binaries}; b_mds=${B_MDS:-$here/target/release/tessera-mds}
reps=${REPS:-4}; nds=${DS:-2}; files=${FILES:-4000}; tasks_list=${TASKS:-1 4}
out=${1:-$(mktemp -d /tmp/tessera-mdsab.XXXXXX)}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-mdsab.XXXXXX)
. "$here/bench/scripts/cluster.sh"
# Cluster B: A's binaries with B's MDS (copies: `tessera up` starts the tessera-mds next to its own binary).
mkdir -p "$work/b-bin"
cp "$a_bin"/tessera "$a_bin"/tessera-ds "$a_bin"/tessera-bench "$work/b-bin/"
cp "$b_mds" "$work/b-bin/tessera-mds"
declare -A conf_of
for c in a b; do
  if [ $c = a ]; then bin=$a_bin; else bin=$work/b-bin; fi
  start_cluster "$nds" "$c"
  conf_of[$c]=$TESSERA_CONFIG
done
: > "$out/runs.tsv"
for r in $(seq 1 "$reps"); do
  order="a b"; [ $((r % 2)) = 0 ] && order="b a"
  for t in $tasks_list; do
    for c in $order; do
      "$a_bin/tessera-bench" mdtest -a tessera --config "${conf_of[$c]}" -d "/md-$r-$t" -n "$files" -N "$t" \
        --json "$work/md.json" > "$work/md.txt" 2>&1 || { cat "$work/md.txt"; exit 1; }
      python3 - "$r" "$t" "$c" "$work/md.json" >> "$out/runs.tsv" << 'EOF'
import json, sys
r, t, c, path = sys.argv[1:5]
j = json.load(open(path))
for ph in ("create", "stat", "read", "remove"):
    print(r, t, c, ph, f"{j[ph + '_ops_s']:.0f}", sep="\t")
EOF
    done
  done
done
python3 - "$out/runs.tsv" "$reps" "$files" "$nds" > "$out/summary.md" << 'EOF'
import sys, statistics
from collections import defaultdict
path, reps, files, nds = sys.argv[1:5]
v = defaultdict(list)
for line in open(path):
    r, t, c, ph, x = line.split("\t")
    v[(int(t), ph, c)].append(float(x))
print(f"mdtest -a tessera, {files} files, {nds} data servers, {reps} rounds (ABAB), median ops/s\n")
print("| tasks | phase | A (baseline MDS) | B (this MDS) | B/A | A runs | B runs |")
print("|---|---|---|---|---|---|---|")
for (t, ph) in sorted({(t, ph) for (t, ph, _) in v}, key=lambda k: (k[0], ["create", "stat", "read", "remove"].index(k[1]))):
    a, b = v[(t, ph, "a")], v[(t, ph, "b")]
    ma, mb = statistics.median(a), statistics.median(b)
    fmt = lambda xs: " ".join(f"{x:.0f}" for x in xs)
    print(f"| {t} | {ph} | {ma:.0f} | {mb:.0f} | {mb / ma:.3f} | {fmt(a)} | {fmt(b)} |")
EOF
cat "$out/summary.md"
