"""A store that stops answering, for the tests of the store's bounds: an endpoint that accepts connections and
never replies (as a SIGSTOPped S3 server does), and a call timed against a limit without hanging the test."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager


@contextmanager
def frozen_endpoint():
    """A real TCP server on 127.0.0.1 that accepts every connection and never answers: (URL, connections)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:   # closed: the test is over
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", held
    finally:
        server.close()
        for conn in held:
            conn.close()


def timed(call, limit: float):
    """(seconds, the exception ``call()`` raised or None) within ``limit`` s: a call still waiting then fails the
    test (left behind in a daemon thread) instead of hanging it."""
    done: list = []

    def run():
        start = time.monotonic()
        try:
            call()
            done.append((time.monotonic() - start, None))
        except Exception as e:   # what the store raised: the test looks at it
            done.append((time.monotonic() - start, e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert done, f"still waiting after {limit:g} s"
    return done[0]
