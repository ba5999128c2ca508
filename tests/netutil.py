"""A slow TCP server on this host: a dataset service or an object store in miniature.

``slow_server(delay_s)`` runs it in a process of its own (so the wake-up that ends a
client's wait is the network's, not a thread of the test) and yields its address. A
client sends one line per request; the server waits ``delay_s`` (its storage, its
queue), then answers with ``REPLY_BYTES`` bytes. ``CLIENT`` is a client that times
every request itself (``time.perf_counter``, the kernel's CLOCK_MONOTONIC) and reports
its running total of time inside requests after each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tests.truthloop import REMOTE_REPLY

# One size for every client, truthloop's DataLoader workers included.
REPLY_BYTES = REMOTE_REPLY

SERVER = """
import socket, sys, threading, time
delay_s, size = float(sys.argv[1]), int(sys.argv[2])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(64)
print(srv.getsockname()[1], flush=True)
reply = b"r" * size

def serve(conn):
    f = conn.makefile("rb")
    try:
        for _ in f:
            time.sleep(delay_s)
            conn.sendall(reply)
    except OSError:
        pass  # the client went away

while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

# argv: host port gap_s; after each request: "monotonic_time total_inside_s".
CLIENT = f"""
import socket, sys, time
host, port, gap_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection((host, port))
total = 0.0
while True:
    t0 = time.perf_counter()
    s.sendall(b"get\\n")
    got = 0
    while got < {REPLY_BYTES}:
        got += len(s.recv(65536))
    t1 = time.perf_counter()
    total += t1 - t0
    sys.stdout.write(f"{{t1}} {{total}}\\n")
    sys.stdout.flush()
    time.sleep(gap_s)
"""


@contextmanager
def slow_server(delay_s: float) -> Iterator[tuple[str, int]]:
    """The server answering each request after ``delay_s``; yields (host, port)."""
    p = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(delay_s), str(REPLY_BYTES)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert p.stdout is not None
        port = int(p.stdout.readline())
        yield "127.0.0.1", port
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
