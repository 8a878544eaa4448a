#!/usr/bin/env bash
# CI test of the Docker demo on a machine without an image registry (run as root; .ci/run calls it with
# TESSERA_BIN_DIR=target/debug, the binaries its tests built; by hand after `cargo build --release --bins`):
#  - installs Debian's docker.io, a docker-compose and debootstrap;
#  - starts its own dockerd (own data root, exec root, pidfile and socket in a temp dir, no iptables,
#    no IP forwarding, no default bridge), so it neither sees nor touches another Docker on the host;
#  - makes the base image from the Debian mirror apt uses (debootstrap + docker import; the rootfs
#    tarball is cached in $TESSERA_CI_CACHE, default /var/cache/tessera-ci);
#  - runs deploy/demo.sh against it and checks its results (the clients go through forwarding nodes:
#    client1 through ion0, client2 through ion1); on a new cluster, checks that each client's I/O goes
#    through its own ION (`tessera ion status --json`), then a failover test (ion0 killed while client1
#    reads through it: the read must complete correctly or fail cleanly, in bounded time) and a fault
#    test (a data server killed while a client writes), a restart-policy test (a data server's process
#    killed from the host: Docker must start it again by itself), a mirrored-file test (a data server's
#    container killed and its volume removed while a client reads a mirrored file: the read completes intact,
#    the server comes back empty and is resynced, fsck --verify-mirrors clean), a metadata failover test (the
#    leading metadata replica's container killed while client1 creates files through its mount: the creates go on
#    under a new leader, none lost or doubled; the old leader started again rejoins as a follower and catches up),
#    then removes everything it made and stops its dockerd.
# Last line: `docker demo: N passed, M failed`; exit status non-zero on any failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TESSERA_CI_CACHE:-/var/cache/tessera-ci}
PROJECT=tessera-ci
IMAGE=tessera:ci
T_START=$SECONDS

[ "$(id -u)" = 0 ] || { echo "deploy/test.sh: needs root (it starts its own dockerd)" >&2; exit 1; }
# The binaries: target/release, or TESSERA_BIN_DIR (CI: the debug build its tests made), passed on to demo.sh.
export TESSERA_BIN_DIR=$(realpath -m "${TESSERA_BIN_DIR:-$ROOT/target/release}")
for b in tessera tessera-mds tessera-ds tessera-ion tessera-fuse tessera-bench; do
  [ -x "$TESSERA_BIN_DIR/$b" ] || { echo "deploy/test.sh: $TESSERA_BIN_DIR/$b missing: cargo build --release --bins" >&2; exit 1; }
done

PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "PASS: $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
check() { # check DESCRIPTION CMD...
  local what=$1
  shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
log() { printf '\n### [%3ds] %s\n' $((SECONDS - T_START)) "$*"; }

# ---- packages ----------------------------------------------------------------------------------------

log "packages"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v jq >/dev/null || need+=(jq) # reads `tessera ion status --json`
/usr/bin/docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || {
  # The Compose package's name differs between Debian releases and Docker's own apt repository.
  for p in docker-compose-plugin docker-compose-v2 docker-compose; do
    if apt-cache show "$p" >/dev/null 2>&1; then need+=("$p"); break; fi
  done
}
if [ "${#need[@]}" -gt 0 ]; then
  echo "installing ${need[*]}"
  apt-get update -qq
  # policy-rc.d-less hosts would start the packaged dockerd; we only want the binaries.
  RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${need[@]}" iptables >/dev/null
fi
# Debian's CLI matches Debian's daemon (another docker CLI earlier in PATH may lack the legacy builder).
export DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker)
echo "docker: $($DOCKER --version)"

# ---- our own dockerd ---------------------------------------------------------------------------------

WORK=$(mktemp -d /tmp/tessera-docker.XXXXXX)
SOCK=$WORK/docker.sock
export DOCKER_HOST=unix://$SOCK
export TESSERA_PROJECT=$PROJECT TESSERA_IMAGE=$IMAGE TESSERA_KEEP_IMAGE=1
DEMO_OUT=$WORK/demo.out
ip_forward_before=$(cat /proc/sys/net/ipv4/ip_forward)
links_before=$(ip -o link show | awk -F': ' '{print $2}' | sort | tr '\n' ' ')
DOCKERD_PID=
CLEANED=0

compose_cmd() {
  if $DOCKER compose version >/dev/null 2>&1; then echo "$DOCKER compose"; else echo docker-compose; fi
}
ci_compose() { $(compose_cmd) -f "$ROOT/deploy/docker-compose.yml" -p "$PROJECT" "$@"; }

