"""Evaluation plots as PNG bytes (matplotlib, Agg backend; no display needed).

``roc_png`` draws the ROC curve with its AUC in the legend; ``calibration_png`` draws the
reliability diagram (mean prediction vs observed click rate per probability bin, with the
diagonal for reference) above a histogram of how many rows fall in each bin; ``training_curve_png``
draws a run's metrics.jsonl: loss, validation AUC and log loss (the best evaluation marked), samples/s (a named model's
pictures are ``models.plots``).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from common.png import png  # noqa: E402
from training import metrics  # noqa: E402


def _subtitle(m: dict) -> str:
    return f"{m['rows']:,} rows, {m['positives']:,} positives (base rate {m['base_rate']:.3f})"


def roc_png(probs: np.ndarray, labels: np.ndarray, title: str, m: dict | None = None) -> bytes:
    """ROC curve of the predictions; ``m`` (compute_metrics' result) is recomputed if not given."""
    m = m or metrics.compute_metrics(probs, labels)
    fpr, tpr, _ = metrics.roc_curve(probs, labels)
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.plot(fpr, tpr, color="tab:blue", lw=2, label=f"model (AUC = {m['auc']:.4f})")
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="random (AUC = 0.5)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.005)
    ax.set_xlabel("False positive rate")
    ax.set_ylabel("True positive rate")
    ax.set_title(f"ROC curve - {title}\n{_subtitle(m)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return png(fig)


def calibration_png(probs: np.ndarray, labels: np.ndarray, title: str, m: dict | None = None,
                    n_bins: int = 10) -> bytes:
    """Reliability diagram over ``n_bins`` equal-width probability bins, with row counts."""
    m = m or metrics.compute_metrics(probs, labels)
    bins = metrics.calibration_bins(probs, labels, n_bins)
    fig, (ax, hist) = plt.subplots(2, 1, figsize=(5.5, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="perfectly calibrated")
    x = [b["mean_prediction"] for b in bins]
    y = [b["positive_rate"] for b in bins]
    ax.plot(x, y, "o-", color="tab:orange", lw=2,
            label=f"model (mean pred / rate = {m['calibration']:.3f})")
    for b in bins:
        ax.annotate(f"n={b['count']:,}", (b["mean_prediction"], b["positive_rate"]), textcoords="offset points",
                    xytext=(4, -11), fontsize=7, color="dimgrey")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("Observed click rate")
    ax.set_title(f"Calibration - {title}\n{_subtitle(m)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    width = 1 / n_bins
    hist.bar([b["lo"] + width / 2 for b in bins], [b["count"] for b in bins], width=width * 0.9, color="tab:orange",
             alpha=0.6)
    hist.set_xlabel("Predicted click probability (bin)")
    hist.set_ylabel("Rows")
    hist.grid(alpha=0.3)
    return png(fig)


def training_curve_png(records: list[dict], best_metric: str, title: str) -> bytes:
    """Loss by step, validation AUC and log loss by evaluation (best by ``best_metric`` marked) and
    samples/s, from metrics.jsonl records (step records have ``loss``, evaluations ``eval_split``)."""
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_split" in r]
    fig, (loss_ax, eval_ax, rate_ax) = plt.subplots(3, 1, figsize=(7, 8), sharex=True,
                                                    gridspec_kw={"height_ratios": [2, 2, 1]})
    loss_ax.plot([r["step"] for r in steps], [r["loss"] for r in steps], color="tab:blue", lw=1.5)
    loss_ax.set_ylabel("training loss")
    loss_ax.set_title(f"Training curve - {title}", fontsize=10)
    if evals:
        x = [r["step"] for r in evals]
        eval_ax.plot(x, [r["auc"] for r in evals], "o-", color="tab:green", label=f"{evals[-1]['eval_split']} AUC")
        loss_twin = eval_ax.twinx()
        loss_twin.plot(x, [r["logloss"] for r in evals], "s--", color="tab:red", label="log loss")
        loss_twin.set_ylabel("log loss", color="tab:red")
        best = metrics.best_evaluation(evals, best_metric)
        eval_ax.axvline(best["step"], color="grey", ls=":", lw=1.5)
        eval_ax.annotate(f"best: step {best['step']}\nAUC {best['auc']:.4f}, log loss {best['logloss']:.4f}",
                         (best["step"], best["auc"]), textcoords="offset points", xytext=(6, -24), fontsize=8,
                         bbox={"boxstyle": "round", "fc": "white", "alpha": 0.85})
        eval_ax.legend(handles=eval_ax.get_lines()[:1] + loss_twin.get_lines(), loc="lower right", fontsize=8)
    else:
        eval_ax.text(0.5, 0.5, "no evaluation yet", ha="center", va="center", transform=eval_ax.transAxes)
    eval_ax.set_ylabel("validation AUC", color="tab:green")
    rate_ax.plot([r["step"] for r in steps], [r.get("samples_per_s", 0) for r in steps], color="tab:purple", lw=1)
    rate_ax.set_ylabel("samples/s")
    rate_ax.set_xlabel("step")
    for ax in (loss_ax, eval_ax, rate_ax):
        ax.grid(alpha=0.3)
    return png(fig)
