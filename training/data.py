"""Reader of split_binary datasets (ours and NVIDIA DeepLearningExamples' unchanged).

Every file of a split is memory-mapped (remote files first go through ``training.cache``),
and a batch is a handful of contiguous slices: one per file, no per-row Python.

Batching: ``batch_size`` is per rank, a global batch is ``batch_size * world_size``
consecutive rows, and global batch *i* (in a per-epoch seeded order when shuffling) is cut
into ``world_size`` contiguous slices, rank *r* taking slice *r*. The final partial global
batch is dropped (``drop_last``) or split as evenly as possible and padded, so that every
rank yields the same number of rows in every step; padded rows have label -1.0, index 0
and numerical 0 (consumers mask ``labels >= 0``).

Multi-valued categoricals (``feature_spec``'s layout): a fixed-hotness feature's rows are a
``rows * N`` slice of its file, a variable-length one's are ``offsets[lo:hi + 1]`` and one slice of
its values file. The KeyedJaggedTensor then carries the real lengths (N, or the offsets' differences;
0 for a padded row): no padding to the longest list.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from common.errors import UserError
from common.prefetch import Prefetcher
from feature_spec import FeatureSpec, file_uri, load

from .batches import batch_order, rank_slice
from .cache import local_copy
from .config import split_error

PAD_LABEL = -1.0


class SplitBinaryDataset:
    """One split of a split_binary dataset, read by slicing memory-mapped files."""

    def __init__(self, dataset_uri: str, split: str, *, cache_dir: str | None = None,
                 cache_max_bytes: int | None = None, storage_options: dict | None = None):
        self.uri, self.split = dataset_uri, split
        self._cache_dir, self._cache_max_bytes = cache_dir, cache_max_bytes
        self._storage_options = storage_options or {}
        self.spec: FeatureSpec = load(dataset_uri, **self._storage_options)
        if split not in self.spec.splits:
            raise split_error(dataset_uri, split, self.spec.splits, "use one of those split names.")
        spec = self.spec
        if not spec.is_dataset:
            raise UserError(f"{dataset_uri}: this feature spec describes raw input, not a split_binary dataset. "
                            "Fix: run `dlrmflow preprocess` on it and pass the dataset folder it writes.")
        self._files: dict[str, np.ndarray] = {}   # the files whose row count is the split's
        self._sizes = spec.file_sizes(split)   # bytes per file from metadata.rows (none: NVIDIA's datasets)
        self._label = self._open(spec.label_feature, "bool", 1)[:, 0]
        self._numerical = self._open(spec.numerical_features[0], self._numerical_dtype(),
                                     len(spec.numerical_features)) if spec.numerical_features else None
        # per categorical: (rows x N array, None), or for a variable-length list (values, offsets [rows + 1])
        self._categorical: list[tuple[np.ndarray, np.ndarray | None]] = [
            self._open_categorical(f) for f in spec.categorical_features]
        self.multi_valued = any(spec.feature_spec[f].multi_valued for f in spec.categorical_features)
        self.num_rows = self._check_rows()
        self.start = 0   # the split's first row this dataset reads (``rows``: a range of the split)

    def rows(self, start: int, stop: int) -> "SplitBinaryDataset":
        """Rows [start, stop) of this split as a dataset of their own (sharing the open files): it batches, shards
        over the ranks and reads them exactly as a split of ``stop - start`` rows (the holdout of a training
        split: its first rows train, its last rows validate)."""
        if not 0 <= start <= stop <= self.num_rows:
            raise ValueError(f"rows [{start}, {stop}) of split '{self.split}' ({self.num_rows} rows)")
        view = copy.copy(self)
        view.start, view.num_rows = self.start + start, stop - start
        return view

    # ---- opening -----------------------------------------------------------------------
    def _numerical_dtype(self) -> str:
        dtypes = {self.spec.feature_spec[f].dtype or "float16" for f in self.spec.numerical_features}
        if len(dtypes) != 1:
            raise UserError(f"{self.uri}: numerical features have mixed dtypes {sorted(dtypes)} but share one "
                            "numerical.bin. Fix: give every numerical feature the dtype the file is written in.")
        return dtypes.pop()

    def _open_categorical(self, feature: str) -> tuple[np.ndarray, np.ndarray | None]:
        f = self.spec.feature_spec[feature]
        if not f.variable_length:
            return self._open(feature, f.dtype, f.values_per_row), None
        values = self._open(feature, f.dtype, 1, rows_file=False)[:, 0]
        offsets_file = self.spec.offsets_file_of(self.split, feature)
        offsets = self._open(feature, "int64", 1, relative=offsets_file, rows_file=False)[:, 0]
        uri = file_uri(self.uri, offsets_file)
        if not len(offsets) or offsets[0] != 0 or offsets[-1] != len(values):
            first, last = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (None, None)
            raise UserError(f"{uri}: row offsets of '{feature}' must start at 0 and end at the number of values "
                            f"({len(values)}), but start at {first} and end at {last}. Fix: the values or offsets "
                            "file is truncated or from another run; re-run preprocessing.")
        self._files[uri] = offsets[1:]   # rows + 1 entries: the split's row count is one less
        return values, offsets

    def _open(self, feature: str, dtype: str | None, width: int, *, relative: str | None = None,
              rows_file: bool = True) -> np.ndarray:
        """Memory-map the feature's file (``relative``: another of its files) as [rows, width]; ``rows_file``:
        its row count must equal the split's."""
        relative = relative or self.spec.file_of(self.split, feature)[0]
        uri = file_uri(self.uri, relative)
        try:
            path = local_copy(uri, self._cache_dir, self._storage_options, self._cache_max_bytes)
            size = os.path.getsize(path)
        except FileNotFoundError:
            raise UserError(f"{uri}: data file is missing (named for '{feature}' in source_spec.{self.split} of "
                            "the feature spec). Fix: re-run preprocessing, or correct the path in the spec.") from None
        expected = self._sizes.get(relative)
        if expected is not None and size != expected:
            rows = (self.spec.metadata.get("rows") or {}).get(self.split)
            raise UserError(f"{uri}: {size} bytes, but the dataset's metadata ({rows} rows in split "
                            f"'{self.split}') needs {expected} bytes. Fix: the file is truncated or was replaced; "
                            "delete the dataset folder and run preprocessing again (`dlrmflow inspect DATASET "
                            "--verify` checks every file).")
        dt = np.dtype(dtype or "bool")
        row_bytes = dt.itemsize * width
        if size % row_bytes:
            raise UserError(f"{uri}: size {size} bytes is not a multiple of the row width {row_bytes} bytes "
                            f"({width} x {dt.name}). Fix: the file is truncated or its dtype in the feature spec "
                            "is wrong; re-run preprocessing or correct the dtype.")
        rows = size // row_bytes
        array = np.memmap(path, dtype=dt, mode="r", shape=(rows, width)) if rows else np.empty((0, width), dt)
        if rows_file:
            self._files[uri] = array
        return array

    def _check_rows(self) -> int:
        counts = {uri: len(a) for uri, a in self._files.items()}
        first, rows = next(iter(counts.items()))
        for uri, n in counts.items():
            if n != rows:
                raise UserError(f"{uri}: has {n} rows but {first} has {rows}; all files of split '{self.split}' "
                                "must have the same number of rows. Fix: re-run preprocessing for this dataset.")
        return rows

    # ---- batching ----------------------------------------------------------------------
    def num_batches(self, batch_size: int, world_size: int = 1, drop_last: bool = False) -> int:
        """Number of global steps in one epoch."""
        rows = batch_size * world_size
        return self.num_rows // rows if drop_last else -(-self.num_rows // rows)

    def batches(self, batch_size: int, *, rank: int = 0, world_size: int = 1, epoch: int = 0,
                shuffle: bool = False, seed: int = 0, drop_last: bool = False, start_step: int = 0,
                prefetch: int = 2, transform: Callable[[Batch], Batch] | None = None,
                pin_memory: bool = False) -> Iterator[Batch]:
        """This rank's batches of one epoch, from step ``start_step`` on, prefetched in a thread.

        ``transform`` (e.g. id hashing) runs in that thread too; ``pin_memory`` pins each batch there
        (for a CUDA device: the trainer's copies to it are then truly asynchronous)."""
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size or start_step < 0:
            raise ValueError(f"bad batching: batch_size={batch_size}, rank={rank}, world_size={world_size}, "
                             f"start_step={start_step}")
        steps = self.num_batches(batch_size, world_size, drop_last)
        order = batch_order(steps, shuffle=shuffle, seed=seed, epoch=epoch)[start_step:]
        rows = batch_size * world_size
        source = (self.read(*rank_slice(g * rows, min((g + 1) * rows, self.num_rows), rank, world_size))
                  for g in order.tolist())
        if transform is not None:
            source = map(transform, source)
        if pin_memory:
            source = (b.pin_memory() for b in source)
        return Prefetcher(source, prefetch) if prefetch > 0 else source

    def read(self, lo: int, hi: int, rows: int | None = None) -> Batch:
        """Rows [lo, hi) (of this dataset's rows) as a Batch, padded to ``rows`` rows (default hi - lo)."""
        n = hi - lo
        rows = n if rows is None else rows
        lo, hi = lo + self.start, hi + self.start
        labels = np.empty(rows, np.float32)
        labels[:n] = self._label[lo:hi]
        labels[n:] = PAD_LABEL
        n_num = len(self.spec.numerical_features)
        dense = np.empty((rows, n_num), np.float32)
        if self._numerical is not None:
            dense[:n] = self._numerical[lo:hi]
        dense[n:] = 0
        sparse = self._jagged(lo, hi, rows) if self.multi_valued else self._one_hot(lo, hi, rows)
        return Batch(dense_features=torch.from_numpy(dense), sparse_features=sparse, labels=torch.from_numpy(labels))

    def _one_hot(self, lo: int, hi: int, rows: int) -> KeyedJaggedTensor:
        """One id per row and feature (padded rows: id 0), so the per-key lengths and offsets are known here:
        giving them saves the model from computing them from `lengths` (a device-to-host read on a GPU);
        numpy, not torch, so that this (prefetch) thread never starts an OpenMP team of its own beside the
        trainer's."""
        n = hi - lo
        values = np.empty((len(self._categorical), rows), np.int64)
        for i, (column, _) in enumerate(self._categorical):
            values[i, :n] = column[lo:hi, 0]
        values[:, n:] = 0
        keys = self.spec.categorical_features
        return KeyedJaggedTensor(keys=keys, values=torch.from_numpy(values.reshape(-1)),
                                 lengths=torch.from_numpy(np.ones(values.size, np.int32)), stride=rows,
                                 length_per_key=[rows] * len(keys),
                                 offset_per_key=[rows * i for i in range(len(keys) + 1)])

    def _jagged(self, lo: int, hi: int, rows: int) -> KeyedJaggedTensor:
        """Every feature's values of rows [lo, hi) with their real lengths (a one-hot feature: 1, its padded
        rows id 0 as in ``_one_hot``; a list feature: N or the offsets' differences, its padded rows 0)."""
        n = hi - lo
        values, lengths = [], np.zeros((len(self._categorical), rows), np.int32)
        for i, (column, offsets) in enumerate(self._categorical):
            if offsets is not None:
                bounds = np.asarray(offsets[lo:hi + 1])
                lengths[i, :n] = np.diff(bounds)
                if (lengths[i, :n] < 0).any():
                    raise UserError(f"{self.uri}: the row offsets of '{self.spec.categorical_features[i]}' in split "
                                    f"'{self.split}' decrease within rows {lo}..{hi}. Fix: the offsets file is "
                                    "corrupt; re-run preprocessing.")
                values.append(column[bounds[0]:bounds[-1]])
            elif column.shape[1] == 1:   # one-hot: padded rows keep id 0, as in _one_hot
                lengths[i] = 1
                values += [column[lo:hi, 0], np.zeros(rows - n, column.dtype)]
            else:
                lengths[i, :n] = column.shape[1]
                values.append(column[lo:hi].reshape(-1))
        per_key = lengths.sum(axis=1, dtype=np.int64)
        keys = self.spec.categorical_features
        return KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate(values).astype(np.int64)),
                                 lengths=torch.from_numpy(lengths.reshape(-1)), stride=rows,
                                 length_per_key=per_key.tolist(),
                                 offset_per_key=[0, *np.cumsum(per_key).tolist()])

    def pooling_factors(self) -> dict[str, float]:
        """``spec_pooling_factors`` of this split, a variable-length list the metadata does not record taken
        from its files (values / rows)."""
        out = spec_pooling_factors(self.spec, self.split)
        for f, (values, offsets) in zip(self.spec.categorical_features, self._categorical):
            if offsets is not None and f not in out:
                out[f] = len(values) / max(len(offsets) - 1, 1)
        return out


def spec_pooling_factors(spec: FeatureSpec, split: str) -> dict[str, float]:
    """Mean values per row of each multi-valued categorical of ``split`` (the planner's pooling factor): the
    dataset metadata's ``list_lengths`` (values / rows), else a fixed hotness N. One-hot features, and
    variable-length ones the metadata does not record, are left out (TorchRec's default factor is 1)."""
    recorded = (spec.metadata.get("list_lengths") or {}).get(split) or {}
    out = {}
    for f in spec.categorical_features:
        feature, stats = spec.feature_spec[f], recorded.get(f) or {}
        if not feature.multi_valued:
            continue
        if stats.get("rows"):
            out[f] = stats["values"] / stats["rows"]
        elif feature.values_per_row is not None:
            out[f] = float(feature.values_per_row)
    return out