stop_dockerd() {
  [ -n "$DOCKERD_PID" ] || return 0
  if kill -0 "$DOCKERD_PID" 2>/dev/null; then
    kill -TERM "$DOCKERD_PID"
    for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$DOCKERD_PID" 2>/dev/null && kill -KILL "$DOCKERD_PID"
  fi
  wait "$DOCKERD_PID" 2>/dev/null || true
  DOCKERD_PID=
}

# Removes what this script made; safe to call twice (explicitly at the end, and from the trap).
cleanup() {
  [ "$CLEANED" = 0 ] || return 0
  CLEANED=1
  if [ -n "$DOCKERD_PID" ] && [ -S "$SOCK" ]; then
    ci_compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
    ids=$($DOCKER ps -aq 2>/dev/null || true)
    [ -z "$ids" ] || $DOCKER rm -f $ids >/dev/null 2>&1 || true
    $DOCKER network prune -f >/dev/null 2>&1 || true
    $DOCKER volume prune -f >/dev/null 2>&1 || true
    $DOCKER image rm -f "$IMAGE" tessera-base:bookworm >/dev/null 2>&1 || true
  fi
  stop_dockerd
  # Mounts dockerd left behind if it died (overlay layers, network namespaces), innermost first.
  awk -v w="$WORK" '$2 ~ "^"w {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" || true; done
  rm -rf "$WORK"
}
trap 'rc=$?; cleanup; [ $rc = 0 ] || echo "docker demo: $PASS passed, $((FAIL + 1)) failed (aborted, exit $rc)"; exit $rc' EXIT
trap 'exit 130' INT TERM

log "starting dockerd in $WORK"
mkdir -p "$WORK/data" "$WORK/exec"
dockerd --data-root "$WORK/data" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" -H "unix://$SOCK" \
  --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
  >"$WORK/dockerd.log" 2>&1 &
DOCKERD_PID=$!
for _ in $(seq 1 60); do
  $DOCKER version >/dev/null 2>&1 && break
  kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$WORK/dockerd.log"; echo "dockerd died" >&2; exit 1; }
  sleep 0.5
done
$DOCKER version --format 'dockerd {{.Server.Version}} on {{.Server.Os}}' || { tail -20 "$WORK/dockerd.log"; exit 1; }
echo "compose: $(compose_cmd)"

# ---- base image without a registry -------------------------------------------------------------------

