"""`dlrmflow run`'s ephemeral Prefect server (flows/ephemeral.py) ends with the command, whatever ended it: a
SIGKILL (no atexit runs: the kernel's PR_SET_PDEATHSIG ends it) or an interrupt (Prefect's own stop at exit).
Real Prefect, real processes; `dlrmflow run` is stopped as soon as its server started, before any training."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers.processes import process_group, until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

SERVER_APP = "prefect.server.api.server:create_app"


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, session id) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()   # after "(comm)", which may hold spaces
    return fields[0], int(fields[1]), int(fields[3])


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] not in "ZX"   # a zombie has ended: only its exit status is left


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _server_of(parent: int) -> int | None:
    """The ephemeral server (uvicorn with Prefect's app) that ``parent`` started, or None. Not waiting until it answers
    (its first start migrates a fresh database: 10-25 s) keeps the test short; it dies with its parent all the same."""
    for pid in _pids():
        if (stat := _stat(pid)) and stat[1] == parent and stat[0] not in "ZX":
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (FileNotFoundError, ProcessLookupError):
                continue
            # after the exec: no longer the `python -m common.process PID ...` wrapper
            if b"uvicorn" in argv[:3] and SERVER_APP.encode() in argv:
                return pid
    return None


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (what the test started: process_group makes a session of its own)."""
    return [pid for pid in _pids() if (stat := _stat(pid)) and stat[2] == sid and stat[0] not in "ZX"]


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 130)])
def test_the_ephemeral_server_ends_with_dlrmflow_run(sig, code, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "AWS_", "DLRMFLOW_"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    command = [sys.executable, "-m", "flows", "run", "--store", str(tmp_path / "store"), "--synthetic.rows", "2000",
               "--nproc", "1", "--max-steps", "2"]
    with open(tmp_path / "run.log", "w") as log, process_group(command, cwd=tmp_path, env=env, stdout=log,
                                                               stderr=subprocess.STDOUT) as proc:
        server = until(lambda: _server_of(proc.pid), 60, "the ephemeral server", proc)
        try:
            os.kill(proc.pid, sig)
            assert proc.wait(30) == code, (tmp_path / "run.log").read_text()[-3000:]
            deadline = time.time() + 5
            while (_alive(server) or _session(proc.pid)) and time.time() < deadline:
                time.sleep(0.1)
            assert not _alive(server), f"the ephemeral server {server} outlived `dlrmflow run` ({sig.name})"
            assert not _session(proc.pid), f"processes of the test outlived `dlrmflow run`: {_session(proc.pid)}"
        finally:  # a failure leaves nothing behind either (process_group's TERM waits for nothing once run exited)
            for pid in _session(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def test_a_server_started_from_a_passing_thread_outlives_that_thread():
    """The kernel's "parent" of PR_SET_PDEATHSIG is the thread that started the child: Prefect may start the server
    from any thread (a log or event worker's), so it is started from one that lives as long as the process."""
    from flows.ephemeral import PARENT_THREAD, _ServerSubprocess

    started: list[subprocess.Popen] = []

    def start() -> None:
        started.append(child := _ServerSubprocess().Popen(["sleep", "60"]))
        until(lambda: Path(f"/proc/{child.pid}/cmdline").read_bytes().startswith(b"sleep"), 30, "the exec", child)
        # the signal is set (before the exec): the thread ends now

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    child = started[0]
    try:
        time.sleep(0.5)  # a child of the ended thread would be SIGKILLed by now
        assert child.poll() is None, f"the child ended with its starting thread ({child.returncode})"
        assert _stat(child.pid)[1] == os.getpid()
        assert any(t.name == PARENT_THREAD for t in threading.enumerate())
    finally:
        child.kill()
        child.wait()
