#!/usr/bin/env python3
"""Medians over the runs in each of unix/, tcp/, pipeline32/ (written by
run.sh): per server row and client count, coop vs defer txn/s, server CPU
per transaction and, where memcached ran in the same run, CPU vs memcached -t 1."""
import glob, json, os, statistics, sys

root = sys.argv[1]
print("# Ring task-work mode A/B: COOP_TASKRUN (`DUALITY_URING_COOP=1`) vs DEFER_TASKRUN (default)\n")
print("Medians over the runs of each mode (runs taking turns; see run.sh). `defer/coop`: ratio of the medians.\n")
for part in ["unix", "tcp", "pipeline32"]:
    rows = {}
    for mode in ["coop", "defer"]:
        for f in sorted(glob.glob(os.path.join(root, part, f"{mode}-*", "results.json"))):
            for r in json.load(open(f)):
                rows.setdefault((r["clients"], r["server"]), {}).setdefault(mode, []).append(r)
    if not rows:
        continue
    cmd = open(sorted(glob.glob(os.path.join(root, part, "defer-*", "table.md")))[0]).read().split("\n")[2]
    print(f"## {part}\n\n{cmd} (`coop`: the same with `DUALITY_URING_COOP=1`)\n")
    print("| server | clients | runs | coop txn/s | defer txn/s | defer/coop | coop CPU µs/txn | defer CPU µs/txn | coop CPU vs memcached -t 1 | defer CPU vs memcached -t 1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    med = lambda rs, k: statistics.median(r[k] for r in rs) if rs and all(r.get(k) is not None for r in rs) else None
    for (clients, server) in sorted(rows):
        c, d = rows[(clients, server)].get("coop", []), rows[(clients, server)].get("defer", [])
        ct, dt = med(c, "tps_mean"), med(d, "tps_mean")
        cc, dc = med(c, "cpu_us_per_txn"), med(d, "cpu_us_per_txn")
        cm, dm = med(c, "cpu_vs_memcached"), med(d, "cpu_vs_memcached")
        f = lambda x, p="{:,.0f}": "-" if x is None else p.format(x)
        ratio = "-" if not ct or not dt else f"{dt / ct:.2f}"
        print(f"| {server} | {clients} | {len(c)}/{len(d)} | {f(ct)} | {f(dt)} | {ratio} | {f(cc, '{:.2f}')} | {f(dc, '{:.2f}')} | {f(cm, '{:.2f}')} | {f(dm, '{:.2f}')} |")
    print()
