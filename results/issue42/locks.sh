#!/bin/bash
# Issue 42: what file locks cost through the mount, and SQLite from two mounts.
# A fresh `tessera up` (4 data servers, device model none: this VM's disk) from BIN (default target/release),
# two mounts of it (two client nodes), then:
#  1. tessera-bench locks through mount a, with --other through mount b (fcntl lock+unlock pairs, F_GETLK,
#     and a write lock handed back and forth between the two mounts), and the same on the local disk;
#  2. two sqlite3 processes, one per mount, 1,000 single-row transactions each (rollback journal), timed,
#     then the row count and PRAGMA integrity_check; the same on the local disk (one directory);
#  3. the tar-after-git-commit check (tar_after_commit.sh), RUNS times.
# Run under `flock /tmp/bench.lock`. usage: locks.sh OUTDIR [BIN] [RUNS]
set -euo pipefail
OUT=$1; BIN=${2:-target/release}; RUNS=${3:-50}
BIN=$(cd "$BIN" && pwd); HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
D=/tmp/issue42-locks; A=$D-a; B=$D-b; L=/var/tmp/issue42-local
rm -rf $D $L; mkdir -p $A $B $L
(PATH=$BIN:$PATH setsid $BIN/tessera up --dir $D --port-base 0 > $D.out 2>&1 &) 2>/dev/null
for i in $(seq 150); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
$BIN/tessera --config $D/client.toml mount $A --daemon > /dev/null 2>&1
$BIN/tessera --config $D/client.toml mount $B --daemon > /dev/null 2>&1
cleanup() { fusermount3 -u $A 2>/dev/null || true; fusermount3 -u $B 2>/dev/null || true; pkill -f "tessera up --dir $D" || true; }
trap cleanup EXIT
{
  echo "# tessera-bench locks through the mount (a), handed to mount b (ping-pong)"
  $BIN/tessera-bench locks $A/lk --other $B/lk --seconds 5 -i 3 --json $OUT/locks-mount.json
  echo; echo "# the same on the local disk (the kernel's own locks; ping-pong between two descriptors)"
  $BIN/tessera-bench locks $L/lk --other $L/lk --seconds 5 -i 3 --json $OUT/locks-local.json
} | tee $OUT/locks.txt

sqlite() { # dir_a dir_b label
  rm -f "$1/t.db"
  sqlite3 "$1/t.db" "PRAGMA journal_mode=DELETE; CREATE TABLE t(who TEXT, n INTEGER, pad TEXT);" > /dev/null
  for w in a b; do
    (echo ".timeout 120000"; for i in $(seq 0 999); do echo "INSERT INTO t VALUES('$w', $i, hex(randomblob(100)));"; done) > /tmp/issue42-ins-$w.sql
  done
  local t0=$(date +%s.%N)
  (sqlite3 "$1/t.db" < /tmp/issue42-ins-a.sql > /tmp/issue42-sa.err 2>&1 & sqlite3 "$2/t.db" < /tmp/issue42-ins-b.sql > /tmp/issue42-sb.err 2>&1; wait)
  local t1=$(date +%s.%N)
  local rows=$(sqlite3 "$1/t.db" "SELECT count(*) FROM t;") check=$(sqlite3 "$1/t.db" "PRAGMA integrity_check;")
  local errs=$(cat /tmp/issue42-sa.err /tmp/issue42-sb.err | wc -l)
  printf '%s: 2 x 1000 transactions in %.1f s (%.1f ms per transaction), rows %s, integrity_check %s, error lines %s\n' \
    "$3" "$(echo "$t1 - $t0" | bc)" "$(echo "($t1 - $t0) * 1000 / 2000" | bc -l)" "$rows" "$check" "$errs"
}
{
  echo "# SQLite, two writers (rollback journal, one row per transaction)"
  for r in 1 2 3; do sqlite $A $B "mounts a+b, run $r"; done
  for r in 1 2 3; do sqlite $L $L "local disk, run $r"; done
} | tee $OUT/sqlite.txt

bash $HERE/tar_after_commit.sh $A $RUNS | tee $OUT/tar50.txt
