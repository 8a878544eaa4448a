#!/usr/bin/env bash
# Two clusters that differ in configuration settings, measured alternately with the core IOR workload
# (1 MiB transfers, 2 tasks, fsync, -C; file per task and shared file) through the library and, with
# MOUNT=1, through a FUSE mount of each. Device model none (this machine's disk).
#
#   bench/scripts/ds-options-ab.sh [OUT_DIR]    # A = defaults, B = direct_writes=false
#   env: A_SET="" B_SET="direct_writes=false" (space-separated KEY=VALUE) REPS=3 BLOCK=256m DS=4 MOUNT=1
#        BIN=target/release B_BIN=$BIN (cluster B's binaries, servers and clients: to compare two builds)
# Writes OUT_DIR/ab.tsv (round layout path cluster write read) and prints medians per cluster.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
a_bin=$bin; b_bin=${B_BIN:-$bin}
out=${1:-$(mktemp -d /tmp/tessera-ab-out.XXXXXX)}
reps=${REPS:-3}; block=${BLOCK:-256m}; nds=${DS:-4}; use_mount=${MOUNT:-1}
a_desc=${A_SET-}; b_desc=${B_SET-direct_writes=false}   # set but empty = defaults
read -r -a a_set <<< "$a_desc"; read -r -a b_set <<< "$b_desc"
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-ab.XXXXXX)
. "$here/bench/scripts/cluster.sh"
for c in a b; do
  if [ $c = a ]; then bin=$a_bin; start_cluster "$nds" a "${a_set[@]}"; else bin=$b_bin; start_cluster "$nds" b "${b_set[@]}"; fi
  "$bin/tessera" mkdir -p /ior && "$bin/tessera" setstripe -S 1M -c "$nds" /ior
  [ "$use_mount" = 1 ] && mount_fuse "$work/mnt-$c" "$work/fuse-$c.log"
done
ior() { # cluster name, extra args...
  local c=$1 name=$2; shift 2
  local cbin=$a_bin; [ "$c" = b ] && cbin=$b_bin
  TESSERA_CONFIG=$work/$c/client.toml "$cbin/tessera-bench" ior -t 1m -b "$block" -N 2 -e -C "$@" \
    --json "$out/$name.json" > "$out/$name.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" "$out/$name.json"
}
echo "A: ${a_desc:-defaults} ($a_bin); B: ${b_desc:-defaults} ($b_bin); $nds data servers, block $block, $(nproc) cores" | tee "$out/setup.txt"
: > "$out/ab.tsv"
for r in $(seq "$reps"); do
  for mode in fpp shared; do
    f=""; [ "$mode" = fpp ] && f="-F"
    for c in a b; do
      echo "$r $mode library $c $(ior $c lib-$mode-$c-$r -a tessera -o /ior/$mode $f)" | tee -a "$out/ab.tsv"
      [ "$use_mount" = 1 ] && echo "$r $mode mount $c $(ior $c fuse-$mode-$c-$r -a posix -o "$work/mnt-$c/ior/$mode" $f)" | tee -a "$out/ab.tsv"
    done
  done
done
python3 - "$out/ab.tsv" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(lambda: ([], []))
for line in open(sys.argv[1]):
    r, mode, path, c, w, rd = line.split()
    rows[(mode, path, c)][0].append(float(w)); rows[(mode, path, c)][1].append(float(rd))
print("| layout | path | A write | B write | A/B | A read | B read | A/B |")
print("|---|---|---|---|---|---|---|---|")
for (mode, path) in sorted({(m, p) for m, p, _ in rows}):
    aw, ar = (statistics.median(v) for v in rows[(mode, path, "a")])
    bw, br = (statistics.median(v) for v in rows[(mode, path, "b")])
    print(f"| {mode} | {path} | {aw:.0f} | {bw:.0f} | {aw/bw:.2f} | {ar:.0f} | {br:.0f} | {ar/br:.2f} |")
PY
