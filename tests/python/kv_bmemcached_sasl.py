"""python-binary-memcached (module bmemcached, a real binary-protocol
client, not written here) authenticating to `duality kv -S` with SASL
PLAIN.

Usage: python3 kv_bmemcached_sasl.py <tcp port>

With the right user and password the cache works as usual; a wrong
password is refused with memcached's status 0x20 ("Auth failure.") and
nothing is stored. Exits 0 and prints "ok <n> checks" when everything
matched.
"""

import sys

import bmemcached
from bmemcached.exceptions import MemcachedException

CHECKS = 0


def check(got, want, what):
    global CHECKS
    CHECKS += 1
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def main():
    server = f"127.0.0.1:{int(sys.argv[1])}"
    c = bmemcached.Client((server,), "alice", "secret")
    check(c.set("k", "hello"), True, "set after auth")
    check(c.get("k"), "hello", "get after auth")
    check(c.incr("n", 1) if c.set("n", 1) else None, 2, "incr after auth")
    check(c.delete("k"), True, "delete after auth")
    check(c.get("k"), None, "get deleted")
    wrong = bmemcached.Client((server,), "alice", "wrong")
    try:
        wrong.set("w", "nope")
        raise AssertionError("a wrong password stored a value")
    except MemcachedException as e:
        check(e.code, 0x20, "wrong password's status")
    check(c.get("w"), None, "nothing stored by the refused client")
    stats = c.stats()[server]
    check(int(stats["auth_errors"]) >= 1, True, "auth_errors counted")
    settings = c.stats("settings")[server]
    check(settings["auth_enabled_sasl"], b"yes", "stats settings auth_enabled_sasl")
    check(settings["binding_protocol"], b"binary", "stats settings binding_protocol")
    print(f"ok {CHECKS} checks")


if __name__ == "__main__":
    main()
