#!/usr/bin/env bash
# Two builds of duality, A and B, on their default settings, taking turns
# under independent clients: the cache under memaslap (libmemcached's
# `memcaslap`: 9:1 gets to sets, keys of 16-32 bytes, values of 10-103, 40
# and 120 connections) and the web server under wrk (one thread, a 1 KiB
# and a 16 KiB file, 100 and 1,000 connections; 256 KiB and 1 MiB files
# on request), both over TCP loopback.
# It answers "did this change make the servers slower?" without the
# builds' own load generators, which change with them. Each measurement
# is a 1 s warm-up and a SECONDS-long run, with the server's CPU time read
# from /proc before and after; the order of the builds alternates by
# round. A cache that did not run (get or set, by its `stats`) nine in ten
# of the requests memaslap counted stops the run: errors are cheap answers.
#
#   scripts/ab-builds.sh BINARY_A BINARY_B OUTDIR [ROUNDS] [SECONDS]
#
# KV_ARGS (environment) adds arguments to both caches' command lines, e.g.
# KV_ARGS="--model amped:2" to compare the builds under another model.
# POINTS (environment) picks points, e.g. POINTS="kv-40" for a quick bisect
# step (default: kv-40 kv-120 http-1kx100 http-1kx1000 http-16kx100
# http-16kx1000; the web server's files are 1k, 16k, 256k and 1024k).
#
# Writes OUTDIR/ab.csv (one line per measurement) and OUTDIR/ab.md (per
# point B's requests/s and server CPU per request over A's, round by round
# and their medians; the rounds' servers ran seconds apart, so a host that
# drifts between rounds cancels out). Needs memcaslap (or memaslap) and
# wrk on PATH (apt-get install libmemcached-tools wrk). Loopback only;
# every server it starts is stopped by its PID.
set -euo pipefail
. "$(dirname "$0")/crosscheck-lib.sh"

usage="usage: $0 BINARY_A BINARY_B OUTDIR [ROUNDS] [SECONDS]"
a=$(realpath "${1:?$usage}")
b=$(realpath "${2:?$usage}")
out=${3:?$usage}
rounds=${4:-4}
secs=${5:-4}
slap=$(command -v memcaslap || command -v memaslap || true)
[ -n "$slap" ] || { echo "memaslap is not installed (apt-get install libmemcached-tools)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
mkdir -p "$out"
make_work ab
ulimit -n 20000 2>/dev/null || true

cat >"$work/workload.cfg" <<'EOF'
key
16 32 1
value
10 103 1
cmd
0 0.1
1 0.9
EOF
mkdir -p "$work/www"
head -c 1024 /dev/urandom >"$work/www/1k.bin"
head -c 16384 /dev/urandom >"$work/www/16k.bin"
# Large files for points such as http-256kx100 and http-1024kx1000 (sent
# with sendfile, past the page cache's 64 KiB per file).
head -c 262144 /dev/urandom >"$work/www/256k.bin"
head -c 1048576 /dev/urandom >"$work/www/1024k.bin"
chmod -R a+rX "$work"

# label -> "pid port"
declare -A server
ready() { # label pid port kind
    if [ "$4" = kv ]; then
        memcache_up "$3" 100 && return 0
    else
        for _ in $(seq 100); do
            curl -sf -o /dev/null "http://127.0.0.1:$3/1k.bin" && return 0
            sleep 0.1
        done
    fi
    echo "$1 did not start: $(cat "$work/$1.err")" >&2
    exit 1
}
start() { # label binary kind port
    if [ "$3" = kv ]; then
        # shellcheck disable=SC2086 # KV_ARGS is a list of words
        "$2" kv -l 127.0.0.1 -p "$4" ${KV_ARGS:-} >"$work/$1.out" 2>"$work/$1.err" &
    else
        "$2" http --listen "127.0.0.1:$4" --root "$work/www" --max-conns 1100 \
            >"$work/$1.out" 2>"$work/$1.err" &
    fi
    pids+=($!)
    server[$1]="$! $4"
    ready "$1" "$!" "$4" "$3"
}
start A-kv "$a" kv 18991
start B-kv "$b" kv 18992
start A-http "$a" http 18993
start B-http "$b" http 18994

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The cache's gets and sets so far, from its `stats`: a build that answers
# memaslap's requests with errors (292c960 refused its keys' 0x10 bytes:
# docs/results/ab-2026-11-30/) costs less per request for doing nothing.
served() { # port
    python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 5)
s.sendall(b"stats\r\n")
b = b""
while not b.endswith(b"END\r\n"):
    d = s.recv(65536)
    if not d:
        break
    b += d
n = {l.split()[1]: int(l.split()[2]) for l in b.decode().splitlines() if l.startswith("STAT cmd_")}
print(n.get("cmd_get", 0) + n.get("cmd_set", 0))
PY
}
hz=$(getconf CLK_TCK)
echo "build,point,round,requests_per_sec,server_cpu_us_per_request" >"$out/ab.csv"
measure() { # build point round: runs the point's client against the build
    local l=$1-${2%%-*} pid port
    read -r pid port <<<"${server[$l]}"
    kill -0 "$pid" || { echo "$l is gone: $(tail -3 "$work/$l.err")" >&2; exit 1; }
    local run reqs rps c0 c1
    case $2 in
        kv-*)
            local args=(-s "127.0.0.1:$port" -T 1 -c "${2#kv-}" -w 1k -F "$work/workload.cfg")
            "$slap" "${args[@]}" -t 1s >/dev/null 2>&1 || true
            local n0 n1
            n0=$(served "$port")
            c0=$(ticks "$pid")
            run=$("$slap" "${args[@]}" -t "${secs}s" 2>&1)
            c1=$(ticks "$pid")
            n1=$(served "$port")
            reqs=$(awk '/^Run time:/ {for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i + 1)}' <<<"$run")
            rps=$(awk '/^Run time:/ {for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i + 1)}' <<<"$run")
            if [ -n "$reqs" ] && [ $((n1 - n0)) -lt $((reqs * 9 / 10)) ]; then
                echo "$l $2: the server ran $((n1 - n0)) gets and sets of the $reqs requests memaslap sent: it refused the rest, so its CPU per request is not comparable (a build before 0f69589 refuses memaslap's keys: see docs/results/ab-2026-11-30/keybytes.patch)" >&2
                exit 1
            fi
            ;;
        http-*)
            local rest=${2#http-} url
            url="http://127.0.0.1:$port/${rest%%x*}.bin"
            wrk -t1 -c"${rest#*x}" -d1s "$url" >/dev/null 2>&1 || true
            c0=$(ticks "$pid")
            run=$(wrk -t1 -c"${rest#*x}" -d"${secs}s" "$url" 2>&1)
            c1=$(ticks "$pid")
            reqs=$(awk '/requests in/ {print $1}' <<<"$run")
            rps=$(awk '/Requests\/sec/ {print $2}' <<<"$run")
            if grep -qE 'Non-2xx|Socket errors' <<<"$run"; then
                echo "$l $2: errors: $run" >&2
            fi
            ;;
    esac
    [ -n "$reqs" ] && [ -n "$rps" ] || { echo "$l $2: the client printed no result: $run" >&2; exit 1; }
    local us
    us=$(python3 -c "print(round(($c1 - $c0) / $hz * 1e6 / max($reqs, 1), 2))")
    echo "$1,$2,$3,$rps,$us" >>"$out/ab.csv"
    echo "$1 $2 round $3: $rps req/s, $us us/req" >&2
    sleep 0.5
}
started=$(date +%s)
for point in ${POINTS:-kv-40 kv-120 http-1kx100 http-1kx1000 http-16kx100 http-16kx1000}; do
    for r in $(seq "$rounds"); do
        if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
        for build in $order; do measure "$build" "$point" "$r"; done
    done
