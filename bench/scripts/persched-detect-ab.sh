#!/bin/bash
# A/B of PerSched's detection cost: IOR through the library (4 tasks, 1 MiB transfers, 1 GiB per phase, device
# model none) on a local 2-server cluster, with `[persched] detect` on or off in the MDS's and the client's
# configs (MDS-CLIENT: true-true, true-false, false-false, false-true), ROUNDS rounds in rotating order.
# Usage: bench/scripts/persched-detect-ab.sh BIN_DIR [ROUNDS]   (BIN_DIR holds tessera and tessera-bench)
set -e
B=${1:?binary directory}
ROUNDS=${2:-5}
W=$(mktemp -d /tmp/persched-ab.XXXX)
D=$W/cluster
up() {
  "$B/tessera" up --dir "$D" --ds 2 --port-base 0 > "$W/up.log" 2>&1 &
  UP=$!
  for _ in $(seq 1 100); do
    if [ -f "$D/client.toml" ] && "$B/tessera" --config "$D/client.toml" df > /dev/null 2>&1; then return 0; fi
    sleep 0.3
  done
  echo "cluster did not start"; cat "$W/up.log"; exit 1
}
down() { kill -INT $UP; wait $UP || true; }
set_detect() {
  for f in "$D"/*.toml; do sed -i "s/^detect = .*/detect = $1/" "$f"; done
  sed -i "s/^detect = .*/detect = $2/" "$D/client.toml"
}
up; down
for round in $(seq 1 "$ROUNDS"); do
  for mode in "true true" "true false" "false false" "false true"; do
    set_detect $mode
    up
    tag=$(echo $mode | tr ' ' '-')
    "$B/tessera-bench" ior --config "$D/client.toml" -a tessera -N 4 -t 1m -b 256m -i 1 -o /ior \
      | grep -E "^Max (Write|Read)" | sed "s/^/$tag $round /" | tee -a "$W/results.txt"
    down
  done
done
python3 - "$W/results.txt" <<'PY'
import re, statistics, sys
r = {}
for l in open(sys.argv[1]):
    m = re.match(r'(\S+) \d+ Max (\w+):\s+([\d.]+)', l)
    if m: r.setdefault((m[1], m[2]), []).append(float(m[3]))
for k, v in sorted(r.items()): print(*k, 'median %.1f MiB/s' % statistics.median(v), 'of', sorted(v))
PY
rm -rf "$D"
