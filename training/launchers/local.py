"""The local launcher: torchrun as a subprocess here, standalone on one node or one node of a c10d job.

``torchrun_command`` and ``run_command`` are also how evaluation starts its ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from training.launchers.base import Launcher, OnLine
from training.rundir import RunDir


TORCHRUN = "training.launchers.torchrun"   # the module that runs torchrun (ranks forked on CPU builds)


def torchrun_command(run_uri: str, *, nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None,
                     node_rank: int | None = None, resume: bool = False, run_id: str | None = None,
                     module: str = "training.train_worker", args: list[str] | None = None) -> list[str]:
    """The torchrun command line for the ranks of one node, running ``python -m MODULE RUN [ARGS]``
    on each (``training.train_worker`` trains; ``training.evaluate_worker`` evaluates), through
    ``training.launchers.torchrun`` (torch's torchrun; on a CPU build the ranks fork from it, imports done)."""
    cmd = [sys.executable, "-u", "-m", TORCHRUN, "--nproc-per-node", str(nproc)]
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


class LocalLauncher(Launcher):
    """torchrun as a subprocess here: standalone, or one node of a c10d job (``nnodes`` > 1)."""

    kind = "local"

    def start(self, run: RunDir, *, nproc: int | None, resume: bool, env: dict[str, str] | None,
              on_line: OnLine) -> int:
        s = self.settings
        cmd = torchrun_command(run.uri, nproc=nproc or 1, nnodes=s.nnodes, rdzv_endpoint=s.rdzv_endpoint,
                               node_rank=s.node_rank, resume=resume, run_id=run.name)
        return run_command(cmd, env=self.environment(env), on_line=on_line)

    def describe(self) -> str:
        s = self.settings
        return "local torchrun" + (f" (node of {s.nnodes}, rendezvous {s.rdzv_endpoint})" if s.nnodes > 1 else "")


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
