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
"""

from pydantic import TypeAdapter

from training.launchers.base import (Launcher, LaunchError, RankJob, infra_dir, profile_env, read_env_file,
                                     train_job)
from training.launchers.config import (KubernetesLauncherConfig, LauncherConfig, LocalLauncherConfig, RanksConfig,
                                       SlurmLauncherConfig)
from training.launchers.kubernetes import KubernetesLauncher
from training.launchers.local import LocalLauncher
from training.launchers.output import RankOutput
from training.launchers.slurm import SlurmLauncher

__all__ = ["Launcher", "LaunchError", "RankJob", "RankOutput", "train_job", "LocalLauncher", "SlurmLauncher", "KubernetesLauncher", "LauncherConfig",
           "RanksConfig", "LocalLauncherConfig", "SlurmLauncherConfig", "KubernetesLauncherConfig", "build_launcher",
           "launcher_config", "infra_dir", "profile_env", "read_env_file"]

_LAUNCHERS = {cls.kind: cls for cls in (LocalLauncher, SlurmLauncher, KubernetesLauncher)}


def launcher_config(data=None) -> LocalLauncherConfig | SlurmLauncherConfig | KubernetesLauncherConfig:
    """The launcher config a dict (as a flow parameter arrives; ``kind`` picks the launcher) describes."""
    return TypeAdapter(LauncherConfig).validate_python(data or {"kind": "local"})


def build_launcher(cfg=None) -> Launcher:
    """The launcher that settings (or their dict form) describe; None: local torchrun, one rank; a Launcher: itself."""
    if isinstance(cfg, Launcher):
        return cfg
    settings = launcher_config(cfg) if cfg is None or isinstance(cfg, dict) else cfg
    return _LAUNCHERS[settings.kind](settings)
