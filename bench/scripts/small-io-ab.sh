#!/usr/bin/env bash
# Small reads through the mount, two builds of the mount side by side on one cluster (issue 19). Every round
# runs each workload through mount A and mount B, A first in odd rounds and B first in even ones (A = $BIN/tessera-fuse, B = $B_BIN/tessera-fuse; the servers
# are B's). The page cache is dropped before every read run, so each run reads through the mount:
#  - randread: fio, 4 KiB random reads, 2 jobs, psync, over FILE_SIZE files, time_based FIO_SECONDS;
#  - seqread:  fio, 1 MiB sequential reads of the same files (read-ahead must keep them fast);
#  - strided:  IOR 32 KiB 1D-strided shared file, 2 tasks x SEGMENTS segments (task k reads blocks k, k+2, ...).
# The files are written once through a third mount (W, B's build), so neither A nor B reads what it wrote.
# Each run also reports the bytes the data servers served per byte the benchmark read (`tessera df --json`,
# summed over servers and jobs, before and after the run) and fio's latency percentiles.
# Device model none: the data servers read this machine's disk through its page cache.
#
#   bench/scripts/small-io-ab.sh [OUT_DIR]
#   env: BIN=target/release B_BIN=$BIN REPS=3 DS=4 FILE_SIZE=128m FIO_SECONDS=10 SEGMENTS=2048
#        WORKLOADS="randread seqread strided" (any of them)
#        RANDMAP=0: fio picks random blocks with replacement (--norandommap). With its random map (default)
#        fio reads every block once per pass and, nearing the end of a pass, sweeps the remaining free blocks
#        in order — short sequential runs that read-ahead rightly follows.
# Writes OUT_DIR/runs.tsv (round workload mount value unit moved_per_byte p50_us p99_us max_us) and prints
# medians per workload and mount with the B/A ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a_bin=${BIN:-$here/target/release}; b_bin=${B_BIN:-$a_bin}
out=${1:-$(mktemp -d /tmp/tessera-smallio.XXXXXX)}
reps=${REPS:-3}; nds=${DS:-4}; fsize=${FILE_SIZE:-128m}; secs=${FIO_SECONDS:-10}; segs=${SEGMENTS:-2048}
command -v fio > /dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-smallio.XXXXXX)
bin=$b_bin
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
bin=$b_bin mount_fuse "$work/w" "$work/fw.log"
bin=$a_bin mount_fuse "$work/a" "$work/fa.log"
bin=$b_bin mount_fuse "$work/b" "$work/fb.log"
for m in w a b; do need_ready "mount $m" "$work/f$m.log"; done

# Bytes the data servers have served to readers since they started (all jobs).
served() {
  "$b_bin/tessera" df --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
servers = d["servers"] if isinstance(d, dict) else d  # `tessera df --json`: {"servers": [...], ...}
print(sum(j["read_bytes"] for s in servers if s.get("report") for j in s["report"]["jobs"]))'
}
# The servers report every second: wait for reports that include the last run.
settle() { sleep 2.5; }
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }

fio_common=(--directory=fio --numjobs=2 --group_reporting --ioengine=psync --size="$fsize" --output-format=json)
# Write the files once through W: fio's jobs name their files NAME.JOB.0; randread and seqread share them.
mkdir -p "$work/w/fio"
(cd "$work/w" && fio --name=data "${fio_common[@]}" --rw=write --bs=1m --end_fsync=1 --output="$work/write.json" > /dev/null)
"$b_bin/tessera-bench" ior -a posix -w -k -e -t 32k -b 32k -s "$segs" -N 2 -o "$work/w/strided" > "$work/ior-w.txt" 2>&1

