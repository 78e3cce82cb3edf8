"""``build_launcher``: the launcher that settings describe (the one place that maps a launcher kind to its class)."""

from __future__ import annotations

from training.launchers.base import Launcher
from training.launchers.config import (KubernetesLauncherConfig, LocalLauncherConfig, SlurmLauncherConfig,
                                       launcher_config)
from training.launchers.kubernetes import KubernetesLauncher
from training.launchers.local import LocalLauncher
from training.launchers.slurm import SlurmLauncher

_LAUNCHERS = {cls.kind: cls for cls in (LocalLauncher, SlurmLauncher, KubernetesLauncher)}


def build_launcher(cfg: LocalLauncherConfig | SlurmLauncherConfig | KubernetesLauncherConfig | dict | Launcher | None
                   = None) -> Launcher:
    """The launcher that settings (or their dict form) describe; None: local torchrun, one rank; a Launcher: itself."""
    if isinstance(cfg, Launcher):
        return cfg
    settings = launcher_config(cfg) if cfg is None or isinstance(cfg, dict) else cfg
    return _LAUNCHERS[settings.kind](settings)
