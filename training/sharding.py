"""Embedding sharding: the sharder, the planner and a readable plan (the config section: training.config).

The planner gets its ``Topology`` from a hardware profile (``training.topology``), so a plan for
64 MI300X can be made on a laptop: planning needs only meta tensors and the topology. A run resolves
its profile (``auto``: from the device) with ``topology.resolve_profile`` and hands it to ``plan_tables``.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward
from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
from torchrec.distributed.planner.types import PlannerError, Topology
from torchrec.distributed.types import ModuleSharder, ShardingPlan
from torchrec.modules.embedding_configs import DATA_TYPE_NUM_BITS, EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim import RowWiseAdagrad

from common.errors import UserError
from training.config import SHARDING_TYPES, ShardingConfig
from training.rundir import RunDir

from .topology import GiB, HardwareProfile, build_topology, resolve_local_world_size, resolve_profile

UVM_CACHING_RATIO = 0.2  # share of a fused_uvm_caching table kept in HBM (TorchRec's default)
# embedding optimizer -> (torch optimizer class, optimizer-state floats per weight; None: one per row)
OPTIMIZERS = {"rowwise_adagrad": (RowWiseAdagrad, None), "adam": (torch.optim.Adam, 2.0), "sgd": (torch.optim.SGD, 0.0)}


class DoesNotFit(UserError):
    """The tables do not fit in the memory of the given ranks."""


class AllTypesSharder(EmbeddingBagCollectionSharder):
    """EmbeddingBagCollection sharder offering every sharding type on every device.

    TorchRec's CPU sharder refuses row_wise, table_row_wise and grid_shard; on gloo they work and
    match the unsharded module exactly (unsupported upstream, verified by tests/test_sharding.py).
    """

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return list(SHARDING_TYPES)


def sharders() -> list[ModuleSharder]:
    """The sharders to give the planner and DistributedModelParallel."""
    return [AllTypesSharder()]


def make_planner(cfg: ShardingConfig, profile: HardwareProfile, world_size: int, local_world_size: int,
                 batch_size: int, pooling_factors: dict[str, float] | None = None) -> EmbeddingShardingPlanner:
    """A planner for ``world_size`` ranks of ``profile`` with the config's constraints and reservation;
    ``pooling_factors``: table name -> mean ids a row looks up (multi-valued features; others default to 1)."""
    topology = build_topology(profile, world_size, local_world_size)
    constraints = {name: ParameterConstraints(sharding_types=c.sharding_types, compute_kernels=c.compute_kernels)
                   for name, c in cfg.constraints.items()}
    for name, factor in (pooling_factors or {}).items():
        constraints.setdefault(name, ParameterConstraints()).pooling_factors = [float(factor)]
    return EmbeddingShardingPlanner(topology=topology, batch_size=batch_size, constraints=constraints,
                                    storage_reservation=FixedPercentageStorageReservation(cfg.storage_reservation),
                                    debug=False)


def plan_tables(tables: list[EmbeddingBagConfig], cfg: ShardingConfig, world_size: int, local_world_size: int,
                batch_size: int, pg: dist.ProcessGroup | None = None, *, optimizer: str = "rowwise_adagrad",
                module_path: str = "", profile: HardwareProfile | None = None,
                pooling_factors: dict[str, float] | None = None) -> ShardingPlan:
    """Plan an EmbeddingBagCollection of ``tables`` (per-rank ``batch_size``) on meta tensors.

    With ``pg``, rank 0 plans and broadcasts the plan, or its error (raised on every rank, so no
    rank hangs). Without, the plan is made locally: no process group or hardware needed. The plan
    is keyed by ``module_path``, the EmbeddingBagCollection's path inside the model given to DMP.
    ``profile``: the resolved hardware profile (``topology.resolve_profile``; default: ``cfg.profile``
    planned without a device, so not ``auto``). ``pooling_factors``: table name -> mean ids per row
    (``SplitBinaryDataset.pooling_factors``), what the planner costs lookups by.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown embedding optimizer '{optimizer}'; use one of {', '.join(OPTIMIZERS)}")
    unknown = set(cfg.constraints) - {t.name for t in tables}
    if unknown:
        raise UserError(f"sharding.constraints names unknown tables {sorted(unknown)}. Fix: use table names: "
                        f"{', '.join(t.name for t in tables)}.")
    profile = profile or resolve_profile(cfg.profile)[0]
    local = resolve_local_world_size(profile, world_size, local_world_size)
    if pg is None:
        plan = _plan(tables, cfg, profile, world_size, local, batch_size, optimizer, pooling_factors)
    else:
        box: list = [None]
        if dist.get_rank(pg) == 0:
            try:
                box[0] = _plan(tables, cfg, profile, world_size, local, batch_size, optimizer, pooling_factors)
            except UserError as e:
                box[0] = e
            except Exception as e:  # noqa: BLE001 - every rank must learn that rank 0 failed
                box[0] = RuntimeError(f"sharding planner failed on rank 0: {type(e).__name__}: {e}")
        dist.broadcast_object_list(box, group=pg, group_src=0)
        if isinstance(box[0], Exception):
            raise box[0]
        plan = box[0]
    return ShardingPlan({module_path: module_plan for module_plan in plan.plan.values()})


