#!/usr/bin/env python3
"""Medians of ab.sh's lines: summary.py RESULTS [WHAT] > summary.md

WHAT: what one line's figure is per (default: multi-key get)."""
import re, sys, statistics
from collections import defaultdict
runs = defaultdict(list)
pat = re.compile(r"round \d+ (\S+): (\d+) keys x (\d+) B: ([\d.]+) us")
for line in open(sys.argv[1]):
    m = pat.match(line)
    if m:
        who, keys, size, us = m.groups()
        runs[(int(keys), int(size))].append((who, float(us)))
whos = []
for v in runs.values():
    for who, _ in v:
        if who not in whos:
            whos.append(who)
what = sys.argv[2] if len(sys.argv) > 2 else "multi-key get"
print(f"Server CPU µs per {what}, median of the rounds in " + sys.argv[1].split("/")[-1])
print()
print("| keys x value | " + " | ".join(whos) + " | " + " | ".join(f"{w} / memcached" for w in whos if w != "memcached") + " |")
print("|---" * (2 * len(whos)) + "|")
for (keys, size), v in sorted(runs.items()):
    med = {w: statistics.median(u for x, u in v if x == w) for w in whos}
    ratios = [f"{med[w] / med['memcached']:.2f}" for w in whos if w != "memcached"]
    print(f"| {keys} x {size} B | " + " | ".join(f"{med[w]:.1f}" for w in whos) + " | " + " | ".join(ratios) + " |")
