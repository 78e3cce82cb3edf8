"""How a local rank job's ranks start (training.launchers.torchrun, the local launcher's ``start_method``): forked
from torchrun on a CPU build by default, spawned (a fresh interpreter each, the GPU build's process model) when the
setting says so; and the patch of torch's private poll of forked ranks, pinned to the torch it was written for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.datasets import write_dataset
from helpers.paths import REPO
from helpers.runs import metrics
from training import RunDir
from training.launchers import build_launcher, train_job
from training.launchers.local import torchrun_command
from training.launchers.torchrun import _report_every_failed_rank, forks_ranks, torchrun_options


def _rank(local_rank: int) -> None:
    """Rank 0 fails with exit code 1, rank 1 is killed by a signal (the root cause the summary must name)."""
    if local_rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(1)


def _failed_ranks(tmp_path: Path, name: str, patched: bool) -> list[tuple[int, int]]:
    """Fork ``_rank`` on two ranks as torchrun's forked ranks are (``MultiprocessContext``), wait until both have
    ended, then poll once: (local rank, exit code) of each failure the poll reports, in its order."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, start_processes
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    context = start_processes(name, _rank, {0: (0,), 1: (1,)}, {0: {}, 1: {}},
                              DefaultLogsSpecs(log_dir=str(tmp_path / name)), start_method="fork")
    assert isinstance(context, MultiprocessContext)
    try:
        for process in context._pc.processes:
            process.join(30)
        poll = _report_every_failed_rank(MultiprocessContext._poll) if patched else MultiprocessContext._poll
        result = poll(context)
    finally:
        context.close()
    return [(rank, failure.exitcode) for rank, failure in result.failures.items()]


def test_the_patch_of_torchs_poll_of_forked_ranks_still_fits_torch(tmp_path):
    """torch's ``MultiprocessContext._poll`` (private) reports one failed rank; the forked ranks' patch
    (``_report_every_failed_rank``) reports every one, the rank killed by a signal first. This fails when a torch
    upgrade changes either: then check the patch against the new ``_poll`` (or drop it where torch reports them all)."""
    assert len(_failed_ranks(tmp_path, "torch", patched=False)) == 1, "torch's _poll changed: re-check the patch"
    assert _failed_ranks(tmp_path, "patched", patched=True) == [(1, -signal.SIGKILL), (0, 1)]


def test_the_local_launchers_start_method_reaches_torchrun(monkeypatch, tmp_path):
    """``start_method: spawn`` is torchrun's ``--start-method spawn``, which the torchrun module does not fork for;
    fork (the default) goes unsaid, and forks on this CPU build."""
    job = train_job()
    assert "--start-method" not in torchrun_command(job, "runs/r", nproc=2)
    spawn = torchrun_command(job, "runs/r", nproc=2, start_method="spawn")
    assert spawn[spawn.index("--start-method") + 1] == "spawn"
    assert not forks_ranks(torchrun_options(spawn[4:])) and forks_ranks(torchrun_options([]))
    calls = []
    monkeypatch.setattr("training.launchers.local.run_command", lambda cmd, **kw: calls.append(cmd) or 0)
    launcher = build_launcher({"kind": "local", "nproc": 2, "start_method": "spawn"})
    assert launcher.run_ranks(job, str(tmp_path / "r"), on_line=print) == 0
    assert calls[0][calls[0].index("--start-method") + 1] == "spawn"


def _spawned_ranks(run: Path) -> set[int]:
    """This host's processes that run ``training.train_worker`` for ``run`` in an interpreter of their own (a spawned
    rank: ``python -u -m training.train_worker RUN``; a forked one keeps torchrun's command line)."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:4] == [b"-u", b"-m", b"training.train_worker"] and str(run).encode() in argv:
            found.add(int(entry))
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spawned_ranks_train_on_cpu_as_on_a_gpu_build(tmp_path):
    """``--launcher.start-method spawn`` on this CPU build: two ranks, each a fresh interpreter as on a GPU build
    (seen in /proc while they run), train, checkpoint and end (``distributed.exit_rank``'s unforked way out)."""
    dataset = write_dataset(tmp_path / "ds", {"train": 512, "val": 256})
    run = tmp_path / "run"
    command = subprocess.Popen([sys.executable, "-m", "flows", "train", "--dataset", str(dataset), "--run", str(run),
                                "--nproc", "2", "--launcher.start-method", "spawn", "--set", "data.batch_size=64",
                                "--set", "eval_every=4", "--set", "pg_timeout_s=120"],
                               cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    ranks: set[int] = set()
    deadline = time.monotonic() + 240
    while command.poll() is None and time.monotonic() < deadline:
        ranks |= _spawned_ranks(run)
        time.sleep(0.05)
    out, _ = command.communicate(timeout=30)
    assert command.returncode == 0, out[-3000:]
    assert len(ranks) == 2, ranks
    assert metrics(run) and (run / RunDir.CHECKPOINTS / "latest").exists(), sorted(p.name for p in run.iterdir())
