#!/usr/bin/env bash
# Mirrored files (issue 36) through a FUSE mount, on a cluster of DS data servers started by hand (no
# supervisor: a killed server stays down until the script starts it). Device model none (this machine's
# disk through its page cache).
#  1. Throughput, M = 2 against M = 1: IOR-like (`tessera-bench ior -a posix`, 2 tasks, 1 MiB transfers,
#     SIZE per task, fsync at the end of the write phase, the page cache dropped before every read phase),
#     file per task (-F) and one shared file, in directories set to -N 1 and -N 2; every round runs both,
#     the order alternating; REPS rounds, medians.
#  2. Degraded operation, REPS times: a writer (1 MiB write + fsync per step, into a mirrored file) and a
#     reader (1 MiB reads of a mirrored file written before, the page cache dropped every pass) run through
#     the mount; data server 1 is killed (SIGKILL) after 3 s and started again OUTAGE s later, then the
#     round waits until nothing is degraded. Reported per round: the writer's longest step and steps over
#     1 s, the reader's p50/p99/max during the outage and before it, and errors; medians over the rounds.
#  3. Resync at scale: data server 1 killed, RESYNC_SIZE written into mirrored files while it is down, then
#     started again; from the restart until `tessera mirror status` shows nothing degraded: the bytes to
#     resync and the rate (GiB/min), while a foreground reader (fio, 1 MiB sequential reads of an
#     unmirrored file, 2 s samples) runs throughout; the same reader afterwards with nothing to resync, as
#     many samples, for what foreground I/O keeps.
#  4. Rebuild: `tessera ds remove 3 --rebuild`: every mirrored replica on server 3 rebuilt elsewhere; bytes,
#     rate and the foreground reader, as in 3.
#
#   bench/scripts/mirror.sh [OUT_DIR]
#   env: BIN=target/release DS=4 REPS=3 SIZE=256m OUTAGE=8 RESYNC_SIZE=2g PARTS="throughput degraded resync partial"
# Writes OUT_DIR/throughput.tsv, degraded.tsv, resync.tsv, foreground.tsv and the summary (OUT_DIR/summary.md).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$(mktemp -d /tmp/tessera-mirror.XXXXXX)}
nds=${DS:-4}; reps=${REPS:-3}; size=${SIZE:-256m}; outage=${OUTAGE:-8}; resync_size=${RESYNC_SIZE:-2g}
parts=" ${PARTS:-throughput degraded resync partial} "
part() { [[ $parts == *" $1 "* ]]; }
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
if part throughput; then
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
fi

# 2. Degraded operation, REPS rounds.
wait_clean() { # prints seconds until nothing is degraded
  local t0; t0=$(now)
  for _ in $(seq 2400); do
    s=$(status_json); [ "$(field "$s" degraded_objects)" = 0 ] && break; sleep 0.25
  done
  since "$t0"
}
echo -e "round\twho\twindow\tsteps\terrors\tp50_ms\tp99_ms\tmax_ms\tover_1s" > "$out/degraded.tsv"
if part degraded; then
head -c 256M /dev/urandom > "$m/n2/readme"
sync
for r in $(seq "$reps"); do
# A new file every round: data server 1 is its primary for one stripe and holds the other replica of
# another (a file kept from the last round has had its primaries moved off server 1).
rm -f "$m/n2/degraded"
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
"$bin/tessera-ds" --config "$work/c/ds1.toml" --id 1 >> "$work/ds1.log" 2>&1 &
ds_pid[1]=$!; up_pids+=($!)
tr=$(now)
wait "$load"
python3 - "$work/lat" "$tk" "$tr" "$r" >> "$out/degraded.tsv" <<'EOF'
import sys
log, tk, tr, rnd = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
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
for who, p in (("writer", log + ".w"), ("reader", log + ".r")):
    r = rows(p)
    for name, lo, hi in (("before", 0, tk), ("outage", tk, tr), ("after", tr, 1e18)):
        w = [x for x in r if lo <= x[0] < hi]
        d = [x[1] * 1000 for x in w]
        print(f"{rnd}\t{who}\t{name}\t{len(w)}\t{sum(1 for x in w if not x[2])}\t{pct(d, .5):.1f}\t{pct(d, .99):.1f}\t{max(d, default=float('nan')):.1f}\t{sum(1 for x in d if x > 1000)}")
EOF
grep -h "^#" "$work/lat.w" "$work/lat.r" | head -5 || true
mkdir -p "$out/steps"; cp "$work/lat.w" "$out/steps/writer-$r.tsv"; cp "$work/lat.r" "$out/steps/reader-$r.tsv"
echo -e "$tk\t$tr" > "$out/steps/kill-restart-$r.tsv"
echo "degraded round $r of $reps done; resynced in $(wait_clean) s"
done
fi

