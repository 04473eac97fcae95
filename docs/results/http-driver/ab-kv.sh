#!/bin/bash
out=$1; shift; rounds=$1; shift
mkdir -p $out
for r in $(seq 1 $rounds); do for b in "$@"; do
  n=$(basename $b)
  $b bench models --models symped:2 --clients 40,120 --tcp --rounds 1 --windows 3 --no-peers --out $out/$n-$r > /dev/null 2>&1
  echo "$n r$r: $(grep -E '^\| duality' $out/$n-$r/table.md | awk -F'|' '{printf "%s c=%s tps=%s cpu=%s; ", $2, $3, $4, $8}')"
done; done
