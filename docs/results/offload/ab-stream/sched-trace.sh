#!/bin/bash
# Usage: trace.sh BIN WORKDIR. BIN is run as a file named new2 here: the load
# generator's threads carry the binary's name, which the counts below match.
# perf sched over 6 s of the adaptive row and 6 s of the no-heavy row of one bench offload run
bin=$1; w=$2; mkdir -p $w
echo "## $(date -u +%FT%TZ) $bin"
"$bin" bench offload --capacity 17000 --no-nginx --loads 50 --seconds 8 --out "$w/off" > "$w/off.log" 2>&1 &
bp=$!
until grep -q "^50% .*duality pool:" "$w/off.log"; do sleep 0.05; done
sleep 1.5
perf sched record -a -o "$w/ada.data" -- sleep 6 > /dev/null 2>&1
until grep -q "^50% .*duality adaptive:" "$w/off.log"; do sleep 0.05; done
sleep 1.5
perf sched record -a -o "$w/nh.data" -- sleep 6 > /dev/null 2>&1
wait $bp
grep -E "^50% " "$w/off.log"
for k in ada nh; do
  perf sched timehist -i "$w/$k.data" 2>/dev/null > "$w/th-$k.txt"
  echo "== $k"
  for cls in http-net new2; do
    awk -v cls=$cls 'NR>3 && index($3,cls)==1 {n++; d=$5; if (d>0.05) a++; if (d>0.1) b++; if (d>0.2) c++; if (d>0.5) e++} END {printf "%s runs %d; sched delay >0.05 ms %d, >0.1 %d, >0.2 %d, >0.5 %d\n", cls, n, a, b, c, e}' "$w/th-$k.txt"
  done
  echo "ran before an http-net or client thread that waited > 0.1 ms:"
  awk 'NR>3 {cpu=$2; if ((index($3,"http-net")==1 || index($3,"new2")==1) && $5>0.1) print prev[cpu]; name=$3; sub(/\[.*/,"",name); prev[cpu]=name}' "$w/th-$k.txt" | sort | uniq -c | sort -rn | head -8
done
