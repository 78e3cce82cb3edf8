"""What raw Criteo columns look like: calibrated per-column profiles and vectorised samplers.

Targets come from the first 10,000 rows of the Kaggle DAC ``train.txt`` (missing rates, top-value
shares, distinct counts, count distributions) and from the full file's per-column cardinalities
(45,840,617 rows). A categorical column draws vocabulary ids from "the top value" (share ``top1``)
plus a discretised bounded Pareto (Zipf-like, exponent ``s``) over ``V - 1`` further ids, where
the vocabulary size ``V`` is solved per row count so that the expected number of distinct values
follows ``distinct_10k * (rows / 10k) ** b``, reaching the full-Kaggle cardinality at 45.8M rows.

A distinct count that follows ``n ** b`` has a share ``b`` of values seen once (Poisson sampling:
singletons = n * dD/dn), and the real first 10k rows agree for the big columns (C3: 0.87 seen once,
b = 0.89). A bounded Pareto solved for the distinct count alone has too few singletons at large N
(C3 at 20M rows: 0.81; C10: none, its vocabulary is used up), so ``fit`` tops the tail up with
"fresh" ids (a share ``fresh`` of the tail draws, uniform over the unused 32-bit ids: nearly all
seen once) until the singleton share is ``b`` too, from ``FRESH_MIN_ROWS`` rows on. Where the Pareto
alone has enough, and beyond 45.8M rows (the distinct count stays at Kaggle's), ``fresh`` is 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

KAGGLE_ROWS = 45_840_617
REFERENCE_ROWS = 10_000
MAX_VOCAB = 2**32
FRESH_MIN_ROWS = 1_000_000  # fresh ids from this size on: below it the Pareto is close to the real share seen
# once, and topping up a small gap would take a large fresh share (small data keeps its calibrated shape)


@dataclass(frozen=True)
class CategoricalProfile:
    """One categorical column: missing rate, top value share, tail exponent, distinct counts."""

    missing: float
    top1: float          # share of the most frequent value among non-missing rows
    s: float             # Zipf-like exponent of the remaining values (> 1)
    q: float             # Zipf-Mandelbrot shift: flattens the head of the remaining values
    distinct_10k: int    # distinct values in the real first 10k rows
    kaggle: int          # distinct values in the full Kaggle train.txt
    fresh: float = 0.0   # share of the tail draws that are fresh ids (set per row count by ``fit``)

    @property
    def exponent(self) -> float:
        """``b`` of the power law through both real distinct counts (also its share of values seen once)."""
        return math.log(self.kaggle / self.distinct_10k) / math.log(KAGGLE_ROWS / REFERENCE_ROWS)

    def target_distinct(self, rows: int) -> float:
        """Expected distinct values in ``rows`` rows: a power law through both real counts."""
        d = self.distinct_10k * (rows / REFERENCE_ROWS) ** self.exponent
        return min(d, self.kaggle, 0.9 * rows * (1 - self.missing) + 1)

    def target_singletons(self, rows: int) -> float:
        """Expected values seen once in ``rows`` rows: ``exponent`` times the distinct count (0 once capped)."""
        d = self.distinct_10k * (rows / REFERENCE_ROWS) ** self.exponent
        return self.exponent * d if d <= self.target_distinct(rows) else 0.0


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


def _bins(prof: CategoricalProfile, vocab: float) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto ids 1..vocab-1 in bins (exact below 2000, geometric above): ids per bin and each id's mass."""
    exact = np.arange(1, min(vocab, 2000), dtype=np.float64)
    binned = np.geomspace(2000, vocab, 2000) if vocab > 2000 else np.empty(0)
    edges = np.floor(np.concatenate([exact, binned, [vocab]]))   # ascending already: drop repeats, no sort
    edges = edges[np.concatenate([[True], edges[1:] > edges[:-1]])]
    counts = np.diff(edges)
    return counts, (1 - prof.top1) * (1 - prof.fresh) * np.diff(tail_cdf(prof, edges, vocab)) / counts


