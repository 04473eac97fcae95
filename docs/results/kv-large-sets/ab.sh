#!/bin/bash
# Server CPU per large set, duality builds (each with --io uring and --io
# epoll) against memcached, servers in turn: ab.sh OUT ROUNDS BINARY...
# (each BINARY a `duality`; memcached from PATH). One client (sets.py).
# CFGS: "NKEYS VSIZE SETS" triples, ';' apart (default: the three below).
# SUMMARY: where the medians go (default: summary.md beside OUT).
out=$1; shift; rounds=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
port=23197
IFS=';' read -r -a cfgs <<< "${CFGS:-2000 70000 16000;2000 100000 16000;400 1000000 1600}"
: > "$out"
for r in $(seq 1 "$rounds"); do
  for b in "$@" memcached; do
    ios="uring epoll"; [ "$b" = memcached ] && ios=-
    for io in $ios; do
      for cfg in "${cfgs[@]}"; do
        if [ "$b" = memcached ]; then
          memcached -u root -p $port -t 1 -U 0 -I 2m -m 1024 & who=memcached
        else
          "$b" kv -p $port -t 1 -I 2m -m 1024 --io $io > /dev/null 2>&1 & who=$(basename "$b")/$io
        fi
        pid=$!
        sleep 0.4
        echo "round $r $who: $(python3 "$here/sets.py" $port $pid $cfg)" >> "$out"
        kill $pid; wait $pid 2>/dev/null
      done
    done
  done
done
python3 "$here/../kv-multiget/summary.py" "$out" set > "${SUMMARY:-$(dirname "$out")/summary.md}"
