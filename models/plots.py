"""A named model's pictures as PNG bytes (matplotlib, Agg backend): ``model_history_png`` its history
(challenger and champion AUC and log loss by date, the promotions marked), ``data_drift_png`` each feature's drift
on each night's test day (the data checks the history recorded)."""

from __future__ import annotations

from datetime import date as Date
from datetime import datetime, time, timedelta

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from common.png import png  # noqa: E402


MAX_TICKS = 14   # date ticks on a date axis: every day up to this many days, then every n-th day


def _daily(ax, days: list[Date]) -> None:
    """Ticks on whole days (never hours between two nights): each day, or every n-th one past ``MAX_TICKS``. The
    axis spans the days and half a day either side: matplotlib widens the axis of one day (a model's first night) to
    four years, and ticking each of its ~1,500 days took 10 CPU-seconds a picture."""
    if days:
        span = (max(days) - min(days)).days + 1
        half = timedelta(hours=12)
        ax.set_xlim(datetime.combine(min(days), time()) - half, datetime.combine(max(days), time()) + half)
        ax.xaxis.set_major_locator(mdates.DayLocator(interval=max(1, -(-span // MAX_TICKS))))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))


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
    _daily(loss_ax, days)
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
    _daily(axes[1], days)
    fig.autofmt_xdate()
    return png(fig)

