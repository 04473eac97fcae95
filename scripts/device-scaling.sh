#!/usr/bin/env bash
# The scaling checks two cores cannot answer, sized for one call of the
# `device` tool (a 16-core machine, 10 minutes a command):
#   kv      — the cache: symped against the hand-off models, memcached and
#             tokio at 8, 40, 120 clients (issues 10, 11)
#   echo    — the echo service: the hand-off models against symped and sped
#             (issue 10)
#   threads — symped:N against memcached -t N (seed 001)
#   colors  — hand-off models and symped against the N-copy bound (issue 16)
#   sweep   — the hand-off models over their thread counts (seed 001 Fig. 2-5)
#   offload — cheap p99 beside 1% gzip with cores to spare (issue 12),
#             symped with half the cores against nginx with as many workers
#   http    — the web server (symped, half the cores, epoll and io_uring)
#             against nginx with as many workers, 1 and 16 KiB (issue 11)
#   kvtcp   — the cache over TCP on both backends, symped:1 and symped:2
#             against memcached (-t 1 the yardstick) with the client on
#             cores of its own, one in flight and 16 pipelined (issue 11)
#   affinity — the kv step's models unpinned and pinned (--cpu-affinity
#             off,auto) at 40 and 120 clients, and colors unpinned (the
#             colors step pins, the bench's default): does pinning pay
#             where the load generator has cores of its own?
#
# Usage, from the repository root:
#   scripts/device-scaling.sh BINARY OUTDIR [quick|check]
# BINARY is a release build of `duality` (carry a stripped copy: the
# working tree and carried paths travel within 64 MiB together;
# scripts/device-pack.sh packs one into .dev/ with the libraries, fonts and
# memcached that machine lacks; this script uses them when .dev/lib sits
# beside BINARY: `scripts/device-scaling.sh .dev/duality $OUT`). Every
# experiment writes its whole directory under one work directory, which is
# packed after each step into OUTDIR/results.tgz (one file: the tool brings
# back 8), with a log beside it: a call cut short still returns the steps
# it finished.
# What travels with a call (the tracked files and .dev) must stay under
# 64 MiB, and docs/results alone is larger: take it out of the index for
# the calls (its files stay on disk) and put it back after:
#   echo /docs/results/ >>.git/info/exclude; git rm -r -q --cached docs/results
#   ... the device calls ...
#   git reset -q -- docs/results; sed -i '\#^/docs/results/$#d' .git/info/exclude
# `quick` runs every experiment in its --quick mode (a check of the script).
# `check` starts each step's command in its --quick mode and stops it after
# two seconds: a step whose arguments the command refuses fails at once
# (tests/device_scaling.rs runs it for every step; the `echo` step's
# refused --no-peers once cost a device call a step).
# STEPS (default "kv echo threads colors", about 6.5 minutes on 16 cores
# before seda-s joined the colors step: about 7 now)
# picks the experiments; `STEPS="offload http"` (about 4 minutes),
# `STEPS="kvtcp"` (about 2.5 minutes), `STEPS="affinity"` (about 3 minutes,
# not yet run there) or `STEPS="sweep"` fill a second call.
# A 15-minute lease held the default steps, "echo http" and "kvtcp" on
# 2026-12-04 (three calls, 678 s of device time with the start).
set -u
bin=${1:?a duality binary}
out=${2:?an output directory}
quick=${3:-}
mode=$quick
[ "$mode" = check ] && quick=quick
failed=0
mkdir -p "$out"
here="$(cd "$(dirname "$bin")" && pwd)"
if [ -d "$here/lib" ]; then
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -f "$here/fonts.conf" ] && export FONTCONFIG_FILE="$here/fonts.conf"
fi
# The benchmarks look for memcached in /usr/bin and /usr/local/bin.
if ! command -v memcached >/dev/null && [ -x "$here/bin/memcached" ] && [ -w /usr/local/bin ]; then
    cp "$here/bin/memcached" /usr/local/bin/memcached
fi
# And for nginx in PATH and /usr/local/sbin; a packed nginx is installed only
# if it passes `nginx -t` here (its workers' user must exist), else the
# experiments leave its rows out instead of failing.
if ! command -v nginx >/dev/null && [ -x "$here/bin/nginx" ] && [ -w /usr/local/sbin ]; then
    t=$(mktemp -d /tmp/nginx-check.XXXXXX)
    printf 'pid %s/pid;\nerror_log %s/err;\nevents {}\nhttp { access_log off; }\n' "$t" "$t" >"$t/conf"
    if "$here/bin/nginx" -p "$t" -c "$t/conf" -e "$t/err" -t 2>"$t/out"; then
        cp "$here/bin/nginx" /usr/local/sbin/nginx
    else
        echo "packed nginx does not run here: $(tail -1 "$t/out")"
    fi
    rm -rf "$t"
