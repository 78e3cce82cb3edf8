"""Run a stage over input files: in-process, one file at a time (1 worker) or several files at once in
worker threads (polars and numpy do the heavy lifting outside the GIL), with a progress bar.

Threads, not processes: a spawned worker pays ~0.4 s of CPU importing numpy/polars before
doing any work, and polars already spreads each file's work over all cores; a second file in flight
only fills the gaps (reads, Python glue) that one file leaves.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager

from tqdm import tqdm


class Runner:
    """Maps a stage function ``fn(job, task, progress)`` over tasks; results come back in task order."""

    def __init__(self, workers: int, show_progress: bool):
        self.workers, self.show = workers, show_progress
        self.pool = None
        self._cancelled = threading.Event()

    @contextmanager
    def open(self):
        """Start the worker threads (when more than one) and stop them after."""
        if self.workers == 1:
            yield self
            return
        with ThreadPoolExecutor(self.workers, thread_name_prefix="dlrmflow-preprocess") as pool:
            self.pool = pool
            try:
                yield self
            finally:
                self._cancelled.set()

    def map(self, fn, job, tasks: list, desc: str, total: int | None = None) -> list:
        """Run ``fn`` for every task; the first error cancels what has not started and is raised."""
        bar = tqdm(total=total, desc=desc, unit=" rows", unit_scale=True, file=sys.stderr, dynamic_ncols=True,
                   disable=not (self.show and sys.stderr.isatty()))
        lock = threading.Lock()

        def progress(n: int) -> None:
            with lock:
                bar.update(n)

        with bar:
            if self.pool is None:
                return [fn(job, t, bar.update) for t in tasks]
            futures = [self.pool.submit(fn, job, t, progress) for t in tasks]
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f.done() and f.exception() is not None:
                    for p in pending:
                        p.cancel()
                    wait(pending)   # let files in flight finish their current part (each part is atomic)
                    raise f.exception()
            return [f.result() for f in futures]
