#!/usr/bin/env bash
# Issue-2/3 numbers in one run: IOR-like throughput through the library (-a tessera), through the FUSE
# mount (-a posix on the mount) and on a local directory (-a posix), alternating, REPS repetitions each,
# medians and ratios; then 4 KiB random writes/reads (IOR random pattern on the same three paths) as IOPS,
# fio on the mount (the independent check: sequential 1 MiB and random 4 KiB, with verification, the latter
# with latency percentiles), the 32 KiB 1D-strided shared-file read through a second mount (IOR, 2 tasks x
# SEGMENTS segments, written through the first), and mdtest with its read phase (library, mount, local). Real device (device model "none"): the data servers write to this machine's disk
# through its page cache, like the local-directory run.
#
#   bench/scripts/core-throughput.sh [OUT_DIR]
#   env: REPS=3 BLOCK=256m TASKS=2 DS=4 MDFILES=10000 SMALL_BLOCK=32m FIO_SECONDS=10 (FIO=0 skips fio)
#        SEGMENTS=2048
#        FUSE_OPTS=readdirplus,... (extra mount options for tessera-fuse -o)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${1:-$here/results/core}
reps=${REPS:-3}; block=${BLOCK:-256m}; tasks=${TASKS:-2}; nds=${DS:-4}; mdfiles=${MDFILES:-10000}
small_block=${SMALL_BLOCK:-32m}; fio_seconds=${FIO_SECONDS:-10}; use_fio=${FIO:-1}; segments=${SEGMENTS:-2048}
mkdir -p "$out"
work=$(mktemp -d /tmp/tessera-core.XXXXXX)
mnt=$work/mnt; local_dir=$work/local
mkdir -p "$local_dir"
. "$here/bench/scripts/cluster.sh"
start_cluster "$nds"
"$bin/tessera" mkdir -p /ior && "$bin/tessera" mkdir -p /md
"$bin/tessera" setstripe -S 1M -c "$nds" /ior
mount_fuse "$mnt" "$work/fuse.log" "${FUSE_OPTS:-}"
mount_fuse "$work/mnt2" "$work/fuse2.log" "${FUSE_OPTS:-}"

ior() { # name, extra args...
  local name=$1; shift
  "$bin/tessera-bench" ior -t 1m -b "$block" -N "$tasks" -e -C "$@" --json "$out/$name.json" > "$out/$name.txt" 2>&1
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" "$out/$name.json"
}
echo "config: $nds data servers, stripe 1 MiB x $nds, $tasks tasks, 1 MiB transfers, block $block, fsync (-e), -C; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$out/ior.tsv"
for r in $(seq "$reps"); do
  for mode in fpp shared; do
    f=""; [ "$mode" = fpp ] && f="-F"
    echo "$r $mode library $(ior lib-$mode-$r -a tessera -o /ior/$mode $f)" >> "$out/ior.tsv"
    echo "$r $mode mount $(ior fuse-$mode-$r -a posix -o "$mnt/ior/$mode" $f)" >> "$out/ior.tsv"
    echo "$r $mode local $(ior local-$mode-$r -a posix -o "$local_dir/$mode" $f)" >> "$out/ior.tsv"
  done
  echo "repetition $r done" >&2
done
# Small random I/O: 4 KiB transfers in a random permutation of each task's block, file per task, no fsync
# until the end of the write phase; IOPS = MiB/s * 256.
: > "$out/small.tsv"
for r in $(seq "$reps"); do
  for api in library mount local; do
    case $api in
      library) args=(-a tessera -o /ior/small) ;;
      mount) args=(-a posix -o "$mnt/ior/small") ;;
      local) args=(-a posix -o "$local_dir/small") ;;
    esac
    "$bin/tessera-bench" ior -t 4k -b "$small_block" -N "$tasks" -F --pattern random -e -C "${args[@]}" \
      --json "$out/small-$api-$r.json" > "$out/small-$api-$r.txt" 2>&1
    echo "$r $api $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['write_mib_s']*256:.0f} {d['read_mib_s']*256:.0f}\")" "$out/small-$api-$r.json")" >> "$out/small.tsv"
  done
done
# fio through the mount: psync engine, $tasks jobs, verification on the sequential write (crc32c).
if [ "$use_fio" = 1 ] && command -v fio > /dev/null; then
  mkdir -p "$mnt/fio"
  fio_run() { # name, fio args...
    local name=$1; shift
    fio --name="$name" --directory="$mnt/fio" --numjobs="$tasks" --group_reporting --ioengine=psync \
      --output-format=json --output="$out/fio-$name.json" "$@" > /dev/null
  }
  fio_run seqwrite --rw=write --bs=1m --size="$block" --end_fsync=1 --verify=crc32c --do_verify=1
  fio_run seqread --rw=read --bs=1m --size="$block" --invalidate=1
  fio_run randwrite --rw=randwrite --bs=4k --size="$small_block" --time_based --runtime="$fio_seconds" --end_fsync=1
  fio_run randread --rw=randread --bs=4k --size="$small_block" --time_based --runtime="$fio_seconds" --invalidate=1
