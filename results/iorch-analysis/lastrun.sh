#!/bin/bash
# The MDS log since its last start (window numbering restarts): $1 = mds.log, $2 = out
N=$(sed 's/\x1b\[[0-9;]*m//g' $1 | grep -n "plan window=1 " | tail -1 | cut -d: -f1)
tail -n +$N $1 > $2
