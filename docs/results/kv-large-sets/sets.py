#!/usr/bin/env python3
"""Server CPU per large set: sets.py PORT PID NKEYS VSIZE SETS

Sends SETS sets of VSIZE-byte values over NKEYS keys (overwriting them
round after round), 8 sets per write, waits for their 8 answers, and
reads the server's utime+stime from /proc (10 ms ticks). PROTO=text
(`set`, the default), meta (`ms`) or binary (binary SET)."""
import os, socket, struct, sys, time

port, pid, nkeys, vsize, sets = map(int, sys.argv[1:6])
proto = os.environ.get("PROTO", "text")
s = socket.create_connection(("127.0.0.1", port))
val = b"v" * vsize


def request(i):
    key = b"key:%06d" % i
    if proto == "meta":
        return b"ms %s %d T0\r\n" % (key, vsize) + val + b"\r\n"
    if proto == "binary":
        # magic, SET, key length, 8 bytes of extras (flags, exptime).
        head = struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(key), 8, 0, 0, 8 + len(key) + vsize, i, 0)
        return head + struct.pack(">II", 0, 0) + key + val
    return b"set %s 0 0 %d\r\n" % (key, vsize) + val + b"\r\n"


reqs = [request(i) for i in range(nkeys)]
answer = {"text": b"STORED\r\n", "meta": b"HD\r\n"}.get(proto)


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
    if answer is None:
        # Eight 24-byte headers, status 0, no body.
        while len(buf) < 24 * PIPE:
            buf += s.recv(65536)
        if len(buf) != 24 * PIPE or any(buf[k + 6 : k + 8] != b"\0\0" for k in range(0, len(buf), 24)):
            sys.exit(f"unexpected answer: {buf[:48]!r}")
        continue
    while buf.count(b"\r\n") < PIPE:
        buf += s.recv(65536)
    if buf != answer * PIPE:
        sys.exit(f"unexpected answer: {buf[:80]!r}")
c1 = cpu()
print(f"{nkeys} keys x {vsize} B: {(c1 - c0) / n * 1e6:.1f} us server CPU per set; "
      f"wall {time.time() - t0:.2f}s rss {rss_kib()} KiB")
