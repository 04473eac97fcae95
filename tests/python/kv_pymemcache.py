"""pymemcache (a real memcached client, not written here) against `duality kv`.

Usage: python3 kv_pymemcache.py <tcp port> [<unix socket path>]

Exercises the classic commands through pymemcache's API (set get gets cas
incr decr delete touch get_many gets_many add replace append prepend
set_many delete_many flush_all stats version), gat/gats and the meta
commands through its raw_command API, and its serde (client flags).
Exits 0 and prints "ok <n> checks" when everything matched.
"""

import sys
import time

from pymemcache.client.base import Client
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheServerError,
    MemcacheUnknownCommandError,
)
from pymemcache.serde import pickle_serde

CHECKS = 0


def check(got, want, what):
    global CHECKS
    CHECKS += 1
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def raises(exc, fn, what, message=None):
    global CHECKS
    CHECKS += 1
    try:
        fn()
    except exc as e:
        if message is not None and message not in str(e):
            raise AssertionError(f"{what}: {exc.__name__} {e!r} lacks {message!r}")
        return
    raise AssertionError(f"{what}: no {exc.__name__}")


class KeepFlags:
    """A serde that hands back (value, flags) as the server sent them."""

    def serialize(self, key, value):
        return value, 0

    def deserialize(self, key, value, flags):
        return value, flags


def classic(c):
    check(c.set("k1", b"v1"), True, "set")
    check(c.get("k1"), b"v1", "get")
    check(c.get("missing"), None, "get miss")
    check(c.get("missing", default=b"d"), b"d", "get default")
    check(c.add("k1", b"x"), False, "add existing")
    check(c.add("k2", b"v2"), True, "add new")
    check(c.replace("nope", b"x"), False, "replace missing")
    check(c.replace("k2", b"V2"), True, "replace")
    check(c.append("k2", b">>"), True, "append")
    check(c.prepend("k2", b"<<"), True, "prepend")
    check(c.append("nope", b">>"), False, "append missing")
    check(c.get("k2"), b"<<V2>>", "after append/prepend")

    # Flags: 32-bit values round-trip (a serde that returns them).
    check(c.set("fl", b"x", flags=4294967295), True, "set flags")
    f = Client(c.server, serde=KeepFlags(), default_noreply=False, timeout=10)
    check(f.get("fl"), (b"x", 4294967295), "get with flags")
    check(f.get_many(["fl", "k1"]), {"fl": (b"x", 4294967295), "k1": (b"v1", 0)}, "flags")
    f.close()

    # gets / cas.
    value, cas = c.gets("k1")
    check(value, b"v1", "gets value")
    check(isinstance(cas, bytes) and int(cas) > 0, True, "gets cas")
    check(c.cas("k1", b"v1b", b"%d" % (int(cas) + 1)), False, "cas mismatch")
    check(c.cas("k1", b"v1b", cas), True, "cas match")
    check(c.cas("k1", b"v1c", cas), False, "cas stale")
    check(c.cas("nope", b"x", b"1"), None, "cas missing")
    check(c.get("k1"), b"v1b", "after cas")

    # incr / decr: exact values, wrap-around, floor at 0, errors.
    check(c.set("n", b"10"), True, "set counter")
    check(c.incr("n", 5), 15, "incr")
    check(c.decr("n", 20), 0, "decr floor")
    check(c.incr("n", 18446744073709551615), 18446744073709551615, "incr max")
    check(c.incr("n", 2), 1, "incr wraps")
    check(c.incr("nope", 1), None, "incr missing")
    check(c.decr("nope", 1), None, "decr missing")
    c.set("text", b"abc")
    raises(
        MemcacheClientError,
        lambda: c.incr("text", 1),
        "incr non-numeric",
        "cannot increment or decrement non-numeric value",
    )

    # delete.
    check(c.delete("k2"), True, "delete")
    check(c.delete("k2"), False, "delete missing")
    check(c.get("k2"), None, "deleted")

    # touch and expiry.
    check(c.touch("k1", 100), True, "touch")
    check(c.touch("nope", 100), False, "touch missing")
    check(c.set("gone", b"x", expire=-1), True, "set expired")
    check(c.get("gone"), None, "expired")

    # get_many / gets_many / set_many / delete_many.
    check(c.set_many({"m1": b"a", "m2": b"b", "m3": b"c"}), [], "set_many")
    check(
        c.get_many(["m1", "m2", "missing", "m3"]),
        {"m1": b"a", "m2": b"b", "m3": b"c"},
        "get_many",
    )
    many = c.gets_many(["m1", "m2"])
    check(sorted(many), ["m1", "m2"], "gets_many keys")
    check(many["m1"][0], b"a", "gets_many value")
    check(c.delete_many(["m1", "m2"]), True, "delete_many")
    check(c.get_many(["m1", "m2", "m3"]), {"m3": b"c"}, "after delete_many")

    # noreply (pymemcache's default for storage commands).
    q = Client(c.server, default_noreply=True, timeout=10)
    check(q.set("quiet", b"q"), True, "set noreply")
    check(q.delete("quiet"), True, "delete noreply")
    check(q.set("quiet", b"q2"), True, "set noreply again")
    # Requests on one connection run in order: once this answers, the
    # quiet ones before it have run.
    check(q.get("quiet"), b"q2", "noreply set stored")
    check(c.get("quiet"), b"q2", "visible to other connections")
    q.close()

    # Limits the server enforces.
    raises(
        MemcacheServerError,
        lambda: c.set("huge", b"x" * (2 * 1024 * 1024)),
        "value over -I",
        "object too large for cache",
    )
    check(c.get("k1"), b"v1b", "connection fine after a refused value")

    # Binary values, including the protocol's terminators.
    blob = bytes(range(256)) + b"\r\nEND\r\n"
    check(c.set("blob", blob), True, "set binary")
    check(c.get("blob"), blob, "get binary")

    stats = c.stats()
    check(stats[b"curr_items"] >= 5, True, "stats curr_items")
    check(b"limit_maxbytes" in stats, True, "stats limit_maxbytes")
    check(c.stats("settings")[b"model"].startswith(b"symped"), True, "stats settings")
    check(c.version().startswith(b"1.6.18-duality-kv-"), True, "version")
    raises(MemcacheUnknownCommandError, lambda: c.raw_command("bogus"), "unknown command")


