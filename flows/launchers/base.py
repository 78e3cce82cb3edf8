"""The Launcher interface, the local launcher, and what all launchers share: the infra/ folder,
RCCL/NCCL environment profiles (infra/rccl/<name>.env) and ``{{ name }}`` templates."""

from __future__ import annotations

import os
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable

from typing import TYPE_CHECKING

from common.errors import UserError

if TYPE_CHECKING:  # importing training.config imports torchrec (seconds): only where a launch happens
    from training.config import TrainConfig

OnLine = Callable[[str], None]
ENV_INFRA_DIR = "DLRMFLOW_INFRA_DIR"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")


class LaunchError(UserError):
    """The job could not be submitted or watched (not: training failed, which is a non-zero exit code)."""


def infra_dir() -> Path:
    """``$DLRMFLOW_INFRA_DIR``, else the repository's ``infra/`` (images copy it to /opt/dlrmflow/infra)."""
    path = Path(os.environ.get(ENV_INFRA_DIR) or Path(__file__).resolve().parents[2] / "infra")
    if not path.is_dir():
        raise UserError(f"infra folder {path} does not exist. Fix: set {ENV_INFRA_DIR} to the infra/ folder of "
                        "a dlrmflow checkout (the images set it to /opt/dlrmflow/infra).")
    return path


def profile_path(name_or_path: str) -> Path:
    """``infra/rccl/<name>.env`` for a profile name, else the given path."""
    if "/" in name_or_path or name_or_path.endswith(".env"):
        path = Path(name_or_path).expanduser()
    else:
        path = infra_dir() / "rccl" / f"{name_or_path}.env"
    if not path.is_file():
        known = sorted(p.stem for p in (infra_dir() / "rccl").glob("*.env"))
        raise UserError(f"RCCL profile '{name_or_path}' not found ({path}). Fix: use one of {', '.join(known)} "
                        "or the path of a KEY=VALUE .env file.")
    return path


def read_env_file(path: str | Path) -> dict[str, str]:
    """KEY=VALUE lines ('#' comments, blank lines) -> dict. The strict subset that bash ``set -a; .``,
    ``kubectl create configmap --from-env-file`` and ``docker --env-file`` all read the same way."""
    env: dict[str, str] = {}
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not _KEY.match(key) or re.search(r"[\s'\"$`\\]", value):
            raise UserError(f"{path}:{n}: '{raw}' is not KEY=VALUE (no spaces, quotes or $ in the value).")
        env[key] = value
    return env


def profile_env(names: list[str]) -> dict[str, str]:
    """The merged environment of the named profiles (later ones win)."""
    env: dict[str, str] = {}
    for name in names:
        env.update(read_env_file(profile_path(name)))
    return env


def render(template: str, values: dict[str, object], source: str = "template") -> str:
    """Replace every ``{{ name }}``; a placeholder without a value is an error (never left in the output)."""
    missing = sorted({m for m in _PLACEHOLDER.findall(template) if m not in values})
    if missing:
        raise LaunchError(f"{source}: no value for {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def run_id_of(run_uri: str) -> str:
    """The run folder's name (the rendezvous id and the job name come from it)."""
    return run_uri.rstrip("/").rsplit("/", 1)[-1]


class Launcher(ABC):
    """Runs ``training.worker`` on every rank of a run and waits for it.

    ``launch`` writes the resolved config to ``<run>/config.yaml`` first (the ranks read it from
    there, so the run folder must be reachable from wherever they run: s3:// or a shared file
    system), then starts the ranks, hands every output line to ``on_line`` (or prints it), and
    returns the exit code of the job (0: trained; else the failing rank's torchrun exit code).
    """

    kind: str

    @abstractmethod
    def launch(self, run_uri: str, cfg: TrainConfig, *, nproc: int | None = None, resume: bool = False,
               env: dict[str, str] | None = None, on_line: OnLine | None = None) -> int:
        """``nproc``: ranks per node for the local launcher (Slurm/Kubernetes take theirs from their
        settings); ``env``: extra environment of the ranks (e.g. PET_TEE=3 for rank prefixes)."""

    def describe(self) -> str:
        """One line for the logs: where training runs."""
        return self.kind


class LocalLauncher(Launcher):
    """torchrun as a subprocess here (``training.launch.launch``): standalone, or one node of a c10d job."""

    kind = "local"

    def __init__(self, settings=None, env: dict[str, str] | None = None):
        from flows.launchers.config import LocalSettings

        self.settings = settings or LocalSettings()
        self.env = env or {}

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        return {**profile_env(self.settings.rccl_profiles), **self.env, **(env or {})}

    def launch(self, run_uri: str, cfg: TrainConfig, *, nproc: int | None = None, resume: bool = False,
               env: dict[str, str] | None = None, on_line: OnLine | None = None) -> int:
        from training.launch import launch

        s = self.settings
        return launch(run_uri, cfg, nproc=nproc or 1, nnodes=s.nnodes, rdzv_endpoint=s.rdzv_endpoint,
                      node_rank=s.node_rank, resume=resume, env=self.environment(env), on_line=on_line)

    def describe(self) -> str:
        s = self.settings
        return "local torchrun" + (f" (node of {s.nnodes}, rendezvous {s.rdzv_endpoint})" if s.nnodes > 1 else "")
