#!/bin/bash
# Issue 42: pjdfstest, whole, on a default mount of a fresh `tessera up` (4 data servers, device model none), as
# root. pjdfstest built from github.com/pjd/pjdfstest (fetched; `autoreconf -ifs && ./configure && make pjdfstest`
# in /tmp/pjd-src). Run under `flock /tmp/bench.lock`. usage: pjdfstest.sh [BIN] [OUT] [MOUNT-OPTIONS]
# pjdfstest, whole, on a mount of a fresh `tessera up` (default mount options, as root).
BIN=${1:-/tmp/new-bin}; OUT=${2:-/tmp/pjd-out.txt}; OPTS=${3:-}
D=/tmp/pjd-cluster; M=/tmp/pjd-mnt
fusermount3 -u $M 2>/dev/null; pkill -f "tessera up --dir $D"; sleep 1
rm -rf $D; mkdir -p $M
(PATH=$BIN:$PATH setsid $BIN/tessera up --dir $D --port-base 0 > $D.out 2>&1 &) 2>/dev/null
for i in $(seq 150); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
$BIN/tessera --config $D/client.toml mount $M --daemon $OPTS > /dev/null 2>&1
mkdir -p $M/t && cd $M/t
( time prove -r /tmp/pjd-src/tests ) > $OUT 2>&1
cd /; fusermount3 -u $M 2>/dev/null || umount -l $M; pkill -f "tessera up --dir $D"
