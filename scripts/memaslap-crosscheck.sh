#!/usr/bin/env bash
# A cross-check of `duality bench models --tcp` (the cache) with an
# independent client, memaslap (libmemcached's, installed as `memcaslap` on
# Debian): `duality kv` (symped:1 on each I/O backend, symped:2 on io_uring)
# against memcached -t 1 and -t 2, TCP loopback, 9:1 gets to sets, keys of
# 16-32 bytes and values of 10-103, 40 and 120 connections from one client
# thread (the client takes one of the machine's cores). The servers take
# turns, ROUNDS times per point; each measurement is a 1 s memaslap warm-up
# and a SECONDS-long run, with the server's CPU time read from /proc before
# and after and the client's from bash's `time`.
#
#   scripts/memaslap-crosscheck.sh BINARY OUTDIR [ROUNDS] [SECONDS]
#
# Writes OUTDIR/memaslap.csv (one line per measurement) and
# OUTDIR/memaslap.md (per point the median operations/s and server CPU per
# operation of each server, and the ratios of the best duality to the best
# memcached). Needs memaslap and memcached on PATH (apt-get install
# libmemcached-tools memcached). Loopback only; every server it starts is
# stopped by its PID.
set -euo pipefail
. "$(dirname "$0")/crosscheck-lib.sh"

bin=$(realpath "${1:?usage: $0 BINARY OUTDIR [ROUNDS] [SECONDS]}")
out=${2:?usage: $0 BINARY OUTDIR [ROUNDS] [SECONDS]}
rounds=${3:-3}
secs=${4:-4}
slap=$(command -v memcaslap || command -v memaslap || true)
[ -n "$slap" ] || { echo "memaslap is not installed (apt-get install libmemcached-tools)" >&2; exit 1; }
memcached=$(command -v memcached || true)
[ -n "$memcached" ] || { echo "memcached is not installed (apt-get install memcached)" >&2; exit 1; }
mkdir -p "$out"
make_work memaslap

# memaslap's workload: key sizes, value sizes (uniform over each range) and
# the command mix (0 = set, 1 = get).
cat >"$work/workload.cfg" <<'EOF'
key
16 32 1
value
10 103 1
cmd
0 0.1
1 0.9
EOF

# label -> "pid port"
declare -A server
start_duality() { # label model io port
    "$bin" kv --model "$2" --io "$3" -l 127.0.0.1 -p "$4" -m 64 \
        >"$work/$1.out" 2>"$work/$1.err" &
    pids+=($!)
    server[$1]="$! $4"
}
start_memcached() { # label threads port
    "$memcached" -u "$(id -un)" -l 127.0.0.1 -p "$3" -t "$2" -m 64 -U 0 \
        >"$work/$1.out" 2>"$work/$1.err" &
    pids+=($!)
    server[$1]="$! $3"
}
labels=(duality-symped1-uring duality-symped1-epoll duality-symped2-uring memcached-t1 memcached-t2)
start_duality duality-symped1-uring symped:1 uring 18891
start_duality duality-symped1-epoll symped:1 epoll 18892
start_duality duality-symped2-uring symped:2 uring 18893
start_memcached memcached-t1 1 18894
start_memcached memcached-t2 2 18895
for l in "${labels[@]}"; do
    read -r pid port <<<"${server[$l]}"
    memcache_up "$port" && kill -0 "$pid" || { echo "$l did not start: $(cat "$work/$l.err")" >&2; exit 1; }
done

ticks() { # pid: utime+stime in clock ticks
    awk '{print $14 + $15}' "/proc/$1/stat"
}

