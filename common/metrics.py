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


# ---- per group: slices and grouped AUC (numpy, one sort for every group) ------------------------------------------
OTHER = "other"   # the slice of every row whose value is not among the top values


def entropy(rate: np.ndarray) -> np.ndarray:
    """Entropy (nats) of Bernoulli(rate), elementwise: the log loss of always predicting the rate (0 at 0 and 1)."""
    r = np.clip(np.asarray(rate, np.float64), EPS, 1 - EPS)
    out = -(r * np.log(r) + (1 - r) * np.log(1 - r))
    return np.where((np.asarray(rate) <= 0) | (np.asarray(rate) >= 1), 0.0, out)


def grouped(probs: np.ndarray, labels: np.ndarray, codes: np.ndarray, groups: int) -> dict[str, np.ndarray]:
    """Per group 0..groups-1 (``codes``: each row's group): ``rows``, ``positives``, ``mean_prediction``, exact
    ``auc`` (Mann-Whitney with average ranks of ties, as ``roc_auc``; NaN without both classes) and ``logloss``
    (clipped as ``log_loss``). A group with a non-finite probability gets NaN for both. One sort for all groups."""
    p, y = np.asarray(probs, np.float64).ravel(), np.asarray(labels).ravel() > 0.5
    g = np.asarray(codes, np.int64).ravel()
    rows = np.bincount(g, minlength=groups).astype(np.int64)
    positives = np.bincount(g[y], minlength=groups).astype(np.int64)
    bad = np.bincount(g, weights=~np.isfinite(p), minlength=groups) > 0
    order = np.lexsort((p, g))
    gs, ps, ys = g[order], p[order], y[order]
    n = len(ps)
    first = np.r_[True, gs[1:] != gs[:-1]] if n else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    new_run = first | np.r_[True, ps[1:] != ps[:-1]] if n else first
    starts = np.flatnonzero(new_run)
    ends = np.r_[starts[1:], n]
    run = np.cumsum(new_run) - 1
    rank = (starts[run] + ends[run] + 1) / 2.0 - group_start   # average rank within the row's group, from 1
    rank_sum = np.bincount(gs[ys], weights=rank[ys], minlength=groups)
    negatives = rows - positives
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)
        q = np.clip(p, EPS, 1 - EPS)
        loss = np.bincount(g, weights=-(y * np.log(q) + (~y) * np.log(1 - q)), minlength=groups) / rows
        mean = np.bincount(g, weights=np.where(np.isfinite(p), p, 0.0), minlength=groups) / rows
    auc[(positives == 0) | (negatives == 0) | bad] = np.nan
    loss[bad | (rows == 0)] = np.nan
    return {"rows": rows, "positives": positives, "mean_prediction": mean, "auc": auc, "logloss": loss}


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def slices(probs: np.ndarray, labels: np.ndarray, keys: np.ndarray, top: int) -> list[dict]:
    """The metrics of each of the ``top`` most frequent values of ``keys`` (one per row; ties by value) and of
    ``OTHER`` (the remaining rows, when there are any), most rows first: ``value`` (a key, or None for OTHER),
    ``rows``, ``share`` (of all rows), ``positives``, ``base_rate``, ``mean_prediction``, ``auc``, ``logloss``,
    ``normalized_entropy`` (log loss / the slice's base-rate entropy) and ``calibration`` (mean prediction / base
    rate); an undefined metric (one class, no positives) is None."""
    values, codes, counts = np.unique(np.asarray(keys).ravel(), return_inverse=True, return_counts=True)
    kept = np.lexsort((np.arange(len(values)), -counts))[:top]
    slot = np.full(len(values), len(kept), np.int64)
    slot[kept] = np.arange(len(kept))
    m = grouped(probs, labels, slot[codes.ravel()], len(kept) + 1)
    total = max(int(m["rows"].sum()), 1)
    out = []
    for i in range(len(kept) + 1):
        rows, positives = int(m["rows"][i]), int(m["positives"][i])
        if not rows:
            continue
        rate = positives / rows
        base = float(entropy(np.array([rate]))[0])
        value = values[kept[i]] if i < len(kept) else None
        value = value.item() if isinstance(value, np.generic) else value   # a plain value: JSON takes it
        out.append({"value": value, "rows": rows, "share": rows / total, "positives": positives, "base_rate": rate,
                    "mean_prediction": _finite(m["mean_prediction"][i]), "auc": _finite(m["auc"][i]),
                    "logloss": _finite(m["logloss"][i]),
                    "normalized_entropy": _finite(m["logloss"][i] / base) if base > 0 else None,
                    "calibration": _finite(m["mean_prediction"][i] / rate) if rate > 0 else None})
    return out


def gauc(probs: np.ndarray, labels: np.ndarray, groups: np.ndarray) -> dict:
    """Grouped AUC (TorchRec's GAUC): the mean of each group's ROC AUC weighted by its rows, over the groups that
    hold both classes: ``{"gauc", "groups"`` (those averaged), ``"rows"`` (their rows), ``"groups_total"}``; gauc is
    None when no group holds both classes."""
    _, codes = np.unique(np.asarray(groups).ravel(), return_inverse=True)
    count = int(codes.max()) + 1 if codes.size else 0
    m = grouped(probs, labels, codes.ravel(), count)
    used = np.isfinite(m["auc"])
    rows = int(m["rows"][used].sum())
    value = float(np.sum(m["auc"][used] * m["rows"][used]) / rows) if rows else None
    return {"gauc": value, "groups": int(used.sum()), "rows": rows, "groups_total": count}
