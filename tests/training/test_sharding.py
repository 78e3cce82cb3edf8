"""Hardware profiles, the sharding planner without hardware, `dlrmflow plan`, and a real 2-rank gloo run.

Run as a script (by torchrun, from the last test) this file is the worker of that 2-rank run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torchrec.modules.embedding_configs import EmbeddingBagConfig

from common.errors import UserError
from common.process import launch_command
from feature_spec import Chunk, Feature, FeatureSpec, save
from training.config import COMPUTE_KERNELS, SHARDING_TYPES, ShardingConfig, TableConstraint
from training.sharding import (DoesNotFit, format_plan, plan_tables, rank_usage,
                               table_bytes)
from training.topology import (ARCH_BANDWIDTHS, GiB, PROFILES, UNKNOWN_GPU, build_topology, host_memory,
                               load_profile, resolve_profile)

REPO = Path(__file__).resolve().parents[2]
# MLPerf DLRMv2 / Criteo 1TB row counts (capped at 40M): ~91 GiB of fp32 tables at dim 128
CRITEO_1TB = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
              155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]


def tables_of(cards: list[int], dim: int = 128) -> list[EmbeddingBagConfig]:
    return [EmbeddingBagConfig(name=f"t_cat_{i}", embedding_dim=dim, num_embeddings=n, feature_names=[f"cat_{i}"])
            for i, n in enumerate(cards)]


# ---- profiles and topology --------------------------------------------------------------
def test_profiles_give_the_planner_real_capacities_and_nodes():
    assert {n: p.hbm_cap / GiB for n, p in PROFILES.items() if p.hbm_cap} == {
        "mi300x": 192, "mi325x": 256, "mi355x": 288, "h100": 80, "h200": 141}
    topo = build_topology(load_profile("mi300x"), world_size=64)
    assert (topo.compute_device, topo.world_size, topo.local_world_size) == ("cuda", 64, 8)
    assert {d.storage.hbm for d in topo.devices} == {192 * GiB} and {d.storage.ddr for d in topo.devices} == {256 * GiB}
    assert topo.hbm_mem_bw == pytest.approx(5.3e9)  # TorchRec's unit is bytes per millisecond
    assert build_topology(load_profile("h100"), world_size=2).local_world_size == 2
    cpu = build_topology(load_profile("cpu"), world_size=2)
    assert (cpu.compute_device, cpu.local_world_size, cpu.devices[0].storage.ddr) == ("cpu", 2, host_memory() // 2)
    with pytest.raises(UserError, match="not a multiple of 8 ranks per node"):
        build_topology(load_profile("mi355x"), world_size=12)


def test_user_profile_yaml_extends_a_builtin_with_readable_units(tmp_path):
    path = tmp_path / "mycluster.yaml"
    path.write_text("base: mi300x\nhbm_cap: 96 GiB\ninter_host_bw: 25 GB/s\nlocal_world_size: 4\n")
    p = load_profile(str(path))
    assert (p.name, p.hbm_cap, p.inter_host_bw, p.local_world_size, p.hbm_mem_bw) == (
        "mycluster", 96 * GiB, 25e9, 4, 5.3e12)
    path.write_text("base: mi300x\nhbm_cap: lots\n")
    with pytest.raises(UserError, match="hbm_cap"):
        load_profile(str(path))
    with pytest.raises(UserError, match="unknown hardware profile 'mi400'.*mi300x"):
        load_profile("mi400")


def test_constraints_are_validated():
    with pytest.raises(ValidationError, match="unknown sharding type 'rows'"):
        TableConstraint(sharding_types=["rows"])
    with pytest.raises(ValidationError, match="unknown compute kernel"):
        ShardingConfig(constraints={"t": {"compute_kernels": ["gpu"]}})
    with pytest.raises(UserError, match=r"unknown tables \['t_nope'\]"):
        plan_tables(tables_of([10]), ShardingConfig(constraints={"t_nope": {}}), 1, 1, 8)


def test_the_configs_names_are_torchrecs():
    """training.config writes TorchRec's names out (a config is read without importing TorchRec): the same."""
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel
    from torchrec.distributed.types import ShardingType

    assert SHARDING_TYPES == [t.value for t in ShardingType]
    assert set(COMPUTE_KERNELS) <= {k.value for k in EmbeddingComputeKernel}


