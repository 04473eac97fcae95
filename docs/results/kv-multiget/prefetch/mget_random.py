# One client of ab.sh: stores NITEMS values of VSIZE bytes (keys
# key:0000000...), then asks for NKEYS keys picked at random (the same picks
# for every server: a fixed seed) GETS times, 8 times per write, checks that
# every key was found, and prints the server's utime+stime per NKEYS keys
# and per key from /proc (10 ms ticks: GETS keeps a run >= 0.3 s). STYLE
# (default get): `get`, one `get` of NKEYS keys; `pipe`, NKEYS one-key
# `get`s in a row; `bin`, NKEYS binary GETKQ frames and a NOOP (a binary
# client's multi-get), on a second connection; `set`, NKEYS `set`s of
# stored keys in a row (new values of VSIZE bytes, each answered); `mix`,
# NKEYS one-key requests in a row, every tenth a `set`, the others `get`s.
# The figures are per request asked (a get, or a set) and per key.
import os, random, socket, sys, time

import struct

port, pid, nitems, vsize, nkeys, gets = map(int, sys.argv[1:7])
style = sys.argv[7] if len(sys.argv) > 7 else "get"
s = socket.create_connection(("127.0.0.1", port))
value = b"v" * vsize
batch = []
for i in range(nitems):
    batch.append(b"set key:%07d 0 0 %d noreply\r\n%s\r\n" % (i, vsize, value))
    if len(batch) == 2000:
        s.sendall(b"".join(batch))
        batch = []
s.sendall(b"".join(batch) + b"mn\r\n")
buf = b""
while not buf.endswith(b"MN\r\n"):
    d = s.recv(65536)
    if not d:
        sys.exit("server closed the connection while loading")
    buf = buf[-8:] + d
rng = random.Random(79)
PIPE = 8


def keys():
    return [b"key:%07d" % rng.randrange(nitems) for _ in range(nkeys)]


def unit():
    if style == "get":
        return b"get " + b" ".join(keys()) + b"\r\n"
    if style == "pipe":
        return b"".join(b"get " + k + b"\r\n" for k in keys())
    if style == "set":
        return b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, vsize, value) for k in keys())
    if style == "mix":
        return b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, vsize, value) if i % 10 == 9 else b"get " + k + b"\r\n"
                        for i, k in enumerate(keys()))
    if style == "bin":
        frames = [struct.pack(">BBHBBHIIQ", 0x80, 0x0D, len(k), 0, 0, 0, len(k), 0, 0) + k for k in keys()]
        return b"".join(frames) + struct.pack(">BBHBBHIIQ", 0x80, 0x0A, 0, 0, 0, 0, 0, 0, 0)
    sys.exit(f"unknown style {style}")


writes = [b"".join(unit() for _ in range(PIPE)) for _ in range(gets // PIPE)]
if style == "bin":
    s.close()
    s = socket.create_connection(("127.0.0.1", port))


def cpu():
    t = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(t[11]) + int(t[12])) / os.sysconf("SC_CLK_TCK")


c0 = cpu()
t0 = time.time()
found = 0
tail = b"\n"  # every VALUE line follows a newline, the first one too
ends = PIPE * nkeys if style in ("pipe", "set", "mix") else PIPE
for w in writes:
    s.sendall(w)
    n = 0
    if style == "bin":
        buf = b""
        while n < ends:
            d = s.recv(1 << 20)
            if not d:
                sys.exit("server closed the connection")
            buf += d
            while len(buf) >= 24:
                op, blen = buf[1], struct.unpack(">I", buf[8:12])[0]
                if len(buf) < 24 + blen:
                    break
                found += op == 0x0D
                n += op == 0x0A
                buf = buf[24 + blen:]
        continue
    while n < ends:
        d = s.recv(1 << 20)
        if not d:
            sys.exit("server closed the connection")
        # The tails are too short to hold a whole marker: none counted twice.
        found += (tail[-6:] + d).count(b"\nVALUE ")
        stored = (tail[-7:] + d).count(b"STORED\r\n")
        found += stored
        n += (tail[-4:] + d).count(b"END\r\n") + stored
        tail = d[-8:]
c1 = cpu()
done = len(writes) * PIPE
if found != done * nkeys:
    sys.exit(f"{found} values found or stored of {done * nkeys} asked: the store dropped some")
print(f"{nitems} items x {vsize} B, {style} of {nkeys}: {(c1 - c0) / done * 1e6:.2f} us server CPU "
      f"per get, {(c1 - c0) / done / nkeys * 1e9:.0f} ns per key; wall {time.time() - t0:.2f}s")
