#!/bin/bash
# Same-session comparison of the binaries before (HEAD sources, built in /tmp/ia/old-target) and after the changes.
# Usage: compare.sh TAG   (writes runs/TAG-*.txt and the experiments' json/csv under runs/TAG-*/)
OLD=/tmp/ia/old-target/release/tessera-bench
NEW=/work/main/target/release/tessera-bench
R=/work/notes/iorch-analysis/runs
T=$1
cd /tmp/ia
$OLD experiment iorch-distance --quick --runs 2 --out $R/$T-dist-old > $R/$T-dist-old.txt 2>&1
$NEW experiment iorch-distance --quick --runs 2 --disk-gb 0 --out $R/$T-dist-new500 > $R/$T-dist-new500.txt 2>&1
$NEW experiment iorch-distance --quick --runs 2 --out $R/$T-dist-new150 > $R/$T-dist-new150.txt 2>&1
$OLD experiment iorch-heterogeneous --quick --runs 3 --out $R/$T-het-old > $R/$T-het-old.txt 2>&1
$NEW experiment iorch-heterogeneous --quick --runs 3 --out $R/$T-het-new > $R/$T-het-new.txt 2>&1
echo done > $R/$T.done
