"""Bad inputs to evaluation fail before any rank starts, with a message that names the problem and the fix."""

from __future__ import annotations

import pytest

from flows.cli import main as cli
from helpers.datasets import write_dataset
from common.errors import UserError
from training.config import EvaluateConfig, TrainConfig
from training.evaluate import check_inputs, evaluate_run
from training.report import format_table
from training.rundir import RunDir


@pytest.fixture(scope="module")
def untrained_run(tmp_path_factory):
    """A run folder with a config (dataset with train/val/test) but no checkpoint yet."""
    root = tmp_path_factory.mktemp("eval_inputs")
    ds = write_dataset(root / "ds", {"train": 64, "val": 32, "test": 32})
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text(TrainConfig.preset("default").with_overrides({"dataset": str(ds)}).to_yaml())
    return run


def test_unknown_run(tmp_path):
    with pytest.raises(UserError, match=r"not a training run \(no config.yaml there\).*set run_uri \(--run\)"):
        evaluate_run(str(tmp_path / "nope"), EvaluateConfig())


def test_split_absent(untrained_run):
    with pytest.raises(UserError, match=r"has no split 'holdout' \(it has: train, val, test\)"):
        evaluate_run(str(untrained_run), EvaluateConfig(split="holdout"))


@pytest.mark.parametrize("which", ["best", "latest", "40"])
def test_checkpoint_absent(untrained_run, which):
    with pytest.raises(UserError, match=rf"no complete checkpoint '{which}' \(complete steps: none\).*train the run"):
        check_inputs(RunDir(str(untrained_run)), EvaluateConfig(checkpoint=which))


def test_best_falls_back_to_latest_with_a_warning(untrained_run):
    run = RunDir(str(untrained_run))
    for step in (2, 4):
        run.write_text("{}", RunDir.CHECKPOINTS, str(step), "_COMPLETE")
    try:
        info = check_inputs(run, EvaluateConfig())
        assert info["step"] == 4 and "no complete 'best' checkpoint; using 'latest' (step 4)" in info["warning"]
        assert check_inputs(run, EvaluateConfig(checkpoint="2")) == {**info, "step": 2, "warning": None}
    finally:
        run.fs.rm(run.path(RunDir.CHECKPOINTS), recursive=True)


def test_checkpoint_must_be_best_latest_or_a_step():
    assert EvaluateConfig(checkpoint="best").checkpoint == "best" and EvaluateConfig(checkpoint=7).checkpoint == "7"
    with pytest.raises(UserError, match="checkpoint: .*'newest' is not 'best', 'latest' or a step number"):
        EvaluateConfig.from_dict({"checkpoint": "newest"})


def test_cli_reports_the_error_and_exits_2(untrained_run, capsys):
    assert cli(["evaluate", "--run", str(untrained_run), "--split", "holdout"]) == 2
    assert "error:" in capsys.readouterr().err


def test_table_lists_every_metric():
    text = format_table({"auc": 0.75, "logloss": 0.47, "normalized_entropy": 0.9, "base_logloss": 0.53, "pr_auc": 0.4,
                         "accuracy": 0.78, "calibration": 1.01, "base_rate": 0.23, "mean_prediction": 0.24,
                         "rows": 2000, "positives": 460})
    for label in ("ROC AUC", "log loss", "normalized entropy", "base-rate log loss", "PR AUC", "accuracy",
                  "calibration", "2,000"):
        assert label in text
