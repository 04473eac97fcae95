#!/bin/bash
# Issue 16's re-measure of the directories still on older builds, on 7f010b9
# (aabb4d3's runtime; the tests-only commit on top), one run at a time,
# nothing else running; each directory as the command or script wrote it.
cd /work/main
B=/tmp/dbin-7f010b9
O=/tmp/res57
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run tasks bench tasks
echo "$(date -u +%T) start memaslap"; scripts/memaslap-crosscheck.sh "$B" "$O/memaslap-5r" 5 4 > "$O/memaslap.log" 2>&1; echo "$(date -u +%T) end memaslap exit $?"
run kv-rounds-tcp bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --windows 7
run http-large-both bench http --io epoll,uring --sizes 262144,1048576 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start wrk"; scripts/wrk-crosscheck.sh "$B" "$O/wrk" > "$O/wrk.log" 2>&1; echo "$(date -u +%T) end wrk exit $?"
run disk-web bench disk --web --dir /work/webdisk
run store bench store
run soak bench soak --seconds 300
echo "$(date -u +%T) all done"
