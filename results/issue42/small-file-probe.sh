#!/bin/bash
# Where a small written file's time goes through the mount (an observation for issue 38): one python process on a
# mount of a fresh `tessera up --ds 2` (device model none) creates 500 files empty, 500 with 4 KiB written, 500
# empty again, timing open (O_CREAT|O_EXCL), write and close apiece. BIN: release binaries (default /tmp/new-bin).
# Run under `flock /tmp/bench.lock`. usage: small-file-probe.sh [BIN]
set -euo pipefail
bin=$(cd "${1:-/tmp/new-bin}" && pwd)
work=$(mktemp -d /tmp/small-file-probe.XXXXXX)
. "$(dirname "$0")/../../bench/scripts/cluster.sh"
start_cluster 2
M=$work/m; mount_fuse $M $work/fuse.log; need_ready mount $work/fuse.log
python3 - $M <<'PY'
import os, sys, time
m = sys.argv[1]
os.mkdir(f"{m}/p")
def run(label, n, data):
    t = time.perf_counter(); parts = [0.0, 0.0, 0.0]
    for i in range(n):
        a = time.perf_counter()
        fd = os.open(f"{m}/p/{label}{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        b = time.perf_counter()
        if data: os.write(fd, data)
        c = time.perf_counter()
        os.close(fd)
        d = time.perf_counter()
        parts[0] += b - a; parts[1] += c - b; parts[2] += d - c
    el = time.perf_counter() - t
    print(f"{label}: {n/el:.0f}/s; per file open {parts[0]/n*1e6:.0f} us, write {parts[1]/n*1e6:.0f} us, close {parts[2]/n*1e6:.0f} us")
run("empty", 500, b"")
run("w4k", 500, b"x" * 4096)
run("again", 500, b"")
PY
