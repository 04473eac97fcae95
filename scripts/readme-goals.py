#!/usr/bin/env python3
"""Replaces the README's goal table with what `duality bench goals` prints.

Usage: scripts/readme-goals.py [BINARY]   (default: target/release/duality)

Run from the repository root after pointing a line of
docs/results/goals.txt at a newer committed run; tests/bench_goals.rs
fails while the README's table and the command's output differ.
"""
import subprocess
import sys

BEGIN = "<!-- bench goals: begin -->\n"
END = "<!-- bench goals: end -->"

binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/duality"
table = subprocess.run(
    [binary, "bench", "goals"], capture_output=True, text=True, check=True
).stdout
with open("README.md", encoding="utf-8") as f:
    readme = f.read()
start = readme.index(BEGIN) + len(BEGIN)
end = readme.index(END, start)
with open("README.md", "w", encoding="utf-8") as f:
    f.write(readme[:start] + table + readme[end:])
