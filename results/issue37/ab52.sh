#!/bin/bash
# A/B for issue 37 (stop 52): base (61f2955, before replication, 1 MDS, /tmp/bin-base), this build with 1 MDS,
# this build with 3 replicas (/tmp/bin-52: this stop's target/release binaries). The same runs as ab37.sh.
# usage: ab52.sh OUT REPS
NEW=/tmp/bin-52 exec "$(dirname "$0")/ab37.sh" "$@"
