#!/bin/bash
# Membership demo: a 3-replica `tessera up` cluster; replica 4 added at a new address, replica 3 removed.
set -u
BIN=${BIN:-target/debug}
D=${D:-/tmp/tessera-membership}
rm -rf "$D"
"$BIN/tessera" up --mds 3 --ds 2 --dir "$D" --port-base 7600 >"$D.up.log" 2>&1 &
UP=$!
for i in $(seq 60); do "$BIN/tessera" --config "$D/admin.toml" mds status >/dev/null 2>&1 && break; sleep 1; done
sleep 2
"$BIN/tessera" --config "$D/admin.toml" mds status
python3 - "$D" <<'PY'
import sys,re
d=sys.argv[1]; s=open(d+"/mds.toml").read()
s+='\n[[mds]]\nname = "mds3"\naddr = "127.0.0.1:7650"\ndata_dir = "mds3"\n'
open(d+"/mds3.toml","w").write(s)
PY
mkdir -p "$D/mds3"
"$BIN/tessera-mds" --config "$D/mds3.toml" --replica 4 >"$D/logs/mds3.log" 2>&1 &
NEW=$!
sleep 2
"$BIN/tessera" --config "$D/admin.toml" mds add 4 127.0.0.1:7650
"$BIN/tessera" --config "$D/admin.toml" mds remove 3
sleep 2
"$BIN/tessera" --config "$D/admin.toml" mds status
kill $NEW; kill $UP; wait