# ---- planning without the hardware ---------------------------------------------------------
def test_criteo_1tb_on_mi300x_8_vs_32_ranks():
    """One node and four (32 ranks, not 64: the planner's time grows with the ranks, 15 CPU-seconds at 64)."""
    tables = tables_of(CRITEO_1TB)
    total = sum(table_bytes(t, t.num_embeddings, t.embedding_dim) for t in tables)
    worst = {}
    for ws in (8, 32):
        cfg = ShardingConfig(profile="mi300x")
        plan = plan_tables(tables, cfg, ws, None, 4096)
        topo = build_topology(load_profile("mi300x"), ws)
        assert set(plan.plan[""]) == {t.name for t in tables}
        usage = rank_usage(plan, tables, topo)
        assert all(u["ddr"] == 0 for u in usage), "everything fits in HBM"
        replicated = sum(table_bytes(t, t.num_embeddings, t.embedding_dim) * (ws - 1) for t in tables
                         if plan.plan[""][t.name].sharding_type == "data_parallel")
        assert sum(u["hbm"] for u in usage) == total + replicated  # every row is placed exactly once (DP: per rank)
        worst[ws] = max(u["hbm"] for u in usage)
        text = format_plan(plan, tables, topo)
        assert "FITS" in text and f"{ws} ranks ({ws // 8} node(s) x 8)" in text
    assert worst[32] < worst[8] / 3 and worst[8] < 0.9 * 192 * GiB


def test_not_fitting_names_the_need_the_capacity_and_the_fix():
    tables = tables_of(CRITEO_1TB, dim=512)  # ~390 GiB: more than one H100 and its host share
    with pytest.raises(DoesNotFit) as e:
        plan_tables(tables, ShardingConfig(profile="h100"), 1, None, 4096)
    msg = str(e.value)
    assert "does not fit" in msg and "GiB HBM per rank on 1 ranks" in msg and "80.0 GiB per rank" in msg
    assert "use more ranks (at least 6)" in msg


def test_row_wise_allowed_on_cpu_by_constraint():
    tables = tables_of([1000, 50])
    cfg = ShardingConfig(profile="cpu", constraints={"t_cat_0": TableConstraint(sharding_types=["row_wise"])})
    plan = plan_tables(tables, cfg, 2, 2, 64, module_path="model.sparse_arch.embedding_bag_collection")
    ps = plan.plan["model.sparse_arch.embedding_bag_collection"]["t_cat_0"]
    assert (ps.sharding_type, ps.ranks) == ("row_wise", [0, 1])


# ---- sharding.profile: auto (the default), with torch.cuda stubbed ------------------------------
@pytest.fixture
def gpu(monkeypatch):
    """Make torch.cuda report one GPU: ``gpu(name, arch, memory_gib, hip=None)`` (arch "9.0" or "gfx942:...")."""
    from types import SimpleNamespace

    def report(name: str, arch: str, memory_gib: float, hip: str | None = None) -> None:
        if hip:
            props = SimpleNamespace(gcnArchName=arch, total_memory=int(memory_gib * GiB), major=9, minor=4)
        else:
            major, minor = map(int, arch.split("."))
            props = SimpleNamespace(major=major, minor=minor, total_memory=int(memory_gib * GiB))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=0: props)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: name)
        monkeypatch.setattr(torch.version, "hip", hip)
    return report


def test_auto_on_cpu_is_the_cpu_profile_and_plans_the_same():
    tables = tables_of([1000, 50, 20_000], dim=16)
    assert resolve_profile("auto", torch.device("cpu")) == (PROFILES["cpu"], "auto: cpu -> cpu")
    assert ShardingConfig().profile == "auto"
    auto = plan_tables(tables, ShardingConfig(), 2, 2, 64, profile=resolve_profile("auto", "cpu")[0])
    named = plan_tables(tables, ShardingConfig(profile="cpu"), 2, 2, 64)
    assert auto == named


