"""Prefect artifacts of the flows: dataset tables, sharding plan, training progress, metrics, plots, links.

Keys (lowercase, digits, dashes) stay the same from run to run, so the Artifacts page keeps a history.
"""

from __future__ import annotations

import base64
import time

from prefect.artifacts import (create_image_artifact, create_link_artifact, create_markdown_artifact,
                               create_progress_artifact, create_table_artifact, update_progress_artifact)

import feature_spec as fspec
from training.report import TABLE
from training.rundir import RunDir


def _link(uri: str) -> str:
    return uri if "://" in uri else f"file://{uri}"


def dataset(uri: str) -> None:
    """Per-feature cardinalities and index-0 shares (table), a markdown summary and a link."""
    spec = fspec.load(uri)
    meta = spec.metadata
    rows, index0 = meta.get("rows") or {}, meta.get("index0_rows") or {}
    table = [{"feature": name, "cardinality": spec.feature_spec[name].cardinality,
              "dtype": spec.feature_spec[name].dtype,
              **{f"index0 {s}": f"{index0[s][name] / rows[s]:.2%}" if rows.get(s) else "-"
                 for s in spec.splits if name in index0.get(s, {})}}
             for name in spec.categorical_features]
    create_table_artifact(table, key="dataset-features", description="Categorical features: embedding rows "
                          "(cardinality) and the share of rows at index 0 (missing or below the threshold).")
    settings = meta.get("preprocessing") or {}
    lines = [f"### Dataset `{meta.get('name', '?')}`", "", f"- location: `{uri}`",
             f"- fingerprint: `{meta.get('fingerprint', '?')}`",
             "- rows: " + ", ".join(f"{s} {rows.get(s, 0):,}" for s in spec.splits),
             f"- features: {len(spec.numerical_features)} numerical, {len(spec.categorical_features)} categorical, "
             f"label `{spec.label_feature}`", f"- bad rows skipped: {meta.get('bad_rows', 0)}",
             "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in settings.items() if k != "inputs"]
    lines.append(f"| inputs | {len(settings.get('inputs', []))} files |")
    create_markdown_artifact("\n".join(lines), key="dataset-summary", description="The preprocessed dataset.")
    create_link_artifact(_link(uri), link_text="dataset folder", key="dataset-location", description=uri)


def plan(run: RunDir) -> None:
    """The sharding plan written by rank 0."""
    text = run.read_text(RunDir.PLAN)
    create_markdown_artifact(f"### Sharding plan\n\n```\n{text}\n```", key="sharding-plan",
                             description="Embedding tables over ranks (TorchRec planner).")


class Progress:
    """A progress artifact updated at most every ``interval`` seconds."""

    def __init__(self, key: str, description: str, interval: float = 2.0):
        self.id = create_progress_artifact(0.0, key=key, description=description)
        self.interval, self.last, self.value = interval, 0.0, 0.0

    def update(self, done: int, total: int) -> None:
        value = 100.0 * done / max(total, 1)
        now = time.monotonic()
        if value != self.value and (now - self.last >= self.interval or done >= total):
            update_progress_artifact(self.id, value, description=f"step {done} of {total}")
            self.last, self.value = now, value


def metrics_table(metrics: dict, key: str) -> None:
    """The evaluation metrics as a table artifact."""
    table = [{"metric": label, "value": round(metrics[k], 6) if isinstance(metrics[k], float) else metrics[k]}
             for k, label in TABLE if metrics.get(k) is not None]
    warning = f" Warning: {metrics['warning']}." if metrics.get("warning") else ""
    create_table_artifact(table, key=key, description=f"Metrics on split '{metrics.get('split')}', "
                          f"checkpoint step {metrics.get('step')}.{warning}")


def evaluation(run: RunDir, split: str) -> dict:
    """Metrics table, ROC and calibration plots (data: URLs) and a link; returns the metrics."""
    metrics = run.eval_metrics(split)
    metrics_table(metrics, "evaluation-metrics")
    for name, key in ((RunDir.ROC, "roc-curve"), (RunDir.CALIBRATION, "calibration-plot")):
        data = base64.b64encode(run.eval_plot(split, name)).decode()
        create_image_artifact(f"data:image/png;base64,{data}", key=key, description=f"{name} on '{split}'")
    where = run.eval_dir(split)
    create_link_artifact(_link(where), link_text="evaluation folder", key="evaluation-location", description=where)
    return metrics
