"""Prefect artifacts of the flows: dataset tables, sharding plan, training progress and curve, metrics, plots,
output locations, the store's runs table and clean-up table, a night's data checks, a named model's history (table,
decision, AUC by date, each feature's drift by date).

Keys (lowercase, digits, dashes) stay the same from run to run, so the Artifacts page keeps a history; every
key is named below. Pictures are markdown artifacts with an embedded PNG (an image artifact shows its whole
base64 URL under the picture); the plots of a subflow are also put on its parent (the pipeline) run.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import re
import time
from datetime import timezone
from urllib.parse import quote

import numpy as np
from prefect import get_client
from prefect.artifacts import (MarkdownArtifact, TableArtifact, create_markdown_artifact,
                               create_progress_artifact, create_table_artifact, update_progress_artifact)
from prefect.client.schemas.actions import ArtifactUpdate
from prefect.context import FlowRunContext

import feature_spec as fspec
from common.errors import UserError
from common.store import Store, filesystem, storage_options
from training import RunDir, TABLE, config_hash, metrics as tm
from models import interval_text, registry

DATASET_FEATURES, DATASET_SUMMARY, DATASET_LOCATION = "dataset-features", "dataset-summary", "dataset-location"
SHARDING_PLAN, TRAINING_PROGRESS = "sharding-plan", "training-progress"
TRAINING_CURVE, TRAINING_EVALUATIONS = "training-curve", "training-evaluations"
EVALUATION_METRICS, EVALUATION_LOCATION = "evaluation-metrics", "evaluation-location"
ROC_CURVE, CALIBRATION_PLOT = "roc-curve", "calibration-plot"
PIPELINE_METRICS, PIPELINE_OUTPUTS = "pipeline-metrics", "pipeline-outputs"
MODEL_HISTORY, MODEL_DECISION, MODEL_AUC = "history", "decision", "auc"  # model-<name>-<kind> (model_key)
MODEL_DRIFT = "drift"   # model-<name>-drift: each feature's drift by test day
MODEL_DAYS = "days"     # model-<name>-days: the days its nights read and the data gate's verdicts
DATA_CHECKS = "data-checks"
SCORE_SUMMARY = "score-summary"
TUNE_TRIALS, TUNE_RESULT = "tune-trials", "tune-result"
TUNE_BEST_SO_FAR, TUNE_IMPORTANCES = "tune-best-so-far", "tune-importances"


def runs_key(store_uri: str) -> str:
    """The key of a store's runs table: ``runs-<hash of the store URI>`` (one table per store)."""
    return "runs-" + hashlib.sha1(store_uri.encode()).hexdigest()[:8]


def gc_key(store_uri: str) -> str:
    """The key of a store's clean-up table: ``gc-<hash of the store URI>`` (one table per store)."""
    return "gc-" + hashlib.sha1(store_uri.encode()).hexdigest()[:8]


def location(uri: str) -> str:
    """Markdown for a stored file or folder: a copyable path (browsers block file:// links), for s3:// with
    an http link where an endpoint is configured (AWS_ENDPOINT_URL)."""
    endpoint = storage_options(uri).get("endpoint_url")
    if not endpoint:
        return f"`{uri}`"
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return f"`{uri}` ([open]({endpoint.rstrip('/')}/{bucket}?prefix={quote(key.rstrip('/') + '/')}))"


