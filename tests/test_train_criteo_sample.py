"""Quality bar on the 10k real Criteo rows: the `criteo-sample` preset, best checkpoint by validation,
scored on the last 2,000 rows (test AUC >= 0.73, log loss <= 0.48)."""

from __future__ import annotations

import json

import pytest

from criteo_sample import write_criteo_sample
from train_runs import metrics, python, train


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_criteo_sample_preset_reaches_the_quality_bar(criteo_10k, tmp_path):
    ds = write_criteo_sample(criteo_10k, tmp_path / "ds")
    run = tmp_path / "run"
    train(ds, run, "--preset", "criteo-sample")
    evals = [m for m in metrics(run) if "auc" in m]
    best = json.loads((run / "checkpoints" / "best").read_text())
    assert best["logloss"] == min(m["logloss"] for m in evals)  # best checkpoint by validation log loss
    out = python(f"""
import json
from training.trainer import Trainer
print(json.dumps(Trainer.from_run({str(run)!r}, "best").evaluate("test")))
""")
    test = json.loads(out.strip().splitlines()[-1])
    assert test["rows"] == 2000
    assert test["auc"] >= 0.73 and test["logloss"] <= 0.48, test