def serde():
    s = Client(SERVER, serde=pickle_serde, default_noreply=False, timeout=10)
    for key, value in [
        ("s-str", "text"),
        ("s-int", 12345),
        ("s-dict", {"a": [1, 2, 3]}),
        ("s-bytes", b"raw"),
    ]:
        check(s.set(key, value), True, "serde set " + key)
        check(s.get(key), value, "serde get " + key)
    check(s.incr("s-int", 1), 12346, "serde incr")
    s.close()


def gat_and_meta(c):
    c.set("g", b"hello")
    # gat / gats: pymemcache has no method for them; raw_command sends them.
    check(c.raw_command("gat 100 g missing", "END\r\n"), b"VALUE g 0 5\r\nhello\r\n", "gat")
    reply = c.raw_command("gats 0 g", "END\r\n")
    check(reply.startswith(b"VALUE g 0 5 "), True, "gats")
    cas = int(reply.split(b"\r\n")[0].split(b" ")[4])
    check(c.gets("g")[1], b"%d" % cas, "gats cas")
    check(c.raw_command("gat 10 missing", "END\r\n"), b"", "gat miss")
    raises(
        MemcacheClientError,
        lambda: c.raw_command("gat x g", "\r\n"),
        "gat bad exptime",
        "invalid exptime argument",
    )

    # Meta commands: each request ends with `mn`, so a whole (possibly
    # quiet, possibly multi-line) answer is read up to `MN`.
    def meta(cmd):
        return c.raw_command(cmd + "\r\nmn", "MN\r\n")

    check(meta("mn"), b"", "mn")
    check(meta("ms mk 5 T0 F3\r\nworld"), b"HD\r\n", "ms")
    check(meta("mg mk v f t s k Oop"), b"VA 5 f3 t-1 s5 kmk Oop\r\nworld\r\n", "mg")
    check(c.get("mk"), b"world", "ms visible to get")
    check(meta("mg missing v Oq k"), b"EN Oq kmissing\r\n", "mg miss")
    check(meta("mg missing v q\r\nmg mk v q"), b"VA 5\r\nworld\r\n", "mg quiet")
    check(meta("ms mk 1 q\r\nx"), b"", "ms quiet")
    check(meta("ms mk 1 MA\r\ny"), b"HD\r\n", "ms append")
    check(meta("ms mk 1 ME\r\nz"), b"NS\r\n", "ms add existing")
    cas = int(c.gets("mk")[1])
    check(meta("ms mk 1 C%d\r\nq" % (cas + 1)), b"EX\r\n", "ms cas mismatch")
    check(meta("ms mk 2 C%d\r\nok" % cas), b"HD\r\n", "ms cas")
    check(meta("ma cnt N0 J10 v"), b"VA 2\r\n10\r\n", "ma vivify")
    check(meta("ma cnt D5 v"), b"VA 2\r\n15\r\n", "ma delta")
    check(meta("ma cnt MD D100 v"), b"VA 1\r\n0\r\n", "ma decr")
    check(meta("ma cnt q\r\nma cnt q"), b"", "ma quiet")
    check(c.get("cnt"), b"2", "ma visible to get")
    check(meta("md mk q\r\nmd mk q O7"), b"NF O7\r\n", "md quiet")
    check(meta("mg mk v"), b"EN\r\n", "md deleted")
    check(meta("ms Zm9v 2 b\r\nhi"), b"HD\r\n", "ms base64 key")
    check(c.get("foo"), b"hi", "base64 key visible")
    # `me` shows a key `ms` stored as base64 in base64, as memcached does.
    check(meta("me foo").startswith(b"ME Zm9v exp=-1 "), True, "me")
    raises(
        MemcacheClientError,
        lambda: c.raw_command("mg mk v v", "\r\n"),
        "mg duplicate flag",
        "duplicate flag",
    )


def main():
    global SERVER
    port = int(sys.argv[1])
    SERVER = ("127.0.0.1", port)
    c = Client(SERVER, default_noreply=False, timeout=10, connect_timeout=10)
    classic(c)
    serde()
    gat_and_meta(c)
    check(c.flush_all(), True, "flush_all")
    check(c.get("k1"), None, "flushed")
    c.close()
    if len(sys.argv) > 2:
        u = Client(sys.argv[2], default_noreply=False, timeout=10)
        check(u.set("unix", b"socket"), True, "set over a Unix socket")
        check(u.get("unix"), b"socket", "get over a Unix socket")
        check(Client(SERVER, timeout=10).get("unix"), b"socket", "one cache")
        u.close()
    print(f"ok {CHECKS} checks")


if __name__ == "__main__":
    start = time.time()
    main()
