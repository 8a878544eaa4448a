#!/usr/bin/env bash
# CI test of the Docker demo on a machine without an image registry (run as root; .ci/run calls it after
# `cargo build --release --bins`):
#  - installs Debian's docker.io, a docker-compose and debootstrap;
#  - starts its own dockerd (own data root, exec root, pidfile and socket in a temp dir, no iptables,
#    no IP forwarding, no default bridge), so it neither sees nor touches another Docker on the host;
#  - makes the base image from the Debian mirror apt uses (debootstrap + docker import; the rootfs
#    tarball is cached in $TESSERA_CI_CACHE, default /var/cache/tessera-ci);
#  - runs deploy/demo.sh against it and checks its results, then a fault test (a data server killed
#    while a client writes), then removes everything it made and stops its dockerd.
# Last line: `docker demo: N passed, M failed`; exit status non-zero on any failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${TESSERA_CI_CACHE:-/var/cache/tessera-ci}
PROJECT=tessera-ci
IMAGE=tessera:ci
T_START=$SECONDS

[ "$(id -u)" = 0 ] || { echo "deploy/test.sh: needs root (it starts its own dockerd)" >&2; exit 1; }
for b in tessera tessera-mds tessera-ds tessera-fuse tessera-bench; do
  [ -x "$ROOT/target/release/$b" ] || { echo "deploy/test.sh: target/release/$b missing: cargo build --release --bins" >&2; exit 1; }
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

# ---- fault test: a data server dies while a client writes --------------------------------------------

log "fault test: cluster up again"
TESSERA_BASE=tessera-base:bookworm bash "$ROOT/deploy/demo.sh" up >"$WORK/up.out" 2>&1 || { cat "$WORK/up.out"; exit 1; }
for s in client1 client2 ds0 ds1 ds2 ds3; do printf -v "CID_$s" '%s' "$(ci_compose ps -q "$s")"; done
cid() { local v=CID_$1; echo "${!v}"; }
on() { local c; c=$(cid "$1"); shift; $DOCKER exec "$c" "$@"; }
MNT=/mnt/tessera

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
wait_ok=1
for _ in $(seq 1 60); do
  st=$($DOCKER inspect --format '{{.State.Health.Status}}' "$(cid ds$victim)")
  [ "$st" = healthy ] && { wait_ok=0; break; }
  sleep 1
done
check "ds$victim rejoins after docker start ($((SECONDS - t_start)) s)" [ "$wait_ok" = 0 ]
on client1 tessera ping || true
on client1 sh -c "head -c 16M /dev/urandom > /tmp/after && sha256sum /tmp/after" | cut -d' ' -f1 >"$WORK/after.sum"
on client1 timeout 60 cp /tmp/after $MNT/wide/after || true
after=$(on client2 timeout 60 sha256sum $MNT/wide/after | cut -d' ' -f1 || true)
on client1 tessera getstripe /wide/after || true
check "after the restart, a new file over all data servers is written and read back" \
  test -n "$after" -a "$after" = "$(cat "$WORK/after.sum")"

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
