#!/usr/bin/env bash
# Eviction of a dead client (issue 18): a cluster started by hand from a `tessera up` directory, defaults
# only (eviction timeout 30 s). Through FUSE mount A, a file of SIZE_MIB MiB is written with fsync, held open
# by a process and unlinked; `tessera df` shows its space still used. Mount A is killed with SIGKILL; the
# script polls `tessera df --json` every 0.5 s and prints how long after the kill the space came back (goal:
# the eviction timeout plus one destroy cycle), with `tessera df` before and after. The space is the host
# file system's (the data servers' directories are on it), so other activity on the machine shows too.
#
#   bench/scripts/eviction.sh        env: BIN=target/release DS=2 SIZE_MIB=1024
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
nds=${DS:-2}; size=${SIZE_MIB:-1024}
work=$(mktemp -d /tmp/tessera-eviction.XXXXXX)
. "$here/bench/scripts/cluster.sh"
start_by_hand "$work/c" "$nds"
mount_fuse "$work/a" "$work/fuse-a.log"
need_ready "mount A" "$work/fuse-a.log"
apid=${fuse_pids[-1]}
# Bytes used: the data servers' reports (each reports the host file system they share: the largest one).
used() { "$bin/tessera" df --json | python3 -c "import json, sys; print(max(s['report']['used'] for s in json.load(sys.stdin) if s['report']))"; }
dd if=/dev/zero of="$work/a/held" bs=1M count="$size" conv=fsync status=none || { echo "write failed"; exit 1; }
( exec 3< "$work/a/held"; sleep 100000 ) &
holder=$!
sleep 1
rm "$work/a/held"
sleep 3
echo "== tessera df: $size MiB file unlinked, held open through mount A"
"$bin/tessera" df
before=$(used)
sleep 5
held=$(used)
echo "5 s later, still held: used changed by $(( (held - before) / 1048576 )) MiB"
tk=$(now); kill -9 "$apid"
for _ in $(seq 240); do
  sleep 0.5
  freed=$(( (before - $(used)) / 1048576 ))
  if [ "$freed" -ge $(( size * 9 / 10 )) ]; then
    echo "space back $(since "$tk" 1) s after kill -9 of mount A: $freed MiB freed"
    break
  fi
done
[ "$freed" -ge $(( size * 9 / 10 )) ] || echo "space NOT back 120 s after the kill ($freed MiB freed)"
echo "== tessera df after"
"$bin/tessera" df
grep -h "evicted" "$work/mds.log" | sed 's/^/mds: /' | tail -3
kill "$holder" 2> /dev/null
