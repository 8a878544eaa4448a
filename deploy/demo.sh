#!/usr/bin/env bash
# Tessera on several "hosts" with Docker: three metadata replicas, four data servers, two forwarding nodes (IONs) and
# two FUSE clients, each in its own container on a private bridge network (deploy/docker-compose.yml);
# client1 goes through ion0, client2 through ion1.
#
#   bash deploy/demo.sh          build, start, write on client1 / read on client2, benchmark both
#                                clients at once, show `tessera df`, `tessera mds status` and
#                                `tessera ion status`, tear everything down
#   bash deploy/demo.sh up       build and start the cluster, leave it running
#   bash deploy/demo.sh run      the workload steps against a running cluster
#   bash deploy/demo.sh down     stop and remove the cluster (containers, network, volumes)
#
# Needs Docker with Compose v2 (`docker compose`; Debian's docker-compose 1.29 works too) and, to build
# the binaries, cargo. Environment: DOCKER (docker CLI, default `docker`), TESSERA_BASE (base image,
# default debian:bookworm-slim), TESSERA_IMAGE (default tessera:demo), TESSERA_KEEP_IMAGE=1 (keep the
# image after `down`), TESSERA_FUSE=0 (clients without FUSE: the steps use `tessera put/get`),
# TESSERA_BENCH_BLOCK (ior block size per task, default 128m).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Where the binaries are (default target/release; CI uses the debug build its tests made: TESSERA_BIN_DIR).
BIN_DIR=${TESSERA_BIN_DIR:-$ROOT/target/release}
DEPLOY=$ROOT/deploy
DOCKER=${DOCKER:-docker}
export TESSERA_IMAGE=${TESSERA_IMAGE:-tessera:demo}
export TESSERA_FUSE=${TESSERA_FUSE:-1}
BASE=${TESSERA_BASE:-}
PROJECT=${TESSERA_PROJECT:-tessera-demo}
BENCH_BLOCK=${TESSERA_BENCH_BLOCK:-128m}
BINS=(tessera tessera-mds tessera-ds tessera-ion tessera-fuse tessera-bench)
SERVICES=(mds0 mds1 mds2 ds0 ds1 ds2 ds3 ion0 ion1 client1 client2)
MNT=/mnt/tessera

# ---- helpers -----------------------------------------------------------------------------------------

TIMES=()
now() { date +%s.%N; }
step() { # step NAME: starts a timed step (the previous one ends)
  end_step
  STEP_NAME=$1
  STEP_T0=$(now)
  printf '\n== %s\n' "$1"
}
end_step() {
  if [ -n "${STEP_NAME:-}" ]; then
    local dt
    dt=$(awk -v a="$STEP_T0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
    printf -- '-- %s: %ss\n' "$STEP_NAME" "$dt"
    TIMES+=("$(printf '%7ss  %s' "$dt" "$STEP_NAME")")
    STEP_NAME=
  fi
}
print_times() {
  end_step
  printf '\n== time per step\n'
  printf '%s\n' "${TIMES[@]}"
}
die() { echo "demo: $*" >&2; exit 1; }

# Compose v2 plugin if there is one, else the standalone docker-compose (v1 or v2).
if $DOCKER compose version >/dev/null 2>&1; then
  COMPOSE=($DOCKER compose)
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  die "needs Docker Compose v2 ('docker compose'; https://docs.docker.com/compose/install/) or docker-compose"
fi
compose() { "${COMPOSE[@]}" -f "$DEPLOY/docker-compose.yml" -p "$PROJECT" "$@"; }
container_of() { compose ps -q "$1"; }
on() { # on SERVICE CMD...: run CMD in the service's container (no tty, so output can be captured)
  local var=CID_$1
  [ -n "${!var:-}" ] || printf -v "$var" '%s' "$(container_of "$1")"
  shift
  $DOCKER exec "${!var}" "$@"
}
health_of() { # health status of a service's container (empty if it has none)
  local id
  id=$(container_of "$1")
  [ -n "$id" ] || { echo missing; return; }
  $DOCKER inspect --format '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id"
}
wait_healthy() { # wait_healthy TIMEOUT_S SERVICE...
  local limit=$1 svc st
  shift
  local t_end=$((SECONDS + limit))
  for svc in "$@"; do
    while :; do
      st=$(health_of "$svc")
      [ "$st" = healthy ] && break
      if [ $SECONDS -ge $t_end ] || [ "$st" = exited ] || [ "$st" = unhealthy ]; then
        compose ps >&2 || true
        compose logs --tail 30 "$svc" >&2 || true
        die "$svc is $st, not healthy"
      fi
      sleep 1
    done
  done
}

# ---- steps -------------------------------------------------------------------------------------------

build_binaries() {
  local missing=0 b
  for b in "${BINS[@]}"; do [ -x "$BIN_DIR/$b" ] || missing=1; done
  if [ $missing = 1 ]; then
    [ "$BIN_DIR" = "$ROOT/target/release" ] || die "no Tessera binaries in $BIN_DIR (TESSERA_BIN_DIR)"
    step "build release binaries (cargo build --release --bins)"
    command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) to build Tessera"
    (cd "$ROOT" && cargo build --release --bins)
  fi
}

