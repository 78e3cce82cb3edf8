"""flows.promote.compete's glue, with a fake scorer (no torchrun): with a champion, both models are scored on the
test day's rows, and the history line records both fingerprints, the paired interval and the gates."""

from __future__ import annotations

import datetime as dt
import logging
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

from common.atomic import mark_complete
from common.store import Store
from flows import promote
from nightly.config import PipelineConfig
from models import registry, scoring
from nightly import night as night_module
from nightly.night import Setup
from training.metrics import compute_metrics

N = 3000


def fake_score(champion_rows: int):
    """A ``scoring.score`` writing labelled scores: the challenger's clearly better than the champion's, who
    sees ``champion_rows`` rows."""
    rng = np.random.default_rng(0)
    labels = (rng.random(N) < 0.25).astype(np.float32)
    base = labels * 0.8 + rng.normal(size=N)
    calls = []

    def score(config, launcher=None, on_line=None) -> dict:
        champion = config.model is not None
        calls.append("champion" if champion else "challenger")
        n = champion_rows if champion else N
        probs = 1 / (1 + np.exp(1.5 - (base if champion else base + labels))).astype(np.float32)   # NE < 1 both
        pq.write_table(pa.table({"file": ["day.tsv"] * n, "row": np.arange(n), "probability": probs[:n],
                                 "label": labels[:n]}), config.out)
        mark_complete(config.out, LocalFileSystem(), rows=n)   # as training.score.write_scores
        return {"rows": n, "out": config.out} | compute_metrics(probs[:n], labels[:n])

    return score, calls


@pytest.mark.parametrize("champion_rows, decision", [(N, "promoted"), (N - 1, "kept")])
def test_compete_scores_both_models_on_the_same_rows(tmp_path, monkeypatch, champion_rows, decision):
    score, calls = fake_score(champion_rows)
    monkeypatch.setattr(scoring, "score", score)
    monkeypatch.setattr(promote, "get_run_logger", lambda: logging.getLogger("test"))
    monkeypatch.setattr(promote.artifacts, "model_history", lambda *a: None)
    monkeypatch.setattr(night_module, "_export_verified", lambda run, step, out: "sha")   # no bundle written
    config = PipelineConfig(store=str(tmp_path), model="ctr", window={"train_days": 2},
                            promote={"confidence": 0.95})
    store = Store(str(tmp_path))

    def night(day: int, evaluation: dict) -> dict:
        date = dt.date(2026, 11, day)
        days = SimpleNamespace(date=date, days=[date], test_inputs=lambda: ["day.tsv"])
        run = SimpleNamespace(uri=f"{tmp_path}/runs/r{day}")
        plan = Setup(config, store, config.preprocess_config([], store.uri), date, days)
        return promote.compete.fn(plan, run, "d", {"step": 1, **evaluation})

    evaluation = {"auc": 0.7, "logloss": 0.5, "rows": N, "positives": 750, "base_logloss": 0.56, "calibration": 1.0}
    first = night(1, evaluation)
    assert first["decision"] == "first" and calls == []   # the evaluation's metrics: nothing scored
    entry = night(2, evaluation)
    assert sorted(calls) == ["challenger", "champion"] and entry["decision"] == decision, entry["reason"]
    paired = entry["paired"]
    assert paired["rows"] == [N, champion_rows] and entry["challenger"]["fingerprint"] == paired["fingerprints"][0]
    if decision == "promoted":
        assert paired["fingerprints"][0] == paired["fingerprints"][1] and paired["auc_diff_interval"][0] > 0
        assert entry["challenger"]["auc"] > entry["champion"]["auc"] and "interval" in entry["reason"]
    else:
        assert paired["auc_diff_interval"] is None and "gate same_rows" in entry["reason"]
    assert entry["gates"]["confidence"] == 0.95 and registry.history(f"{tmp_path}/models/ctr")[-1] == entry
