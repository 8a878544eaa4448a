#!/bin/bash
# A/B for issue 42 (ACLs, du): small written files through the FUSE mount (each close queues the file for the
# MDS's measure of its blocks; every permission check may read an ACL), the build before against this one.
# base: /tmp/base-bin (the build before, c11b9c9: `git worktree add /tmp/base c11b9c9`, built with
# cargo build --release --bins); new: NEW (default /tmp/new-bin, this build's target/release binaries).
# Alternating, REPS rounds; each run a fresh `tessera up --ds 2` and a mount: mdtest through the mount
# (-a posix, 8000 files, 4 tasks, 4 KiB written at create and read back:
# create, stat, read, remove /s). Device model: none (this VM's disk). One JSON line per run.
# Run under `flock /tmp/bench.lock` (one benchmark at a time).
# usage: ab-small.sh OUT REPS
OUT=$1; REPS=${2:-3}; BASE=${BASE:-/tmp/base-bin}; NEW=${NEW:-/tmp/new-bin}
: > "$OUT"
run() { # label bindir
  local L=$1 B=$2 D=/tmp/ab42s-$1 M=/tmp/ab42s-$1-mnt
  rm -rf $D; mkdir -p $M
  (PATH=$B:$PATH setsid $B/tessera up --dir $D --ds 2 --port-base 0 > $D.out 2>&1 &) 2>/dev/null
  for i in $(seq 100); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
  sleep 2
  $B/tessera --config $D/client.toml mount $M --daemon > /dev/null 2>&1
  $B/tessera-bench mdtest -a posix -n 8000 -N 4 -w 4096 -e 4096 -d $M/md --json $D.md.json > /dev/null 2>&1

  echo "{\"label\":\"$L\",\"rep\":$r,\"mdtest\":$(jq -c . $D.md.json)}" >> "$OUT"
  fusermount3 -u $M 2>/dev/null || umount -l $M
  pkill -f "tessera up --dir $D"; sleep 2
}
for r in $(seq $REPS); do
  run base $BASE
  run new $NEW
done
