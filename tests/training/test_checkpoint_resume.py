"""Checkpoints: pointers and completeness markers, pruning, a used run folder refused without --resume (the exact
resume of a killed 2-rank run: test_train_failures)."""

from __future__ import annotations

import json

import pytest

from training.checkpoint import Checkpointer
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
        run.write_text("{}", RunDir.CHECKPOINTS, str(step), RunDir.COMPLETE)
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


def test_a_damaged_checkpoint_is_named_and_never_loaded(two_rank_run, tmp_path):
    """_COMPLETE records every file's size and sha256 at save (the 2 ranks hash them between them); 64 KiB
    overwritten in one shard of a copy: evaluation (2 ranks), export and a warm start's check refuse it, in one
    line naming the file; a missing file likewise; the untouched run still loads."""
    import os
    import shutil

    from common.errors import UserError
    from helpers.fixtures import CHILD_ENV
    from helpers.paths import REPO
    from helpers.processes import run_dlrmflow
    from training.export import export_bundle

    step = json.loads((two_rank_run / "checkpoints" / "latest").read_text())["step"]
    marker = json.loads((two_rank_run / "checkpoints" / str(step) / RunDir.COMPLETE).read_text())
    folder = two_rank_run / "checkpoints" / str(step)
    assert sorted(marker["files"]) == sorted(p.name for p in folder.iterdir() if p.name != RunDir.COMPLETE)
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in marker["files"].values())
    Checkpointer(RunDir(str(two_rank_run))).verify(step, shared=False)

    run = tmp_path / "run"
    shutil.copytree(two_rank_run, run, ignore=shutil.ignore_patterns("eval"))
    shard = max((run / "checkpoints" / str(step)).glob("*.distcp"), key=lambda p: p.stat().st_size)
    with open(shard, "r+b") as f:
        f.seek(shard.stat().st_size // 3)
        f.write(b"\xAB" * min(65536, shard.stat().st_size // 3))
    named = rf"checkpoints/{step}: checkpoint file {shard.name} differs from what was saved"
    proc = run_dlrmflow("evaluate", "--run", run, "--checkpoint", step, "--nproc", "2", cwd=REPO,
                        env={**os.environ, **CHILD_ENV}, timeout=200)
    assert proc.returncode == 2, proc.stderr[-3000:]
    summary = proc.stderr[proc.stderr.rindex("error: evaluation of"):].splitlines()
    assert "Traceback" not in proc.stderr and len(summary) == 2   # both ranks found it: one line says so
    assert summary[1].startswith("error (ranks 0, 1): ") and named in summary[1]
    with pytest.raises(UserError, match=named + r".*is not loaded\. Fix: restore it from a backup"):
        export_bundle(str(run), step, str(tmp_path / "bundle"))
    assert not (tmp_path / "bundle").exists()
    shard.unlink()
    with pytest.raises(UserError, match=rf"checkpoint file {shard.name} is missing"):
        Checkpointer(RunDir(str(run))).verify(step, shared=False)
