"""The GPUs of a cluster job's nodes and the RCCL/NCCL environment profile that fits them.

A Slurm or Kubernetes job exports an environment profile (``infra/rccl/<name>.env``) on every node: the launcher's
``rccl_profiles`` when set, else the default of the nodes' GPU vendor (``VENDOR_PROFILES``: AMD -> ``amd-mi3xx``;
NVIDIA and CPU nodes -> none, NCCL's own choices: the AMD profile's NICs and ``HSA_*`` settings would steer NCCL away
from an NVIDIA cluster's InfiniBand devices). The vendor is the launcher's ``gpu_vendor`` when set; with ``auto``,
what the job says about its GPUs (``Hint``s): its hardware profile (``sharding.profile``: mi300x/mi325x/mi355x ->
AMD, h100/h200 -> NVIDIA; a profile YAML by its ``base:``), the GPU resource a Kubernetes pod requests
(``amd.com/gpu``, ``nvidia.com/gpu``), no GPUs (``gpus_per_node`` 0: none). Hints that disagree are a LaunchError
(the job could not work). When nothing tells (``sharding.profile`` ``auto`` or ``cpu`` on Slurm), the choice is made
on the node when the job starts (``EnvChoice.on_node``): the AMD profile where the node has AMD GPUs (``/dev/kfd``,
the ROCm kernel driver's device), else none; the rendered script says so and the job's log which it applied.
"""

from __future__ import annotations

import shlex
import unicodedata
from dataclasses import dataclass

import yaml

from common.config import load_yaml
from common.store import read_text
from training.launchers.base import LaunchError, profile_env
from training.rundir import RunDir

VENDOR_NAMES = {"amd": "AMD GPUs", "nvidia": "NVIDIA GPUs", "none": "no GPUs"}
VENDOR_PROFILES: dict[str, tuple[str, ...]] = {"amd": ("amd-mi3xx",), "nvidia": (), "none": ()}
"""The environment profiles a job's nodes get by default, by their GPUs' vendor."""
PROFILE_VENDORS = {"mi300x": "amd", "mi325x": "amd", "mi355x": "amd", "h100": "nvidia", "h200": "nvidia"}
"""The GPU vendor of each built-in hardware profile (training.topology.PROFILES) made for one vendor's GPUs; ``cpu``
and ``auto`` (resolved on each rank from its device) say nothing about the nodes' GPUs."""
RESOURCE_VENDORS = {"amd.com/gpu": "amd", "nvidia.com/gpu": "nvidia"}
"""The vendors' Kubernetes device plugins' extended resources."""
AMD_DEVICE = "/dev/kfd"   # the ROCm kernel driver's device: present on every node (and in every pod) with AMD GPUs


@dataclass(frozen=True)
class Hint:
    """What one of the job's settings says about its nodes' GPUs: ``vendor`` (amd, nvidia, none), ``source``."""

    vendor: str
    source: str


def job_hardware(run: RunDir) -> str | None:
    """The hardware profile (``sharding.profile``) of a run's config, which every job of the run (training,
    evaluation, scoring) has in the run folder before it starts; None where it cannot be read (the ranks read it
    themselves and say what is wrong with it). Read as YAML: ``training.config`` would import TorchRec."""
    try:
        data = load_yaml(run.read_text(RunDir.CONFIG), run.join(RunDir.CONFIG))
        profile = data["sharding"]["profile"]
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return None
    return profile if isinstance(profile, str) else None


def hardware_hint(profile: str | None) -> Hint | None:
    """What a job's hardware profile (``sharding.profile``: a built-in name or a profile YAML, whose ``base:`` names
    a built-in one) says about its GPUs; None for ``cpu``, ``auto``, a YAML without a GPU base or one that cannot be
    read here (the ranks read it themselves and say what is wrong with it)."""
    if not profile:
        return None
    if profile in PROFILE_VENDORS:
        return Hint(PROFILE_VENDORS[profile], f"sharding.profile {profile}")
    if not profile.endswith((".yaml", ".yml")):
        return None
    try:
        base = (load_yaml(read_text(profile), profile) or {}).get("base")
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return None
    if base in PROFILE_VENDORS:
        return Hint(PROFILE_VENDORS[base], f"sharding.profile {profile}, base {base}")
    return None


