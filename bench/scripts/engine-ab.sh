#!/usr/bin/env bash
# The client's data path, two builds side by side on one cluster (issue 35: the I/O engine in the library). Every
# round runs each workload with build A's client and build B's, A first in odd rounds and B first in even ones (the
# servers are B's; the protocol is the same); dirty pages are synced before each run:
#  - put / get:     `tessera put` of a SIZE local file, `tessera get` of it back (MiB/s, wall clock of the command);
#  - ior-lib:       `tessera-bench ior -a tessera -t 1m -b 256m -N 2 -e` (Max Write / Max Read, MiB/s);
#  - ior-lib-small: the same with 64 KiB transfers, 2 x 64 MiB;
#  - ior-lib-ra, ior-lib-small-ra: both again with B's reads through the engine's read-ahead (`--read-ahead`;
#                   build A has no such option: its runs are the same as ior-lib's);
#  - ior-mount:     `tessera-bench ior -a posix -t 1m -b 256m -N 2 -e` through build A's or B's FUSE mount.
# Each run has its own job id (TESSERA_JOB), so PerSched's detection never takes the repeated runs for a
# periodic job. Device model none: the data servers store on this machine's disk through its page cache.
#
#   flock /tmp/bench.lock bench/scripts/engine-ab.sh [OUT_DIR]
#   env: A_BIN=(required: the old build's binaries) B_BIN=target/release REPS=3 DS=4 SIZE_MIB=1024
#        QUIET=1: before each workload's pair of runs, wait (up to 10 min) while a compiler runs on this machine
# Writes OUT_DIR/runs.tsv (round workload side value unit) and prints medians per workload and side with B/A.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a_bin=${A_BIN:?set A_BIN to the old build binaries}; b_bin=${B_BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-engine-ab.XXXXXX)}
reps=${REPS:-3}; nds=${DS:-4}; size_mib=${SIZE_MIB:-1024}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-engine-ab.XXXXXX)
bin=$b_bin
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
bin=$a_bin mount_fuse "$work/ma" "$work/fa.log"
bin=$b_bin mount_fuse "$work/mb" "$work/fb.log"
for m in a b; do need_ready "mount $m" "$work/f$m.log"; done
"$b_bin/tessera" mkdir -p /ab
head -c "$((size_mib << 20))" /dev/urandom > "$work/local"

rate() { python3 -c "import sys; print(float(sys.argv[1]) / float(sys.argv[2]))" "$size_mib" "$1"; }

# run ROUND WORKLOAD SIDE: one measurement, appended to runs.tsv.
run() {
  local round=$1 wl=$2 side=$3 bin t0 secs json=$work/r.json
  bin=$a_bin; [ "$side" = b ] && bin=$b_bin
  export TESSERA_JOB=ab-$round-$wl-$side
  sync
  case $wl in
    put)
      t0=$(now); "$bin/tessera" put -q "$work/local" "/ab/put-$side"; secs=$(since "$t0" 3)
      printf '%s\t%s\t%s\t%.1f\tMiB/s\n' "$round" "$wl" "$side" "$(rate "$secs")" >> "$out/runs.tsv" ;;
    get)
      rm -f "$work/got"
      t0=$(now); "$bin/tessera" get -q "/ab/put-$side" "$work/got"; secs=$(since "$t0" 3)
      cmp -s "$work/local" "$work/got" || { echo "get $side: the copy differs" >&2; exit 1; }
      printf '%s\t%s\t%s\t%.1f\tMiB/s\n' "$round" "$wl" "$side" "$(rate "$secs")" >> "$out/runs.tsv" ;;
    ior-*)
      local args=(-t 1m -b 256m) api=(-a tessera -o "/ab/ior-$side")
      case $wl in ior-lib-small*) args=(-t 64k -b 64m) ;; esac
      if [ "${wl%-ra}" != "$wl" ] && [ "$side" = b ]; then args+=(--read-ahead); fi
      [ "$wl" = ior-mount ] && api=(-a posix -o "$work/m$side/ior")
      "$bin/tessera-bench" ior "${api[@]}" "${args[@]}" -N 2 -e --json "$json" > "$work/ior.txt" 2>&1 \
        || { cat "$work/ior.txt" >&2; exit 1; }
      python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for k, v in (("write", d["write_mib_s"]), ("read", d["read_mib_s"])):
    print(sys.argv[2], f"{sys.argv[3]}-{k}", sys.argv[4], f"{v:.1f}", "MiB/s", sep="\t")' "$json" "$round" "$wl" "$side" \
        >> "$out/runs.tsv" ;;
  esac
  tail -n "$([ "${wl#ior}" != "$wl" ] && echo 2 || echo 1)" "$out/runs.tsv"
}

echo "config: $nds data servers, device model none, put/get ${size_mib} MiB; A=$a_bin B=$b_bin (servers B's);" \
  "$(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/setup.txt"
printf 'round\tworkload\tside\tvalue\tunit\n' > "$out/runs.tsv"
for r in $(seq "$reps"); do
  order="a b"; [ $((r % 2)) = 0 ] && order="b a"
  for wl in put get ior-lib ior-lib-small ior-lib-ra ior-lib-small-ra ior-mount; do
    if [ "${QUIET:-0}" = 1 ]; then
      for _ in $(seq 600); do pgrep -x rustc > /dev/null || pgrep -x cc1 > /dev/null || break; sleep 1; done
    fi
    for side in $order; do run "$r" "$wl" "$side"; done
  done
done
python3 - "$out/runs.tsv" << 'EOF' | tee "$out/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
wls = list(dict.fromkeys(r["workload"] for r in rows))
med = lambda wl, s: statistics.median(float(r["value"]) for r in rows if r["workload"] == wl and r["side"] == s)
runs = lambda wl, s: " ".join(r["value"] for r in rows if r["workload"] == wl and r["side"] == s)
print("| workload | unit | A (old) median | B (new) median | B/A | A runs | B runs |")
print("|---|---|---|---|---|---|---|")
for wl in wls:
    a, b = med(wl, "a"), med(wl, "b")
    print(f"| {wl} | MiB/s | {a:.1f} | {b:.1f} | {b / a:.2f} | {runs(wl, 'a')} | {runs(wl, 'b')} |")
print(f"\nmedians of {len(rows) // (2 * len(wls))} rounds, A and B alternating (A first in odd rounds, B in even)")
EOF
