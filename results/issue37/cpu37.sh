#!/bin/bash
# CPU seconds of each process and UDP datagrams sent during one `tessera-bench mdtest -n N -N TASKS` run (create,
# stat, read, remove) against `tessera up` with M metadata replicas and 2 data servers.
# usage: cpu37.sh BIN M [N]   (TASKS from the environment, default 4)
B=$1; M=$2; N=${3:-8000}; D=/tmp/cpu37-$M
rm -rf $D; (PATH=$B:$PATH setsid $B/tessera up --dir $D $([ $M = 1 ] || echo --mds $M) --ds 2 --port-base 0 > $D.out 2>&1 &) 2>/dev/null
for i in $(seq 100); do grep -q "TESSERA UP" $D.out 2>/dev/null && break; sleep 0.2; done
sleep 2
tick=$(getconf CLK_TCK)
pids=$(pgrep -f "$D/" | tr '\n' ' ')
cpu() { for p in $pids; do echo "$p $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null) $(tr '\0' ' ' </proc/$p/cmdline | awk "{print \$1, \$2, \$3, \$4, \$5, \$6}" | cut -c1-60 | tr " " "_")"; done; }
cpu > $D.cpu0; u0=$(awk "/^Udp:/ {n++} /^Udp:/ && n==2 {print \$5}" /proc/net/snmp)
export TESSERA_CONFIG=$D/client.toml
/usr/bin/time -f "bench %U %S %e" $B/tessera-bench mdtest -n $N -N ${TASKS:-4} -d /md --json $D.md.json > /dev/null 2> $D.time
cpu > $D.cpu1; u1=$(awk "/^Udp:/ {n++} /^Udp:/ && n==2 {print \$5}" /proc/net/snmp); echo "udp datagrams sent: $((u1-u0))"
join <(sort $D.cpu0) <(sort $D.cpu1) | awk -v t=$tick '{printf "%-8s %6.2f s  %s %s %s %s\n", $1, ($4-$2)/t, $3, "", "", ""}' | sort -k4
tail -1 $D.time
jq -c '{c: .create_ops_s, s: .stat_ops_s, r: .remove_ops_s}' $D.md.json 2>/dev/null | head -c 400; echo
pkill -f "tessera up --dir $D"; sleep 2