# run ROUND WORKLOAD MOUNT: one measurement, appended to runs.tsv.
run() {
  local round=$1 wl=$2 m=$3 json=$work/r.json before after value unit
  # A job of its own: PerSched's detection would take the same job's repeated runs for a periodic one.
  export TESSERA_JOB=smallio-$round-$wl-$m
  drop_caches; settle
  before=$(served)
  local randmap=(); [ "${RANDMAP:-1}" = 0 ] && randmap=(--norandommap)
  case $wl in
    randread) (cd "$work/$m" && fio --name=data "${fio_common[@]}" "${randmap[@]}" --rw=randread --bs=4k --time_based \
                --runtime="$secs" --output="$json" > /dev/null) ;;
    seqread)  (cd "$work/$m" && fio --name=data "${fio_common[@]}" --rw=read --bs=1m --output="$json" > /dev/null) ;;
    strided)  "$b_bin/tessera-bench" ior -a posix -r -t 32k -b 32k -s "$segs" -N 2 -o "$work/$m/strided" \
                --json "$json" > "$work/ior-r.txt" 2>&1 ;;
  esac
  settle
  after=$(served)
  python3 - "$json" "$wl" "$round" "$m" "$before" "$after" >> "$out/runs.tsv" << 'EOF'
import json, sys
path, wl, rnd, m, before, after = sys.argv[1:7]
d = json.load(open(path))
moved = int(after) - int(before)
if wl == "strided":
    mib_s = d["read_mib_s"]
    got = d["total_bytes"]
    print(rnd, wl, m, f"{mib_s:.1f}", "MiB/s", f"{moved / got:.2f}" if got else "-", "-", "-", "-", sep="\t")
else:
    r = d["jobs"][0]["read"]
    pct = r["clat_ns"].get("percentile", {})
    us = lambda k: f"{pct[k] / 1000:.0f}" if k in pct else "-"
    value, unit = (r["iops"], "IOPS") if wl == "randread" else (r["bw_bytes"] / 2**20, "MiB/s")
    print(rnd, wl, m, f"{value:.1f}", unit, f"{moved / r['io_bytes']:.2f}" if r["io_bytes"] else "-",
          us("50.000000"), us("99.000000"), f"{r['clat_ns']['max'] / 1000:.0f}", sep="\t")
EOF
  tail -1 "$out/runs.tsv"
}

echo "config: $nds data servers, device model none, files $fsize x 2 jobs, fio $secs s, strided 2 x $segs x 32 KiB;" \
  "A=$a_bin B=$b_bin; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/setup.txt"
printf 'round\tworkload\tmount\tvalue\tunit\tmoved_per_byte\tp50_us\tp99_us\tmax_us\n' > "$out/runs.tsv"
workloads=${WORKLOADS:-randread seqread strided}
for r in $(seq "$reps"); do
  for wl in $workloads; do
    # Odd rounds run A first, even rounds B first, so neither build always reads second.
    if [ $((r % 2)) = 1 ]; then run "$r" "$wl" a; run "$r" "$wl" b; else run "$r" "$wl" b; run "$r" "$wl" a; fi
  done
done
python3 - "$out/runs.tsv" << 'EOF' | tee "$out/summary.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = lambda wl, m, k: statistics.median(float(r[k]) for r in rows if r["workload"] == wl and r["mount"] == m and r[k] != "-")
print("| workload | unit | A | B | B/A | A moved/byte | B moved/byte | A p99 µs | B p99 µs |")
print("|---|---|---|---|---|---|---|---|---|")
for wl in [w for w in ["randread", "seqread", "strided"] if any(r["workload"] == w for r in rows)]:
    unit = next(r["unit"] for r in rows if r["workload"] == wl)
    a, b = med(wl, "a", "value"), med(wl, "b", "value")
    def opt(m, k):
        try: return f"{med(wl, m, k):.2f}" if k == "moved_per_byte" else f"{med(wl, m, k):.0f}"
        except statistics.StatisticsError: return "-"
    print(f"| {wl} | {unit} | {a:.1f} | {b:.1f} | {b / a:.2f} | {opt('a', 'moved_per_byte')} | {opt('b', 'moved_per_byte')} | {opt('a', 'p99_us')} | {opt('b', 'p99_us')} |")
print(f"\nmedians of {len({r['round'] for r in rows})} rounds; moved/byte = bytes the data servers served / bytes the benchmark read")
EOF
