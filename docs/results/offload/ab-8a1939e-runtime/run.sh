#!/bin/bash
# Offload on 8a1939e with its defaults (rings defer completion work, io_uring
# loops spin 100 us) vs the same build set back to 5d4af8c's runtime
# behaviour (DUALITY_URING_COOP=1: cooperative task work; DUALITY_IDLE_SPIN_US=30),
# taking turns, two runs each: did the night's changes or the host move the
# cheap requests' p99?
B=${B:-/tmp/dbin-8a1939e}
O=${O:-$(cd "$(dirname "$0")" && pwd)}
for r in 1 2; do
  DUALITY_URING_COOP=1 DUALITY_IDLE_SPIN_US=30 "$B" bench offload --capacity 17000 --out "$O/old-$r" > "$O/old-$r.log" 2>&1
  "$B" bench offload --capacity 17000 --out "$O/new-$r" > "$O/new-$r.log" 2>&1
done
python3 "$O/summarize.py" "$O" > "$O/summary.md"
