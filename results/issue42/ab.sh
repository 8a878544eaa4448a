#!/bin/bash
# A/B for issue 42 (file locks): what the locking build costs when nobody locks, through the FUSE mount.
# base: /tmp/base-bin (f801bc2, the build before locks: `git worktree add /tmp/base f801bc2`, built with
# cargo build --release --bins); new: NEW (default /tmp/new-bin, this build's target/release binaries).
# Alternating, REPS rounds; each run a fresh `tessera up --ds 2` and a mount: mdtest through the mount
# (-a posix, 8000 files, 4 tasks: create, stat, remove /s) and IOR through the mount (-a posix, 2 tasks,
# 1 MiB transfers, 128 MiB each, write then read). Device model: none (this VM's disk). One JSON line per run.
# MDTEST_ARGS adds mdtest options (stop 55's small-file run: MDTEST_ARGS="-w 4096 -e 4096" IOR=0, 4 KiB written
# at create and read back); IOR=0 leaves IOR out.
# Run under `flock /tmp/bench.lock` (one benchmark at a time).
# usage: [BASE=DIR] [NEW=DIR] [MDTEST_ARGS=...] [IOR=0] ab.sh OUT REPS
OUT=$1; REPS=${2:-3}; BASE=${BASE:-/tmp/base-bin}; NEW=${NEW:-/tmp/new-bin}; IOR=${IOR:-1}
: > "$OUT"
run() { # label bindir
  local L=$1 B=$2 D=/tmp/ab42-$1 M=/tmp/ab42-$1-mnt
  rm -rf $D; mkdir -p $M
  (PATH=$B:$PATH setsid $B/tessera up --dir $D --ds 2 --port-base 0 > $D.out 2>&1 &) 2>/dev/null
  for i in $(seq 100); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
  sleep 2
  $B/tessera --config $D/client.toml mount $M --daemon > /dev/null 2>&1
  $B/tessera-bench mdtest -a posix -n 8000 -N 4 ${MDTEST_ARGS:-} -d $M/md --json $D.md.json > /dev/null 2>&1
  local ior=""
  if [ "$IOR" != 0 ]; then
    $B/tessera-bench ior -a posix -w -r -t 1m -b 128m -N 2 -e -o $M/ior --json $D.ior.json > /dev/null 2>&1
    ior=",\"ior\":$(jq -c '{write_mib_s: (.write_mib_s // .write.bw_mib_s // null), read_mib_s: (.read_mib_s // .read.bw_mib_s // null)}' $D.ior.json)"
  fi
  echo "{\"label\":\"$L\",\"rep\":$r,\"mdtest\":$(jq -c . $D.md.json)$ior}" >> "$OUT"
  fusermount3 -u $M 2>/dev/null || umount -l $M
  pkill -f "tessera up --dir $D"; sleep 2
}
for r in $(seq $REPS); do
  run base $BASE
  run new $NEW
done
