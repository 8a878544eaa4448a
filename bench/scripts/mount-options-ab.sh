#!/usr/bin/env bash
# Two FUSE mounts of one cluster with different mount options, measured alternately: mdtest (10,000 files,
# 2 tasks) through each, and optionally through the library (LIB=1), REPS rounds. Device model none.
#
#   bench/scripts/mount-options-ab.sh            # A = default options, B = -o sync_creates
#   B_BIN=DIR B_OPTS= bench/scripts/mount-options-ab.sh   # two builds of the mount, same options (B = DIR's)
#   env: A_OPTS= B_OPTS=sync_creates REPS=3 MDFILES=10000 LIB=0 DS=4 BIN=target/release B_BIN=$BIN
# Prints one line per run: round, mount (options), creates/s, stats/s, reads/s, removes/s.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}; b_bin=${B_BIN:-$bin}
reps=${REPS:-3}; n=${MDFILES:-10000}; nds=${DS:-4}
a_opts=${A_OPTS:-}; b_opts=${B_OPTS-sync_creates}  # B_OPTS= (empty): default options
work=$(mktemp -d /tmp/tessera-ab.XXXXXX)
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
"$bin/tessera" mkdir -p /md
mount_fuse "$work/a" "$work/fa.log" "$a_opts"
bin=$b_bin mount_fuse "$work/b" "$work/fb.log" "$b_opts"
run() { # label, mdtest args...
  local label=$1; shift
  # A job of its own: PerSched's detection would take the same job's repeated runs for a periodic one.
  runs=$((${runs:-0} + 1)); export TESSERA_JOB=mdab-$runs
  "$bin/tessera-bench" mdtest -n "$n" -N 2 "$@" --json "$work/r.json" > "$work/r.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], f\"{d['create_ops_s']:.0f} {d['stat_ops_s']:.0f} {d['read_ops_s']:.0f} {d['remove_ops_s']:.0f}\")" "$work/r.json" "$label"
}
echo "round mount creates/s stats/s reads/s removes/s  ($nds data servers, $n files, 2 tasks, $(nproc) cores)"
for r in $(seq "$reps"); do
  run "$r A:${a_opts:-default}" -a posix -d "$work/a/md"
  run "$r B:${b_opts:-default}" -a posix -d "$work/b/md"
  if [ "${LIB:-0}" = 1 ]; then run "$r library" -a tessera -d /md; fi
done
