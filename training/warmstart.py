"""Warm start: initialise a fresh run's sharded model from a checkpoint of an earlier run (``init_from``).

``warm_start(trainer, init)`` runs on every rank after the Trainer is built and before its first step
(``Trainer.train`` calls it for a run that starts fresh; a run resuming from its own checkpoint never
re-applies it). It works whatever the two runs' sharding plans and world sizes: each rank reads the old
checkpoint's tensors unsharded (torch.distributed.checkpoint into plain tensors, ``no_dist``, one table
at a time, through fsspec: local or s3://) and writes the rows of the shards it owns.

- Dense layers (bottom/top MLP, DCN): copied; a shape that differs is a UserError naming the layer.
- Embedding rows: matched by RAW VALUE through both datasets' ``vocab/<feature>.parquet`` (value, count,
  index): a value in both vocabularies keeps its learned row at its new index (``index_map``); values
  only in the new vocabulary keep the normal (cold) initialisation. Index 0 (missing and below-threshold
  values) keeps the OLD index-0 row: it stands for the same thing on both days (the rare/unknown
  bucket), it is the best-trained row there is for the many rare values, and a fresh row would give
  every unseen value a random embedding (with an identical vocabulary, a warm start then reproduces the
  old model exactly). Hash-bucket features are copied as they are when the bucket count matches, else
  re-initialised (a warning). Features with no stored vocabulary (an NVIDIA-preprocessed dataset) are
  copied by index when the table sizes match (the ids are taken to mean the same values; a warning).
- Optimizer state (``init.optimizer_state``): ``carry`` (the default, see benchmarks/RESULTS.md "Warm
  start") remaps the embedding accumulators (row-wise Adagrad ``momentum1``) like the rows, new rows
  starting at zero, and copies the dense optimizer's state; ``reset`` starts the optimizers fresh.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import numpy as np
import polars as pl
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from common.errors import UserError
from common.store import filesystem
from feature_spec import FeatureSpec, join_uri, load as load_spec
from training.checkpoint import Checkpointer, checkpoint_of
from training.config import InitFrom
from training.rundir import RunDir

MODEL, OPTIM = "model", "optim"


def warm_start(trainer, init: InitFrom) -> dict[str, Any]:
    """Initialise ``trainer``'s model (and optimizer state) from checkpoint ``init.checkpoint`` of run
    ``init.run``; call on every rank. Returns a summary: ``{"run", "step", "tables": {table: rows
    copied}, "warnings", "seconds"}`` (also printed by rank 0)."""
    start = time.perf_counter()
    old_run = RunDir(init.run)
    if not old_run.has_config():
        raise UserError(f"init_from: {old_run} is not a training run (no {RunDir.CONFIG} there). "
                        "Fix: set init_from to the folder of a trained run (RUN or RUN@best|latest|STEP), or to null.")
    found = checkpoint_of(old_run, init.checkpoint)
    step, warnings = found["step"], [found["warning"]] if found["warning"] else []
    where = f"init_from {old_run}@{step}"
    Checkpointer(old_run).verify(step)   # every rank calls warm_start: they share the hashing
    reader = _Reader(Checkpointer(old_run).uri(step), old_run.options, where)
    old_spec = _dataset_spec(found["dataset"], where)

    carry = init.optimizer_state == "carry"
    if carry:
        trainer.optimizer.init_state()  # materialise the lazy optimizer state (as a checkpoint load does)
    state = {MODEL: trainer.dmp.state_dict(), OPTIM: trainer.optimizer.state_dict() if carry else {}}
    flat = dict(_tensors(state))
    tables = {t.name: t for t in trainer.tables}
    by_table: dict[str, list[str]] = {name: [] for name in tables}
    dense = []
    for key in sorted(flat):
        name = _table_of(key, tables)
        (by_table[name] if name else dense).append(key)

    _copy_dense(flat, [k for k in dense if k.startswith(MODEL + ".")], reader, where)
    if carry:
        _copy_optimizer_dense(flat, [k for k in dense if k.startswith(OPTIM + ".")], reader, warnings)
    copied = {}
    for name, keys in by_table.items():
        if keys:  # this rank holds (part of) the table
            copied[name] = _copy_table(flat, keys, tables[name], trainer, old_spec, found["dataset"], reader,
                                       where, warnings)
    trainer.dmp.load_state_dict(state[MODEL])
    if carry:
        trainer.optimizer.load_state_dict(state[OPTIM])
    summary = {"run": old_run.uri, "step": step, "tables": copied, "warnings": warnings,
               "seconds": time.perf_counter() - start}
    if trainer.env.is_main:
        rows = ", ".join(f"{n} {c}/{tables[n].num_embeddings}" for n, c in copied.items())
        print(f"warm start from {old_run} step {step} ({summary['seconds']:.1f} s, optimizer state "
              f"{init.optimizer_state}): rows copied by value: {rows}", flush=True)
        for w in warnings:
            print(f"warning: warm start: {w}", flush=True)
    return summary


# ---- the vocabularies ----------------------------------------------------------------------
def index_map(old: pl.DataFrame, new: pl.DataFrame, new_rows: int) -> np.ndarray:
    """For each index of the new vocabulary (``value, index`` columns), the old vocabulary's index of the
    same raw value, -1 where the value is new; index 0 maps to 0 (see the module doc). One join, no loop."""
    if old["value"].dtype != new["value"].dtype:  # e.g. an integer column read as text on one day
        old, new = old.with_columns(pl.col("value").cast(pl.String)), new.with_columns(pl.col("value").cast(pl.String))
    joined = new.filter(pl.col("index") > 0).select("value", "index").join(
        old.filter(pl.col("index") > 0).select("value", pl.col("index").alias("old")), on="value", how="inner")
    out = np.full(new_rows, -1, dtype=np.int64)
    out[joined["index"].to_numpy()] = joined["old"].to_numpy()
    out[0] = 0
    return out


def _row_map(feature: str, old_rows: int, new_rows: int, old_spec: FeatureSpec, old_dataset: str,
             new_spec: FeatureSpec, new_dataset: str, warnings: list[str]) -> np.ndarray | None:
    """New row -> old row (-1: keep the fresh initialisation) of one feature's table, or None (all fresh)."""
    old_vocab, new_vocab = _vocab_file(old_spec, feature), _vocab_file(new_spec, feature)
    old_hash = (old_spec.metadata.get("hash_buckets") or {}).get(feature)
    new_hash = (new_spec.metadata.get("hash_buckets") or {}).get(feature)
    if old_vocab and new_vocab:
        new_card = new_spec.cardinality(feature)
        idx = index_map(_read_vocab(old_dataset, old_vocab), _read_vocab(new_dataset, new_vocab), new_card)
        if old_rows == old_spec.cardinality(feature) and new_rows == new_card:
            return idx
        if old_rows == new_rows and np.array_equal(idx, np.arange(new_card)):  # capped, same vocabulary
            return np.arange(new_rows)
        warnings.append(f"feature '{feature}': max_table_size hashes its indices and the vocabulary changed; "
                        "its table is initialised afresh")
        return None
    if old_hash is not None and new_hash is not None:
        if old_hash == new_hash and old_rows == new_rows:
            return np.arange(new_rows)
        warnings.append(f"feature '{feature}': hash_buckets changed ({old_hash} -> {new_hash}); "
                        "its table is initialised afresh")
        return None
    if not (old_vocab or new_vocab or old_hash or new_hash):
        if old_rows == new_rows:
            warnings.append(f"feature '{feature}': no stored vocabulary; rows copied by index (the ids are "
                            "taken to mean the same values in both datasets)")
            return np.arange(new_rows)
        warnings.append(f"feature '{feature}': no stored vocabulary and {old_rows} -> {new_rows} rows; "
                        "its table is initialised afresh")
        return None
    warnings.append(f"feature '{feature}': encoded differently (vocabulary vs hash buckets) in the two datasets; "
                    "its table is initialised afresh")
    return None


