#!/bin/bash
# The soak and fairness on 5099ebb (the flooder that reconnects and keeps
# its batches whole), one at a time, nothing else running.
B=/tmp/dbin-5099ebb
O=/tmp/res57
run() { local name=$1; shift; echo "$(date -u +%T) start $name: $*"; "$B" "$@" --out "$O/$name" > "$O/$name.log" 2>&1; echo "$(date -u +%T) end $name exit $?"; }
run soak-5099ebb bench soak --seconds 300
run fairness-5099ebb bench fairness
echo "$(date -u +%T) all done"
