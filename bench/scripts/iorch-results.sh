#!/usr/bin/env bash
# Issue-4 results in one go: every IOrchestrator experiment at full length (medians of 3 runs of 5 s, 256 MiB
# files, emulated hdd unless said), into results/ (and results/device-none for the real device).
#   bench/scripts/iorch-results.sh [OUT_DIR]        (needs: cargo build --release --bins)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
b=${BIN:-$here/target/release}/tessera-bench
out=${1:-$here/results}
common=(--runs 3 --seconds 5 --file-size 256m)
"$b" experiment iorch-distance "${common[@]}" --out "$out"
"$b" experiment iorch-heterogeneous "${common[@]}" --out "$out"
"$b" experiment iorch-homogeneous "${common[@]}" --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io --out "$out"
"$b" experiment iorch-window "${common[@]}" --out "$out"
"$b" experiment iorch-trace --quick --out "$out"
"$b" experiment iorch-homogeneous "${common[@]}" --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io \
  --device-model none --out "$out/device-none"
