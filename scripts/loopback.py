"""What the differential scripts share: a free loopback port and a wait
for a server started on it."""

import socket
import sys
import time


def free_port():
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what):
    """Waits (at most 10 s) until 127.0.0.1:`port` accepts; exits with a
    message if `proc` ends first or it never does."""
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on 127.0.0.1:{port} within 10 s")
