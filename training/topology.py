"""Hardware profiles and the TorchRec planner ``Topology`` built from them.

A profile describes ONE device (GPU, or a CPU rank) and its share of the host: HBM per GPU,
host DRAM per rank, memory and link bandwidths, GPUs per node. TorchRec's defaults (32 GB of
HBM, local world size = world size) are wrong for every machine below, so the planner always
gets its numbers from here. Sizes are bytes and bandwidths bytes/s; a user YAML may write them
as ``192 GiB`` / ``5.3 TB/s`` and may start from a built-in profile with ``base: mi300x``.

``auto`` (the default) is resolved on each rank from the device it really has (``resolve_profile``):
``cpu`` on a CPU, the built-in profile a GPU's name matches, else a profile made from the GPU's own
properties (its memory; bandwidths from ``ARCH_BANDWIDTHS`` by architecture, conservative when unknown).
"""

from __future__ import annotations

import os
import re
from typing import Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from torchrec.distributed.planner.types import HardwareConfig, KernelConfig, Topology, TopologyFactory, TrainerConfig

from common.config import load_yaml
from common.errors import UserError
from common.store import read_text

GiB = 1024**3
GB_S = 1e9  # bandwidths in decimal units, as vendors quote them

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_QUANTITY = re.compile(r"^\s*([0-9.]+(?:e[+-]?\d+)?)\s*([a-z]*)\s*(?:/\s*s)?\s*$", re.I)


