"""Run a stage over input files: in-process (1 worker) or in spawned worker processes, with a progress bar."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from contextlib import contextmanager

from tqdm import tqdm

_QUEUE = None


def _init(q) -> None:
    global _QUEUE
    _QUEUE = q


def _report(n: int) -> None:
    _QUEUE.put(n)


def _call(fn, job, task):
    return fn(job, task, _report)


class Runner:
    """Maps a stage function ``fn(job, task, progress)`` over tasks; results come back in task order."""

    def __init__(self, workers: int, show_progress: bool):
        self.workers, self.show = workers, show_progress
        self.pool = self.queue = None

    @contextmanager
    def open(self):
        """Start the worker processes (spawned; polars threads split between them) and stop them after."""
        if self.workers == 1:
            yield self
            return
        ctx = mp.get_context("spawn")
        self.queue = ctx.Queue()
        saved = os.environ.get("POLARS_MAX_THREADS")
        os.environ["POLARS_MAX_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.workers))
        try:
            with ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init, initargs=(self.queue,)) as pool:
                self.pool = pool
                yield self
        finally:
            os.environ.pop("POLARS_MAX_THREADS") if saved is None else os.environ.update(POLARS_MAX_THREADS=saved)

    def map(self, fn, job, tasks: list, desc: str, total: int | None = None) -> list:
        """Run ``fn`` for every task; the first error cancels what has not started and is raised."""
        bar = tqdm(total=total, desc=desc, unit=" rows", unit_scale=True, file=sys.stderr, dynamic_ncols=True,
                   disable=not (self.show and sys.stderr.isatty()))
        with bar:
            if self.pool is None:
                return [fn(job, t, bar.update) for t in tasks]
            futures = [self.pool.submit(_call, fn, job, t) for t in tasks]
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                self._drain(bar)
                for f in done:
                    if f.exception() is not None:
                        for p in pending:
                            p.cancel()
                        raise f.exception()
            self._drain(bar)
            return [f.result() for f in futures]

    def _drain(self, bar) -> None:
        try:
            while True:
                bar.update(self.queue.get_nowait())
        except queue.Empty:
            pass
