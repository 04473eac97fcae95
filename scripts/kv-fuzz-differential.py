#!/usr/bin/env python3
"""Random differential test of `duality kv` against memcached.

Where tests/kv_differential.rs replays a fixed corpus, this generates
command sequences at random (seeded, so a divergence can be replayed): text
storage, retrieval, incr, delete, touch and meta commands over four keys,
with bad numbers, bad flags, wrong data lengths, noreply, and pipelines of
up to six requests in one write; with `--protocol binary`, binary frames
instead (see `BinGen`). Each seed runs on a fresh memcached and a
fresh `duality kv`, one connection each (or `--conns N`, each write on
one of them picked at random); every write is followed by a
no-op (meta `mn`, or a binary NOOP) and the answers up to its own are
compared. The first
divergence of a seed stops it and is printed with the earlier requests that
named the same key (`--history all`: every request).

Left out, since the README's "Deviations from memcached" table documents
them and they would be found at once: numbers that do not fit 32 bits,
negative 64-bit numbers, meta `E`/`x`/`s` on `ms`/`N` on an appending `ms`,
`decr`, incr wraps and numbers with leading zeros (the padding of a number
grown shorter), an `incr` or `ma` pipelined behind a read of its key
(memcached then copies the item, losing its marks), `ma`'s `T` (lost
where memcached copies the item, as when the number gains a digit) and
base64 keys (memcached drops their mark where it copies an item: by
`append`, or an incr that gains a digit). Masked: the version string,
meta `t` (TTLs tick apart) and `l` (last access, a documented deviation).
Read a divergence against the table before calling it a bug, and replay
it (the same seed) before trusting it.

Loopback only; both servers are stopped by their PIDs. Exit status 1 if
any seed diverged.

    scripts/kv-fuzz-differential.py target/release/duality \
        [--seeds 1-20] [--count 3000] [--memcached memcached] \
        [--history key|all] [--protocol text|binary] [--conns N] \
        [-- DUALITY_KV_ARGS...]

e.g. `-- --model amped:1` or `-- --model sped --io epoll`.
"""

import argparse
import os
import random
import re
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback import free_port, wait_listening  # noqa: E402

QUIET = 0.3  # seconds without bytes before an answer counts as incomplete


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(QUIET)
        self.buf = b""

    PROBE = b"mn\r\n"

    def exchange(self, req):
        """Sends `req` and a no-op; the answers before the no-op's."""
        try:
            self.s.sendall(req + self.PROBE)
        except OSError:
            return b"<closed>"
        while True:
            end = self.probe_answer()
            if end is not None:
                out, self.buf = self.buf[: end[0]], self.buf[end[1] :]
                return out
            try:
                d = self.s.recv(65536)
            except socket.timeout:
                out, self.buf = self.buf + b"<silent>", b""
                return out
            except OSError:  # reset
                d = b""
            if not d:
                out, self.buf = self.buf + b"<closed>", b""
                return out
            self.buf += d

    def probe_answer(self):
        """Where the no-op's answer starts and ends in the buffer, if there."""
        k = self.buf.find(b"MN\r\n")
        while k > 0 and self.buf[k - 2 : k] != b"\r\n":
            k = self.buf.find(b"MN\r\n", k + 1)
        return (k, k + 4) if k >= 0 else None


class BinConn(Conn):
    """A connection speaking the binary protocol: the probe is a NOOP."""

    END = 0xFEEDF00D
    PROBE = None  # a NOOP frame with opaque END, set after `frame`

    def probe_answer(self):
        at = 0
        while len(self.buf) - at >= 24:
            body = struct.unpack(">I", self.buf[at + 8 : at + 12])[0]
            if len(self.buf) - at < 24 + body:
                return None
            head = self.buf[at : at + 24]
            if head[0] == 0x81 and head[1] == 0x0A and head[12:16] == struct.pack(">I", self.END):
                return (at, at + 24 + body)
            at += 24 + body
        return None


