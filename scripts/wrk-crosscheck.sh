#!/usr/bin/env bash
# A cross-check of `duality bench http` with an independent client, wrk:
# `duality http` on each I/O backend (one loop per core), and with one
# loop on io_uring, against nginx (1 and 2 workers), a
# 1 KiB and a 16 KiB file, 100 and 1,000 keep-alive connections. The
# servers take turns, ROUNDS times per point; each measurement is a 1 s wrk
# warm-up and a SECONDS-long wrk run, with the server's CPU time (all its
# processes: nginx's master and workers) read from /proc before and after.
#
#   scripts/wrk-crosscheck.sh BINARY OUTDIR [ROUNDS] [SECONDS]
#
# Writes OUTDIR/wrk.csv (one line per measurement) and OUTDIR/wrk.md (per
# point the median requests/s and CPU per request of each server, and the
# ratios of the best duality to the best nginx). Needs wrk and nginx on
# PATH (apt-get install wrk nginx-light). Loopback only; every server it
# starts is stopped by its PID.
set -euo pipefail
. "$(dirname "$0")/crosscheck-lib.sh"

bin=$(realpath "${1:?usage: $0 BINARY OUTDIR [ROUNDS] [SECONDS]}")
out=${2:?usage: $0 BINARY OUTDIR [ROUNDS] [SECONDS]}
rounds=${3:-3}
secs=${4:-4}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
mkdir -p "$out"
make_work wrk

mkdir -p "$work/www"
head -c 1024 /dev/urandom >"$work/www/1k.bin"
head -c 16384 /dev/urandom >"$work/www/16k.bin"
chmod -R a+rX "$work"
ulimit -n 20000 2>/dev/null || true

# label -> "pid port"
declare -A server
start_duality() { # label io port [model]
    "$bin" http --model "${4:-symped}" --accept favor-active --io "$2" \
        --listen "127.0.0.1:$3" --root "$work/www" --max-conns 1100 \
        >"$work/$1.out" 2>"$work/$1.err" &
    pids+=($!)
    server[$1]="$! $3"
}
start_nginx() { # label workers port
    # The configuration `duality bench http` itself runs nginx with.
    mkdir -p "$work/$1"
    "$bin" bench http --nginx-config "$2" --addr "127.0.0.1:$3" \
        --nginx-root "$work/www" --nginx-prefix "$work/$1" >"$work/$1/nginx.conf"
    "$nginx" -c "$work/$1/nginx.conf" -p "$work/$1" 2>>"$work/$1/stderr" &
    pids+=($!)
    server[$1]="$! $3"
}
labels=(duality-uring duality-epoll duality-uring-1 nginx-1w nginx-2w)
start_duality duality-uring uring 18791
start_duality duality-epoll epoll 18792
# One loop, as nginx-1w is one worker: the client takes the other core.
start_duality duality-uring-1 uring 18795 symped:1
start_nginx nginx-1w 1 18793
start_nginx nginx-2w 2 18794
sleep 1
for l in "${labels[@]}"; do
    read -r pid port <<<"${server[$l]}"
    for i in $(seq 50); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/1k.bin" && break
        sleep 0.1
    done
    kill -0 "$pid" || { echo "$l did not start" >&2; exit 1; }
done

tree_ticks() { # pid: utime+stime of it and its children, in clock ticks
    local t=0 p
    for p in $1 $(pgrep -P "$1" || true); do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo $t
}

hz=$(getconf CLK_TCK)
echo "server,file,connections,round,requests_per_sec,cpu_us_per_request,non_2xx_or_errors" >"$out/wrk.csv"
started=$(date +%s)
for file in 1k.bin 16k.bin; do
    for conns in 100 1000; do
        for r in $(seq "$rounds"); do
            n=${#labels[@]}
            for k in $(seq 0 $((n - 1))); do
                l=${labels[$(((k + r) % n))]}
                read -r pid port <<<"${server[$l]}"
                url="http://127.0.0.1:$port/$file"
                wrk -t1 -c"$conns" -d1s "$url" >/dev/null 2>&1 || true
                c0=$(tree_ticks "$pid")
                res=$(wrk -t1 -c"$conns" -d"${secs}s" "$url" 2>&1)
                c1=$(tree_ticks "$pid")
                reqs=$(awk '/requests in/ {print $1}' <<<"$res")
                rps=$(awk '/Requests\/sec/ {print $2}' <<<"$res")
                bad=$(awk '/Non-2xx/ {n += $NF} /Socket errors/ {gsub(",", ""); n += $4 + $6 + $8 + $10} END {print n + 0}' <<<"$res")
                us=$(python3 -c "print(round(($c1 - $c0) / $hz * 1e6 / max($reqs, 1), 2))")
                echo "$l,$file,$conns,$r,$rps,$us,$bad" >>"$out/wrk.csv"
                echo "$l $file x$conns round $r: $rps req/s, $us us/req" >&2
                sleep 0.5
            done
        done
    done
done
took=$(($(date +%s) - started))

python3 - "$out" "$rounds" "$secs" "$took" "$(wrk --version 2>&1 | head -1 | awk '{print $2}')" \
    "$("$nginx" -v 2>&1 | sed 's/.*: //')" "$(nproc)" <<'EOF'
import csv, statistics, sys
out, rounds, secs, took, wrkv, nginxv, cores = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/wrk.csv")))
order = ["duality-uring", "duality-epoll", "duality-uring-1", "nginx-1w", "nginx-2w"]
labels = sorted(dict.fromkeys(r["server"] for r in rows), key=lambda l: order.index(l) if l in order else len(order))
md = ["# wrk cross-check of duality bench http", "",
      f"{cores} cores; `scripts/wrk-crosscheck.sh`: wrk {wrkv} (`-t1`, {secs} s after 1 s of warm-up), "
      f"{nginxv}; servers taking turns, median of {rounds} per point; took {took} s. "
      "duality: `duality http --model symped --accept favor-active --io BACKEND` "
      "(`duality-uring-1`: `--model symped:1 --io uring`).", ""]
for what, key, better, ratio in [("requests/s", "requests_per_sec", max, "best duality / best nginx"),
                                 ("server CPU µs per request", "cpu_us_per_request", min, "lowest duality / lowest nginx")]:
    md += [f"**{what}**", "",
           "| file | connections | " + " | ".join(labels) + f" | {ratio} |",
           "|---|---|" + "---|" * len(labels) + "---|"]
    for f in dict.fromkeys(r["file"] for r in rows):
        for c in dict.fromkeys(r["connections"] for r in rows):
            med = {}
            for l in labels:
                v = [float(r[key]) for r in rows if (r["server"], r["file"], r["connections"]) == (l, f, c)]
                med[l] = statistics.median(v)
            d = better(v for l, v in med.items() if l.startswith("duality"))
            n = better(v for l, v in med.items() if l.startswith("nginx"))
            cells = [f"{med[l]:,.0f}" if key == "requests_per_sec" else f"{med[l]:.2f}" for l in labels]
            md.append(f"| {f} | {c} | " + " | ".join(cells) + f" | {d / n:.2f} |")
    md.append("")
bad = sum(int(r["non_2xx_or_errors"]) for r in rows)
md.append(f"Non-2xx responses and socket errors over all runs: {bad}.")
open(f"{out}/wrk.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
