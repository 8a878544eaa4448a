#!/usr/bin/env bash
# Issue 42, item 2: `tar -cf` right after `git commit` in a repository on the mount must never say
# "file changed as we read it" (a directory's times moving after the fact). RUNS times: a fresh repository
# with 200 files, `git add` + `git commit`, then at once `tar -cf` of the whole tree (its .git/objects
# directories were just filled under the mount's directory leases). Prints each failure and a summary.
# Usage: results/issue42/tar_after_commit.sh MOUNTPOINT [RUNS]
set -euo pipefail
mnt=${1:?mount point}
runs=${2:-50}
work="$mnt/tar-after-commit.$$"
mkdir -p "$work"
fail=0
for i in $(seq 1 "$runs"); do
  repo="$work/r$i"
  mkdir -p "$repo/src"
  for f in $(seq 1 200); do echo "file $f of run $i" > "$repo/src/f$f.txt"; done
  git -C "$repo" init -q
  git -C "$repo" -c user.name=t -c user.email=t@t add -A
  git -C "$repo" -c user.name=t -c user.email=t@t commit -qm "run $i"
  if ! out=$(tar -C "$repo" -cf /tmp/tar-after-commit.$$.tar . 2>&1); then
    fail=$((fail + 1))
    echo "run $i: tar failed: $out"
  elif [ -n "$out" ]; then
    fail=$((fail + 1))
    echo "run $i: tar warned: $out"
  fi
  rm -rf "$repo"
done
rm -rf "$work" /tmp/tar-after-commit.$$.tar
echo "tar after git commit: $runs runs, $fail with a warning or an error"
[ "$fail" = 0 ]