def _picture(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def _owners() -> list[dict]:
    """The runs an artifact goes on: this flow run and, for a subflow, its parent flow run (there attached
    to the subflow's task run), so the pipeline run's Artifacts tab has the plots too."""
    owners: list[dict] = [{}]
    ctx = FlowRunContext.get()
    parent_task = ctx.flow_run.parent_task_run_id if ctx and ctx.flow_run else None
    if parent_task:
        with get_client(sync_client=True) as client:
            owners.append({"flow_run_id": client.read_task_run(parent_task).flow_run_id, "task_run_id": parent_task})
    return owners


def _publish(owners: list[dict], cls: type, **fields) -> None:
    for owner in owners:
        cls(**fields, **owner).create(_sync=True)  # as prefect's create_*_artifact call it


def _positives(uri: str, spec: fspec.FeatureSpec, split: str) -> int:
    """Rows of ``split`` with a positive label (label.bin: one byte per row), read in 16 MiB blocks."""
    fs, path = filesystem(fspec.join_uri(uri, spec.file_of(split, spec.label_feature)[0]))
    with fs.open(path, "rb") as f:
        blocks = iter(lambda: f.read(1 << 24), b"")
        return sum(int(np.count_nonzero(np.frombuffer(block, np.uint8))) for block in blocks)


def dataset(uri: str) -> None:
    """Per-feature cardinalities and index-0 shares (table), a markdown summary and the location."""
    spec = fspec.load(uri)
    meta = spec.metadata
    rows, index0 = meta.get("rows") or {}, meta.get("index0_rows") or {}
    table = [{"feature": name, "cardinality": spec.feature_spec[name].cardinality,
              "dtype": spec.feature_spec[name].dtype,
              **{f"index0 {s}": f"{index0[s][name] / rows[s]:.2%}" if rows.get(s) else "-"
                 for s in spec.splits if name in index0.get(s, {})}}
             for name in spec.categorical_features]
    create_table_artifact(table, key=DATASET_FEATURES, description="Categorical features: embedding rows "
                          "(cardinality) and the share of rows at index 0 (missing or below the threshold).")
    positives = {s: _positives(uri, spec, s) for s in spec.splits if rows.get(s)}
    settings = meta.get("preprocessing") or {}
    lines = [f"### Dataset `{meta.get('name', '?')}`", "", f"- location: {location(uri)}",
             f"- fingerprint: `{meta.get('fingerprint', '?')}`",
             "- rows: " + ", ".join(f"{s} {rows.get(s, 0):,}" for s in spec.splits),
             "- label rate (positives / rows): " + ", ".join(f"{s} {n / rows[s]:.2%} ({n:,})"
                                                             for s, n in positives.items()),
             f"- features: {len(spec.numerical_features)} numerical, {len(spec.categorical_features)} categorical, "
             f"label `{spec.label_feature}`", f"- bad rows skipped: {meta.get('bad_rows', 0)}",
             "", "| setting | value |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in settings.items() if k != "inputs"]
    lines.append(f"| inputs | {len(settings.get('inputs', []))} files |")
    create_markdown_artifact("\n".join(lines), key=DATASET_SUMMARY, description="The preprocessed dataset.")
    create_markdown_artifact(f"Dataset folder: {location(uri)}", key=DATASET_LOCATION, description=uri)


def plan(run: RunDir) -> str:
    """The sharding plan written by rank 0; returns its text."""
    text = run.read_text(RunDir.PLAN)
    create_markdown_artifact(f"### Sharding plan\n\n```\n{text}\n```", key=SHARDING_PLAN,
                             description="Embedding tables over ranks (TorchRec planner).")
    return text


class Progress:
    """The training-progress artifact, updated at most every ``interval`` seconds."""

    def __init__(self, description: str, interval: float = 2.0):
        self.id = create_progress_artifact(0.0, key=TRAINING_PROGRESS, description=description)
        self.interval, self.last, self.value = interval, 0.0, 0.0

    def update(self, done: int, total: int) -> None:
        value = 100.0 * done / max(total, 1)
        now = time.monotonic()
        if value != self.value and (now - self.last >= self.interval or done >= total):
            update_progress_artifact(self.id, value, description=f"step {done} of {total}")
            self.last, self.value = now, value


class TrainingCurve:
    """A run's training-curve picture and its table of evaluations so far, from metrics.jsonl, on this flow
    run and its parent. ``update()`` rewrites them in place (one card per run in the Artifacts tab, not one
    per evaluation) when metrics.jsonl has changed."""

    def __init__(self, run: RunDir, best_metric: str):
        from training import plots  # matplotlib: only where a curve is drawn

        self.run, self.best_metric, self.plots, self.owners = run, best_metric, plots, _owners()
        self.ids: dict[tuple[str, int], object] = {}  # (key, owner) -> the artifact's id
        self.shown: tuple | None = None

    def update(self, upto_step: int | None = None) -> None:
        """Show metrics.jsonl's records (``upto_step``: those up to that step, e.g. the evaluation just announced:
        a later evaluation already written then shows at its own line, however late the lines are read)."""
        records = self.run.metrics()
        if upto_step is not None:
            records = [r for r in records if r.get("step", 0) <= upto_step]
        if not records or (len(records), records[-1]) == self.shown:
            return
        self.shown = (len(records), records[-1])
        png = self.plots.training_curve_png(records, self.best_metric, f"run {self.run.name}")
        self._put(MarkdownArtifact, TRAINING_CURVE, f"Loss, validation AUC and log loss (best by {self.best_metric} "
                  "marked), samples/s.", markdown=_picture(png, TRAINING_CURVE))
        best = tm.best_evaluation(records, self.best_metric)
        table = [{"step": r["step"], "epoch": r["epoch"], "split": r["eval_split"], "AUC": round(r["auc"], 6),
                  "log loss": round(r["logloss"], 6), "rows": r["rows"], "best": "yes" if r is best else ""}
                 for r in records if "eval_split" in r]
        self._put(TableArtifact, TRAINING_EVALUATIONS, f"Validation results so far (best by {self.best_metric}).",
                  table=table)

    def _put(self, cls: type, key: str, description: str, **content) -> None:
        for i, owner in enumerate(self.owners):
            artifact = cls(key=key, description=description, **content, **owner)
            if (key, i) in self.ids:
                with get_client(sync_client=True) as client:
                    client.update_artifact(self.ids[key, i], ArtifactUpdate(data=artifact.format(_sync=True),
                                                                            description=description))
            else:
                self.ids[key, i] = artifact.create(_sync=True).id


def metrics_table(metrics: dict, key: str) -> None:
    """The evaluation metrics as a table artifact (key: EVALUATION_METRICS or PIPELINE_METRICS)."""
    table = [{"metric": label, "value": round(metrics[k], 6) if isinstance(metrics[k], float) else metrics[k]}
             for k, label in TABLE if metrics.get(k) is not None]
    warning = f" Warning: {metrics['warning']}." if metrics.get("warning") else ""
    create_table_artifact(table, key=key, description=f"Metrics on split '{metrics.get('split')}', "
                          f"checkpoint step {metrics.get('step')}.{warning}")


def evaluation(run: RunDir, split: str) -> dict:
    """Metrics table, ROC and calibration plots (also on the parent run) and the location; returns the metrics."""
    metrics = run.eval_metrics(split)
    metrics_table(metrics, EVALUATION_METRICS)
    owners = _owners()
    for name, key in ((RunDir.ROC, ROC_CURVE), (RunDir.CALIBRATION, CALIBRATION_PLOT)):
        _publish(owners, MarkdownArtifact, key=key, markdown=_picture(run.eval_plot(split, name), key),
                 description=f"{name} on '{split}', checkpoint step {metrics.get('step')}")
    where = run.eval_dir(split)
    create_markdown_artifact(f"Evaluation folder: {location(where)}", key=EVALUATION_LOCATION, description=where)
    return metrics


def score_summary(summary: dict) -> None:
    """A scoring's summary (rows, output, model) with its metrics when the rows had labels, as markdown."""
    lines = ["### Scores", "", f"- rows scored: {summary['rows']:,} (bad rows skipped: {summary.get('bad_rows', 0):,})",
             f"- output: {location(summary['out'])}", f"- run: {location(summary['run'])}, checkpoint step "
             f"{summary['step']}", f"- vocabularies of: {location(summary['dataset'])}"]
    if summary.get("auc") is not None:
        lines += ["", "| metric | value |", "|---|---|"]
        lines += [f"| {label} | {summary[k]:.6g} |" for k, label in TABLE if isinstance(summary.get(k), float)]
    create_markdown_artifact("\n".join(lines), key=SCORE_SUMMARY, description=f"Scores written to {summary['out']}.")


def tune_trials(table: list[dict], name: str) -> None:
    """A tune's trials so far (a new version of the table after each trial)."""
    create_table_artifact(table, key=TUNE_TRIALS, description=f"Tune {name}: each trial's state, validation AUC, "
                          "duration, steps trained / planned and sampled values (trial 0: the base config).")


def tune_result(summary: dict, best_so_far_png: bytes, importances_png: bytes) -> None:
    """A tune's result: the best trial against trial 0 on validation and test, where its config is, what pruning
    saved; the best-so-far curve and the parameter importances as pictures."""
    base, best, pruning = summary.get("base") or {}, summary["best"], summary["pruning"]
    lines = [f"### Tune `{summary['tune'].rsplit('/', 1)[-1]}`", "", f"- dataset: {location(summary['dataset'])}",
             f"- trials: {summary['trials']} ({pruning['pruned_trials']} pruned: "
             f"{pruning['share_saved']:.0%} of their planned training samples saved)",
             f"- best: trial {best['trial']}, validation AUC {best['val_auc']:.4f}"
             + (f" (trial 0, the base config: {base['val_auc']:.4f}; gain {summary['val_gain']:+.4f})" if base else "")]
    if "best_test" in summary:
        lines.append(f"- {summary['test_split']} AUC: best {summary['best_test']['auc']:.4f}"
                     + (f", base {summary['base_test']['auc']:.4f} (gain {summary['test_gain']:+.4f})"
                        if "base_test" in summary else ""))
    lines.append(f"- best config: {location(summary['best_config'])}")
    if summary.get("model_tuned_config"):
        lines.append(f"- the model's tuned config: {location(summary['model_tuned_config'])}")
    create_markdown_artifact("\n".join(lines), key=TUNE_RESULT, description="The tune's best trial and its gain.")
    create_markdown_artifact(_picture(best_so_far_png, TUNE_BEST_SO_FAR), key=TUNE_BEST_SO_FAR,
                             description="Validation AUC of each complete trial and the best so far.")
    create_markdown_artifact(_picture(importances_png, TUNE_IMPORTANCES), key=TUNE_IMPORTANCES,
                             description="How much each sampled field explains the validation AUC.")


def outputs(where: dict[str, str]) -> None:
    """Where a pipeline run's outputs are stored (name -> URI)."""
    lines = ["### Pipeline outputs", ""] + [f"- {k}: {location(v)}" for k, v in where.items()]
    create_markdown_artifact("\n".join(lines), key=PIPELINE_OUTPUTS, description="Where this run's outputs are stored.")


_RUN_COLUMNS = ("run", "dataset", "config", "epochs", "world size", "val AUC (best)", "val log loss", "test AUC",
                "test log loss", "test NE", "trained")


def _run_row(run: RunDir, store: Store) -> dict:
    """The runs table's row of ``run`` in ``store`` (its config hash as the default run names hash it: the same
    wherever the store is); a run whose files cannot be read (another version's config, a truncated metrics file)
    gets a row saying so instead of failing the flow that lists it."""
    row = dict.fromkeys(_RUN_COLUMNS, "-") | {"run": run.name}
    try:
        cfg = run.load_config()
    except UserError as e:
        return row | {"trained": f"config unreadable: {e}"}
    try:
        done = run.completion() or {}
        best = tm.best_evaluation(run.metrics(), cfg.best_metric) or {}
        test = run.eval_metrics("test") or {}
        stamp = run.fs.modified(run.path(RunDir.DONE)) if done else None
    except (OSError, ValueError, TypeError, AttributeError) as e:   # ValueError: JSON that does not parse
        return row | {"trained": f"unreadable: {type(e).__name__}: {e}"}

    def num(value):
        return round(value, 4) if isinstance(value, float) else "-"

    return row | {"dataset": posixpath.basename(cfg.dataset.rstrip("/")), "config": config_hash(cfg, store),
                  "epochs": cfg.epochs, "world size": done.get("world_size", "-") if isinstance(done, dict) else "-",
                  "val AUC (best)": num(best.get("auc")), "val log loss": num(best.get("logloss")),
                  "test AUC": num(test.get("auc")), "test log loss": num(test.get("logloss")),
                  "test NE": num(test.get("normalized_entropy")),
                  "trained": stamp.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if stamp else "incomplete"}


def runs(store_uri: str) -> list[str]:
    """Every run in ``<store>/runs/`` with its dataset, config hash, size and metrics: one page compares them.
    Returns the names of the runs that could not be read (listed with the reason, never failing)."""
    store = Store(store_uri)
    rows = [_run_row(run, store) for run in (RunDir(store.run_uri(name)) for name in store.runs()) if run.has_config()]
    create_table_artifact(rows, key=runs_key(store_uri), description=f"The runs in {store_uri}/runs "
                          "(validation: the best evaluation during training; test: the evaluate flow's).")
    return [row["run"] for row in rows if str(row["trained"]).startswith(("config unreadable", "unreadable"))]


def gc_table(report) -> None:
    """What a gc (``models.gc.Report``) removed, with sizes and reasons (a dry run: would remove)."""
    verb = "would remove" if report.dry_run else "removed"
    create_table_artifact(report.rows(), key=gc_key(report.store), description=f"What the clean-up of {report.store} "
                          f"{verb}: {len(report.removals)} item(s), {report.bytes} bytes.")


def model_key(name: str, kind: str) -> str:
    """``model-<name>-<kind>`` (kind: MODEL_HISTORY, MODEL_DECISION, MODEL_AUC, MODEL_DRIFT, MODEL_DAYS) with the name lowercased and
    anything but letters and digits made a dash; a name that changes so gets a short hash of itself appended,
    so that two models never share a key."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name.lower())).strip("-")
    if slug != name:
        slug += "-" + hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"model-{slug}-{kind}"


def _num(value) -> object:
    return round(value, 6) if isinstance(value, float) else "-" if value is None else value


def _interval(entry: dict) -> str:
    """The paired bootstrap interval of the AUC gain in a history line, with its confidence ("-": none)."""
    interval = interval_text(entry.get("paired"))
    return f"{interval} ({entry['paired']['confidence']:g})" if interval else "-"


def _history_row(entry: dict) -> dict:
    challenger, champion = entry.get("challenger") or {}, entry.get("champion") or {}
    window = entry.get("window") or []
    return {"date": entry.get("date"), "decision": entry.get("decision"),
            "challenger AUC": _num(challenger.get("auc")), "champion AUC": _num(champion.get("auc")),
            "challenger log loss": _num(challenger.get("logloss")), "champion log loss": _num(champion.get("logloss")),
            "rows": _num(challenger.get("rows")), "margin": entry.get("promote_margin"),
            "AUC gain interval": _interval(entry),
            "window": f"{window[0]} .. {window[-1]} ({len(window)} days)" if window else "-",
            "run": posixpath.basename(str(entry.get("run")).rstrip("/")),
            "champion run": posixpath.basename(entry["champion_run"].rstrip("/")) if entry.get("champion_run") else "-",
            "reason": entry.get("reason"), "at": entry.get("at")}


def model_history(model_uri: str, name: str, entry: dict | None = None) -> None:
    """A named model's whole history as a table (fixed key, so each night adds a version showing every night),
    a markdown summary of ``entry``'s decision (default: the last line) and a picture of champion and
    challenger AUC by date."""
    from models import plots

    lines = registry.history(model_uri)
    create_table_artifact([_history_row(e) for e in lines], key=model_key(name, MODEL_HISTORY),
                          description=f"Every run of model '{name}': challenger and champion on the run's test day, "
                          "and the decision (oldest first).")
    entry = entry or (lines[-1] if lines else None)
    if entry is not None:
        challenger, champion = entry.get("challenger") or {}, entry.get("champion") or {}
        cells = [("AUC", "auc"), ("log loss", "logloss"), ("rows", "rows"), ("positives", "positives"),
                 ("base-rate log loss", "base_logloss"), ("predicted/observed clicks", "calibration"),
                 ("rows' fingerprint", "fingerprint")]
        table = ["| | challenger | champion |", "|---|---|---|"]
        table += [f"| {label} | {_num(challenger.get(k))} | {_num(champion.get(k))} |" for label, k in cells]
        table.append(f"| run | {location(entry['run']) if entry.get('run') else '(none)'} | "
                     f"{location(entry['champion_run']) if entry.get('champion_run') else '(none)'} |")
        text = [f"### Model `{name}`, {entry['date']}: **{entry['decision']}**", "", entry.get("reason", ""), "",
                *table, "", f"- promote margin (AUC): {entry.get('promote_margin')}",
                f"- gates: {', '.join(f'{k} {v}' for k, v in (entry.get('gates') or {}).items()) or '-'}",
                f"- AUC gain interval (paired bootstrap): {_interval(entry)}",
                f"- window: {', '.join(entry.get('window') or []) or '-'}",
                f"- champion: {location(posixpath.join(model_uri, registry.CHAMPION_FILE))}",
                f"- history: {location(posixpath.join(model_uri, registry.HISTORY_FILE))}"]
        create_markdown_artifact("\n".join(text), key=model_key(name, MODEL_DECISION),
                                 description=f"Model '{name}': this run's promotion decision.")
    create_markdown_artifact(_picture(plots.model_history_png(lines, name), model_key(name, MODEL_AUC)),
                             key=model_key(name, MODEL_AUC),
                             description=f"Model '{name}': champion and challenger AUC by test day.")


def data_checks(checks: list, date: str, left_out: dict[str, str] | None = None) -> None:
    """A night's data checks (``nightly.datacheck.Check``) as a table, the failed ones first; the days left out as
    quarantined (day -> why) named in its description."""
    rows = [{"day": c.day, "feature": c.feature or "-", "check": c.check, "value": _num(float(c.value)),
             "rule": c.op, "threshold": [_num(float(t)) for t in c.threshold] if isinstance(c.threshold, list)
             else _num(float(c.threshold)), "passed": c.passed, "against": c.against}
            for c in sorted(checks, key=lambda c: c.passed)]
    bad = sum(not c.passed for c in checks)
    out = "".join(f" Left out, quarantined: {day} ({why})." for day, why in sorted((left_out or {}).items()))
    create_table_artifact(rows, key=DATA_CHECKS, description=f"The data checks of the night {date}: {len(checks)} "
                          f"checks, {bad} failed (each day against the accepted days before it).{out}")


def data_drift(model_uri: str, name: str) -> None:
    """A picture of each feature's drift on each night's test day, from the model's history."""
    from models import plots

    png = plots.data_drift_png(registry.history(model_uri), name)
    create_markdown_artifact(_picture(png, model_key(name, MODEL_DRIFT)), key=model_key(name, MODEL_DRIFT),
                             description=f"Model '{name}': each feature's drift on each test day (data checks).")


def model_days(rows: list[dict], name: str) -> None:
    """A model's days and their verdicts (``nightly.days.listing``) as a table."""
    create_table_artifact(rows, key=model_key(name, MODEL_DAYS), description=f"Model '{name}': the days its nights "
                          "read and the data gate's verdicts (accepted, quarantined; by whom and why).")
