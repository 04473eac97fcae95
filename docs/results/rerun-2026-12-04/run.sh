#!/bin/bash
# Issue 16's re-measure on f331e55 (2026-12-04), one run at a time, nothing
# else running; each directory as the command wrote it.
B=/tmp/dbin-f331e55
O=/tmp/res67/rerun
mkdir -p "$O"
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run models bench models --clients 1,8,20,40,80,120,200 --rounds 3 --windows 3
run threads bench threads
run fairness bench fairness
run kv-handoff bench models --models amped,seda,seda-s,symped --handoff always,adaptive --clients 8,40,120 --rounds 3 --windows 3
run echo-one-in-flight bench models --service echo --handoff always,adaptive --clients 8,40,120 --windows 5 --seconds 1
run echo-pipelined-16 bench models --service echo --handoff always,adaptive --clients 8,40,120 --pipeline 16 --windows 5 --seconds 1
run colors-1 bench colors
run colors-2 bench colors
run offload bench offload --capacity 17000
run sweep bench models --sweep
run balance bench balance
run http bench http
run idle bench idle --servers duality,duality:symped:2@epoll,thread-per-conn,tokio,memcached
