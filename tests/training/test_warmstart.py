"""Warm start (init_from): an earlier run's weights carried into a new run across vocabulary changes,
sharding plans and world sizes (real torchrun, real preprocessing of synthetic drifting days)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from common.process import launch_command
from helpers.paths import HELPERS, REPO
from helpers.processes import one_rank
from helpers.runs import checkpoint_tensors, metrics, train
from training.config import InitFrom, TrainConfig
from training.warmstart import index_map

SMALL = ["--arch.embedding-dim", "8", "--arch.bottom-mlp", "16", "8", "--arch.top-mlp", "16", "1",
         "--data.batch-size", "256", "--data.eval-batch-size", "1024", "--log-every", "1"]
EMB = "model.model.sparse_arch.embedding_bag_collection.embedding_bags"
WORKER = HELPERS / "warm_worker.py"


@pytest.fixture(scope="module")
def days(tmp_path_factory, trained_runs):
    """Datasets A (train day 1, test day 2) and B (day 2, day 3) of drifting synthetic days: B's vocabularies
    gained and lost values; and a run trained on A with 2 ranks."""
    from preprocessing import PreprocessConfig, run
    from synthetic.generator import SynthConfig, write_days

    root = tmp_path_factory.mktemp("warm")
    write_days(SynthConfig(out=str(root / "logs"), days=3, start="2026-01-01", rows_per_day=3000, seed=1))

    def dataset(name: str, a: int, b: int) -> Path:
        return Path(run(PreprocessConfig(inputs=[f"train={root}/logs/2026-01-0{a}/part-00000.tsv",
                                                 f"test={root}/logs/2026-01-0{b}/part-00000.tsv"],
                                         out=str(root / name), frequency_threshold=2, progress=False)))

    a, b = dataset("a", 1, 2), dataset("b", 2, 3)
    old = trained_runs(a, *SMALL, "--max-steps", "6", nproc=2).path
    return {"root": root, "a": a, "b": b, "old": old}


def _warm(run: Path, dataset: Path, init_from: str, nproc: int, seed: int = 7, **arch) -> subprocess.CompletedProcess:
    """tests/helpers/warm_worker.py under torchrun (training.launchers.torchrun, as every rank job; forked from the
    warm launcher where the suite has one): warm start (no training step) saved as checkpoint 0 of ``run``."""
    cfg = TrainConfig.from_dict({"dataset": str(dataset), "seed": seed, "init_from": init_from, "pg_timeout_s": 120,
                                 "data": {"eval_batch_size": 1024},
                                 "arch": {"embedding_dim": 8, "bottom_mlp": [16, 8], "top_mlp": [16, 1], **arch}})
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(cfg.to_yaml())  # a run folder: the next warm start can start from it
    cmd = launch_command([sys.executable, "-m", "training.launchers.torchrun", "--standalone",
                          "--nproc-per-node", str(nproc), str(WORKER), cfg.model_dump_json(), str(run)])
    # a group of its own, as a local launcher's job (a warm launcher's fork joins the group of its command)
    return subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300, process_group=0)


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stderr[-5000:]


def _old_predictions(run: Path) -> np.ndarray:
    from training.trainer import Trainer

    with one_rank():
        trainer = Trainer.from_run(str(run), "latest")
        trainer.calibration = None   # the raw model: a warm start copies weights, never the old run's calibration
        p, _ = trainer.predict("test")
    return np.sort(p)


def test_identical_vocabulary_reproduces_the_old_model_on_any_world_size(days):
    """2-rank run -> warm start on 1 rank -> from that, warm start on 2 ranks: same predictions each time."""
    want = _old_predictions(days["old"])
    one, two = days["root"] / "one", days["root"] / "two"
    _ok(_warm(one, days["a"], str(days["old"]), nproc=1))
    np.testing.assert_allclose(np.load(one / "pred.npy"), want, rtol=0, atol=1e-6)
    _ok(_warm(two, days["a"], f"{one}@0", nproc=2, seed=11))
    np.testing.assert_allclose(np.load(two / "pred.npy"), want, rtol=0, atol=1e-6)


def test_changed_vocabulary_keeps_the_rows_of_shared_values(days, tmp_path):
    from training.dlrm import initial_rows

    new = days["root"] / "new-b"
    _ok(_warm(new, days["b"], f"{days['old']}@latest", nproc=2))
    old_t = checkpoint_tensors(days["old"], 6, tmp_path)
    new_t = checkpoint_tensors(new, 0, tmp_path)
    gained = lost = 0
    for feature in ("C1", "C3", "C14", "C26"):
        name = f"t_{feature}"
        va = pl.read_parquet(days["a"] / "vocab" / f"{feature}.parquet")
        vb = pl.read_parquet(days["b"] / "vocab" / f"{feature}.parquet")
        w_old, w_new = old_t[f"{EMB}.{name}.weight"], new_t[f"{EMB}.{name}.weight"]
        both = vb.join(va, on="value", suffix="_old").filter(pl.col("index") > 0, pl.col("index_old") > 0)
        fresh = vb.filter(pl.col("index") > 0, ~pl.col("value").is_in(va.filter(pl.col("index") > 0)["value"].implode()))
        gained += len(fresh)
        lost += len(va.filter(pl.col("index") > 0)) - len(both)
        assert len(both) > 0
        np.testing.assert_array_equal(w_new[both["index"].to_numpy()], w_old[both["index_old"].to_numpy()])
        np.testing.assert_array_equal(w_new[0], w_old[0])  # the missing/rare row is the old one
        cold = initial_rows(7, name, 0, w_new.shape[0], 8, w_new.shape[0] ** -0.5)
        np.testing.assert_array_equal(w_new[fresh["index"].to_numpy()], cold[fresh["index"].to_numpy()])
        m_old, m_new = _accumulator(old_t, name), _accumulator(new_t, name)
        assert m_old.abs().sum() > 0
        np.testing.assert_array_equal(m_new[both["index"].to_numpy()], m_old[both["index_old"].to_numpy()])
        assert (m_new[fresh["index"].to_numpy()] == 0).all()
    assert gained > 0 and lost > 0  # the drifting days changed the vocabularies both ways
    dense = "model.model.over_arch.model.1.weight"
    np.testing.assert_array_equal(new_t[dense], old_t[dense])


def _accumulator(tensors: dict, table: str):
    """A table's Adagrad accumulator: row-wise ``momentum1`` (fused), or ``sum`` (a data-parallel table)."""
    return next(v for k, v in tensors.items() if k.startswith(f"optim.state.{EMB[6:]}.{table}.weight.")
                and not k.endswith(".step"))


