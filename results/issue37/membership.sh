#!/bin/bash
# Replacing a metadata replica while the service runs (issue 37): a `tessera up --mds 3` cluster; a writer
# creates files one `tessera truncate` at a time (each timed) while replica 4 is started at a new address,
# added (`tessera mds add`) and replica 3 removed (`tessera mds remove`). Prints the status before and after,
# the writer's operations, failures and slowest ones. Usage: results/issue37/membership.sh [BIN_DIR]
set -u
BIN=${1:-target/release}
D=${D:-/tmp/tessera-membership}
T="$BIN/tessera"
rm -rf "$D" "$D.ops" "$D.stop"
"$T" up --mds 3 --ds 2 --dir "$D" --port-base 7600 >"$D.up.log" 2>&1 &
UP=$!
trap 'kill $UP ${NEW:-} ${W:-} 2>/dev/null; wait' EXIT
for _ in $(seq 60); do "$T" --config "$D/admin.toml" mds status >/dev/null 2>&1 && break; sleep 1; done
sleep 2
echo "== before"; "$T" --config "$D/admin.toml" mds status
# The writer: one create per command, its wall time in ms and exit status per line.
( i=0; while [ ! -e "$D.stop" ]; do
    s=$(date +%s%N); "$T" --config "$D/client.toml" truncate --size 0 "/w$i" >/dev/null 2>&1; rc=$?
    echo "$(( ($(date +%s%N) - s) / 1000000 )) $rc" >>"$D.ops"; i=$((i + 1)); done ) &
W=$!
sleep 3
# Replica 4: a new address, in a configuration only it has (the others learn it from the membership).
python3 - "$D" <<'PY'
import sys
d = sys.argv[1]
s = open(d + "/mds.toml").read()
s += '\n[[mds]]\nname = "mds3"\naddr = "127.0.0.1:7650"\ndata_dir = "mds3"\n'
open(d + "/mds3.toml", "w").write(s)
PY
mkdir -p "$D/mds3"
"$BIN/tessera-mds" --config "$D/mds3.toml" --replica 4 >"$D/logs/mds3.log" 2>&1 &
NEW=$!
sleep 1
echo "== tessera mds add 4 127.0.0.1:7650"; "$T" --config "$D/admin.toml" mds add 4 127.0.0.1:7650
echo "== tessera mds remove 3"; "$T" --config "$D/admin.toml" mds remove 3
sleep 3
touch "$D.stop"; wait $W
echo "== after"; "$T" --config "$D/admin.toml" mds status
sort -n "$D.ops" | awk '{n++; ms[n]=$1; if ($2 != 0) f++} END {
  p = int(n * 0.99); if (p < 1) p = 1
  printf "writer: %d creates, %d failed; median %d ms, 99th %d ms, slowest %d ms (each a whole tessera process)\n",
    n, f, ms[int((n + 1) / 2)], ms[p], ms[n] }'
"$T" --config "$D/admin.toml" fsck | tail -2
