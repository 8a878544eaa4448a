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
# 15 s runs of 1 GiB files (a 256 MiB file is read in ~3.5 s when orchestrated): the first window or two of a run
# are work-conserving (both programs must report first), which is 1 s of a 3.5 s run at a 1000 ms window.
"$b" experiment iorch-window --runs 3 --seconds 15 --file-size 1g --out "$out"
"$b" experiment iorch-trace --quick --out "$out"
"$b" experiment iorch-homogeneous "${common[@]}" --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io \
  --device-model none --out "$out/device-none"
