# Medians of ab.sh's output: summary.py RESULTS > summary.md. Per
# configuration (items, value size, how the keys were asked for, keys), each server's median server CPU per get over the rounds,
# and the median of the per-round ratios to the first server and to memcached.
import re, statistics, sys
from collections import defaultdict

line = re.compile(r"round (\d+) (\S+): (\d+) items x (\d+) B, (\w+) of (\d+): ([\d.]+) us server CPU per get")
cpu = defaultdict(dict)  # (items, vsize, keys) -> {(round, server): us}
servers = []
for l in open(sys.argv[1]):
    m = line.match(l)
    if not m:
        sys.exit(f"not a result line: {l.strip()}")
    r, srv, items, vsize, style, keys, us = m.groups()
    if srv not in servers:
        servers.append(srv)
    cpu[(int(items), int(vsize), style, int(keys))][(int(r), srv)] = float(us)
first = servers[0]
print("Server CPU per get (the keys asked for together: one multi-key `get`, `pipe` one-key gets in a row, `bin` binary GETKQs and a NOOP; `set` one-key sets in a row and `mix` a set in ten one-key requests, where \"per get\" is per run of that many requests), µs (median over rounds); ratios: median of per-round ratios.\n")
print(f"| items | value B | asked as | keys | server | µs per get | ns per key | vs {first} | vs memcached |")
print("|---|---|---|---|---|---|---|---|---|")
for cfg, runs in cpu.items():
    rounds = sorted({r for r, _ in runs})
    for srv in servers:
        mine = [runs[(r, srv)] for r in rounds if (r, srv) in runs]
        def ratio(other):
            rs = [runs[(r, srv)] / runs[(r, other)] for r in rounds if (r, srv) in runs and (r, other) in runs]
            return f"{statistics.median(rs):.2f}" if rs else "-"
        med = statistics.median(mine)
        print(f"| {cfg[0]:,} | {cfg[1]} | {cfg[2]} | {cfg[3]} | {srv} | {med:.2f} | {med / cfg[3] * 1000:.0f} | {ratio(first)} | {ratio('memcached')} |")
