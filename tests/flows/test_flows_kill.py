"""Reliability: a rank killed (SIGKILL) mid-training fails the train task with a clear message; the
next pipeline run skips preprocessing and resumes from the last complete checkpoint."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

from flows.pipeline import pipeline
from flows.train import TrainingFailed
from helpers.prefect_api import logs_matching, small_pipeline


def _rank_pids(run: str) -> list[int]:
    """The ranks of ``run``'s job: its ``training.train_worker`` processes whose parent is one too (the launcher
    forks them, so they share its command line; pids wrap around, so the launcher's is not always the lowest)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"training.train_worker" in cmd and run.encode() in cmd:
            found[int(entry.name)] = parent
    return sorted(pid for pid, parent in found.items() if parent in found)


def test_killed_rank_fails_clearly_and_rerun_resumes(prefect_harness, plain_launches, tmp_path):
    config = small_pipeline(str(tmp_path / "store"), run_name="killed",
                            train={"epochs": 16, "checkpoint_every": 12, "eval_every": 100})
    run = tmp_path / "store" / "runs" / "killed"
    outcome = {}

    def target():
        try:
            outcome["result"] = pipeline(config)
        except Exception as e:  # noqa: BLE001  (the test inspects it)
            outcome["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    deadline = time.time() + 300
    while not list(run.glob("checkpoints/*/_COMPLETE")):
        assert thread.is_alive() and time.time() < deadline, outcome
        time.sleep(0.1)
    victim = _rank_pids(str(run))[-1]
    os.kill(victim, signal.SIGKILL)
    thread.join(300)

    error = outcome.get("error")
    assert isinstance(error, TrainingFailed), outcome
    step = json.loads((run / "checkpoints" / "latest").read_text())["step"]
    assert re.search(r"rank (\d), exit code -9 \(killed by signal 9\)\. Last lines of rank \1:\n.+", str(error))
    assert f"resume from the checkpoint at step {step}" in str(error)
    assert not (run / "_SUCCESS").exists()

    out = pipeline(config)
    assert logs_matching("skipping preprocessing")
    assert logs_matching(f"resuming training from the checkpoint at step {step}: {run}")
    assert (run / "_SUCCESS").exists() and out["metrics"]["auc"] > 0.5
    final = json.loads((run / "checkpoints" / "latest").read_text())["step"]
    assert final > step
    logged = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert logged == sorted(logged) and logged[-1] == final
