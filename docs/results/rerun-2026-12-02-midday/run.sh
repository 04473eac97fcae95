#!/bin/bash
# The web server's figures on 5be780b (a hot file of 16 KiB or more sent
# with sendfile from a kept descriptor): one run at a time, nothing else
# running. Outputs copied unchanged into docs/results/.
cd /work/main
B=/tmp/dbin-5be780b
O=/tmp/res58
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run io-http bench http --io epoll,uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start wrk"; scripts/wrk-crosscheck.sh "$B" "$O/wrk" > "$O/wrk.log" 2>&1; echo "$(date -u +%T) end wrk exit $?"
run disk-web bench disk --web --dir /work/webdisk
run http-large-both bench http --io epoll,uring --sizes 262144,1048576 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) all done"
