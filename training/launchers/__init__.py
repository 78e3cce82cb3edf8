"""Launchers: where the ranks of a training run start (plain Python, no Prefect import).

    from training.launchers import SlurmLauncherConfig, build_launcher
    code = build_launcher(SlurmLauncherConfig(nodes=4)).launch(run, train_config)

- ``LocalLauncher``: torchrun as a subprocess here; the default.
- ``SlurmLauncher``: infra/slurm/train.sbatch rendered and submitted with ``sbatch --wait --parsable``.
- ``KubernetesLauncher``: infra/k8s/train-job.yaml rendered, ``kubectl apply``-ed and ``kubectl wait``-ed.

Every launcher checks the dataset and saves the run's config before any rank starts; RCCL/NCCL
variables come from infra/rccl/<profile>.env (``rccl_profiles`` of each kind).
"""

from pydantic import TypeAdapter

from training.launchers.base import Launcher, LaunchError, infra_dir, profile_env, read_env_file
from training.launchers.config import (KubernetesLauncherConfig, LauncherConfig, LocalLauncherConfig, RanksConfig,
                                       SlurmLauncherConfig)
from training.launchers.kubernetes import KubernetesLauncher
from training.launchers.local import LocalLauncher
from training.launchers.output import RankOutput
from training.launchers.slurm import SlurmLauncher

__all__ = ["Launcher", "LaunchError", "RankOutput", "LocalLauncher", "SlurmLauncher", "KubernetesLauncher", "LauncherConfig",
           "RanksConfig", "LocalLauncherConfig", "SlurmLauncherConfig", "KubernetesLauncherConfig", "build_launcher",
           "launcher_config", "infra_dir", "profile_env", "read_env_file"]

_LAUNCHERS = {cls.kind: cls for cls in (LocalLauncher, SlurmLauncher, KubernetesLauncher)}


def launcher_config(data=None) -> LocalLauncherConfig | SlurmLauncherConfig | KubernetesLauncherConfig:
    """The launcher config a dict (as a flow parameter arrives; ``kind`` picks the launcher) describes."""
    return TypeAdapter(LauncherConfig).validate_python(data or {"kind": "local"})


def build_launcher(cfg=None) -> Launcher:
    """The launcher that settings (or their dict form) describe; None: local torchrun."""
    settings = launcher_config(cfg) if cfg is None or isinstance(cfg, dict) else cfg
    return _LAUNCHERS[settings.kind](settings)
