"""Prefect artifacts of the flows: dataset tables, sharding plan, training progress and curve, metrics, plots,
output locations, the store's runs table and clean-up table, a night's data checks, a named model's page
(``model-<name>``: champion, latest decision, nights linked to their flow runs, days) and history (table, decision, AUC
by date, each feature's drift by date).

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
from common.s3 import storage_options
from common.store import Store, filesystem
from training import RunDir, TABLE, config_hash, metrics as tm
from models import interval_text, registry

DATASET_FEATURES, DATASET_SUMMARY, DATASET_LOCATION = "dataset-features", "dataset-summary", "dataset-location"
SHARDING_PLAN, TRAINING_PROGRESS = "sharding-plan", "training-progress"
TRAINING_CURVE, TRAINING_EVALUATIONS = "training-curve", "training-evaluations"
EVALUATION_METRICS, EVALUATION_LOCATION = "evaluation-metrics", "evaluation-location"
ROC_CURVE, CALIBRATION_PLOT = "roc-curve", "calibration-plot"
EVALUATION_SLICES, SLICES_PLOT = "evaluation-slices", "slices-plot"   # with evaluate.slice_by / gauc_by
PIPELINE_METRICS, PIPELINE_OUTPUTS = "pipeline-metrics", "pipeline-outputs"
MODEL_HISTORY, MODEL_DECISION, MODEL_AUC = "history", "decision", "auc"  # model-<name>-<kind> (model_key)
MODEL_DRIFT = "drift"   # model-<name>-drift: each feature's drift by test day
MODEL_DAYS = "days"     # model-<name>-days: the days its nights read and the data gate's verdicts
DATA_CHECKS = "data-checks"
SCORE_SUMMARY = "score-summary"
SPEC_DRAFT = "spec-draft"
TUNE_TRIALS, TUNE_RESULT = "tune-trials", "tune-result"
TUNE_BEST_SO_FAR, TUNE_IMPORTANCES = "tune-best-so-far", "tune-importances"


def _slug(name: str) -> str:
    """``name`` lowercased with anything but letters and digits made a dash; a name that changes so gets a short
    hash of itself appended, so that two names never share a slug."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name.lower())).strip("-")
    return slug if slug == name else f"{slug}-{hashlib.sha1(name.encode()).hexdigest()[:6]}".lstrip("-")


def _store_key(prefix: str, store_uri: str) -> str:
    """``<prefix><the store's folder name>-<short hash of its URI>``: a name to read, and one table per store."""
    base = posixpath.basename(store_uri.rstrip("/"))
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", base.lower())).strip("-")[:40].strip("-") or "store"
    return f"{prefix}{slug}-{hashlib.sha1(store_uri.encode()).hexdigest()[:6]}"


def runs_key(store_uri: str) -> str:
    """The key of a store's runs table: ``runs-<store folder>-<hash of the store URI>`` (one table per store)."""
    return _store_key("runs-", store_uri)


def gc_key(store_uri: str) -> str:
    """The key of a store's clean-up table: ``gc-<store folder>-<hash of the store URI>`` (one table per store)."""
    return _store_key("gc-", store_uri)


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
    evaluation_slices(metrics, owners)
    return metrics


def evaluation_slices(metrics: dict, owners: list[dict] | None = None) -> None:
    """An evaluation's metrics per slice (``training.evaluate_slices``) as a table, with the GAUC in its description,
    and a bar chart of each slice's AUC and NE (also on the parent run); nothing when it was not sliced."""
    sliced, grouped = metrics.get("slices"), metrics.get("gauc")
    if not sliced and not grouped:
        return
    gauc = (f" GAUC by {grouped['by']}: {_num(grouped['gauc'])} over {grouped['groups']} groups holding both "
            "classes." if grouped else "")
    rows = [{"value": str(r["value"]), "rows": r["rows"], "share": f"{r['share']:.2%}", "positives": r["positives"],
             "AUC": _num(r["auc"]), "NE": _num(r["normalized_entropy"]), "log loss": _num(r["logloss"]),
             "calibration": _num(r["calibration"])} for r in (sliced or {}).get("table", [])]
    where = f"split '{metrics.get('split')}', checkpoint step {metrics.get('step')}"
    if not sliced:
        rows = [{"value": "(all rows)", "rows": metrics.get("rows"), "AUC": _num(metrics.get("auc"))}]
    create_table_artifact(rows, key=EVALUATION_SLICES, description=(
        f"Metrics per value of {sliced['by']} (its {sliced['top']} most frequent, then 'other') on {where}."
        if sliced else f"Metrics on {where}.") + gauc)
    if sliced:
        from training import slices_png

        _publish(owners if owners is not None else _owners(), MarkdownArtifact, key=SLICES_PLOT,
                 markdown=_picture(slices_png(sliced, where), SLICES_PLOT),
                 description=f"AUC and NE per value of {sliced['by']} on {where}")


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
    """``model-<name>-<kind>`` (kind: MODEL_HISTORY, MODEL_DECISION, MODEL_AUC, MODEL_DRIFT, MODEL_DAYS), the name
    as ``_slug`` makes it (two models never share a key)."""
    return f"model-{_slug(name)}-{kind}"


