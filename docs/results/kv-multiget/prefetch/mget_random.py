# One client of ab.sh: stores NITEMS values of VSIZE bytes (keys
# key:0000000...), then sends GETS gets of NKEYS keys picked at random (the
# same picks for every server: a fixed seed), 8 gets per write, checks that
# every key was found, and prints the server's utime+stime per get and per
# key from /proc (10 ms ticks: GETS keeps a run >= 0.3 s).
import os, random, socket, sys, time

port, pid, nitems, vsize, nkeys, gets = map(int, sys.argv[1:7])
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
writes = []
for _ in range(gets // PIPE):
    writes.append(b"".join(
        b"get " + b" ".join(b"key:%07d" % rng.randrange(nitems) for _ in range(nkeys)) + b"\r\n"
        for _ in range(PIPE)))


def cpu():
    t = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(t[11]) + int(t[12])) / os.sysconf("SC_CLK_TCK")


c0 = cpu()
t0 = time.time()
found = 0
tail = b"\n"  # every VALUE line follows a newline, the first one too
for w in writes:
    s.sendall(w)
    n = 0
    while n < PIPE:
        d = s.recv(1 << 20)
        if not d:
            sys.exit("server closed the connection")
        # The tails are too short to hold a whole marker: none counted twice.
        found += (tail[-6:] + d).count(b"\nVALUE ")
        n += (tail[-4:] + d).count(b"END\r\n")
        tail = d[-6:]
c1 = cpu()
done = len(writes) * PIPE
if found != done * nkeys:
    sys.exit(f"{found} values found of {done * nkeys} asked: the store dropped some")
print(f"{nitems} items x {vsize} B, get of {nkeys}: {(c1 - c0) / done * 1e6:.2f} us server CPU "
      f"per get, {(c1 - c0) / done / nkeys * 1e9:.0f} ns per key; wall {time.time() - t0:.2f}s")
