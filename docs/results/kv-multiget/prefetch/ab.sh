#!/bin/bash
# Server CPU per multi-key get of random keys in a large store, duality
# builds against memcached, servers in turn: ab.sh OUT ROUNDS BINARY...
# (each BINARY a `duality`; memcached from PATH). Each run is a fresh
# server (`-t 1`, 1 GiB) that mget_random.py fills with NITEMS values of
# VSIZE bytes and then asks GETS times for NKEYS random keys (one get of
# them all, or one-key gets in a row, or binary GETKQs: STYLE).
# CFGS: "NITEMS VSIZE NKEYS GETS [STYLE]" (mget_random.py's arguments),
# ';' apart (default: the seven below). SUMMARY: where summary.py's table
# goes (default: summary.md beside OUT).
out=$1; shift; rounds=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
port=23196
IFS=';' read -r -a cfgs <<< "${CFGS:-1000000 64 16 40000;1000000 64 100 8000;1000000 64 16 40000 pipe;1000000 64 16 40000 bin;1000000 64 1 200000;30000 64 16 40000;30000 64 16 40000 pipe}"
: > "$out"
for r in $(seq 1 "$rounds"); do
  for b in "$@" memcached; do
    for cfg in "${cfgs[@]}"; do
      if [ "$b" = memcached ]; then memcached -u root -p $port -t 1 -m 1024 -U 0 & else "$b" kv -p $port -t 1 -m 1024 > /dev/null 2>&1 & fi
      pid=$!
      sleep 0.4
      echo "round $r $(basename "$b"): $(python3 "$here/mget_random.py" $port $pid $cfg 2>&1)" >> "$out"
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
python3 "$here/summary.py" "$out" > "${SUMMARY:-$(dirname "$out")/summary.md}"
