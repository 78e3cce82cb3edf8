"""Exact binary-classification metrics on gathered predictions (numpy; padded rows masked).

``compute_metrics(probs, labels)`` is what evaluation reports; it sorts the rows first, so the
numbers do not depend on the order in which ranks gathered them (1 rank and N ranks agree).
The curve helpers (``roc_curve``, ``calibration_bins``) feed ``training.plots``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from common import metrics as common_metrics
from common.metrics import EPS


def valid(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop padded rows (label < 0); float64 copies."""
    probs, labels = np.asarray(probs, np.float64).ravel(), np.asarray(labels, np.float64).ravel()
    if probs.shape != labels.shape:
        raise ValueError(f"probs and labels differ in length ({len(probs)} vs {len(labels)})")
    keep = labels >= 0
    return probs[keep], labels[keep]


def _canonical(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Valid rows sorted by (prob, label): an order-independent input for every sum."""
    p, y = valid(probs, labels)
    order = np.lexsort((y, p))
    return p[order], y[order]


def roc_auc(probs: np.ndarray, labels: np.ndarray) -> float:
    """Exact ROC AUC of the valid rows (``common.metrics.roc_auc``); NaN if one class is absent."""
    return common_metrics.roc_auc(*valid(probs, labels))


def log_loss(probs: np.ndarray, labels: np.ndarray, eps: float = EPS) -> float:
    """Mean binary cross-entropy of the valid rows' probabilities, clipped to [eps, 1 - eps] (``common.metrics``)."""
    return common_metrics.log_loss(*valid(probs, labels), eps)


def binary_entropy(rate: float) -> float:
    """Entropy (nats) of a Bernoulli(rate): the log loss of always predicting the base rate."""
    if rate <= 0 or rate >= 1:
        return 0.0
    return float(-(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)))


def _thresholds(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cumulative true and false positives when predicting positive for scores >= each distinct
    score (descending): (thresholds, tp, fp)."""
    order = np.lexsort((y, -p))
    p, y = p[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(p)), len(p) - 1]  # last row of each run of equal scores
    tp = np.cumsum(y > 0.5)[last]
    fp = (last + 1) - tp
    return p[last], tp.astype(np.float64), fp.astype(np.float64)


def count_nonfinite(probs: np.ndarray, labels: np.ndarray) -> int:
    """How many valid rows' predictions are NaN or +-inf (a diverged model's)."""
    return common_metrics.count_nonfinite(valid(probs, labels)[0])


def average_precision(probs: np.ndarray, labels: np.ndarray) -> float:
    """PR AUC as average precision: sum over distinct thresholds of (recall step) x precision
    (the step-wise definition, without interpolation; ties form one step). NaN without positives or
    when any prediction is not finite."""
    p, y = valid(probs, labels)
    n_pos = float((y > 0.5).sum())
    if n_pos == 0 or common_metrics.count_nonfinite(p):
        return float("nan")
    _, tp, fp = _thresholds(p, y)
    precision = tp / (tp + fp)
    recall_step = np.diff(np.r_[0.0, tp]) / n_pos
    return float(np.sum(recall_step * precision))


def roc_curve(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC points (fpr, tpr, threshold) from (0, 0) at threshold +inf down to (1, 1)."""
    p, y = valid(probs, labels)
    thr, tp, fp = _thresholds(p, y)
    n_pos, n_neg = tp[-1] if len(tp) else 0.0, fp[-1] if len(fp) else 0.0
    tpr = np.r_[0.0, tp / n_pos] if n_pos else np.r_[0.0, np.zeros_like(tp)]
    fpr = np.r_[0.0, fp / n_neg] if n_neg else np.r_[0.0, np.zeros_like(fp)]
    return fpr, tpr, np.r_[np.inf, thr]


def calibration_bins(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> list[dict[str, float]]:
    """Reliability table over equal-width probability bins [i/n, (i+1)/n): per non-empty bin the
    row count, mean prediction and observed positive rate."""
    p, y = _canonical(probs, labels)
    index = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    out = []
    for b in range(n_bins):
        mask = index == b
        n = int(mask.sum())
        if n:
            out.append({"lo": b / n_bins, "hi": (b + 1) / n_bins, "count": n,
                        "mean_prediction": float(p[mask].mean()), "positive_rate": float(y[mask].mean())})
    return out


def compute_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """Every evaluation metric of predicted click probabilities against 0/1 labels (rows with a
    negative label are padding and dropped):

    Any NaN or infinite prediction makes ``auc``, ``pr_auc``, ``logloss`` and ``normalized_entropy`` NaN
    (``count_nonfinite`` counts them; the evaluation report refuses such predictions).

    - ``auc``: exact ROC AUC; ``pr_auc``: average precision
    - ``logloss``: mean binary cross-entropy (probabilities clipped to [1e-7, 1 - 1e-7])
    - ``base_logloss``: log loss of always predicting the base rate (= its entropy)
    - ``normalized_entropy``: logloss / base_logloss (< 1 means better than the base rate)
    - ``accuracy``: share of rows where (prob >= 0.5) equals the label
    - ``calibration``: mean prediction / base rate (1 is calibrated on average)
    - ``rows``, ``positives``, ``base_rate``, ``mean_prediction``
    """
    p, y = _canonical(probs, labels)
    n = len(p)
    if n == 0:
        raise ValueError("no rows to evaluate")
    positives = int((y > 0.5).sum())
    rate = positives / n
    mean_pred = float(p.mean())
    ll = log_loss(p, y)
    base = binary_entropy(rate)
    return {
        "rows": n,
        "positives": positives,
        "base_rate": rate,
        "mean_prediction": mean_pred,
        "auc": roc_auc(p, y),
        "pr_auc": average_precision(p, y),
        "logloss": ll,
        "base_logloss": base,
        "normalized_entropy": ll / base if base > 0 else float("nan"),
        "accuracy": float(np.mean((p >= 0.5) == (y > 0.5))),
        "calibration": mean_pred / rate if rate > 0 else float("nan"),
    }


def best_evaluation(records: list[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """The best validation record of metrics.jsonl records by ``metric`` (highest AUC, lowest log loss)."""
    evals = [r for r in records if "eval_split" in r]
    if not evals:
        return None
    return (max if metric == "auc" else min)(evals, key=lambda r: r[metric])
