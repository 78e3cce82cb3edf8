"""The global batches of a split: their order in an epoch and each rank's rows of one. numpy only, so the
launcher's side (scoring's join of the ranks' parts, the slices' row order) reads them without importing torch."""

from __future__ import annotations

import numpy as np


def batch_order(num_batches: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """Order of the global batches in an epoch: a function of (seed, epoch, num_batches) only."""
    if not shuffle:
        return np.arange(num_batches)
    return np.random.default_rng([seed, epoch]).permutation(num_batches)


def rank_slice(start: int, stop: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """Rows [lo, hi) of global batch [start, stop) for ``rank``, and the padded row count per rank."""
    per, extra = divmod(stop - start, world_size)
    lo = start + rank * per + min(rank, extra)
    hi = lo + per + (rank < extra)
    return lo, hi, per + (extra > 0)
