"""The nightly comparison per slice and the champion's watch (issue 41 §3), through ``flows.promote.compete`` with a
fake scorer (no torchrun) that writes real scores files, the slice column included: a challenger that lost one
slice (C3=FR) is kept by ``promote.slice_max_loss`` though its global AUC is better, the history line holds both
models per slice, and a night where the champion decays announces it (history line, log, event)."""

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
from common.errors import UserError
from common.store import Store
from flows import events, promote
from models import registry, scoring
from nightly import night as night_module
from nightly.config import PipelineConfig
from nightly.night import Setup
from training.metrics import compute_metrics

N = 20_000
DECAYED = 6   # the night the champion's scores get much noisier


def day_scores(day: int, champion: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(probabilities, labels, C3) of night ``day``: the challenger sharper than the champion but without any
    relation to the label on C3=FR (8% of the rows); the champion's noise triples on night ``DECAYED``."""
    rng = np.random.default_rng(day)
    keys = rng.choice(np.array(["US", "DE", "FR"]), N, p=[0.52, 0.40, 0.08])
    logit = rng.normal(0, 1.5, N) - 1.2
    labels = (rng.random(N) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    noise = rng.normal(0, 1.0, N)
    if champion:
        probs = 1 / (1 + np.exp(-(logit + noise * (3 if day == DECAYED else 1)) / 1.3))
    else:
        probs = 1 / (1 + np.exp(-(logit + 0.5 * noise)))
        fr = np.flatnonzero(keys == "FR")
        probs[fr] = probs[rng.permutation(fr)]
    return probs.astype(np.float32), labels, keys


def fake_score(config, launcher=None, on_line=None, slice_by=None) -> dict:
    """``scoring.score`` as the comparison calls it: a complete scores file (the slice column when asked)."""
    day = int(config.inputs[0].split("-")[-1].split(".")[0])
    probs, labels, keys = day_scores(day, config.model is not None)
    columns = {"file": [config.inputs[0]] * N, "row": np.arange(N), "probability": probs, "label": labels}
    if slice_by:
        columns[scoring.slice_column(slice_by)] = keys
    pq.write_table(pa.table(columns), config.out)
    mark_complete(config.out, LocalFileSystem(), rows=N)
    return {"rows": N, "out": config.out} | compute_metrics(probs, labels)


def test_a_lost_slice_keeps_the_champion_and_its_decay_is_announced(tmp_path, monkeypatch):
    monkeypatch.setattr(scoring, "score", fake_score)
    said: list[str] = []
    log = logging.getLogger("test")
    monkeypatch.setattr(log, "warning", lambda text, *a: said.append(text % a if a else text))
    monkeypatch.setattr(promote, "get_run_logger", lambda: log)
    monkeypatch.setattr(promote.artifacts, "model_history", lambda *a: None)
    monkeypatch.setattr(night_module, "_export_verified", lambda run, step, out: "sha")
    emitted = []
    monkeypatch.setattr(events, "emit", lambda name, model, payload: emitted.append((name, model, payload)))
    config = PipelineConfig(store=str(tmp_path), model="ctr", window={"train_days": 2},
                            evaluate={"slice_by": "C3"}, promote={"slice_max_loss": 0.02})
    store = Store(str(tmp_path))

    def night(day: int, the_config: PipelineConfig = config, compete=promote.compete.fn) -> dict:
        date = dt.date(2026, 11, day)
        days = SimpleNamespace(date=date, days=[date], test_inputs=lambda: [f"day-{day}.tsv"])
        run = SimpleNamespace(uri=f"{tmp_path}/runs/r{day}")
        plan = Setup(the_config, store, the_config.preprocess_config([], store.uri), date, days)
        probs, labels, _ = day_scores(day, True)   # night 1's evaluation: the champion-to-be's own metrics
        return compete(plan, run, "d", {"step": 1, **compute_metrics(probs, labels)})

    assert night(1)["decision"] == "first"
    for day in range(2, DECAYED):
        entry = night(day)
        assert entry["decision"] == "kept" and entry["refused"] == ["slice_max_loss"], entry["reason"]
        assert entry["challenger"]["auc"] > entry["champion"]["auc"] + 0.01   # globally better
        assert "gate slice_max_loss: slice C3=FR (8% of rows)" in entry["reason"]
        sliced = entry["slices"]
        assert sliced["by"] == "C3" and [r["value"] for r in sliced["challenger"]] == ["US", "DE", "FR"]
        assert [r["value"] for r in sliced["champion"]] == ["US", "DE", "FR"]
        assert sliced["challenger"][2]["auc"] < 0.56 < sliced["champion"][2]["auc"] - 0.1
        assert entry["watch"]["degraded"] == [] and not emitted
    entry = night(DECAYED)
    assert entry["decision"] == "kept" and entry["watch"]["nights"] == DECAYED - 1
    why = entry["watch"]["degraded"]   # its AUC fell and its NE rose beyond their bands
    assert why[0].startswith("champion AUC ") and f"median {entry['watch']['auc_median']:.4f} of its last 5" in why[0]
    assert len(why) == 2 and why[1].startswith("champion normalized entropy ")
    assert registry.history(f"{tmp_path}/models/ctr")[-1] == entry
    [(name, model, payload)] = emitted
    assert (name, model, payload["date"], payload["why"]) == (events.MODEL_DEGRADED, "ctr", "2026-11-06", why)
    assert payload["champion_run"] == f"{tmp_path}/runs/r1"
    assert any("the champion of model ctr degraded on 2026-11-06" in line for line in said)

    # a per-slice floor without slices is a setting that cannot work: one line, nothing scored
    unsliced = config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"slice_by": None})})
    with pytest.raises(UserError, match="promote.slice_max_loss 0.02 needs slices, but evaluate.slice_by"):
        night(7, unsliced, night_module.compete)