done
took=$(($(date +%s) - started))

python3 - "$out" "$rounds" "$secs" "$took" "$a" "$b" "$(nproc)" <<'EOF'
import csv, os, statistics, sys
out, rounds, secs, took, a, b, cores = sys.argv[1:]
# The servers' I/O backend where the environment chose one.
io = os.environ.get("DUALITY_IO")
env = f"`DUALITY_IO={io}` " if io else ""
kv_args = os.environ.get("KV_ARGS", "").strip()
if kv_args:
    env += f"`KV_ARGS='{kv_args}'` "
kv_cmd = " ".join(["duality kv -l 127.0.0.1", kv_args]).strip()
rows = list(csv.DictReader(open(f"{out}/ab.csv")))
md = ["# A/B of two builds under independent clients", "",
      f"{cores} cores; {env}`scripts/ab-builds.sh A B OUT {rounds} {secs}`; A = `{a}`, B = `{b}`; "
      f"each on its defaults (`{kv_cmd}`, `duality http --max-conns 1100`); memaslap "
      f"(`-T 1 -w 1k`, 9:1 gets to sets) and wrk (`-t1`), {secs} s after 1 s of warm-up, TCP loopback, "
      f"the builds taking turns; took {took} s.", "",
      "| point | A requests/s | B requests/s | A server µs/request | B server µs/request "
      "| B/A requests/s (median; per round) | B/A CPU per request (median; per round) |",
      "|---|---|---|---|---|---|---|"]
for point in dict.fromkeys(r["point"] for r in rows):
    get = lambda build, key: {r["round"]: float(r[key]) for r in rows
                              if (r["build"], r["point"]) == (build, point)}
    ra, rb = get("A", "requests_per_sec"), get("B", "requests_per_sec")
    ca, cb = get("A", "server_cpu_us_per_request"), get("B", "server_cpu_us_per_request")
    tp = [rb[k] / ra[k] for k in ra]
    cp = [cb[k] / ca[k] for k in ca]
    each = lambda v: ", ".join(f"{x:.2f}" for x in v)
    med = statistics.median
    md.append(f"| {point} | {med(ra.values()):,.0f} | {med(rb.values()):,.0f} | {med(ca.values()):.2f} "
              f"| {med(cb.values()):.2f} | {med(tp):.3f} ({each(tp)}) | {med(cp):.3f} ({each(cp)}) |")
md.append("")
md.append("Points: `kv-N` the cache at N connections; `http-SIZExN` the web server, that file, N connections.")
open(f"{out}/ab.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
