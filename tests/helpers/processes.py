"""Processes of the tests: free loopback ports, waiting for a port or a condition, process groups that always
stop, and this process as a one-rank job. A group's or session's live processes: ``common.process.live_processes``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager

from common.process import launch_command


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


def dlrmflow_command(*args) -> list[str]:
    """``dlrmflow ARGS`` as the suite starts it: ``python -m flows.cli ARGS`` after the launch prefix, so that the
    warm launcher (helpers/warm_launcher.py) forks it with torch and TorchRec imported (~5 CPU-seconds less for a
    command that imports them). Not for a test that kills the command or reads its process: run it plainly."""
    return launch_command([sys.executable, "-m", "flows.cli", *map(str, args)])


def run_dlrmflow(*args, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` of ``dlrmflow_command(*args)`` (text output captured unless told otherwise), in a process
    group of its own: a timeout's kill of the command ends what the warm launcher forked for it, and only that."""
    kwargs = {"text": True, **({} if {"stdout", "stderr"} & set(kwargs) else {"capture_output": True}), **kwargs}
    return subprocess.run(dlrmflow_command(*args), process_group=0, **kwargs)


def until(check, timeout: float, what: str, *procs, every: float = 1.0):
    """Poll ``check()`` every ``every`` seconds until it returns something true (returned); fail after ``timeout`` s
    or as soon as one of ``procs`` has exited."""
    deadline = time.time() + timeout
    while not (value := check()):
        for p in procs:
            assert p.poll() is None, f"{p.args[0]} exited with {p.returncode} while waiting for {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return value


@contextmanager
def one_rank():
    """This process as a job of one rank (``training.distributed.init`` without torchrun's variables makes a
    one-process group): a rank's code (``Trainer.from_run(...)``) runs here, on one thread, instead of a fresh
    interpreter importing torch and TorchRec again. The group is left, the thread count and the environment
    restored on exit."""
    import torch

    from training import distributed

    saved, threads = os.environ.copy(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        distributed.destroy()
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(saved)