log "base image"
# The first Debian mirror apt uses (one-line or deb822 format).
mirror() {
  local m=""
  if [ -f /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' \
      /etc/apt/sources.list)
  fi
  if [ -z "$m" ]; then
    m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
      awk '/^URIs:/ && $2 ~ /debian\/?$/ && $2 !~ /security/ { print $2; exit }')
  fi
  if [ -z "$m" ]; then
    m=$(cat /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" && $0 ~ /debian/ && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }')
  fi
  echo "${m:-http://deb.debian.org/debian}"
}
SUITE=bookworm
TARBALL=$CACHE/debian-$SUITE-minbase.tar
if [ ! -s "$TARBALL" ]; then
  MIRROR=$(mirror)
  echo "debootstrap --variant=minbase $SUITE from $MIRROR (cached in $TARBALL)"
  mkdir -p "$CACHE"
  debootstrap --variant=minbase "$SUITE" "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; exit 1; }
  # Packages, indexes and docs only make the image bigger.
  rm -rf "$WORK/rootfs"/var/cache/apt/archives/*.deb "$WORK/rootfs"/var/lib/apt/lists/* \
    "$WORK/rootfs"/usr/share/doc "$WORK/rootfs"/usr/share/man "$WORK/rootfs"/usr/share/locale
  tar --numeric-owner -C "$WORK/rootfs" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$WORK/rootfs"
else
  echo "cached $TARBALL"
fi
$DOCKER import "$TARBALL" tessera-base:bookworm >/dev/null
has_image() { $DOCKER image inspect "$1" >/dev/null 2>&1; }
check "base image imported without a registry" has_image tessera-base:bookworm

# ---- the demo, as a user runs it ---------------------------------------------------------------------

log "demo.sh (image from base tessera-base:bookworm)"
set +e
TESSERA_BASE=tessera-base:bookworm bash "$ROOT/deploy/demo.sh" 2>&1 | tee "$DEMO_OUT"
rc=${PIPESTATUS[0]}
set -e
check "demo.sh exits 0" [ "$rc" = 0 ]
check "client2 read byte-identical data written by client1" grep -q '^client2 read back exactly what client1 wrote$' "$DEMO_OUT"
# Each client's ior summary has a `Max Write:` line with a positive rate.
max_writes=$(grep -c '^Max Write: *[0-9.]* *[MG]iB/sec' "$DEMO_OUT" || true)
nonzero=$( { grep '^Max Write:' "$DEMO_OUT" || true; } | awk '$3 + 0 > 0' | wc -l)
grep '^Max \(Write\|Read\):' "$DEMO_OUT" || true
check "both clients' benchmarks report write throughput ($max_writes Max Write lines, $nonzero with a rate > 0)" \
  test "$max_writes" = 2 -a "$nonzero" = 2
check "demo.sh tore down its containers" [ -z "$($DOCKER ps -aq)" ]
check "demo.sh tore down its volumes" [ -z "$($DOCKER volume ls -q | grep "^${PROJECT}_" || true)" ]
check "demo.sh tore down its network" [ -z "$($DOCKER network ls -q --filter "name=${PROJECT}_")" ]

# ---- the cluster again, for the ION and fault tests --------------------------------------------------

log "cluster up again"
TESSERA_BASE=tessera-base:bookworm bash "$ROOT/deploy/demo.sh" up >"$WORK/up.out" 2>&1 || { cat "$WORK/up.out"; exit 1; }
for s in client1 client2 ds0 ds1 ds2 ds3 ion0 ion1 mds0 mds1 mds2; do printf -v "CID_$s" '%s' "$(ci_compose ps -q "$s")"; done
cid() { local v=CID_$1; echo "${!v}"; }
on() { local c; c=$(cid "$1"); shift; $DOCKER exec "$c" "$@"; }
# health SERVICE: its container's health status now.
health() { $DOCKER inspect --format '{{.State.Health.Status}}' "$(cid "$1")"; }
# wait_healthy SERVICE: waits up to 60 s for its container to be healthy; status 1 if it never was.
wait_healthy() {
  local _
  for _ in $(seq 1 60); do
    [ "$(health "$1")" = healthy ] && return 0
    sleep 1
  done
  return 1
}
MNT=/mnt/tessera
now_ms() { date +%s%3N; }
# wait_progress FILE N TRIES: waits (TRIES x 0.1 s at most) until the number a job on client1 writes into
# FILE reaches N; leaves the last number read in $got.
wait_progress() {
  local _
  got=0
  for _ in $(seq 1 "$3"); do
    got=$(on client1 cat "$1" 2>/dev/null || true)
    [ "${got:-0}" -ge "$2" ] && break
    sleep 0.1
  done
}

# ---- forwarding nodes: each client's I/O goes through its own ION ------------------------------------

log "forwarding nodes: client1 through ion0, client2 through ion1"
# `tessera ion status --json` in client1's container, the command itself straight to the servers
# (TESSERA_ION=none: its own calls do not count at any ION).
ion_status() { $DOCKER exec -e TESSERA_ION=none "$(cid client1)" timeout 30 tessera ion status --json; }
# forwarded ION FILE: the ION's requests_forwarded in a saved status (-1 if it is not there)
forwarded() {
  jq -r --arg n "$1" '[.[] | select(.name == $n) | .requests_forwarded // -1] | first // -1' "$2" 2>/dev/null ||
    echo -1
}
show_ions() {
  jq -r '.[] | "  \(.name): scheduler \(.scheduler // "-"), window \(.window_ms // "-") ms, " +
    "\(.requests_forwarded // "-") requests and \(.bytes_forwarded // "-") bytes forwarded" +
    (if .error then ", error: \(.error)" else "" end)' "$1" || cat "$1"
}
ion_status >"$WORK/ions0.json" || true
# client2 writes through its mount the files client1 reads through its own (none of them is in
# client1's page cache): small now, big while ion0 dies, after once it is dead.
on client2 mkdir -p $MNT/ion
for f in small:4 big:48 after:8; do
  n=${f%:*}
  on client2 sh -c "head -c ${f#*:}M /dev/urandom > /tmp/$n && cp /tmp/$n $MNT/ion/$n && sync $MNT/ion/$n &&
    sha256sum /tmp/$n && rm /tmp/$n" | cut -d' ' -f1 >"$WORK/ion-$n.sum"
done
ion_status >"$WORK/ions1.json" || true
sum=$(on client1 timeout 60 sha256sum $MNT/ion/small | cut -d' ' -f1 || true)
check "client1 reads through its mount (ion0) what client2 wrote through its own (ion1)" \
  [ -n "$sum" -a "$sum" = "$(cat "$WORK/ion-small.sum")" ]
ion_status >"$WORK/ions2.json" || true
echo "tessera ion status --json after client2's writes and client1's read:"
show_ions "$WORK/ions2.json"
check "tessera ion status --json lists ion0 and ion1, each with its scheduler" \
  jq -e 'map(.name) == ["ion0", "ion1"] and all(.[]; (.scheduler | type) == "string" and .scheduler != "")' \
  "$WORK/ions2.json" >/dev/null
for k in 0 1; do
  n=$(forwarded ion$k "$WORK/ions2.json")
  check "ion$k forwarded the clients' requests (requests_forwarded $n > 0)" [ "$n" -gt 0 ]
done
# Only one client did I/O at a time: its ION's count grows, the other's stays.
d0=$(($(forwarded ion0 "$WORK/ions1.json") - $(forwarded ion0 "$WORK/ions0.json")))
d1=$(($(forwarded ion1 "$WORK/ions1.json") - $(forwarded ion1 "$WORK/ions0.json")))
check "client2's writes went through ion1 (+$d1 requests at ion1, +$d0 at ion0)" [ "$d1" -gt 0 -a "$d0" = 0 ]
d0=$(($(forwarded ion0 "$WORK/ions2.json") - $(forwarded ion0 "$WORK/ions1.json")))
d1=$(($(forwarded ion1 "$WORK/ions2.json") - $(forwarded ion1 "$WORK/ions1.json")))
check "client1's read went through ion0 (+$d0 requests at ion0, +$d1 at ion1)" [ "$d0" -gt 0 -a "$d1" = 0 ]

# ---- failover: ion0 dies while client1 reads through it ----------------------------------------------

log "failover: ion0 killed while client1 reads 48 MiB through it"
# A paced reader (1 MiB, then 0.1 s: ~5 s for the file) so that the kill falls in the middle; it notes
# the MiB it has read in /tmp/progress. A read that hangs is stopped by timeout (exit 124 or 137).
reader="i=0; while [ \$i -lt 48 ]; do
  dd if=$MNT/ion/big of=/tmp/big bs=1M skip=\$i seek=\$i count=1 conv=notrunc status=none || exit \$?
  i=\$((i + 1)); echo \$i >/tmp/progress; sleep 0.1
done"
on client1 rm -f /tmp/big /tmp/progress
ion_status >"$WORK/ions3.json" || true
t0=$(now_ms)
on client1 timeout -k 5 60 sh -c "$reader" >"$WORK/failover.out" 2>&1 &
rd_pid=$!
wait_progress /tmp/progress 8 100
$DOCKER kill "$(cid ion0)" >/dev/null
t_kill=$(now_ms)
echo "killed ion0 with ${got:-0} MiB of 48 read"
rd_rc=0
wait $rd_pid || rd_rc=$?
t_end=$(now_ms)
cat "$WORK/failover.out"
dt=$(awk -v a="$t_kill" -v b="$t_end" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
dt_all=$(awk -v a="$t0" -v b="$t_end" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
sum=$(on client1 sh -c 'sha256sum /tmp/big 2>/dev/null' | cut -d' ' -f1 || true)
# Where client1 went: its mount logs the move (client::forward).
route=$($DOCKER logs "$(cid client1)" 2>&1 | grep -o 'forwarding node ion0 failed.*' | grep -o 'moving to .*' |
  tail -1 || true)
ion_status >"$WORK/ions4.json" 2>/dev/null || true
via1=$(($(forwarded ion1 "$WORK/ions4.json") - $(forwarded ion1 "$WORK/ions3.json")))
if [ "$rd_rc" = 0 ] && [ "$sum" = "$(cat "$WORK/ion-big.sum")" ]; then
  outcome="completed with the right content"
elif [ "$rd_rc" = 0 ]; then
  outcome="completed with WRONG content"
elif [ "$rd_rc" = 124 ] || [ "$rd_rc" = 137 ]; then
  outcome="HUNG (stopped by timeout, exit $rd_rc)"
else
  outcome="failed cleanly (exit $rd_rc)"
fi
echo "failover: client1's read $outcome, $dt s after the kill ($dt_all s in all);" \
  "client1's mount: ${route:-no move logged}; +$via1 requests at ion1 meanwhile"
echo "tessera ion status --json after the kill:"
show_ions "$WORK/ions4.json"
check "client1's read while ion0 dies completes correctly or fails cleanly: $outcome" \
  [ "$outcome" = "completed with the right content" -o "${outcome#failed cleanly}" != "$outcome" ]
check "the read ends within 60 s of the kill ($dt s)" awk -v t="$dt" 'BEGIN { exit !(t <= 60) }'
sum=$(on client1 timeout 60 sha256sum $MNT/ion/after | cut -d' ' -f1 || true)
check "with ion0 gone, client1 still reads through its mount" \
  [ -n "$sum" -a "$sum" = "$(cat "$WORK/ion-after.sum")" ]
# A new process on client1 starts at ion0 (TESSERA_ION=ion0) and has to move on by itself.
check "with ion0 gone, a new tessera command on client1 still works" on client1 timeout 60 tessera ls /ion
# ion0 back, for the commands that follow (new processes on client1 start there; the mount stays where
# it moved to).
$DOCKER start "$(cid ion0)" >/dev/null
t_start=$SECONDS
wait_ok=0
wait_healthy ion0 || wait_ok=1
check "ion0 rejoins after docker start ($((SECONDS - t_start)) s)" [ "$wait_ok" = 0 ]

# ---- fault test: a data server dies while a client writes --------------------------------------------

log "fault test: a data server dies while client1 writes"
# Files that live on one data server each (stripe count 1), in a directory of their own.
on client1 tessera mkdir -p /safe
on client1 tessera setstripe -c 1 /safe
for i in 0 1; do
  on client1 sh -c "head -c 4M /dev/urandom > /tmp/safe$i && cp /tmp/safe$i $MNT/safe/f$i && sha256sum /tmp/safe$i" |
    cut -d' ' -f1 >"$WORK/safe$i.sum"
done
used=""
for i in 0 1; do
  on client1 tessera getstripe /safe/f$i | tee "$WORK/stripe$i"
  # getstripe's table: `stripe  ds  object`, one row per stripe.
  used="$used $(awk '$1 == "stripe" && $2 == "ds" { t = 1; next } t && NF >= 3 { print $2 }' "$WORK/stripe$i" |
    sort -u | tr '\n' ' ')"
done
victim=""
for d in 0 1 2 3; do
  case " $used " in *" $d "*) ;; *) victim=$d; break ;; esac
done
echo "safe files on data servers:$used; killing ds$victim"
check "stripe-count-1 files avoid at least one data server" [ -n "$victim" ]
victim=${victim:-3}

# A big file striped over all data servers; the victim dies while it is being written.
on client1 tessera mkdir -p /wide
on client1 tessera setstripe -c 0 /wide
moves_before=$($DOCKER logs "$(cid client1)" 2>&1 | grep -c 'forwarding node .* failed' || true)
t0=$SECONDS
on client1 timeout 90 dd if=/dev/zero of=$MNT/wide/big bs=1M count=8192 conv=fsync >"$WORK/dd.out" 2>&1 &
dd_pid=$!
# Kill once the writer is well under way (its own mount sees the file grow).
for _ in $(seq 1 50); do
  size=$(on client1 sh -c "stat -c %s $MNT/wide/big 2>/dev/null || echo 0")
  [ "${size:-0}" -gt $((64 << 20)) ] && break
  sleep 0.2
done
echo "killing ds$victim with $((${size:-0} >> 20)) MiB written"
$DOCKER kill "$(cid ds$victim)" >/dev/null
t_kill=$SECONDS
dd_rc=0
wait $dd_pid || dd_rc=$?
t_err=$((SECONDS - t_kill))
cat "$WORK/dd.out"
echo "dd exit $dd_rc, $t_err s after the kill ($((SECONDS - t0)) s in all)"
echo "client1's mount meanwhile:"
$DOCKER logs "$(cid client1)" 2>&1 | grep 'forwarding node .* failed' | tail -n +$((moves_before + 1)) |
  grep -o 'forwarding node .* failed.*' | sed 's/^/  /' | grep . || echo "  no forwarding node given up"
check "writer gets an I/O error when ds$victim dies (dd exit $dd_rc, not 0 and not a timeout)" \
  test "$dd_rc" != 0 -a "$dd_rc" != 124 -a "$dd_rc" != 137
check "the error comes promptly ($t_err s <= 60 s)" [ "$t_err" -le 60 ]
for i in 0 1; do
  sum=$(on client2 timeout 30 sha256sum $MNT/safe/f$i | cut -d' ' -f1 || true)
  check "file on a surviving data server stays readable (safe/f$i)" [ "$sum" = "$(cat "$WORK/safe$i.sum")" ]
done
on client1 rm -f $MNT/wide/big || true

$DOCKER start "$(cid ds$victim)" >/dev/null
t_start=$SECONDS
wait_ok=0
wait_healthy "ds$victim" || wait_ok=1
check "ds$victim rejoins after docker start ($((SECONDS - t_start)) s)" [ "$wait_ok" = 0 ]
on client1 tessera ping || true
on client1 sh -c "head -c 16M /dev/urandom > /tmp/after && sha256sum /tmp/after" | cut -d' ' -f1 >"$WORK/after.sum"
on client1 timeout 60 cp /tmp/after $MNT/wide/after || true
after=$(on client2 timeout 60 sha256sum $MNT/wide/after | cut -d' ' -f1 || true)
on client1 tessera getstripe /wide/after || true
check "after the restart, a new file over all data servers is written and read back" \
  test -n "$after" -a "$after" = "$(cat "$WORK/after.sum")"

# ---- a server whose process dies is started again by Docker (restart: unless-stopped) -----------------

log "restart policy: ds$victim's server process killed, Docker starts it again"
# `docker kill` counts as a stop by hand (no restart); a process that dies by itself is what the policy is
# for, so the server (the container's main process) is killed from the host, as a crash would end it.
restarts_before=$($DOCKER inspect --format '{{.RestartCount}}' "$(cid ds$victim)")
kill -9 "$($DOCKER inspect --format '{{.State.Pid}}' "$(cid ds$victim)")"
t_start=$SECONDS
wait_ok=1
restarts_now=$restarts_before
for _ in $(seq 1 60); do
  sleep 1
  restarts_now=$($DOCKER inspect --format '{{.RestartCount}}' "$(cid ds$victim)")
  st=$(health "ds$victim")
  [ "$restarts_now" -gt "$restarts_before" ] && [ "$st" = healthy ] && { wait_ok=0; break; }
done
check "ds$victim started again by Docker on its own, healthy after $((SECONDS - t_start)) s (restarts $restarts_before -> $restarts_now)" \
  [ "$wait_ok" = 0 ]
on client1 sh -c "head -c 16M /dev/urandom > /tmp/again && sha256sum /tmp/again" | cut -d' ' -f1 >"$WORK/again.sum"
ok_write=1
for _ in $(seq 1 20); do
  on client1 timeout 60 cp /tmp/again $MNT/wide/again 2>/dev/null && { ok_write=0; break; }
  sleep 1
done
again=$(on client2 timeout 60 sha256sum $MNT/wide/again | cut -d' ' -f1 || true)
check "after Docker's restart, a new file over all data servers is written and read back" \
  test "$ok_write" = 0 -a -n "$again" -a "$again" = "$(cat "$WORK/again.sum")"

# ---- mirrored files: a data server and its volume lost while a client reads -------------------------

log "mirrored file: ds2 killed and its volume removed while client2 reads"
on client1 tessera mkdir -p /mirror
on client1 tessera setstripe -c 0 -N 2 /mirror
on client1 sh -c "head -c 64M /dev/urandom > /tmp/mirror && cp /tmp/mirror $MNT/mirror/big && sha256sum /tmp/mirror" |
  cut -d' ' -f1 >"$WORK/mirror.sum"
on client1 tessera getstripe /mirror/big | tee "$WORK/mirror-stripe"
# A paced reader on client2 (1 MiB, then 0.05 s: ~4 s for the file), hashing what it read.
on client2 sh -c "for i in \$(seq 0 63); do dd if=$MNT/mirror/big bs=1M skip=\$i count=1 2>/dev/null; sleep 0.05; done | sha256sum" \
  >"$WORK/mirror-read" 2>&1 &
rd_pid=$!
sleep 2
$DOCKER kill "$(cid ds2)" >/dev/null
t_kill=$SECONDS
$DOCKER rm -f "$(cid ds2)" >/dev/null
vol_rm=0
$DOCKER volume rm "${PROJECT}_ds2-data" >/dev/null || vol_rm=$?
check "ds2's volume removed (its store lost)" [ "$vol_rm" = 0 ]
rd_rc=0
wait $rd_pid || rd_rc=$?
got=$(cut -d' ' -f1 "$WORK/mirror-read")
echo "client2's read of the mirrored file: exit $rd_rc, $((SECONDS - t_kill)) s after the kill"
check "client2's read of the mirrored file completes with the right content while ds2 is gone" \
  [ "$rd_rc" = 0 -a "$got" = "$(cat "$WORK/mirror.sum")" ]
# ds2 back, empty (a new volume): every replica it held is stale, then resynced from the others.
ci_compose up -d --no-deps ds2 >/dev/null 2>&1
CID_ds2=$(ci_compose ps -q ds2)
t_start=$SECONDS
wait_ok=0
wait_healthy ds2 || wait_ok=1
check "ds2 back with an empty volume, healthy after $((SECONDS - t_start)) s" [ "$wait_ok" = 0 ]
t_start=$SECONDS
clean=1
for _ in $(seq 1 120); do
  st=$(on client1 tessera --config /etc/tessera/admin.toml mirror status --json 2>/dev/null || true)
  case "$st" in *'"degraded_objects":0'* | *'"degraded_objects": 0'*) clean=0; break ;; esac
  sleep 1
done
echo "tessera mirror status --json: $st"
check "ds2's replicas resynced: nothing degraded after $((SECONDS - t_start)) s" [ "$clean" = 0 ]
on client1 tessera getstripe /mirror/big | tee "$WORK/mirror-stripe2"
check "getstripe shows every replica in-sync again" \
  sh -c "grep -q in-sync '$WORK/mirror-stripe2' && ! grep -q -e stale -e resyncing '$WORK/mirror-stripe2'"
check "fsck --verify-mirrors finds the replicas identical" on client1 tessera --config /etc/tessera/admin.toml fsck --verify-mirrors
sum=$(on client2 timeout 60 sha256sum $MNT/mirror/big | cut -d' ' -f1 || true)
check "the mirrored file reads back intact after the resync" [ "$sum" = "$(cat "$WORK/mirror.sum")" ]

# ---- metadata failover: the leading replica's container dies while client1 creates files ----------------

log "metadata failover: the leading metadata replica killed while client1 creates files"
# `tessera mds status --json` (a list of {"name", "role", "term", "log_index", "serving", ...}) from client1.
mds_status() { on client1 timeout 30 tessera --config /etc/tessera/admin.toml mds status --json; }
mds_status >"$WORK/mds0.json" || true
jq -r '.[] | "  \(.name): \(.role), term \(.term), log \(.log_index), serving \(.serving)"' "$WORK/mds0.json" || true
leader=$(jq -r '[.[] | select(.role == "leader" and .serving) | .name] | first // empty' "$WORK/mds0.json" || true)
check "tessera mds status --json names one serving leader among mds0..mds2 ($leader)" \
  sh -c "jq -e '[.[] | select(.role == \"leader\")] | length == 1' '$WORK/mds0.json' >/dev/null && case '$leader' in mds[012]) true ;; *) false ;; esac"
leader=${leader:-mds0}
term0=$(jq -r '[.[] | select(.role == "leader") | .term] | first // 0' "$WORK/mds0.json" 2>/dev/null || echo 0)
# A paced writer through the mount: 400 files (f<i> holding "<i>"), a mkdir every 50; it notes the count
# done in /tmp/mprogress and each file's completion time (ms) in /tmp/mtimes, to find the longest pause.
N_META=400
writer="mkdir -p $MNT/meta || exit \$?; i=0; : >/tmp/mtimes; while [ \$i -lt $N_META ]; do
  if [ \$((i % 50)) = 0 ]; then mkdir $MNT/meta/d\$i || exit \$?; fi
  echo \$i > $MNT/meta/f\$i || exit \$?
  i=\$((i + 1)); echo \$i >/tmp/mprogress; date +%s%3N >>/tmp/mtimes; sleep 0.02
done"
on client1 rm -f /tmp/mprogress /tmp/mtimes
on client1 timeout -k 5 180 sh -c "$writer" >"$WORK/meta.out" 2>&1 &
wr_pid=$!
wait_progress /tmp/mprogress 100 300
$DOCKER kill "$(cid "$leader")" >/dev/null
echo "killed $leader (the leader, term $term0) with ${got:-0} of $N_META files created"
wr_rc=0
wait $wr_pid || wr_rc=$?
cat "$WORK/meta.out"
gap=$(on client1 sh -c 'awk "NR > 1 && \$1 - p > m { m = \$1 - p } { p = \$1 } END { printf \"%.1f\", m / 1000 }" /tmp/mtimes' || echo "?")
done_n=$(on client1 cat /tmp/mprogress 2>/dev/null || echo 0)
echo "writer exit $wr_rc, $done_n files created; longest pause between two creates: $gap s"
check "client1's creates go on through the leader's death (exit $wr_rc, $done_n of $N_META)" \
  [ "$wr_rc" = 0 -a "$done_n" = "$N_META" ]
# From the other client: every file there once (ls), each with its own content.
names=$(on client2 timeout 60 sh -c "ls $MNT/meta | grep -c '^f'" || echo 0)
dirs=$(on client2 timeout 60 sh -c "ls $MNT/meta | grep -c '^d'" || echo 0)
wrong=$(on client2 timeout 120 sh -c "n=0; i=0; while [ \$i -lt $N_META ]; do
  [ \"\$(cat $MNT/meta/f\$i 2>/dev/null)\" = \$i ] || n=\$((n + 1)); i=\$((i + 1)); done; echo \$n" || echo "$N_META")
check "client2 sees all $N_META files once, each with its content ($names files, $dirs directories, $wrong wrong)" \
  [ "$names" = "$N_META" -a "$dirs" = $((N_META / 50)) -a "$wrong" = 0 ]
mds_status >"$WORK/mds1.json" || true
jq -r '.[] | "  \(.name): \(.role), term \(.term), log \(.log_index), serving \(.serving)"' "$WORK/mds1.json" || true
new=$(jq -r '[.[] | select(.role == "leader" and .serving) | .name] | first // empty' "$WORK/mds1.json" || true)
term1=$(jq -r '[.[] | select(.role == "leader") | .term] | first // 0' "$WORK/mds1.json" 2>/dev/null || echo 0)
check "another replica leads ($leader -> ${new:-none}, term $term0 -> $term1)" \
  [ -n "$new" -a "$new" != "$leader" -a "$term1" -gt "$term0" ]
$DOCKER start "$(cid "$leader")" >/dev/null
t_start=$SECONDS
wait_ok=0
wait_healthy "$leader" || wait_ok=1
check "$leader rejoins after docker start, healthy after $((SECONDS - t_start)) s" [ "$wait_ok" = 0 ]
# It follows and catches up: its log reaches the leader's (a new change first, so there is one to follow).
on client1 tessera mkdir -p /meta/after
mds_status >"$WORK/mds2.json" || true
want=$(jq -r '[.[] | select(.role == "leader") | .log_index] | first // 0' "$WORK/mds2.json" 2>/dev/null || echo 0)
caught=1
for _ in $(seq 1 30); do
  if jq -e --arg n "$leader" --argjson l "${want:-0}" \
      '[.[] | select(.name == $n and .role == "follower" and .applied_index >= $l)] | length == 1' \
      "$WORK/mds2.json" >/dev/null 2>&1; then caught=0; break; fi
  sleep 1
  mds_status >"$WORK/mds2.json" || true
done
jq -r '.[] | "  \(.name): \(.role), term \(.term), log \(.log_index), applied \(.applied_index)"' "$WORK/mds2.json" || true
check "$leader follows the new leader and has applied its log up to the leader's index $want" [ "$caught" = 0 -a "${want:-0}" -gt 0 ]
check "fsck after the metadata failover is clean" on client1 tessera --config /etc/tessera/admin.toml fsck

log "tear down"
bash "$ROOT/deploy/demo.sh" down >/dev/null 2>&1 || true
check "no containers left" [ -z "$($DOCKER ps -aq)" ]
check "no volumes left" [ -z "$($DOCKER volume ls -q)" ]
check "no project network left" [ -z "$($DOCKER network ls -q --filter "name=${PROJECT}_")" ]
$DOCKER image rm -f "$IMAGE" tessera-base:bookworm >/dev/null
check "images removed" [ -z "$($DOCKER images -q)" ]
pid=$DOCKERD_PID
stop_dockerd
check "dockerd (pid $pid) stopped" sh -c "! kill -0 $pid 2>/dev/null"
cleanup
links_after=$(ip -o link show | awk -F': ' '{print $2}' | sort | tr '\n' ' ')
check "host network interfaces as before" [ "$links_after" = "$links_before" ]
check "host IP forwarding as before" [ "$(cat /proc/sys/net/ipv4/ip_forward)" = "$ip_forward_before" ]
check "no mounts left under the temp dir" sh -c "! grep -q '$WORK' /proc/mounts"

log "done in $((SECONDS - T_START)) s"
echo "docker demo: $PASS passed, $FAIL failed"
trap - EXIT
[ "$FAIL" = 0 ]