def parse_quantity(value: float | int | str) -> float:
    """``'192 GiB'`` -> bytes, ``'5.3 TB/s'`` -> bytes/s; plain numbers pass through."""
    if not isinstance(value, str):
        return value
    m = _QUANTITY.match(value)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"'{value}' is not a size or bandwidth such as '192 GiB' or '5.3 TB/s'")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def host_memory() -> int:
    """Physical RAM of this machine in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class HardwareProfile(BaseModel):
    """One device's capacities and bandwidths. ``None`` capacities on cpu mean: this machine's RAM share."""

    model_config = ConfigDict(extra="forbid")

    name: str
    compute_device: Literal["cpu", "cuda"] = Field(description="'cuda' also means ROCm (HIP presents as cuda).")
    hbm_cap: int | None = Field(description="Device memory per GPU, bytes (cpu: RAM per rank).")
    ddr_cap: int | None = Field(description="Host DRAM per rank, bytes.")
    hbm_mem_bw: float = Field(description="Device memory bandwidth, bytes/s.")
    ddr_mem_bw: float = Field(description="Host DRAM bandwidth available to one rank, bytes/s.")
    hbm_to_ddr_mem_bw: float = Field(description="Device <-> host link (PCIe), bytes/s.")
    intra_host_bw: float = Field(description="GPU-to-GPU bandwidth inside a node (xGMI, NVLink), bytes/s.")
    inter_host_bw: float = Field(description="Network bandwidth per GPU between nodes, bytes/s.")
    local_world_size: int | None = Field(None, ge=1, description="Devices per node (cpu: None = all ranks on one host).")

    @field_validator("hbm_cap", "ddr_cap", "hbm_mem_bw", "ddr_mem_bw", "hbm_to_ddr_mem_bw", "intra_host_bw",
                     "inter_host_bw", mode="before")
    @classmethod
    def _quantity(cls, v):
        return None if v is None else parse_quantity(v)


def _gpu(name: str, hbm_gib: float, hbm_tb_s: float, intra_gb_s: float, **overrides) -> HardwareProfile:
    # 8 GPUs per node, a 2 TiB host shared by 8 ranks, PCIe 5 x16 to the host, one 400 Gb/s NIC per GPU
    fields = dict(name=name, compute_device="cuda", hbm_cap=int(hbm_gib * GiB), ddr_cap=256 * GiB,
                  hbm_mem_bw=hbm_tb_s * 1e12, ddr_mem_bw=370 * GB_S, hbm_to_ddr_mem_bw=64 * GB_S,
                  intra_host_bw=intra_gb_s * GB_S, inter_host_bw=50 * GB_S, local_world_size=8)
    return HardwareProfile(**{**fields, **overrides})


PROFILES: dict[str, HardwareProfile] = {
    # this machine: embeddings live in RAM; gloo over shared memory within the host
    "cpu": HardwareProfile(name="cpu", compute_device="cpu", hbm_cap=None, ddr_cap=None, hbm_mem_bw=50 * GB_S,
                           ddr_mem_bw=50 * GB_S, hbm_to_ddr_mem_bw=50 * GB_S, intra_host_bw=10 * GB_S,
                           inter_host_bw=1.25 * GB_S),
    # AMD numbers from AMD-AGI/DLRMBenchmark's dlrm_main.py (ddr bw: 80% of EPYC 9654; xGMI: 80% of 7 x 64 GB/s)
    "mi300x": _gpu("mi300x", 192, 5.3, 336, hbm_to_ddr_mem_bw=128 * GB_S),
    "mi325x": _gpu("mi325x", 256, 6.0, 336, hbm_to_ddr_mem_bw=128 * GB_S),
    "mi355x": _gpu("mi355x", 288, 8.0, 427, hbm_to_ddr_mem_bw=128 * GB_S),
    # NVIDIA public specs: SXM parts, NVLink 4 at 900 GB/s both directions = 450 GB/s each way
    "h100": _gpu("h100", 80, 3.35, 450),
    "h200": _gpu("h200", 141, 4.8, 450),
}


AUTO = "auto"  # sharding.profile resolved from the device a rank runs on


class GpuBandwidths(NamedTuple):
    """What a GPU architecture moves per second: its memory and, inside a node, to its peers (one way)."""

    hbm_tb_s: float
    intra_gb_s: float


# By architecture: NVIDIA compute capability "major.minor", AMD gcnArchName's "gfxNNN". The low end of each
# family's public figures (an A100 40GB, an L4), so that a plan made from them does not promise too much.
ARCH_BANDWIDTHS: dict[str, GpuBandwidths] = {
    "8.0": GpuBandwidths(1.55, 300),    # A100: NVLink 3
    "8.6": GpuBandwidths(0.6, 32),      # A10, A40, RTX 30: PCIe 4
    "8.9": GpuBandwidths(0.3, 32),      # L4, L40S, RTX 40: PCIe 4
    "9.0": GpuBandwidths(2.0, 64),      # H100 PCIe, GH200 (SXM parts match the h100/h200 profiles by name)
    "10.0": GpuBandwidths(8.0, 900),    # B200, GB200: NVLink 5
    "12.0": GpuBandwidths(0.9, 64),     # RTX 50, RTX PRO 6000: PCIe 5
    "gfx90a": GpuBandwidths(1.6, 100),  # MI210, MI250X: xGMI 3
    "gfx942": GpuBandwidths(5.3, 336),  # MI300X, MI325X
    "gfx950": GpuBandwidths(8.0, 427),  # MI350X, MI355X
    "gfx1100": GpuBandwidths(0.8, 32),  # Radeon PRO W7900, RX 7900: PCIe 4
}
UNKNOWN_GPU = GpuBandwidths(0.5, 16)    # an architecture not above: assume little

# A GPU's name (torch.cuda.get_device_name) -> built-in profile; the first match wins. PCIe cards of the same
# chip (no NVLink, slower memory) are not the SXM parts these profiles describe: they are made from properties.
_NAMED_GPUS = [(re.compile(pattern, re.I), name) for pattern, name in [
    (r"MI355X", "mi355x"), (r"MI325X", "mi325x"), (r"MI300X", "mi300x"),
    (r"H200(?!.*PCIe)", "h200"), (r"H100(?!.*(PCIe|NVL))", "h100")]]
# ROCm may name a card generically ("AMD Radeon Graphics"); its architecture still tells the Instinct part
_NAMED_ARCHS = {"gfx950": "mi355x", "gfx942": "mi300x"}


class GpuFacts(NamedTuple):
    """What torch says of one GPU: enough to pick or build its profile."""

    name: str
    arch: str            # "9.0" (NVIDIA compute capability) or "gfx942" (AMD, from gcnArchName)
    total_memory: int    # bytes
    vendor: str          # "nvidia" or "amd"


def gpu_facts(index: int) -> GpuFacts:
    """The facts of GPU ``index`` of this process (ROCm builds answer through ``torch.cuda`` too)."""
    props = torch.cuda.get_device_properties(index)
    name = torch.cuda.get_device_name(index)
    if torch.version.hip:
        arch = (getattr(props, "gcnArchName", "") or "").split(":")[0]
        return GpuFacts(name, arch, int(props.total_memory), "amd")
    return GpuFacts(name, f"{props.major}.{props.minor}", int(props.total_memory), "nvidia")


def gpu_profile(facts: GpuFacts) -> tuple[HardwareProfile, str]:
    """The profile for a GPU, and why: the built-in one its name (or AMD architecture) matches, with the
    device's own memory where it differs (a MIG slice, a 94 GB part); else one made from its properties."""
    named = next((name for pattern, name in _NAMED_GPUS if pattern.search(facts.name)), None)
    if named is None and facts.vendor == "amd" and facts.arch in _NAMED_ARCHS:
        named = _NAMED_ARCHS[facts.arch]
        if named == "mi300x" and facts.total_memory > 200 * GiB:  # gfx942 with 256 GiB is an MI325X
            named = "mi325x"
    memory = f"{facts.total_memory / GiB:.0f} GiB"
    if named is not None:
        profile = PROFILES[named].model_copy()
        why = f"auto: {facts.name} -> {named}"
        if abs(facts.total_memory - profile.hbm_cap) > 0.05 * profile.hbm_cap:
            profile.hbm_cap = facts.total_memory
            why += f" with the device's {memory}"
        return profile, why
    bandwidths = ARCH_BANDWIDTHS.get(facts.arch)
    known = bandwidths is not None
    bandwidths = bandwidths or UNKNOWN_GPU
    name = re.sub(r"[^a-z0-9]+", "-", facts.name.lower()).strip("-") or "gpu"
    profile = HardwareProfile(name=name, compute_device="cuda", hbm_cap=facts.total_memory, ddr_cap=None,
                              hbm_mem_bw=bandwidths.hbm_tb_s * 1e12, ddr_mem_bw=100 * GB_S,
                              hbm_to_ddr_mem_bw=32 * GB_S, intra_host_bw=bandwidths.intra_gb_s * GB_S,
                              inter_host_bw=12.5 * GB_S)
    source = f"the bandwidths of architecture {facts.arch}" if known else \
        f"conservative bandwidths (architecture {facts.arch or '?'} is not in training.topology.ARCH_BANDWIDTHS)"
    return profile, (f"auto: {facts.name} -> {name}, made from its properties ({memory}, {source}; "
                     "no built-in profile matches it: name one or a profile YAML for better plans)")


