#!/usr/bin/env bash
# A cross-check of `duality bench models --tcp` (the cache) with the
# independent client issue 11 was measured with, memtier_benchmark (Redis
# Labs'; not packaged in Debian: build it from
# https://github.com/RedisLabs/memtier_benchmark with `autoreconf -ivf &&
# ./configure && make`, which needs libevent-dev, libssl-dev, zlib1g-dev,
# and put it on PATH or in MEMTIER). TCP loopback, the memcache text
# protocol, 30,000 keys set once before the first run, then 9:1 gets to
# sets on random keys with values of 10-103 bytes (uniform), from one
# memtier thread (the client takes one of the machine's two cores) at 40
# and 120 connections, and 40 connections with 16 requests pipelined each.
#
# Servers: `duality kv` on its defaults (symped:2 on io_uring, a 100 us
# idle spin), symped:1 on io_uring with the default spin and with
# --idle-spin-us 0, symped:1 on epoll; memcached -t 1 and -t 2. They take
# turns, ROUNDS times per point; each measurement is a 1 s memtier warm-up
# and a SECONDS-long run, with the server's CPU time and context switches
# read from /proc before and after, its system calls counted by
# `perf stat` where perf is installed, and the client's CPU from bash's
# `time`.
#
#   scripts/memtier-crosscheck.sh BINARY OUTDIR [ROUNDS] [SECONDS]
#
# Writes OUTDIR/memtier.csv (one line per measurement) and OUTDIR/memtier.md
# (per point the median operations/s, server CPU, context switches and
# system calls per operation of each server, and the ratios of duality to
# memcached). Loopback only; every server it starts is stopped by its PID.
set -euo pipefail
. "$(dirname "$0")/crosscheck-lib.sh"

usage="usage: $0 BINARY OUTDIR [ROUNDS] [SECONDS]"
bin=$(realpath "${1:?$usage}")
out=${2:?$usage}
rounds=${3:-3}
secs=${4:-5}
mt=${MEMTIER:-$(command -v memtier_benchmark || true)}
[ -n "$mt" ] && [ -x "$mt" ] || {
    echo "memtier_benchmark is not installed: build it from https://github.com/RedisLabs/memtier_benchmark and put it on PATH or in MEMTIER" >&2
    exit 1
}
memcached=$(command -v memcached || true)
[ -n "$memcached" ] || { echo "memcached is not installed (apt-get install memcached)" >&2; exit 1; }
perf=$(command -v perf || true)
mkdir -p "$out"
make_work memtier

# label -> "pid port"
declare -A server
start_duality() { # label port flags...
    local l=$1 port=$2
    shift 2
    "$bin" kv "$@" -l 127.0.0.1 -p "$port" -m 64 >"$work/$l.out" 2>"$work/$l.err" &
    pids+=($!)
    server[$l]="$! $port"
}
start_memcached() { # label threads port
    "$memcached" -u "$(id -un)" -l 127.0.0.1 -p "$3" -t "$2" -m 64 -U 0 \
        >"$work/$1.out" 2>"$work/$1.err" &
    pids+=($!)
    server[$1]="$! $3"
}
labels=(duality-default duality-symped1-uring duality-symped1-uring-spin0 duality-symped1-epoll memcached-t1 memcached-t2)
start_duality duality-default 18921
start_duality duality-symped1-uring 18922 --model symped:1 --io uring
start_duality duality-symped1-uring-spin0 18923 --model symped:1 --io uring --idle-spin-us 0
start_duality duality-symped1-epoll 18924 --model symped:1 --io epoll
start_memcached memcached-t1 1 18925
start_memcached memcached-t2 2 18926
for l in "${labels[@]}"; do
    read -r pid port <<<"${server[$l]}"
    memcache_up "$port" && kill -0 "$pid" || { echo "$l did not start: $(cat "$work/$l.err")" >&2; exit 1; }
    # Every key once, so that every get finds its item.
    "$mt" -s 127.0.0.1 -p "$port" -P memcache_text -t 1 -c 10 --ratio 1:0 --key-pattern P:P \
        --key-minimum 1 --key-maximum 30000 -n allkeys --data-size-range 10-103 \
        --hide-histogram >"$work/fill.txt" 2>&1 || { echo "$l: filling failed:" >&2; cat "$work/fill.txt" >&2; exit 1; }