def model_page_key(name: str) -> str:
    """``model-<name>``: the model's page (``model_page``), named like the model's other keys."""
    return f"model-{_slug(name)}"


def _num(value) -> object:
    """A table's number: a float to 4 decimals (4 significant digits below 0.001), an int with thousands
    separators, blank for none."""
    if isinstance(value, float):
        return round(value, 4) if not value or abs(value) >= 1e-3 else float(f"{value:.4g}")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "" if value is None else value


def _interval(entry: dict) -> str:
    """The paired bootstrap interval of the AUC gain in a history line, with its confidence ("-": none)."""
    interval = interval_text(entry.get("paired"))
    return f"{interval} ({entry['paired']['confidence']:g})" if interval else "-"


def _ne(metrics: dict) -> float | None:
    """Normalized entropy: log loss / the base rate's entropy (None when either is unknown)."""
    loss, base = metrics.get("logloss"), metrics.get("base_logloss")
    return loss / base if loss is not None and base else None


def _history_row(entry: dict) -> dict:
    challenger, champion = entry.get("challenger") or {}, entry.get("champion") or {}
    window = entry.get("window") or []
    return {"date": entry.get("date"), "decision": entry.get("decision"),
            "challenger AUC": _num(challenger.get("auc")), "champion AUC": _num(champion.get("auc")),
            "challenger log loss": _num(challenger.get("logloss")), "champion log loss": _num(champion.get("logloss")),
            "challenger NE": _num(_ne(challenger)), "refused by": ", ".join(entry.get("refused") or []),
            "rows": _num(challenger.get("rows")), "margin": _num(entry.get("promote_margin")),
            "AUC gain interval": _interval(entry).strip("-"),
            "window": f"{window[0]} .. {window[-1]} ({len(window)} days)" if window else "",
            "run": _base(entry.get("run")), "champion run": _base(entry.get("champion_run")),
            "reason": entry.get("reason") or "", "at": entry.get("at") or ""}


def _base(uri: str | None) -> str:
    """A run's (or bundle's) folder name, blank for none."""
    return posixpath.basename(uri.rstrip("/")) if uri else ""


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
        table.insert(4, f"| normalized entropy | {_num(_ne(challenger))} | {_num(_ne(champion))} |")
        table.append(f"| run | {location(entry['run']) if entry.get('run') else '(none)'} | "
                     f"{location(entry['champion_run']) if entry.get('champion_run') else '(none)'} |")
        text = [f"### Model `{name}`, {entry['date']}: **{entry['decision']}**", "", entry.get("reason", ""), "",
                *table, "", f"- refused by: {', '.join(entry.get('refused') or []) or '-'}",
                f"- promote margin (AUC): {entry.get('promote_margin')}",
                f"- gates: {', '.join(f'{k} {v}' for k, v in (entry.get('gates') or {}).items()) or '-'}",
                f"- AUC gain interval (paired bootstrap): {_interval(entry)}",
                f"- window: {', '.join(entry.get('window') or []) or '-'}",
                f"- champion: {location(posixpath.join(model_uri, registry.CHAMPION_FILE))}",
                f"- history: {location(posixpath.join(model_uri, registry.HISTORY_FILE))}"]
        text += _watched(entry)
        create_markdown_artifact("\n".join(text), key=model_key(name, MODEL_DECISION),
                                 description=f"Model '{name}': this run's promotion decision.")
    create_markdown_artifact(_picture(plots.model_history_png(lines, name), model_key(name, MODEL_AUC)),
                             key=model_key(name, MODEL_AUC),
                             description=f"Model '{name}': champion and challenger AUC by test day.")
    model_page(model_uri, name)


