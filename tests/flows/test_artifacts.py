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


def test_slices_are_shown_as_a_table_a_picture_and_in_the_decision(prefect_harness, tmp_path):
    """An evaluation sliced by C3 (issue 41 §3): a table naming each slice's raw value with its metrics, the GAUC in
    its description and a bar chart; a night's decision with both models per slice and the champion's watch."""
    import base64

    import numpy as np

    from common import metrics
    from models import registry

    rng = np.random.default_rng(0)
    keys = rng.choice(np.array(["fr", "de", "us"]), 2000)
    p = rng.random(2000)
    y = (rng.random(2000) < p).astype(float)
    table = metrics.slices(p, y, keys, 2)
    table[-1]["value"] = metrics.OTHER
    record = {"split": "test", "step": 8, "rows": 2000, "slices": {"by": "C3", "top": 2, "table": table},
              "gauc": {"by": "C1", "gauc": 0.71, "groups": 40, "rows": 1900, "groups_total": 50}}
    artifacts.evaluation_slices(record, [{}])
    found = latest_artifacts()
    rows = found[artifacts.EVALUATION_SLICES]
    assert [r["value"] for r in rows] == [str(t["value"]) for t in table]
    assert rows[0]["AUC"] == round(table[0]["auc"], 4)
    picture = found[artifacts.SLICES_PLOT]
    assert base64.b64decode(picture.split("base64,")[1].rstrip(")")).startswith(b"\x89PNG")

    model = str(tmp_path / "models" / "m")
    sliced = {"by": "C3", "top": 2, "challenger": table, "champion": [t | {"auc": 0.9} for t in table]}
    watch = {"nights": 5, "auc": 0.6, "auc_median": 0.7, "ne": 0.9, "ne_median": 0.8, "degraded": ["champion AUC low"]}
    entry = {"date": "2026-11-05", "decision": "kept", "reason": "champion kept", "run": "/s/runs/r2",
             "champion_run": "/s/runs/r1", "slices": sliced, "watch": watch}
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / registry.HISTORY_FILE).write_text(json.dumps(entry) + "\n")
    artifacts.model_history(model, "m", entry)
    decision = latest_artifacts()[artifacts.model_key("m", artifacts.MODEL_DECISION)]
    assert "**degraded**: champion AUC low" in decision and "AUC per value of C3" in decision
    assert f"| {table[0]['value']} | {table[0]['rows']} (" in decision and "| 0.9 |" in decision


def test_the_model_page_links_each_night_to_its_flow_run(prefect_harness, tmp_path):
    """A model's page (issue 44 §1) on a real store: three nights recorded by ``registry.record`` from flow runs
    (fake metrics), the days' verdicts of its days.jsonl: the champion with its numbers to 4 decimals, the latest
    decision with the gate that refused, each night's row linked to the flow run that recorded it, the verdicts and
    the links to the model's other artifacts."""
    import re

    from prefect import flow
    from prefect.runtime import flow_run

    from flows import events
    from models import registry

    model = str(tmp_path / "store" / "models" / "ctr")

    def metrics(auc: float) -> dict:
        return {"auc": auc, "logloss": 0.45, "rows": 12000, "positives": 3000, "base_logloss": 0.5623,
                "calibration": 1.0, "fingerprint": "f"}

    @flow
    def night(day: int, auc: float) -> str:
        date = f"2026-11-0{day}"
        registry.record(model, registry.NightRecord(
            {"run": f"/store/runs/r{day}", "step": 10, "dataset": f"/store/datasets/d{day}",
             "vocab": f"/store/datasets/d{day}/vocab", "date": date, "window": [date], "metrics": metrics(auc)},
            score_champion=lambda champion: dict(champion.metrics), owner=events.flow_run_owner()))
        artifacts.model_history(model, "ctr", None)
        return flow_run.id

    ids = [night(1, 0.7012345), night(2, 0.74), night(3, 0.73)]   # first, promoted, kept (no AUC gain)
    registry.record_verdicts(model, [
        {"day": "2026-11-02", "files": None, "verdict": "accepted", "by": "data gate", "why": ""},
        {"day": "2026-11-03", "files": None, "verdict": "quarantined", "by": "ops", "why": "the logger | broke"}])
    artifacts.model_page(model, "ctr")

    page = latest_artifacts()[artifacts.model_page_key("ctr")]
    assert artifacts.model_page_key("ctr") == "model-ctr"
    champion = page.split("## Champion", 1)[1].split("##", 1)[0]
    assert "| test day | 2026-11-02 |" in champion and "| AUC | 0.74 |" in champion and "| rows | 12,000 |" in champion
    assert f"(/runs/flow-run/{ids[1]})" in champion
    decision = page.split("## Latest night", 1)[1].split("##", 1)[0]
    assert "2026-11-03, **kept**" in decision and "refused by: promote_margin" in decision
    nights = page.split("## The last nights", 1)[1].split("##", 1)[0]
    rows = [line for line in nights.splitlines() if re.match(r"\| 2026-11-0\d \|", line)]
    assert [r.split(" | ")[0] for r in rows] == ["| 2026-11-03", "| 2026-11-02", "| 2026-11-01"]
    for row, run_id in zip(rows, reversed(ids)):
        assert re.match(rf"\| 2026-11-0\d \| \[[\w-]+\]\(/runs/flow-run/{run_id}\) \|", row), row
    assert "| 0.7012 |" in rows[-1] and "| promote_margin |" in rows[0]
    assert "1 accepted, 1 quarantined" in page and "`days/dlrmflow-days-ctr`" in page
    assert "| 2026-11-03 | **quarantined** | ops | the logger \\| broke |" in page
    for kind in (artifacts.MODEL_AUC, artifacts.MODEL_HISTORY, artifacts.MODEL_DAYS):
        assert f"(/artifacts/key/{artifacts.model_key('ctr', kind)})" in page
