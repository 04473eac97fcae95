#!/bin/bash
# pair.sh COMMIT: builds COMMIT^ and COMMIT, then 4 disk-web trials of each at 16 clients, taking turns.
c=$1
cd /tmp/wt-292
for x in $c^ $c; do
  git checkout -q $x || exit 1
  CARGO_TARGET_DIR=/tmp/wt-292/target cargo build --release -q -p duality > /dev/null 2>&1 || exit 1
  if [ "$x" = "$c" ]; then cp target/release/duality /tmp/dbin-after; else cp target/release/duality /tmp/dbin-before; fi
done
cd /tmp
for i in 1 2 3 4; do
  if [ $((i % 2)) = 1 ]; then o="before after"; else o="after before"; fi
  for b in $o; do echo "$c $b $i $(/tmp/res51/dwpoint.sh /tmp/dbin-$b p-$c-$b-$i)" >> /tmp/res51/pair.log; done
done
