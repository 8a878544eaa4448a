#!/bin/sh
# The four reference runs of issue 16 on one local cluster (2 data servers, device model none), each tagged with
# its own job, and their reports: IOR file-per-process (2 tasks), IOR 1D-strided shared file (2 tasks, 32 KiB,
# traced), mdtest (2000 files, 2 tasks; again with 3 KiB written and read per file), and a periodic job (4 bursts
# of 2 x 256 MiB writes, 8 s apart); and mdtest again through a FUSE mount (its creates reach the MDS in
# directory-lease batches sent later: each must still count under the job that made it).
#   bench/scripts/jobreport-reference.sh OUT_DIR      (BIN: directory of the binaries, default target/release)
set -eu
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-target/release}
mkdir -p "$OUT"
CL=$(mktemp -d)
"$BIN/tessera" up --dir "$CL/cl" --ds 2 --port-base 0 > "$CL/up.log" 2>&1 &
UP=$!
MNT=$CL/mnt; FUSE=
trap 'kill $FUSE 2>/dev/null; umount -l "$MNT" 2>/dev/null; kill $UP 2>/dev/null; wait $UP 2>/dev/null; rm -rf "$CL"' EXIT
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
mkdir -p "$MNT"
"$BIN/tessera-fuse" "$MNT" > "$CL/fuse.log" 2>&1 &
FUSE=$!
while ! grep -q READY "$CL/fuse.log"; do sleep 0.2; done
mkdir -p "$MNT/ref"
TESSERA_JOB=ref-mdtest-mount "$BIN/tessera-bench" mdtest -n 2000 -N 2 -a posix -d "$MNT/ref/mdtest-mount"
sleep 2.5   # the data servers' last reports
for j in ref-ior-fpp ref-ior-strided ref-mdtest ref-periodic ref-mdtest-3k ref-mdtest-mount; do
    "$BIN/tessera" report "$j" --json "$OUT/$j.json" --out "$OUT/plots" > "$OUT/$j.txt"
done
"$BIN/tessera" trace export ref-ior-strided --out "$OUT/ref-ior-strided-trace.csv"
"$BIN/tessera" jobstats > "$OUT/jobstats.txt"
