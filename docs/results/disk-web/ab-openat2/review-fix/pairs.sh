#!/bin/bash
# The loops that wrote pairs.log and rounds.log (/tmp/dbin-fm: 680998e,
# /tmp/dbin-ow: 16e7b94, /tmp/dbin-4a608ba: 4a608ba; dwpoint.sh as in ..).
for i in 1 2 3 4 5 6; do a=$(./dwpoint.sh /tmp/dbin-fm fmb-$i); b=$(./dwpoint.sh /tmp/dbin-4a608ba rf-$i); echo "pair $i 680998e: $a | 4a608ba: $b"; done
for i in 1 2 3 4 5 6; do a=$(./dwpoint.sh /tmp/dbin-ow owb-$i); b=$(./dwpoint.sh /tmp/dbin-4a608ba rfb-$i); c=$(./dwpoint.sh /tmp/dbin-fm fmc-$i); echo "round $i 16e7b94: $a | 4a608ba: $b | 680998e: $c"; done
