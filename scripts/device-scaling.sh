#!/usr/bin/env bash
# The scaling checks two cores cannot answer, sized for one call of the
# `device` tool (a 16-core machine, 10 minutes a command, 8 files back):
#   colors  — hand-off models against the N-copy bound at N = 1..8 (issue 16)
#   offload — cheap p99 beside 1% gzip with cores to spare (issue 12; no nginx there)
#   echo    — hand-off models against symped and sped with a core each (issue 10)
#
# Usage, from the repository root:
#   scripts/device-scaling.sh BINARY OUTDIR [quick]
# BINARY is a release build of `duality` (carry a stripped copy: the
# working tree and carried paths travel within 64 MiB together;
# scripts/device-pack.sh packs one into .dev/ with the libraries and fonts
# that machine lacks, and this script uses them when .dev/lib sits beside
# BINARY: `scripts/device-scaling.sh .dev/duality $OUT`). Each
# experiment writes its directory under /tmp; OUTDIR gets only each one's
# Markdown table and JSON plus one log (the tool brings back 8 files).
# `quick` runs every experiment in its --quick mode (a check of the script).
# STEPS (default "colors offload echo") picks the experiments: the three
# fill one 10-minute call; `STEPS=echo` alone gives the echo step room for
# both hand-off policies (`--handoff always,adaptive`, eight rows).
set -u
bin=${1:?a duality binary}
out=${2:?an output directory}
quick=${3:-}
mkdir -p "$out"
libs="$(cd "$(dirname "$bin")" && pwd)"
if [ -d "$libs/lib" ]; then
    export LD_LIBRARY_PATH="$libs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -f "$libs/fonts.conf" ] && export FONTCONFIG_FILE="$libs/fonts.conf"
fi
log="$out/device-scaling.log"
work=$(mktemp -d /tmp/device-scaling.XXXXXX)
cores=$(nproc)
echo "$(date -u +%FT%TZ) $cores cores, $(uname -r)" | tee "$log"

# run NAME SECONDS ARGS...: one experiment, stopped after SECONDS.
run() {
    local name=$1 limit=$2
    shift 2
    local q=()
    [ "$quick" = quick ] && q=(--quick)
    echo "== $name: $bin bench $* ${q[*]} ($(date -u +%T))" | tee -a "$log"
    timeout "$limit" "$bin" bench "$@" "${q[@]}" --out "$work/$name" >>"$log" 2>&1
    echo "exit $? ($(date -u +%T))" | tee -a "$log"
    for f in "$work/$name"/*.md "$work/$name"/*.json; do
        [ -e "$f" ] && cp "$f" "$out/$name-$(basename "$f")"
    done
}

# Client loops and connections grow with the machine so the load generator
# is not the limit (see README: the colors experiment).
# 12 threads at most: the four client loops take the other cores of 16
# (docs/results/colors/16-cores*: about 4 minutes at 3 rounds).
top=$((cores - 4 > 1 ? cores - 4 : 1))
threads=$(for n in 1 2 4 8 $top; do [ "$n" -le "$top" ] && echo "$n"; done | sort -nu | paste -sd,)
steps=" ${STEPS:-colors offload echo} "
want() { [[ "$steps" == *" $1 "* ]]; }

want colors && run colors 240 colors --threads "$threads" --client-loops 4 --clients 64 --rounds 2
want offload && run offload 180 offload --no-nginx
half=$((cores / 2 > 1 ? cores / 2 : 1))
quarter=$((cores / 4 > 1 ? cores / 4 : 1))
# Alone, the echo step runs both hand-off policies (it has the call to itself).
policies=always elimit=150
[ "$steps" = " echo " ] && policies=always,adaptive elimit=300
want echo && run echo "$elimit" models --service echo --no-peers --clients 8,40,120 --windows 3 \
    --handoff "$policies" --models "sped,symped:$half,amped:$half,seda:2:$half,seda-s:$quarter"
rm -rf "$work"
