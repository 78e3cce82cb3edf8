"""Helpers of the training tests: run `dlrmflow train` (real torchrun) and read what a run wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

REPO = Path(__file__).resolve().parents[1]
PG_TIMEOUT = ["--set", "pg_timeout_s=120"]  # a failing test ends in minutes, not the default 10


def train(dataset: Path, run: Path, *args: str, nproc: int = 1, timeout: float = 240) -> subprocess.CompletedProcess:
    """``dlrmflow train`` in a subprocess (torchrun standalone); fails the test on a non-zero exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "flows.cli", "train", "--dataset", str(dataset), "--run", str(run),
           "--nproc", str(nproc), *PG_TIMEOUT, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"train failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def python(code: str, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter (its own one-rank process group); returns stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc.stdout


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
