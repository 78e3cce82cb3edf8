"""Evaluation plots as PNG bytes (matplotlib, Agg backend; no display needed).

``roc_png`` draws the ROC curve with its AUC in the legend; ``calibration_png`` draws the
reliability diagram (mean prediction vs observed click rate per probability bin, with the
diagonal for reference) above a histogram of how many rows fall in each bin; ``training_curve_png``
draws a run's metrics.jsonl: loss, validation AUC and log loss (the best evaluation marked), samples/s;
``model_history_png`` draws a named model's history: challenger and champion AUC and log loss by date, the
promotions marked; ``data_drift_png`` each feature's drift on each night's test day (the data checks the history
recorded).
"""

from __future__ import annotations

from datetime import date as Date

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


def model_history_png(history: list[dict], title: str = "") -> bytes:
    """Challenger and champion AUC (and log loss below) on each run's test day, from a model's history.jsonl
    lines (``date``, ``challenger`` and ``champion`` metrics, ``decision``); promotions are marked with a star.
    Missing values (no champion yet, a NaN AUC) leave gaps."""
    lines = sorted(history, key=lambda e: e["date"])
    days = [Date.fromisoformat(e["date"]) for e in lines]

    def series(side: str, key: str) -> list[float]:
        return [np.nan if (e.get(side) or {}).get(key) is None else e[side][key] for e in lines]

    fig, (auc_ax, loss_ax) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for ax, key, label in ((auc_ax, "auc", "AUC"), (loss_ax, "logloss", "log loss")):
        ax.plot(days, series("challenger", key), "o-", color="tab:blue", lw=1.5, label=f"challenger {label}")
        ax.plot(days, series("champion", key), "s--", color="tab:grey", lw=1.5, label=f"champion {label}")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    promoted = [(d, e["challenger"].get("auc")) for d, e in zip(days, lines)
                if e.get("decision") in ("promoted", "first") and e["challenger"].get("auc") is not None]
    if promoted:
        auc_ax.plot(*zip(*promoted), "*", color="tab:orange", markersize=15, label="promoted", zorder=3)
    if not lines:
        auc_ax.text(0.5, 0.5, "no runs yet", ha="center", va="center", transform=auc_ax.transAxes)
    kept = sum(e.get("decision") == "kept" for e in lines)
    auc_ax.set_title(f"Champion and challenger on each test day{' - ' + title if title else ''}\n"
                     f"{len(lines)} runs: {len(promoted)} promoted, {kept} kept", fontsize=10)
    auc_ax.legend(loc="best", fontsize=8)
    loss_ax.set_xlabel("test day")
    fig.autofmt_xdate()
    return png(fig)


def data_drift_png(history: list[dict], title: str = "") -> bytes:
    """Each feature's drift on each night's test day, from a model's history.jsonl lines (``data_checks.test_day``):
    categoricals (check ``drift``: the largest change of a top value's share) above, numericals (check ``psi``)
    below, one line per feature, each threshold dashed; a night without checks leaves a gap (a date's last line
    counts)."""
    lines = sorted({e["date"]: e for e in history if e.get("date")}.values(), key=lambda e: e["date"])  # a date's last
    days = [Date.fromisoformat(e["date"]) for e in lines]
    fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for ax, name, label in ((axes[0], "drift", "categorical drift (L-inf of top shares)"),
                            (axes[1], "psi", "numerical drift (PSI)")):
        series: dict[str, list[float]] = {}
        limits = set()
        for k, e in enumerate(lines):
            for c in ((e.get("data_checks") or {}).get("test_day") or []):
                if c.get("check") == name:
                    series.setdefault(c["feature"], [np.nan] * len(lines))[k] = c["value"]
                    limits.add(c["threshold"])
        for name, values in series.items():
            ax.plot(days, values, "o-", lw=1, markersize=3, label=name)
        for limit in limits:
            ax.axhline(limit, ls="--", color="tab:red", lw=1)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=6, ncol=2)
        else:
            ax.text(0.5, 0.5, "no data checks recorded", ha="center", va="center", transform=ax.transAxes)
    axes[0].set_title(f"Drift of each feature on each test day{' - ' + title if title else ''}", fontsize=10)
    axes[1].set_xlabel("test day")
    fig.autofmt_xdate()
    return png(fig)

