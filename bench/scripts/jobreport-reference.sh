#!/bin/sh
# The four reference runs of issue 16 on one local cluster (2 data servers, device model none), each tagged with
# its own job, and their reports: IOR file-per-process (2 tasks), IOR 1D-strided shared file (2 tasks, 32 KiB,
# traced), mdtest (2000 files, 2 tasks; again with 3 KiB written and read per file), and a periodic job (4 bursts
# of 2 x 256 MiB writes, 8 s apart).
#   bench/scripts/jobreport-reference.sh OUT_DIR      (BIN: directory of the binaries, default target/release)
set -eu
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-target/release}
mkdir -p "$OUT"
CL=$(mktemp -d)
"$BIN/tessera" up --dir "$CL/cl" --ds 2 --port-base 0 > "$CL/up.log" 2>&1 &
UP=$!
trap 'kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$CL"' EXIT
while ! grep -q '^TESSERA UP' "$CL/up.log"; do sleep 0.5; done
export TESSERA_CONFIG="$CL/cl/client.toml"
"$BIN/tessera-bench" ior -a tessera -w -r -F -t 1m -b 64m -N 2 --job ref-ior-fpp -o /ref/fpp
"$BIN/tessera" trace start ref-ior-strided
"$BIN/tessera-bench" ior -a tessera -w -r --pattern strided -t 32k -b 4m -s 4 -N 2 --job ref-ior-strided -o /ref/strided
"$BIN/tessera" trace stop ref-ior-strided
"$BIN/tessera-bench" mdtest -n 2000 -N 2 --job ref-mdtest -d /ref/mdtest
for i in 1 2 3 4; do
    "$BIN/tessera-bench" ior -a tessera -w -t 1m -b 256m -N 2 --job ref-periodic -o /ref/periodic
    sleep 8
done
"$BIN/tessera-bench" mdtest -n 2000 -N 2 -w 3k -e 3k --job ref-mdtest-3k -d /ref/mdtest3k
sleep 2.5   # the data servers' last reports
for j in ref-ior-fpp ref-ior-strided ref-mdtest ref-periodic ref-mdtest-3k; do
    "$BIN/tessera" report "$j" --json "$OUT/$j.json" --out "$OUT/plots" > "$OUT/$j.txt"
done
"$BIN/tessera" trace export ref-ior-strided --out "$OUT/ref-ior-strided-trace.csv"
"$BIN/tessera" jobstats > "$OUT/jobstats.txt"
