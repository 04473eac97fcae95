"""python-binary-memcached (module bmemcached, a real binary-protocol
client, not written here) against `duality kv`.

Usage: python3 kv_bmemcached.py <tcp port>

Exercises get/gets/get_multi, set/set_multi/add/replace/cas, delete and
delete_multi, incr/decr with initial values, flush_all, stats and values
its serializer turns into client flags (int, str, bytes, pickled objects).
Exits 0 and prints "ok <n> checks" when everything matched.
"""

import os
import sys

import bmemcached

CHECKS = 0


def check(got, want, what):
    global CHECKS
    CHECKS += 1
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def main():
    port = int(sys.argv[1])
    c = bmemcached.Client((f"127.0.0.1:{port}",))
    check(c.flush_all(), True, "flush_all")
    check(c.set("k", "hello"), True, "set")
    check(c.get("k"), "hello", "get")
    check(c.get("missing"), None, "get missing")
    check(c.get("missing", default=7), 7, "get missing with default")
    check(c.set("b", b"\x00\xff\r\n"), True, "set bytes")
    check(c.get("b"), b"\x00\xff\r\n", "get bytes")
    check(c.set("i", 42), True, "set int")
    check(c.get("i"), 42, "get int (flags)")
    check(c.set("o", {"a": [1, 2]}), True, "set pickled")
    check(c.get("o"), {"a": [1, 2]}, "get pickled (flags)")
    check(c.add("k", "x"), False, "add existing")
    check(c.add("new", "x"), True, "add new")
    check(c.replace("nope", "x"), False, "replace missing")
    check(c.replace("new", "y"), True, "replace")
    check(c.get("new"), "y", "get replaced")

    value, cas = c.gets("k")
    check(value, "hello", "gets value")
    check(c.cas("k", "stale", cas + 1000), False, "cas mismatch")
    check(c.cas("k", "swapped", cas), True, "cas match")
    check(c.get("k"), "swapped", "get after cas")
    check(c.cas("nope", "x", 1), False, "cas of a missing key")

    # set_multi answers the keys that failed (setq pipeline + noop).
    check(c.set_multi({"m1": "a", "m2": "b", "m3": "c"}) in (True, []), True, "set_multi")
    check(
        c.get_multi(["m1", "m2", "nope", "m3"]),
        {"m1": "a", "m2": "b", "m3": "c"},
        "get_multi (getkq pipeline)",
    )
    check(c.delete("m1"), True, "delete")
    # bmemcached reports a delete of a missing key as done.
    check(c.delete("m1"), True, "delete missing")
    check(c.delete_multi(["m2", "m3"]) in (True, []), True, "delete_multi")
    check(c.get_multi(["m1", "m2", "m3"]), {}, "get_multi after delete")

    check(c.incr("n", 5), 0, "incr of a missing key creates it at the default")
    check(c.incr("n", 5), 5, "incr")
    check(c.decr("n", 10), 0, "decr stops at 0")
    check(c.incr("n", 2**64 - 1), 2**64 - 1, "incr to the top")
    check(c.incr("n", 2), 1, "incr wraps at 2^64")

    # Random bytes: the client compresses large values.
    big = os.urandom(2 << 20)
    try:
        c.set("big", big)
        raised = False
    except Exception:
        raised = True
    check(raised or c.get("big") is None, True, "a too large value is refused")
    check(c.set("after", "fine"), True, "the connection goes on after a refusal")
    check(c.get("after"), "fine", "get after a refusal")

    stats = c.stats()
    server = next(iter(stats.values()))
    check("curr_items" in server and "pid" in server, True, "stats")
    check(int(server["cmd_get"]) > 0, True, "stats cmd_get")

    check(c.flush_all(), True, "flush_all")
    check(c.get("k"), None, "get after flush_all")
    c.disconnect_all()
    print(f"ok {CHECKS} checks")


if __name__ == "__main__":
    main()
