#!/bin/bash
# Issue 42, items 3 and 4: what df, du and lseek say through the mount, and POSIX ACLs through two mounts.
# A fresh `tessera up` (4 data servers, device model none: this VM's disk, every store on the same file system)
# from BIN (default target/release), two mounts of it (two client nodes), then:
#  1. df: the mount's `df -B1` against `tessera df` and the disk's own `df -B1` of the stores' file system;
#  2. du: a sparse file (3 bytes at 100 GiB) and a dense one (64 MiB), written through mount a, read through b:
#     `du -B1 --apparent-size`, `du -B1`, against the bytes their objects take on the data servers (st_blocks x 512
#     of every object file, from the stores' directories), after the MDS measured them (a second after close);
#  3. SEEK_DATA/SEEK_HOLE on the sparse file through b (python3's os.lseek), and `cp --sparse=auto` of it to the
#     local disk (what the copy takes);
#  4. ACLs: setfacl through a, getfacl and access by uid 1001 through b.
# usage: space.sh OUTDIR [BIN]
set -euo pipefail
OUT=$1; bin=$(cd "${2:-target/release}" && pwd)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d /tmp/issue42-space.XXXXXX); chmod 0755 "$work"   # other users (setpriv) walk to the mounts
. "$(dirname "$0")/../../bench/scripts/cluster.sh"
start_cluster 4
D=$work/cluster; A=$work/a; B=$work/b
mount_fuse $A $work/fuse-a.log; need_ready "mount a" $work/fuse-a.log
mount_fuse $B $work/fuse-b.log; need_ready "mount b" $work/fuse-b.log
objects_bytes() { find $D/ds*/objects -type f -regextype egrep -regex '.*/[0-9a-f]{16}' -printf '%b\n' 2>/dev/null | awk '{s+=$1*512} END {print s+0}'; }
{
  echo "# 1. df (bytes): the mount, tessera df, the stores' own file system"
  df -B1 --output=source,size,used,avail $A | sed 's/^/mount:  /'
  $bin/tessera df | sed 's/^/tessera df:  /'
  df -B1 --output=source,size,used,avail $D | sed 's/^/disk:   /'

  echo; echo "# 2. du of a sparse and a dense file (bytes), through the other mount, against the data servers"
  before=$(objects_bytes)
  python3 -c "import os; f=os.open('$A/sparse', os.O_WRONLY|os.O_CREAT, 0o644); os.pwrite(f, b'abc', 100<<30); os.close(f)"
  sparse_held=$(( $(objects_bytes) - before ))
  dd if=/dev/urandom of=$A/dense bs=1M count=64 status=none
  dense_held=$(( $(objects_bytes) - before - sparse_held ))
  sleep 2
  for f in sparse dense; do
    held=${f}_held
    echo "$f: apparent $(du -B1 --apparent-size $B/$f | cut -f1)  du $(du -B1 $B/$f | cut -f1)  objects on the data servers ${!held}  (st_blocks $(stat -c %b $B/$f))"
  done

  echo; echo "# 3. SEEK_DATA / SEEK_HOLE on the sparse file through the other mount, and cp --sparse=auto of it"
  python3 - "$B/sparse" <<'EOF'
import os, sys, errno
fd = os.open(sys.argv[1], os.O_RDONLY)
for what, off, how in [("SEEK_HOLE", 0, os.SEEK_HOLE), ("SEEK_DATA", 0, os.SEEK_DATA), ("SEEK_HOLE", 100 << 30, os.SEEK_HOLE)]:
    print(f"{what} from {off}: {os.lseek(fd, off, how)}")
try:
    os.lseek(fd, (100 << 30) + 3, os.SEEK_DATA)
except OSError as e:
    print(f"SEEK_DATA from the end: {errno.errorcode[e.errno]}")
EOF
  rm -f /var/tmp/issue42-sparse-copy
  /usr/bin/time -f "cp --sparse=auto: %e s" cp --sparse=auto $B/sparse /var/tmp/issue42-sparse-copy 2>&1
  echo "the copy: $(stat -c '%s bytes, %b blocks of 512' /var/tmp/issue42-sparse-copy), tail: $(tail -c 3 /var/tmp/issue42-sparse-copy)"
  rm -f /var/tmp/issue42-sparse-copy

  echo; echo "# 4. ACLs: setfacl through a, getfacl and uid 1001 through b"
  mkdir -m 0750 $A/proj && echo data > $A/proj/f && chmod 0640 $A/proj/f && chown -R 1000:1000 $A/proj
  echo -n "1001 reads before: "; setpriv --reuid=1001 --regid=1001 --clear-groups cat $B/proj/f 2>&1 || true
  setfacl -m u:1001:rx $A/proj && setfacl -m u:1001:r $A/proj/f && setfacl -d -m u:1001:rwx $A/proj
  sleep 1.2
  echo -n "1001 reads after setfacl: "; setpriv --reuid=1001 --regid=1001 --clear-groups cat $B/proj/f
  getfacl -n -p $B/proj/f
  setpriv --reuid=1000 --regid=1000 --clear-groups sh -c "umask 077; echo x > $B/proj/new"
  echo "a file made with umask 077 under the default ACL: $(stat -c %A $A/proj/new)"; getfacl -n -p --omit-header $A/proj/new
} 2>&1 | tee $OUT/space.txt
