#!/usr/bin/env python3
"""Per run of run.sh (old-N: DUALITY_URING_COOP=1 DUALITY_IDLE_SPIN_US=30,
new-N: the build's defaults): cheap requests' p99 (ms) per load and
server, and inline's heavy p50 (the host's cost of a compression)."""
import glob, json, os, sys
root = sys.argv[1]
print("# Offload: 8a1939e's defaults (new) vs 5d4af8c's runtime behaviour (old: cooperative task work, 30 µs spin), taking turns\n")
print("| run | load | inline | pool | adaptive | adaptive, no heavy | nginx gzip on | inline heavy p50 | pool raised (pool / adaptive) |")
print("|---|---|---|---|---|---|---|---|---|")
for d in sorted(glob.glob(os.path.join(root, "*-[0-9]")), key=lambda d: (d[-1], d)):
    rows = json.load(open(os.path.join(d, "offload.json")))
    for load in sorted({r["load_pct"] for r in rows}):
        by = {r["server"]: r for r in rows if r["load_pct"] == load}
        g = lambda s, k: by[s][k] if s in by and by[s].get(k) is not None else float("nan")
        print(f"| {os.path.basename(d)} | {load} | {g('duality inline','cheap_p99_ms'):.3g} | {g('duality pool','cheap_p99_ms'):.3g} | {g('duality adaptive','cheap_p99_ms'):.3g} | {g('duality adaptive, no heavy','cheap_p99_ms'):.3g} | {g('nginx gzip on','cheap_p99_ms'):.4g} | {g('duality inline','heavy_p50_ms'):.3g} | {by.get('duality pool',{}).get('pool_raises','-')} / {by.get('duality adaptive',{}).get('pool_raises','-')} |")