def test_a_run_warm_starts_once_and_resumes_without_it(days, tmp_path):
    """`dlrmflow train` with init_from starts from the old weights; its resume does not re-apply init_from
    (it would fail: the old run is gone by then)."""
    run, old = days["root"] / "trained", days["root"] / "old-copy"
    shutil.copytree(days["old"], old)
    train(days["b"], run, *SMALL, "--max-steps", "2", "--checkpoint-every", "2", "--set", f"init_from={old}")
    layer = "model.model.dense_arch.model._mlp.0._linear.weight"
    start = checkpoint_tensors(old, 6, tmp_path)[layer]
    after = checkpoint_tensors(run, 2, tmp_path)[layer]
    # Adagrad moves a weight by at most lr per step: 2 steps from the old weights, not from a random init
    assert 0 < (after - start).abs().max() <= 2 * 0.05 + 1e-6
    shutil.rmtree(old)
    train(days["b"], run, "--resume", "--max-steps", "4")
    assert metrics(run)[-1]["step"] == 4


def test_mismatched_dense_layer_is_a_clear_error(days):
    proc = _warm(days["root"] / "mismatch", days["a"], str(days["old"]), nproc=1, bottom_mlp=[32, 8])
    assert proc.returncode != 0
    assert "layer 'dense_arch.model._mlp.0._linear." in proc.stderr, proc.stderr[-3000:]
    assert "in the checkpoint but [32" in proc.stderr and "Fix:" in proc.stderr


def test_index_map_joins_by_value():
    old = pl.DataFrame({"value": ["a", "b", "c", "rare"], "index": [1, 2, 3, 0]})
    new = pl.DataFrame({"value": ["c", "d", "a", "rare", "b2"], "index": [1, 2, 3, 0, 4]})
    assert index_map(old, new, 5).tolist() == [0, 3, -1, 1, -1]
    ints = pl.DataFrame({"value": [7, 9], "index": [1, 2]})  # an integer vocabulary against a text one
    assert index_map(ints, pl.DataFrame({"value": ["9", "8"], "index": [1, 2]}), 3).tolist() == [0, 2, -1]


def test_init_from_forms():
    assert TrainConfig.from_dict({"init_from": "s3://b/runs/x@120"}).init_from == InitFrom(run="s3://b/runs/x",
                                                                                            checkpoint="120")
    assert TrainConfig.from_dict({"init_from": "/r/x"}).init_from.checkpoint == "best"
    assert TrainConfig.from_dict({}).init_from is None
