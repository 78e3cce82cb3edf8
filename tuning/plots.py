"""A tune's pictures as PNG bytes (matplotlib, Agg): the best-so-far curve over the trials, and the parameters'
importances (Optuna's PED-ANOVA evaluator, which handles the fields sampled only under a condition)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from common.png import png  # noqa: E402


def best_so_far_png(points: list[tuple[int, float, float]], baseline: float | None, title: str) -> bytes:
    """Each complete trial's validation AUC and the best so far (``trials.best_so_far``), trial 0's as a line."""
    fig, ax = plt.subplots(figsize=(7, 4))
    if points:
        numbers = [p[0] for p in points]
        ax.plot(numbers, [p[1] for p in points], "o", color="tab:blue", alpha=0.6, label="trial")
        ax.step(numbers, [p[2] for p in points], where="post", color="tab:green", lw=2, label="best so far")
    if baseline is not None:
        ax.axhline(baseline, color="grey", ls="--", lw=1.2, label=f"trial 0 (base config) {baseline:.4f}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("validation AUC")
    ax.set_title(f"Tune {title}: best validation AUC so far", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def importances(study: optuna.Study) -> dict[str, float]:
    """Each sampled field's importance for the validation AUC (empty until two complete trials differ)."""
    try:
        return optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError):   # too few complete trials, or none that vary
        return {}


def importances_png(values: dict[str, float], title: str) -> bytes:
    """A horizontal bar per field, most important on top."""
    items = sorted(values.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(len(items), 2) + 1.2))
    if items:
        ax.barh([k for k, _ in items], [v for _, v in items], color="tab:purple")
        for i, (_, v) in enumerate(items):
            ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
    else:
        ax.text(0.5, 0.5, "too few complete trials", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("importance for validation AUC (PED-ANOVA)")
    ax.set_title(f"Tune {title}: parameter importances", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return png(fig)
