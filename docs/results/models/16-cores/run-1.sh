#!/bin/bash
# The 16-core run (lent machine), from the repo root: results tarred into
# $OUT/res.tgz after each step, so a cut-off run still returns what it did.
# Q=1: a quick local rehearsal of the same steps.
set -u
D=$PWD/.dev
export LD_LIBRARY_PATH=$D/lib FONTCONFIG_FILE=$D/fonts.conf
[ -x /usr/local/bin/memcached ] || cp $D/bin/memcached /usr/local/bin/memcached
R=${R:-/root/out}; rm -rf $R; mkdir -p $R
ulimit -n 65536 2>/dev/null
{ nproc; uname -r; grep -m1 'model name' /proc/cpuinfo; cat /proc/sys/kernel/io_uring_disabled; free -g | head -2; ulimit -n; /usr/local/bin/memcached -V; } > $R/machine.txt 2>&1
T0=$(date +%s)
pack() { echo "$1 rc=$2 at $(( $(date +%s)-T0 )) s" | tee -a $R/times.txt; tar czf $OUT/res.tgz -C $R . ; }
if [ "${Q:-0}" = 1 ]; then K="--quick"; E="--seconds 0.2 --windows 1"; C="--quick"; else K="--rounds 3 --windows 2"; E="--windows 3"; C="--rounds 2"; fi
CT=6
timeout 240 $D/duality bench models --models symped:8,amped:8,seda:2:8,seda-s:4 --clients 8,40,120 --client-threads $CT $K --out $R/kv > $R/kv.log 2>&1; pack kv $?
timeout 110 $D/duality bench models --service echo --no-peers --clients 8,40,120 --client-threads $CT $E --models sped,symped:8,amped:8,seda:2:8,seda-s:4 --out $R/echo-1 > $R/echo-1.log 2>&1; pack echo-1 $?
timeout 110 $D/duality bench models --service echo --no-peers --clients 8,40,120 --client-threads $CT --pipeline 16 $E --models sped,symped:8,amped:8,seda:2:8,seda-s:4 --out $R/echo-16 > $R/echo-16.log 2>&1; pack echo-16 $?
timeout 125 $D/duality bench colors --setups amped,symped,n-copy,tokio --threads 1,4,8,12 --client-loops 4 --clients 64 $C --out $R/colors > $R/colors.log 2>&1; pack colors $?
