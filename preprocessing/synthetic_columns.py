"""What raw Criteo columns look like: calibrated per-column profiles and vectorised samplers.

Targets come from the first 10,000 rows of the Kaggle DAC ``train.txt`` (missing rates, top-value
shares, distinct counts, count distributions) and from the full file's per-column cardinalities
(45,840,617 rows). A categorical column draws vocabulary ids from "the top value" (share ``top1``)
plus a discretised bounded Pareto (Zipf-like, exponent ``s``) over ``V - 1`` further ids, where
the vocabulary size ``V`` is solved per row count so that the expected number of distinct values
follows ``distinct_10k * (rows / 10k) ** b``, reaching the full-Kaggle cardinality at 45.8M rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KAGGLE_ROWS = 45_840_617
REFERENCE_ROWS = 10_000
MAX_VOCAB = 2**32


@dataclass(frozen=True)
class CategoricalProfile:
    """One categorical column: missing rate, top value share, tail exponent, distinct counts."""

    missing: float
    top1: float          # share of the most frequent value among non-missing rows
    s: float             # Zipf-like exponent of the remaining values (> 1)
    q: float             # Zipf-Mandelbrot shift: flattens the head of the remaining values
    distinct_10k: int    # distinct values in the real first 10k rows
    kaggle: int          # distinct values in the full Kaggle train.txt

    def target_distinct(self, rows: int) -> float:
        """Expected distinct values in ``rows`` rows: a power law through both real counts."""
        b = math.log(self.kaggle / self.distinct_10k) / math.log(KAGGLE_ROWS / REFERENCE_ROWS)
        d = self.distinct_10k * (rows / REFERENCE_ROWS) ** b
        return min(d, self.kaggle, 0.9 * rows * (1 - self.missing) + 1)


@dataclass(frozen=True)
class NumericalProfile:
    """One integer count column: missing rate, maximum, zero rate, log-normal positive counts, negatives."""

    missing: float
    max: int             # largest value in the full Kaggle train.txt (counts are clipped to it)
    zero: float
    mu: float            # mean of log(count) over positive counts
    sd: float            # std of log(count) over positive counts
    loading: float = 0.0  # weight of the shared per-row latent factor (correlates the counts)
    negative: float = 0.0  # share of -1 (and a few -2) values, I2 only


# missing, top1, s, q, distinct_10k, kaggle: s and q were fitted by a grid search to the real
# first-10k top-10 share and share of values seen once, with the vocabulary solved as below.
CATEGORICAL = {
    "C1": CategoricalProfile(0.000, 0.500, 2.00, 1, 175, 1460),
    "C2": CategoricalProfile(0.000, 0.123, 2.00, 16, 386, 583),
    "C3": CategoricalProfile(0.036, 0.049, 1.02, 0.5, 5520, 10131227),
    "C4": CategoricalProfile(0.036, 0.076, 1.02, 1, 4032, 2202608),
    "C5": CategoricalProfile(0.000, 0.666, 2.50, 0.5, 56, 305),
    "C6": CategoricalProfile(0.133, 0.530, 1.02, 1, 7, 24),
    "C7": CategoricalProfile(0.000, 0.011, 1.02, 32, 3184, 12517),
    "C8": CategoricalProfile(0.000, 0.589, 2.50, 2, 93, 633),
    "C9": CategoricalProfile(0.000, 0.887, 1.02, 0, 3, 3),
    "C10": CategoricalProfile(0.000, 0.276, 1.02, 16, 2986, 93145),
    "C11": CategoricalProfile(0.000, 0.020, 1.10, 16, 2084, 5683),
    "C12": CategoricalProfile(0.036, 0.049, 1.02, 0.5, 5283, 8351593),
    "C13": CategoricalProfile(0.000, 0.022, 1.15, 16, 1725, 3194),
    "C14": CategoricalProfile(0.000, 0.363, 3.00, 0.5, 24, 27),
    "C15": CategoricalProfile(0.000, 0.019, 1.30, 32, 2035, 14992),
    "C16": CategoricalProfile(0.036, 0.049, 1.02, 1, 4723, 5461306),
    "C17": CategoricalProfile(0.000, 0.430, 1.02, 2, 9, 10),
    "C18": CategoricalProfile(0.000, 0.051, 1.40, 16, 1149, 5652),
    "C19": CategoricalProfile(0.450, 0.601, 1.20, 4, 546, 2173),
    "C20": CategoricalProfile(0.450, 0.362, 1.02, 0, 3, 4),
    "C21": CategoricalProfile(0.036, 0.049, 1.02, 1, 5036, 7046547),
    "C22": CategoricalProfile(0.818, 0.526, 2.50, 2, 7, 18),
    "C23": CategoricalProfile(0.000, 0.452, 3.00, 2, 12, 15),
    "C24": CategoricalProfile(0.036, 0.078, 1.10, 0, 2524, 286181),
    "C25": CategoricalProfile(0.450, 0.328, 3.00, 2, 39, 105),
    "C26": CategoricalProfile(0.450, 0.082, 1.02, 1, 1938, 142572),
}

NUMERICAL = {
    "I1": NumericalProfile(0.448, 5775, 0.475, 1.15, 1.07, loading=0.7),
    "I2": NumericalProfile(0.000, 257675, 0.180, 2.71, 2.20, negative=0.0975),
    "I3": NumericalProfile(0.204, 65535, 0.008, 2.04, 1.46),
    "I4": NumericalProfile(0.198, 969, 0.071, 1.60, 1.07),
    "I5": NumericalProfile(0.049, 23159456, 0.017, 7.33, 2.83, loading=-0.7),
    "I6": NumericalProfile(0.251, 431037, 0.063, 3.75, 1.71, loading=-0.6),
    "I7": NumericalProfile(0.049, 56311, 0.253, 1.80, 1.39, loading=0.4),
    "I8": NumericalProfile(0.001, 6047, 0.118, 2.15, 1.15),
    "I9": NumericalProfile(0.049, 29019, 0.032, 3.64, 1.71),
    "I10": NumericalProfile(0.448, 11, 0.502, 0.10, 0.27, loading=0.7),
    "I11": NumericalProfile(0.049, 231, 0.265, 0.68, 0.84, loading=0.4),
    "I12": NumericalProfile(0.773, 4008, 0.736, 0.63, 0.89),
    "I13": NumericalProfile(0.198, 7393, 0.062, 1.76, 1.17),
}

# Columns that go missing together (rate of the shared event); each column's own missing rate
# is topped up by an independent residual so that its marginal rate matches its profile.
MISSING_GROUPS = [
    (0.448, ("I1", "I10")),
    (0.198, ("I4", "I13")),
    (0.049, ("I6", "I7", "I9", "I11")),
    (0.036, ("C3", "C4", "C12", "C16", "C21", "C24")),
    (0.450, ("C19", "C20", "C25", "C26")),
]

def missing_rate(name: str) -> float:
    """The configured marginal missing rate of a column."""
    prof = CATEGORICAL.get(name) or NUMERICAL[name]
    return prof.missing


def missing_masks(rng: np.random.Generator, n: int, columns: list[str]) -> dict[str, np.ndarray]:
    """Per-column boolean missing masks with the grouped (correlated) structure."""
    shared = {c: np.zeros(n, bool) for c in columns}
    group_rate = {c: 0.0 for c in columns}
    for rate, names in MISSING_GROUPS:
        event = rng.random(n) < rate
        for c in names:
            shared[c] |= event
            group_rate[c] = 1 - (1 - group_rate[c]) * (1 - rate)
    masks = {}
    for c in columns:
        residual = 1 - (1 - missing_rate(c)) / (1 - group_rate[c])
        masks[c] = shared[c] | (rng.random(n) < residual)
    return masks


def tail_cdf(prof: CategoricalProfile, x: np.ndarray | float, vocab: float) -> np.ndarray | float:
    """P(tail id < x): a discretised shifted bounded Pareto over ids 1..vocab-1."""
    a, e = 1 + prof.q, 1 - prof.s
    return (a**e - np.power(x + prof.q, e)) / (a**e - (vocab + prof.q) ** e)


def expected_distinct(prof: CategoricalProfile, vocab: float, n: float) -> float:
    """Expected number of distinct ids among ``n`` non-missing draws from a vocabulary of ``vocab``."""
    if vocab <= 1:
        return float(n > 0)
    exact = np.arange(1, min(vocab, 2000), dtype=np.float64)
    binned = np.geomspace(2000, vocab, 2000) if vocab > 2000 else np.empty(0)
    edges = np.unique(np.floor(np.concatenate([exact, binned, [vocab]])))
    counts = np.diff(edges)
    mass = (1 - prof.top1) * np.diff(tail_cdf(prof, edges, vocab))
    seen = -np.expm1(n * np.log1p(-mass / counts))
    return float(-np.expm1(n * math.log1p(-prof.top1)) + (counts * seen).sum())


def vocabulary_size(prof: CategoricalProfile, rows: int) -> int:
    """The vocabulary size whose expected distinct count in ``rows`` rows matches the profile."""
    n = rows * (1 - prof.missing)
    target = prof.target_distinct(rows)
    lo, hi = 1.0, math.log(MAX_VOCAB)
    if expected_distinct(prof, MAX_VOCAB, n) <= target:
        return MAX_VOCAB
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_distinct(prof, math.exp(mid), n) < target:
            lo = mid
        else:
            hi = mid
    return max(1, round(math.exp(hi)))


def sample_ids(rng: np.random.Generator, prof: CategoricalProfile, vocab: int, n: int) -> np.ndarray:
    """``n`` vocabulary ids (0 = the top value) with the profile's skew."""
    u = rng.random(n)
    if vocab <= 1:
        return np.zeros(n, np.int64)
    a, e = 1 + prof.q, 1 - prof.s
    v = np.maximum(u - prof.top1, 0) / (1 - prof.top1)
    x = np.power(a**e - v * (a**e - (vocab + prof.q) ** e), 1 / e) - prof.q
    tail = np.clip(np.floor(x), 1, vocab - 1).astype(np.int64)
    return np.where(u < prof.top1, 0, tail)


