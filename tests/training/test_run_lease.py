"""The run folder's lease (issue 19, section 3) at the launcher base, without torchrun (``run_command`` is
replaced by a function that blocks like a running training): a second training of the same run folder fails at
once naming the holder, or waits for it when asked; never two trainings in one folder."""

from __future__ import annotations

import threading
import time

import pytest

from common.lease import LeaseHeld
from training.config import TrainConfig
from training.launchers import build_launcher
from training.rundir import RunDir
from helpers.datasets import write_dataset


@pytest.fixture
def blocking_torchrun(monkeypatch):
    """``run_command`` that runs until ``release`` is set, counting trainings running at once."""
    state = {"running": 0, "most": 0, "runs": 0, "started": threading.Event(), "release": threading.Event()}
    lock = threading.Lock()

    def run_command(cmd, env=None, on_line=None):
        with lock:
            state["running"] += 1
            state["runs"] += 1
            state["most"] = max(state["most"], state["running"])
        state["started"].set()
        state["release"].wait(30)
        with lock:
            state["running"] -= 1
        return 0

    monkeypatch.setattr("training.launchers.local.run_command", run_command)
    return state


def test_a_second_training_of_a_leased_run_folder_fails_clearly_or_waits(blocking_torchrun, tmp_path):
    cfg = TrainConfig(dataset=str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32})))
    run, codes = str(tmp_path / "runs" / "r"), []
    first = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(run, cfg, on_line=print)))
    first.start()
    assert blocking_torchrun["started"].wait(30)
    assert (tmp_path / "runs" / "r" / RunDir.LEASE).exists()

    with pytest.raises(LeaseHeld, match=r"run lease \(training\) .*r/run.lease is held by pid \d+ on .*waited 0 s"):
        build_launcher(None).launch(run, cfg, on_line=print)
    said = []
    waiting = threading.Thread(target=lambda: codes.append(
        build_launcher(None).launch(run, cfg, on_line=said.append, wait_s=30)))
    waiting.start()
    deadline = time.time() + 30
    while not any("waiting for the run lease (training)" in s for s in said) and time.time() < deadline:
        time.sleep(0.05)
    assert blocking_torchrun["runs"] == 1 and any("waiting for the run lease (training)" in s for s in said)
    blocking_torchrun["release"].set()
    first.join(30)
    waiting.join(30)
    assert codes == [0, 0] and blocking_torchrun["runs"] == 2 and blocking_torchrun["most"] == 1
    assert not (tmp_path / "runs" / "r" / RunDir.LEASE).exists()


def test_two_runs_of_one_night_the_second_waits_then_reuses_what_the_first_trained(blocking_torchrun, tmp_path):
    """The train flow's launch (reuse): the lease is taken in one step with the wait, and what the other run left
    is looked at under it: a folder it completed meanwhile is reused, nothing trained again, no failure."""
    cfg = TrainConfig(dataset=str(write_dataset(tmp_path / "ds", {"train": 64, "val": 32})))
    run, codes, said = RunDir(str(tmp_path / "runs" / "r")), [], []
    first = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(run.uri, cfg, on_line=print,
                                                                                     wait_s=30, reuse=True)))
    first.start()
    assert blocking_torchrun["started"].wait(30)
    second = threading.Thread(target=lambda: codes.append(build_launcher(None).launch(
        run.uri, cfg, on_line=said.append, wait_s=30, reuse=True)))
    second.start()
    deadline = time.time() + 30
    while not any("waiting for the run lease (training)" in s for s in said) and time.time() < deadline:
        time.sleep(0.05)
    run.mark_complete({"latest_step": 4, "world_size": 1})   # what the first training's rank 0 writes at its end
    blocking_torchrun["release"].set()
    first.join(30)
    second.join(30)
    assert codes == [0, 0] and blocking_torchrun["runs"] == 1
    assert any("already complete (another run of it finished while this one waited): reusing it" in s for s in said)
    assert not (tmp_path / "runs" / "r" / RunDir.LEASE).exists()