PAGE_NIGHTS = 14   # the nights a model's page lists (its history table artifact holds them all)
_FLOW_RUN = re.compile(r"^flow run (?P<name>.+) \((?P<id>[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})\)$")


def _ui(path: str) -> str:
    """A link into the Prefect UI, relative to the page that shows it (``/runs/flow-run/ID``, under the UI's serve
    base): it opens whatever address the browser reached the UI by, where an absolute PREFECT_UI_URL may not."""
    from prefect.settings import get_current_settings

    return (get_current_settings().server.ui.serve_base or "/").rstrip("/") + path


def _flow_run_link(entry: dict) -> str:
    """The history line's flow run (its ``by``, ``flows.events.flow_run_owner``: ``flow run NAME (ID)``) as a link,
    blank when no flow run wrote it (e.g. the command line)."""
    from prefect.utilities.urls import UI_URL_FORMATS   # the UI's routes

    found = _FLOW_RUN.match(entry.get("by") or "")
    return f"[{found['name']}]({_ui('/' + UI_URL_FORMATS['flow-run'].format(obj_id=found['id']))})" if found else ""


def _artifact_link(key: str, text: str | None = None) -> str:
    return f"[{text or key}]({_ui('/artifacts/key/' + key)})"


def _cell(value) -> str:
    """A markdown table's cell: ``_num``'s text, pipes escaped."""
    return str(_num(value)).replace("|", "\\|").replace("\n", " ")


def _champion_lines(model_uri: str) -> list[str]:
    champion = registry.load_champion(model_uri)
    if champion is None:
        return ["## Champion", "", "No champion yet: the first night that trains one makes it the champion."]
    metrics = champion.metrics
    return ["## Champion", "", "| | |", "|---|---|", f"| test day | {champion.date} |",
            f"| run | {_base(champion.run)} (step {champion.step}) |", f"| promoted at | {champion.promoted_at} |",
            f"| AUC | {_cell(metrics.get('auc'))} |", f"| log loss | {_cell(metrics.get('logloss'))} |",
            f"| normalized entropy | {_cell(_ne(metrics))} |", f"| rows | {_cell(metrics.get('rows'))} |",
            f"| bundle | {location(champion.bundle) if champion.bundle else '(none)'} |",
            f"| flow run | {_flow_run_link(champion.line or {})} |"]


def _decision_lines(entry: dict) -> list[str]:
    gates = entry.get("gates") or {}
    refused = [f"{g}" + (f" ({gates[g]})" if g in gates else "") for g in entry.get("refused") or []]
    return [f"## Latest night: {entry.get('date')}, **{entry.get('decision')}**", "", entry.get("reason") or "", "",
            f"- refused by: {', '.join(refused) or 'no gate'}",
            f"- gates: {', '.join(f'{k} {v}' for k, v in gates.items() if v is not None) or '-'}",
            f"- flow run: {_flow_run_link(entry) or '-'}"] + _watched(entry)


def _nights_lines(lines: list[dict]) -> list[str]:
    out = [f"## The last nights (newest first, at most {PAGE_NIGHTS})", "",
           "| date | flow run | decision | refused by | challenger AUC | champion AUC | challenger NE | rows | run |",
           "|---|---|---|---|---|---|---|---|---|"]
    for e in reversed(lines[-PAGE_NIGHTS:]):
        challenger, champion = e.get("challenger") or {}, e.get("champion") or {}
        out.append(f"| {e.get('date')} | {_flow_run_link(e)} | {e.get('decision')} | "
                   f"{', '.join(e.get('refused') or [])} | {_cell(challenger.get('auc'))} | "
                   f"{_cell(champion.get('auc'))} | {_cell(_ne(challenger))} | {_cell(challenger.get('rows'))} | "
                   f"{_base(e.get('run'))} |")
    return out if lines else out[:2] + ["No nights yet."]


