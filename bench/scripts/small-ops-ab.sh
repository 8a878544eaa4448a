#!/usr/bin/env bash
# Small operations through the mount, two builds side by side (issue 19): cluster A runs $BIN's servers and
# mount, cluster B $B_BIN's, and every round measures each workload on A then B (B then A in even rounds):
#  - randwrite: fio 4 KiB random writes, 2 jobs, psync, FILE_SIZE files, FIO_SECONDS, end_fsync (IOPS and
#    the latency of single writes: p50, p99, max);
#  - randread:  fio 4 KiB random reads of the same files after a cache drop (IOPS, latency);
#  - mdtest:    MDFILES files in one directory, 2 tasks: create, stat, read (open, read 0 bytes, close), remove;
#  - mdtest-lib: the same through the client library (each cluster's own tessera-bench): single calls;
#  - strided:   IOR 32 KiB 1D-strided shared file, 2 tasks x SEGMENTS segments, written through the first
#               mount and read through a second one after a cache drop (MiB/s);
#  - seqwrite/seqread: fio 1 MiB sequential, 2 jobs, SEQ_SIZE files, end_fsync (large I/O must not move).
# Device model none: the data servers write to this machine's disk through its page cache.
#
#   bench/scripts/small-ops-ab.sh [OUT_DIR]
# The load generators (tessera-bench mdtest and ior, through the mounts) are TOOL_BIN's for both clusters.
#   env: BIN=target/release B_BIN=$BIN TOOL_BIN=$B_BIN REPS=3 DS=4 FILE_SIZE=128m FIO_SECONDS=10 MDFILES=10000 SEGMENTS=2048
#        SEQ_SIZE=256m WORKLOADS="randwrite randread mdtest strided seq"
# Writes OUT_DIR/runs.tsv (round workload cluster metric value) and OUT_DIR/summary.md (medians, B/A).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a_bin=${BIN:-$here/target/release}; b_bin=${B_BIN:-$a_bin}; tool=${TOOL_BIN:-$b_bin}
out=${1:-$(mktemp -d /tmp/tessera-smallops.XXXXXX)}
reps=${REPS:-3}; nds=${DS:-4}; fsize=${FILE_SIZE:-128m}; secs=${FIO_SECONDS:-10}; mdfiles=${MDFILES:-10000}
segs=${SEGMENTS:-2048}; seq_size=${SEQ_SIZE:-256m}; workloads=${WORKLOADS:-randwrite randread mdtest strided seq}
command -v fio > /dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-smallops.XXXXXX)
. "$here/bench/scripts/cluster.sh"
declare -A bin_of conf_of
for c in a b; do
  if [ $c = a ]; then bin=$a_bin; else bin=$b_bin; fi
  bin_of[$c]=$bin
  start_cluster "$nds" "$c"
  conf_of[$c]=$TESSERA_CONFIG
  mount_fuse "$work/$c-1" "$work/fuse-$c-1.log"
  mount_fuse "$work/$c-2" "$work/fuse-$c-2.log"
  for m in 1 2; do need_ready "mount $c-$m" "$work/fuse-$c-$m.log"; done
  mkdir -p "$work/$c-1/fio" "$work/$c-1/seq"
done
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }

# record ROUND WORKLOAD CLUSTER METRIC VALUE
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >> "$out/runs.tsv"; }
# fio_result ROUND NAME CLUSTER JSON SIDE: IOPS (or MiB/s for sequential runs) and latency percentiles.
fio_result() {
  python3 - "$@" << 'EOF' >> "$out/runs.tsv"
import json, sys
rnd, name, c, path, side = sys.argv[1:6]
j = json.load(open(path))["jobs"][0]
s = j[side]
if j["error"]:
    sys.exit(f"fio {name} on cluster {c} failed with error {j['error']}")
pct = s["clat_ns"].get("percentile", {})
rows = [("iops", s["iops"])] if name.startswith("rand") else [("mib_s", s["bw_bytes"] / 2**20)]
rows += [(f"p{k[:2]}_us", pct[k] / 1000) for k in ("50.000000", "99.000000") if k in pct]
rows.append(("max_us", s["clat_ns"]["max"] / 1000))
for metric, v in rows:
    print(rnd, name, c, metric, f"{v:.1f}", sep="\t")
EOF
}
fio_on() { # CLUSTER NAME fio args...
  local c=$1 name=$2; shift 2
  (cd "$work/$c-1" && fio --name="$name" --numjobs=2 --group_reporting --ioengine=psync --output-format=json \
    --output="$work/fio.json" "$@" > /dev/null)
}