def resolve_profile(name_or_yaml_path: str, device: torch.device | str | None = None) -> tuple[HardwareProfile, str]:
    """The hardware profile a run plans with, and why ("auto: NVIDIA H100 80GB HBM3 -> h100"; the plan's
    first line says it).

    ``auto`` needs ``device``, the device this rank uses: ``cpu`` there, else the GPU's profile
    (``gpu_profile``). A named profile or YAML is loaded as given and must be for ``device``'s type when
    one is given. ``device=None`` is planning without hardware (``dlrmflow plan``)."""
    device = None if device is None else torch.device(device)
    if name_or_yaml_path == AUTO:
        if device is None:
            raise UserError("sharding.profile 'auto' is resolved on the device each rank runs on, and planning "
                            "without training has none. Fix: name the hardware, e.g. --sharding.profile "
                            f"{'|'.join(PROFILES)} or a profile YAML.")
        if device.type == "cpu":
            return PROFILES["cpu"].model_copy(), "auto: cpu -> cpu"
        return gpu_profile(gpu_facts(device.index or 0))
    profile = load_profile(name_or_yaml_path)
    if device is not None and profile.compute_device != device.type:
        hint = "auto or cpu" if device.type == "cpu" else \
            f"auto (here {gpu_profile(gpu_facts(device.index or 0))[1]})"
        raise UserError(f"hardware profile '{profile.name}' is for {profile.compute_device} devices but this run "
                        f"uses {device.type}. Fix: set sharding.profile to {hint}.")
    return profile, f"{profile.name} (sharding.profile)"


