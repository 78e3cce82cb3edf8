"""The pipeline flow on a local store: every output and artifact, then a re-run that redoes nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from flows import artifacts
from flows.pipeline import pipeline
from helpers.prefect_api import latest_artifacts, logs_matching, small_pipeline, worker_logs
from training import RunDir
from training.launchers.output import KNOWN


def test_pipeline_outputs_artifacts_and_rerun(prefect_harness, tmp_path):
    config = small_pipeline(str(tmp_path / "store"))
    out = pipeline(config)

    dataset, run = Path(out["dataset"]), Path(out["run"])
    assert dataset.parent == tmp_path / "store" / "datasets" and (dataset / "_SUCCESS").exists()
    assert sorted(p.name for p in (tmp_path / "store" / "synthetic").iterdir()) == ["criteo-4000-seed3"]
    saved = yaml.safe_load((run / "pipeline.yaml").read_text())
    assert saved["train"]["dataset"] == str(dataset) and saved["preprocess"]["inputs"][0].endswith("/part-*")
    for name in ("config.yaml", "plan.txt", "metrics.jsonl", "_SUCCESS", "checkpoints/latest",
                 "eval/test/roc.png", "eval/test/calibration.png"):
        assert (run / name).exists(), name
    metrics = json.loads((run / "eval/test/metrics.json").read_text())
    assert out["metrics"]["auc"] == metrics["auc"] and 0.5 < metrics["auc"] <= 1

    arts = latest_artifacts()
    features = arts["dataset-features"]
    assert [row["feature"] for row in features] == [f"C{i}" for i in range(1, 27)]
    assert all(row["cardinality"] >= 1 and row["index0 train"].endswith("%") for row in features)
    assert dataset.name.split("-")[-1] in arts["dataset-summary"]
    assert "table_wise" in arts["sharding-plan"] or "data_parallel" in arts["sharding-plan"]
    assert arts["training-progress"] == 100.0
    table = {row["metric"]: row["value"] for row in arts["evaluation-metrics"]}
    assert table["ROC AUC"] == round(metrics["auc"], 6)
    assert arts["pipeline-metrics"] == arts["evaluation-metrics"]
    for key in ("roc-curve", "calibration-plot", "training-curve"):
        assert arts[key].startswith(f"![{key}](data:image/png;base64,iVBOR")
    assert arts["evaluation-location"] == f"Evaluation folder: `{run}/eval/test`"
    assert f"`{run}`" in arts["pipeline-outputs"] and "file://" not in str(arts)
    evaluations = arts["training-evaluations"]
    assert [row["step"] for row in evaluations] == [r["step"] for r in map(json.loads, (run / "metrics.jsonl").open())
                                                   if "eval_split" in r]
    assert sum(row["best"] == "yes" for row in evaluations) == 1
    assert logs_matching(": val auc ") and logs_matching("sharding plan published")
    assert not logs_matching("Memory per rank")  # the plan is in its artifact, not in the logs
    # the known library warnings (one list: training.launchers.output.KNOWN_WARNINGS) are in the run's library log,
    # not in the logs (the console of `dlrmflow run`)
    assert not [m for m in logs_matching("") if KNOWN.search(m)]
    library = (run / RunDir.LIBRARY_LOG).read_text()
    assert "== training, " in library and "== evaluation, " in library and KNOWN.search(library)
    labels = np.fromfile(dataset / "test" / "label.bin", np.uint8)
    assert f"test {labels.mean():.2%} ({int(labels.sum()):,})" in arts["dataset-summary"]
    [row] = arts[artifacts.runs_key(str(tmp_path / "store"))]
    assert row["run"] == run.name and row["test AUC"] == round(metrics["auc"], 4) and row["world size"] == 2
    assert row["config"] == run.name.rsplit("-", 1)[-1] and row["dataset"] == dataset.name
    assert row["val AUC (best)"] != "-" and row["trained"].endswith("UTC")

    stamps = {p: p.stat().st_mtime_ns for p in (dataset / "feature_spec.yaml", run / "_SUCCESS",
                                                  run / "eval/test/metrics.json")}
    steps = sorted(p.name for p in (run / "checkpoints").iterdir())
    (run.parent / "old-run").mkdir()
    (run.parent / "old-run" / "config.yaml").write_text("retired_field: 1\n")  # e.g. written by another version
    again = pipeline(config)
    assert again["run"] == out["run"] and again["metrics"]["auc"] == out["metrics"]["auc"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == steps
    assert logs_matching("synthetic data already complete")
    assert logs_matching(f"{dataset.name.split('-')[-1]} already complete, skipping preprocessing")
    assert logs_matching("training already complete, skipping")
    assert logs_matching("already complete, reusing it")
    again_row, old = latest_artifacts()[artifacts.runs_key(str(tmp_path / "store"))]
    assert old["run"] == "old-run" and old["trained"].startswith("config unreadable") and again_row == row


def _logs_of(text: str) -> list:
    """The Prefect log records (this worker's runs of the harness), newest first, whose message contains ``text``."""
    return worker_logs(text, newest_first=True)


@pytest.mark.parametrize("case", ["wrong split", "missing input"])
def test_a_user_error_fails_the_pipeline_before_any_work_with_one_clean_message(prefect_harness, tmp_path, case):
    """Nothing is written; the run's state message is the error's text; one ERROR line, no traceback."""
    store = tmp_path / "store"
    if case == "wrong split":
        config, text = small_pipeline(str(store), train={"eval_split": "validation"}), "no split 'validation'"
        expected = ("split rule ordered:train=0.8,val=0.1,test=0.1: the dataset has no split 'validation' "
                    "(it has: train, val, test). Fix: set eval_split to one of those")
    else:
        missing = str(tmp_path / "no-such-day.tsv")
        config = small_pipeline(str(store), preprocess={"inputs": [missing]})
        text = expected = f"input '{missing}' does not exist"
    state = pipeline(config, return_state=True)
    assert state.is_failed() and state.message.startswith(expected), state.message
    assert not (store / "synthetic").exists() and not (store / "datasets").exists()
    logs = _logs_of(text)
    assert not [log for log in logs if "Traceback" in log.message]
    assert len([log for log in logs if log.level == logging.ERROR and not log.message.startswith("Finished")]) == 1