def _fresh_draws(prof: CategoricalProfile, vocab: float, n: float) -> tuple[float, float]:
    """Expected fresh draws among ``n`` and the number of fresh ids they may take."""
    return n * (1 - prof.top1) * prof.fresh, max(float(MAX_VOCAB - vocab), 1.0)


def expected_distinct(prof: CategoricalProfile, vocab: float, n: float) -> float:
    """Expected number of distinct ids among ``n`` non-missing draws from a vocabulary of ``vocab``
    (plus the fresh ids, see ``fit``)."""
    fresh, space = _fresh_draws(prof, vocab, n)
    fresh_distinct = -space * np.expm1(-fresh / space) if fresh else 0.0
    if vocab <= 1:
        return float(n > 0) + fresh_distinct
    counts, p = _bins(prof, vocab)
    seen = -np.expm1(n * np.log1p(-p))
    return float(-np.expm1(n * math.log1p(-prof.top1)) + (counts * seen).sum() + fresh_distinct)


def expected_singletons(prof: CategoricalProfile, vocab: float, n: float) -> float:
    """Expected number of ids seen exactly once among ``n`` non-missing draws (fresh ids included)."""
    fresh, space = _fresh_draws(prof, vocab, n)
    total = fresh * math.exp(-fresh / space) if fresh else 0.0
    total += n * prof.top1 * math.exp((n - 1) * math.log1p(-prof.top1)) if prof.top1 < 1 else 0.0
    if vocab <= 1:
        return total
    counts, p = _bins(prof, vocab)
    return float(total + (counts * n * p * np.exp((n - 1) * np.log1p(-p))).sum())


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


def fit(prof: CategoricalProfile, rows: int) -> tuple[CategoricalProfile, int]:
    """The profile and vocabulary size for ``rows`` rows: the distinct count of ``target_distinct`` and, with
    the smallest ``fresh`` share that does it, at least the singletons of ``target_singletons``."""
    n = rows * (1 - prof.missing)
    vocab = vocabulary_size(prof, rows)
    target = prof.target_singletons(rows)
    if rows < FRESH_MIN_ROWS or expected_singletons(prof, vocab, n) >= target:
        return prof, vocab
    lo, hi = 0.0, min(1.0, prof.target_distinct(rows) / (n * (1 - prof.top1)))
    for _ in range(30):  # more fresh ids: a smaller vocabulary for the same distinct count, more singletons
        mid = dataclasses.replace(prof, fresh=(lo + hi) / 2)
        if expected_singletons(mid, vocabulary_size(mid, rows), n) < target:
            lo = mid.fresh
        else:
            hi = mid.fresh
    fitted = dataclasses.replace(prof, fresh=hi)
    return fitted, vocabulary_size(fitted, rows)


def sample_ids(rng: np.random.Generator, prof: CategoricalProfile, vocab: int, n: int) -> np.ndarray:
    """``n`` vocabulary ids (0 = the top value) with the profile's skew; fresh ids are ``vocab`` and above."""
    u = rng.random(n)
    v = np.maximum(u - prof.top1, 0) / (1 - prof.top1)
    if vocab <= 1:
        tail = np.zeros(n, np.int64)
    else:
        a, e = 1 + prof.q, 1 - prof.s
        w = np.maximum(v - prof.fresh, 0) / (1 - prof.fresh)
        x = np.power(a**e - w * (a**e - (vocab + prof.q) ** e), 1 / e) - prof.q
        tail = np.clip(np.floor(x), 1, vocab - 1).astype(np.int64)
    if prof.fresh:  # the same uniform draw, rescaled: no extra random numbers
        fresh = vocab + np.floor(v / prof.fresh * (MAX_VOCAB - vocab)).astype(np.int64)
        tail = np.where(v < prof.fresh, np.minimum(fresh, MAX_VOCAB - 1), tail)
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
