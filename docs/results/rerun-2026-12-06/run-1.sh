#!/bin/bash
# echo (one in flight, pipelined 16) and colors x2 on today's build, one after another
B=/tmp/dbin-82
run() { name=$1; shift; echo "$(date -u +%T) start $name"; $B "$@" --out /tmp/res82/rerun/$name > /tmp/res82/rerun/$name.log 2>&1; echo "$(date -u +%T) end $name rc=$?"; }
mkdir -p /tmp/res82/rerun
run echo-one-in-flight bench models --service echo --handoff always,adaptive --clients 8,40,120 --windows 5 --seconds 1
run echo-pipelined-16 bench models --service echo --handoff always,adaptive --clients 8,40,120 --pipeline 16 --windows 5 --seconds 1
run colors-1 bench colors
run colors-2 bench colors
