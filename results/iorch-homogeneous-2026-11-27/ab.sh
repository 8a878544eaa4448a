#!/bin/bash
# alternate the stop-12 build (6825c74) and this one, same command, debug log of the orchestrator
cd /work/main
R=results/iorch-homogeneous-2026-11-27
export RUST_LOG=info,tessera_mds::orchestrator=debug
for pair in "$@"; do
  name=${pair%%:*}; bin=${pair#*:}
  mkdir -p $R/$name
  BENCH=$bin results/iorch-homogeneous-2026-11-27/run.sh $R/$name
done