fi
# Small strided reads of a shared file through a mount that did not write it (nothing in its page cache).
"$bin/tessera-bench" ior -a posix -w -k -e -t 32k -b 32k -s "$segments" -N "$tasks" -o "$mnt/ior/strided" \
  > "$out/strided-w.txt" 2>&1
: > "$out/strided.tsv"
for r in $(seq "$reps"); do
  sync; echo 1 > /proc/sys/vm/drop_caches
  "$bin/tessera-bench" ior -a posix -r -t 32k -b 32k -s "$segments" -N "$tasks" -o "$work/mnt2/ior/strided" \
    --json "$out/strided-$r.json" > "$out/strided-$r.txt" 2>&1
  echo "$r $(python3 -c "import json,sys; print(f\"{json.load(open(sys.argv[1]))['read_mib_s']:.1f}\")" "$out/strided-$r.json")" >> "$out/strided.tsv"
done
"$bin/tessera-bench" mdtest -a tessera -d /md -n "$mdfiles" -N "$tasks" --json "$out/mdtest-lib.json" > "$out/mdtest-lib.txt" 2>&1
"$bin/tessera-bench" mdtest -a posix -d "$mnt/md" -n "$mdfiles" -N "$tasks" --json "$out/mdtest-mount.json" > "$out/mdtest-mount.txt" 2>&1
"$bin/tessera-bench" mdtest -a posix -d "$local_dir" -n "$mdfiles" -N "$tasks" --json "$out/mdtest-local.json" > "$out/mdtest-local.txt" 2>&1

python3 - "$out" <<'PY'
import json, statistics, sys, collections
out = sys.argv[1]
rows = collections.defaultdict(lambda: ([], []))
for line in open(f"{out}/ior.tsv"):
    r, mode, api, w, rd = line.split()
    rows[(mode, api)][0].append(float(w)); rows[(mode, api)][1].append(float(rd))
med = {k: (statistics.median(w), statistics.median(r)) for k, (w, r) in rows.items()}
lines = ["| layout | path | write MiB/s (median) | read MiB/s (median) | runs |", "|---|---|---|---|---|"]
for (mode, api), (w, r) in sorted(med.items()):
    lines.append(f"| {mode} | {api} | {w:.0f} | {r:.0f} | {len(rows[(mode, api)][0])} |")
lines.append("")
for mode in ("fpp", "shared"):
    lw, lr = med[(mode, "library")]; mw, mr = med[(mode, "mount")]; pw, pr = med[(mode, "local")]
    lines.append(f"- {mode}: library/local write {lw/pw:.2f}, read {lr/pr:.2f}; mount/library write {mw/lw:.2f}, read {mr/lr:.2f}")
lines.append("")
small = collections.defaultdict(lambda: ([], []))
for line in open(f"{out}/small.tsv"):
    r, api, w, rd = line.split()
    small[api][0].append(float(w)); small[api][1].append(float(rd))
lines.append("| 4 KiB random, file per task | write IOPS (median) | read IOPS (median) | runs |")
lines.append("|---|---|---|---|")
for api in ("library", "mount", "local"):
    w, r = small[api]
    lines.append(f"| {api} | {statistics.median(w):.0f} | {statistics.median(r):.0f} | {len(w)} |")
lines.append("")
import os
if os.path.exists(f"{out}/fio-seqwrite.json"):
    lines.append("| fio on the mount | result |"); lines.append("|---|---|")
    for name in ("seqwrite", "seqread", "randwrite", "randread"):
        j = json.load(open(f"{out}/fio-{name}.json"))["jobs"][0]
        side = j["write"] if "write" in name else j["read"]
        pct = side["clat_ns"].get("percentile", {})
        lat = "".join(f", p{k[:2]} {pct[k] / 1000:.0f} µs" for k in ("50.000000", "99.000000") if k in pct)
        lines.append(f"| {name} | {side['bw'] / 1024:.0f} MiB/s, {side['iops']:.0f} IOPS{lat}, max {side['clat_ns']['max'] / 1e6:.1f} ms, errors {j['error']} |")
    lines.append("")
strided = [float(l.split()[1]) for l in open(f"{out}/strided.tsv")]
lines.append(f"32 KiB 1D-strided shared-file read through a second mount: {statistics.median(strided):.0f} MiB/s (median of {len(strided)})")
lines.append("")
lines.append("| mdtest | create/s | stat/s | read/s | remove/s |"); lines.append("|---|---|---|---|---|")
for name in ("lib", "mount", "local"):
    d = json.load(open(f"{out}/mdtest-{name}.json"))
    lines.append(f"| {name} | {d['create_ops_s']:.0f} | {d['stat_ops_s']:.0f} | {d.get('read_ops_s', 0):.0f} | {d['remove_ops_s']:.0f} |")
text = "\n".join(lines)
open(f"{out}/summary.md", "w").write(text + "\n")
print(text)
PY
