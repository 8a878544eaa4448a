#!/bin/bash
# Full protocol of results/README.md (3 runs x 5 s, 256 MiB files), old vs new heterogeneous, new distance.
OLD=/tmp/ia/old-target/release/tessera-bench
NEW=/work/main/target/release/tessera-bench
R=/work/notes/iorch-analysis/runs
cd /tmp/ia
$OLD experiment iorch-heterogeneous --runs 3 --seconds 5 --file-size 256m --out $R/full-het-old > $R/full-het-old.txt 2>&1
$NEW experiment iorch-heterogeneous --runs 3 --seconds 5 --file-size 256m --out $R/full-het-new > $R/full-het-new.txt 2>&1
$NEW experiment iorch-distance --runs 3 --seconds 5 --file-size 256m --out $R/full-dist-new150 > $R/full-dist-new150.txt 2>&1
echo done > $R/full.done
