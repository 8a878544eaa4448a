#!/bin/bash
# Log entries the replicated metadata service writes: 3 s idle, then mdtest -n 2000 -N 1.
# usage: entries.sh BIN
B=$1; D=/tmp/ent37
rm -rf $D; (PATH=$B:$PATH setsid $B/tessera up --dir $D --mds 3 --ds 2 --port-base 0 > $D.out 2>&1 &) 2>/dev/null
for i in $(seq 100); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
sleep 2
export TESSERA_CONFIG=$D/client.toml
idx() { $B/tessera mds status --json | jq -r '.[] | select(.role=="leader") | .log_index'; }
a=$(idx); sleep 3; b=$(idx); echo "idle 3 s: $((b-a)) entries"
a=$(idx); $B/tessera-bench mdtest -n 2000 -N 1 -d /md > /dev/null 2>&1; b=$(idx); echo "mdtest 2000 files: $((b-a)) entries"
pkill -f "tessera up --dir $D"; sleep 2
