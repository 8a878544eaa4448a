#!/bin/bash
# A/B for issue 37: mdtest creates and IOR, alternating: base (stop 50 build, 1 MDS), new with 1 MDS, new with 3 replicas.
# /tmp/bin-base: `git worktree add /tmp/wt-base 61f2955` built with CARGO_TARGET_DIR=/tmp/tgt-base cargo build --release --bins;
# NEW (default /tmp/bin-51a, stop 51; stop 52 ran it with NEW=/tmp/bin-52, see ab52.sh): this build's
# target/release binaries. Run under `flock /tmp/bench.lock` (one benchmark at a time).
# usage: [NEW=DIR] ab37.sh OUT REPS
OUT=$1; REPS=${2:-3}; NEW=${NEW:-/tmp/bin-51a}; TAG=$(basename "$NEW")
: > $OUT
run() { # label bin n_mds
  local L=$1 B=$2 M=$3 D=/tmp/ab37-$TAG-$1
  rm -rf $D; (PATH=$B:$PATH setsid $B/tessera up --dir $D $([ $L = base ] || echo --mds $M) --ds 2 --port-base 0 > $D.out 2>&1 &) 2>/dev/null
  for i in $(seq 100); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
  sleep 2
  export TESSERA_CONFIG=$D/client.toml
  $B/tessera-bench mdtest -n 8000 -N 4 -d /md --json $D.md.json > /dev/null 2>&1
  $B/tessera-bench ior -w -r -t 1m -b 128m -N 2 -e -o /ior --json $D.ior.json > /dev/null 2>&1
  echo "{\"label\":\"$L\",\"rep\":$r,\"mdtest\":$(cat $D.md.json),\"ior\":$(jq -c '{write_mib_s: (.write_mib_s // .write.bw_mib_s // null), read_mib_s: (.read_mib_s // .read.bw_mib_s // null)}' $D.ior.json)}" >> $OUT
  pkill -f "tessera up --dir $D"; sleep 2
}
for r in $(seq $REPS); do
  run base /tmp/bin-base 1
  run one $NEW 1
  run three $NEW 3
done
