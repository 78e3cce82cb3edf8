"""Processes of the tests: free loopback ports, waiting for a port or a condition, process groups that always
stop, and a fresh interpreter."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from helpers.paths import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.poll() is None, f"process exited with {proc.returncode}"
            assert time.time() < deadline, f"nothing listens on port {port} after {timeout} s"
            time.sleep(0.1)


@contextmanager
def process_group(cmd: list[str], **kwargs):
    """Start ``cmd`` in its own process group; on exit stop the whole group (TERM, then KILL)."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
    try:
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue


def until(check, timeout: float, what: str, *procs):
    """Poll ``check()`` every second until it returns something true (returned); fail after ``timeout`` s or as
    soon as one of ``procs`` has exited."""
    deadline = time.time() + timeout
    while not (value := check()):
        for p in procs:
            assert p.poll() is None, f"{p.args[0]} exited with {p.returncode} while waiting for {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(1)
    return value


def python(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter (its own one-rank process group); returns stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc.stdout
