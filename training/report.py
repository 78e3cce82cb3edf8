"""The evaluation report: metrics and plots of gathered predictions written to ``<run>/eval/<split>/``
(``RunDir.write_eval``), and the metrics as a printable table."""

from __future__ import annotations

import math
from typing import Any

from training.rundir import RunDir

# (key, label) of the metrics table, in print order
TABLE = [("auc", "ROC AUC"), ("logloss", "log loss"), ("normalized_entropy", "normalized entropy"),
         ("base_logloss", "base-rate log loss"), ("pr_auc", "PR AUC (average precision)"),
         ("accuracy", "accuracy @ 0.5"), ("calibration", "calibration (mean pred / rate)"),
         ("base_rate", "base rate"), ("mean_prediction", "mean prediction"), ("rows", "rows"),
         ("positives", "positives")]


def _json_value(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def write_report(run: RunDir, split: str, probs, labels, info: dict[str, Any]) -> dict[str, Any]:
    """Compute the metrics of gathered predictions and write ``eval/<split>/``: the plots, then
    ``metrics.json`` (the metrics plus ``info``: checkpoint, step, dataset, ...). Returns the record."""
    from training import metrics, plots  # here: format_table's users need no matplotlib

    m = metrics.compute_metrics(probs, labels)
    title = f"split '{split}', step {info.get('step')}"
    record = {**{k: _json_value(v) for k, v in m.items()}, "split": split, **info,
              "calibration_bins": metrics.calibration_bins(probs, labels)}
    run.write_eval(split, record, {RunDir.ROC: plots.roc_png(probs, labels, title, m),
                                   RunDir.CALIBRATION: plots.calibration_png(probs, labels, title, m)})
    return record


def format_table(record: dict[str, Any]) -> str:
    """The metrics as an aligned two-column table."""
    lines = []
    for key, label in TABLE:
        v = record.get(key)
        text = "n/a" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:.4f}"
        lines.append(f"  {label:<32}{text:>10}")
    return "\n".join(lines)
