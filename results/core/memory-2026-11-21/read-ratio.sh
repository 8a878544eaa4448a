#!/usr/bin/env bash
# fpp reads of the same files, library and mount alternately, ROUNDS rounds (one cluster, files written once
# through the mount). Output of the run reported in ../memory-2026-11-21.md §5: read-ratio.txt.
set -euo pipefail
bin=${BIN:-/tmp/bin-final}; block=${BLOCK:-256m}; rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/rr.XXXXXX)
here=$(cd "$(dirname "$0")/../../.." && pwd)
. "$here/bench/scripts/cluster.sh"
start_cluster 4
"$bin/tessera" mkdir -p /ior; "$bin/tessera" setstripe -S 1M -c 4 /ior
mount_fuse $work/m $work/f.log ""
"$bin/tessera-bench" ior -w -k -t 1m -b $block -N 2 -e -F -a posix -o $work/m/ior/fpp > /dev/null
mib() { python3 -c "import json; print(round(json.load(open('$work/j.json'))['read_mib_s']))"; }
for r in $(seq $rounds); do
  "$bin/tessera-bench" ior -r -k -t 1m -b $block -N 2 -C -F -a tessera -o /ior/fpp --json $work/j.json > /dev/null; l=$(mib)
  "$bin/tessera-bench" ior -r -k -t 1m -b $block -N 2 -C -F -a posix -o $work/m/ior/fpp --json $work/j.json > /dev/null; m=$(mib)
  echo "$r library $l mount $m ratio $(python3 -c "print(round($m/$l,2))")"
done
