#!/bin/bash
# TESSERA_RAFT_TIMING=hb,min,max was read by raft_config() in the build measured (a temporary knob, not committed);
# the winner (50,300,600) is now the constant in mds/src/raft/replica.rs.
# alternating: current timing vs 50,300,600 ; 10 kills each, 3 rounds
B=/work/main/target/release
for r in 1 2 3; do
  for t in 100,600,1200 50,300,600; do
    TESSERA_RAFT_TIMING=$t $B/tessera-bench failover --kills 10 --every-s 3 --down-s 1.5 --files 2000 --write-bytes 64K --seed $((60+r)) --json /tmp/fo52/$t-$r.json > /tmp/fo52/$t-$r.txt 2>&1
    echo "$t round $r: $(tail -3 /tmp/fo52/$t-$r.txt | tr '\n' ' ')"
  done
done
