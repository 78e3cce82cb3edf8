"""The evaluation report: metrics and plots of gathered predictions written to ``<run>/eval/<split>/``
(``RunDir.write_eval``), and the metrics as a printable table."""

from __future__ import annotations

import math
from typing import Any

from common.errors import UserError
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
    ``metrics.json`` (the metrics plus ``info``: checkpoint, step, dataset, ...). Returns the record.

    Everything is computed (the summary line included) before anything is written, and metrics.json last: a
    failure leaves no metrics.json for a re-run to reuse. Predictions that are not all finite (a diverged
    model) are a UserError naming the split and their count, and write nothing."""
    from training import metrics, plots  # here: format_table's users need no matplotlib

    if bad := metrics.count_nonfinite(probs, labels):
        rows = len(metrics.valid(probs, labels)[0])
        raise UserError(
            f"evaluation of step {info.get('step')} on split '{split}': {bad:,} of {rows:,} predictions are not "
            "finite (NaN or inf), so AUC, log loss and NE are NaN; nothing was written. The model diverged in "
            "training (look for the first non-finite loss in its log). Fix: numerical features above float16's "
            "65504 (use a log1p transform or --numerical-dtype float32), or a lower learning rate.")
    m = metrics.compute_metrics(probs, labels)
    title = f"split '{split}', step {info.get('step')}"
    record = {**{k: _json_value(v) for k, v in m.items()}, "split": split, **info,
              "calibration_bins": metrics.calibration_bins(probs, labels)}
    images = {RunDir.ROC: plots.roc_png(probs, labels, title, m),
              RunDir.CALIBRATION: plots.calibration_png(probs, labels, title, m)}
    summary(record)  # the line the caller prints cannot fail after the write
    run.write_eval(split, record, images)
    return record


def _number(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def summary(record: dict[str, Any]) -> str:
    """One line: step, split, rows, ranks, AUC and log loss (``n/a`` where a metric is undefined, e.g. one class)."""
    return (f"evaluated step {record.get('step')} on '{record['split']}' ({record['rows']:,} rows, "
            f"{record.get('world_size')} rank(s)): auc {_number(record.get('auc'))} "
            f"logloss {_number(record.get('logloss'))}")


def format_table(record: dict[str, Any]) -> str:
    """The metrics as an aligned two-column table."""
    lines = []
    for key, label in TABLE:
        v = record.get(key)
        text = "n/a" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:.4f}"
        lines.append(f"  {label:<32}{text:>10}")
    return "\n".join(lines)
