#!/usr/bin/env bash
# What per-job counting costs (issue 16: "counters on against off, goal within 3 %, and with traces on"): two
# clusters that differ only in `[metrics] job_counters` (A = on, the default; B = off), and A again with a
# per-job trace running (`tessera trace start`) for the job of its runs. Each round runs the core IOR run
# (`-t 1m -b BLOCK -N 2 -e -C -F`, through the library and through a FUSE mount) and mdtest (MDFILES files,
# 2 tasks, through the mount) on all three variants, in an order rotated from round to round (the first of a
# round gains on this VM). DS data servers each, stripe 1 MiB over all of them, device model none (the
# machine's disk through its page cache).
#
#   bench/scripts/jobcounters-overhead-ab.sh     # env: REPS=5 BLOCK=256m MDFILES=5000 DS=4 BIN=target/release
# Prints one line per run (round, workload, variant, write or create rate, read or stat rate, remove rate, CPU
# seconds the cluster's servers and its mount used during the run) and per workload the medians, and off/on and
# trace/on ratios (1.03 = the variant is 3 % faster than on). The CPU seconds are the steadier measure of what
# counting costs on a shared machine: rates move with whatever else runs, the servers' own CPU time much less.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
reps=${REPS:-5}; block=${BLOCK:-256m}; n=${MDFILES:-5000}; nds=${DS:-4}
work=$(mktemp -d /tmp/tessera-jobcounters-ab.XXXXXX)
. "$here/bench/scripts/cluster.sh"
declare -A pids
# cluster NAME true|false: a cluster with job counting on or off, its /ior striped over every server and a
# FUSE mount of it in $work/NAME-mnt.
cluster() {
  start_cluster "$nds" "$1" job_counters="$2"
  pids[$1]="$up_pid"
  grep -q "^job_counters = $2" "$work/$1/mds.toml"
  "$bin/tessera" mkdir -p /ior; "$bin/tessera" mkdir -p /md
  "$bin/tessera" setstripe -S 1M -c "$nds" /ior
  mount_fuse "$work/$1-mnt" "$work/$1-fuse.log" ""
  need_ready "mount of $1" "$work/$1-fuse.log"
  pids[$1]="${pids[$1]} ${fuse_pids[-1]}"
}
# cpu NAME: CPU seconds (user + system) used so far by cluster NAME's `tessera up`, its servers and its mount.
cpu() {
  local all=() p
  for p in ${pids[$1]}; do all+=("$p" $(pgrep -P "$p" || true)); done
  for p in "${all[@]}"; do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); t += $12 + $13 } END { printf "%.2f", t / hz }'
}
cluster on true
cluster off false
TESSERA_CONFIG=$work/on/client.toml "$bin/tessera" trace start ovh-trace
out=$work/runs.txt
# run ROUND WORKLOAD VARIANT: the variant's cluster (`trace` is `on` with its job traced) and job.
run() {
  local c=$3; [ "$3" = trace ] && c=on
  local mnt=$work/$c-mnt args
  case $2 in
    ior-library) args=(ior -t 1m -b "$block" -N 2 -e -C -F -a tessera -o /ior/f) ;;
    ior-mount) args=(ior -t 1m -b "$block" -N 2 -e -C -F -a posix -o "$mnt/ior/f") ;;
    mdtest-mount) args=(mdtest -n "$n" -N 2 -a posix -d "$mnt/md") ;;
  esac
  local cpu0; cpu0=$(cpu "$c")
  TESSERA_CONFIG=$work/$c/client.toml TESSERA_JOB=ovh-$3 \
    "$bin/tessera-bench" "${args[@]}" --json "$work/r.json" > "$work/r.txt" 2>&1 || { cat "$work/r.txt"; exit 1; }
  local cpu1; cpu1=$(cpu "$c")
  python3 - "$work/r.json" "$1" "$2" "$3" "$cpu0" "$cpu1" <<'PY' | tee -a "$out"
import json, sys
d = json.load(open(sys.argv[1]))
if "create_ops_s" in d:
    v = (d["create_ops_s"], d["stat_ops_s"], d["remove_ops_s"])
else:
    v = (d["write_mib_s"], d["read_mib_s"], 0.0)
v += (float(sys.argv[6]) - float(sys.argv[5]),)
print(sys.argv[2], sys.argv[3], sys.argv[4], " ".join(f"{x:.2f}" for x in v))
PY
}
variants=(on off trace)
echo "round workload variant write-MiB/s|creates/s read-MiB/s|stats/s removes/s server+mount-cpu-s  ($nds data servers, block $block, $n files, 2 tasks, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
for r in $(seq "$reps"); do
  k=$(((r - 1) % 3))
  order=("${variants[@]:$k}" "${variants[@]:0:$k}")
  for w in ior-library ior-mount mdtest-mount; do
    for v in "${order[@]}"; do run "$r" "$w" "$v"; done
  done
done
TESSERA_CONFIG=$work/on/client.toml "$bin/tessera" jobstats --job ovh-on | head -12
TESSERA_CONFIG=$work/off/client.toml "$bin/tessera" jobstats | head -4
python3 - "$out" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
names = {"ior-library": ("write MiB/s", "read MiB/s", None, "server+mount CPU s"),
         "ior-mount": ("write MiB/s", "read MiB/s", None, "server+mount CPU s"),
         "mdtest-mount": ("creates/s", "stats/s", "removes/s", "server+mount CPU s")}
for w, cols in names.items():
    for i, col in enumerate(cols):
        if col is None:
            continue
        med = {v: st.median(float(r[3 + i]) for r in rows if r[1] == w and r[2] == v) for v in ("on", "off", "trace")}
        ratio = lambda v: med[v] / med["on"] if med["on"] > 0 else float("nan")
        print(f"{w} {col}: median on {med['on']:.2f}, off {med['off']:.2f}, trace {med['trace']:.2f}; "
              f"off/on {ratio('off'):.3f}, trace/on {ratio('trace'):.3f}")
PY
