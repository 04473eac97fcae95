#!/usr/bin/env bash
# User-space instructions per request of one `duality kv` build, counted by
# callgrind (valgrind) while memaslap (libmemcached's `memcaslap`) sends a
# fixed number of requests: 9:1 gets to sets, keys of 16-32 bytes, values
# of 10-103, 40 connections, one thread, TCP loopback. Unlike a timed run,
# the count barely moves with the host's speed, so two builds compare to a
# fraction of a percent (work done per unit of time, such as the loops'
# histogram snapshots, still grows with the run's length; callgrind-diff.py
# leaves it out).
#
#   scripts/callgrind-kv.sh BINARY OUT.callgrind [REQUESTS] [IO]
#
# REQUESTS: default 200000; IO: the server's backend (default epoll: valgrind
# does not follow what the kernel writes into an io_uring ring). Needs
# valgrind and memaslap (apt-get install valgrind libmemcached-tools).
# Compare two builds' files with scripts/callgrind-diff.py.
set -euo pipefail
usage="usage: $0 BINARY OUT.callgrind [REQUESTS] [IO]"
bin=$(realpath "${1:?$usage}")
out=$(realpath -m "${2:?$usage}")
n=${3:-200000}
io=${4:-epoll}
slap=$(command -v memcaslap || command -v memaslap || true)
[ -n "$slap" ] || { echo "memaslap is not installed (apt-get install libmemcached-tools)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d /tmp/duality-callgrind-XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
printf 'key\n16 32 1\nvalue\n10 103 1\ncmd\n0 0.1\n1 0.9\n' >"$work/workload.cfg"
port=$((20000 + RANDOM % 10000))
valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$bin" kv -t 1 --io "$io" -l 127.0.0.1 -p "$port" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
    python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port),1); s.sendall(b'version\r\n'); sys.exit(0 if s.recv(64).startswith(b'VERSION') else 1)" 2>/dev/null && break
    kill -0 "$pid" || { echo "the server did not start: $(cat "$work/server.log")" >&2; exit 1; }
    sleep 0.3
done
"$slap" -s "127.0.0.1:$port" -T 1 -c 40 -F "$work/workload.cfg" -x "$n" >"$work/slap.txt" 2>&1
ops=$(awk '/^Run time:/ {for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i + 1)}' "$work/slap.txt")
[ "$ops" = "$n" ] || { echo "memaslap ran $ops of $n requests:" >&2; cat "$work/slap.txt" >&2; exit 1; }
kill -TERM "$pid"
wait "$pid" || true
pid=
echo "$out: $n requests ($("$bin" --version 2>/dev/null | head -1))"
