"""What slicing costs an evaluation: on N test rows (default 1,000,000) of planted scores, the time of the
evaluation's metrics (``training.metrics.compute_metrics``: exact AUC, PR AUC, log loss, ... over all rows) against
the metrics per slice (``common.metrics.slices``: the top K values of a Zipf-distributed feature of 10,000 values,
and 'other') and the grouped AUC (``common.metrics.gauc`` by a feature of 100,000 groups), best of ``--repeat`` runs,
in one process; prints one JSON line with the times and their ratios to the unsliced computation.

usage: python benchmarks/bench_slices.py [--rows 1000000] [--top 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from common import metrics
    from training.metrics import compute_metrics

    rng = np.random.default_rng(0)
    n = args.rows
    logit = rng.normal(0, 1.5, n) - 1.2
    labels = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    probs = (1 / (1 + np.exp(-(logit + rng.normal(0, 1.0, n))))).astype(np.float32)   # as gathered: float32
    site = np.minimum(rng.zipf(1.3, n), 10_000).astype(np.int64)   # a few big values, a long tail
    user = rng.integers(0, 100_000, n)

    plain = best_of(args.repeat, lambda: compute_metrics(probs, labels))
    sliced = best_of(args.repeat, lambda: metrics.slices(probs, labels, site, args.top))
    grouped = best_of(args.repeat, lambda: metrics.gauc(probs, labels, user))
    print(json.dumps({"rows": n, "top": args.top, "site_values": int(len(np.unique(site))), "gauc_groups": 100_000,
                      "metrics_s": round(plain, 3), "slices_s": round(sliced, 3), "gauc_s": round(grouped, 3),
                      "slices_ratio": round(sliced / plain, 2), "gauc_ratio": round(grouped / plain, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
