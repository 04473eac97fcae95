#!/bin/bash
# Issue 16's re-measure, the directories still on 7f010b9/5099ebb/d6e7ee1
# builds, on 206783e (f331e55's runtime and servers; 9a7721e and 206783e add
# a builder option, tests, CI and the metadump piece size), one run at a
# time, nothing else running; each directory as the command or script wrote it.
cd /work/main
B=/tmp/dbin-206783e
O=/tmp/res68/rerun
mkdir -p "$O"
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run store bench store
run tasks bench tasks
run disk bench disk --dir /work --rounds 3 --seconds 2
run disk-web bench disk --web --dir /work/webdisk
run kv-io-ab bench models --models sped,symped:1,symped:2 --io epoll,uring --clients 8,40,120 --tcp --rounds 3 --windows 3
run kv-rounds-pipeline16 bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --rounds 3 --windows 3 --pipeline 16
run kv-syscalls bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --windows 3 --syscalls
run kv-rounds-tcp bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --windows 7
echo "$(date -u +%T) start memaslap"; scripts/memaslap-crosscheck.sh "$B" "$O/memaslap-5r" 5 4 > "$O/memaslap.log" 2>&1; echo "$(date -u +%T) end memaslap exit $?"
run io-http bench http --io epoll,uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
run http-large-both bench http --io epoll,uring --sizes 262144,1048576 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start wrk"; scripts/wrk-crosscheck.sh "$B" "$O/wrk" > "$O/wrk.log" 2>&1; echo "$(date -u +%T) end wrk exit $?"
run soak bench soak --seconds 300
echo "$(date -u +%T) all done"
