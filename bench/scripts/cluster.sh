# Sourced by the benchmark scripts: a throwaway `tessera up` cluster on loopback and FUSE mounts of it,
# all torn down when the script exits. Needs $bin (the binaries) and $work (a scratch directory).
up_pids=(); fuse_pids=(); mounts=()
# KEY=VALUE environment given to the clusters and mounts started next (e.g. to try glibc tunables).
node_env=()
cleanup() {
  for p in "${fuse_pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  for p in "${up_pids[@]}"; do kill -INT "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# up DIR DATA_SERVERS: `tessera up` in DIR until it is ready; its pid is left in $up_pid.
up() {
  env "${node_env[@]}" "$bin/tessera" up --dir "$1" --ds "$2" --port-base 0 > "$1.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 100); do grep -qs "TESSERA UP" "$1.log" && break; sleep 0.2; done
}

# cluster_files DIR DATA_SERVERS: `tessera up` started and stopped once, to write a cluster's files
# (configurations, certificates) into DIR for editing or for starting its servers by hand.
cluster_files() {
  up "$1" "$2"
  kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true
}

# start_by_hand DIR DATA_SERVERS [EDIT]: a cluster's files written into DIR by `tessera up` (then `EDIT DIR`
# run on them, if given), then its MDS and data servers started one by one, with no supervisor (`tessera up`
# would start a killed server again), logs in $work; data server i's pid is ${ds_pid[i]}, the MDS's $mds_pid;
# exports TESSERA_CONFIG.
start_by_hand() {
  cluster_files "$1" "$2"
  [ -z "${3:-}" ] || "$3" "$1"
  export TESSERA_CONFIG=$1/client.toml
  "$bin/tessera-mds" --config "$1/mds.toml" > "$work/mds.log" 2>&1 &
  mds_pid=$!; up_pids+=($!)
  ds_pid=()
  for i in $(seq 0 $(($2 - 1))); do
    "$bin/tessera-ds" --config "$1/ds$i.toml" --id "$i" > "$work/ds$i.log" 2>&1 &
    ds_pid[$i]=$!; up_pids+=($!)
  done
  sleep 2
}

# start_cluster DATA_SERVERS [NAME [KEY=VALUE...]]: a cluster in $work/NAME (default "cluster"); exports
# TESSERA_CONFIG. KEY=VALUE pairs override settings in every node's configuration (e.g.
# direct_writes=false): the cluster is started once to write its files, then restarted with them edited.
start_cluster() {
  local dir=$work/${2:-cluster}
  if [ $# -gt 2 ]; then
    cluster_files "$dir" "$1"
    for kv in "${@:3}"; do
      grep -q "^${kv%%=*} = " "$dir/mds.toml" || { echo "no setting ${kv%%=*} in $dir/mds.toml" >&2; exit 1; }
      sed -i "s|^${kv%%=*} = .*|${kv%%=*} = ${kv#*=}|" "$dir"/*.toml
    done
  fi
  up "$dir" "$1"
  up_pids+=("$up_pid")
  export TESSERA_CONFIG=$dir/client.toml
}

# mount_fuse MOUNTPOINT LOG [OPTIONS]: tessera-fuse on MOUNTPOINT (-o OPTIONS), waits until it is ready.
mount_fuse() {
  mkdir -p "$1"
  env "${node_env[@]}" "$bin/tessera-fuse" "$1" --allow-other ${3:+-o "$3"} > "$2" 2>&1 &
  fuse_pids+=($!)
  mounts+=("$1")
  for _ in $(seq 100); do grep -q READY "$2" && break; sleep 0.2; done
}

# need_ready NAME LOG: exits (printing LOG) unless the node or mount that writes LOG said READY.
need_ready() {
  grep -q READY "$2" || { echo "$1 did not start:"; cat "$2"; exit 1; }
}

# now: seconds since the epoch; since T0 [DIGITS]: seconds from T0 to now (2 decimals by default).
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.{sys.argv[3]}f}')" "$1" "$(now)" "${2:-2}"; }
