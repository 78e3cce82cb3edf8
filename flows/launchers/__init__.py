"""Launchers: where the ranks of a training run start (plain Python, no Prefect import).

    from flows.launchers import LauncherConfig, build_launcher
    code = build_launcher(LauncherConfig(kind="slurm", slurm={"nodes": 4})).launch(run_uri, train_config)

- ``LocalLauncher``: torchrun as a subprocess here (``training.launch.launch``); the default.
- ``SlurmLauncher``: infra/slurm/train.sbatch rendered and submitted with ``sbatch --wait --parsable``.
- ``KubernetesLauncher``: infra/k8s/train-job.yaml rendered, ``kubectl apply``-ed and ``kubectl wait``-ed.

RCCL/NCCL variables come from infra/rccl/<profile>.env (``rccl_profiles`` of each kind).
"""

from flows.launchers.base import Launcher, LaunchError, LocalLauncher, infra_dir, profile_env, read_env_file
from flows.launchers.config import KubernetesSettings, LauncherConfig, LocalSettings, SlurmSettings
from flows.launchers.kubernetes import KubernetesLauncher
from flows.launchers.slurm import SlurmLauncher

__all__ = ["Launcher", "LaunchError", "LocalLauncher", "SlurmLauncher", "KubernetesLauncher", "LauncherConfig",
           "LocalSettings", "SlurmSettings", "KubernetesSettings", "build_launcher", "infra_dir", "profile_env",
           "read_env_file"]


def build_launcher(cfg: LauncherConfig | dict | None = None) -> Launcher:
    """The launcher a LauncherConfig (or its JSON/dict form, as a flow parameter arrives) describes."""
    cfg = LauncherConfig.model_validate(cfg or {}) if not isinstance(cfg, LauncherConfig) else cfg
    if cfg.kind == "slurm":
        return SlurmLauncher(cfg.slurm, cfg.env)
    if cfg.kind == "kubernetes":
        return KubernetesLauncher(cfg.kubernetes, cfg.env)
    return LocalLauncher(cfg.local, cfg.env)
