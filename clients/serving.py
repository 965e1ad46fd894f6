"""What the client checks share: a free loopback port, a plain assertion, and waiting until an
`atlas serve` they started answers /healthz (failing at once if it exited)."""

import socket
import time
import urllib.request


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(server, port, seconds=60):
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            return
        except OSError:
            check(server.poll() is None, f"atlas serve exited with {server.returncode}")
            check(time.monotonic() < deadline, f"atlas serve did not answer /healthz within {seconds} s")
            time.sleep(0.1)
