#!/bin/bash
# Where event loops wait: `perf sched` over 6 s of the adaptive row of
# `bench offload --capacity 17000 --no-nginx --loads 50 --seconds 8`, for
# two builds taking turns (OLD NEW: duality binaries), twice each. Prints
# the rows of each run, the loops' scheduling delays, and for each delay
# over 0.5 ms the task that ran on that CPU just before the loop did.
# Usage: sched-trace.sh OLD NEW WORKDIR
old=$1; new=$2; w=$3
mkdir -p "$w"
for r in 1 2; do
  for b in old new; do
    bin=$old; [ $b = new ] && bin=$new
    tag=$b-$r
    "$bin" bench offload --capacity 17000 --no-nginx --loads 50 --seconds 8 --out "$w/off-$tag" > "$w/off-$tag.log" 2>&1 &
    bp=$!
    until grep -q "^50% .*duality pool:" "$w/off-$tag.log"; do sleep 0.05; done
    sleep 1.5
    perf sched record -a -o "$w/sched-$tag.data" -- sleep 6 > /dev/null 2>&1
    wait $bp
    echo "== $tag ($bin)"
    grep -E "^50% .*duality (pool|adaptive):" "$w/off-$tag.log"
    perf sched timehist -i "$w/sched-$tag.data" 2>/dev/null > "$w/th-$tag.txt"
    awk 'NR>3 && $3 ~ /^http-net/ {n++; if ($5>0.5) b++; if ($5>1) c++} END {printf "loop runs %d; scheduling delay > 0.5 ms: %d, > 1 ms: %d\n", n, b, c}' "$w/th-$tag.txt"
    echo "ran before a loop that waited > 0.5 ms (count, task; the load generator's threads carry the binary's name):"
    awk 'NR>3 {cpu=$2; if ($3 ~ /^http-net/ && $5>0.5) print prev[cpu]; name=$3; sub(/\[.*/,"",name); prev[cpu]=name}' "$w/th-$tag.txt" | sort | uniq -c | sort -rn | head -6
    rm -f "$w/sched-$tag.data" "$w/th-$tag.txt"
  done
done
