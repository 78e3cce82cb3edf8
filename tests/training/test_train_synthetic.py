"""Synthetic data with a planted model: `dlrmflow synth`'s generator -> preprocess -> train (preset
`synthetic`) -> evaluate reaches a test ROC AUC within 0.01 of the generator's recorded best AUC."""

from __future__ import annotations

import pytest

from nightly.config import PipelinePreset
from preprocessing import PreprocessConfig, run as preprocess
from synthetic.generator import generate
from helpers.runs import train
from training.config import EvaluateConfig
from training.evaluate import evaluate_run

ROWS = 500_000


@pytest.mark.slow
@pytest.mark.timeout(500)
def test_dlrm_gets_within_0_01_of_the_planted_models_auc(tmp_path):
    meta = generate(str(tmp_path / "raw"), ROWS, seed=0)
    hint = PipelinePreset.named("synthetic").preprocess.model_dump(exclude_unset=True)
    ds = preprocess(PreprocessConfig(inputs=[str(tmp_path / "raw" / "part-*")], out=str(tmp_path / "store"), spec="criteo",
                                     progress=False, **hint))
    run = tmp_path / "run"
    train(ds, run, "--preset", "synthetic", timeout=400)
    test = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    assert test["rows"] == ROWS // 10
    assert test["auc"] >= meta["best_auc"] - 0.01, (test["auc"], meta["best_auc"])
    assert test["logloss"] <= meta["best_logloss"] + 0.015, (test["logloss"], meta["best_logloss"])
