#!/usr/bin/env python3
"""Instructions per request of two callgrind runs (scripts/callgrind-kv.sh),
function by function (self cost), and the functions that moved most.

    scripts/callgrind-diff.py A.callgrind B.callgrind [REQUESTS] [TOP]

Work done per unit of time rather than per request (the loops' histogram
snapshots and their zeroing, the store's sweeper, start-up) grows with how
long the run took under valgrind; it is listed but left out of the totals.
Needs callgrind_annotate (valgrind)."""
import collections
import re
import subprocess
import sys

# Functions whose cost follows the clock or the start, not the requests.
TIMED = ("memset", "Histogram<T>::add", "publish_timed", "sweep", "EventLoop::new", "calibrate")


def self_costs(path):
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", path],
        capture_output=True, text=True, check=True).stdout
    costs = collections.Counter()
    for line in out.splitlines():
        if re.search(r"\(\d[\d,]*x\)", line):  # a call site, not a function
            continue
        m = re.match(r"\s*([\d,]+) \([\s\d.]+%\)\s+(.*?):(.*?)( \[.*\])?$", line)
        if m and "PROGRAM TOTALS" not in line:
            costs[m.group(3).strip()] += int(m.group(1).replace(",", ""))
    return costs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a, b = self_costs(sys.argv[1]), self_costs(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200000
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    timed = lambda k: any(t in k for t in TIMED)
    ta = sum(v for k, v in a.items() if not timed(k)) / n
    tb = sum(v for k, v in b.items() if not timed(k)) / n
    print(f"A = {sys.argv[1]}, B = {sys.argv[2]}, {n} requests each")
    print(f"instructions per request (self costs, time-driven work left out): "
          f"A {ta:.0f}, B {tb:.0f}, B - A {tb - ta:+.0f} ({tb / ta - 1:+.1%})")
    print(f"time-driven work, per request of these runs: A {sum(v for k, v in a.items() if timed(k)) / n:.0f}, "
          f"B {sum(v for k, v in b.items() if timed(k)) / n:.0f}")
    diffs = sorted(((b[k] - a[k]) / n, k) for k in set(a) | set(b) if not timed(k))
    print(f"\nfewer in B (top {top}):")
    for d, k in diffs[:top]:
        print(f"  {d:+8.1f}  {k[:110]}")
    print(f"\nmore in B (top {top}):")
    for d, k in reversed(diffs[-top:]):
        print(f"  {d:+8.1f}  {k[:110]}")


if __name__ == "__main__":
    main()
