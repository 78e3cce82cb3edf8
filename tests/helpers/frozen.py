"""A store that stops answering, for the tests of the store's bounds: an endpoint that accepts connections and
never replies (as a SIGSTOPped S3 server does), a proxy in front of a real one that can be frozen and thawed, or
swallow one request (``frozen_proxy``), a call timed against a limit without hanging the test, and the settings of
a test's S3 client (``s3_settings``)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace
from urllib.parse import urlparse


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



@contextmanager
def frozen_proxy(target: str):
    """A real TCP proxy on 127.0.0.1 in front of the S3 endpoint ``target``: it forwards every connection until
    ``state.frozen`` is set (then it takes every byte, on old connections and new ones, and answers none: an
    endpoint that froze), and ``state.swallow.set()`` makes it swallow the next request it gets (that connection
    goes silent, ``state.swallowed`` is set; the others forward). Yields (URL, state)."""
    up = urlparse(target)
    server = socket.create_server(("127.0.0.1", 0))
    state = SimpleNamespace(frozen=False, swallow=threading.Event(), swallowed=threading.Event(), lock=threading.Lock())
    opened: list[socket.socket] = [server]

    def pump(src, dst, silent, outbound):
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                return
            if not data:
                break
            if outbound:
                with state.lock:
                    if state.swallow.is_set() and not silent:
                        state.swallow.clear()
                        silent.append(True)
                        state.swallowed.set()
            if state.frozen or silent:
                continue
            try:
                dst.sendall(data)
            except OSError:
                return
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def accept():
        while True:
            try:
                conn = server.accept()[0]
                upstream = socket.create_connection((up.hostname, up.port))
            except OSError:   # closed: the test is over
                return
            opened.extend([conn, upstream])
            silent: list[bool] = []   # this connection's: swallowed
            for src, dst, outbound in ((conn, upstream, True), (upstream, conn, False)):
                threading.Thread(target=pump, args=(src, dst, silent, outbound), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", state
    finally:
        for s in opened:
            s.close()


def s3_settings(monkeypatch, settings: dict[str, str]):
    """Credentials for an S3 endpoint the test names and the store client's ``settings`` (``DLRMFLOW_S3_*``), with
    no cached filesystems before or after (each test's endpoint gets clients of its own): a fixture yields from it."""
    from s3fs import S3FileSystem

    from helpers.fixtures import S3_ENV

    S3FileSystem.clear_instance_cache()
    for key, value in {**S3_ENV, **settings}.items():
        monkeypatch.setenv(key, value)
    yield monkeypatch
    S3FileSystem.clear_instance_cache()