@dataclass(frozen=True)
class EnvChoice:
    """The environment profiles of a job's nodes and why: ``profiles``, exported on every node; or, when the vendor
    is not known before the job starts (``on_node``), those profiles where the node has AMD GPUs, else none."""

    profiles: tuple[str, ...]
    reason: str
    on_node: bool = False

    @property
    def name(self) -> str:
        """The profiles as the rendered script and the job's log say them: ``amd-mi3xx``, ``none``."""
        return ", ".join(self.profiles) or "none"

    def summary(self) -> str:
        """One line: which profile and why."""
        if self.on_node:
            return (f"{self.name} where the node has AMD GPUs ({AMD_DEVICE}), else none: chosen on the node when the "
                    f"job starts ({self.reason})")
        return f"{self.name} ({self.reason})"

    def shell(self, node_env: dict[str, str]) -> list[str]:
        """Shell lines that say in the job's log which profile applies and, for a choice on the node, export
        ``node_env`` (the profiles' variables) where the node has AMD GPUs."""
        if not self.on_node:
            return [f"echo {shlex.quote(f'dlrmflow: environment profile {self.name} ({self.reason})')}"]
        on, off = (f"dlrmflow: environment profile {self.name}: AMD GPUs on ",
                   "dlrmflow: environment profile none: no AMD GPU on ")
        return [f"if [ -e {AMD_DEVICE} ]; then",
                f'  echo {shlex.quote(on)}"$HOSTNAME"{shlex.quote(f" ({AMD_DEVICE})")}',
                *(f"  export {k}={shlex.quote(v)}" for k, v in node_env.items()),
                "else",
                f'  echo {shlex.quote(off)}"$HOSTNAME"{shlex.quote(f" (no {AMD_DEVICE}): NCCL/RCCL defaults")}',
                "fi"]


def environments(choice: EnvChoice, *envs: dict[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    """(the environment of every node: the profiles chosen when the job is rendered, then ``envs`` in turn; the
    variables of a choice on the node, exported only where it has AMD GPUs, less those ``envs`` set)."""
    chosen = profile_env(() if choice.on_node else choice.profiles)
    fixed = {**chosen, **{k: v for e in envs for k, v in (e or {}).items()}}
    on_node = profile_env(choice.profiles if choice.on_node else ())
    return fixed, {k: v for k, v in on_node.items() if k not in fixed}


def choose_env(settings, hints: list[Hint], hardware: str | None = None) -> EnvChoice:
    """The environment profiles of a cluster job (settings: a ``_ClusterLauncherConfig``) whose settings say
    ``hints`` about its GPUs (its hardware profile's, ``hardware_hint``; the launcher's own: a Kubernetes GPU
    resource, no GPUs per node). ``hardware``: the job's ``sharding.profile`` (None: not known here), named when it
    says nothing."""
    if settings.rccl_profiles is not None:
        return EnvChoice(tuple(settings.rccl_profiles), "launcher.rccl_profiles")
    vendor = gpu_vendor(settings, hints)
    if vendor is None:
        profile = f"sharding.profile {hardware}" if hardware else "the job's sharding.profile not known here"
        return EnvChoice(VENDOR_PROFILES["amd"], f"launcher.gpu_vendor auto, {profile}", on_node=True)
    source = "launcher.gpu_vendor" if settings.gpu_vendor != "auto" else \
        "; ".join(h.source for h in hints if h.vendor == vendor)
    return EnvChoice(VENDOR_PROFILES[vendor], f"{VENDOR_NAMES[vendor]}: {source}")


def gpu_vendor(settings, hints: list[Hint]) -> str | None:
    """The vendor of the job's GPUs (amd, nvidia, none): ``gpu_vendor`` when set, else what the hints agree on;
    None when none tells. Hints that disagree: LaunchError naming them."""
    if settings.gpu_vendor != "auto":
        return settings.gpu_vendor
    vendors = {h.vendor for h in hints}
    if len(vendors) > 1:
        said = "; ".join(f"{VENDOR_NAMES[h.vendor]} by {h.source}" for h in hints)
        raise LaunchError(f"the job's settings disagree about its nodes' GPUs: {said}. Fix: make them agree (the "
                          "hardware profile sharding.profile, launcher.gpu_resource, launcher.gpus_per_node), or "
                          "set launcher.gpu_vendor (amd, nvidia, none).")
    return vendors.pop() if vendors else None


def comment(text: str) -> str:
    """``text`` on one line, for a comment of the rendered script (a control character would end the comment)."""
    return "".join("?" if unicodedata.category(c) == "Cc" else c for c in text)
