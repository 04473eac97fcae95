#!/bin/bash
# Soak A/B, the web half alone, 30 s per run: which of 3f7a9e2's two
# runtime changes moves the good clients' requests? Taking turns, 2 rounds.
B=/tmp/dbin-7f010b9
O=/tmp/res57/soak-ab-http
mkdir -p $O
for r in 1 2; do
  for v in defaults spin30 coop old; do
    case $v in
      defaults) env=();;
      spin30) env=(DUALITY_IDLE_SPIN_US=30);;
      coop) env=(DUALITY_URING_COOP=1);;
      old) env=(DUALITY_URING_COOP=1 DUALITY_IDLE_SPIN_US=30);;
    esac
    echo "$(date -u +%T) start $v-$r"; env "${env[@]}" "$B" bench soak --services http --seconds 30 --out $O/$v-$r > $O/$v-$r.log 2>&1; echo "$(date -u +%T) end exit $?"
  done
done
echo "$(date -u +%T) all done"
