#!/bin/bash
# The web server's figures on 7c041d2 (--sendfile-kept 32 KiB by default;
# a body of up to 64 KiB sent in one call with its head): one run at a
# time, nothing else running. Outputs copied unchanged into docs/results/.
cd /work/main
B=/tmp/dbin-7c041d2
O=/tmp/res58/7c041d2
mkdir -p $O
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run io-http bench http --io epoll,uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start wrk"; scripts/wrk-crosscheck.sh "$B" "$O/wrk" > "$O/wrk.log" 2>&1; echo "$(date -u +%T) end wrk exit $?"
run http-large-both bench http --io epoll,uring --sizes 262144,1048576 --clients 100,1000 --servers duality-knot-c,nginx-1w,nginx-2w
echo "$(date -u +%T) start sizes"; scripts/http-sizes.sh "$B" "$O/http-sizes" 3 100 1000 > "$O/http-sizes.log" 2>&1; echo "$(date -u +%T) end sizes exit $?"
echo "$(date -u +%T) all done"
