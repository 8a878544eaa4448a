#!/usr/bin/env bash
# tessera fsck (issue 18): corruptions injected by hand and by kills on a cluster started by hand (2 data
# servers, defaults), what `tessera fsck` reports, what `--repair` does, and a second, clean run.
#  1. A clean tree: /proj/run1/f1..f6 (300000 bytes each), a hard link /proj/run2/hard -> f1: fsck clean.
#  2. By hand, in the namespace: the MDS is stopped and its database edited with the fsck_inject example
#     (mds/examples/fsck_inject.rs): a dangling entry, an unreachable inode, a wrong link count, an entry
#     of the wrong kind, a missing readdir position, a wrong directory size and '..', a stripe on a data
#     server the cluster lacks, a destroy-log entry that cannot drain, a stale xattr record.
#  3. By hand, in a data server's object store (servers running): an object file no layout names, and an
#     object grown by 1000 bytes behind the MDS's back.
#  4. By kills: kill -9 of a data server in the middle of a 64 MiB `tessera put`, and of the MDS in the
#     middle of a create/remove loop; both restarted.
# Then: fsck (check only), fsck --repair, fsck again; the JSON reports are saved next to the output.
#
#   bench/scripts/fsck.sh [OUT_DIR]        env: BIN=target/release (needs the fsck_inject example built:
#                                          cargo build --release -p tessera-mds --example fsck_inject)
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$here/target/release}
inject=${INJECT:-$bin/examples/fsck_inject}
out=${1:-}
[ -x "$inject" ] || { echo "build the injector first: cargo build --release -p tessera-mds --example fsck_inject"; exit 1; }
work=$(mktemp -d /tmp/tessera-fsck.XXXXXX)
. "$here/bench/scripts/cluster.sh"
start_by_hand "$work/c" 2
need_ready mds "$work/mds.log"
t() { "$bin/tessera" --config "$work/c/admin.toml" "$@"; }
# fsck_table NAME ARGS...: runs fsck with --json, saves the report, prints it as a table and the exit code.
fsck_table() {
  local name=$1; shift
  t fsck "$@" --json > "$work/$name.json"; local code=$?
  [ -n "$out" ] && cp "$work/$name.json" "$out/fsck-$name.json"
  python3 - "$work/$name.json" "$code" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"exit {sys.argv[2]}; {r['inodes']} inodes, {r['entries']} entries, {r['objects']} objects on "
      f"{r['servers']} data servers; {r['passes']} pass(es), {r['elapsed_ms']} ms; "
      f"{len(r['findings']) + r['omitted']} findings, {r['repaired']} repaired")
if r["findings"]:
    print("| kind | what | action | repaired |\n|---|---|---|---|")
    for f in r["findings"]:
        print(f"| {f['kind']} | {f['what']} | {f['action']} | {'yes' if f['repaired'] else 'no'} |")
PY
}
restart_mds() {
  "$bin/tessera-mds" --config "$work/c/mds.toml" > "$work/mds.log" 2>&1 &
  mds_pid=$!; up_pids+=($!)
  for _ in $(seq 50); do grep -q READY "$work/mds.log" && break; sleep 0.2; done
  need_ready mds "$work/mds.log"
}

echo "== 1. a clean tree"
t mkdir -p /proj/run1 && t mkdir -p /proj/run2 || exit 1
for i in 1 2 3 4 5 6; do
  head -c 300000 /dev/urandom > "$work/src$i"
  t put --quiet "$work/src$i" /proj/run1/f$i || exit 1
done
t ln /proj/run1/f1 /proj/run2/hard || exit 1
fsck_table clean

echo; echo "== 2. by hand, in the namespace (MDS stopped)"
kill -INT "$mds_pid"; wait "$mds_pid" 2> /dev/null
"$inject" "$work/c/mds" dangling:/proj/run1/f2 unreachable:/proj/run1/f3 nlink:/proj/run1/f4 kind:/proj/run1/f5 \
  readdir:/proj/run1/f6 dirsize:/proj/run2 dotdot:/proj/run2 unknown-server:/proj/run1/f1 destroy-log stale-xattr \
  | sed 's/^/  /'
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
restart_mds

echo; echo "== 3. by hand, in data server 0's object store"
obj_path() { printf '%s/ds%d/objects/%02x/%016x' "$work/c" "$1" $(( $2 & 255 )) "$2"; }
# An inode's number is never an object's id: a file of that name is named by no layout.
ino=$(t stat /proj/run1/f4 | awk '/Inode:/ {print $2}')
mkdir -p "$(dirname "$(obj_path 0 "$ino")")"
head -c 4096 /dev/urandom > "$(obj_path 0 "$ino")"
echo "  planted object $(printf '%#x' "$ino") (4096 bytes) on data server 0"
read -r ds object < <(t getstripe /proj/run1/f6 | awk '$1 == "0" {print $2, $3}')
truncate -s +1000 "$(obj_path "$ds" "$object")"
echo "  grew object $(printf '%#x' "$object") of /proj/run1/f6 on data server $ds by 1000 bytes"

echo; echo "== 4. by kills"
head -c $((512 << 20)) /dev/zero > "$work/big"
t put --quiet "$work/big" /proj/big > "$work/put.log" 2>&1 &
put=$!
sleep 0.3; kill -9 "${ds_pid[1]}"; wait "${ds_pid[1]}" 2> /dev/null
wait "$put"; echo "  kill -9 of data server 1 during a 512 MiB put: the put exited $? ($(tail -c 200 "$work/put.log" | tr '\n' ' '))"
"$bin/tessera-ds" --config "$work/c/ds1.toml" --id 1 > "$work/ds1.log" 2>&1 &
ds_pid[1]=$!; up_pids+=($!)
( for i in $(seq 1000); do t put --quiet "$work/src1" /proj/loop$i 2> /dev/null; t rm /proj/loop$((i - 1)) 2> /dev/null; done ) &
storm=$!
sleep 2; kill -9 "$mds_pid"; wait "$mds_pid" 2> /dev/null
echo "  kill -9 of the MDS during a create/remove loop"
restart_mds
sleep 3; kill "$storm" 2> /dev/null; wait "$storm" 2> /dev/null
sleep 6  # the restarted data server reports in, the destroy log drains what it can

echo; echo "== 5. fsck (check only)"
fsck_table check
echo; echo "== 6. fsck --repair"
fsck_table repair --repair
sleep 3
echo; echo "== 7. fsck again"
fsck_table again
echo; echo "== the tree after repair"
for d in /proj/run1 /proj/run2 /lost+found; do echo "  $d:"; t ls -l "$d" 2>&1 | sed "s/^/    /"; done
grep -h "fsck" "$work/mds.log" | sed 's/\x1b\[[0-9;]*m//g; s/^/mds: /' | tail -3
