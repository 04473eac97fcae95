#!/bin/bash
# Issue 16's re-measure on edbb32e, continued: one run at a time, nothing
# else running; each directory as the command wrote it.
B=/tmp/dbin-edbb32e
O=/tmp/res87/rerun
mkdir -p "$O"
cd /tmp
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run store bench store
run disk-web bench disk --web --dir /work/webdisk
run http bench http
echo "$(date -u +%T) all done"
