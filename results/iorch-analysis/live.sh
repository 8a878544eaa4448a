#!/bin/bash
# Live measurement on a running `tessera up` cluster: $1 = cluster dir, $2 = mode, $3 = seconds, $4.. = jobs (A B ...)
# Each job J runs `tessera-bench workload mpi-io-test --barrier` on /iorch/fJ.dat (256 MiB) as job J.
D=$1; MODE=$2; T=$3; shift 3
B=/work/main/target/release
export TESSERA_CONFIG=$D/client.toml
$B/tessera --config $D/admin.toml orchestrator mode $MODE >/dev/null
sleep 1.5
for j in "$@"; do
  K=${KIND:-mpi-io-test}
  $B/tessera-bench workload $K --barrier --size 256m --file /iorch/f$j.dat --time $T --job $j > /tmp/ia/out.$j 2>&1 &
done
wait
for j in "$@"; do echo "$MODE $j: $(tail -1 /tmp/ia/out.$j)"; done