def _plan(tables, cfg, profile, world_size, local_world_size, batch_size, optimizer,
          pooling_factors=None) -> ShardingPlan:
    planner = make_planner(cfg, profile, world_size, local_world_size, batch_size, pooling_factors)
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("meta"))
    apply_optimizer_in_backward(OPTIMIZERS[optimizer][0], ebc.parameters(), {"lr": 0.01})
    try:
        return planner.plan(ebc, sharders())
    except PlannerError as e:
        topology = build_topology(profile, world_size, local_world_size)
        raise does_not_fit(tables, cfg, profile, topology, optimizer, str(e)) from None


def table_bytes(table: EmbeddingBagConfig, rows: int, cols: int, optimizer: str = "rowwise_adagrad") -> int:
    """Bytes of ``rows x cols`` of a table's weights plus its optimizer state (fp32)."""
    weights = rows * cols * DATA_TYPE_NUM_BITS[table.data_type] // 8
    per_weight = OPTIMIZERS[optimizer][1]
    state = rows * 4 if per_weight is None else int(rows * cols * 4 * per_weight)
    return weights + state


def does_not_fit(tables, cfg: ShardingConfig, profile: HardwareProfile, topology: Topology, optimizer: str,
                 detail: str) -> DoesNotFit:
    """The error for a plan that found no placement: how much is needed, how much there is, what to change."""
    tier = "HBM" if topology.compute_device == "cuda" else "DDR"
    per_rank = (topology.devices[0].storage.hbm if tier == "HBM" else topology.devices[0].storage.ddr)
    usable = per_rank * (1 - cfg.storage_reservation)
    total = sum(table_bytes(t, t.num_embeddings, t.embedding_dim, optimizer) for t in tables)
    need_ranks = math.ceil(total / usable) if usable else "more"
    return DoesNotFit(
        f"does not fit: the embedding tables need {total / GiB:.1f} GiB ({optimizer} state included), i.e. "
        f"{total / topology.world_size / GiB:.1f} GiB {tier} per rank on {topology.world_size} ranks, but profile "
        f"'{profile.name}' has {per_rank / GiB:.1f} GiB per rank ({usable / GiB:.1f} GiB after the "
        f"{cfg.storage_reservation:.0%} reservation). Fix: use more ranks (at least {need_ranks}), a bigger "
        "frequency threshold or hash_buckets when preprocessing, arch.max_table_size, or fp16 embeddings.\n"
        f"TorchRec planner: {detail.strip().splitlines()[0]}")


