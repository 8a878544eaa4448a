#!/usr/bin/env bash
# The random-operation exerciser on the FUSE mount (issue 34): xfstests' fsx, every operation the mount
# supports (reads, writes, mmap reads and writes, truncate, fallocate with and without KEEP_SIZE, punch
# hole, zero range, copy range; fsx probes each at start and disables what the file system refuses:
# collapse/insert range, clone/dedupe, exchange range), in the two shapes of the issue: fsx's default
# (files up to 256 KiB, operations up to 64 KiB) and 1 MiB operations on files up to 8 MiB. A fresh
# `tessera up` cluster of DS data servers (device model none), one mount. Prints fsx's last lines per run
# and a summary; exits non-zero when a run fails (fsx keeps its .fsxlog/.fsxgood in OUT).
#
# fsx is not part of Tessera: build it from xfstests (ltp/fsx.c) and point FSX at it, e.g. with a checkout
# of xfstests in X:  gcc -O2 -D_GNU_SOURCE -include config.h -I$X/src -I$X -o fsx $X/ltp/fsx.c  (config.h
# defining HAVE_* for a Linux system, see results/reliability/fsx.md).
#
#   FSX=/path/to/fsx bench/scripts/fsx.sh     env: BIN=target/release DS=4 OPS=100000 SEEDS="1" OUT=dir
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
fsx=${FSX:?set FSX to an fsx binary}
nds=${DS:-4}; ops=${OPS:-100000}; seeds=${SEEDS:-1}
work=$(mktemp -d /tmp/tessera-fsx.XXXXXX)
out=${OUT:-$work/out}; mkdir -p "$out"
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
mount_fuse "$work/m" "$work/fuse.log"
need_ready "the mount" "$work/fuse.log"
fail=0
for seed in $seeds; do
  for shape in "default|" "1m-ops-8m-files|-o 1048576 -l 8388608"; do
    name=${shape%%|*}; args=${shape#*|}
    log=$out/fsx-$name-seed$seed.txt
    t0=$(now)
    # -S seed, -N operations, -p progress every 10%, -P where fsx keeps its logs.
    (cd "$out" && "$fsx" -S "$seed" -N "$ops" -p $((ops / 10)) -P "$out" $args "$work/m/fsx-$name-$seed") > "$log" 2>&1
    rc=$?
    echo "== fsx $name seed $seed: exit $rc after $(since "$t0" 0) s ($ops operations asked)"
    grep -i "disabling\|not supported" "$log" | sort -u | sed 's/^/   /'
    tail -n 3 "$log" | sed 's/^/   /'
    [ "$rc" = 0 ] || fail=1
  done
done
[ "$fail" = 0 ] && echo "all runs clean" || echo "FAILED: see $out"
exit "$fail"
