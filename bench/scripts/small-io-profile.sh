#!/usr/bin/env bash
# What bounds the small-I/O workloads still short of issue 19's goals, on one `tessera up` cluster (4 data
# servers, device model none) with two FUSE mounts:
#  - mdtest (file read, remove): the MDS requests each file costs, by type, counted by the MDS's own metrics
#    over the whole run (create, stat, read, remove phases), next to the MDS round trip (`tessera ping`);
#  - fio 4 KiB random writes: the worst single write, and how long runnable threads waited for a CPU during
#    the run (`perf sched latency`: a write crosses the fuser thread, the mount's runtime and a data server's);
#  - fio 4 KiB random reads and the 32 KiB strided read through the second mount: where the CPU goes
#    (`perf record -a -g`, by process and top symbols) and how busy the machine is (idle share).
# Needs fio and perf (linux-perf). Writes OUT_DIR/profile.md and the raw reports next to it.
#
#   bench/scripts/small-io-profile.sh [OUT_DIR]      env: BIN=target/release MDFILES=10000 SEGMENTS=4096
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-profile.XXXXXX)}
mdfiles=${MDFILES:-10000}; segs=${SEGMENTS:-4096}
for t in fio perf; do command -v $t > /dev/null || { echo "$t is not installed" >&2; exit 1; }; done
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/tessera-profile.XXXXXX)
. "$here/bench/scripts/cluster.sh"
port=$((20000 + RANDOM % 20000))
# The cluster's files are written once, then the MDS's metrics endpoint is switched on.
dir=$work/cluster
cluster_files "$dir" 4
sed -i "s|^\[metrics\]$|[metrics]\nmds_addr = \"127.0.0.1:$port\"|" "$dir/mds.toml"
up "$dir" 4; up_pids+=("$up_pid")
export TESSERA_CONFIG=$dir/client.toml
mount_fuse "$work/m1" "$work/fuse-1.log"; mount_fuse "$work/m2" "$work/fuse-2.log"
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }
requests() { curl -sf "http://127.0.0.1:$port/metrics" | sed -n 's/^tessera_mds_requests_total{type="\([A-Za-z]*\)"} \([0-9]*\)$/\1 \2/p'; }
{
  echo "# Small-I/O profile ($(date -u +%F), $(nproc) cores, 4 data servers, device model none, $bin)"
  echo
  echo "## mdtest: MDS requests per file ($mdfiles files, 2 tasks, through the mount)"
  "$bin/tessera" ping 2>&1 | sed 's/^/    /' | head -3
  requests > "$work/req0"
  "$bin/tessera-bench" mdtest -a posix -d "$work/m1/md" -n "$mdfiles" -N 2 --json "$out/mdtest.json" > /dev/null
  requests > "$work/req1"
  python3 - "$work/req0" "$work/req1" "$mdfiles" "$out/mdtest.json" << 'EOF'
import json, sys
a = dict(l.split() for l in open(sys.argv[1])); b = dict(l.split() for l in open(sys.argv[2]))
n = int(sys.argv[3]); d = json.load(open(sys.argv[4]))
print("phase rates: " + ", ".join(f"{k} {d[f'{k}_ops_s']:.0f}/s" for k in ("create", "stat", "read", "remove")))
print("\n| request | count | per file |\n|---|---|---|")
for k in sorted(b, key=lambda k: -(int(b[k]) - int(a.get(k, 0)))):
    c = int(b[k]) - int(a.get(k, 0))
    if c > 0:
        print(f"| {k} | {c} | {c / n:.2f} |")
EOF
  echo
  echo "## fio 4 KiB random writes (2 jobs, psync, 128 MiB files, 10 s): worst write and CPU waits"
  mkdir -p "$work/m1/fio"
  (sleep 3; perf sched record -a -o "$work/sched.data" -- sleep 4 > /dev/null 2>&1) &
  fio --name=rw --directory="$work/m1/fio" --rw=randwrite --bs=4k --size=128m --numjobs=2 --group_reporting \
    --ioengine=psync --time_based --runtime=10 --end_fsync=1 --output-format=json --output="$out/randwrite.json" > /dev/null
  wait
  python3 -c "
import json; w = json.load(open('$out/randwrite.json'))['jobs'][0]['write']; c = w['clat_ns']
print(f\"IOPS {w['iops']:.0f}, p50 {c['percentile']['50.000000']/1e3:.0f} us, p99.9 {c['percentile']['99.900000']/1e3:.0f} us, max {c['max']/1e6:.1f} ms\")"
  perf sched latency -i "$work/sched.data" --sort max 2> /dev/null > "$out/sched-latency.txt" || true
  echo
  echo '```'
  sed -n '1,10p' "$out/sched-latency.txt" | cut -c1-110
  echo '```'
  echo
  echo "## fio 4 KiB random reads of the same files after a cache drop, and the strided read: where the CPU goes"
  drop_caches
  perf record -a -g -o "$work/randread.data" -- fio --name=rw --directory="$work/m1/fio" --rw=randread --bs=4k \
    --size=128m --numjobs=2 --group_reporting --ioengine=psync --time_based --runtime=10 --output-format=json \
    --output="$out/randread.json" > /dev/null 2>&1
  python3 -c "
import json; r = json.load(open('$out/randread.json'))['jobs'][0]['read']; c = r['clat_ns']
print(f\"randread IOPS {r['iops']:.0f}, p50 {c['percentile']['50.000000']/1e3:.0f} us, max {c['max']/1e6:.1f} ms\")"
  "$bin/tessera-bench" ior -a posix -w -k -e -t 32k -b 32k -s "$segs" -N 2 -o "$work/m1/strided" > /dev/null 2>&1
  drop_caches
  perf record -a -g -o "$work/strided.data" -- "$bin/tessera-bench" ior -a posix -r -t 32k -b 32k -s "$segs" -N 2 \
    -o "$work/m2/strided" --json "$out/strided.json" > /dev/null 2>&1
  python3 -c "import json; print(f\"strided read {json.load(open('$out/strided.json'))['read_mib_s']:.0f} MiB/s\")"
  for p in randread strided; do
    perf report -i "$work/$p.data" --no-children --sort comm --stdio 2> /dev/null | grep -E '^ +[0-9]' | head -8 > "$out/$p-comm.txt" || true
    perf report -i "$work/$p.data" --no-children --sort sym --stdio -g none 2> /dev/null | grep -E '^ +[0-9]' | head -15 > "$out/$p-sym.txt" || true
    echo
    echo "### $p: CPU by process, then the top symbols"
    echo '```'
    cat "$out/$p-comm.txt" "$out/$p-sym.txt" | cut -c1-110
    echo '```'
  done
} 2>&1 | tee "$out/profile.md"
