#!/usr/bin/env bash
# 64 clients at once (issue 18): `tessera-bench ior` with 64 tasks (each its own client connection, its own
# file, 1 MiB transfers striped over every data server, fsync) against 2 tasks moving the same total, alternating
# 2/64, REPS repetitions, medians and the 64/2 ratio; every server's peak RSS (VmHWM) after each run; then a
# slow consumer: a `tessera get` of a 1 GiB file stopped with SIGSTOP in the middle of its reads (its streams
# stay open, unread) while the 2-task run is repeated. One `tessera up` cluster on loopback, device model none
# (this machine's disk through the page cache).
#
#   bench/scripts/load.sh [OUT_DIR]        env: BIN=target/release REPS=3 TOTAL_MIB=4096 DS=2
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$here/results/reliability}
reps=${REPS:-3}; total=${TOTAL_MIB:-4096}; nds=${DS:-2}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-load.XXXXXX)
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
"$bin/tessera" mkdir -p /load
"$bin/tessera" setstripe -S 1M -c "$nds" /load
# rss: each server's name, VmRSS and VmHWM in MiB.
rss() {
  for p in $(pgrep -f "tessera-(mds|ds) .*$work/cluster"); do
    name=$(tr '\0' ' ' < "/proc/$p/cmdline" | grep -o -- '--config [^ ]*' | sed 's|.*/||; s|\.toml||')
    awk -v n="$name" '/VmRSS/ {r=$2} /VmHWM/ {h=$2} END {printf "  %-4s rss %6.1f MiB  peak %6.1f MiB\n", n, r/1024, h/1024}' "/proc/$p/status"
  done
}
# peaks: every server's VmHWM in MiB on one line.
peaks() {
  for p in $(pgrep -f "tessera-(mds|ds) .*$work/cluster"); do
    name=$(tr '\0' ' ' < "/proc/$p/cmdline" | grep -o -- '--config [^ ]*' | sed 's|.*/||; s|\.toml||')
    awk -v n="$name" '/VmHWM/ {printf "%s %.0f MiB  ", n, $2/1024}' "/proc/$p/status"
  done
}
ior() { # tasks, repetition, [extra args]
  local n=$1 r=$2; shift 2
  "$bin/tessera-bench" ior -o /load/t -t 1m -b "$((total / n))m" -N "$n" -F -e -C "$@" \
    --json "$work/ior-$n-$r.json" > "$work/ior-$n-$r.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" "$work/ior-$n-$r.json"
}
echo "config: $nds data servers, stripe 1 MiB x $nds, $total MiB per run (file per task, 1 MiB transfers, fsync, -C); $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== server memory after start"; rss
: > "$work/load.tsv"
for r in $(seq "$reps"); do
  for n in 2 64; do
    read -r w rd < <(ior "$n" "$r")
    echo "$n $r $w $rd" >> "$work/load.tsv"
    echo "tasks $n rep $r: write $w MiB/s, read $rd MiB/s; peak RSS so far: $(peaks)"
  done
done
cp "$work/load.tsv" "$out/load.tsv"
python3 - "$work/load.tsv" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for n in ("2", "64"):
    w = [float(r[2]) for r in rows if r[0] == n]; rd = [float(r[3]) for r in rows if r[0] == n]
    med[n] = (statistics.median(w), statistics.median(rd))
    print(f"medians, {n:>2} clients: write {med[n][0]:.1f} MiB/s, read {med[n][1]:.1f} MiB/s")
print(f"64 / 2 clients: write {med['64'][0] / med['2'][0]:.2f}x, read {med['64'][1] / med['2'][1]:.2f}x")
PY
echo "== server memory after the 64-client runs"; rss

echo "== slow consumer: a reader stopped (SIGSTOP) in the middle of a 1 GiB get"
head -c $((1 << 30)) /dev/zero > "$work/big"
"$bin/tessera" put --quiet "$work/big" /load/big
"$bin/tessera" get --quiet /load/big /dev/null &
getter=$!
sleep 0.3; kill -STOP "$getter"
read -r w rd < <(ior 2 slow)
echo "tasks 2 beside the stopped reader: write $w MiB/s, read $rd MiB/s (compare with the 2-client medians above)"
echo "== server memory with the stopped reader"; rss
kill -CONT "$getter"
if wait "$getter"; then
  echo "the reader, continued, finished its get"
else
  echo "the reader, continued, failed its get: stopped longer than the idle timeout (5 s), its connection was dead, and data reads are not retried"
fi
