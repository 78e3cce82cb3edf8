"""Checkpoints: pointers and completeness markers, pruning, and exact resume (real torchrun, 2 ranks)."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.datasets import write_dataset
from helpers.runs import checkpoint_tensors, metrics, train
from training.checkpoint import COMPLETE, Checkpointer
from training.rundir import RunDir

# warmup + decay, Adam for the dense part (lazy state) and row-wise Adagrad for the tables:
# everything that a resume could get wrong shows up in the final parameters.
COMMON = ["--set", "data.batch_size=128", "--set", "eval_every=4", "--set", "log_every=1", "--set", "epochs=2",
          "--set", "optimizer.warmup_steps=3", "--set", "optimizer.decay_start=6", "--set", "optimizer.decay_steps=8",
          "--set", "optimizer.dense.type=adam", "--set", "optimizer.dense.lr=0.01", "--set", "keep_checkpoints=2"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("ds"), {"train": 1100, "val": 300})


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_interrupted_and_resumed_run_ends_with_identical_parameters(dataset, tmp_path):
    """On 2 ranks: table-wise tables keep their optimizer state only on the owning rank, so each
    rank's state dict holds keys the other's lacks (the 1-rank resume is in test_train_failures)."""
    full, parts = tmp_path / "full", tmp_path / "parts"
    train(dataset, full, *COMMON, "--max-steps", "14", nproc=2)
    assert "table_wise" in (full / "plan.txt").read_text()
    # stop mid-epoch (8 steps per epoch), between evaluations, then resume on the run's own config
    train(dataset, parts, *COMMON, "--max-steps", "6", nproc=2)
    assert Checkpointer(RunDir(str(parts))).step_of("latest") == 6
    proc = train(dataset, parts, "--resume", "--max-steps", "14", nproc=2)
    assert "resumed from step 6 (epoch 0, step 6 of it)" in proc.stdout

    a, b = checkpoint_tensors(full, 14, tmp_path), checkpoint_tensors(parts, 14, tmp_path)
    assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # the same loss curve, and the resumed run's metrics file continues the first one's
    loss = lambda run: [(m["step"], m["loss"]) for m in metrics(run) if "loss" in m]
    assert loss(full) == loss(parts) and len(loss(full)) == 14


def test_train_refuses_a_used_run_folder_without_resume(small_dataset, two_rank_run, capsys):
    """The session's trained run (helpers/fixtures.py): `train` into it without --resume is refused, untouched."""
    from flows.cli import main

    before = {p: p.stat().st_mtime_ns for p in two_rank_run.rglob("*") if "eval" not in p.parts}
    assert main(["train", "--dataset", str(small_dataset), "--run", str(two_rank_run)]) == 2
    assert "run folder already has checkpoints" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in two_rank_run.rglob("*") if "eval" not in p.parts} == before


def test_latest_skips_incomplete_checkpoints_and_pruning_keeps_best(tmp_path):
    run = RunDir(str(tmp_path))
    ck = Checkpointer(run, keep=2)
    for step in (2, 4, 6):
        run.write_text("{}", "checkpoints", str(step), COMPLETE)
    run.write_text("", "checkpoints", "8", ".metadata")  # a save that crashed before its marker
    run.write_text(json.dumps({"step": 8}), "checkpoints", "latest")
    run.write_text(json.dumps({"step": 2, "auc": 0.8}), "checkpoints", "best")
    assert ck.steps() == [2, 4, 6]
    assert ck.step_of("latest") == 6 and ck.step_of("best") == 2 and ck.step_of(4) == 4 and ck.step_of(8) is None
    ck._prune()
    assert ck.steps() == [2, 4, 6]  # 4 and 6 are the newest two, 2 is the best
    run.write_text(json.dumps({"step": 6}), "checkpoints", "best")
    ck._prune()
    assert ck.steps() == [4, 6] and not run.exists("checkpoints", "2")


def test_loading_a_missing_checkpoint_is_a_user_error(tmp_path):
    from common.errors import UserError

    with pytest.raises(UserError, match="no complete checkpoint 'best'"):
        Checkpointer(RunDir(str(tmp_path))).load("best", {})