def rank_usage(plan: ShardingPlan, tables: list[EmbeddingBagConfig], topology: Topology,
               optimizer: str = "rowwise_adagrad") -> list[dict[str, int]]:
    """Bytes of embedding weights and optimizer state per rank and tier ('hbm', 'ddr') under ``plan``."""
    usage = [{"hbm": 0, "ddr": 0} for _ in range(topology.world_size)]
    by_name = {t.name: t for t in tables}
    fast = "hbm" if topology.compute_device == "cuda" else "ddr"
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():
            table = by_name[name]
            if ps.sharding_spec is None:  # data parallel: every rank holds the whole table
                shards = [(r, table.num_embeddings, table.embedding_dim) for r in ps.ranks]
            else:
                shards = [(s.placement.rank(), *s.shard_sizes) for s in ps.sharding_spec.shards]
            for rank, rows, cols in shards:
                size = table_bytes(table, rows, cols, optimizer)
                if ps.compute_kernel in ("fused_uvm", "fused_uvm_caching"):
                    usage[rank]["ddr"] += size
                    if ps.compute_kernel == "fused_uvm_caching":
                        usage[rank]["hbm"] += int(size * UVM_CACHING_RATIO)
                else:
                    usage[rank][fast] += size
    return usage


def _ranks(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))



def format_plan(plan: ShardingPlan, tables: list[EmbeddingBagConfig], topology: Topology,
                optimizer: str = "rowwise_adagrad", pooling_factors: dict[str, float] | None = None,
                profile_why: str = "") -> str:
    """The plan as text: its first line the ranks, the device and the profile and why (``profile_why``, from
    ``topology.resolve_profile``); per table its sharding, kernel and ranks (and the pooling factors the planner
    was given); per rank its memory vs capacity; whether it fits."""
    nodes = topology.world_size // topology.local_world_size
    lines = [f"{RunDir.PLAN_HEADER} {topology.world_size} ranks ({nodes} node(s) x {topology.local_world_size}), "
             f"device {topology.compute_device}" + (f"; profile {profile_why}" if profile_why else ""),
             f"{'table':<24} {'rows':>14} {'dim':>5}  {'sharding':<17} {'kernel':<18} ranks"]
    by_name = {t.name: t for t in tables}
    for module_plan in plan.plan.values():
        for name, ps in module_plan.items():
            t = by_name[name]
            lines.append(f"{name:<24} {t.num_embeddings:>14,} {t.embedding_dim:>5}  {ps.sharding_type:<17} "
                         f"{ps.compute_kernel:<18} {_ranks(ps.ranks or [])}")
    if pooling_factors:
        lines.append("Pooling factors (mean ids per row, what the planner costs lookups by; others 1): " +
                     ", ".join(f"{name} {v:.2f}" for name, v in pooling_factors.items()))
    usage = rank_usage(plan, tables, topology, optimizer)
    lines += ["", f"Memory per rank (embedding weights + {optimizer} state, GiB; equal ranks grouped):",
              f"{'ranks':>7}  {'HBM used / capacity':>21}  {'DDR used / capacity':>21}"]
    worst, rows = 0.0, []
    for rank, (used, device) in enumerate(zip(usage, topology.devices)):
        cells = []
        for tier in ("hbm", "ddr"):
            cap = getattr(device.storage, tier)
            if used[tier]:
                worst = max(worst, used[tier] / cap if cap else math.inf)
            cells.append(f"{used[tier] / GiB:9.2f} / {cap / GiB:9.2f}" if cap or used[tier] else "-")
        if rows and rows[-1][2] == cells:
            rows[-1][1] = rank
        else:
            rows.append([rank, rank, cells])
    for first, last, (hbm, ddr) in rows:
        lines.append(f"{_ranks(list(range(first, last + 1))):>7}  {hbm:>21}  {ddr:>21}")
    offloaded = [name for mp in plan.plan.values() for name, ps in mp.items() if "uvm" in ps.compute_kernel]
    if offloaded:
        lines.append(f"{len(offloaded)} table(s) live in host memory (fused_uvm*): their lookups cross PCIe, "
                     "so expect lower throughput than with all tables in HBM (more ranks would avoid it).")
    fits, does_not = RunDir.PLAN_VERDICTS
    lines.append(f"{fits if worst <= 1 else does_not} the fullest rank uses {worst:.0%} of its memory for embeddings "
                 "(the rest holds the dense model, activations and buffers).")
    return "\n".join(lines)
