#!/bin/bash
# offload, fairness, the web server vs nginx and the pipelined cache over TCP on today's build, one after another
B=/tmp/dbin-c940453
run() { name=$1; shift; echo "$(date -u +%T) start $name: $*"; $B "$@" --out /tmp/res82/rerun2/$name > /tmp/res82/rerun2/$name.log 2>&1; echo "$(date -u +%T) end $name rc=$?"; }
mkdir -p /tmp/res82/rerun2
run offload bench offload --capacity 17000
run fairness bench fairness
run io-http bench http --io epoll,uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
run kv-rounds-pipeline16 bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --rounds 3 --windows 3 --pipeline 16
