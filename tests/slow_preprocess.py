"""`python tests/slow_preprocess.py DELAY_S ARGS...`: `dlrmflow ARGS...` with a pause after every per-file stage,
so that a test can kill a run part-way (test_preprocess_resume)."""

from __future__ import annotations

import functools
import sys
import time

from flows.cli import main
from preprocessing import stages


def _slowed(fn, delay: float):
    @functools.wraps(fn)
    def slow(*args, **kwargs):
        result = fn(*args, **kwargs)
        time.sleep(delay)
        return result
    return slow


if __name__ == "__main__":
    delay = float(sys.argv[1])
    for name in ("parse_file", "count_file", "encode_file"):
        setattr(stages, name, _slowed(getattr(stages, name), delay))
    sys.exit(main(sys.argv[2:]))