def sample_counts(rng: np.random.Generator, prof: NumericalProfile, latent: np.ndarray) -> np.ndarray:
    """Integer counts: zero-inflated, log-normal, correlated through the shared ``latent``."""
    n = latent.shape[0]
    noise = rng.standard_normal(n)
    z = prof.loading * latent + math.sqrt(1 - prof.loading**2) * noise
    counts = np.floor(np.exp(np.minimum(prof.mu + prof.sd * z, math.log(prof.max))) + 0.5).astype(np.int64)
    counts = np.maximum(counts, 1)
    u = rng.random(n)
    counts[u < prof.zero] = 0
    if prof.negative:
        counts[u > 1 - prof.negative] = -1
        counts[u > 1 - prof.negative * 0.006] = -2
    return counts


def tail_step(prof: CategoricalProfile, vocab: int, head: int, share: float) -> int:
    """Ranks the ids beyond ``head`` move down per day so that the ids new each day (entering at rank
    ``head``) take ``share`` of the rows of ranks >= ``head``; 0 when there is no such tail or no drift."""
    if vocab - head <= 0 or share <= 0:
        return 0
    below = tail_cdf(prof, head, vocab)
    target = share * (1 - below)
    lo, hi = 1, vocab - head  # the smallest step whose ranks hold ``target``
    while lo < hi:
        mid = (lo + hi) // 2
        if tail_cdf(prof, head + mid, vocab) - below >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo
