#!/bin/bash
# After run.sh: the cache over TCP with servers taking turns (issue 11's
# figures), one at a time, nothing else running.
cd /work/main
while kill -0 9255 2>/dev/null; do sleep 5; done
B=/tmp/dbin-7f010b9
O=/tmp/res57
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run kv-io-ab bench models --models sped,symped:1,symped:2 --io epoll,uring --clients 8,40,120 --tcp --rounds 3 --windows 3
run kv-rounds-pipeline16 bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --rounds 3 --windows 3 --pipeline 16
run kv-syscalls bench models --models symped:1,symped:2 --io epoll,uring --clients 40,120 --tcp --windows 3 --syscalls
echo "$(date -u +%T) all done"
