#!/bin/bash
# A/B for issue 38 (leases on names and attributes, background closes): the build before (BASE, default
# /tmp/base-bin) against this one (NEW, default /tmp/new-bin), alternating, REPS rounds, each run on a fresh
# `tessera up --ds 4` with two FUSE mounts (a, b) of it. Through mount a, with the real tools under MPI
# (2 ranks): mdtest -F -n 5000 -i 1 (creation, stat, read, removal /s); IOR -w -r -C -e with 1 MiB transfers,
# file per process and shared (256 MiB per rank), and 32 KiB strided (-t 32k -b 32k -s 4096, shared). fio
# (2 jobs, psync, 4 KiB, 10 s): random writes through mount a, random reads through mount b of the files a
# wrote (IOPS, p50/p99 and the longest completion). Device model: none (this VM's disk through its page
# cache). One JSON line per run. Run under `flock /tmp/bench.lock` (one benchmark at a time).
# usage: [BASE=DIR] [NEW=DIR] [MDTEST=PATH] [IOR=PATH] ab.sh OUT REPS
set -u
OUT=$(realpath -m "$1"); REPS=${2:-3}
BASE=${BASE:-/tmp/base-bin}; NEW=${NEW:-/tmp/new-bin}
MDTEST=${MDTEST:-/opt/ior/bin/mdtest}; IOR=${IOR:-/opt/ior/bin/ior}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=$(cd "$(dirname "$0")/../.." && pwd)
: > "$OUT"

# mdtest's summary line for PHASE: its rate (the Max column; -i 1 has one iteration).
md() { awk -v p="$1" 'index($0, p) == 4 { split($0, a, ":"); split(a[2], f, " "); print f[1]; exit }' "$2"; }
# IOR's "Max Write"/"Max Read" in MiB/s.
ior_max() { awk -v p="Max $1:" 'index($0, p) == 1 { print $3; exit }' "$2"; }
# fio JSON: IOPS, p50, p99 and max completion latency in microseconds, of reads or writes.
fio_sum() {
  jq -c --arg d "$1" '.jobs[0][$d] | {iops: (.iops | floor), p50_us: (.clat_ns.percentile["50.000000"] / 1000 | floor),
    p99_us: (.clat_ns.percentile["99.000000"] / 1000 | floor), max_us: (.clat_ns.max / 1000 | floor)}' "$2"
}

run() ( # LABEL BINDIR REP (a subshell: cluster.sh's cleanup runs at its end)
  bin=$2; work=$(mktemp -d /tmp/ab38.XXXXXX); chmod 0755 "$work"
  source "$here/bench/scripts/cluster.sh"
  start_cluster 4
  mount_fuse "$work/a" "$work/a.log"; need_ready "mount a" "$work/a.log"
  mount_fuse "$work/b" "$work/b.log"; need_ready "mount b" "$work/b.log"
  mpi="mpirun --oversubscribe -np 2"
  mkdir -p "$work/a/md" "$work/a/fpp" "$work/a/sh" "$work/a/st" "$work/a/fio"
  $mpi "$MDTEST" -F -n 5000 -i 1 -d "$work/a/md" > "$work/md.txt" 2>&1
  $mpi "$IOR" -w -r -C -e -F -t 1m -b 256m -o "$work/a/fpp/f" > "$work/fpp.txt" 2>&1
  $mpi "$IOR" -w -r -C -e -t 1m -b 256m -o "$work/a/sh/f" > "$work/sh.txt" 2>&1
  $mpi "$IOR" -w -r -C -e -t 32k -b 32k -s 4096 -o "$work/a/st/f" > "$work/st.txt" 2>&1
  f="--name=r --bs=4k --size=128m --numjobs=2 --ioengine=psync --group_reporting --output-format=json"
  fio $f --directory="$work/a/fio" --rw=write --bs=1m > /dev/null 2>&1
  fio $f --directory="$work/a/fio" --rw=randwrite --runtime=10 --time_based > "$work/rw.json" 2>/dev/null
  fio $f --directory="$work/b/fio" --rw=randread --runtime=10 --time_based > "$work/rr.json" 2>/dev/null
  printf '{"label":"%s","rep":%s,"device_model":"none","mdtest":{"create":%s,"stat":%s,"read":%s,"remove":%s},' \
    "$1" "$3" "$(md 'File creation' "$work/md.txt")" "$(md 'File stat' "$work/md.txt")" \
    "$(md 'File read' "$work/md.txt")" "$(md 'File removal' "$work/md.txt")" >> "$OUT"
  printf '"ior":{"fpp_write":%s,"fpp_read":%s,"shared_write":%s,"shared_read":%s,"strided_write":%s,"strided_read":%s},' \
    "$(ior_max Write "$work/fpp.txt")" "$(ior_max Read "$work/fpp.txt")" "$(ior_max Write "$work/sh.txt")" \
    "$(ior_max Read "$work/sh.txt")" "$(ior_max Write "$work/st.txt")" "$(ior_max Read "$work/st.txt")" >> "$OUT"
  printf '"fio":{"randwrite":%s,"randread_second_mount":%s}}\n' "$(fio_sum write "$work/rw.json")" \
    "$(fio_sum read "$work/rr.json")" >> "$OUT"
)

for r in $(seq "$REPS"); do
  run base "$BASE" "$r"
  run new "$NEW" "$r"
done
