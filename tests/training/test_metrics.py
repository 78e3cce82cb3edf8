"""training.metrics against independent, straightforward computations (loops over pairs and thresholds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from training.metrics import (average_precision, binary_entropy, calibration_bins, compute_metrics, count_nonfinite,
                              log_loss, roc_auc, roc_curve)


def _data(n=200, seed=0, decimals=1):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(float)
    p = np.clip(0.25 * y + rng.random(n) * 0.75, 0, 1).round(decimals)  # rounding makes many ties
    return p, y


def pairwise_auc(p, y):
    """P(score of a positive > score of a negative), ties counting one half: every pair, one by one."""
    wins = total = 0
    for a, la in zip(p, y):
        for b, lb in zip(p, y):
            if la == 1 and lb == 0:
                total += 1
                wins += 1.0 if a > b else 0.5 if a == b else 0.0
    return wins / total


def stepwise_ap(p, y):
    """Average precision: for each distinct threshold t (descending), precision of 'score >= t' times
    the increase in recall since the previous threshold."""
    n_pos = sum(y)
    ap, prev_recall = 0.0, 0.0
    for t in sorted(set(p), reverse=True):
        chosen = [label for score, label in zip(p, y) if score >= t]
        tp = sum(chosen)
        recall = tp / n_pos
        ap += (recall - prev_recall) * (tp / len(chosen))
        prev_recall = recall
    return ap


@pytest.mark.parametrize("seed,decimals", [(0, 1), (1, 2), (2, 6)])
def test_auc_and_pr_auc_match_pairwise_and_stepwise_definitions(seed, decimals):
    p, y = _data(seed=seed, decimals=decimals)
    assert roc_auc(p, y) == pytest.approx(pairwise_auc(p, y), abs=1e-12)
    assert average_precision(p, y) == pytest.approx(stepwise_ap(p, y), abs=1e-12)


def test_known_small_examples():
    # the textbook example (scikit-learn's documentation): AUC 0.75, average precision 0.8333
    p, y = np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])
    assert roc_auc(p, y) == pytest.approx(0.75)
    assert average_precision(p, y) == pytest.approx(0.5 * 1.0 + 0.5 * (2 / 3))
    # all scores tied: AUC 0.5, AP = base rate
    assert roc_auc(np.full(4, 0.3), y) == 0.5
    assert average_precision(np.full(4, 0.3), y) == 0.5
    # perfect ranking
    assert roc_auc(np.array([0.1, 0.2, 0.8, 0.9]), y) == 1.0
    assert average_precision(np.array([0.1, 0.2, 0.8, 0.9]), y) == 1.0


def test_compute_metrics_matches_definitions():
    p, y = _data(n=300, seed=3, decimals=3)
    m = compute_metrics(p, y)
    n, pos = len(y), int(y.sum())
    q = [min(max(v, 1e-7), 1 - 1e-7) for v in p]
    ll = -sum(math.log(a) if b else math.log(1 - a) for a, b in zip(q, y)) / n
    rate = pos / n
    base = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    assert m["rows"] == n and m["positives"] == pos and m["base_rate"] == pytest.approx(rate)
    assert m["logloss"] == pytest.approx(ll, rel=1e-12)
    assert m["base_logloss"] == pytest.approx(base, rel=1e-12)
    assert m["normalized_entropy"] == pytest.approx(ll / base, rel=1e-12)
    assert m["accuracy"] == pytest.approx(sum((a >= 0.5) == (b == 1) for a, b in zip(p, y)) / n)
    assert m["mean_prediction"] == pytest.approx(sum(p) / n)
    assert m["calibration"] == pytest.approx((sum(p) / n) / rate)
    assert m["auc"] == pytest.approx(pairwise_auc(p, y), abs=1e-12)
    assert m["pr_auc"] == pytest.approx(stepwise_ap(p, y), abs=1e-12)


def test_base_rate_predictor_has_ne_one_and_auc_half():
    y = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0, 0], float)
    m = compute_metrics(np.full(10, 0.2), y)
    assert m["logloss"] == pytest.approx(m["base_logloss"]) == pytest.approx(binary_entropy(0.2))
    assert m["normalized_entropy"] == pytest.approx(1.0)
    assert m["auc"] == 0.5 and m["calibration"] == pytest.approx(1.0) and m["accuracy"] == 0.8


def test_order_independent_bit_for_bit_and_padding_dropped():
    p, y = _data(n=1000, seed=4, decimals=7)
    perm = np.random.default_rng(5).permutation(len(p))
    a = compute_metrics(p, y)
    b = compute_metrics(np.r_[p[perm], [0.99, 0.01]], np.r_[y[perm], [-1, -1]])
    assert a == b  # exactly equal: sums run in a canonical order


def test_roc_curve_area_is_the_auc_and_calibration_bins_cover_all_rows():
    p, y = _data(n=500, seed=6, decimals=2)
    fpr, tpr, thr = roc_curve(p, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1) and np.all(np.diff(fpr) >= 0)
    assert np.trapezoid(tpr, fpr) == pytest.approx(roc_auc(p, y), abs=1e-12)  # ties = diagonal segments
    bins = calibration_bins(p, y, n_bins=10)
    assert sum(b["count"] for b in bins) == len(p)
    for b in bins:
        mask = (p >= b["lo"]) & ((p < b["hi"]) | (b["hi"] == 1.0))
        assert b["count"] == mask.sum() and b["positive_rate"] == pytest.approx(y[mask].mean())
        assert b["mean_prediction"] == pytest.approx(p[mask].mean())


def test_degenerate_inputs():
    assert math.isnan(roc_auc(np.array([0.2, 0.3]), np.array([0, 0])))
    assert math.isnan(average_precision(np.array([0.2, 0.3]), np.array([0, 0])))
    assert math.isnan(compute_metrics(np.array([0.2, 0.3]), np.array([1, 1]))["normalized_entropy"])
    assert log_loss(np.array([0.0, 1.0]), np.array([1, 0])) == pytest.approx(-math.log(1e-7))
    with pytest.raises(ValueError, match="no rows"):
        compute_metrics(np.array([0.5]), np.array([-1]))
    with pytest.raises(ValueError, match="differ in length"):
        compute_metrics(np.array([0.5, 0.2]), np.array([1]))


# --- non-finite predictions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("how_many", ["one", "all"])
def test_non_finite_predictions_make_auc_log_loss_and_ne_nan(bad, how_many):
    """NaN scores have no rank: sorting them by label once gave all-NaN predictions AUC 1.0. Clipping an inf
    gave a plausible log loss. Any non-finite prediction makes every score of the ranking NaN instead."""
    from common import metrics as common_metrics

    p, y = _data()
    p = p.copy()
    if how_many == "one":
        p[3] = bad
    else:
        p[:] = bad
        y = np.sort(y)  # labels in order: the ranks of the NaN scores would have given AUC 1.0
    m = compute_metrics(p, y)
    for key in ("auc", "pr_auc", "logloss", "normalized_entropy"):
        assert math.isnan(m[key]), key
    assert math.isnan(common_metrics.roc_auc(p, y)) and math.isnan(common_metrics.log_loss(p, y))
    assert count_nonfinite(p, y) == (1 if how_many == "one" else len(p))
    assert count_nonfinite(np.r_[p, 0.5], np.r_[y, -1]) == count_nonfinite(p, y) == \
        count_nonfinite(np.r_[p, math.nan], np.r_[y, -1])  # padded rows do not count


def test_report_refuses_non_finite_predictions_and_writes_nothing(tmp_path):
    """The evaluation of a diverged model fails naming the split and the count, before anything is written:
    no metrics.json is left for a re-run to reuse."""
    from common.errors import UserError
    from training.report import summary, write_report
    from training.rundir import RunDir

    run = RunDir(str(tmp_path / "run"))
    p, y = _data()
    p = p.copy()
    p[[1, 5, 7]] = [math.nan, math.inf, math.nan]
    with pytest.raises(UserError, match=r"split 'test': 3 of 200 predictions are not finite .* Fix: .*65504"):
        write_report(run, "test", p, y, {"step": 7})
    assert run.eval_metrics("test") is None and not (tmp_path / "run" / "eval" / "test").exists()
    # a day with one class: AUC is undefined (null), and the printed line says n/a instead of failing after the write
    record = write_report(run, "test", np.full(10, 0.2), np.zeros(10), {"step": 7, "world_size": 1})
    assert record["auc"] is None and run.eval_metrics("test")["auc"] is None
    assert "auc n/a logloss 0.2231" in summary(record)
