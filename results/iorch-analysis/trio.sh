#!/bin/bash
# Heterogeneous trio live: $1 = cluster dir, $2 = mode, $3 = seconds. Files /iorch/f{mpi-io-test,noncontig,hpio}.dat (256 MiB).
D=$1; MODE=$2; T=$3
B=/work/main/target/release
export TESSERA_CONFIG=$D/client.toml
$B/tessera --config $D/admin.toml orchestrator mode $MODE >/dev/null
sleep 1.5
echo "== $MODE window-start $(grep -c ' plan ' $D/logs/mds.log)"
for k in mpi-io-test noncontig hpio; do
  $B/tessera-bench workload $k --barrier --size 256m --file /iorch/f$k.dat --time $T --job $k > /tmp/ia/trio.$k 2>&1 &
done
wait
tot=0
for k in mpi-io-test noncontig hpio; do l=$(tail -1 /tmp/ia/trio.$k); echo "$MODE $l"; done
echo "== $MODE window-end $(grep -c ' plan ' $D/logs/mds.log)"
