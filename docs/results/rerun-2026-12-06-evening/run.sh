#!/bin/bash
# Issue 16's re-measure on edbb32e (2026-12-06 evening), one run at a time,
# nothing else running; each directory as the command wrote it.
B=/tmp/dbin-edbb32e
O=/tmp/res87/rerun
mkdir -p "$O"
cd /tmp
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run threads bench threads
run sweep bench models --sweep
run balance bench balance
run tasks bench tasks
run disk bench disk --dir /work --rounds 3 --seconds 2
echo "$(date -u +%T) all done"
