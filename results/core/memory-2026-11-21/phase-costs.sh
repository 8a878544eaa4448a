#!/usr/bin/env bash
# Minor faults and CPU ticks of the mount and the data servers per 512 MiB mount write/read phase, on one
# fresh cluster, ROUNDS rounds. The script that produced the tables of ../memory-2026-11-21.md (kept as run;
# bench/scripts/ds-options-ab.sh COSTS=1 is the maintained A/B tool). NODE_ENV: environment for all nodes.
set -euo pipefail
bin=${BIN:-/tmp/bin-net}; block=${BLOCK:-256m}; mode=${MODE:-fpp}; rounds=${ROUNDS:-4}
work=$(mktemp -d /tmp/faults.XXXXXX)
here=$(cd "$(dirname "$0")/../../.." && pwd)
. "$here/bench/scripts/cluster.sh"
[ -n "${NODE_ENV:-}" ] && node_env=($NODE_ENV)
start_cluster 4
"$bin/tessera" mkdir -p /ior; "$bin/tessera" setstripe -S 1M -c 4 /ior
mount_fuse $work/m $work/f.log ""
fl=""; [ $mode = fpp ] && fl=-F
fpid=${fuse_pids[0]}; dspids=$(pgrep -f tessera-ds | tr '\n' ' ')
st() { awk '{print $10, $14+$15}' /proc/$1/stat; }
sum_ds() { local f=0 t=0; for p in $dspids; do read a b < <(st $p); f=$((f+a)); t=$((t+b)); done; echo $f $t; }
for r in $(seq $rounds); do for ph in w r; do
  read f0 t0 < <(st $fpid); read d0 u0 < <(sum_ds)
  "$bin/tessera-bench" ior -$ph -k -t 1m -b $block -N 2 -e -C -a posix -o $work/m/ior/$mode $fl --json $work/j.json > /dev/null
  read f1 t1 < <(st $fpid); read d1 u1 < <(sum_ds)
  k=write_mib_s; [ $ph = r ] && k=read_mib_s
  echo "$r $ph $(python3 -c "import json; print(round(json.load(open('$work/j.json'))['$k']))") mount_faults $((f1-f0)) mount_ticks $((t1-t0)) ds_faults $((d1-d0)) ds_ticks $((u1-u0))"
done; done
