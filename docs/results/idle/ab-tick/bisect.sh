#!/bin/bash
cd /tmp/wt-idle || exit 125
c=$(git rev-parse --short HEAD)
CARGO_TARGET_DIR=/tmp/wt-idle/target cargo build --release -q -p duality >/tmp/res51/idle-ab/build-$c.log 2>&1 || exit 125
cp target/release/duality /tmp/dbin-bisi || exit 125
m() { /tmp/dbin-bisi bench idle --runtimes '' --servers duality --idle 0,19000 --rounds 1 --out /tmp/res51/idle-ab/bis-$c-$1 > /dev/null 2>&1; grep -E '^\| 19,000 ' /tmp/res51/idle-ab/bis-$c-$1/idle.md | cut -d'|' -f11 | tr -d ' ,'; }
a=$(m 1)
[ -n "$a" ] || exit 125
if [ "$a" -le 601 ]; then echo "$c good $a" >> /tmp/res51/bisect-idle.log; exit 0; fi
if [ "$a" -ge 606 ]; then echo "$c bad $a" >> /tmp/res51/bisect-idle.log; exit 1; fi
b=$(m 2)
if [ $((a + b)) -ge 1208 ]; then echo "$c bad? $a $b" >> /tmp/res51/bisect-idle.log; exit 1; fi
echo "$c good? $a $b" >> /tmp/res51/bisect-idle.log; exit 0
