#!/usr/bin/env bash
# Issue-4 results in one go: every IOrchestrator experiment, medians of 3 runs, emulated hdd unless said, into
# results/ (and results/device-none for the real device). Distance, trio and window read 1 GiB files for up to
# 15 s (the experiments' defaults): the first window or two of every orchestrated run are work-conserving (both
# programs must have reported), which is a large part of a short run (a 256 MiB file is read in ~3.5 s when
# orchestrated) and more of it the longer the window or the slower vanilla (farther files). The homogeneous
# comparisons use 256 MiB files and 5 s runs.
#   bench/scripts/iorch-results.sh [OUT_DIR]        (needs: cargo build --release --bins)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
b=${BIN:-$here/target/release}/tessera-bench
out=${1:-$here/results}
common=(--runs 3 --seconds 5 --file-size 256m)
long=(--runs 3 --seconds 15 --file-size 1g)
"$b" experiment iorch-distance "${long[@]}" --out "$out"
"$b" experiment iorch-heterogeneous "${long[@]}" --out "$out"
"$b" experiment iorch-homogeneous "${common[@]}" --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io --out "$out"
"$b" experiment iorch-window "${long[@]}" --out "$out"
"$b" experiment iorch-trace --quick --out "$out"
"$b" experiment iorch-homogeneous "${common[@]}" --variants barrier --benchmarks mpi-io-test --benchmarks ior-mpi-io \
  --device-model none --out "$out/device-none"
