"""ROC AUC and log loss of probabilities against 0/1 labels (numpy): the one implementation, used by training's
evaluation (``training.metrics``, which drops padded rows first) and by the synthetic data's best scores."""

from __future__ import annotations

import numpy as np

EPS = 1e-7  # probabilities are clipped to [EPS, 1 - EPS] for log losses


def count_nonfinite(probs: np.ndarray) -> int:
    """How many predictions are NaN or +-inf."""
    return int(np.size(probs) - np.count_nonzero(np.isfinite(probs)))


def roc_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """Exact ROC AUC (Mann-Whitney U with average ranks for ties); NaN if one class is absent or any
    probability is not finite (NaN or inf scores have no rank: an AUC from them would be made up)."""
    p, pos = np.asarray(probs).ravel(), np.asarray(labels).ravel() > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0 or count_nonfinite(p):
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    sorted_p = p[order]
    ranks = np.empty(len(p), np.float64)
    # average rank of each run of equal scores
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_p)) + 1]
    ends = np.r_[starts[1:], len(p)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return float((np.sort(ranks[pos]).sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def log_loss(probs: np.ndarray, labels: np.ndarray, eps: float = EPS) -> float:
    """Mean binary cross-entropy of probabilities (clipped to [eps, 1 - eps]); NaN without rows or when any
    probability is not finite (clipping would turn an inf into a plausible number)."""
    p, y = np.asarray(probs, np.float64).ravel(), np.asarray(labels, np.float64).ravel()
    if len(p) == 0 or count_nonfinite(p):
        return float("nan")
    p = np.clip(p, eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
