"""Run a command and measure its wall time and the peak RSS of its whole process tree.

The tree's RSS is sampled from /proc every 20 ms (worker processes included, which
``ru_maxrss`` would not add up); Linux only.
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass


@dataclass
class Measurement:
    wall_s: float
    cpu_s: float        # user + system CPU of the command and its reaped descendants
    peak_rss_mb: float
    returncode: int
    output: str


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kb(root: int) -> int:
    """Sum of the resident set sizes of ``root`` and all its descendants."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss_kb(pid)
        stack += _children(pid)
    return total


def run_measured(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> Measurement:
    """Run ``cmd`` to completion; return wall time, CPU time, peak tree RSS, exit code and combined output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss_kb(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measurement(wall, cpu, peak / 1024, proc.returncode, output)


def checked(m: Measurement, what: str) -> Measurement:
    """``m`` if its command succeeded, else exit with ``what`` and the end of its output."""
    if m.returncode != 0:
        raise SystemExit(f"{what} failed ({m.returncode}):\n{m.output[-3000:]}")
    return m


def load_average() -> str:
    """The 1-minute load average after a measurement (above the core count, timings are provisional)."""
    return f"{os.getloadavg()[0]:.2f}"


def timed_executor(workers: int):
    """A preprocessing ThreadExecutor (``workers`` threads) that records each stage's wall and process CPU seconds in
    its ``times`` (stage -> (wall s, CPU s)). Imports preprocessing when called."""
    from preprocessing.parallel import ThreadExecutor

    class TimedExecutor(ThreadExecutor):
        def __init__(self):
            super().__init__(workers, False)
            self.times: dict[str, tuple[float, float]] = {}

        def _timed(self, stage, fn):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn()
            finally:
                self.times[stage] = (time.perf_counter() - wall, time.process_time() - cpu)

        def map(self, stage, fn, files, rows=None):
            return self._timed(stage, lambda: ThreadExecutor.map(self, stage, fn, files, rows))

        def call(self, stage, fn):
            return self._timed(stage, fn)

    return TimedExecutor()
