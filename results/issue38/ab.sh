#!/bin/bash
# A/B for issue 38 (leases on names and attributes, background closes): the build before (BASE, default
# /tmp/base-bin) against this one (NEW, default /tmp/new-bin), alternating, REPS rounds, each run on a fresh
# `tessera up --ds 4` with two FUSE mounts (a, b) of it. Through mount a, with the real tools under MPI
# (2 ranks): mdtest -F -n 5000 -i 1 (creation, stat, read, removal /s); IOR -w -r -C -e with 1 MiB transfers,
# file per process and shared (256 MiB per rank), and 32 KiB strided (-t 32k -b 32k -s 4096, shared). fio
# (2 jobs, psync, 4 KiB, 10 s): random writes through mount a, random reads through mount b of the files a
# wrote (IOPS, p50/p99 and the longest completion). Device model: none (this VM's disk through its page
# cache). One JSON line per run. Run under `flock /tmp/bench.lock` (one benchmark at a time).
# BASE_OPTS/NEW_OPTS: mount options (-o) of each side's mounts (e.g. NEW=/tmp/new-bin BASE_OPTS=nocache_leases: the
# same build with and without leases); MDTEST_ONLY=1 leaves IOR and fio out; PAUSE=S runs mdtest's phases one by one
# with S seconds between the creates and the stats.
# usage: [BASE=DIR] [NEW=DIR] [BASE_OPTS=..] [NEW_OPTS=..] [MDTEST_ONLY=1] [MDTEST=PATH] [IOR=PATH] ab.sh OUT REPS
set -u
OUT=$(realpath -m "$1"); REPS=${2:-3}
BASE=${BASE:-/tmp/base-bin}; NEW=${NEW:-/tmp/new-bin}
MDTEST=${MDTEST:-/opt/ior/bin/mdtest}; IOR=${IOR:-/opt/ior/bin/ior}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=$(cd "$(dirname "$0")/../.." && pwd)
: > "$OUT"

# mdtest's summary line for "File PHASE": its rate (the Max column; -i 1 has one iteration).
# (The largest of its lines: phases run one by one print one summary each.)
md() { awk -v p="$1" '$1 == "File" && $2 == p && $3 + 0 > v { v = $3 + 0 } END { print v + 0 }' "$2"; }
# IOR's summary line of "write" or "read": its Max(MiB) column, MiB/s.
ior_max() { awk -v op="$1" '$1 == op && NF > 20 { v = $2 } END { print v }' "$2"; }
# fio JSON: IOPS, p50, p99 and max completion latency in microseconds, of reads or writes.
fio_sum() {
  jq -c --arg d "$1" '.jobs[0][$d] | {iops: (.iops | floor), p50_us: (.clat_ns.percentile["50.000000"] / 1000 | floor),
    p99_us: (.clat_ns.percentile["99.000000"] / 1000 | floor), max_us: (.clat_ns.max / 1000 | floor)}' "$2"
}

run() ( # LABEL BINDIR REP MOUNT_OPTIONS (a subshell: cluster.sh's cleanup runs at its end)
  bin=$2; work=$(mktemp -d /tmp/ab38.XXXXXX); chmod 0755 "$work"
  source "$here/bench/scripts/cluster.sh"
  start_cluster 4
  mount_fuse "$work/a" "$work/a.log" "$4"; need_ready "mount a" "$work/a.log"
  mount_fuse "$work/b" "$work/b.log" "$4"; need_ready "mount b" "$work/b.log"
  mpi="mpirun --allow-run-as-root --oversubscribe -np 2"
  mkdir -p "$work/a/md" "$work/a/fpp" "$work/a/sh" "$work/a/st" "$work/a/fio"
  if [ -n "${PAUSE:-}" ]; then
    # The phases one by one, PAUSE seconds between the creates and the rest (past the kernel's 1 s without leases).
    for ph in -C -T -E -r; do
      $mpi "$MDTEST" -F -n 5000 -i 1 $ph -d "$work/a/md" >> "$work/md.txt" 2>&1
      [ "$ph" = -C ] && sleep "$PAUSE"
    done
  else
    $mpi "$MDTEST" -F -n 5000 -i 1 -d "$work/a/md" > "$work/md.txt" 2>&1
  fi
  if [ "${MDTEST_ONLY:-0}" = 1 ]; then
    printf '{"label":"%s","rep":%s,"device_model":"none","options":"%s","mdtest":{"create":%s,"stat":%s,"read":%s,"remove":%s}}\n' \
      "$1" "$3" "$4" "$(md creation "$work/md.txt")" "$(md stat "$work/md.txt")" "$(md read "$work/md.txt")" \
      "$(md removal "$work/md.txt")" >> "$OUT"
    exit 0
  fi
  $mpi "$IOR" -w -r -C -e -F -t 1m -b 256m -o "$work/a/fpp/f" > "$work/fpp.txt" 2>&1
  $mpi "$IOR" -w -r -C -e -t 1m -b 256m -o "$work/a/sh/f" > "$work/sh.txt" 2>&1
  $mpi "$IOR" -w -r -C -e -t 32k -b 32k -s 4096 -o "$work/a/st/f" > "$work/st.txt" 2>&1
  f="--name=r --bs=4k --size=128m --numjobs=2 --ioengine=psync --group_reporting --output-format=json"
  fio $f --directory="$work/a/fio" --rw=write --bs=1m > /dev/null 2>&1
  fio $f --directory="$work/a/fio" --rw=randwrite --runtime=10 --time_based > "$work/rw.json" 2>/dev/null
  fio $f --directory="$work/b/fio" --rw=randread --runtime=10 --time_based > "$work/rr.json" 2>/dev/null
  printf '{"label":"%s","rep":%s,"device_model":"none","mdtest":{"create":%s,"stat":%s,"read":%s,"remove":%s},' \
    "$1" "$3" "$(md creation "$work/md.txt")" "$(md stat "$work/md.txt")" \
    "$(md read "$work/md.txt")" "$(md removal "$work/md.txt")" >> "$OUT"
  printf '"ior":{"fpp_write":%s,"fpp_read":%s,"shared_write":%s,"shared_read":%s,"strided_write":%s,"strided_read":%s},' \
    "$(ior_max write "$work/fpp.txt")" "$(ior_max read "$work/fpp.txt")" "$(ior_max write "$work/sh.txt")" \
    "$(ior_max read "$work/sh.txt")" "$(ior_max write "$work/st.txt")" "$(ior_max read "$work/st.txt")" >> "$OUT"
  printf '"fio":{"randwrite":%s,"randread_second_mount":%s}}\n' "$(fio_sum write "$work/rw.json")" \
    "$(fio_sum read "$work/rr.json")" >> "$OUT"
)

for r in $(seq "$REPS"); do
  run base "$BASE" "$r" "${BASE_OPTS:-}"
  run new "$NEW" "$r" "${NEW_OPTS:-}"
done
