"""Training runs in the tests: `dlrmflow train` under real torchrun (``train``), the session's factory of
trained runs shared by the tests that only read a run (``TrainedRuns``, fixture ``trained_runs``), and what a
run wrote (metrics, checkpoint tensors)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from helpers.paths import REPO
from helpers.processes import run_dlrmflow

PG_TIMEOUT = ["--set", "pg_timeout_s=120"]  # a failing test ends in minutes, not the default 10


def train(dataset: Path, run: Path, *args: str, nproc: int = 1, timeout: float = 240) -> subprocess.CompletedProcess:
    """``dlrmflow train`` in a subprocess (torchrun standalone); fails the test on a non-zero exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = run_dlrmflow("train", "--dataset", dataset, "--run", run, "--nproc", nproc, *PG_TIMEOUT, *args, cwd=REPO,
                        env=env, timeout=timeout)
    assert proc.returncode == 0, f"train failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@dataclass(frozen=True)
class TrainedRun:
    path: Path      # the run folder
    stdout: str     # what `dlrmflow train` printed


class TrainedRuns:
    """The session's trained runs keyed by (dataset, arguments, ranks): the first test that asks for one trains
    it, the others get the same folder. Tests read a shared run; what they write into it (an evaluation under
    ``eval/``) is what any of them may find there."""

    def __init__(self, root: Path):
        self.root = root
        self._runs: dict[tuple, TrainedRun] = {}

    def __call__(self, dataset: Path, *args: str, nproc: int = 1, timeout: float = 240) -> TrainedRun:
        key = (str(dataset), args, nproc)
        if key not in self._runs:
            run = self.root / f"run{len(self._runs)}"
            self._runs[key] = TrainedRun(run, train(dataset, run, *args, nproc=nproc, timeout=timeout).stdout)
        return self._runs[key]


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def checkpoint_tensors(run: Path, step: int, tmp: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP checkpoint, unsharded (whatever the plan and number of ranks that saved it)."""
    out = tmp / f"ckpt-{run.name}-{step}.pt"
    dcp_to_torch_save(str(run / "checkpoints" / str(step)), str(out))
    flat: dict[str, torch.Tensor] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(node, torch.Tensor):
            flat[prefix] = node

    walk("", torch.load(out, weights_only=False))
    return flat
