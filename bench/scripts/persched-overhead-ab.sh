#!/usr/bin/env bash
# "Enforcement costs nothing when no pattern is active" (issue 17): the core IOR run (1 MiB transfers, file per
# process, fsync, -C) through the library and through the FUSE mount, with build A (BIN_A: the build before
# PerSched) and build B (BIN: this one), each on its own fresh `tessera up` cluster, REPS rounds alternating,
# and which build goes first alternates from round to round. No job registers a pattern. Device model none
# (the data servers write through this machine's page cache).
#
#   BIN_A=/path/to/old/bins bench/scripts/persched-overhead-ab.sh [OUT_FILE]
#   env: REPS=5 BLOCK=256m TASKS=2 DS=4 BIN=target/release
# Prints one line per run and the medians and B/A ratios per path and phase.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin_b=${BIN:-$here/target/release}
bin_a=${BIN_A:?BIN_A must name the directory of the build before}
reps=${REPS:-5}; block=${BLOCK:-256m}; tasks=${TASKS:-2}; nds=${DS:-4}
work=$(mktemp -d /tmp/tessera-persched-ab.XXXXXX)
out=${1:-$work/runs.txt}
bin=$bin_b
. "$here/bench/scripts/cluster.sh"
: > "$out"
round() { # round build-label bin-dir
  local r=$1 label=$2 dir=$work/c-$2-$1
  bin=$3
  up "$dir" "$nds"
  local pid=$up_pid
  export TESSERA_CONFIG=$dir/client.toml
  "$bin/tessera" mkdir -p /ior
  "$bin/tessera" setstripe -S 1M -c "$nds" /ior
  mount_fuse "$work/m-$label-$r" "$work/fuse-$label-$r.log" ""
  for api in library mount; do
    local args=(-a tessera -o /ior/fpp)
    [ "$api" = mount ] && args=(-a posix -o "$work/m-$label-$r/ior/fpp")
    "$bin/tessera-bench" ior -t 1m -b "$block" -N "$tasks" -e -C -F "${args[@]}" --json "$work/r.json" \
      > "$work/r.txt" 2>&1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], sys.argv[4], f\"{d['write_mib_s']:.1f} {d['read_mib_s']:.1f}\")" \
      "$work/r.json" "$r" "$label" "$api" | tee -a "$out"
  done
  for p in "${fuse_pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  fuse_pids=(); mounts=()
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
echo "round build path write-MiB/s read-MiB/s  ($nds data servers, $tasks tasks, block $block, 1 MiB, -e -C -F; $(nproc) cores; A = $bin_a, B = $bin_b)"
for r in $(seq "$reps"); do
  if [ $((r % 2)) = 1 ]; then round "$r" A "$bin_a"; round "$r" B "$bin_b"; else round "$r" B "$bin_b"; round "$r" A "$bin_a"; fi
done
python3 - "$out" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for api in ("library", "mount"):
    for i, phase in ((3, "write"), (4, "read")):
        a = [float(r[i]) for r in rows if r[1] == "A" and r[2] == api]
        b = [float(r[i]) for r in rows if r[1] == "B" and r[2] == api]
        if a and b:
            ma, mb = st.median(a), st.median(b)
            print(f"{api:8} {phase:5}: median A {ma:8.1f}  B {mb:8.1f} MiB/s  B/A {mb / ma:.3f}  (n = {len(a)}, {len(b)})")
EOF
