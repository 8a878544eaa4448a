# Sourced by the benchmark scripts: a throwaway `tessera up` cluster on loopback and FUSE mounts of it,
# all torn down when the script exits. Needs $bin (the binaries) and $work (a scratch directory).
up_pid=""; fuse_pids=(); mounts=()
cleanup() {
  for p in "${fuse_pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  for m in "${mounts[@]}"; do umount -l "$m" 2>/dev/null || true; done
  [ -n "$up_pid" ] && kill -INT "$up_pid" 2>/dev/null && wait "$up_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start_cluster DATA_SERVERS: `tessera up` in $work/cluster; exports TESSERA_CONFIG.
start_cluster() {
  "$bin/tessera" up --dir "$work/cluster" --ds "$1" --port-base 0 > "$work/up.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 100); do grep -q "TESSERA UP" "$work/up.log" && break; sleep 0.2; done
  export TESSERA_CONFIG=$work/cluster/client.toml
}

# mount_fuse MOUNTPOINT LOG [OPTIONS]: tessera-fuse on MOUNTPOINT (-o OPTIONS), waits until it is ready.
mount_fuse() {
  mkdir -p "$1"
  "$bin/tessera-fuse" "$1" --allow-other ${3:+-o "$3"} > "$2" 2>&1 &
  fuse_pids+=($!)
  mounts+=("$1")
  for _ in $(seq 100); do grep -q READY "$2" && break; sleep 0.2; done
}