def _days_lines(model_uri: str, name: str) -> list[str]:
    from flows.deploy import deployment_name
    from nightly.days import listing

    try:
        days = listing(model_uri)
    except UserError as e:
        return ["## Days", "", f"The days' verdicts cannot be read: {e}"]
    counts = {v: sum(d["verdict"] == v for d in days) for v in ("accepted", "quarantined")}
    out = ["## Days", "", f"{counts['accepted']} accepted, {counts['quarantined']} quarantined. Change a verdict with "
           f"the deployment `days/{deployment_name('days', name)}` (Run: action accept or quarantine, the day, why) "
           f"or `dlrmflow days --model {name}`.", ""]
    shown = [d for d in days[:-PAGE_NIGHTS] if d["verdict"] == "quarantined"] + days[-PAGE_NIGHTS:]
    if shown:
        out += [f"The last {PAGE_NIGHTS} days and every quarantined one, newest first:", "",
                "| day | verdict | by | why |", "|---|---|---|---|"]
        out += [f"| {d['day']} | {'**quarantined**' if d['verdict'] == 'quarantined' else d['verdict']} | "
                f"{_cell(d.get('by'))} | {_cell(d.get('why'))} |" for d in reversed(shown)]
    return out


def model_page(model_uri: str, name: str) -> None:
    """The model's page (key ``model-<name>``), rewritten at the end of every night: its champion, the latest
    decision with the gates that refused, the last nights (each linked to its flow run), the days' verdicts, the
    champion's watch and slices, and links to its other artifacts (history, AUC and drift pictures, days)."""
    lines = registry.history(model_uri)
    text = [f"# Model `{name}`", "", f"Store: {location(model_uri)}. Rewritten at the end of every night.", ""]
    text += _champion_lines(model_uri) + [""]
    if lines:
        text += _decision_lines(lines[-1]) + [""]
    text += _nights_lines(lines) + [""] + _days_lines(model_uri, name) + [""]
    more = [(MODEL_AUC, "champion and challenger AUC and log loss over the nights"),
            (MODEL_DRIFT, "each feature's drift on each test day"), (MODEL_HISTORY, "every night, as a table"),
            (MODEL_DECISION, "the latest decision in full"),
            (MODEL_DAYS, "the days, as the days deployment lists them")]
    checked = any(e.get("data_checks") for e in lines)   # the drift picture: drawn by nights with a data gate
    text += ["## More", "", *(f"- {_artifact_link(model_key(name, kind))}: {what}" for kind, what in more
                              if kind != MODEL_DRIFT or checked)]
    create_markdown_artifact("\n".join(text), key=model_page_key(name),
                             description=f"Model '{name}': champion, latest decision, nights, days.")


def _watched(entry: dict) -> list[str]:
    """The decision's lines on the champion's watch (``models.watch``) and both models per slice
    (``models.slices``), when the night has them."""
    lines = []
    found = entry.get("watch")
    if found:
        why = found.get("degraded") or []
        lines += ["", f"- champion watch (its last {found.get('nights')} nights): AUC {_num(found.get('auc'))} "
                      f"(median {_num(found.get('auc_median'))}), NE {_num(found.get('ne'))} "
                      f"(median {_num(found.get('ne_median'))}): " + ("**degraded**: " + "; ".join(why) if why
                                                                       else "within its band")]
    sliced = entry.get("slices")
    if sliced:
        theirs = {r["value"]: r for r in sliced.get("champion") or []}
        lines += ["", f"AUC per value of {sliced['by']}:", "", "| value | rows | challenger AUC | champion AUC | "
                  "challenger NE | champion NE |", "|---|---|---|---|---|---|"]
        for r in sliced.get("challenger") or []:
            old = theirs.get(r["value"]) or {}
            lines.append(f"| {r['value']} | {r['rows']} ({r['share']:.1%}) | {_num(r.get('auc'))} | "
                         f"{_num(old.get('auc'))} | {_num(r.get('normalized_entropy'))} | "
                         f"{_num(old.get('normalized_entropy'))} |")
    return lines


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


def spec_draft(draft, saved) -> None:
    """A drafted spec kept in the store (``preprocessing.specs.Saved``): how to use it, a table of what the draft
    made of each column (``preprocessing.draft.Draft.rows``) and the YAML."""
    rows = draft.rows()
    lines = [f"### Input spec `{draft.name}`: version {saved.version}" + ("" if saved.changed else " (unchanged)"),
             "", f"Kept at {location(saved.uri)} (this version: {location(saved.version_uri)}). Use it with "
             f"`spec: store:{draft.name}` in the preprocess or pipeline form (or `--spec store:{draft.name}`).", "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join("" if v is None else _cell(v) for v in row.values()) + " |" for row in rows]
    lines += ["", "```yaml", draft.text.rstrip("\n"), "```"]
    create_markdown_artifact("\n".join(lines), key=SPEC_DRAFT, description=f"The input spec drafted as "
                             f"store:{draft.name} ({saved.uri}).")
