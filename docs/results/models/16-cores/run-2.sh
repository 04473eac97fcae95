#!/bin/bash
# Second 16-core run: results tarred into $OUT/res.tgz after each step.
set -u
D=$PWD/.dev
export LD_LIBRARY_PATH=$D/lib FONTCONFIG_FILE=$D/fonts.conf
[ -x /usr/local/bin/memcached ] || cp $D/bin/memcached /usr/local/bin/memcached
R=${R:-/root/res}; rm -rf $R; mkdir -p $R
ulimit -n 65536 2>/dev/null
{ nproc; uname -r; grep -m1 'model name' /proc/cpuinfo; free -g | head -2; } > $R/machine.txt 2>&1
T0=$(date +%s)
pack() { echo "$1 rc=$2 at $(( $(date +%s)-T0 )) s" | tee -a $R/times.txt; tar czf $OUT/res.tgz -C $R . ; }
Q=${Q:-0}
if [ $Q = 1 ]; then W="--quick"; EW="--seconds 0.2 --windows 1"; else W="--windows 2"; EW="--windows 2"; fi
CT=6
timeout 90 $D/duality bench threads --max-threads 10 --clients 120 --client-threads $CT $W --out $R/threads > $R/threads.log 2>&1; pack threads $?
timeout 95 $D/duality bench models --models symped:8,amped:8,seda:2:8,seda-s:4 --handoff adaptive --no-peers --clients 8,40,120 --client-threads $CT --rounds 2 $W --out $R/kv-adaptive > $R/kv-adaptive.log 2>&1; pack kv-adaptive $?
for s in 20 200 20 200; do
  DUALITY_PAYLOAD_SPIN_US=$s timeout 32 $D/duality bench models --service echo --no-peers --models symped:8,amped:8,seda-s:4 --clients 8,40,120 --client-threads $CT $EW --out $R/spin-$s-$(( $(date +%s)-T0 )) > $R/spin-$s.log 2>&1; pack spin-$s $?
done
timeout 60 $D/duality bench models --service echo --no-peers --handoff adaptive --models symped:8,amped:8,seda:2:8,seda-s:4 --clients 8,40,120 --client-threads $CT $EW --out $R/echo-adaptive > $R/echo-adaptive.log 2>&1; pack echo-adaptive $?
LEFT=$(( 345 - ($(date +%s)-T0) ))
[ $LEFT -gt 20 ] && { timeout $LEFT $D/duality bench models --sweep --sweep-max 8 --client-threads $CT $W --out $R/sweep > $R/sweep.log 2>&1; pack sweep $?; }
