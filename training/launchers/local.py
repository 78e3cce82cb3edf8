"""The local launcher: torchrun as a subprocess here, standalone on one node or one node of a c10d job.

``torchrun_command`` is the torchrun line of any rank job (``RankJob``); the cluster launchers' per-node line
(``training.launchers.nodes``) is built from it too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable

from common.process import dying_with_this_process
from training.launchers.base import Launcher, OnLine, RankJob
from training.rundir import RunDir, run_name


TORCHRUN = "training.launchers.torchrun"   # the module that runs torchrun (ranks forked on CPU builds)


def torchrun_command(job: RankJob, run_uri: str, *, nproc: int = 1, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, node_rank: int | None = None) -> list[str]:
    """The torchrun command line for the ranks of one node, running ``python -m MODULE RUN [ARGS]`` of ``job``
    on each (``training.train_worker`` trains; ``training.evaluate_worker`` evaluates; ``training.score_worker``
    scores), through ``training.launchers.torchrun`` (torch's torchrun; on a CPU build the ranks fork from it,
    imports done). A multi-node job's rendezvous id is the run's name."""
    cmd = [sys.executable, "-u", "-m", TORCHRUN, "--nproc-per-node", str(nproc)]
    if nnodes > 1:
        if not rdzv_endpoint:
            raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT")
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", run_name(run_uri) or "dlrmflow"]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
    else:
        cmd.append("--standalone")
    return cmd + ["-m", job.module, *job.argv(run_uri)]


class LocalLauncher(Launcher):
    """torchrun as a subprocess here: standalone, or one node of a c10d job (``nnodes`` > 1)."""

    kind = "local"

    @property
    def world_size(self) -> int:
        return self.settings.nproc * self.settings.nnodes

    @property
    def shares_files(self) -> bool:
        return self.settings.nnodes == 1

    @property
    def one_of_several(self) -> bool:
        return self.settings.nnodes > 1

    def start(self, job: RankJob, run: RunDir, *, env: dict[str, str] | None, on_line: OnLine) -> int:
        s = self.settings
        cmd = torchrun_command(job, run.uri, nproc=s.nproc, nnodes=s.nnodes, rdzv_endpoint=s.rdzv_endpoint,
                               node_rank=s.node_rank)
        return run_command(cmd, env=self.environment(env), on_line=on_line)

    def describe(self) -> str:
        s = self.settings
        return f"local torchrun, {s.nproc} rank(s)" + (
            f" (node of {s.nnodes}, rendezvous {s.rdzv_endpoint})" if s.nnodes > 1 else "")


def run_command(cmd: list[str], *, env: dict[str, str] | None = None,
                on_line: Callable[[str], None] | None = None) -> int:
    """Run a torchrun command; output is inherited or handed line by line to ``on_line``. torchrun dies with this
    process whatever ends it (``common.process.dying_with_this_process``; its ranks die with torchrun), so no rank
    goes on writing a run that a re-run takes over. Call it from a thread that waits for it (this one does)."""
    child_env = {**os.environ, **(env or {})}
    cmd = dying_with_this_process(cmd)
    if on_line is None:
        return subprocess.run(cmd, env=child_env).returncode
    with subprocess.Popen(cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
        return proc.wait()
