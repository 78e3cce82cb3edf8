"""`python tests/helpers/slow_preprocess.py DELAY_S ARGS...`: `dlrmflow ARGS...` with a pause after every per-file stage,
so that a test can kill a run part-way (test_preprocess_resume). As a Dask worker's preload (`dask worker
--preload slow_preprocess` with tests/helpers on PYTHONPATH, delay in $DLRMFLOW_SLOW_S) it slows that worker's stages
(test_preprocess_dask)."""

from __future__ import annotations

import functools
import sys
import time

import os

from preprocessing import stages


def _slowed(fn, delay: float):
    @functools.wraps(fn)
    def slow(*args, **kwargs):
        result = fn(*args, **kwargs)
        time.sleep(delay)
        return result
    return slow


def slow_stages(delay: float) -> None:
    for name in ("parse_file", "count_file", "encode_file"):
        setattr(stages, name, _slowed(getattr(stages, name), delay))


def dask_setup(worker=None) -> None:
    slow_stages(float(os.environ.get("DLRMFLOW_SLOW_S", "0")))


if __name__ == "__main__":
    from flows.cli import main

    slow_stages(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