@pytest.mark.parametrize("name, arch, memory, hip, expected", [
    ("NVIDIA H100 80GB HBM3", "9.0", 79.1, None, "h100"),
    ("NVIDIA H200", "9.0", 139.8, None, "h200"),
    ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 191.98, "6.4.1", "mi300x"),
    ("AMD Radeon Graphics", "gfx942:sramecc+:xnack-", 256, "6.4.1", "mi325x"),  # a generic ROCm name: by arch
    ("AMD Instinct MI355X", "gfx950:sramecc+:xnack-", 288, "7.0.0", "mi355x"),
])
def test_auto_picks_the_builtin_profile_of_each_vendors_gpu(gpu, name, arch, memory, hip, expected):
    gpu(name, arch, memory, hip)
    profile, why = resolve_profile("auto", torch.device("cuda", 0))
    assert profile == PROFILES[expected] and why == f"auto: {name} -> {expected}"
    # the default training config plans on it; ranks per node are the launcher's (2), not the profile's 8
    cfg = ShardingConfig()
    tables = tables_of(CRITEO_1TB[:8], dim=64)
    plan = plan_tables(tables, cfg, 2, 2, 4096, profile=resolve_profile(cfg.profile, "cuda:0")[0])
    text = format_plan(plan, tables, build_topology(profile, 2, 2), profile_why=why)
    assert text.splitlines()[0] == f"Sharding plan: 2 ranks (1 node(s) x 2), device cuda; profile {why}"
    assert "FITS" in text


