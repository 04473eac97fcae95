#!/usr/bin/env python3
"""Each hand-off server's requests/s and server CPU per request over
Knot-C's, per run and point, from the http.json files beside this script.
Usage: python3 ratios.py > ratios.txt"""
import json, os

here = os.path.dirname(os.path.abspath(__file__))
for run in sorted(d for d in os.listdir(here) if d.startswith("run-")):
    rows = json.load(open(os.path.join(here, run, "http.json")))
    by = {(r["server"], r["file"], r["clients"]): r for r in rows}
    for (server, size, clients), r in sorted(by.items()):
        if server == "duality-knot-c":
            continue
        k = by[("duality-knot-c", size, clients)]
        print(f"{run} {server} {size} {clients} clients: requests/s "
              f"{r['requests_per_sec'] / k['requests_per_sec']:.2f}, CPU/request "
              f"{r['cpu_us_per_request'] / k['cpu_us_per_request']:.2f} x Knot-C")