# 3./4. Resync and rebuild at scale, with a foreground reader throughout.
mkdir -p "$m/fg"; "$bin/tessera" setstripe -N 1 /fg > /dev/null
echo -e "what\tbytes\tseconds\tGiB_per_min" > "$out/resync.tsv"
echo -e "what\tsample\tMiB_s" > "$out/foreground.tsv"
# fg_sample: one 2 s fio read (1 MiB sequential, the file's pages dropped first): MiB/s.
fg_sample() { drop_caches; fio --name=fg --directory="$m/fg" --rw=read --bs=1m --size=512m --numjobs=1 --time_based --runtime=2 --invalidate=1 --output-format=json | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["bw"]/1024, 1))'; }
# fg_until FILE: samples into FILE until FILE.stop exists.
fg_until() { rm -f "$1" "$1.stop"; while [ ! -e "$1.stop" ]; do fg_sample >> "$1"; done; }
# measure WHAT BYTES: waits until nothing is degraded while sampling the foreground reader, then as many
# samples with nothing to resync; rows into resync.tsv and foreground.tsv.
measure() {
  # The foreground reader starts 2 s in: its unmirrored file has stripes on the server just restarted, which
  # the mount tried while it was down and does not try again for a moment (RECONNECT_HOLDOFF).
  ( sleep 2; fg_until "$work/fg" ) & local fgp=$!
  local secs; secs=$(wait_clean)
  touch "$work/fg.stop"; wait "$fgp" || true
  echo -e "$1\t$2\t$secs\t$(python3 -c "print(round($2 / 2**30 / max($secs, 1e-9) * 60, 2))")" >> "$out/resync.tsv"
  local n=0
  while read -r v; do n=$((n + 1)); echo -e "$1-during\t$n\t$v" >> "$out/foreground.tsv"; done < "$work/fg"
  for i in $(seq "$n"); do echo -e "$1-idle\t$i\t$(fg_sample)" >> "$out/foreground.tsv"; done
  echo "$1: $2 bytes in $secs s, $n foreground samples each"
}
if part resync; then
fio --name=fg --directory="$m/fg" --rw=write --bs=1m --size=512m --numjobs=1 --end_fsync=1 > /dev/null
mkdir -p "$m/n2/big"
kill -9 "${ds_pid[1]}"; wait "${ds_pid[1]}" 2> /dev/null || true
fio --name=big --directory="$m/n2/big" --rw=write --bs=1m --size="$resync_size" --numjobs=2 --end_fsync=1 > /dev/null
to_resync=$(field "$(status_json)" bytes_to_resync)
"$bin/tessera-ds" --config "$work/c/ds1.toml" --id 1 >> "$work/ds1.log" 2>&1 &
ds_pid[1]=$!; up_pids+=($!)
measure resync "$to_resync"

"$bin/tessera" --config "$work/c/admin.toml" ds remove 3 --rebuild > "$work/remove.txt"
measure rebuild "$(field "$(status_json)" bytes_to_resync)"
fi

# 5. Partial resync: a 1 GiB mirrored file written with every server up, data server 1 killed, 64 MiB of it
# overwritten (1 MiB blocks at random), the server started again. Per replica on server 1: what its resync
# copied (the MDS log's "replica resynced" lines) against the replica's size, and whether it was the
# stripe's primary (a failed primary is copied whole: it may hold writes no other replica has).
echo -e "replica\twas\tobject_bytes\tcopied_bytes\tseconds" > "$out/partial.tsv"
if part partial; then
mkdir -p "$m/n2/part"
fio --name=part --directory="$m/n2/part" --rw=write --bs=1m --size=1g --numjobs=1 --end_fsync=1 > /dev/null
wait_clean > /dev/null
"$bin/tessera" getstripe /n2/part/part.0.0 > "$work/part-layout.txt"
cp "$work/part-layout.txt" "$out/partial-layout.txt"
kill -9 "${ds_pid[1]}"; wait "${ds_pid[1]}" 2> /dev/null || true
fio --name=part --directory="$m/n2/part" --rw=randwrite --bs=1m --size=1g --io_size=64m --numjobs=1 --end_fsync=1 > /dev/null
mds_lines=$(wc -l < "$work/mds.log")
"$bin/tessera-ds" --config "$work/c/ds1.toml" --id 1 >> "$work/ds1.log" 2>&1 &
ds_pid[1]=$!; up_pids+=($!)
secs=$(wait_clean)
python3 - "$work/part-layout.txt" "$work/mds.log" "$mds_lines" "$secs" >> "$out/partial.tsv" <<'EOF'
import re, sys
layout, log, skip, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
size = 1 << 30
rows = [l.split() for l in open(layout) if re.match(r"\s*\d+\s+\d+\s+\d+\s+\d+\s+\d+", l)]
count = len({r[0] for r in rows})
mine = {int(r[4]): ("primary" if r[1] == "0" else "secondary") for r in rows if r[2] == "1"}
copied = {}
for line in open(log).readlines()[skip:]:
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    m = re.search(r"replica resynced .*replica=StripeTarget \{ ds: (\d+), object: (\d+) \} bytes=(\d+)", line)
    if m and int(m.group(1)) == 1:
        copied[int(m.group(2))] = copied.get(int(m.group(2)), 0) + int(m.group(3))
