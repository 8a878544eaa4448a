#!/bin/sh
# Entry point of every container of the Docker demo (installed as /usr/local/bin/tessera-node):
#   tessera-node init            one-shot: CA, node certificates and node configs (kept if already there)
#   tessera-node mds N           metadata replica N (0, 1, 2: replica N+1 of the replicated service)
#   tessera-node ds N            data server N
#   tessera-node ion K           forwarding node K (ION: clients' requests go through it to the servers)
#   tessera-node client NAME     a client: mounts Tessera with FUSE at $TESSERA_MOUNT and stays up
#   tessera-node health ROLE ... health check of a container (docker's HEALTHCHECK)
set -eu

CONF=${TESSERA_CONF_DIR:-/etc/tessera}        # configs + node certificates (shared volume)
CA_DIR=${TESSERA_CA_DIR:-/var/lib/tessera-ca} # CA key: only the init container sees it
DATA=${TESSERA_DATA_DIR:-/var/lib/tessera}    # this node's own volume
N_MDS=${TESSERA_MDS_COUNT:-3}
N_DS=${TESSERA_DS_COUNT:-4}
N_ION=${TESSERA_ION_COUNT:-2}
CLIENTS=${TESSERA_CLIENTS:-client1 client2}
MDS_PORT=7400
DS_PORT0=7410
ION_PORT=7500

# A node's config: the whole cluster, with one node's identity in [tls]. DS and ION entries use the
# host names compose gives the containers; every server keeps its data in its own volume at $DATA.
#   write_config FILE TLS_PREFIX NAME DS_IDS ION_IDS [PIN]
# DS_IDS, ION_IDS: the data servers and forwarding nodes to list (health checks list one or none).
# PIN: the only way this config's clients may go (`[client] ion`, no failover to direct access): the
# ION health checks, which must fail when their ION does.
write_config() {
  file=$1
  tls=$2
  name=$3
  ds_ids=$4
  ion_ids=$5
  pin=${6:-}
  {
    for m in $(seq 0 $((N_MDS - 1))); do
      printf '[[mds]]\nname = "mds%s"\naddr = "mds%s:%s"\ndata_dir = "%s"\n\n' "$m" "$m" "$MDS_PORT" "$DATA"
    done
    for i in $ds_ids; do
      printf '[[ds]]\nid = %s\naddr = "ds%s:%s"\ndata_dir = "%s"\n\n' "$i" "$i" $((DS_PORT0 + i)) "$DATA"
    done
    for k in $ion_ids; do
      printf '[[ion]]\nname = "ion%s"\naddr = "ion%s:%s"\n\n' "$k" "$k" "$ION_PORT"
    done
    printf '[defaults]\nstripe_size = 1048576\nstripe_count = 0\nplacement = "round-robin"\n\n'
    # A local bridge answers in milliseconds: give up on a vanished server after seconds, not a minute.
    # Which ION a client uses: TESSERA_ION in its container's environment (docker-compose.yml).
    printf '[client]\ncall_timeout_ms = %s\n' "${TESSERA_CALL_TIMEOUT_MS:-15000}"
    [ -z "$pin" ] || printf 'ion = "%s"\n' "$pin"
    printf '\n'
    if [ -n "$ion_ids" ]; then
      # A client whose ION is silent for failover_ms moves to the next one, after the last to direct access.
      direct=true
      [ -z "$pin" ] || direct=false
      printf '[ion_options]\nfailover_ms = %s\nfailover_direct = %s\n\n' "${TESSERA_ION_FAILOVER_MS:-3000}" "$direct"
    fi
    printf '[transport]\nidle_timeout_ms = %s\n\n' "${TESSERA_IDLE_TIMEOUT_MS:-5000}"
    printf '[tls]\nca = "%s/ca.pem"\ncert = "%s/%s.pem"\nkey = "%s/%s.key"\n' "$tls" "$tls" "$name" "$tls" "$name"
  } >"$file.tmp"
  mv "$file.tmp" "$file"
}

issue() { # role name [san...]
  role=$1
  name=$2
  shift 2
  sans=""
  for s in "$@"; do sans="$sans --san $s"; done
  # shellcheck disable=SC2086
  tessera ca issue --dir "$CA_DIR" --role "$role" --name "$name" $sans >/dev/null
  cp "$CA_DIR/$name.pem" "$CA_DIR/$name.key" "$CONF/tls/"
}

