#!/bin/bash
# Server CPU per multi-key get, duality builds against memcached, servers in
# turn: ab.sh OUT ROUNDS BINARY... (each BINARY a `duality`; memcached from
# PATH). One client (mget.py): sets NKEYS values of VSIZE bytes, then sends
# `get` of all of them 8 per write, ROUNDS gets, and reads the server's
# utime+stime from /proc (10 ms ticks: the counts keep each run >= 0.25 s).
# SUMMARY: where summary.py's table goes (default: summary.md beside OUT).
out=$1; shift; rounds=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
port=23195
# CFGS: "NKEYS VSIZE GETS" triples, ';' apart (default: the five below).
IFS=';' read -r -a cfgs <<< "${CFGS:-100 4000 3000;100 1000 6000;10 1000 16000;100 32 8000;1 100000 20000}"
: > "$out"
for r in $(seq 1 "$rounds"); do
  for b in "$@" memcached; do
    for cfg in "${cfgs[@]}"; do
      if [ "$b" = memcached ]; then memcached -u root -p $port -t 1 -U 0 -I 2m & else "$b" kv -p $port -t 1 -I 2m > /dev/null 2>&1 & fi
      pid=$!
      sleep 0.4
      echo "round $r $(basename "$b"): $(python3 "$here/mget.py" $port $pid $cfg)" >> "$out"
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
python3 "$here/summary.py" "$out" > "${SUMMARY:-$(dirname "$out")/summary.md}"
