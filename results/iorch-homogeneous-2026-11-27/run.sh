#!/bin/bash
# usage: [BENCH=path/to/tessera-bench] run.sh OUTDIR ; runs the full iorch-homogeneous protocol and samples the load every 10 s while the experiment runs
cd /work/main
OUT=$1
( while true; do echo "$(date +%T) $(cat /proc/loadavg)"; sleep 10; done ) > $OUT/loadavg.txt &
L=$!
echo "before: $(uptime)" > $OUT/uptime.txt
/usr/bin/time -v ${BENCH:-target/release/tessera-bench} experiment iorch-homogeneous --runs 3 --seconds 5 --file-size 256m --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io --out $OUT > $OUT/console.txt 2>&1
echo "exit code: $?" >> $OUT/uptime.txt
echo "after: $(uptime)" >> $OUT/uptime.txt
kill $L
