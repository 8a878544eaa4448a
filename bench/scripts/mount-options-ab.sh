#!/usr/bin/env bash
# Two FUSE mounts of one cluster with different mount options, measured alternately: mdtest (10,000 files,
# 2 tasks) through each, and optionally through the library (LIB=1), REPS rounds. Device model none.
#
#   bench/scripts/mount-options-ab.sh            # A = default options, B = -o sync_creates
#   env: A_OPTS= B_OPTS=sync_creates REPS=3 MDFILES=10000 LIB=0 DS=4 BIN=target/release
# Prints one line per run: round, mount (options), creates/s, stats/s, removes/s.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
reps=${REPS:-3}; n=${MDFILES:-10000}; nds=${DS:-4}
a_opts=${A_OPTS:-}; b_opts=${B_OPTS:-sync_creates}
work=$(mktemp -d /tmp/tessera-ab.XXXXXX)
mkdir -p "$work/a" "$work/b"
up_pid=""; fa=""; fb=""
cleanup() {
  for p in $fa $fb; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  umount -l "$work/a" "$work/b" 2>/dev/null || true
  [ -n "$up_pid" ] && kill -INT "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$bin/tessera" up --dir "$work/cluster" --ds "$nds" --port-base 0 > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 100); do grep -q "TESSERA UP" "$work/up.log" && break; sleep 0.2; done
export TESSERA_CONFIG=$work/cluster/client.toml
"$bin/tessera" mkdir -p /md
"$bin/tessera-fuse" "$work/a" --allow-other ${a_opts:+-o "$a_opts"} > "$work/fa.log" 2>&1 &
fa=$!
"$bin/tessera-fuse" "$work/b" --allow-other ${b_opts:+-o "$b_opts"} > "$work/fb.log" 2>&1 &
fb=$!
for m in a b; do for _ in $(seq 100); do grep -q READY "$work/f$m.log" && break; sleep 0.2; done; done
run() { # label, mdtest args...
  local label=$1; shift
  "$bin/tessera-bench" mdtest -n "$n" -N 2 "$@" --json "$work/r.json" > "$work/r.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], f\"{d['create_ops_s']:.0f} {d['stat_ops_s']:.0f} {d['remove_ops_s']:.0f}\")" "$work/r.json" "$label"
}
echo "round mount creates/s stats/s removes/s  ($nds data servers, $n files, 2 tasks, $(nproc) cores)"
for r in $(seq "$reps"); do
  run "$r A:${a_opts:-default}" -a posix -d "$work/a/md"
  run "$r B:${b_opts:-default}" -a posix -d "$work/b/md"
  [ "${LIB:-0}" = 1 ] && run "$r library" -a tessera -d /md
done
