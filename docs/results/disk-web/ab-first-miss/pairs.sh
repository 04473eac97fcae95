#!/bin/bash
# The loop that wrote pairs.log (run from the directory holding dwpoint.sh;
# /tmp/dbin-rd: a release build of 2a11680 with 680998e's change).
for i in 1 2 3 4 5; do a=$(./dwpoint.sh /tmp/dbin-2a11680 base-$i); b=$(./dwpoint.sh /tmp/dbin-rd rd-$i); echo "pair $i base: $a | rd: $b"; done