# The binaries come from the host, so the base image needs a glibc at least as new as the newest
# symbol version they use: bookworm has 2.36, trixie 2.41.
pick_base() {
  [ -z "$BASE" ] || return 0
  BASE=debian:bookworm-slim
  command -v objdump >/dev/null || return 0
  local need
  need=$(objdump -T "$BIN_DIR"/tessera* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  need=${need#GLIBC_}
  [ -n "$need" ] || return 0
  if [ "$(printf '%s\n2.36\n' "$need" | sort -V | tail -1)" != 2.36 ]; then
    BASE=debian:trixie-slim
    echo "binaries need glibc $need: using base $BASE (set TESSERA_BASE to choose another)"
  fi
}

build_image() {
  pick_base
  step "build image $TESSERA_IMAGE (base $BASE)"
  local ctx b
  ctx=$(mktemp -d)
  mkdir "$ctx/bin"
  for b in "${BINS[@]}"; do cp "$BIN_DIR/$b" "$ctx/bin/"; done
  # Debug info is most of the binaries' size; the image does not need it.
  if command -v strip >/dev/null; then strip "$ctx"/bin/* 2>/dev/null || true; fi
  cp "$DEPLOY/tessera-node.sh" "$ctx/"
  if ! $DOCKER build -q -f "$DEPLOY/Dockerfile" --build-arg "BASE=$BASE" -t "$TESSERA_IMAGE" "$ctx"; then
    rm -rf "$ctx"
    die "image build failed"
  fi
  rm -rf "$ctx"
}

cluster_up() {
  step "start the cluster (certs, mds0..mds2, ds0..ds3, ion0, ion1, client1, client2)"
  # Compose orders the start by the health checks (depends_on conditions); then wait for the clients.
  compose up -d
  wait_healthy 120 "${SERVICES[@]}"
  compose ps
  on client1 tessera ping
}

write_and_read() {
  step "write 64 MiB through client1, read it back through client2 (each through its ION)"
  local sum1 sum2
  on client1 sh -c 'head -c 64M /dev/urandom > /tmp/demo.bin'
  sum1=$(on client1 sha256sum /tmp/demo.bin | cut -d' ' -f1)
  if [ "$TESSERA_FUSE" = 1 ]; then
    on client1 sh -c "mkdir -p $MNT/demo && cp /tmp/demo.bin $MNT/demo/data.bin && sync $MNT/demo/data.bin"
    echo "client1: wrote $MNT/demo/data.bin (FUSE mount)"
    on client2 ls -l $MNT/demo
    sum2=$(on client2 sha256sum $MNT/demo/data.bin | cut -d' ' -f1)
  else
    on client1 tessera mkdir -p /demo
    on client1 tessera put -q /tmp/demo.bin /demo/data.bin
    echo "client1: wrote /demo/data.bin (tessera put)"
    on client2 tessera ls -l /demo
    on client2 tessera get -q /demo/data.bin /tmp/demo.bin
    sum2=$(on client2 sha256sum /tmp/demo.bin | cut -d' ' -f1)
  fi
  on client1 tessera getstripe /demo/data.bin
  echo "sha256 written by client1: $sum1"
  echo "sha256 read by client2:    $sum2"
  [ "$sum1" = "$sum2" ] || die "client2 read different data than client1 wrote"
  echo "client2 read back exactly what client1 wrote"
  on client1 rm -f /tmp/demo.bin
}

bench() {
  step "tessera-bench ior on client1 and client2 at once (2 tasks each, $BENCH_BLOCK per task)"
  local out1 out2 rc1=0 rc2=0
  out1=$(mktemp)
  out2=$(mktemp)
  on client1 tessera mkdir -p /bench
  on client1 tessera-bench ior -t 1m -b "$BENCH_BLOCK" -N 2 -e -o /bench/client1 >"$out1" 2>&1 &
  local p1=$!
  on client2 tessera-bench ior -t 1m -b "$BENCH_BLOCK" -N 2 -e -o /bench/client2 >"$out2" 2>&1 &
  local p2=$!
  wait $p1 || rc1=$?
  wait $p2 || rc2=$?
  printf -- '--- client1:\n'
  cat "$out1"
  printf -- '--- client2:\n'
  cat "$out2"
  rm -f "$out1" "$out2"
  [ $rc1 = 0 ] && [ $rc2 = 0 ] || die "benchmark failed (client1 exit $rc1, client2 exit $rc2)"
}

df_step() {
  step "tessera df"
  on client1 tessera df
}

mds_step() {
  step "tessera mds status (the metadata replicas: which one leads, how far each follows)"
  on client1 tessera --config /etc/tessera/admin.toml mds status
}

ion_step() {
  step "tessera ion status (what went through each forwarding node)"
  on client1 tessera ion status
}

cluster_down() {
  local what="containers, network, volumes"
  [ "${TESSERA_KEEP_IMAGE:-0}" = 1 ] || what="$what, image"
  step "tear down ($what)"
  compose down -v --remove-orphans --timeout 20
  if [ "${TESSERA_KEEP_IMAGE:-0}" != 1 ]; then
    $DOCKER image rm "$TESSERA_IMAGE" >/dev/null 2>&1 || true
  fi
}

# ---- main --------------------------------------------------------------------------------------------

cmd=${1:-all}
case $cmd in
  all)
    echo "Tessera Docker demo (compose: ${COMPOSE[*]}, project $PROJECT, image $TESSERA_IMAGE)"
    build_binaries
    build_image
    # Whatever happens from here on, the cluster is removed again.
    trap 'rc=$?; trap - EXIT; if [ $rc != 0 ]; then echo "demo: failed, tearing down" >&2; fi; cluster_down; print_times; exit $rc' EXIT
    cluster_up
    write_and_read
    bench
    df_step
    mds_step
    ion_step
    ;;
  up)
    build_binaries
    build_image
    cluster_up
    end_step
    ;;
  run)
    write_and_read
    bench
    df_step
    mds_step
    ion_step
    print_times
    ;;
  down)
    cluster_down
    end_step
    ;;
  *)
    die "usage: $0 [all|up|run|down]"
    ;;
esac
