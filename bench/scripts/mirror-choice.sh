#!/usr/bin/env bash
# Replica choice with one data server busy (issue 36): the same mirrored file read through two mounts of
# one cluster, one reading each stripe from the replica this client has the fewest requests in flight to
# ([client] replica_read = "load", the default), the other always from the primary ("first").
# Data server 0's device is an emulated rotating disk (its own configuration: device_model = "hdd", 78 MB/s
# media rate plus seeks and rotation); the other servers' device model is none (this machine's disk through
# its page cache): server 0 is the slow, busy one, primary of a quarter of the stripes.
# The file: `tessera-bench ior -a posix`, 2 tasks x SIZE, file per task, 1 MiB transfers, in a directory set
# to -N 2 -c 4 (two replicas of four stripes). Each round reads it through both mounts, the order
# alternating, the page cache dropped before every read; REPS rounds, medians and the ratio.
#
#   bench/scripts/mirror-choice.sh [OUT_DIR]      env: BIN=target/release DS=4 REPS=5 SIZE=512m
# Writes OUT_DIR/choice.tsv and the summary (also OUT_DIR/summary.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-choice.XXXXXX)}
nds=${DS:-4}; reps=${REPS:-5}; size=${SIZE:-512m}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-choice.XXXXXX)
. "$here/bench/scripts/cluster.sh"
slow_ds0() {
  sed -i 's|^device_model = .*|device_model = "hdd"|' "$1/ds0.toml"
  sed 's|^replica_read = .*|replica_read = "first"|' "$1/client.toml" > "$1/client-first.toml"
  grep -q '^replica_read = "first"' "$1/client-first.toml" || { echo "no replica_read in $1/client.toml" >&2; exit 1; }
}
start_by_hand "$work/c" "$nds" slow_ds0
mount_fuse "$work/load" "$work/fuse-load.log"
need_ready "the mount (load)" "$work/fuse-load.log"
node_env=("TESSERA_CONFIG=$work/c/client-first.toml")
mount_fuse "$work/first" "$work/fuse-first.log"
need_ready "the mount (first)" "$work/fuse-first.log"
node_env=()
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }

mkdir -p "$work/load/choice"
"$bin/tessera" setstripe -N 2 -c 4 /choice > /dev/null
"$bin/tessera-bench" ior -a posix -w -e -k -t 1m -b "$size" -N 2 -F -o "$work/load/choice/f" > /dev/null
"$bin/tessera" getstripe /choice/f.00000000 > "$out/layout.txt" 2>&1 || true
echo -e "round\tchoice\tMiB_s" > "$out/choice.tsv"
for r in $(seq "$reps"); do
  order="load first"; [ $((r % 2)) -eq 0 ] && order="first load"
  for c in $order; do
    drop_caches
    "$bin/tessera-bench" ior -a posix -r -t 1m -b "$size" -N 2 -F -o "$work/$c/choice/f" --json "$work/r.json" > /dev/null
    echo -e "$r\t$c\t$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["read_mib_s"], 1))' "$work/r.json")" >> "$out/choice.tsv"
  done
  echo "round $r of $reps done"
done
python3 - "$out/choice.tsv" "$reps" <<'PY' | tee "$out/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
v = {c: [float(r["MiB_s"]) for r in rows if r["choice"] == c] for c in ("load", "first")}
ratios = sorted(float(a["MiB_s"]) / float(b["MiB_s"]) for a in rows for b in rows if a["round"] == b["round"] and a["choice"] == "load" and b["choice"] == "first")
print(f"## Reads of a mirrored file with data server 0 slow (emulated HDD), medians of {sys.argv[2]} rounds\n")
print("| replica choice | MiB/s (median) | per round |\n|---|---|---|")
for c in ("load", "first"):
    print(f"| {c} | {statistics.median(v[c]):.1f} | {' '.join(f'{x:.1f}' for x in v[c])} |")
print(f"\nload / first: {statistics.median(v['load']) / statistics.median(v['first']):.2f} (per-round ratios: {' '.join(f'{x:.2f}' for x in ratios)})")
PY
