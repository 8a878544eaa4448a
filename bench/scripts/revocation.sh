#!/usr/bin/env bash
# Certificate revocation (issue 18) with real processes: a cluster started by hand from a `tessera up`
# directory (an MDS and two data servers, release build), two more client identities issued with
# `tessera ca issue` (alice and bob, each with a configuration of its own). Nothing is restarted:
#  1. alice and bob write and read files striped over both data servers;
#  2. `tessera ca revoke alice`: alice's next command is refused (what she sees, and the MDS's log line),
#     bob keeps working;
#  3. `tessera ca revoke ds1`: the MDS closes ds1's connection and refuses its next one, bob's commands
#     refuse ds1 (ping, a read of a file striped over it) and keep working with ds0, where new files go
#     as soon as the MDS has cut ds1 off (when it closes its connection);
#  4. the MDS and both data servers are the processes started at the beginning.
# Every CLI command is a new process, so a new connection. Output: results/reliability/revocation.txt.
#
#   bench/scripts/revocation.sh        env: BIN=target/release OUT=results/reliability/revocation.txt
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
out=${OUT:-$here/results/reliability/revocation.txt}
work=$(mktemp -d /tmp/tessera-revocation.XXXXXX)
. "$here/bench/scripts/cluster.sh"
mkdir -p "$(dirname "$out")"
exec > >(tee "$out") 2>&1

run() { # LABEL CMD...: prints the command (paths shortened), its output and its exit status
  local label=$1; shift
  echo "\$ [$label] $*" | sed "s|$bin/||g; s|$work/||g"
  "$@" 2>&1 | sed "s|$work/||g; s/\x1b\[[0-9;]*m//g; s/^/    /"
  echo "    (exit ${PIPESTATUS[0]})"
}
as() { # NAME CMD...: a tessera command with NAME's certificate and configuration
  local name=$1; shift
  run "$name" "$bin/tessera" --config "$dir/$name.toml" "$@"
}
mds_says() { # WORDS: the MDS's log lines containing WORDS (without colours)
  sed 's/\x1b\[[0-9;]*m//g' "$work/mds.log" | grep -F "$1" | sed 's/^/    mds.log: /' | head -"${2:-3}"
}

echo "== revocation.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git -C "$here" rev-parse --short HEAD), binaries in $bin"
dir=$work/c
start_by_hand "$dir" 2
need_ready mds "$work/mds.log"
tls=$dir/tls
pids_before="$mds_pid ${ds_pid[0]} ${ds_pid[1]}"
echo "MDS pid $mds_pid, data servers ${ds_pid[0]} ${ds_pid[1]}; CA in $tls"
for name in alice bob; do
  run admin "$bin/tessera" ca issue --dir "$tls" --role client --name "$name" --days 30
  sed "s|tls/client\.|tls/$name.|g" "$dir/client.toml" > "$dir/$name.toml"
done
run admin "$bin/tessera" ca list --dir "$tls"

echo "== 1. both clients work"
head -c 4194304 /dev/urandom > "$work/data"
as alice put -q -S 256K -c 2 "$work/data" /alice.dat
as bob put -q -S 256K -c 2 "$work/data" /bob.dat
as bob getstripe /alice.dat
as alice ls -l /

echo "== 2. revoke alice"
t0=$(now)
run admin "$bin/tessera" ca revoke alice --dir "$tls"
sleep 1.5
as alice ls /
echo "    alice refused $(since "$t0") s after the revocation"
mds_says "client 'alice'"
as bob get /alice.dat "$work/copy" && cmp "$work/data" "$work/copy" && echo "    bob's copy of /alice.dat is intact"
as bob put -q "$work/data" /bob2.dat
as bob ls /

echo "== 3. revoke data server 1"
t1=$(now)
run admin "$bin/tessera" ca revoke ds1 --dir "$tls"
sleep 1.5
as bob ping
as bob get /alice.dat "$work/copy2"
mds_says "ds 'ds1'" 6
echo "    data server 1's own log:"
sed 's/\x1b\[[0-9;]*m//g' "$work/ds1.log" | grep -F "certificate" | sed 's/^/    ds1.log: /' | head -3
# New single-stripe files, one every 0.5 s: placed round-robin over the servers the MDS counts as live;
# one placed on ds1 would fail (bob refuses it). The MDS leaves ds1 out from the moment it closes ds1's
# connection for the revocation (before that change, only after 5 s without a report).
streak=0
for i in $(seq 60); do
  if "$bin/tessera" --config "$dir/bob.toml" put -q -c 1 "$work/data" "/new$i" 2> "$work/put.err"; then r=written; else r="FAILED: $(tail -1 "$work/put.err")"; fi
  on=$("$bin/tessera" --config "$dir/bob.toml" getstripe "/new$i" 2> /dev/null | awk 'NR > 4 { printf "ds%s ", $2 }')
  echo "    +$(since "$t1" 1) s /new$i on ${on:-?}: $r" | sed "s|$work/||g"
  if [ "$r" = written ] && [ "$on" = "ds0 " ]; then streak=$((streak + 1)); else streak=0; fi
  [ "$streak" -ge 4 ] && break
  sleep 0.5
done
if [ "$streak" -ge 4 ]; then
  echo "    four new files in a row on data server 0 and written, $(since "$t1" 1) s after revoking ds1"
  as bob get "/new$i" "$work/copy3" && cmp "$work/data" "$work/copy3" && echo "    /new$i reads back intact"
else
  echo "    new files still placed on the revoked data server 30 s after its revocation"
fi

echo "== 4. no server was restarted"
for p in $pids_before; do
  if kill -0 "$p" 2> /dev/null; then echo "    pid $p still running"; else echo "    pid $p GONE"; fi
done
run admin "$bin/tessera" ca list --dir "$tls"
