#!/usr/bin/env python3
"""Per-pair ratios (new / old, rounds taken in turn) of the A/B runs beside
this script, and their medians per point. Usage: python3 ratios.py > ratios.txt"""
import glob, json, os, re, statistics

here = os.path.dirname(os.path.abspath(__file__))

def http(run):
    j = json.load(open(glob.glob(os.path.join(run, "*.json"))[0]))
    return {(r["file"], r["clients"]): (r["requests_per_sec"], r["cpu_us_per_request"]) for r in j}

def kv(run):
    rows = {}
    for line in open(os.path.join(run, "table.md")):
        m = re.match(r"\| duality symped:2 \| (\d+) \| ([\d,]+) ±.*?\| ([\d.]+) \| [\d.]+ \| - \|", line)
        if m:
            rows[("cache", int(m.group(1)))] = (float(m.group(2).replace(",", "")), float(m.group(3)))
    return rows

for name, read in [("ab-1", http), ("ab-2", http), ("kv-ab", kv)]:
    d = os.path.join(here, name)
    rounds = sorted({int(p.rsplit("-", 1)[1]) for p in os.listdir(d)})
    per = {}
    print(f"== {name}: new / old per round (req/s or txn/s; server CPU per request)")
    for r in rounds:
        old, new = read(os.path.join(d, f"dbin-base-{r}")), read(os.path.join(d, f"dbin-new-{r}"))
        for k in sorted(old):
            t, c = new[k][0] / old[k][0], new[k][1] / old[k][1]
            per.setdefault(k, []).append((t, c))
            print(f"round {r} {k[0]} {k[1]} clients: throughput {t:.3f}, CPU {c:.3f}")
    for k, v in sorted(per.items()):
        print(f"median {k[0]} {k[1]} clients: throughput {statistics.median(x for x, _ in v):.3f}, "
              f"CPU {statistics.median(y for _, y in v):.3f} ({len(v)} rounds)")