def value(r):
    """A value: a number, a short string, or now and then a large one
    (around the 64 KiB a connection buffers before a value goes straight
    into its item, or over the 1 MiB item limit)."""
    if r.random() < 0.3:
        return str(r.randrange(1, 100000)).encode()
    if r.random() < 0.02:
        n = r.choice([65535, 65536, 65537, 200000, (1 << 20) + 10])
        return bytes(r.choice(b"abc") for _ in range(16)) * (n // 16) + b"z" * (n % 16)
    return b"x" + bytes(r.choice(b"0123456789abc") for _ in range(r.choice([0, 1, 2, 4, 9, 19])))


def frame(op, key=b"", extras=b"", value=b"", cas=0, opaque=0):
    """A binary request frame."""
    body = extras + key + value
    return (
        struct.pack(">BBHBBHIIQ", 0x80, op, len(key), len(extras), 0, 0, len(body), opaque, cas)
        + body
    )


BinConn.PROBE = frame(0x0A, opaque=BinConn.END)


class BinGen:
    """The random binary requests of one seed: get/getq/getk/getkq,
    set/add/replace (and quiet), append/prepend, delete, incr (with initial
    values and no-vivify), touch, gat/gatq/gatk, flush, noop; CAS
    uniques from earlier answers half the time; a few frames with extras of
    the wrong length."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.keys = [b"b%d_k%d" % (seed, i) for i in range(4)]
        self.cas = {}
        self.opaque = 0

    def saw(self, answer):
        at = 0
        while len(answer) - at >= 24 and answer[at] == 0x81:
            op, klen, elen = answer[at + 1], *struct.unpack(">H", answer[at + 2 : at + 4]), answer[at + 4]
            body = struct.unpack(">I", answer[at + 8 : at + 12])[0]
            cas = struct.unpack(">Q", answer[at + 16 : at + 24])[0]
            if op in (0x0C, 0x0D, 0x23, 0x24) and klen and cas:
                key = answer[at + 24 + elen : at + 24 + elen + klen]
                self.cas[key] = cas
            at += 24 + body

    def unique(self, key):
        known = self.cas.get(key)
        if known and self.r.random() < 0.5:
            return known
        return self.r.choice([0, 0, 0, 1, 5, 2**64 - 1])

    def value(self):
        return value(self.r)

    def exptime(self):
        return self.r.choice([0, 0, 0, 100000, 1000])

    def one(self):
        r = self.r
        k = r.choice(self.keys)
        self.opaque += 1
        o = self.opaque
        c = r.randrange(20)
        if c < 6:
            op = r.choice([0x01, 0x02, 0x03, 0x11, 0x12, 0x13])
            extras = struct.pack(">II", r.choice([0, 1, 2**32 - 1]), self.exptime())
            if r.random() < 0.05:
                extras = extras[: r.choice([0, 4])]
            return frame(op, k, extras, self.value(), self.unique(k) if r.random() < 0.3 else 0, o)
        if c < 10:
            op = r.choice([0x00, 0x09, 0x0C, 0x0D])
            return frame(op, k, b"" if r.random() > 0.03 else b"\0\0\0\0", opaque=o)
        if c < 12:
            op = r.choice([0x0E, 0x0F, 0x19, 0x1A])
            return frame(op, k, b"", self.value(), self.unique(k) if r.random() < 0.2 else 0, o)
        if c < 13:
            return frame(r.choice([0x04, 0x14]), k, cas=self.unique(k) if r.random() < 0.3 else 0, opaque=o)
        if c < 16:
            # incr only, by little, from no 0 (no decr, no wrap, no
            # leading zero once appended to: a number grown shorter is
            # padded in memcached, a documented deviation).
            op = r.choice([0x05, 0x15])
            expiry = r.choice([0, 0, 1000, 0xFFFFFFFF])
            extras = struct.pack(">QQI", r.choice([0, 1, 5]), r.choice([1, 13, 99]), expiry)
            return frame(op, k, extras, cas=self.unique(k) if r.random() < 0.2 else 0, opaque=o)
        if c < 17:
            return frame(0x1C, k, struct.pack(">I", self.exptime()), opaque=o)
        if c < 19:
            op = r.choice([0x1D, 0x1E, 0x23, 0x24])
            return frame(op, k, struct.pack(">I", self.exptime()), opaque=o)
        if r.random() < 0.3:
            return frame(r.choice([0x08, 0x18]), extras=r.choice([b"", struct.pack(">I", 0)]), opaque=o)
        return frame(0x0A, opaque=o)

    def request(self):
        req = self.one()
        if self.r.random() < 0.3:
            for _ in range(self.r.randrange(1, 6)):
                req += self.one()
        return req


class Gen:
    """The random requests of one seed."""

    META = {
        b"mg": [b"v", b"k", b"f", b"s", b"c", b"q", b"O123", b"T100", b"N30", b"h", b"l", b"t", b"u"],
        b"ms": [b"c", b"k", b"q", b"O9", b"T0", b"F5", b"I", b"MA", b"MP", b"MR", b"MS", b"ME", b"C1"],
        b"md": [b"q", b"k", b"O1", b"I", b"T30", b"C1"],
        # N with J: a vivified 0 appended to reads as a number with a
        # leading zero, which an incr shortens (the padding deviation).
        b"ma": [b"N0 J13", b"J13", b"D2", b"MI", b"M+", b"v", b"t", b"c", b"q", b"k", b"O7", b"C1"],
    }

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.keys = [b"f%d_k%d" % (seed, i) for i in range(4)]
        # The CAS uniques memcached last showed per key (`gets`, `gats`):
        # both servers hand out the same ones, so a compare can succeed.
        self.cas = {}

    def saw(self, answer):
        for key, unique in re.findall(rb"VALUE (\S+) \d+ \d+ (\d+)\r\n", answer):
            self.cas[key] = unique

    def unique(self, key):
        known = self.cas.get(key)
        if known and self.r.random() < 0.5:
            return known
        return self.r.choice([b"0", b"1", b"5", b"abc", b"18446744073709551616"])

    def value(self):
        return value(self.r)

    def exptime(self):
        return self.r.choice([b"0", b"0", b"0", b"-1", b"100000", b"1000"])

    def one(self):
        r = self.r
        c, k = r.randrange(20), r.choice(self.keys)
        if c < 5:
            cmd = r.choice([b"set", b"add", b"replace", b"append", b"prepend", b"cas"])
            v = self.value()
            n = len(v)
            if r.random() < 0.05:
                n = r.choice([n + 1, max(0, n - 1)])
            flags = r.choice([b"0", b"1", b"4294967295", b"x"])
            unique = b" " + self.unique(k) if cmd == b"cas" else b""
            noreply = b" noreply" if r.random() < 0.1 else b""
            return b"%s %s %s %s %d%s%s\r\n%s\r\n" % (cmd, k, flags, self.exptime(), n, unique, noreply, v)
        if c < 8:
            cmd = r.choice([b"get", b"gets", b"gat", b"gats"])
            keys = b" ".join(r.choice(self.keys) for _ in range(r.randrange(0, 3)))
            if cmd in (b"gat", b"gats"):
                return b"%s %s %s\r\n" % (cmd, self.exptime(), keys)
            return b"%s %s\r\n" % (cmd, keys)
        if c < 10:
            delta = r.choice([b"0", b"1", b"5", b"abc", b"18446744073709551616", b"10 "])
            return b"incr %s %s%s\r\n" % (k, delta, r.choice([b"", b"", b" noreply"]))
        if c < 11:
            return b"delete %s%s\r\n" % (k, r.choice([b"", b" 0", b" 1", b" noreply"]))
        if c < 12:
            return b"touch %s %s\r\n" % (k, self.exptime())
        if c < 13:
            return r.choice([b"flush_all\r\n", b"flush_all noreply\r\n", b"flush_all 0\r\n"])
        m = r.choice(list(self.META))
        flags = r.sample(self.META[m], r.randrange(0, 4))
        if m != b"mg" and r.random() < 0.2:
            flags.append(b"C" + self.unique(k))
        flags = b" ".join(flags)
        if m == b"ms":
            v = self.value()
            return b"ms %s %d %s\r\n%s\r\n" % (k, len(v), flags, v)
        return b"%s %s %s\r\n" % (m, k, flags)

    def request(self):
        req = self.one()
        if self.r.random() < 0.3:
            read = self.reads(req)
            for _ in range(self.r.randrange(1, 6)):
                nxt = self.one()
                # memcached copies an item an unsent answer still holds: an
                # incr behind a read of its key in one batch drops marks
                # and `T` (a documented deviation), so none is generated.
                while nxt.split()[0] in (b"incr", b"ma") and nxt.split()[1] in read:
                    nxt = self.one()
                read |= self.reads(nxt)
                req += nxt
        return req

    @staticmethod
    def reads(req):
        """The keys the request `req` (one command) reads."""
        words = req.split(b"\r\n")[0].split()
        if words[0] in (b"get", b"gets"):
            return set(words[1:])
        if words[0] in (b"gat", b"gats"):
            return set(words[2:])
        return {words[1]} if words[0] == b"mg" else set()


def mask(answer):
    answer = re.sub(rb"VERSION [^\r]*", b"VERSION", answer)
    return re.sub(rb" ([tl])\d+", rb" \1~", answer)


def same(a, b):
    """Equal once masked; or both closed where memcached's answer is a
    prefix of duality's: a close with unread input resets the connection,
    which destroys answers the client had not read yet (a documented
    deviation: duality lingers, and they arrive)."""
    a, b = mask(a), mask(b)
    if a == b:
        return True
    end = b"<closed>"
    return a.endswith(end) and b.endswith(end) and b.startswith(a[: -len(end)])


def run_seed(seed, count, args):
    mc_port, dk_port = free_port(), free_port()
    mc_cmd = [args.memcached, "-p", str(mc_port), "-U", "0", "-t", "1", "-l", "127.0.0.1"]
    if os.geteuid() == 0:
        mc_cmd += ["-u", "nobody"]
    mc = subprocess.Popen(mc_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dk = subprocess.Popen(
        [args.binary, "kv", "-p", str(dk_port), *args.duality],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(mc_port, mc, "memcached")
        wait_listening(dk_port, dk, "duality kv")
        binary = args.protocol == "binary"
        kind = BinConn if binary else Conn
        # --conns pairs of connections (one to each server); each write goes
        # to a pair picked by a generator of its own, so a seed sends the
        # same requests whatever --conns is.
        pairs = [[kind(p) for p in (mc_port, dk_port)] for _ in range(args.conns)]
        pick = random.Random(seed ^ 0x5EED)
        gen, history = (BinGen if binary else Gen)(seed), []
        for i in range(count):
            req = gen.request()
            n = pick.randrange(args.conns)
            a, b = (c.exchange(req) for c in pairs[n])
            history.append((i, n, req, a, b))
            gen.saw(a)
            if a.endswith(b"<closed>") and b.endswith(b"<closed>"):
                # Both ended the connection alike: go on on new ones.
                pairs[n] = [kind(p) for p in (mc_port, dk_port)]
            if not same(a, b):
                print(f"seed {seed}: request {i} diverged")
                if binary:
                    klen, elen = struct.unpack(">H", req[2:4])[0], req[4]
                    key = req[24 + elen : 24 + elen + klen] or b"<none>"
                else:
                    key = req.split()[1] if len(req.split()) > 1 else b""
                for j, hn, hreq, ha, hb in history[:-1]:
                    if args.history == "all" or key in hreq:
                        print(f"  {j:5} c{hn} {hreq!r} -> {ha!r}" + ("" if ha == hb else f" / duality {hb!r}"))
                print(f"  {i:5} c{n} {req!r}\n        memcached: {a!r}\n        duality:   {b!r}")
                return False
        return True
    finally:
        for p in (mc, dk):
            p.terminate()
        for p in (mc, dk):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--seeds", default="1-20", help="A-B or one seed")
    ap.add_argument("--count", type=int, default=3000, help="writes per seed")
    ap.add_argument("--memcached", default="memcached")
    ap.add_argument("--history", choices=["key", "all"], default="key")
    ap.add_argument("--protocol", choices=["text", "binary"], default="text")
    ap.add_argument("--conns", type=int, default=1, help="connections to each server, used in turn at random")
    args = ap.parse_args(argv)
    args.duality = extra
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    diverged = [s for s in seeds if not run_seed(s, args.count, args)]
    print(f"{len(seeds)} seeds of {args.count} writes, duality kv {' '.join(extra)}: "
          f"{len(diverged)} diverged {diverged if diverged else ''}".rstrip())
    sys.exit(1 if diverged else 0)


if __name__ == "__main__":
    main()