def test_auto_takes_the_devices_own_memory_and_builds_a_profile_for_unknown_cards(gpu):
    gpu("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "9.0", 39.5, None)   # a MIG slice: h100, with its 40 GiB
    profile, why = resolve_profile("auto", "cuda")
    assert (profile.name, profile.hbm_cap, profile.hbm_mem_bw) == ("h100", int(39.5 * GiB), PROFILES["h100"].hbm_mem_bw)
    assert why.endswith("-> h100 with the device's 40 GiB")
    gpu("NVIDIA H100 PCIe", "9.0", 79.6, None)   # no NVLink, slower memory: not the SXM profile
    profile, why = resolve_profile("auto", "cuda")
    assert profile.name == "nvidia-h100-pcie" and profile.intra_host_bw == ARCH_BANDWIDTHS["9.0"].intra_gb_s * 1e9
    gpu("NVIDIA L4", "8.9", 22.5, None)
    profile, why = resolve_profile("auto", "cuda")
    assert (profile.name, profile.compute_device, profile.hbm_cap) == ("nvidia-l4", "cuda", int(22.5 * GiB))
    assert profile.hbm_mem_bw == 0.3e12 and "made from its properties (22 GiB, the bandwidths of architecture 8.9" in why
    gpu("Future Accelerator 9000", "13.1", 512, None)
    profile, why = resolve_profile("auto", "cuda")
    assert (profile.hbm_mem_bw, profile.intra_host_bw) == (UNKNOWN_GPU.hbm_tb_s * 1e12, UNKNOWN_GPU.intra_gb_s * 1e9)
    assert "conservative bandwidths (architecture 13.1 is not in training.topology.ARCH_BANDWIDTHS)" in why
    tables = tables_of(CRITEO_1TB[:8], dim=64)
    assert plan_tables(tables, ShardingConfig(), 1, 1, 4096, profile=profile).plan[""]


def test_a_profile_for_the_wrong_device_or_auto_without_one_is_one_line(gpu, capsys):
    with pytest.raises(UserError, match=r"'h200' is for cuda devices but this run uses cpu\. Fix: set "
                                        r"sharding.profile to auto or cpu\.$"):
        resolve_profile("h200", "cpu")
    gpu("NVIDIA H100 80GB HBM3", "9.0", 79.1, None)
    with pytest.raises(UserError, match=r"'cpu' is for cpu devices but this run uses cuda\. Fix: set "
                                        r"sharding.profile to auto \(here auto: NVIDIA H100 80GB HBM3 -> h100\)"):
        resolve_profile("cpu", "cuda:0")
    assert resolve_profile("mi300x", "cuda:0") == (PROFILES["mi300x"], "mi300x (sharding.profile)")
    with pytest.raises(UserError, match="Fix: use auto"):
        resolve_profile("a100", "cuda:0")

    from flows.cli import main

    assert main(["plan", "--cardinalities", "1000", "50", "--world-size", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sharding.profile 'auto' is resolved on the device" in err
    assert "--sharding.profile auto|cpu" not in err and "--sharding.profile cpu|mi300x" in err


# ---- the command ------------------------------------------------------------------------------
def test_plan_command_for_a_dataset_and_for_cardinalities(tmp_path, capsys):
    from flows.cli import main

    cats = {"c0": 5_000_000, "c1": 1000}
    spec = FeatureSpec(feature_spec={"y": Feature(dtype="bool"), **{c: Feature(dtype="int32", cardinality=n)
                                                                    for c, n in cats.items()}},
                       source_spec={"train": [Chunk(type="split_binary", features=[f], files=[f"train/{f}.bin"])
                                              for f in ["y", *cats]]},
                       channel_spec={"label": ["y"], "categorical": list(cats)})
    save(spec, str(tmp_path / "ds"))
    out = tmp_path / "plan.txt"
    assert main(["plan", "--dataset", str(tmp_path / "ds"), "--sharding.profile", "mi325x", "--world-size", "16",
                 "--arch.embedding-dim", "64", "--arch.bottom-mlp", "64", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "16 ranks (2 node(s) x 8)" in printed and "t_c0" in printed and "FITS" in printed
    assert out.read_text().strip() in printed
    assert main(["plan", "--cardinalities", *map(str, CRITEO_1TB), "--sharding.profile", "h100", "--world-size", "1",
                 "--arch.embedding-dim", "512", "--arch.bottom-mlp", "512"]) == 2
    assert "does not fit" in capsys.readouterr().err


@pytest.mark.slow
# ---- a real 2-rank run --------------------------------------------------------------------
def test_row_wise_on_two_gloo_ranks_matches_the_unsharded_module():
    """Two ranks on gloo under torchrun (``training.launchers.torchrun``, as every rank job: its ranks forked after
    its imports; forked from the warm launcher where the suite has one, in a process group of its own): row-wise
    shards give the unsharded module's output on each rank's own batch."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = launch_command([sys.executable, "-u", "-m", "training.launchers.torchrun", "--standalone",
                          "--nproc-per-node", "2", __file__])
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, process_group=0)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    lines = proc.stdout.splitlines()
    assert all(f"rank {r}: forward matches unsharded" in lines for r in (0, 1)), proc.stdout[-3000:]


def _worker() -> None:
    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.modules.embedding_modules import EmbeddingBagCollection
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from training.sharding import sharders

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, ws = dist.get_rank(), dist.get_world_size()
    # rank 0's planner error reaches every rank instead of leaving rank 1 waiting in the broadcast
    try:
        plan_tables(tables_of([10**10]), ShardingConfig(profile="cpu"), ws, ws, 8, pg=dist.group.WORLD)
        raise AssertionError("a 5 TB table fitted")
    except DoesNotFit:
        pass
    tables = [EmbeddingBagConfig(name=f"t{i}", embedding_dim=8, num_embeddings=n, feature_names=[f"f{i}"])
              for i, n in enumerate((50, 31, 7))]
    cfg = ShardingConfig(profile="cpu", constraints={t.name: TableConstraint(sharding_types=["row_wise"])
                                                     for t in tables})
    plan = plan_tables(tables, cfg, ws, ws, 16, pg=dist.group.WORLD)
    assert {ps.sharding_type for ps in plan.plan[""].values()} == {"row_wise"}
    torch.manual_seed(0)
    reference = EmbeddingBagCollection(tables=tables)
    dmp = DistributedModelParallel(EmbeddingBagCollection(tables=tables, device=torch.device("meta")),
                                   device=torch.device("cpu"), plan=plan, sharders=sharders())
    full = reference.state_dict()
    for name, sharded in dmp.state_dict().items():
        for shard in sharded.local_shards():
            (r0, c0), (r, c) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(full[name][r0:r0 + r, c0:c0 + c])
    g = torch.Generator().manual_seed(rank)  # each rank its own batch; <= 2 ids per bag keeps sums exact
    lengths = torch.randint(0, 3, (len(tables) * 16,), generator=g, dtype=torch.int32)
    per_table = lengths.view(len(tables), 16).sum(1).tolist()
    values = torch.cat([torch.randint(0, t.num_embeddings, (n,), generator=g) for t, n in zip(tables, per_table)])
    kjt = KeyedJaggedTensor(keys=[t.feature_names[0] for t in tables], values=values, lengths=lengths)
    got, want = dmp(kjt).values(), reference(kjt).values()
    assert torch.equal(got, want), (got - want).abs().max()
    os.write(1, f"rank {rank}: forward matches unsharded\n".encode())   # one write: the ranks share stdout
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker()