def _vocab_file(spec: FeatureSpec, feature: str) -> str | None:
    return (spec.metadata.get("vocab") or {}).get(feature)


def _read_vocab(dataset: str, rel: str) -> pl.DataFrame:
    uri = join_uri(dataset, rel)
    try:
        fs, path = filesystem(uri)
        return pl.read_parquet(fs.cat_file(path), columns=["value", "index"])
    except FileNotFoundError:
        raise UserError(f"init_from: {uri}: vocabulary missing. Fix: restore the dataset folder (re-run "
                        "preprocessing for it), or set init_from to null.") from None


def _dataset_spec(dataset: str, where: str) -> FeatureSpec:
    try:
        return load_spec(dataset)
    except UserError as e:
        raise UserError(f"{where}: the old run's dataset cannot be read ({e}). Fix: restore that dataset "
                        "(its vocabularies map the old rows to the new ones), or set init_from to null.") from None


# ---- copying ---------------------------------------------------------------------------------
class _Reader:
    """Plain, unsharded tensors of an old checkpoint (each rank reads what it asks for, no collectives)."""

    def __init__(self, uri: str, options: dict[str, Any], where: str):
        self.uri, self.options, self.where = uri, options, where
        md = FsspecReader(uri, **options).read_metadata().state_dict_metadata
        self.shapes = {k: (tuple(v.size), v.properties.dtype) for k, v in md.items()
                       if isinstance(v, TensorStorageMetadata)}

    def read(self, keys: list[str]) -> dict[str, torch.Tensor]:
        state = {k: torch.empty(self.shapes[k][0], dtype=self.shapes[k][1]) for k in keys}
        if state:
            dcp.load(state, storage_reader=FsspecReader(self.uri, **self.options), no_dist=True)
        return state


