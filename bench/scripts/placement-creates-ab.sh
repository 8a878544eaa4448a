#!/usr/bin/env bash
# Creates/s through one FUSE mount into two directories of one cluster that differ only in their placement
# policy (`tessera setstripe --policy`): A = round-robin, B = balanced (Tarazu's min-cost flow), measured
# alternately with mdtest (MDFILES files, 2 tasks), REPS rounds; then the same through the library. Device
# model none; DS data servers with TARGETS targets each.
#
#   bench/scripts/placement-creates-ab.sh        # env: REPS=5 MDFILES=10000 DS=4 TARGETS=2 BIN=target/release
# Prints one line per run (round, path, policy, creates/s, stats/s, removes/s) and the medians and B/A ratio.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
reps=${REPS:-5}; n=${MDFILES:-10000}; nds=${DS:-4}; targets=${TARGETS:-2}
work=$(mktemp -d /tmp/tessera-placement-ab.XXXXXX)
. "$here/bench/scripts/cluster.sh"
dir=$work/cluster
env "${node_env[@]}" "$bin/tessera" up --dir "$dir" --ds "$nds" --targets "$targets" --port-base 0 > "$dir.log" 2>&1 &
up_pids+=($!)
for _ in $(seq 100); do grep -qs "TESSERA UP" "$dir.log" && break; sleep 0.2; done
export TESSERA_CONFIG=$dir/client.toml
"$bin/tessera" mkdir -p /rr; "$bin/tessera" mkdir -p /bal
"$bin/tessera" setstripe --policy round-robin /rr
"$bin/tessera" setstripe --policy balanced /bal
mount_fuse "$work/m" "$work/fuse.log" ""
out=$work/runs.txt
run() { # round path label api dir
  "$bin/tessera-bench" mdtest -n "$n" -N 2 -a "$4" -d "$5" --json "$work/r.json" > "$work/r.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], sys.argv[4], f\"{d['create_ops_s']:.0f} {d['stat_ops_s']:.0f} {d['remove_ops_s']:.0f}\")" "$work/r.json" "$1" "$2" "$3" | tee -a "$out"
}
echo "round path policy creates/s stats/s removes/s  ($nds data servers x $targets targets, $n files, 2 tasks, $(nproc) cores)"
# Alternating, and which goes first alternates from round to round (the first of a pair gains on this VM).
for r in $(seq "$reps"); do
  if [ $((r % 2)) = 1 ]; then
    run "$r" mount round-robin posix "$work/m/rr"; run "$r" mount balanced posix "$work/m/bal"
  else
    run "$r" mount balanced posix "$work/m/bal"; run "$r" mount round-robin posix "$work/m/rr"
  fi
done
for r in $(seq "$reps"); do
  if [ $((r % 2)) = 1 ]; then
    run "$r" library round-robin tessera /rr; run "$r" library balanced tessera /bal
  else
    run "$r" library balanced tessera /bal; run "$r" library round-robin tessera /rr
  fi
done
"$bin/tessera" df --policy | tail -5
python3 - "$out" <<'PY'
import sys, statistics as st
rows=[l.split() for l in open(sys.argv[1])]
for path in ("mount", "library"):
    med={p: st.median(float(r[3]) for r in rows if r[1]==path and r[2]==p) for p in ("round-robin","balanced")}
    print(f"{path}: median creates/s round-robin {med['round-robin']:.0f}, balanced {med['balanced']:.0f}, balanced/round-robin {med['balanced']/med['round-robin']:.3f}")
PY
