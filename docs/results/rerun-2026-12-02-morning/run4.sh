#!/bin/bash
# Soak A/B: does the runtime of 3f7a9e2 (deferred task work, 100 us io_uring
# spin) move the good clients' share under hostile load? Same build, its
# defaults vs DUALITY_URING_COOP=1 DUALITY_IDLE_SPIN_US=30 (5d4af8c's
# runtime behaviour), taking turns, 60 s per server.
cd /work/main
while pgrep -f "run3.sh" >/dev/null; do sleep 5; done
B=/tmp/dbin-7f010b9
O=/tmp/res57/soak-ab
mkdir -p $O
for r in 1 2; do
  echo "$(date -u +%T) start defaults-$r"; "$B" bench soak --seconds 60 --out $O/defaults-$r > $O/defaults-$r.log 2>&1; echo "$(date -u +%T) end exit $?"
  echo "$(date -u +%T) start old-$r"; DUALITY_URING_COOP=1 DUALITY_IDLE_SPIN_US=30 "$B" bench soak --seconds 60 --out $O/old-$r > $O/old-$r.log 2>&1; echo "$(date -u +%T) end exit $?"
done
echo "$(date -u +%T) all done"
