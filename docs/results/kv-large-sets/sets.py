#!/usr/bin/env python3
"""Server CPU per large set: sets.py PORT PID NKEYS VSIZE SETS

Sends SETS sets of VSIZE-byte values over NKEYS keys (overwriting them
round after round), 8 sets per write, waits for their 8 answers, and
reads the server's utime+stime from /proc (10 ms ticks)."""
import os, socket, sys, time

port, pid, nkeys, vsize, sets = map(int, sys.argv[1:6])
s = socket.create_connection(("127.0.0.1", port))
val = b"v" * vsize
reqs = [b"set key:%06d 0 0 %d\r\n" % (i, vsize) + val + b"\r\n" for i in range(nkeys)]


def cpu():
    t = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(t[11]) + int(t[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])


PIPE = 8
c0, t0 = cpu(), time.time()
n = 0
for _ in range(sets // PIPE):
    s.sendall(b"".join(reqs[(n + j) % nkeys] for j in range(PIPE)))
    n += PIPE
    buf = b""
    while buf.count(b"\r\n") < PIPE:
        buf += s.recv(65536)
    if buf != b"STORED\r\n" * PIPE:
        sys.exit(f"unexpected answer: {buf[:80]!r}")
c1 = cpu()
print(f"{nkeys} keys x {vsize} B: {(c1 - c0) / n * 1e6:.1f} us server CPU per set; "
      f"wall {time.time() - t0:.2f}s rss {rss_kib()} KiB")