run() { # ROUND WORKLOAD CLUSTER
  local r=$1 wl=$2 c=$3 bin=${bin_of[$3]}
  export TESSERA_CONFIG=${conf_of[$c]}
  case $wl in
    randwrite)
      fio_on "$c" rand --directory=fio --rw=randwrite --bs=4k --size="$fsize" --time_based --runtime="$secs" --end_fsync=1
      fio_result "$r" randwrite "$c" "$work/fio.json" write ;;
    randread)
      drop_caches
      fio_on "$c" rand --directory=fio --rw=randread --bs=4k --size="$fsize" --time_based --runtime="$secs"
      fio_result "$r" randread "$c" "$work/fio.json" read ;;
    mdtest)
      "$tool/tessera-bench" mdtest -a posix -d "$work/$c-1/md$r" -n "$mdfiles" -N 2 --json "$work/md.json" > "$work/md.txt" 2>&1
      python3 - "$r" "$c" "$work/md.json" << 'EOF' >> "$out/runs.tsv"
import json, sys
rnd, c, path = sys.argv[1:4]
d = json.load(open(path))
for k in ("create", "stat", "read", "remove"):
    print(rnd, "mdtest", c, f"{k}_ops_s", f"{d[f'{k}_ops_s']:.1f}", sep="\t")
EOF
      ;;
    mdtest-lib)
      # Through the client library, each cluster's own (its protocol): single metadata calls, no mount.
      TESSERA_CONFIG=${conf_of[$c]} "${bin_of[$c]}/tessera-bench" mdtest -a tessera -d "/mdlib$r" -n "$mdfiles" -N 2 --json "$work/md.json" > "$work/md.txt" 2>&1
      python3 - "$r" "$c" "$work/md.json" << 'EOF' >> "$out/runs.tsv"
import json, sys
rnd, c, path = sys.argv[1:4]
d = json.load(open(path))
for k in ("create", "stat", "read", "remove"):
    print(rnd, "mdtest-lib", c, f"{k}_ops_s", f"{d[f'{k}_ops_s']:.1f}", sep="\t")
EOF
      ;;
    strided)
      "$tool/tessera-bench" ior -a posix -w -k -e -t 32k -b 32k -s "$segs" -N 2 -o "$work/$c-1/strided$r" > "$work/ior-w.txt" 2>&1
      drop_caches
      "$tool/tessera-bench" ior -a posix -r -t 32k -b 32k -s "$segs" -N 2 -o "$work/$c-2/strided$r" --json "$work/ior.json" > "$work/ior-r.txt" 2>&1
      record "$r" strided "$c" mib_s "$(python3 -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['read_mib_s']:.1f}\")" "$work/ior.json")" ;;
    seq)
      rm -f "$work/$c-1"/seq/*
      fio_on "$c" seq --directory=seq --rw=write --bs=1m --size="$seq_size" --end_fsync=1
      fio_result "$r" seqwrite "$c" "$work/fio.json" write
      drop_caches
      fio_on "$c" seq --directory=seq --rw=read --bs=1m --size="$seq_size"
      fio_result "$r" seqread "$c" "$work/fio.json" read ;;
  esac
}

echo "config: $nds data servers per cluster, device model none, fio 2 jobs x $fsize, $secs s; mdtest $mdfiles files x 2 tasks;" \
  "strided 2 x $segs x 32 KiB; seq 2 x $seq_size; A=$a_bin B=$b_bin; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/setup.txt"
printf 'round\tworkload\tcluster\tmetric\tvalue\n' > "$out/runs.tsv"
for r in $(seq "$reps"); do
  order="a b"; [ $((r % 2)) = 0 ] && order="b a"
  for wl in $workloads; do
    for c in $order; do run "$r" "$wl" "$c"; done
  done
  echo "round $r done" >&2
done
python3 - "$out/runs.tsv" << 'EOF' | tee "$out/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
keys = list(dict.fromkeys((r["workload"], r["metric"]) for r in rows))
med = lambda wl, m, c: statistics.median(float(r["value"]) for r in rows if (r["workload"], r["metric"], r["cluster"]) == (wl, m, c))
print("| workload | metric | A | B | B/A |")
print("|---|---|---|---|---|")
for wl, m in keys:
    a, b = med(wl, m, "a"), med(wl, m, "b")
    print(f"| {wl} | {m} | {a:.1f} | {b:.1f} | {b / a if a else float('nan'):.2f} |")
print(f"\nmedians of {len({r['round'] for r in rows})} rounds, A and B alternating in every round")
EOF
