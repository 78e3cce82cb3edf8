"""The DLRM built from a FeatureSpec and an ArchConfig (TorchRec's DLRM / DLRM_DCN).

One ``EmbeddingBagConfig`` per categorical feature, ``num_embeddings`` = its cardinality from
the feature spec, or ``max_table_size`` with ids hashed (id % cap) by ``IdHasher`` before the
batch reaches the model (TorchRec's pipeline needs the batch's KJT to feed the tables directly).
A multi-valued feature's table pools a row's values as its spec says (``pooling``: sum or mean).
"""

from __future__ import annotations

import re
import zlib
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torchrec.datasets.utils import Batch
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import DataType, EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from feature_spec import FeatureSpec
from training.config import ArchConfig, PrecisionConfig

INIT_BLOCK_ROWS = 1024
POOLING_TYPES = {"sum": PoolingType.SUM, "mean": PoolingType.MEAN}   # the spec's ``pooling`` -> TorchRec's


def table_name(feature: str) -> str:
    """Name of a feature's embedding table: ``t_<feature>``, valid as a module name for any feature name
    (NVIDIA names features after their files: ``cat_0.bin``). Characters other than letters, digits and
    ``_`` become ``_``, and such a name gets the feature's CRC32 so that it cannot collide with another."""
    name = "t_" + re.sub(r"\W", "_", feature, flags=re.ASCII)
    return name if name == f"t_{feature}" else f"{name}_{zlib.crc32(feature.encode()):08x}"


def embedding_tables(cfg: ArchConfig, spec: FeatureSpec, precision: PrecisionConfig | None = None) -> list[EmbeddingBagConfig]:
    """One table per categorical feature, sized by the spec's cardinality (capped by max_table_size), pooling
    as the feature's ``pooling`` says (default sum)."""
    data_type = DataType.FP16 if precision is not None and precision.embeddings == "fp16" else DataType.FP32
    tables = []
    for f in spec.categorical_features:
        rows = spec.cardinality(f)
        if cfg.max_table_size is not None:
            rows = min(rows, cfg.max_table_size)
        tables.append(EmbeddingBagConfig(name=table_name(f), embedding_dim=cfg.embedding_dim, num_embeddings=rows,
                                         feature_names=[f], data_type=data_type,
                                         pooling=POOLING_TYPES[spec.feature_spec[f].pooling or "sum"]))
    return tables


class DLRMTask(nn.Module):
    """A DLRM plus its loss: ``forward(batch) -> (loss, (loss, logits, labels))``, as TorchRec's pipeline expects.

    The loss is the mean over this rank's rows, rows with label < 0 (the loader's padding)
    counting as zero. TorchRec averages the embedding gradients over ranks (gradient division in
    its all-to-all) and DDP averages the dense ones, so with equal rows per rank the update is the
    one of the global mean: 1 rank x 2B and 2 ranks x B train identically.

    ``autocast_dtype`` (``precision.dense: bf16``): in training mode the forward runs under ``torch.autocast``
    of ``device_type`` (CPU or CUDA alike), so the bottom/top MLPs and the interaction compute in
    that type; the embedding lookups, the weights and optimizer state (fp32 master copies) and the loss stay
    float32. In eval mode (evaluation, scoring) the model computes in float32, as the serving bundle does.

    ``embedding_l2`` (``optimizer.embedding.weight_decay``): in training mode the loss adds
    ``embedding_l2 / 2`` x the squared norm of each row's pooled embeddings, averaged like the loss: an L2 penalty
    on the rows the batch looks up (for a one-hot feature, its row), in the autograd graph, so the same on every
    device and with every embedding optimizer (FBGEMM's CPU kernels ignore their own weight decay).
    """

    def __init__(self, dlrm: nn.Module, autocast_dtype: torch.dtype | None = None, device_type: str = "cpu",
                 embedding_l2: float = 0.0):
        super().__init__()
        self.model = dlrm
        self.autocast_dtype, self.device_type, self.embedding_l2 = autocast_dtype, device_type, embedding_l2

    def forward(self, batch: Batch) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        # device_type is fixed at build time: TorchRec's pipeline traces this forward with FX, where
        # batch.dense_features.device is a proxy
        autocast = self.autocast_dtype is not None and self.training
        ctx = torch.autocast(self.device_type, self.autocast_dtype) if autocast else nullcontext()
        m = self.model   # TorchRec's DLRM.forward, step by step: the pooled embeddings are needed for the penalty
        with ctx:
            pooled = m.sparse_arch(batch.sparse_features)   # B x F x D
            inter = m.inter_arch(dense_features=m.dense_arch(batch.dense_features), sparse_features=pooled)
            logits = m.over_arch(inter).squeeze(-1)
        logits = logits.float()
        mask = (batch.labels >= 0).float()
        bce = F.binary_cross_entropy_with_logits(logits, batch.labels.clamp(min=0), reduction="none")
        if self.embedding_l2 and self.training:
            bce = bce + (0.5 * self.embedding_l2) * pooled.float().square().sum(dim=(1, 2))
        loss = (bce * mask).sum() / batch.labels.numel()
        return loss, (loss.detach(), logits.detach(), batch.labels)


