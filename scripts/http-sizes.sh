#!/bin/bash
# A hot file of each size, four ways: `duality http` on its defaults (from
# --sendfile-learn 16 KiB to --sendfile-kept 32 KiB each loop takes the
# copy or sendfile as it measured cheaper; sendfile from 32 KiB), with
# --sendfile-kept 4 (every file of 4 KiB or more, kept open, goes out with
# sendfile), with --sendfile-kept 0 (every file up to --cache-max-file
# copied from its page cache; both with --sendfile-learn 0: nothing
# learned), and nginx with one worker (`sendfile on`, the
# configuration `duality bench http` runs); wrk with one thread, servers
# taking turns, median of ROUNDS per point. Server CPU per request is the
# server's process tree's utime+stime from /proc over the counted window.
#
#   scripts/http-sizes.sh BIN OUTDIR [ROUNDS] [CONNS...]
#
# Writes OUTDIR/raw.csv (every run) and OUTDIR/results.md (medians, and
# ratios to nginx). Needs wrk and nginx (apt-get install wrk nginx-light).
# Loopback only; every server it starts is stopped by PID.
set -euo pipefail
bin=$(realpath "$1"); out=$2; rounds=${3:-3}; shift 3 || shift $#
conns=("${@:-100}")
[ ${#conns[@]} -gt 0 ] || conns=(100)
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
command -v wrk > /dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
sizes=(4 8 16 24 32 64)
mkdir -p "$out"
work=$(mktemp -d /tmp/duality-sizes-XXXXXX)
mkdir -p "$work/www"
for k in "${sizes[@]}"; do head -c $((k * 1024)) /dev/urandom > "$work/www/${k}k.bin"; done
# nginx's workers run as an unprivileged user: they must be able to read
# the files (mktemp makes the directory 0700; a 403 is cheap and fast).
chmod -R a+rX "$work"
ulimit -n 20000
declare -A pid port
cleanup() { for l in "${!pid[@]}"; do kill "${pid[$l]}" 2> /dev/null || true; done; wait; rm -rf "$work"; }
trap cleanup EXIT
start_duality() { # label port args...
    local l=$1 p=$2; shift 2
    "$bin" http --listen "127.0.0.1:$p" --root "$work/www" --max-conns 1100 "$@" \
        > "$work/$l.out" 2> "$work/$l.err" &
    pid[$l]=$!; port[$l]=$p
}
start_duality duality-sendfile 18831 --sendfile-kept 4 --sendfile-learn 0
start_duality duality-copy 18832 --sendfile-kept 0 --sendfile-learn 0
start_duality duality-learned 18834
mkdir -p "$work/nginx"
"$bin" bench http --nginx-config 1 --addr 127.0.0.1:18833 --nginx-root "$work/www" \
    --nginx-prefix "$work/nginx" > "$work/nginx/nginx.conf"
"$nginx" -c "$work/nginx/nginx.conf" -p "$work/nginx" 2>> "$work/nginx/stderr" &
pid[nginx-1w]=$!; port[nginx-1w]=18833
sleep 1.5
ticks() { local t=0 p; for p in $1 $(pgrep -P "$1"); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)
secs=3
echo "conns,size_kib,server,round,requests_per_sec,cpu_us_per_request,bad" > "$out/raw.csv"
t0=$(date +%s)
for c in "${conns[@]}"; do
    for r in $(seq "$rounds"); do
        for k in "${sizes[@]}"; do
            for l in duality-learned duality-sendfile duality-copy nginx-1w; do
                url="http://127.0.0.1:${port[$l]}/${k}k.bin"
                wrk -t1 -c"$c" -d1s "$url" > /dev/null
                a=$(ticks "${pid[$l]}")
                res=$(wrk -t1 -c"$c" -d${secs}s "$url")
                b=$(ticks "${pid[$l]}")
                rps=$(awk '/Requests\/sec/ {print $2}' <<< "$res")
                bad=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' <<< "$res")
                cpu=$(echo "($b - $a) * 1000000 / $hz / ($rps * $secs)" | bc -l)
                printf '%s,%s,%s,%s,%s,%.3f,%s\n' "$c" "$k" "$l" "$r" "$rps" "$cpu" "$bad" | tee -a "$out/raw.csv"
            done
        done
    done
done
took=$(($(date +%s) - t0))
python3 - "$out" "$rounds" "$took" "$(wrk -v 2>&1 | head -1 | awk '{print $2}')" \
    "$("$nginx" -v 2>&1 | sed 's/.*: //')" "$(nproc)" << 'EOF'
import csv, statistics, sys
out, rounds, took, wrkv, nginxv, cores = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
med, bad = {}, 0
for key in {(r["conns"], r["size_kib"], r["server"]) for r in rows}:
    got = [r for r in rows if (r["conns"], r["size_kib"], r["server"]) == key]
    med[key] = (statistics.median(float(r["requests_per_sec"]) for r in got),
                statistics.median(float(r["cpu_us_per_request"]) for r in got))
bad = sum(int(r["bad"]) for r in rows)
servers = ["duality-learned", "duality-sendfile", "duality-copy", "nginx-1w"]
md = ["# A hot file by size: learned, sendfile from a kept descriptor, a copy from memory, nginx", "",
      f"Command: `scripts/http-sizes.sh BIN OUT {rounds} {' '.join(sorted({r['conns'] for r in rows}, key=int))}`. "
      f"wrk {wrkv} with one thread (one core of {cores}), nginx {nginxv} with one worker; "
      f"servers taking turns, median of {rounds} rounds of {3} s per point; took {took} s. "
      "duality-learned: `duality http` on its defaults (16-32 KiB: copy or sendfile as each loop measured cheaper; sendfile from 32 KiB); "
      "duality-sendfile: `--sendfile-kept 4 --sendfile-learn 0` (files of 4 KiB or more kept open go out with sendfile); "
      "duality-copy: `--sendfile-kept 0 --sendfile-learn 0` (every file up to 64 KiB copied from duality's page cache). "
      "CPU: the server's process tree, utime+stime.", ""]
for conns in sorted({r["conns"] for r in rows}, key=int):
    md += [f"## {conns} connections", "",
           "| size | " + " | ".join(f"{s} req/s" for s in servers) + " | " + " | ".join(f"{s} CPU µs/req" for s in servers)
           + " | sendfile / copy req/s | sendfile / copy CPU | learned / nginx req/s | learned / nginx CPU |",
           "|---" * (2 * len(servers) + 5) + "|"]
    for k in sorted({r["size_kib"] for r in rows}, key=int):
        m = [med[(conns, k, s)] for s in servers]
        md.append(f"| {k} KiB | " + " | ".join(f"{v[0]:,.0f}" for v in m) + " | "
                  + " | ".join(f"{v[1]:.2f}" for v in m)
                  + f" | {m[1][0] / m[2][0]:.2f} | {m[1][1] / m[2][1]:.2f}"
                  + f" | {m[0][0] / m[3][0]:.2f} | {m[0][1] / m[3][1]:.2f} |")
    md.append("")
md.append(f"Non-2xx responses and socket errors over all runs: {bad}.")
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
