"""The per-node torchrun command of a multi-node job, as one shell command line.

Every node runs the same line (the launchers differ only in how it gets there): torchrun with c10d
rendezvous at ``$DLRMFLOW_RDZV_ENDPOINT``, node 0 hosting the rendezvous store (``is_host``, so no
hostname matching is needed), running the job's rank module: ``python -m MODULE RUN ARGS`` (``RankJob``:
``training.train_worker RUN [--resume]``, ``training.evaluate_worker``, ``training.score_worker``).
"""

from __future__ import annotations

import shlex

from training.launchers.base import RankJob
from training.launchers.local import TORCHRUN, torchrun_command


class Shell(str):
    """A token left for the shell to expand (not quoted)."""


def node_command(job: RankJob, run_uri: str, *, python: str, nproc: int, nnodes: int, is_host: str,
                 rdzv_timeout_s: int) -> str:
    """``exec PYTHON -u -m training.launchers.torchrun ... -m MODULE RUN ARGS``; ``is_host`` is a shell
    expression that is 1 on the node hosting the rendezvous and 0 elsewhere."""
    cmd = torchrun_command(job, run_uri, nproc=nproc, nnodes=max(nnodes, 2), rdzv_endpoint="@ENDPOINT@")
    tokens: list[str] = [python, *cmd[1:]]
    if nnodes == 1:  # one node: the same c10d rendezvous as many (the store on this node)
        i = tokens.index("--nnodes")
        tokens[i + 1] = "1"
    tokens[tokens.index("@ENDPOINT@")] = Shell('"$DLRMFLOW_RDZV_ENDPOINT"')
    at = tokens.index("-m", tokens.index(TORCHRUN) + 1)
    tokens[at:at] = ["--rdzv-conf", Shell(f'"is_host={is_host},join_timeout={int(rdzv_timeout_s)}"'),
                     "--max-restarts", "0"]
    return "exec " + shell_join(tokens)


def shell_join(tokens: list[str]) -> str:
    return " ".join(t if isinstance(t, Shell) else shlex.quote(t) for t in tokens)