hz=$(getconf CLK_TCK)
echo "server,connections,round,ops_per_sec,server_cpu_us_per_op,client_cpu_of_a_core,get_misses" >"$out/memaslap.csv"
started=$(date +%s)
for conns in 40 120; do
    for r in $(seq "$rounds"); do
        n=${#labels[@]}
        for k in $(seq 0 $((n - 1))); do
            l=${labels[$(((k + r) % n))]}
            read -r pid port <<<"${server[$l]}"
            args=(-s "127.0.0.1:$port" -T 1 -c "$conns" -w 1k -F "$work/workload.cfg")
            "$slap" "${args[@]}" -t 1s >/dev/null 2>&1 || true
            c0=$(ticks "$pid")
            TIMEFORMAT='%U %S %R'
            { time "$slap" "${args[@]}" -t "${secs}s" >"$work/run.txt" 2>&1; } 2>"$work/time.txt"
            c1=$(ticks "$pid")
            ops=$(awk '/^Run time:/ {for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i + 1)}' "$work/run.txt")
            tps=$(awk '/^Run time:/ {for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i + 1)}' "$work/run.txt")
            misses=$(awk '/^get_misses:/ {print $2}' "$work/run.txt")
            [ -n "$ops" ] && [ -n "$tps" ] || { echo "$l: memaslap printed no result:" >&2; cat "$work/run.txt" >&2; exit 1; }
            read -r cu cs wall <"$work/time.txt"
            us=$(python3 -c "print(round(($c1 - $c0) / $hz * 1e6 / max($ops, 1), 2))")
            client=$(python3 -c "print(round(($cu + $cs) / $wall, 2))")
            echo "$l,$conns,$r,$tps,$us,$client,${misses:-0}" >>"$out/memaslap.csv"
            echo "$l x$conns round $r: $tps ops/s, $us us/op, client $client of a core" >&2
            sleep 0.5
        done
    done
done
took=$(($(date +%s) - started))

python3 - "$out" "$rounds" "$secs" "$took" "$("$memcached" -V 2>&1 | head -1)" "$(nproc)" <<'EOF'
import csv, statistics, sys
out, rounds, secs, took, mcv, cores = sys.argv[1:]
rows = list(csv.DictReader(open(f"{out}/memaslap.csv")))
order = ["duality-symped1-uring", "duality-symped1-epoll", "duality-symped2-uring", "memcached-t1", "memcached-t2"]
labels = sorted(dict.fromkeys(r["server"] for r in rows), key=lambda l: order.index(l) if l in order else len(order))
md = ["# memaslap cross-check of the cache", "",
      f"{cores} cores; `scripts/memaslap-crosscheck.sh`: memaslap (`-T 1 -w 1k`, keys 16-32 B, values 10-103 B, "
      f"9:1 gets to sets, {secs} s after 1 s of warm-up), {mcv}; TCP loopback; servers taking turns, "
      f"median of {rounds} per point; took {took} s. duality: `duality kv --model MODEL --io BACKEND -m 64`, "
      "memcached: `memcached -t N -m 64`.", ""]
for what, key, better, ratio, fmt in [
        ("operations/s", "ops_per_sec", max, "best duality / best memcached", "{:,.0f}"),
        ("server CPU µs per operation", "server_cpu_us_per_op", min, "lowest duality / memcached -t 1", "{:.2f}"),
        ("client CPU (share of one core)", "client_cpu_of_a_core", None, None, "{:.2f}")]:
    head = "| connections | " + " | ".join(labels) + (f" | {ratio} |" if ratio else " |")
    md += [f"**{what}**", "", head, "|---|" + "---|" * (len(labels) + (1 if ratio else 0))]
    for c in dict.fromkeys(r["connections"] for r in rows):
        med = {l: statistics.median(float(r[key]) for r in rows if (r["server"], r["connections"]) == (l, c))
               for l in labels}
        cells = [fmt.format(med[l]) for l in labels]
        if ratio:
            d = better(v for l, v in med.items() if l.startswith("duality"))
            n = (better(v for l, v in med.items() if l.startswith("memcached"))
                 if key == "ops_per_sec" else med["memcached-t1"])
            cells.append(f"{d / n:.2f}")
        md.append(f"| {c} | " + " | ".join(cells) + " |")
    md.append("")
# Per-round ratios (the servers of a round ran minutes apart at most, so a
# host that drifts between rounds cancels out), and their median.
md += ["**per-round ratios** (median over rounds, then each round's)", "",
       "| connections | best duality / best memcached ops/s | lowest duality / memcached -t 1 CPU per op |",
       "|---|---|---|"]
for c in dict.fromkeys(r["connections"] for r in rows):
    ops, cpu = [], []
    for rnd in dict.fromkeys(r["round"] for r in rows):
        here = {r["server"]: r for r in rows if (r["connections"], r["round"]) == (c, rnd)}
        d_ops = max(float(r["ops_per_sec"]) for l, r in here.items() if l.startswith("duality"))
        m_ops = max(float(r["ops_per_sec"]) for l, r in here.items() if l.startswith("memcached"))
        d_cpu = min(float(r["server_cpu_us_per_op"]) for l, r in here.items() if l.startswith("duality"))
        ops.append(d_ops / m_ops)
        cpu.append(d_cpu / float(here["memcached-t1"]["server_cpu_us_per_op"]))
    each = lambda v: ", ".join(f"{x:.2f}" for x in v)
    md.append(f"| {c} | {statistics.median(ops):.2f} ({each(ops)}) | {statistics.median(cpu):.2f} ({each(cpu)}) |")
md.append("")
misses = sum(int(r["get_misses"]) for r in rows)
md.append(f"Get misses over all runs: {misses} (memaslap sets each key before it gets it).")
open(f"{out}/memaslap.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
EOF
