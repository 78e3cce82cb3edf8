"""Quality bar on the 10k real Criteo rows, along the shipped path: `dlrmflow preprocess` with the
`criteo-sample` preset's preprocess hint (ordered 70/10/20 split, frequency threshold), `dlrmflow train
--preset criteo-sample` (best checkpoint by validation log loss, early stopping), then `dlrmflow evaluate`
on the last 2,000 rows: test ROC AUC >= 0.73 and log loss <= 0.48."""

from __future__ import annotations

import json

import pytest

from nightly.config import PipelinePreset
from preprocessing import PreprocessConfig, run as preprocess
from helpers.runs import metrics, train
from training.config import EvaluateConfig
from training.evaluate import evaluate_run


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_criteo_sample_preset_reaches_the_quality_bar(criteo_10k, tmp_path):
    hint = PipelinePreset.named("criteo-sample").preprocess.model_dump(exclude_unset=True)
    ds = preprocess(PreprocessConfig(inputs=[str(criteo_10k)], out=str(tmp_path / "store"), spec="criteo",
                                     progress=False, **hint))
    run = tmp_path / "run"
    train(ds, run, "--preset", "criteo-sample")
    evals = [m for m in metrics(run) if "auc" in m]
    best = json.loads((run / "checkpoints" / "best").read_text())
    assert best["logloss"] == min(m["logloss"] for m in evals)  # best checkpoint by validation log loss
    test = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    assert test["rows"] == 2000 and test["step"] == best["step"]
    assert test["auc"] >= 0.73 and test["logloss"] <= 0.48, test
