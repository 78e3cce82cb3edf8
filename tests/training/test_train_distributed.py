"""2 gloo ranks vs 1 rank (real torchrun): same loss curve and parameters for the same global batch;
a checkpoint saved by 2 ranks loads on 1 rank under another sharding plan."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.datasets import CARDS, write_dataset
from helpers.processes import one_rank
from helpers.runs import checkpoint_tensors, metrics, train
from training.checkpoint import Checkpointer
from training.dlrm import initial_rows
from training.rundir import RunDir

# SGD on both parts: a gradient that is averaged where it should be summed (or the reverse) would
# change the updates by a factor of 2, so the curves agree only if the scaling is right.
COMMON = ["--set", "data.batch_size=128", "--set", "log_every=1", "--set", "eval_every=5", "--set", "epochs=2",
          "--set", "optimizer.embedding.type=sgd", "--set", "optimizer.embedding.lr=0.5",
          "--set", "optimizer.dense.type=sgd", "--set", "optimizer.dense.lr=0.2"]
TWO_RANK_PLAN = {"t_c0": "table_wise", "t_c1": "row_wise", "t_c2": "data_parallel", "t_c3": "column_wise"}
ONE_RANK_PLAN = {"t_c0": "row_wise", "t_c1": "table_wise", "t_c2": "table_wise", "t_c3": "data_parallel"}


def constraints(plan: dict[str, str]) -> str:
    return json.dumps({t: {"sharding_types": [s]} for t, s in plan.items()})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    ds = write_dataset(root / "ds", {"train": 1280, "val": 300})
    one, two = root / "one", root / "two"
    train(ds, one, *COMMON)
    proc = train(ds, two, *COMMON, "--set", f"sharding.constraints={constraints(TWO_RANK_PLAN)}", nproc=2)
    return ds, one, two, proc


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_ranks_follow_the_one_rank_loss_curve(runs, tmp_path):
    _, one, two, proc = runs
    assert "Sharding plan: 2 ranks" in proc.stdout and "column_wise" in proc.stdout
    curve = lambda run: [(m["step"], m["loss"]) for m in metrics(run) if "loss" in m]
    a, b = curve(one), curve(two)
    assert [s for s, _ in a] == [s for s, _ in b] == list(range(1, 21))
    assert sum(l for _, l in a[-5:]) < sum(l for _, l in a[:5]) - 0.1  # it learns
    for (_, la), (_, lb) in zip(a, b):
        assert la == pytest.approx(lb, rel=1e-4, abs=1e-5)
    pa, pb = checkpoint_tensors(one, 20, tmp_path), checkpoint_tensors(two, 20, tmp_path)
    for k in (k for k in pa if k.startswith("model.") and "embedding_bags" not in k):
        torch.testing.assert_close(pa[k], pb[k], rtol=1e-3, atol=2e-4, msg=k)
    # the tables moved the same way from their (sharding-independent) initial values; float noise
    # is a few %, a gradient scaled by the number of ranks would be off by 50 %
    for name, rows in CARDS.items():
        k = f"model.model.sparse_arch.embedding_bag_collection.embedding_bags.t_{name}.weight"
        init = initial_rows(0, f"t_{name}", 0, rows, 16, rows ** -0.5)
        moved = pa[k] - init
        assert moved.norm() > 0 and (pb[k] - pa[k]).norm() < 0.1 * moved.norm(), name
    evals = lambda run: [m[k] for m in metrics(run) if "auc" in m for k in ("auc", "logloss")]
    assert len(evals(one)) == 8 and evals(one) == pytest.approx(evals(two), rel=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_two_rank_checkpoint_loads_on_one_rank_with_another_plan(runs):
    ds, _, two, _ = runs
    best = Checkpointer(RunDir(str(two))).pointer("best")
    from training.trainer import Trainer

    with one_rank():
        plan = json.loads(constraints(ONE_RANK_PLAN))
        t = Trainer.from_run(str(two), "best", overrides={"sharding.constraints": plan})
        t.calibration = None   # the raw model, as training validated it (before its calibration was fitted)
        got = {"plan": t.plan_text, "val": t.validate("val")}
    for table, kind in ONE_RANK_PLAN.items():
        assert any(line.startswith(table) and kind in line for line in got["plan"].splitlines())
    assert got["val"]["rows"] == best["rows"] == 300
    assert got["val"]["logloss"] == pytest.approx(best["logloss"], rel=1e-5)
    assert got["val"]["auc"] == pytest.approx(best["auc"], rel=1e-5)


def gpu_plan_constraints(dataset, world_size: int, batch_per_rank: int) -> str:
    """The sharding an H100 node would use for the dataset's tables (planned on meta tensors, no GPU), as
    sharding constraints that make CPU ranks lay the tables out the same way."""
    import feature_spec as fspec
    from training.config import TrainConfig
    from training.dlrm import embedding_tables
    from training.sharding import plan_tables
    from training.topology import PROFILES

    cfg = TrainConfig(dataset=str(dataset))
    tables = embedding_tables(cfg.arch, fspec.load(str(dataset)), cfg.precision)
    plan = plan_tables(tables, cfg.sharding, world_size, world_size, batch_per_rank, profile=PROFILES["h100"])
    return json.dumps({t: {"sharding_types": [ps.sharding_type], "compute_kernels": [ps.compute_kernel]}
                       for t, ps in plan.plan[""].items()})


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_checkpoint_with_a_gpu_plans_layout_resumes_and_exports_under_the_cpu_plan(runs, tmp_path):
    """Trained on GPUs, continued on a CPU machine: a checkpoint written by 2 ranks with the table layout an
    H100 plan gives is the same DCP format; its config naming the h100 profile, 1 CPU rank evaluates it under its
    own plan, resumes it (with sharding.profile auto) and exports it."""
    from training.export import export_bundle, unsharded_state

    ds, *_ = runs
    run = tmp_path / "gpu-layout"
    gpu = gpu_plan_constraints(ds, 2, 64)
    assert "row_wise" in gpu and "table_wise" in gpu   # not the layout the CPU profile picks
    one_epoch = ["epochs=1" if a == "epochs=2" else a for a in COMMON]
    train(ds, run, *one_epoch, "--set", f"sharding.constraints={gpu}", nproc=2)
    first_plan = (run / "plan.txt").read_text()
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("profile: auto", "profile: h100"))   # as the GPU run wrote it
    assert "profile: h100" in config.read_text()
    from training.trainer import Trainer

    with one_rank():   # what an evaluation's rank does: the run's h100 config, planned for this CPU
        evaluated = Trainer.from_run(str(run), "latest")
        assert "device cpu; profile auto: cpu -> cpu" in evaluated.plan_text.splitlines()[0]
        assert evaluated.validate("val")["auc"] > 0.5
    proc = train(ds, run, "--resume", "--set", "epochs=2", "--set", "sharding.constraints={}",
                 "--set", "sharding.profile=auto", nproc=1)
    assert "Sharding plan: 1 ranks (1 node(s) x 1), device cpu; profile auto: cpu -> cpu" in proc.stdout
    assert (run / "plan.txt").read_text() != first_plan
    steps = [m["step"] for m in metrics(run) if "loss" in m]
    assert steps == list(range(1, 21)), "the resume went on from step 10"
    bundle = export_bundle(str(run), 20, str(tmp_path / "bundle"))
    state = unsharded_state(str(run), 20)
    reference = {k.removeprefix("model.model."): v for k, v in checkpoint_tensors(run, 20, tmp_path).items()
                 if k.startswith("model.model.")}
    assert state.keys() == reference.keys() and bundle["files"]
    for key, value in reference.items():
        assert torch.equal(state[key], value), key
