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

from common.errors import UserError
from training.config import TrainConfig, split_error
from training.rundir import RunDir, storage_options


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


def check_dataset(cfg: TrainConfig) -> None:
    """Fail fast, before torchrun starts, when the dataset, its training or validation split or one of
    the training split's files is missing: a one-line UserError here instead of every rank failing."""
    import fsspec

    from feature_spec import load, resolve

    if not cfg.dataset:
        raise UserError("no dataset given. Fix: pass --dataset DATASET_URI (a folder written by `dlrmflow preprocess`).")
    options = storage_options(cfg.dataset)
    spec = load(cfg.dataset, **options)
    split = cfg.data.train_split
    if split not in spec.splits:
        raise split_error(cfg.dataset, split, spec.splits, "set data.train_split to one of those split names.")
    cfg.eval_split_in(spec.splits)
    if not spec.is_dataset:
        raise UserError(f"{cfg.dataset}: this feature spec describes raw input, not a split_binary dataset. "
                        "Fix: run `dlrmflow preprocess` on it and pass the dataset folder it writes.")
    files = sorted({resolve(cfg.dataset, f) for chunk in spec.source_spec[split] for f in chunk.files})
    fs, _ = fsspec.core.url_to_fs(files[0], **options)
    missing = [f for f in files if not fs.exists(f)]
    if missing:
        raise UserError(f"{missing[0]}: data file of split '{split}' is missing"
                        f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}. "
                        "Fix: re-run preprocessing, or correct the path in the feature spec.")


def launch(run_uri: str, cfg: TrainConfig, *, nproc: int = 1, nnodes: int = 1, rdzv_endpoint: str | None = None,
           node_rank: int | None = None, resume: bool = False, env: dict[str, str] | None = None,
           on_line: Callable[[str], None] | None = None) -> int:
    """Check the dataset, save the config, run torchrun, stream its output; returns torchrun's exit code."""
    check_dataset(cfg)
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
