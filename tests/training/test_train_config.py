"""TrainConfig: defaults, presets, overrides, validation messages; the launch command; the LR schedule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.errors import UserError
from training.config import TrainConfig, preset_names
from training.launchers import train_job
from training.launchers.local import torchrun_command
from training.metrics import log_loss, roc_auc
from training.trainer import lr_factor, per_rank


def test_every_field_has_a_description_and_the_schema_is_json():
    schema = TrainConfig.model_json_schema()
    json.dumps(schema)

    def check(props, defs):
        for name, p in props.items():
            assert p.get("description"), name
            ref = p.get("$ref") or next((a.get("$ref") for a in p.get("anyOf", []) if "$ref" in a), None)
            if ref:
                check(defs[ref.split("/")[-1]]["properties"], defs)

    check(schema["properties"], schema.get("$defs", {}))
    cfg = TrainConfig()
    assert TrainConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_presets_load_and_round_trip_through_yaml(tmp_path):
    assert {"default", "criteo-sample"} <= set(preset_names())
    cfg = TrainConfig.preset("criteo-sample")
    assert cfg.early_stopping_patience
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert TrainConfig.from_yaml(str(path)) == cfg


def test_overrides_are_typed_and_validated():
    cfg = TrainConfig().with_overrides({"optimizer.dense.lr": 0.1, "arch.interaction": "dcn", "seed": 7})
    assert (cfg.optimizer.dense.lr, cfg.arch.interaction, cfg.seed) == (0.1, "dcn", 7)
    with pytest.raises(UserError, match="unknown field 'lrr'"):
        TrainConfig().with_overrides({"optimizer.dense.lrr": 0.1})
    with pytest.raises(UserError, match="arch.interaction"):
        TrainConfig().with_overrides({"arch.interaction": "attention"})


def test_a_run_saved_with_the_old_model_section_still_loads(tmp_path):
    """Runs written before `model` became `arch` keep loading (and resuming): the old key is read as `arch`."""
    from training.rundir import RunDir

    (tmp_path / "config.yaml").write_text("model: {embedding_dim: 8, bottom_mlp: [32, 8]}\nseed: 3\n")
    cfg = RunDir(str(tmp_path)).load_config()
    assert (cfg.arch.embedding_dim, cfg.arch.bottom_mlp, cfg.seed) == (8, [32, 8], 3)
    assert "model" not in cfg.model_dump() and TrainConfig.from_dict(cfg.model_dump()) == cfg


@pytest.mark.parametrize("text, match", [
    ("arch: {embedding_dim: 8, bottom_mlp: [32, 16]}", "last size 8"),
    ("arch: {top_mlp: [64, 2]}", "top_mlp must end with 1"),
    ("optimizer: {embedding: {type: lamb}}", "optimizer.embedding.type"),
    ("epochs: 0", "epochs"),
    ("batchsize: 3", "batchsize"),
    ("arch: [1", "not valid YAML"),
])
def test_bad_configs_name_the_file_and_field(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=match) as e:
        TrainConfig.from_yaml(str(path))
    assert str(path) in str(e.value) and isinstance(e.value, UserError)


def test_a_warm_start_reads_only_the_store_of_the_run_or_one_named(tmp_path):
    """init_from must lie in the store of the run being trained (a checkpoint's metadata is a pickle), unless
    init_from.store names another store on purpose."""
    from training.config import InitFrom

    run = "s3://bucket/prod/runs/new"
    for same in ["s3://bucket/prod/runs/old", "s3a://bucket/prod/runs/old/", "s3://bucket/prod/models/ctr"]:
        InitFrom(run=same).check_store(run)
    for other in ["s3://other/prod/runs/old", "s3://bucket/prod2/runs/old", "s3://bucket/prod/runs/../../x/runs/old",
                  "/bucket/prod/runs/old", "../prod/runs/old"]:
        with pytest.raises(UserError, match=rf"init_from {other} lies outside s3://bucket/prod, the store of the run "
                                            rf"being trained \({run}\)\. A checkpoint's metadata is a pickle .* Fix: .* "
                                            r"init_from.store"):
            InitFrom(run=other).check_store(run)
    named = TrainConfig.from_dict({"init_from": {"run": "s3://other/prod/runs/old", "store": "s3://other/prod"}})
    named.init_from.check_store(run)
    with pytest.raises(UserError, match=r"lies outside s3://other/prod, init_from.store\."):
        InitFrom(run="s3://third/runs/old", store="s3://other/prod").check_store(run)
    InitFrom(run=str(tmp_path / "old")).check_store(str(tmp_path / "new"))   # runs outside a runs/ folder: its folder
    with pytest.raises(UserError, match="lies outside"):
        InitFrom(run=str(tmp_path.parent / "old")).check_store(str(tmp_path / "new"))


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(UserError, match="criteo-sample"):
        TrainConfig.preset("nope")


def test_torchrun_command_standalone_and_multinode():
    one = torchrun_command(train_job(), "runs/r", nproc=2)
    assert one[1:] == ["-u", "-m", "training.launchers.torchrun", "--nproc-per-node", "2", "--standalone",
                       "-m", "training.train_worker", "runs/r"]
    multi = torchrun_command(train_job(resume=True), "s3://b/r", nproc=8, nnodes=2, rdzv_endpoint="h0:29500")
    assert multi[multi.index("--rdzv-backend") + 1] == "c10d" and "--standalone" not in multi
    assert multi[multi.index("--rdzv-endpoint") + 1] == "h0:29500" and multi[-1] == "--resume"
    assert multi[multi.index("--rdzv-id") + 1] == "r"
    with pytest.raises(ValueError):
        torchrun_command(train_job(), "r", nnodes=2)


def test_lr_schedule_warms_up_then_decays_to_zero():
    opt = TrainConfig().with_overrides({"optimizer.warmup_steps": 4, "optimizer.decay_start": 10,
                                        "optimizer.decay_steps": 10}).optimizer
    f = [lr_factor(opt, s) for s in range(25)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0] and f[4:11] == [1.0] * 7
    assert f[15] == pytest.approx(0.25) and f[20:] == [0.0] * 5


def test_global_batch_must_divide_over_ranks():
    assert per_rank(512, 4) == 128
    with pytest.raises(UserError, match="GLOBAL batch size"):
        per_rank(100, 3)


def test_metrics_match_their_definitions_and_ignore_padding():
    rng = np.random.default_rng(0)
    p, y = rng.random(300).round(1), (rng.random(300) < 0.4).astype(float)  # rounding makes ties
    pairs = (p[y == 1][:, None] > p[y == 0][None]).mean() + 0.5 * (p[y == 1][:, None] == p[y == 0][None]).mean()
    padded_p, padded_y = np.r_[p, [0.9, 0.1]], np.r_[y, [-1, -1]]
    assert roc_auc(padded_p, padded_y) == pytest.approx(pairs, abs=1e-12)
    q = np.clip(p, 1e-7, 1 - 1e-7)
    assert log_loss(padded_p, padded_y) == pytest.approx(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q)))
    assert np.isnan(roc_auc(p, np.zeros_like(p)))


def test_a_run_name_is_the_same_wherever_its_store_is(tmp_path):
    """A dataset in the store is hashed by its store-relative location, so the same config names the same run in the
    store at another path or bucket prefix; a dataset outside the store is hashed by its URI; a run made before
    (named by the hash of the dataset's URI) keeps its name while its folder exists and the new one's does not."""
    from common.store import Store
    from training.config import config_hash, hashed_run

    base = TrainConfig.preset("default")

    def on(dataset: str) -> TrainConfig:
        return base.model_copy(update={"dataset": dataset})

    relative = config_hash(on("datasets/criteo-ab12"))
    for root in (str(tmp_path / "store"), str(tmp_path / "restored" / "store"), "s3://bucket/dlrm",
                 "s3a://other/copied/dlrm"):
        store = Store(root)
        assert config_hash(on(store.dataset_uri("criteo-ab12")), store) == relative, root
    for root in (str(tmp_path / "store"), str(tmp_path / "restored" / "store")):
        store = Store(root)
        assert hashed_run(store, "ctr-2026-11-05", on(store.dataset_uri("criteo-ab12"))) == \
            f"ctr-2026-11-05-{relative}"

    store = Store(str(tmp_path / "store"))
    for outside in (str(tmp_path / "elsewhere" / "datasets" / "criteo-ab12"), "s3://bucket/dlrm2/datasets/criteo-ab12"):
        cfg = on(outside)
        assert config_hash(cfg, store) == config_hash(cfg) != relative
        assert hashed_run(store, "r", cfg) == f"r-{config_hash(cfg)}"

    cfg = on(store.dataset_uri("criteo-ab12"))
    legacy, new = f"ctr-2026-11-05-{config_hash(cfg)}", f"ctr-2026-11-05-{relative}"
    assert legacy != new
    (tmp_path / "store" / "runs" / legacy).mkdir(parents=True)   # made before the upgrade: found, resumed
    assert hashed_run(store, "ctr-2026-11-05", cfg) == legacy
    (tmp_path / "store" / "runs" / new).mkdir()   # both: the new name's
    assert hashed_run(store, "ctr-2026-11-05", cfg) == new
