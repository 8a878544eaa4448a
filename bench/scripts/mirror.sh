#!/usr/bin/env bash
# Mirrored files (issue 36) through a FUSE mount, on a cluster of DS data servers started by hand (no
# supervisor: a killed server stays down until the script starts it). Device model none (this machine's
# disk through its page cache).
#  1. Throughput, M = 2 against M = 1: IOR-like (`tessera-bench ior -a posix`, 2 tasks, 1 MiB transfers,
#     SIZE per task, fsync at the end of the write phase, the page cache dropped before every read phase),
#     file per task (-F) and one shared file, in directories set to -N 1 and -N 2; every round runs both,
#     the order alternating; REPS rounds, medians.
#  2. Degraded operation: a writer (1 MiB write + fsync per step, into a mirrored file) and a reader (1 MiB
#     reads of a mirrored file written before, the page cache dropped every pass) run through the mount;
#     data server 1 is killed (SIGKILL) after 3 s and started again OUTAGE s later. Reported: the writer's
#     longest step and steps over 1 s, the reader's p50/p99/max during the outage and before it, and errors.
#  3. Resync: from the restart until `tessera mirror status` shows nothing degraded: the bytes that were to
#     resync at the restart and the rate (GiB/min); meanwhile a foreground reader (fio, 1 MiB sequential
#     reads of an unmirrored file) and the same reader with nothing to resync, for what foreground I/O keeps.
#  4. Rebuild: `tessera ds remove 3 --rebuild`: every mirrored replica on server 3 rebuilt elsewhere; the
#     bytes and the rate, as in 3.
#
#   bench/scripts/mirror.sh [OUT_DIR]      env: BIN=target/release DS=4 REPS=3 SIZE=256m OUTAGE=8
# Writes OUT_DIR/throughput.tsv, degraded.tsv, resync.tsv and prints the summary (also OUT_DIR/summary.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-mirror.XXXXXX)}
nds=${DS:-4}; reps=${REPS:-3}; size=${SIZE:-256m}; outage=${OUTAGE:-8}
command -v fio > /dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-mirror.XXXXXX)
. "$here/bench/scripts/cluster.sh"
start_by_hand "$work/c" "$nds"
mount_fuse "$work/m" "$work/fuse.log"
need_ready "the mount" "$work/fuse.log"
m=$work/m
drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches; }
status_json() { "$bin/tessera" mirror status --json; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

mkdir -p "$m/n1" "$m/n2"
"$bin/tessera" setstripe -N 1 /n1 > /dev/null
"$bin/tessera" setstripe -N 2 /n2 > /dev/null

# 1. Throughput.
echo -e "round\tmirrors\tlayout\top\tMiB_s" > "$out/throughput.tsv"
ior() { # MIRRORS LAYOUT(fpp|shared) ROUND
  local flags=() f=$m/n$1/ior-$2
  [ "$2" = fpp ] && flags=(-F)
  "$bin/tessera-bench" ior -a posix -w -e -k -t 1m -b "$size" -N 2 "${flags[@]}" -o "$f" --json "$work/w.json" > /dev/null
  drop_caches
  "$bin/tessera-bench" ior -a posix -r -t 1m -b "$size" -N 2 "${flags[@]}" -o "$f" --json "$work/r.json" > /dev/null
  for op in w r; do
    python3 - "$work/$op.json" "$3" "$1" "$2" "$op" >> "$out/throughput.tsv" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
op = "write" if sys.argv[5] == "w" else "read"
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{sys.argv[4]}\t{op}\t{d[op + '_mib_s']:.1f}")
EOF
  done
  rm -f "$f"*
}
for r in $(seq "$reps"); do
  order="1 2"; [ $((r % 2)) -eq 0 ] && order="2 1"
  for mm in $order; do for lay in fpp shared; do ior "$mm" "$lay" "$r"; done; done
  echo "throughput round $r of $reps done"
done

# 2. Degraded operation.
head -c 256M /dev/urandom > "$m/n2/readme"
sync
python3 - "$m/n2/degraded" "$m/n2/readme" "$work/lat" "$outage" > /dev/null <<'EOF' &
# Writer and reader threads, each logging (start time, seconds, ok) per step until told to stop.
import os, sys, threading, time
wpath, rpath, log, outage = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end = time.time() + 3 + outage + 4
buf = os.urandom(1 << 20)
def writer():
    with open(log + ".w", "w") as o:
        fd = os.open(wpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        while time.time() < end:
            t = time.time()
            try:
                os.write(fd, buf); os.fsync(fd); ok = 1
            except OSError as e:
                ok = 0; o.write(f"# {e}\n")
            o.write(f"{t:.6f}\t{time.time() - t:.6f}\t{ok}\n")
        os.close(fd)
def reader():
    with open(log + ".r", "w") as o:
        while time.time() < end:
            fd = os.open(rpath, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            while time.time() < end:
                t = time.time()
                try:
                    n = len(os.read(fd, 1 << 20)); ok = 1
                except OSError as e:
                    n = 1; ok = 0; o.write(f"# {e}\n")
                o.write(f"{t:.6f}\t{time.time() - t:.6f}\t{ok}\n")
                if n == 0:
                    break
            os.close(fd)
ts = [threading.Thread(target=writer), threading.Thread(target=reader)]
[t.start() for t in ts]; [t.join() for t in ts]
EOF
load=$!
sleep 3
tk=$(now); kill -9 "${ds_pid[1]}"; wait "${ds_pid[1]}" 2> /dev/null || true
sleep "$outage"
before_restart=$(status_json)
"$bin/tessera-ds" --config "$work/c/ds1.toml" --id 1 >> "$work/ds1.log" 2>&1 &
ds_pid[1]=$!; up_pids+=($!)
tr=$(now)
wait "$load"
python3 - "$work/lat" "$tk" "$tr" > "$out/degraded.tsv" <<'EOF'
import sys
log, tk, tr = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def rows(p):
    out = []
    for line in open(p):
        if line.startswith("#"):
            continue
        t, d, ok = line.split()
        out.append((float(t), float(d), int(ok)))
    return out
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
print("who\twindow\tsteps\terrors\tp50_ms\tp99_ms\tmax_ms\tover_1s")
for who, p in (("writer", log + ".w"), ("reader", log + ".r")):
    r = rows(p)
    for name, lo, hi in (("before", 0, tk), ("outage", tk, tr), ("after", tr, 1e18)):
        w = [x for x in r if lo <= x[0] < hi]
        d = [x[1] * 1000 for x in w]
        print(f"{who}\t{name}\t{len(w)}\t{sum(1 for x in w if not x[2])}\t{pct(d, .5):.1f}\t{pct(d, .99):.1f}\t{max(d, default=float('nan')):.1f}\t{sum(1 for x in d if x > 1000)}")
EOF
grep -h "^#" "$work/lat.w" "$work/lat.r" | head -5 || true

# 3. Resync, with a foreground reader.
mkdir -p "$m/fg"; "$bin/tessera" setstripe -N 1 /fg > /dev/null
fio --name=fg --directory="$m/fg" --rw=write --bs=1m --size=512m --numjobs=1 --end_fsync=1 > /dev/null
# 1 MiB sequential reads for 3 s (the file read over and over, its pages dropped first): MiB/s.
fg_read() { drop_caches; fio --name=fg --directory="$m/fg" --rw=read --bs=1m --size=512m --numjobs=1 --time_based --runtime=3 --invalidate=1 --output-format=json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw"]/1024, 1))'; }
wait_clean() { # prints seconds until nothing is degraded
  local t0; t0=$(now)
  for _ in $(seq 1200); do
    s=$(status_json); [ "$(field "$s" degraded_objects)" = 0 ] && break; sleep 0.25
  done
  since "$t0"
}
to_resync=$(field "$before_restart" bytes_to_resync)
( fg_read > "$work/fg_during" ) &
fgp=$!
secs=$(wait_clean)
wait "$fgp" || true
fg_during=$(cat "$work/fg_during")
fg_idle=$(fg_read)
echo -e "what\tbytes\tseconds\tGiB_per_min" > "$out/resync.tsv"
echo -e "resync\t$to_resync\t$secs\t$(python3 -c "print(round($to_resync / 2**30 / max($secs, 1e-9) * 60, 2))")" >> "$out/resync.tsv"

# 4. Rebuild of server 3 elsewhere.
"$bin/tessera" --config "$work/c/admin.toml" ds remove 3 --rebuild > "$work/remove.txt"
s=$(status_json); rebuild_bytes=$(field "$s" bytes_to_resync)
secs=$(wait_clean)
echo -e "rebuild\t$rebuild_bytes\t$secs\t$(python3 -c "print(round($rebuild_bytes / 2**30 / max($secs, 1e-9) * 60, 2))")" >> "$out/resync.tsv"

python3 - "$out" "$reps" "$fg_idle" "$fg_during" <<'EOF' | tee "$out/summary.md"
import csv, statistics, sys
out, reps, fg_idle, fg_during = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = list(csv.DictReader(open(f"{out}/throughput.tsv"), delimiter="\t"))
print(f"## Throughput through the mount, medians of {reps} rounds (MiB/s)\n")
print("| layout | op | M = 1 | M = 2 | M2/M1 |\n|---|---|---|---|---|")
for lay in ("fpp", "shared"):
    for op in ("write", "read"):
        v = {m: statistics.median(float(r["MiB_s"]) for r in rows if r["layout"] == lay and r["op"] == op and r["mirrors"] == m) for m in ("1", "2")}
        print(f"| {lay} | {op} | {v['1']:.1f} | {v['2']:.1f} | {v['2'] / v['1']:.2f} |")
print("\n## Degraded operation (data server 1 killed, then restarted)\n")
print("| " + " | ".join(open(f"{out}/degraded.tsv").readline().split()) + " |")
print("|" + "---|" * 8)
for line in list(open(f"{out}/degraded.tsv"))[1:]:
    print("| " + " | ".join(line.split()) + " |")
print("\n## Resync and rebuild\n")
for line in open(f"{out}/resync.tsv"):
    print("    " + line.rstrip())
print(f"\nforeground fio read (3 s, from the restart on) while resyncing: {fg_during} MiB/s; with nothing to resync: {fg_idle} MiB/s")
EOF
