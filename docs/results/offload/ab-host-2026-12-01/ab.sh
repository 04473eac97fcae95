#!/bin/bash
O=/tmp/res50/ab-offload; mkdir -p $O
for r in 1 2; do
  for b in 362 c294; do
    echo "== $b round $r start $(date -u +%H:%M:%S)" >> $O/log
    /tmp/dbin-$b bench offload --capacity 17000 --out $O/$b-r$r > $O/$b-r$r.stdout 2> $O/$b-r$r.stderr
    echo "== $b round $r exit $?" >> $O/log
  done
done
echo "== done $(date -u +%H:%M:%S)" >> $O/log
