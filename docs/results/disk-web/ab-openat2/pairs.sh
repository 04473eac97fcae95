#!/bin/bash
# The loop that wrote pairs.log (run twice: i in 1..5, then 6..10, appending;
# /tmp/dbin-fm: release build of 680998e; /tmp/dbin-ow: of 16e7b94's code).
for i in 1 2 3 4 5; do a=$(./dwpoint.sh /tmp/dbin-fm fm-$i); b=$(./dwpoint.sh /tmp/dbin-ow ow-$i); echo "pair $i 680998e: $a | openat2: $b"; done