def build_model(cfg: ArchConfig, spec: FeatureSpec, *, device: torch.device,
                precision: PrecisionConfig | None = None, embedding_l2: float = 0.0) -> DLRMTask:
    """The unsharded model: tables on the meta device (DMP materialises its shards), MLPs on ``device``;
    ``embedding_l2``: the training loss's penalty on the pooled embeddings (DLRMTask)."""
    ebc = EmbeddingBagCollection(tables=embedding_tables(cfg, spec, precision), device=torch.device("meta"))
    n_dense = len(spec.numerical_features)
    if cfg.interaction == "dcn":
        dlrm = DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=n_dense, dense_arch_layer_sizes=cfg.bottom_mlp,
                        over_arch_layer_sizes=cfg.top_mlp, dcn_num_layers=cfg.dcn_layers,
                        dcn_low_rank_dim=cfg.dcn_rank, dense_device=device)
    else:
        dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=n_dense, dense_arch_layer_sizes=cfg.bottom_mlp,
                    over_arch_layer_sizes=cfg.top_mlp, dense_device=device)
    bf16 = precision is not None and precision.dense == "bf16"
    return DLRMTask(dlrm, torch.bfloat16 if bf16 else None, device.type, embedding_l2)


def init_embeddings(state: dict[str, torch.Tensor], tables: list[EmbeddingBagConfig], seed: int) -> None:
    """Fill every table's local shards with uniform(+-1/sqrt(rows)) values that depend only on
    (seed, table, row): the same initial model on any number of ranks and any sharding plan.
    ``state`` is the sharded model's ``state_dict()``."""
    for t in tables:
        key = next(k for k in state if k.endswith(f"embedding_bags.{t.name}.weight"))
        for shard, (r0, c0) in _local_shards(state[key]):
            rows, cols = shard.shape
            bound = t.num_embeddings ** -0.5
            full = initial_rows(seed, t.name, r0, r0 + rows, t.embedding_dim, bound)
            shard.copy_(full[:, c0:c0 + cols].to(shard.dtype))


def initial_rows(seed: int, name: str, start: int, stop: int, dim: int, bound: float) -> torch.Tensor:
    """Rows [start, stop) of a table's initial values (generated in fixed blocks of rows, so any shard
    of the table gets the same values).

    Blocks are drawn straight into the output and scaled once at the end (same values as scaling each
    block): per-block tensor ops are tiny, and with several OMP threads on a busy CPU each one pays a
    thread barrier, which made a 100k-row table take seconds instead of ~0.05 s."""
    if stop <= start:
        return torch.empty(0, dim)
    out = torch.empty(stop - start, dim)
    base = seed * 1_000_003 + zlib.crc32(name.encode()) * 7919
    g = torch.Generator()
    for block in range(start // INIT_BLOCK_ROWS, (stop - 1) // INIT_BLOCK_ROWS + 1):
        g.manual_seed(base + block)
        first = block * INIT_BLOCK_ROWS
        lo, hi = max(start - first, 0), min(stop - first, INIT_BLOCK_ROWS)
        dst = out[first + lo - start:first + hi - start]
        if lo == 0 and hi == INIT_BLOCK_ROWS:
            torch.rand(INIT_BLOCK_ROWS, dim, generator=g, out=dst)
        else:
            dst.copy_(torch.rand(INIT_BLOCK_ROWS, dim, generator=g)[lo:hi])
    return out.mul_(2 * bound).sub_(bound)


def _local_shards(t) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """(local tensor, (row offset, column offset)) of each shard this rank holds."""
    if hasattr(t, "local_shards"):  # ShardedTensor
        return [(s.tensor, tuple(s.metadata.shard_offsets)) for s in t.local_shards()]
    return [(t, (0, 0))]


class IdHasher:
    """Applies ``id % num_embeddings`` to the features whose table is smaller than their cardinality."""

    def __init__(self, tables: list[EmbeddingBagConfig], spec: FeatureSpec):
        self.caps = {t.feature_names[0]: t.num_embeddings for t in tables
                     if t.num_embeddings < spec.cardinality(t.feature_names[0])}

    def __call__(self, batch: Batch) -> Batch:
        if not self.caps:
            return batch
        kjt = batch.sparse_features
        # numpy: this runs in the loader's prefetch thread, where a torch op could start a second OpenMP team
        caps = np.array([self.caps.get(k, np.iinfo(np.int64).max) for k in kjt.keys()], np.int64)
        values = kjt.values().numpy() % np.repeat(caps, kjt.length_per_key())  # int64 ids (SplitBinaryDataset.read)
        hashed = KeyedJaggedTensor(keys=kjt.keys(), values=torch.from_numpy(values), lengths=kjt.lengths(),
                                   stride=kjt.stride(), length_per_key=kjt.length_per_key(),
                                   offset_per_key=kjt.offset_per_key())
        return Batch(dense_features=batch.dense_features, sparse_features=hashed, labels=batch.labels)
