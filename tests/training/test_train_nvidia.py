"""A dataset written by NVIDIA's tools trains and evaluates: features named after their files
(``cat_0.bin``) get valid, stable table names; without a 'val' split training validates on 'test'."""

from __future__ import annotations

import json

import pytest

from common.errors import UserError
from helpers.datasets import write_nvidia_dataset
from training.config import EvaluateConfig, TrainConfig
from training.evaluate import evaluate_run
from training.model import table_name
from training.rundir import RunDir


def test_table_names_are_valid_module_names_and_stable():
    assert table_name("C1") == "t_C1" and table_name("c_0") == "t_c_0"  # old checkpoints keep loading
    assert table_name("cat_0.bin") == "t_cat_0_bin_cef3a484"  # the name is in checkpoints: never change it
    names = [table_name(f) for f in ("cat_0.bin", "cat_0_bin", "cat 0.bin", "cat/0.bin")]
    assert len(set(names)) == 4 and all(n.isidentifier() for n in names)


def test_eval_split_falls_back_to_test_only_for_the_default():
    cfg = TrainConfig(dataset="ds")
    assert cfg.check_splits(["train", "val", "test"]) == "val"
    assert cfg.check_splits(["train", "test"]) == "test"
    with pytest.raises(UserError, match=r"ds: the dataset has no split 'val' \(it has: train\).*null to train without"):
        cfg.check_splits(["train"])
    assert cfg.with_overrides({"eval_split": None}).check_splits(["train"]) is None  # no validation
    with pytest.raises(UserError, match=r"no split 'holdout' \(it has: train, test\).*eval_split"):
        cfg.with_overrides({"eval_split": "holdout"}).check_splits(["train", "test"])


@pytest.mark.timeout(300)
def test_nvidia_dataset_trains_on_one_rank_then_evaluates(trained_runs, tmp_path):
    ds = write_nvidia_dataset(tmp_path / "ds", {"train": 512, "test": 128})
    # cat_0.bin's 7.9M rows are capped: the ids are below 11 anyway
    proc = trained_runs(ds, "--max-steps", "4", "--set", "data.batch_size=64", "--set", "eval_every=2",
                          "--set", "arch.max_table_size=1000")
    run = proc.path
    assert "the dataset has no split 'val': validating on 'test'" in proc.stdout
    assert "t_cat_0_bin_cef3a484" in (run / RunDir.PLAN).read_text()
    assert json.loads((run / RunDir.DONE).read_text()) == {"latest_step": 4, "world_size": 1}  # `dlrmflow train` marks it complete
    best = json.loads((run / RunDir.CHECKPOINTS / "best").read_text())

    out = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    assert out["rows"] == 128 and out["step"] == best["step"] and out["warning"] is None
    assert out["auc"] == pytest.approx(best["auc"], rel=1e-5)  # the same checkpoint on the same split
