"""The runs table artifact: every run of the store listed; a run whose files cannot be read is listed as such
and named in what ``runs`` returns, instead of failing the flow that lists it (one truncated metrics file used to
fail every dated night before its promotion)."""

from __future__ import annotations

import json

from flows import artifacts
from helpers.prefect_api import latest_artifacts
from training.config import TrainConfig


def _run(store, name: str, metrics: str) -> None:
    run = store / "runs" / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(TrainConfig(dataset=str(store / "datasets" / "d1")).to_yaml())
    (run / "metrics.jsonl").write_text(metrics)


def test_a_malformed_run_is_listed_as_unreadable_and_named(prefect_harness, tmp_path):
    store = tmp_path / "store"
    _run(store, "good", json.dumps({"step": 4, "eval_split": "val", "auc": 0.75, "logloss": 0.5}) + "\n")
    _run(store, "truncated", '{"step": 4, "eval_split": "val", "au')   # killed mid-write on another machine
    (store / "runs" / "old").mkdir()
    (store / "runs" / "old" / "config.yaml").write_text("retired_field: 1\n")

    assert artifacts.runs(str(store)) == ["old", "truncated"]
    rows = {row["run"]: row for row in latest_artifacts()[artifacts.runs_key(str(store))]}
    assert rows["good"]["val AUC (best)"] == 0.75 and rows["good"]["trained"] == "incomplete"
    assert rows["truncated"]["trained"].startswith("unreadable: JSONDecodeError")
    assert rows["old"]["trained"].startswith("config unreadable")
