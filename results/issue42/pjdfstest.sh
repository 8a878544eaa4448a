#!/bin/bash
# Issue 42: pjdfstest, whole, on a mount of a fresh `tessera up` (4 data servers, device model none), as root,
# with the default mount options (or OPTIONS, as -o OPTIONS: e.g. noacl). pjdfstest built from
# github.com/pjd/pjdfstest (fetched; `autoreconf -ifs && ./configure && make pjdfstest` in /tmp/pjd-src).
# Run under `flock /tmp/bench.lock`. usage: pjdfstest.sh [BIN] [OUT] [OPTIONS]
set -uo pipefail
bin=$(cd "${1:-/tmp/new-bin}" && pwd); OUT=$(realpath -m "${2:-/tmp/pjd-out.txt}"); OPTS=${3:-}
work=$(mktemp -d /tmp/pjdfstest.XXXXXX); chmod 0755 "$work"   # other users (setpriv) walk to the mounts
. "$(dirname "$0")/../../bench/scripts/cluster.sh"
start_cluster 4
M=$work/m; mount_fuse $M $work/fuse.log "$OPTS"; need_ready mount $work/fuse.log
mkdir -p $M/t && cd $M/t
( time prove -r /tmp/pjd-src/tests ) > "$OUT" 2>&1
cd /
