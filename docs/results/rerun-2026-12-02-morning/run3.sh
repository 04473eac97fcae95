#!/bin/bash
cd /work/main
while pgrep -f "run2.sh" >/dev/null; do sleep 5; done
B=/tmp/dbin-7f010b9
O=/tmp/res57
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run io-http bench http --io epoll,uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start sf-ab"; /tmp/p57/sf-ab.sh "$B" 3 100 16k.bin > /tmp/p57/sf-ab-16k-100.txt 2>&1; echo "$(date -u +%T) end sf-ab"
echo "$(date -u +%T) all done"
