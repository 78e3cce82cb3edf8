"""A dataset written by NVIDIA's tools trains and evaluates: features named after their files
(``cat_0.bin``) get valid, stable table names; without a 'val' split training validates on the last 10% of the
train rows (eval_split 'holdout'), never on 'test'."""

from __future__ import annotations

import json
import shutil

import pytest

from common.errors import UserError
from helpers.datasets import write_dataset, write_nvidia_dataset
from helpers.runs import metrics
from training.config import HOLDOUT, EvaluateConfig, TrainConfig
from training.evaluate import check_inputs, evaluate_run
from training.launchers.base import check_resume
from training.launchers.output import KNOWN
from training.dlrm import table_name
from training.rundir import RunDir


def test_table_names_are_valid_module_names_and_stable():
    assert table_name("C1") == "t_C1" and table_name("c_0") == "t_c_0"  # old checkpoints keep loading
    assert table_name("cat_0.bin") == "t_cat_0_bin_cef3a484"  # the name is in checkpoints: never change it
    names = [table_name(f) for f in ("cat_0.bin", "cat_0_bin", "cat 0.bin", "cat/0.bin")]
    assert len(set(names)) == 4 and all(n.isidentifier() for n in names)


def test_without_val_the_default_validates_on_the_end_of_train_never_on_test(tmp_path):
    cfg = TrainConfig(dataset="ds")
    assert cfg.check_splits(["train", "val", "test"]) == "val"
    assert cfg.check_splits(["train", "test"]) == HOLDOUT and cfg.check_splits(["train"]) == HOLDOUT
    assert cfg.with_overrides({"eval_split": None}).check_splits(["train"]) is None  # no validation
    with pytest.raises(UserError, match=r"no split 'other' \(it has: train, test\).*eval_split"):
        cfg.with_overrides({"eval_split": "other"}).check_splits(["train", "test"])
    with pytest.raises(UserError, match=r"^eval_split 'test' would choose the checkpoint .* not be held out\. Fix: "
                                        r"leave eval_split at 'val' \(a dataset without 'val' validates on the last 10%"):
        cfg.with_overrides({"eval_split": "test"}).check_splits(["train", "val", "test"])

    # the run's config.yaml holds the rows set aside: from the label file's size (NVIDIA records no row count)
    nvidia = TrainConfig(dataset=str(write_nvidia_dataset(tmp_path / "nv", {"train": 512, "test": 128})))
    resolved = nvidia.resolved()
    assert (resolved.eval_split, resolved.data.holdout_rows) == (HOLDOUT, 51) and resolved.resolved() == resolved
    assert "the last 51 rows of split 'train'" in resolved.validation_text()
    assert nvidia.with_overrides({"data.holdout_fraction": 0.25}).resolved().data.holdout_rows == 128
    with pytest.raises(UserError, match="has 512 rows, so a holdout of 512 leaves none to train on"):
        nvidia.with_overrides({"data.holdout_rows": 512}).resolved()
    ours = TrainConfig(dataset=str(write_dataset(tmp_path / "ours")))   # with 'val': as given
    assert ours.resolved() == ours and ours.validation_text() == "split 'val'"


@pytest.mark.timeout(300)
def test_nvidia_dataset_trains_on_one_rank_then_evaluates(trained_runs, tmp_path):
    ds = write_nvidia_dataset(tmp_path / "ds", {"train": 512, "test": 128})
    # cat_0.bin's 7.9M rows are capped: the ids are below 11 anyway
    proc = trained_runs(ds, "--max-steps", "4", "--set", "data.batch_size=64", "--set", "eval_every=2",
                          "--set", "arch.max_table_size=1000")
    run = proc.path
    # no 'val': the last 10% of the train rows validate (stated, and kept in config.yaml for resume and evaluate)
    assert "validation: holdout: the last 51 rows of split 'train' (rows 461..511, data.holdout_fraction 0.1), " \
           "set aside: training on its first 461; never the test split" in proc.stdout
    assert "validated on: holdout: the last 51 rows" in proc.stdout   # the summary, after `done:`
    # piped: progress as lines, not a bar's redraws; no known library warning (they are in the run's library log)
    assert "%|" not in proc.stdout and "train: step 4/4 (100%)" in proc.stdout and not KNOWN.search(proc.stdout)
    saved = RunDir(str(run)).load_config()
    assert (saved.eval_split, saved.data.holdout_rows) == (HOLDOUT, 51)
    validations = [r for r in metrics(run) if "eval_split" in r]
    assert [(r["step"], r["eval_split"], r["rows"]) for r in validations] == [(2, HOLDOUT, 51), (4, HOLDOUT, 51)]
    assert "t_cat_0_bin_cef3a484" in (run / RunDir.PLAN).read_text()
    assert json.loads((run / RunDir.DONE).read_text()) == {"latest_step": 4, "world_size": 1}  # `dlrmflow train` marks it complete
    best = json.loads((run / RunDir.CHECKPOINTS / "best").read_text())
    assert best["auc"] == next(r["auc"] for r in validations if r["step"] == best["step"])   # chosen on the holdout

    out = evaluate_run(str(run), EvaluateConfig(), env={"OMP_NUM_THREADS": "1"}, on_line=lambda _: None)
    assert out["rows"] == 128 and out["step"] == best["step"] and out["warning"] is None

    # a run of before the holdout chose its checkpoint on 'test': evaluating it there is refused
    old = tmp_path / "old-run"
    shutil.copytree(run, old)
    (old / RunDir.METRICS).write_text((run / RunDir.METRICS).read_text().replace('"holdout"', '"test"'))
    with pytest.raises(UserError, match=r"validated on split 'test' .* are not held out\. Fix: train the run again"):
        check_inputs(RunDir(str(old)), EvaluateConfig())
    # ... and resuming it, which would take the holdout out of the rows it trained on
    (old / RunDir.CONFIG).write_text((run / RunDir.CONFIG).read_text().replace("eval_split: holdout", "eval_split: val"))
    with pytest.raises(UserError, match="trained on all the rows of split 'train' and validated on 'test'"):
        check_resume(RunDir(str(old)), saved)
    check_resume(RunDir(str(run)), saved)   # a run of the holdout resumes