init() {
  if [ -f "$CONF/cluster.done" ]; then
    echo "cluster files already in $CONF, keeping them"
    return 0
  fi
  mkdir -p "$CONF/tls" "$CA_DIR"
  [ -f "$CA_DIR/ca.pem" ] || tessera ca init --dir "$CA_DIR" --name tessera-docker >/dev/null
  cp "$CA_DIR/ca.pem" "$CONF/tls/ca.pem"
  # The revocation list next to the CA certificate, where the nodes look for it (a later `tessera ca
  # revoke` in $CA_DIR must be copied here again).
  if [ -f "$CA_DIR/ca.crl.pem" ]; then cp "$CA_DIR/ca.crl.pem" "$CONF/tls/ca.crl.pem"; fi
  all_ds=$(seq 0 $((N_DS - 1)) | tr '\n' ' ')
  all_ion=""
  [ "$N_ION" -eq 0 ] || all_ion=$(seq 0 $((N_ION - 1)) | tr '\n' ' ')
  for m in $(seq 0 $((N_MDS - 1))); do
    issue mds "mds$m" "mds$m"
    write_config "$CONF/mds$m.toml" tls "mds$m" "$all_ds" "$all_ion"
  done
  for i in $all_ds; do
    issue ds "ds$i" "ds$i"
    write_config "$CONF/ds$i.toml" tls "ds$i" "$all_ds" "$all_ion"
  done
  for k in $all_ion; do
    issue ion "ion$k" "ion$k"
    write_config "$CONF/ion$k.toml" tls "ion$k" "$all_ds" "$all_ion"
  done
  for c in $CLIENTS; do
    issue client "$c" "$c"
    write_config "$CONF/$c.toml" tls "$c" "$all_ds" "$all_ion"
  done
  issue admin admin
  write_config "$CONF/admin.toml" tls admin "$all_ds" "$all_ion"
  # Health checks: the admin identity with no data server (MDS check) or exactly one (DS check),
  # straight to the servers; an ION's: no data server, only that ION, so that the ping of the MDS
  # has to go through it.
  mkdir -p "$CONF/health"
  write_config "$CONF/health/mds.toml" ../tls admin "" ""
  for i in $all_ds; do
    write_config "$CONF/health/ds$i.toml" ../tls admin "$i" ""
  done
  for k in $all_ion; do
    write_config "$CONF/health/ion$k.toml" ../tls admin "" "$k" "ion$k"
  done
  chmod 0644 "$CONF"/*.toml "$CONF"/health/*.toml "$CONF/tls/"*.pem
  chmod 0600 "$CONF/tls/"*.key
  touch "$CONF/cluster.done"
  echo "cluster files written to $CONF: CA, certificates and configs for $N_MDS metadata replicas, $N_DS data servers," \
    "$N_ION forwarding nodes, $CLIENTS, admin"
}

client() {
  name=$1
  mnt=${TESSERA_MOUNT:-/mnt/tessera}
  mkdir -p "$mnt"
  if [ "${TESSERA_FUSE:-1}" = 1 ]; then
    # Foreground: the container lives as long as the mount; SIGTERM unmounts.
    exec tessera-fuse "$mnt" --config "$CONF/$name.toml"
  fi
  # CLI-only client (TESSERA_FUSE=0): stays up for `docker exec ... tessera ...`.
  trap 'exit 0' TERM INT
  while :; do sleep 3600 & wait $!; done
}

health() {
  case $1 in
    # A replica: it answers and knows which replica leads (its row of `tessera mds status --json`, one
    # object per replica in order, has role leader or follower and a leader id).
    mds)
      row=$(tessera --config "$CONF/health/mds.toml" mds status --json | sed 's/},{/}\n{/g' | sed -n "$(($2 + 1))p")
      echo "$row" | grep -q '"role":"\(leader\|follower\)"' && echo "$row" | grep -q '"leader":[0-9]'
      ;;
    ds) tessera --config "$CONF/health/ds$2.toml" ping >/dev/null ;;
    # TESSERA_ION would override the config's pin.
    ion) TESSERA_ION="ion$2" tessera --config "$CONF/health/ion$2.toml" ping >/dev/null ;;
    client)
      if [ "${TESSERA_FUSE:-1}" = 1 ]; then
        mnt=${TESSERA_MOUNT:-/mnt/tessera}
        grep -q " $mnt fuse" /proc/mounts && stat "$mnt/" >/dev/null
      else
        tessera --config "$CONF/$2.toml" ping >/dev/null
      fi
      ;;
    *) echo "unknown health target $1" >&2; exit 2 ;;
  esac
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  init) init ;;
  mds) exec tessera-mds --config "$CONF/mds$1.toml" --replica $(($1 + 1)) ;;
  ds) exec tessera-ds --config "$CONF/ds$1.toml" --id "$1" ;;
  ion) exec tessera-ion --config "$CONF/ion$1.toml" --index "$1" ;;
  client) client "$1" ;;
  health) health "$@" ;;
  *)
    echo "usage: tessera-node init | mds N | ds N | ion K | client NAME | health mds N|ds N|ion K|client NAME" >&2
    exit 2
    ;;
esac
