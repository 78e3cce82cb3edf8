"""Launchers: where the ranks of a rank job (train, evaluate, score) start (plain Python, no Prefect import).

    from training.launchers import SlurmLauncherConfig, build_launcher
    code = build_launcher(SlurmLauncherConfig(nodes=4)).launch(run, train_config)      # training
    code = build_launcher(SlurmLauncherConfig(nodes=4)).run_ranks(job, run, on_line=output)   # any RankJob

- ``LocalLauncher``: torchrun as a subprocess here (``nproc`` ranks); the default.
- ``SlurmLauncher``: infra/slurm/train.sbatch rendered for the job and submitted with ``sbatch --wait --parsable``.
- ``KubernetesLauncher``: infra/k8s/train-job.yaml rendered for the job, ``kubectl apply``-ed and ``kubectl wait``-ed.

A ``RankJob`` names the rank module (``training.train_worker``, ``training.evaluate_worker``,
``training.score_worker``) and its arguments; every launcher runs any of them with the same settings.
Training checks the dataset and saves the run's config before any rank starts; RCCL/NCCL variables come
from infra/rccl/<profile>.env (``rccl_profiles`` of each kind; a cluster job's default is its GPU vendor's:
``training.launchers.gpus``). ``RankOutput`` keeps a job's output for its failure message (the failing rank's
last lines).

This is the package's face; each name is imported on first use from the module that holds it (``_FACE``), so that
a module of the package run on its own (``python -m training.launchers.torchrun``, once per rank job) imports none
of the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.face import lazy

if TYPE_CHECKING:   # what type checkers and IDEs see; at run time each name comes from _FACE on first use
    from .base import LaunchError, Launcher, RankJob, infra_dir, profile_env, read_env_file, train_job
    from .build import build_launcher
    from .config import (KubernetesLauncherConfig, LauncherConfig, LocalLauncherConfig, RanksConfig,
                         SlurmLauncherConfig, launcher_config)
    from .kubernetes import KubernetesLauncher
    from .local import LocalLauncher
    from .output import RankOutput
    from .slurm import SlurmLauncher

_FACE = {   # name -> the module of this package that holds it
    "Launcher": "base", "LaunchError": "base", "RankJob": "base", "infra_dir": "base", "profile_env": "base",
    "read_env_file": "base", "train_job": "base",
    "KubernetesLauncherConfig": "config", "LauncherConfig": "config", "LocalLauncherConfig": "config",
    "RanksConfig": "config", "SlurmLauncherConfig": "config", "launcher_config": "config",
    "KubernetesLauncher": "kubernetes", "LocalLauncher": "local", "SlurmLauncher": "slurm", "RankOutput": "output",
    "build_launcher": "build",
}

__all__, __getattr__, __dir__ = lazy(__name__, _FACE)
