#!/usr/bin/env bash
# The cost of the extra hop through a forwarding node, on the real device (device model none): one cluster
# with one ION (`tessera up --ion 1`), the same binaries and servers for both sides; each round runs every
# measurement direct (TESSERA_ION=none) and through the ION (TESSERA_ION=ion0), alternating:
#  - the core IOR workload (2 tasks, 1 MiB transfers, fsync, -C; file per task and shared file) through the
#    library and, with MOUNT=1, through a FUSE mount of each kind;
#  - the latency of a 4 KiB read: one task reading an 8 MiB file in random 4 KiB transfers through the
#    library (mean latency = read time / reads).
#
#   bench/scripts/fwd-hop.sh [OUT_DIR]     env: REPS=5 BLOCK=256m DS=4 MOUNT=1 BIN=target/release
# Writes OUT_DIR/hop.tsv (round what path write_MiB/s read_MiB/s) and OUT_DIR/latency.tsv (round path µs),
# and prints medians and the ION/direct ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-hop-out.XXXXXX)}
reps=${REPS:-5}; block=${BLOCK:-256m}; nds=${DS:-4}; use_mount=${MOUNT:-1}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-hop.XXXXXX)
. "$here/bench/scripts/cluster.sh"

dir=$work/cluster
"$bin/tessera" up --dir "$dir" --ds "$nds" --ion 1 --port-base 0 > "$dir.log" 2>&1 &
up_pid=$!; up_pids+=("$up_pid")
for _ in $(seq 150); do grep -q "TESSERA UP" "$dir.log" 2>/dev/null && break; sleep 0.2; done
grep -q "TESSERA UP" "$dir.log" || { echo "cluster did not start:"; cat "$dir.log"; exit 1; }
export TESSERA_CONFIG=$dir/client.toml
TESSERA_ION=none "$bin/tessera" mkdir -p /ior; TESSERA_ION=none "$bin/tessera" mkdir -p /lat
TESSERA_ION=none "$bin/tessera" setstripe -S 1M -c "$nds" /ior
TESSERA_ION=none "$bin/tessera-bench" ior -a tessera -w -k -t 1m -b 8m -N 1 -o /lat/f > /dev/null
if [ "$use_mount" = 1 ]; then
  TESSERA_ION=none mount_fuse "$work/mnt-direct" "$work/fuse-direct.log"
  TESSERA_ION=ion0 mount_fuse "$work/mnt-ion" "$work/fuse-ion.log"
fi

mib() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" "$1"; }
echo "one cluster: $nds data servers, 1 forwarding node (fifo), device model none, block $block, $(nproc) cores; $reps rounds" | tee "$out/setup.txt"
: > "$out/hop.tsv"; : > "$out/latency.tsv"
for r in $(seq "$reps"); do
  for path in direct ion; do
    ion=none; [ $path = ion ] && ion=ion0
    for mode in fpp shared; do
      f=""; [ $mode = fpp ] && f="-F"
      TESSERA_ION=$ion "$bin/tessera-bench" ior -a tessera -t 1m -b "$block" -N 2 -e -C $f -o "/ior/$mode-$path" \
        --json "$out/lib-$mode-$path-$r.json" > "$out/lib-$mode-$path-$r.txt" 2>&1
      echo "$r $mode library $path $(mib "$out/lib-$mode-$path-$r.json")" | tee -a "$out/hop.tsv"
      if [ "$use_mount" = 1 ]; then
        "$bin/tessera-bench" ior -a posix -t 1m -b "$block" -N 2 -e -C $f -o "$work/mnt-$path/ior/$mode-m-$path" \
          --json "$out/fuse-$mode-$path-$r.json" > "$out/fuse-$mode-$path-$r.txt" 2>&1
        echo "$r $mode mount $path $(mib "$out/fuse-$mode-$path-$r.json")" | tee -a "$out/hop.tsv"
      fi
    done
    TESSERA_ION=$ion "$bin/tessera-bench" ior -a tessera -r -t 4k -b 8m -N 1 --pattern random -o /lat/f \
      --json "$out/lat-$path-$r.json" > "$out/lat-$path-$r.txt" 2>&1
    us=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{4096 / (d['read_mib_s'] * 1048576) * 1e6:.1f}\")" "$out/lat-$path-$r.json")
    echo "$r $path $us" | tee -a "$out/latency.tsv"
  done
done
python3 - "$out" <<'EOF' | tee "$out/summary.md"
import sys, statistics as st
out = sys.argv[1]
rows = [l.split() for l in open(f"{out}/hop.tsv")]
print("| layout | path | direct write | ION write | ION/direct | direct read | ION read | ION/direct |")
print("|---|---|---|---|---|---|---|---|")
for mode in ["fpp", "shared"]:
    for path in ["library", "mount"]:
        def med(p, i):
            v = [float(r[4 + i]) for r in rows if r[1] == mode and r[2] == path and r[3] == p]
            return st.median(v) if v else float("nan")
        if med("direct", 0) != med("direct", 0):
            continue
        dw, iw, dr, ir = med("direct", 0), med("ion", 0), med("direct", 1), med("ion", 1)
        print(f"| {mode} | {path} | {dw:.0f} | {iw:.0f} | {iw / dw:.2f} | {dr:.0f} | {ir:.0f} | {ir / dr:.2f} |")
lat = [l.split() for l in open(f"{out}/latency.tsv")]
d = st.median(float(r[2]) for r in lat if r[1] == "direct")
i = st.median(float(r[2]) for r in lat if r[1] == "ion")
print(f"\n4 KiB random read, mean latency (median of rounds): direct {d:.0f} µs, through the ION {i:.0f} µs, ION/direct {i / d:.2f}")
EOF
