#!/usr/bin/env bash
# kill -9 of a data server under `tessera up` (issue 34, item 3): `tessera up` runs the cluster as a
# supervisor, so the dead server should come back on its own while the others keep serving. A writer
# (`tessera-bench ior`, one task, 1 MiB transfers, a file striped over every data server) is writing when
# data server $VICTIM is killed with SIGKILL. The script prints how long the writer took to get its error,
# how long until `tessera up` had the server back (its state in DIR/status.json), what `tessera ls -l` and
# reads of files on the live data servers did meanwhile, and whether a new write over every data server
# works once the server is back; then it stops `tessera up` with SIGTERM and checks that no server is left.
#
#   bench/scripts/supervisor-kill.sh        env: BIN=target/release DIR=/tmp/sup DS=4 VICTIM=1
# DIR is used as `tessera up --dir` (a new cluster, or the one a run before left there).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
dir=${DIR:-/tmp/sup}
nds=${DS:-4}
victim=${VICTIM:-1}
work=$(mktemp -d /tmp/tessera-supkill.XXXXXX)
up_pid=
cleanup() {
  [ -n "$up_pid" ] && kill -TERM "$up_pid" 2> /dev/null && wait "$up_pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "${2:-$(now)}"; }
# child FIELD NAME: a field of server NAME in DIR/status.json (empty if null).
child() {
  python3 -c "
import json, sys
st = json.load(open(sys.argv[1]))
c = next(c for c in st['children'] if c['name'] == sys.argv[3])
v = c[sys.argv[2]]
print('' if v is None else v)" "$dir/status.json" "$1" "$2"
}
sum() { sha256sum "$1" | cut -d' ' -f1; }

dirty=$(git -C "$here" status --porcelain --untracked-files=no 2> /dev/null | grep -q . && echo " (work tree with uncommitted changes)")
echo "# $(date -u '+%Y-%m-%d %H:%M:%S') UTC, $(nproc) cores, commit $(git -C "$here" rev-parse --short HEAD 2> /dev/null)$dirty"
echo "# $0: DIR=$dir DS=$nds VICTIM=$victim BIN=$bin"
"$bin/tessera" up --dir "$dir" --ds "$nds" --port-base 0 > "$work/up.out" 2> "$work/up.err" &
up_pid=$!
for _ in $(seq 300); do grep -qs "^TESSERA UP" "$work/up.out" && break; sleep 0.2; done
grep -qs "^TESSERA UP" "$work/up.out" || { echo "tessera up did not come up:"; cat "$work/up.out" "$work/up.err"; exit 1; }
export TESSERA_CONFIG=$dir/client.toml
"$bin/tessera" status
T=/supkill-$$
"$bin/tessera" mkdir -p "$T/one"
"$bin/tessera" mkdir -p "$T/wide"
"$bin/tessera" setstripe -c 1 "$T/one" > /dev/null
"$bin/tessera" setstripe -c 0 -S 1M "$T/wide" > /dev/null

# One-stripe files, round-robin over the data servers: some on the victim, the others on live servers.
live=()
for i in $(seq 0 $((2 * nds - 1))); do
  head -c 4M /dev/urandom > "$work/small$i"
  "$bin/tessera" put -q "$work/small$i" "$T/one/f$i"
  on=$("$bin/tessera" getstripe "$T/one/f$i" | awk '$1 == "stripe" && $2 == "ds" { t = 1; next } t { print $2 }')
  [ "$on" != "$victim" ] && live+=("$i")
done
echo "one-stripe files on live data servers: ${#live[@]} of $((2 * nds))"

head -c 64M /dev/urandom > "$work/after"

# The writer: one ior task, 1 MiB transfers, 16 GiB over every data server (it is killed long before).
old_pid=$(child pid "ds$victim")
( "$bin/tessera-bench" ior -w -t 1m -b 16g -o "$T/wide/ior" -k > "$work/ior.out" 2>&1
  echo "$? $(now)" > "$work/ior.end" ) &
writer=$!
sleep 3
tk=$(now)
kill -9 "$old_pid"
echo "killed ds$victim (pid $old_pid) with SIGKILL while the writer was writing"
# Watches DIR/status.json (every 20 ms) until the server runs again: restarted, a new pid, READY.
python3 - "$dir/status.json" "ds$victim" "$old_pid" "$tk" > "$work/back" << 'EOF' &
import json, sys, time
path, name, old, tk = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
states = []
while time.time() < tk + 30:
    try:
        c = next(c for c in json.load(open(path))["children"] if c["name"] == name)
    except (OSError, ValueError, StopIteration):
        time.sleep(0.02)
        continue
    if not states or states[-1][0] != c["state"]:
        states.append((c["state"], time.time() - tk))
    if c["state"] == "running" and c["restarts"] >= 1 and c["pid"] != old:
        seen = ", ".join(f"{s} at {t:.2f} s" for s, t in states)
        ended, started = c["last_exit_at_ms"] / 1000 - tk, c["started_at_ms"] / 1000 - tk
        print(f"{time.time() - tk:.2f} {c['pid']} {c['restarts']} (up saw it end at {ended:.2f} s and started it "
              f"again at {started:.2f} s; status.json seen: {seen}; last exit: {c['last_exit']})")
        sys.exit(0)
    time.sleep(0.02)
print("")
EOF
watcher=$!

# Meanwhile: the metadata and files on the live servers.
t1=$(now); "$bin/tessera" ls -l / > "$work/ls.out" 2>&1; rc=$?
echo "tessera ls -l / right after the kill: exit $rc in $(since "$t1") s ($(grep -c . "$work/ls.out") entries)"
t1=$(now); bad=0
for i in "${live[@]}"; do
  "$bin/tessera" get -q "$T/one/f$i" "$work/got$i" 2> /dev/null && [ "$(sum "$work/got$i")" = "$(sum "$work/small$i")" ] || bad=$((bad + 1))
done
echo "read back ${#live[@]} files on live data servers right after the kill: $bad wrong or failed, in $(since "$t1") s"

# The dead server comes back: tessera up's status file says running, restarted, with a new pid.
wait "$watcher"
read -r back newpid restarts seen < "$work/back"
if [ -n "${back:-}" ]; then
  echo "ds$victim back (running, READY) $back s after the kill: pid $newpid, restarts $restarts $seen"
else
  echo "ds$victim NOT back 30 s after the kill"
fi
"$bin/tessera" status

# A new write over every data server, the restarted one included, as soon as it is back (a new client
# process), and its read back.
t1=$(now); at=$(since "$tk" "$t1"); "$bin/tessera" put -q -c 0 -S 1M "$work/after" "$T/after" 2> "$work/put.err"; rc=$?
echo "a new 64 MiB write striped over all $nds data servers, started $at s after the kill: exit $rc in $(since "$t1") s $(head -1 "$work/put.err")"
on=$("$bin/tessera" getstripe "$T/after" | awk '$1 == "stripe" && $2 == "ds" { t = 1; next } t { print $2 }' | sort -u | tr '\n' ' ')
"$bin/tessera" get -q "$T/after" "$work/after.got" && [ "$(sum "$work/after.got")" = "$(sum "$work/after")" ] &&
  echo "read back right, from data servers $on" || echo "read back FAILED or wrong (data servers $on)"

# The writer's error.
for _ in $(seq 600); do [ -s "$work/ior.end" ] && break; sleep 0.1; done
if [ -s "$work/ior.end" ]; then
  read -r wrc wt < "$work/ior.end"
  echo "the writer ended $(since "$tk" "$wt") s after the kill: exit $wrc ($(grep -m1 -iE 'error|fail' "$work/ior.out" || tail -1 "$work/ior.out"))"
else
  echo "the writer had no error 60 s after the kill"; kill "$writer" 2> /dev/null
fi
wait "$writer" 2> /dev/null

# Meanwhile, still: ls and the files on live servers.
t1=$(now); "$bin/tessera" ls -l / > /dev/null 2>&1; echo "tessera ls -l / after the writer's error: exit $? in $(since "$t1") s"

echo "tessera up said:"
sed 's/^/  /' "$work/up.err"
echo "ds$victim's log, the lines tessera up wrote:"
grep -h "^=== tessera up" "$dir/logs/ds$victim.log" | tail -2 | sed 's/^/  /'

"$bin/tessera" rm -r "$T" > /dev/null
pids=$(python3 -c "import json; print(' '.join(str(c['pid']) for c in json.load(open('$dir/status.json'))['children'] if c['pid']))")
t1=$(now); kill -TERM "$up_pid"; wait "$up_pid"; rc=$?; up_pid=
left=0; for p in $pids; do kill -0 "$p" 2> /dev/null && left=$((left + 1)); done
echo "SIGTERM to tessera up: exit $rc in $(since "$t1") s; servers left running: $left"
grep -E "stopping|stopped" "$work/up.err" | tail -4 | sed 's/^/  /'