def _copy_dense(flat: dict, keys: list[str], reader: _Reader, where: str) -> None:
    for key in keys:
        layer = key.split(".", 2)[-1]  # without "model.model."
        if key not in reader.shapes:
            raise UserError(f"{where}: layer '{layer}' of this model is not in the checkpoint. Fix: use the "
                            "old run's arch settings (arch.interaction, arch.bottom_mlp, arch.top_mlp, "
                            "arch.dcn_*), or set init_from to null.")
        new, old = tuple(flat[key].shape), reader.shapes[key][0]
        if new != old:
            raise UserError(f"{where}: layer '{layer}' has shape {list(old)} in the checkpoint but {list(new)} in "
                            "this model. Fix: use the old run's arch settings (arch.bottom_mlp, arch.top_mlp, "
                            "arch.dcn_*) and the same numerical and categorical features, or set init_from to null.")
    for key, value in reader.read(keys).items():
        _write_rows(flat[key], value, None)


def _copy_optimizer_dense(flat: dict, keys: list[str], reader: _Reader, warnings: list[str]) -> None:
    same = [k for k in keys if k in reader.shapes and reader.shapes[k][0] == tuple(flat[k].shape)]
    if len(same) < len(keys):
        warnings.append(f"{len(keys) - len(same)} dense optimizer state tensors have no counterpart in the "
                        "checkpoint (another optimizer?): they start fresh")
    for key, value in reader.read(same).items():
        _write_rows(flat[key], value, None)


