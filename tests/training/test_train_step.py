"""The training step never waits on the host: between log points our code reads no tensor value into
Python (on a GPU every such read stalls the pipeline's overlap of copies, communication and compute).

On CPU a "host sync" cannot be observed directly, so every read of a tensor's value into Python is
recorded instead, with the step at which it happened: ``.item()``, ``float()``, ``int()``, ``bool()``,
formatting and printing all reach ``aten._local_scalar_dense`` (seen by a dispatch mode); ``.tolist()``,
``.numpy()`` and ``.cpu()`` are wrapped. A read counts as ours when the innermost frame outside the torch
package is in ``training/`` or ``common/`` and it happens on the training thread (the loader's thread
works on host batches by design). TorchRec's and FBGEMM's own reads of host-side counters are theirs.
"""

from __future__ import annotations

import threading
import traceback
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.datasets import write_dataset
from training import distributed
from training.config import TrainConfig
from training.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
OURS = tuple(str(REPO / d) + "/" for d in ("training", "common"))
TORCH = str(Path(torch.__file__).parent) + "/"


class HostReads(TorchDispatchMode):
    """Records ``trainer.step`` at every read of a tensor value into Python made by our code."""

    def __init__(self, trainer: Trainer):
        super().__init__()
        self.trainer, self.steps = trainer, Counter()

    def record(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        frames = [f for f in traceback.extract_stack() if f.filename != __file__]
        caller = next((f for f in reversed(frames) if not f.filename.startswith(TORCH)), None)
        if caller is not None and caller.filename.startswith(OURS):
            self.steps[self.trainer.step] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.record()
        return func(*args, **(kwargs or {}))

    def wrap(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("tolist", "numpy", "cpu"):
            original = getattr(torch.Tensor, name)

            def read(tensor, *args, _original=original, **kwargs):
                self.record()
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, read)


@pytest.fixture
def process_group():
    yield distributed.init(60)
    distributed.destroy()


@pytest.mark.timeout(120)
def test_steps_between_log_points_read_nothing_from_the_device(tmp_path, process_group, monkeypatch):
    ds = write_dataset(tmp_path / "ds", {"train": 2560, "val": 256})
    # a table cap makes the id hashing run too: it belongs in the loader's thread, off the step's path
    cfg = TrainConfig(dataset=str(ds), data={"batch_size": 128}, model={"max_table_size": 100}, max_steps=20,
                      log_every=5, eval_split=None)
    trainer = Trainer(cfg, process_group)
    assert set(trainer.hasher.caps) == {"c1", "c3"}
    reads = HostReads(trainer)
    reads.wrap(monkeypatch)
    with reads:
        trainer.train()
    assert trainer.step == 20
    # exactly one read per log point (the window's losses), none in the steps between
    assert reads.steps == Counter({5: 1, 10: 1, 15: 1, 20: 1}), reads.steps


def test_a_read_in_the_step_is_caught(tmp_path, process_group, monkeypatch):
    """The recorder sees what the old step did (``loss.item()`` per step), so the test above can fail."""
    ds = write_dataset(tmp_path / "ds", {"train": 1280, "val": 256})
    trainer = Trainer(TrainConfig(dataset=str(ds), data={"batch_size": 128}, max_steps=4, log_every=4,
                                  eval_split=None), process_group)
    original = Trainer._set_lr

    def set_lr_reading_a_loss(self):  # called from Trainer._segment: a per-step read, like the old step's
        original(self)
        if self._window[2]:
            self._window[2][-1].item()

    monkeypatch.setattr(Trainer, "_set_lr", set_lr_reading_a_loss)
    reads = HostReads(trainer)
    reads.wrap(monkeypatch)
    with reads:
        trainer.train()
    assert reads.steps[1] == 1 and reads.steps[2] == 1 and reads.steps[3] == 1, reads.steps


def test_batches_carry_their_per_key_lengths_and_are_transformed_in_the_loader_thread(tmp_path):
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    from training.data import SplitBinaryDataset

    data = SplitBinaryDataset(str(write_dataset(tmp_path / "ds", {"train": 300})), "train")
    threads = []

    def transform(batch):
        threads.append(threading.current_thread())
        return batch

    batches = list(data.batches(128, transform=transform))  # 128, 128 and the last 44 rows
    assert len(threads) == 3 and threading.main_thread() not in threads
    for batch, rows in zip(batches, (128, 128, 44)):
        kjt = batch.sparse_features
        derived = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths())
        assert kjt.stride() == derived.stride() == rows
        assert kjt.length_per_key() == derived.length_per_key()
        assert kjt.offset_per_key() == derived.offset_per_key()


def test_bf16_on_cpu_trains_the_mlps_and_interaction_in_bf16_and_evaluates_in_fp32(tmp_path, process_group):
    """precision.dense bf16: the bottom MLP, the interaction and the top MLP output bfloat16 in training steps,
    the weights (fp32 master copies) stay float32, evaluation computes in float32 (as the serving bundle
    does), and the model learns the planted signal."""
    from training.metrics import roc_auc

    ds = write_dataset(tmp_path / "ds", {"train": 4096, "val": 1024})
    cfg = TrainConfig(dataset=str(ds), data={"batch_size": 128}, precision={"dense": "bf16"}, epochs=2,
                      log_every=32, eval_split=None)
    trainer = Trainer(cfg, process_group)
    seen = []
    for name, module in trainer.dmp.named_modules():
        if name.endswith(("dense_arch", "inter_arch", "over_arch")):
            module.register_forward_hook(lambda m, args, out, name=name: seen.append(
                (name.rsplit(".", 1)[-1], m.training, out.dtype)))
    trainer.train()
    assert trainer.step == 64
    trained = set(seen)
    assert trained == {(arch, True, torch.bfloat16) for arch in ("dense_arch", "inter_arch", "over_arch")}, trained
    assert {p.dtype for p in trainer.dmp.parameters()} == {torch.float32}
    seen.clear()
    p, y = trainer.predict("val")
    assert set(seen) == {(arch, False, torch.float32) for arch in ("dense_arch", "inter_arch", "over_arch")}, set(seen)
    assert roc_auc(p, y) > 0.8, roc_auc(p, y)
