#!/usr/bin/env bash
# Two builds of the mount on one cluster (B's servers, 4 data servers, device model none): fio seqread (2 jobs x 128
# MiB, 1 MiB reads) through each, order a b b a in each of 3 rounds, with the mount process's CPU time over the run
# (perf stat -e task-clock -p PID). Needs root (drop_caches) and perf.
#   A_BIN=DIR [B_BIN=target/release] flock /tmp/bench.lock bench/scripts/mount-cpu-probe.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a_bin=${A_BIN:?set A_BIN to the first build binaries}; b_bin=${B_BIN:-$here/target/release}
work=$(mktemp -d /tmp/perfprobe.XXXXXX)
bin=$b_bin
. "$here/bench/scripts/cluster.sh"
start_cluster 4
bin=$b_bin mount_fuse "$work/w" "$work/fw.log"
bin=$a_bin mount_fuse "$work/a" "$work/fa.log"
bin=$b_bin mount_fuse "$work/b" "$work/fb.log"
for m in w a b; do need_ready "mount $m" "$work/f$m.log"; done
fio_common=(--directory=fio --numjobs=2 --size=128m --ioengine=psync --group_reporting)
mkdir -p "$work/w/fio"
(cd "$work/w" && fio --name=data "${fio_common[@]}" --rw=write --bs=1m --end_fsync=1 --output=/dev/null)
pid_of() { pgrep -f "tessera-fuse.*$work/$1( |\$)" | head -1; }
for r in 1 2 3; do for m in a b b a; do
  sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1
  p=$(pid_of $m)
  perf stat -e task-clock -p "$p" -o "$work/ps.txt" -- bash -c "cd $work/$m && fio --name=data ${fio_common[*]} --rw=read --bs=1m --output-format=json --output=$work/r.json" > /dev/null 2>&1
  bw=$(python3 -c "import json;d=json.load(open('$work/r.json'));print(round(d['jobs'][0]['read']['bw']/1024,1))")
  tc=$(awk '/task-clock/ {print $1}' "$work/ps.txt")
  echo "$r $m MiB/s=$bw mount-cpu-ms=$tc"
done; done