def _copy_table(flat: dict, keys: list[str], table, trainer, old_spec: FeatureSpec, old_dataset: str,
                reader: _Reader, where: str, warnings: list[str]) -> int:
    """Copy one table's rows (and its optimizer state's rows) that this rank holds; returns rows mapped."""
    weight = next(k for k in keys if k.startswith(MODEL + "."))
    feature = table.feature_names[0]
    if weight not in reader.shapes:
        warnings.append(f"feature '{feature}' is new (no table {table.name} in the checkpoint): initialised afresh")
        return 0
    (old_rows, old_dim), new_dim = reader.shapes[weight][0], table.embedding_dim
    if old_dim != new_dim:
        raise UserError(f"{where}: embedding table '{table.name}' has shape [{old_rows}, {old_dim}] in the "
                        f"checkpoint but [{table.num_embeddings}, {new_dim}] in this model. Fix: set "
                        f"arch.embedding_dim={old_dim} (the old run's), or set init_from to null.")
    rows = _row_map(feature, old_rows, table.num_embeddings, old_spec, old_dataset, trainer.spec,
                    trainer.cfg.dataset, warnings)
    if rows is None:
        return 0
    rows = np.where(rows < old_rows, rows, -1)  # an old index beyond a capped old table: fresh
    sources = {k: _state_source(k, flat[k], reader, weight) for k in keys if k != weight}
    old = reader.read([weight] + sorted({s for s, _ in sources.values() if s}))
    _write_rows(flat[weight], old[weight], rows)
    for key, (src, convert) in sources.items():
        if src is None:
            continue  # a state entry with no counterpart: fresh
        value = convert(old[src])
        _write_rows(flat[key], value, rows if value.dim() and value.shape[0] == old_rows else None)
    return int((rows >= 0).sum())


def _state_source(key: str, new: torch.Tensor, reader: _Reader, weight: str):
    """(old key, conversion) of a table's optimizer state entry, or (None, None). Row-wise Adagrad keeps one
    accumulator per row (``momentum1``); a data-parallel table's dense Adagrad one per value (``sum``): a
    table that changed between the two plans converts (row mean, or the row's value repeated)."""
    if key in reader.shapes:
        return key, lambda t: t
    param = OPTIM + ".state." + weight.split(".", 1)[1]
    if key.endswith(".momentum1") and param + ".sum" in reader.shapes:
        return param + ".sum", lambda t: t.float().mean(dim=1)
    if key.endswith(".sum") and new.dim() == 2:
        old = next((k for k in reader.shapes if k.startswith(param + ".") and k.endswith(".momentum1")), None)
        if old:
            return old, lambda t: t[:, None].expand(-1, new.shape[1])
    return None, None


def _write_rows(dst, src: torch.Tensor, rows: np.ndarray | None) -> None:
    """Write ``src`` (a full, unsharded tensor) into the local shards of ``dst`` (a ShardedTensor or a plain
    tensor): row ``i`` of the destination gets source row ``rows[i]`` (-1: unchanged), or the same row."""
    for shard, offsets in _local_shards(dst):
        if shard.dim() == 0:
            shard.copy_(src.to(shard.dtype))
            continue
        r0, n = offsets[0], shard.shape[0]
        cols = tuple(slice(o, o + s) for o, s in zip(offsets[1:], shard.shape[1:]))
        part = src[(slice(None),) + cols] if cols else src
        if rows is None:
            shard.copy_(part[r0:r0 + n].to(shard.dtype))
            continue
        sel = rows[r0:r0 + n]
        have = np.nonzero(sel >= 0)[0]
        if len(have):
            shard[torch.from_numpy(have)] = part[torch.from_numpy(sel[have])].to(shard.dtype)


def _local_shards(t) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    if hasattr(t, "local_shards"):  # ShardedTensor
        return [(s.tensor, tuple(s.metadata.shard_offsets)) for s in t.local_shards()]
    return [(t, (0,) * t.dim())]


def _tensors(node, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(DCP key, tensor) of every tensor in a nested state dict (the keys DCP stores them under)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, torch.Tensor):
        yield prefix, node


def _table_of(key: str, tables: dict) -> str | None:
    """The table whose weight (or optimizer state of it) ``key`` is, else None."""
    if ".embedding_bags." not in key:
        return None
    name = key.split(".embedding_bags.", 1)[1].split(".", 1)[0]
    return name if name in tables else None