def profile_to_load_on(name_or_yaml_path: str, device: torch.device | str) -> str:
    """The profile a saved run plans with when it is loaded on ``device`` to evaluate, score or export: its own
    when that is for ``device``'s type (or ``auto``), else ``auto`` (trained on GPUs, evaluated on a CPU machine,
    or the reverse: DCP reshards the checkpoint to the plan of the device at hand)."""
    if name_or_yaml_path == AUTO or load_profile(name_or_yaml_path).compute_device == torch.device(device).type:
        return name_or_yaml_path
    return AUTO


def load_profile(name_or_yaml_path: str) -> HardwareProfile:
    """A built-in profile by name, or a YAML file (local or fsspec URI) of HardwareProfile fields.

    The YAML may name a built-in profile as ``base:`` and override only some fields.
    """
    if name_or_yaml_path in PROFILES:
        return PROFILES[name_or_yaml_path].model_copy()
    if not name_or_yaml_path.endswith((".yaml", ".yml")):
        raise UserError(f"unknown hardware profile '{name_or_yaml_path}'. Fix: use {AUTO} (the device's own), "
                        f"one of {', '.join(PROFILES)}, or the path of a profile YAML.")
    try:
        data = load_yaml(read_text(name_or_yaml_path), name_or_yaml_path) or {}
    except FileNotFoundError:
        raise UserError(f"{name_or_yaml_path}: hardware profile YAML does not exist.") from None
    base = data.pop("base", None)
    if base is not None:
        if base not in PROFILES:
            raise UserError(f"{name_or_yaml_path}: base '{base}' is not a built-in profile "
                            f"({', '.join(PROFILES)}).")
        data = {**PROFILES[base].model_dump(exclude={"name"}), **data}
    data.setdefault("name", os.path.splitext(os.path.basename(name_or_yaml_path))[0])
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise UserError(f"{name_or_yaml_path}: {'.'.join(map(str, err['loc']))}: {err['msg']}. Fix: see the "
                        "fields of training.topology.HardwareProfile (sizes like '192 GiB', bandwidths like "
                        "'5.3 TB/s').") from None


def resolve_local_world_size(profile: HardwareProfile, world_size: int, local_world_size: int | None = None) -> int:
    """Ranks per node: the argument, else the profile's, else all ranks on one host; never above world_size."""
    local = min(local_world_size or profile.local_world_size or world_size, world_size)
    if world_size % local:
        raise UserError(f"world size {world_size} is not a multiple of {local} ranks per node "
                        f"(profile '{profile.name}'). Fix: use whole nodes, or pass the real ranks per node.")
    return local


def build_topology(profile: HardwareProfile, world_size: int, local_world_size: int | None = None,
                   batch_size: int | None = None) -> Topology:
    """TorchRec Topology for ``world_size`` ranks of ``profile`` (batch_size is taken by the planner, not here)."""
    local = resolve_local_world_size(profile, world_size, local_world_size)
    ram_share = host_memory() // local
    hbm = profile.hbm_cap if profile.hbm_cap is not None else ram_share
    ddr = profile.ddr_cap if profile.ddr_cap is not None else ram_share
    per_ms = 1e-3  # TorchRec's bandwidths are bytes per millisecond
    hardware = HardwareConfig(hbm_cap_bytes=hbm, ddr_cap_bytes=ddr, hbm_mem_bw=profile.hbm_mem_bw * per_ms,
                              ddr_mem_bw=profile.ddr_mem_bw * per_ms,
                              hbm_to_ddr_mem_bw=profile.hbm_to_ddr_mem_bw * per_ms,
                              intra_host_bw=profile.intra_host_bw * per_ms,
                              inter_host_bw=profile.inter_host_bw * per_ms)
    return TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=world_size, local_world_size=local),
        hardware_config=hardware,
        kernel_config=KernelConfig(compute_device=profile.compute_device, use_hardware_based_bandwidth=True),
    )