done

ticks() { # pid: utime+stime in clock ticks
    awk '{print $14 + $15}' "/proc/$1/stat"
}
switches() { # pid: context switches of all its threads
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}'
}

hz=$(getconf CLK_TCK)
echo "server,connections,pipeline,round,ops_per_sec,server_cpu_us_per_op,ctx_switches_per_op,syscalls_per_op,client_cpu_of_a_core,get_misses_per_sec" >"$out/memtier.csv"
started=$(date +%s)
for point in 40:1 120:1 40:16; do
    conns=${point%:*}
    pipe=${point#*:}
    for r in $(seq "$rounds"); do
        n=${#labels[@]}
        for k in $(seq 0 $((n - 1))); do
            l=${labels[$(((k + r) % n))]}
            read -r pid port <<<"${server[$l]}"
            args=(-s 127.0.0.1 -p "$port" -P memcache_text -t 1 -c "$conns" --pipeline "$pipe"
                --ratio 1:9 --key-pattern R:R --key-minimum 1 --key-maximum 30000
                --data-size-range 10-103 --distinct-client-seed --hide-histogram)
            "$mt" "${args[@]}" --test-time 1 >/dev/null 2>&1 || true
            c0=$(ticks "$pid")
            x0=$(switches "$pid")
            pp=
            if [ -n "$perf" ]; then
                "$perf" stat -x, -e raw_syscalls:sys_enter -p "$pid" -o "$work/perf.txt" 2>/dev/null &
                pp=$!
            fi
            TIMEFORMAT='%U %S %R'
            { time "$mt" "${args[@]}" --test-time "$secs" --json-out-file "$work/run.json" >"$work/run.txt" 2>&1; } 2>"$work/time.txt" || {
                echo "$l: memtier failed:" >&2
                cat "$work/run.txt" >&2
                exit 1
            }
            c1=$(ticks "$pid")
            x1=$(switches "$pid")
            sc=
            if [ -n "$pp" ]; then
                kill -INT "$pp" 2>/dev/null || true
                wait "$pp" 2>/dev/null || true
                sc=$(awk -F, '/raw_syscalls/ {print $1}' "$work/perf.txt")
            fi
            read -r cu cs wall <"$work/time.txt"
            line=$(python3 - "$work/run.json" "$c0" "$c1" "$hz" "$x0" "$x1" "${sc:-}" "$cu" "$cs" "$wall" <<'EOF'
import json, sys
path, c0, c1, hz, x0, x1, sc, cu, cs, wall = sys.argv[1:]
t = json.load(open(path))["ALL STATS"]["Totals"]
ops = t["Count"]
assert ops > 0, "memtier counted no operations"
sys_per = f"{int(sc) / ops:.2f}" if sc.isdigit() else ""
print(f"{t['Ops/sec']:.0f},{(int(c1) - int(c0)) / int(hz) * 1e6 / ops:.2f},"
      f"{(int(x1) - int(x0)) / ops:.3f},{sys_per},{(float(cu) + float(cs)) / float(wall):.2f},"
      f"{t['Misses/sec']:.0f}")
EOF
            )
            echo "$l,$conns,$pipe,$r,$line" >>"$out/memtier.csv"
            echo "$l x$conns pipeline $pipe round $r: $line" >&2
            sleep 0.5
        done
    done
done
took=$(($(date +%s) - started))

python3 - "$out" "$rounds" "$secs" "$took" "$("$memcached" -V 2>&1 | head -1)" "$("$mt" --version 2>&1 | head -1)" "$(nproc)" <<'EOF'
import csv, statistics, sys
out, rounds, secs, took, mcv, mtv, cores = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/memtier.csv")))
order = ["duality-default", "duality-symped1-uring", "duality-symped1-uring-spin0",
         "duality-symped1-epoll", "memcached-t1", "memcached-t2"]
labels = sorted(dict.fromkeys(r["server"] for r in rows), key=lambda l: order.index(l) if l in order else len(order))
points = list(dict.fromkeys((r["connections"], r["pipeline"]) for r in rows))
md = ["# memtier_benchmark cross-check of the cache", "",
      f"{cores} cores; `scripts/memtier-crosscheck.sh` ({rounds} rounds, {secs} s): {mtv}, one thread, "
      "memcache text protocol, 30,000 keys set once, then 9:1 gets to sets on random keys, values of "
      f"10-103 B, {secs} s after 1 s of warm-up; {mcv}; TCP loopback; servers taking turns, median of "
      f"{rounds} per point; took {took} s. duality: `duality kv FLAGS -m 64` (`default`: no flags, "
      "symped:2 on io_uring; `spin0`: `--idle-spin-us 0`), memcached: `memcached -t N -m 64`.", ""]
def med(l, p, key):
    v = [float(r[key]) for r in rows if (r["server"], r["connections"], r["pipeline"]) == (l, *p) and r[key] != ""]
    return statistics.median(v) if v else None
for what, key, fmt in [("operations/s", "ops_per_sec", "{:,.0f}"),
                       ("server CPU µs per operation", "server_cpu_us_per_op", "{:.2f}"),
                       ("server context switches per operation", "ctx_switches_per_op", "{:.3f}"),
                       ("server system calls per operation", "syscalls_per_op", "{:.2f}"),
                       ("client CPU (share of one core)", "client_cpu_of_a_core", "{:.2f}")]:
    md += [f"**{what}**", "", "| connections × pipeline | " + " | ".join(labels) + " |",
           "|---|" + "---|" * len(labels)]
    for p in points:
        cells = [fmt.format(m) if (m := med(l, p, key)) is not None else "-" for l in labels]
        md.append(f"| {p[0]} × {p[1]} | " + " | ".join(cells) + " |")
    md.append("")
# Per-round ratios (servers of one round ran seconds apart, so a host that
# drifts between rounds cancels out), then their median.
md += ["**ratios** (median of per-round ratios; each round's in brackets)", "",
       "| connections × pipeline | duality default / memcached -t 1 CPU per op | lowest duality / memcached -t 1 CPU per op | duality default / best memcached ops/s | best duality / best memcached ops/s |",
       "|---|---|---|---|---|"]
for p in points:
    cols = [[], [], [], []]
    for rnd in dict.fromkeys(r["round"] for r in rows):
        here = {r["server"]: r for r in rows if (r["connections"], r["pipeline"], r["round"]) == (*p, rnd)}
        cpu = lambda l: float(here[l]["server_cpu_us_per_op"])
        ops = lambda l: float(here[l]["ops_per_sec"])
        dual = [l for l in here if l.startswith("duality")]
        memc = [l for l in here if l.startswith("memcached")]
        cols[0].append(cpu("duality-default") / cpu("memcached-t1"))
        cols[1].append(min(cpu(l) for l in dual) / cpu("memcached-t1"))
        cols[2].append(ops("duality-default") / max(ops(l) for l in memc))
        cols[3].append(max(ops(l) for l in dual) / max(ops(l) for l in memc))
    each = lambda v: f"{statistics.median(v):.2f} (" + ", ".join(f"{x:.2f}" for x in v) + ")"
    md.append(f"| {p[0]} × {p[1]} | " + " | ".join(each(c) for c in cols) + " |")
md.append("")
misses = sum(float(r["get_misses_per_sec"]) for r in rows)
md.append(f"Get misses per second, summed over all runs: {misses:.0f} (every key was set before the runs).")
open(f"{out}/memtier.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