for obj, was in sorted(mine.items()):
    print(f"{obj}\t{was}\t{size // count}\t{copied.get(obj, 0)}\t{secs}")
EOF
echo "partial: $(tail -n +2 "$out/partial.tsv" | tr '\n' ';')"
fi

mkdir -p "$out/logs"; cp "$work"/*.log "$out/logs/" 2> /dev/null || true
python3 - "$out" "$reps" <<'EOF' | tee "$out/summary.md"
import csv, statistics, sys
out, reps = sys.argv[1], sys.argv[2]
med = statistics.median
rows = list(csv.DictReader(open(f"{out}/throughput.tsv"), delimiter="\t"))
if rows:
    print(f"## Throughput through the mount, medians of {reps} rounds (MiB/s)\n")
    print("| layout | op | M = 1 | M = 2 | M2/M1 |\n|---|---|---|---|---|")
    for lay in ("fpp", "shared"):
        for op in ("write", "read"):
            v = {m: med(float(r["MiB_s"]) for r in rows if r["layout"] == lay and r["op"] == op and r["mirrors"] == m) for m in ("1", "2")}
            print(f"| {lay} | {op} | {v['1']:.1f} | {v['2']:.1f} | {v['2'] / v['1']:.2f} |")
rows = list(csv.DictReader(open(f"{out}/degraded.tsv"), delimiter="\t"))
if rows:
    n = len({r["round"] for r in rows})
    print(f"\n## Degraded operation (data server 1 killed, then restarted), {n} rounds\n")
    print("| who | window | steps | errors | median p50 ms | median p99 ms | max ms per round | steps over 1 s |\n|---|---|---|---|---|---|---|---|")
    for who in ("writer", "reader"):
        for w in ("before", "outage", "after"):
            rs = [r for r in rows if r["who"] == who and r["window"] == w]
            print(f"| {who} | {w} | {sum(int(r['steps']) for r in rs)} | {sum(int(r['errors']) for r in rs)} | "
                  f"{med(float(r['p50_ms']) for r in rs):.1f} | {med(float(r['p99_ms']) for r in rs):.1f} | "
                  f"{' '.join(r['max_ms'] for r in rs)} | {sum(int(r['over_1s']) for r in rs)} |")
rows = list(csv.DictReader(open(f"{out}/resync.tsv"), delimiter="\t"))
fg = list(csv.DictReader(open(f"{out}/foreground.tsv"), delimiter="\t"))
if rows:
    print("\n## Resync and rebuild, with a foreground reader (fio, 2 s samples, medians)\n")
    print("| what | GiB | seconds | GiB/min | foreground MiB/s during | idle | kept |\n|---|---|---|---|---|---|---|")
    for r in rows:
        d = [float(x["MiB_s"]) for x in fg if x["what"] == r["what"] + "-during"]
        i = [float(x["MiB_s"]) for x in fg if x["what"] == r["what"] + "-idle"]
        dm, im = (med(d), med(i)) if d and i else (float("nan"), float("nan"))
        print(f"| {r['what']} | {int(r['bytes']) / 2**30:.2f} | {r['seconds']} | {r['GiB_per_min']} | {dm:.1f} | {im:.1f} | {dm / im:.2f} |")
rows = list(csv.DictReader(open(f"{out}/partial.tsv"), delimiter="\t"))
if rows:
    print(f"\n## Partial resync: 64 MiB of a 1 GiB file overwritten while data server 1 was down ({rows[0]['seconds']} s to resync)\n")
    print("| replica on server 1 | was | object MiB | copied MiB | share |\n|---|---|---|---|---|")
    for r in rows:
        o, c = int(r["object_bytes"]), int(r["copied_bytes"])
        print(f"| {r['replica']} | {r['was']} | {o / 2**20:.1f} | {c / 2**20:.1f} | {c / o:.3f} |")
EOF
