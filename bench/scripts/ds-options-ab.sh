#!/usr/bin/env bash
# Two clusters that differ in configuration settings, measured alternately with the core IOR workload
# (1 MiB transfers, 2 tasks, fsync, -C; file per task and shared file) through the library and, with
# MOUNT=1, through a FUSE mount of each. Device model none (this machine's disk).
#
#   bench/scripts/ds-options-ab.sh [OUT_DIR]    # A = defaults, B = direct_writes=false
#   env: A_SET="" B_SET="direct_writes=false" (space-separated KEY=VALUE) REPS=3 BLOCK=256m DS=4 MOUNT=1
#        BIN=target/release B_BIN=$BIN (cluster B's binaries, servers and clients: to compare two builds)
#        B_ENV="" (KEY=VALUE environment for cluster B's processes, e.g. GLIBC_TUNABLES=...)
#        COSTS=1: each run's write and read phases separately (ior -w -k, then -r), each with what it cost:
#        CPU ticks (1/100 s) and minor page faults of the mount daemon and of the servers, and the UDP
#        datagrams the kernel dropped for a full receive buffer (Udp RcvbufErrors, machine-wide)
# Writes OUT_DIR/ab.tsv (round layout path cluster write read) and prints medians per cluster; with COSTS=1
# also OUT_DIR/costs.tsv (round layout path cluster phase MiB/s fuse_cpu srv_cpu fuse_faults srv_faults drops).
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
costs=${COSTS:-0}; b_env=${B_ENV-}
declare -A up_of fuse_of
for c in a b; do
  if [ $c = a ]; then bin=$a_bin; node_env=(); start_cluster "$nds" a "${a_set[@]}"
  else bin=$b_bin; read -r -a node_env <<< "$b_env"; start_cluster "$nds" b "${b_set[@]}"; fi
  up_of[$c]=$up_pid
  "$bin/tessera" mkdir -p /ior && "$bin/tessera" setstripe -S 1M -c "$nds" /ior
  if [ "$use_mount" = 1 ]; then
    mount_fuse "$work/mnt-$c" "$work/fuse-$c.log"
    fuse_of[$c]=${fuse_pids[-1]}
  fi
done
node_env=()
ior() { # cluster name, extra args...
  local c=$1 name=$2; shift 2
  local cbin=$a_bin; [ "$c" = b ] && cbin=$b_bin
  TESSERA_CONFIG=$work/$c/client.toml "$cbin/tessera-bench" ior -t 1m -b "$block" -N 2 -e -C "$@" \
    --json "$out/$name.json" > "$out/$name.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" "$out/$name.json"
}
ticks_faults() { # pids... -> "cpu_ticks minor_faults" summed (/proc/PID/stat fields 14+15 and 10)
  local cpu=0 flt=0 s
  for p in "$@"; do read -r -a s < "/proc/$p/stat" || continue; cpu=$((cpu + s[13] + s[14])); flt=$((flt + s[9])); done
  echo "$cpu $flt"
}
udp_drops() { awk '/^Udp:/ { v = $6 } END { print v }' /proc/net/snmp; }
# ior_costs CLUSTER NAME LABEL ARGS...: the write phase, then the read phase, each a line of costs.tsv.
ior_costs() {
  local c=$1 name=$2 label=$3; shift 3
  local fuse=() srv phase r0 r1 d0 d1
  [ -n "${fuse_of[$c]:-}" ] && fuse=("${fuse_of[$c]}")
  srv=$(pgrep -P "${up_of[$c]}" | tr '\n' ' ')
  local w=0 rd=0
  for phase in w r; do
    r0=$(ticks_faults "${fuse[@]}"); s0=$(ticks_faults $srv); d0=$(udp_drops)
    local res; res=$(ior "$c" "$name-$phase" "-$phase" -k "$@")
    r1=$(ticks_faults "${fuse[@]}"); s1=$(ticks_faults $srv); d1=$(udp_drops)
    local mib; if [ $phase = w ]; then mib=${res% *}; w=$mib; else mib=${res#* }; rd=$mib; fi
    read -r fc0 ff0 <<< "$r0"; read -r fc1 ff1 <<< "$r1"; read -r sc0 sf0 <<< "$s0"; read -r sc1 sf1 <<< "$s1"
    echo "$label $phase $mib $((fc1 - fc0)) $((sc1 - sc0)) $((ff1 - ff0)) $((sf1 - sf0)) $((d1 - d0))" >> "$out/costs.tsv"
  done
  echo "$w $rd"
}
run() { if [ "$costs" = 1 ]; then ior_costs "$@"; else ior "$1" "$2" "${@:4}"; fi; }
[ "$costs" = 1 ] && : > "$out/costs.tsv"
echo "A: ${a_desc:-defaults} ($a_bin); B: ${b_desc:-defaults} ${b_env:+$b_env }($b_bin); $nds data servers, block $block, $(nproc) cores" | tee "$out/setup.txt"
: > "$out/ab.tsv"
for r in $(seq "$reps"); do
  for mode in fpp shared; do
    f=""; [ "$mode" = fpp ] && f="-F"
    for c in a b; do
      echo "$r $mode library $c $(run $c lib-$mode-$c-$r "$r $mode library $c" -a tessera -o /ior/$mode $f)" | tee -a "$out/ab.tsv"
      [ "$use_mount" = 1 ] && echo "$r $mode mount $c $(run $c fuse-$mode-$c-$r "$r $mode mount $c" -a posix -o "$work/mnt-$c/ior/$mode" $f)" | tee -a "$out/ab.tsv"
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
