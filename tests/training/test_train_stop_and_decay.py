"""Two training settings a tune relies on, in process on one rank: a stop request in the run folder stops the
training at its next validation (a tune prunes a trial so), and weight decay reaches both optimizers (the fused
FBGEMM update of the embedding rows and torch's dense one)."""

from __future__ import annotations

import json

import pytest

from helpers.datasets import write_dataset
from training import distributed
from training.config import TrainConfig
from training.rundir import RunDir
from training.trainer import Trainer


@pytest.fixture
def process_group():
    yield distributed.init(60)
    distributed.destroy()


def test_a_stop_request_stops_at_the_next_validation(tmp_path, process_group):
    ds = write_dataset(tmp_path / "ds", {"train": 2048, "val": 256})
    run = RunDir(str(tmp_path / "run"))
    cfg = TrainConfig(dataset=str(ds), data={"batch_size": 128}, epochs=2, eval_every=3, log_every=3)
    trainer = Trainer(cfg, process_group, run)
    run.write_text("pruned\n", RunDir.STOP)
    trainer.train()
    evaluations = [r for r in run.metrics() if "eval_split" in r]
    assert trainer.step == 3 and trainer.stopped_early and [r["step"] for r in evaluations] == [3]
    assert json.loads(run.read_text("checkpoints", "latest"))["step"] == 3   # the last checkpoint: where it stopped


def _norms(ds, process_group, embedding: float = 0.0, dense: float = 0.0) -> tuple[float, float]:
    """The embedding rows' and the dense weights' norms after 6 steps with these weight decays."""
    cfg = TrainConfig(dataset=str(ds), data={"batch_size": 256}, max_steps=6, log_every=6, eval_split=None,
                      optimizer={"embedding": {"lr": 0.05, "weight_decay": embedding},
                                 "dense": {"lr": 0.05, "weight_decay": dense}})
    trainer = Trainer(cfg, process_group)
    trainer.train()
    state = trainer.dmp.state_dict()
    emb = sum(float(t.local_shards()[0].tensor.norm() if hasattr(t, "local_shards") else t.norm())
              for k, t in state.items() if "embedding_bags" in k)
    dense_norm = sum(float(t.norm()) for k, t in state.items() if "dense_arch" in k and "weight" in k)
    return emb, dense_norm


def test_weight_decay_shrinks_embedding_rows_and_dense_weights_each_alone(tmp_path, process_group):
    ds = write_dataset(tmp_path / "ds", {"train": 2048, "val": 256})
    plain = _norms(ds, process_group)
    # each setting alone (FBGEMM's fused CPU update ignored its own weight_decay: this caught it)
    assert _norms(ds, process_group, embedding=2.0)[0] < 0.9 * plain[0]
    assert _norms(ds, process_group, dense=2.0)[1] < 0.97 * plain[1]
    assert _norms(ds, process_group) == plain   # 0 changes nothing: deterministic, no penalty term
