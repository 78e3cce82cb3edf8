"""Checkpoints: pointers and completeness markers, pruning, a used run folder refused without --resume (the exact
resume of a killed 2-rank run: test_train_failures)."""

from __future__ import annotations

import json

import pytest

from training.checkpoint import COMPLETE, Checkpointer
from training.rundir import RunDir


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
