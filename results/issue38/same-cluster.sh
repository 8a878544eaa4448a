#!/bin/bash
# Issue 38: one cluster (tessera up --ds 4), two mounts of it, one with leases on names and attributes (default), one
# with -o nocache_leases; real mdtest (-F -n 5000 -i 1, 2 ranks) alternating between them, 4 rounds. Device model none.
# Run under `flock /tmp/bench.lock`. usage: same-cluster.sh [BIN]
bin=${1:-/tmp/new-bin}; work=$(mktemp -d /tmp/cab.XXXX); chmod 755 $work
source "$(dirname "$0")/../../bench/scripts/cluster.sh"
start_cluster 4
mount_fuse $work/l $work/l.log; mount_fuse $work/n $work/n.log nocache_leases
for r in 1 2 3 4; do for m in l n; do
  mpirun --allow-run-as-root --oversubscribe -np 2 /opt/ior/bin/mdtest -F -n 5000 -i 1 -d $work/$m/md$r > $work/o.txt 2>&1
  echo "$m $r $(awk '$1=="File" {printf "%s=%s ", $2, $3}' $work/o.txt)"
done; done
