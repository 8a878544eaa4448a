#!/bin/sh
# mdtest A/B: A = main 71a75ff, B = jobreport; order alternates per round.
for r in 1 2 3 4 5 6 7 8; do
  if [ $((r % 2)) = 1 ]; then order="a b"; else order="b a"; fi
  for c in $order; do
    if [ $c = a ]; then B=/work/bin-71a75ff; else B=/work/target-jobreport/release; fi
    out=$($B/tessera-bench mdtest -n 4000 -N 2 -d /md$r --config /tmp/jr-md/$c/client.toml 2>&1)
    cr=$(echo "$out" | grep "^File creation" | awk '{print $3}'); st=$(echo "$out" | grep "^File stat" | awk '{print $3}')
    rm_=$(echo "$out" | grep "^File removal" | awk '{print $3}')
    echo "$r $c $cr $st $rm_"
  done
done
