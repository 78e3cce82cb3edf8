"""Start training under torchrun: standalone on one node, c10d rendezvous across nodes.

``launch(run_uri, cfg, nproc=2)`` saves the resolved config as ``<run>/config.yaml``, then runs
``python -m torch.distributed.run ... -m training.worker RUN`` and returns its exit
code. Output is inherited (or handed line by line to ``on_line``, e.g. a Prefect logger).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from training.config import TrainConfig
from training.rundir import RunDir


def torchrun_command(run_uri: str, *, nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None,
                     node_rank: int | None = None, resume: bool = False, run_id: str | None = None,
                     module: str = "training.worker", args: list[str] | None = None) -> list[str]:
    """The torchrun command line for the ranks of one node, running ``python -m MODULE RUN [ARGS]``
    on each (``training.worker`` trains; ``training.evaluate`` evaluates)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT")
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", run_id or "dlrmflow"]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
    else:
        cmd.append("--standalone")
    cmd += ["-m", module, run_uri, *(args or [])]
    return cmd + (["--resume"] if resume else [])


def save_config(run_uri: str, cfg: TrainConfig) -> None:
    """Write the resolved config into the run folder (atomically)."""
    RunDir(run_uri).write_text(cfg.to_yaml(), "config.yaml")


def launch(run_uri: str, cfg: TrainConfig, *, nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None,
           node_rank: int | None = None, resume: bool = False, env: dict[str, str] | None = None,
           on_line: Callable[[str], None] | None = None) -> int:
    """Save the config, run torchrun, stream its output; returns torchrun's exit code."""
    save_config(run_uri, cfg)
    cmd = torchrun_command(run_uri, nproc=nproc, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint, node_rank=node_rank,
                           resume=resume, run_id=RunDir(run_uri).uri.rsplit("/", 1)[-1])
    return run_command(cmd, env=env, on_line=on_line)


def run_command(cmd: list[str], *, env: dict[str, str] | None = None,
                on_line: Callable[[str], None] | None = None) -> int:
    """Run a torchrun command; output is inherited or handed line by line to ``on_line``."""
    child_env = {**os.environ, **(env or {})}
    if on_line is None:
        return subprocess.run(cmd, env=child_env).returncode
    with subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
        return proc.wait()