fi
log="$out/device-scaling.log"
work=$(mktemp -d /tmp/device-scaling.XXXXXX)
cores=$(nproc)
echo "$(date -u +%FT%TZ) $cores cores, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" | tee "$log"

# run NAME SECONDS ARGS...: one experiment, stopped after SECONDS, then
# everything so far packed.
run() {
    local name=$1 limit=$2
    shift 2
    local q=()
    [ "$quick" = quick ] && q=(--quick)
    echo "== $name: $bin bench $* ${q[*]} ($(date -u +%T))" | tee -a "$log"
    [ "$mode" = check ] && limit=2
    timeout "$limit" "$bin" bench "$@" "${q[@]}" --out "$work/$name" >>"$log" 2>&1
    local rc=$?
    echo "exit $rc ($(date -u +%T))" | tee -a "$log"
    # Stopped by the timeout is a pass in `check` mode: it started.
    if [ "$rc" -ne 0 ] && ! { [ "$mode" = check ] && [ "$rc" -eq 124 ]; }; then
        failed=$((failed + 1))
    fi
    # Written beside and renamed, so a call cut short mid-pack still
    # returns the archive of the steps before.
    tar czf "$out/results.tgz.part" -C "$work" . && mv "$out/results.tgz.part" "$out/results.tgz"
}

# The load generator grows with the machine so it is not the limit: one
# client thread keeps about two server loops busy (on 16 cores: 6 client
# threads beside 8-10 server threads; docs/results/models/16-cores).
ct=$((cores * 3 / 8 > 1 ? cores * 3 / 8 : 1))
half=$((cores / 2 > 1 ? cores / 2 : 1))
quarter=$((cores / 4 > 1 ? cores / 4 : 1))
# Colors: the four client loops take four cores (docs/results/colors/16-cores*).
top=$((cores - 4 > 1 ? cores - 4 : 1))
threads=$(for n in 1 2 4 8 $top; do [ "$n" -le "$top" ] && echo "$n"; done | sort -nu | paste -sd,)
maxthreads=$((cores - ct > 1 ? cores - ct : 1))
steps=" ${STEPS:-kv echo threads colors} "
want() { [[ "$steps" == *" $1 "* ]]; }
hand="amped:$half,seda:2:$half,seda-s:$quarter"

want kv && run kv 200 models --models "symped:$half,$hand" --clients 8,40,120 \
    --client-threads "$ct" --rounds 3 --windows 2
want echo && run echo 110 models --service echo --clients 8,40,120 --windows 3 \
    --client-threads "$ct" --models "sped,symped:$half,$hand"
want threads && run threads 90 threads --max-threads "$maxthreads" --clients 120 \
    --client-threads "$ct" --windows 2
# (--quick sets the thread counts and the load itself.)
colors=(--setups amped,seda-s,symped,n-copy,tokio)
[ "$quick" = quick ] || colors+=(--threads "$threads" --client-loops 4 --clients 64 --rounds 2)
want colors && run colors 180 colors "${colors[@]}"
want affinity && run affinity-kv 150 models --models "symped:$half,$hand" --no-peers \
    --cpu-affinity off,auto --clients 40,120 --client-threads "$ct" --rounds 2 --windows 2
want affinity && run affinity-colors 180 colors "${colors[@]}" --cpu-affinity off
want sweep && run sweep 120 models --sweep --sweep-max 8 --client-threads "$ct" --windows 2
want offload && run offload 240 offload --model "symped:$half" --nginx-workers "$half"
want kvtcp && run kvtcp 100 models --tcp --models symped:1,symped:2 --io epoll,uring \
    --clients 40,120 --client-threads 4 --rounds 2 --windows 2
want kvtcp && run kvtcp-pipeline16 100 models --tcp --models symped:1,symped:2 --io epoll,uring \
    --clients 40,120 --client-threads 4 --rounds 2 --windows 2 --pipeline 16
want http && run http 200 http --io epoll,uring --sizes 1024,16384 --clients 100,1000 \
    --servers "duality-knot-c:$half,nginx-${half}w" --client-threads "$((cores - half))"
rm -rf "$work"
[ "$failed" -eq 0 ] || { echo "$failed step(s) failed: see $log" >&2; exit 1; }
