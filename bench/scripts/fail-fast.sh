#!/usr/bin/env bash
# Fail fast, recover by itself (issue 18): a cluster of the MDS and DS data servers started by hand from a
# `tessera up` directory (not under `tessera up`, which would start the killed server again at once: see
# supervisor-kill.sh), one FUSE mount.
# A writer (dd, 1 MiB blocks, fsync) runs through the mount; data server 0 is killed with SIGKILL; the script
# prints how long the writer took to get its error, what `ls` and a read of a small file on the dead server
# did meanwhile, whether a new file can be written while the server is down (6 s after the kill, when the MDS
# leaves it out of new files), and how long after the server's restart a write of 8 MiB with fsync to a file
# striped over every server works again through the same mount (no remount). Defaults only.
#
#   bench/scripts/fail-fast.sh        env: BIN=target/release DS=2 ROUNDS=1
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
nds=${DS:-2}; rounds=${ROUNDS:-1}
work=$(mktemp -d /tmp/tessera-failfast.XXXXXX)
. "$here/bench/scripts/cluster.sh"
dir=$work/c
start_by_hand "$dir" "$nds"
mount_fuse "$work/m" "$work/fuse.log"
need_ready "the mount" "$work/fuse.log"
for r in $(seq "$rounds"); do
  # A small file on every data server (one stripe each, round-robin).
  for i in $(seq 0 $((nds - 1))); do "$bin/tessera" setstripe -c 1 "/small$r-$i" > /dev/null 2>&1; echo "small $i" > "$work/m/small$r-$i"; done
  dead_small=$(for i in $(seq 0 $((nds - 1))); do "$bin/tessera" getstripe "/small$r-$i" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $2 == 0 {f = 1} END {exit !f}' && echo "small$r-$i"; done | head -1)
  # A file striped over every server, to see when writes to data server 0 work again after its restart.
  "$bin/tessera" setstripe -c "$nds" "/both$r" > /dev/null 2>&1
  dd if=/dev/zero of="$work/m/both$r" bs=1M count=8 conv=fsync status=none || echo "round $r: both$r not written"
  echo "round $r: both$r is on data servers $("$bin/tessera" getstripe "/both$r" 2> /dev/null | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $2}')"
  ( t0=$(now); dd if=/dev/zero of="$work/m/big$r" bs=1M count=100000 conv=fsync status=none 2> "$work/dd.err"
    echo "round $r: writer exit $? ($(head -1 "$work/dd.err"))" ) &
  ddp=$!
  sleep 2
  tk=$(now); kill -9 "${ds_pid[0]}"; wait "${ds_pid[0]}" 2> /dev/null
  ( t1=$(now); ls "$work/m" > /dev/null; echo "round $r: ls while ds 0 is down: exit $? in $(since "$t1") s"
    if [ -n "$dead_small" ]; then t1=$(now); cat "$work/m/$dead_small" > /dev/null 2>&1
      echo "round $r: read of a small file on ds 0: exit $? in $(since "$t1") s"; fi ) &
  lsp=$!
  wait $ddp
  echo "round $r: the writer's error came $(since "$tk") s after the kill"
  wait $lsp
  # The MDS leaves a data server out of new files once it has not heard from it for 5 s.
  sleep "$(python3 -c "import sys; print(max(0.0, 6 - (float(sys.argv[2]) - float(sys.argv[1]))))" "$tk" "$(now)")"
  t1=$(now); "$bin/tessera" setstripe -c 1 "/new$r" > /dev/null 2>&1
  head -c 65536 /dev/zero | dd of="$work/m/new$r" conv=fsync status=none 2> /dev/null; rc=$?
  on=$("$bin/tessera" getstripe "/new$r" 2> /dev/null | awk '$1 ~ /^[0-9]+$/ {print $2}')
  echo "round $r: a new 64 KiB file (fsync), 6 s after the kill, on ds $on while ds 0 is down: exit $rc in $(since "$t1") s"
  "$bin/tessera-ds" --config "$dir/ds0.toml" --id 0 >> "$work/ds0.log" 2>&1 &
  ds_pid[0]=$!; up_pids+=($!)
  tr=$(now); ok=
  for i in $(seq 200); do
    if dd if=/dev/zero of="$work/m/both$r" bs=1M count=8 conv=fsync,notrunc status=none 2> /dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ -n "$ok" ] && echo "round $r: writes to a file striped over ds 0 work again $(since "$tr") s after the restart (same mount)" \
    || echo "round $r: writes still fail 20 s after the restart"
  rm -f "$work/m/big$r"
done
