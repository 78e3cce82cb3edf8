"""Reader of split_binary datasets (ours and NVIDIA DeepLearningExamples' unchanged).

Every file of a split is memory-mapped (remote files first go through ``training.cache``),
and a batch is a handful of contiguous slices: one per file, no per-row Python.

Batching: ``batch_size`` is per rank, a global batch is ``batch_size * world_size``
consecutive rows, and global batch *i* (in a per-epoch seeded order when shuffling) is cut
into ``world_size`` contiguous slices, rank *r* taking slice *r*. The final partial global
batch is dropped (``drop_last``) or split as evenly as possible and padded, so that every
rank yields the same number of rows in every step; padded rows have label -1.0, index 0
and numerical 0 (consumers mask ``labels >= 0``).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torchrec.datasets.utils import Batch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from common.errors import UserError
from feature_spec import FeatureSpec, load, resolve

from .cache import local_copy
from .config import split_error

PAD_LABEL = -1.0


def batch_order(num_batches: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """Order of the global batches in an epoch: a function of (seed, epoch, num_batches) only."""
    if not shuffle:
        return np.arange(num_batches)
    return np.random.default_rng([seed, epoch]).permutation(num_batches)


def rank_slice(start: int, stop: int, rank: int, world_size: int) -> tuple[int, int, int]:
    """Rows [lo, hi) of global batch [start, stop) for ``rank``, and the padded row count per rank."""
    per, extra = divmod(stop - start, world_size)
    lo = start + rank * per + min(rank, extra)
    hi = lo + per + (rank < extra)
    return lo, hi, per + (extra > 0)


class SplitBinaryDataset:
    """One split of a split_binary dataset, read by slicing memory-mapped files."""

    def __init__(self, dataset_uri: str, split: str, *, cache_dir: str | None = None,
                 storage_options: dict | None = None):
        self.uri, self.split = dataset_uri, split
        self._cache_dir, self._storage_options = cache_dir, storage_options or {}
        self.spec: FeatureSpec = load(dataset_uri, **self._storage_options)
        if split not in self.spec.splits:
            raise split_error(dataset_uri, split, self.spec.splits, "use one of those split names.")
        spec = self.spec
        if not spec.is_dataset:
            raise UserError(f"{dataset_uri}: this feature spec describes raw input, not a split_binary dataset. "
                            "Fix: run `dlrmflow preprocess` on it and pass the dataset folder it writes.")
        self._files: dict[str, np.ndarray] = {}
        self._label = self._open(spec.label_feature, "bool", 1)[:, 0]
        self._numerical = self._open(spec.numerical_features[0], self._numerical_dtype(),
                                     len(spec.numerical_features)) if spec.numerical_features else None
        self._categorical = [self._open(f, spec.feature_spec[f].dtype, 1)[:, 0] for f in spec.categorical_features]
        self.num_rows = self._check_rows()

    # ---- opening -----------------------------------------------------------------------
    def _numerical_dtype(self) -> str:
        dtypes = {self.spec.feature_spec[f].dtype or "float16" for f in self.spec.numerical_features}
        if len(dtypes) != 1:
            raise UserError(f"{self.uri}: numerical features have mixed dtypes {sorted(dtypes)} but share one "
                            "numerical.bin. Fix: give every numerical feature the dtype the file is written in.")
        return dtypes.pop()

    def _open(self, feature: str, dtype: str | None, width: int) -> np.ndarray:
        relative, _ = self.spec.file_of(self.split, feature)
        uri = resolve(self.uri, relative)
        try:
            path = local_copy(uri, self._cache_dir, self._storage_options)
            size = os.path.getsize(path)
        except FileNotFoundError:
            raise UserError(f"{uri}: data file is missing (named for '{feature}' in source_spec.{self.split} of "
                            "the feature spec). Fix: re-run preprocessing, or correct the path in the spec.") from None
        dt = np.dtype(dtype or "bool")
        row_bytes = dt.itemsize * width
        if size % row_bytes:
            raise UserError(f"{uri}: size {size} bytes is not a multiple of the row width {row_bytes} bytes "
                            f"({width} x {dt.name}). Fix: the file is truncated or its dtype in the feature spec "
                            "is wrong; re-run preprocessing or correct the dtype.")
        rows = size // row_bytes
        array = np.memmap(path, dtype=dt, mode="r", shape=(rows, width)) if rows else np.empty((0, width), dt)
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
        """Rows [lo, hi) as a Batch, padded to ``rows`` rows (default hi - lo)."""
        n = hi - lo
        rows = n if rows is None else rows
        labels = np.empty(rows, np.float32)
        labels[:n] = self._label[lo:hi]
        labels[n:] = PAD_LABEL
        n_num = len(self.spec.numerical_features)
        dense = np.empty((rows, n_num), np.float32)
        if self._numerical is not None:
            dense[:n] = self._numerical[lo:hi]
        dense[n:] = 0
        values = np.empty((len(self._categorical), rows), np.int64)
        for i, column in enumerate(self._categorical):
            values[i, :n] = column[lo:hi]
        values[:, n:] = 0
        # one id per row and feature, so the per-key lengths and offsets are known here: giving them saves
        # the model from computing them from `lengths` (a device-to-host read on a GPU); numpy, not torch,
        # so that this (prefetch) thread never starts an OpenMP team of its own beside the trainer's
        keys = self.spec.categorical_features
        sparse = KeyedJaggedTensor(keys=keys, values=torch.from_numpy(values.reshape(-1)),
                                   lengths=torch.from_numpy(np.ones(values.size, np.int32)), stride=rows,
                                   length_per_key=[rows] * len(keys),
                                   offset_per_key=[rows * i for i in range(len(keys) + 1)])
        return Batch(dense_features=torch.from_numpy(dense), sparse_features=sparse, labels=torch.from_numpy(labels))


_END = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _produce(source: Iterator, out: queue.Queue, stop: threading.Event) -> None:
    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    try:
        for item in source:
            if not put(item):
                return
        put(_END)
    except BaseException as e:  # handed to the consumer, raised there
        put(_Failure(e))


class Prefetcher:
    """Iterates ``source`` in a background thread, up to ``depth`` items ahead.

    Errors in the thread are raised in the consumer; dropping or closing the iterator stops the thread.
    """

    def __init__(self, source: Iterator, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_produce, args=(source, self._queue, self._stop), daemon=True,
                                        name="dlrmflow-prefetch")
        self._thread.start()

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END or isinstance(item, _Failure):
            self._done = True
            self.close()
            if item is _END:
                raise StopIteration
            raise item.error
        return item

    def close(self) -> None:
        """Stop the background thread and wait for it (it exits within 0.1 s of finishing its batch).

        Waiting matters: a thread still inside a torch op while the interpreter shuts down
        aborts the process ("terminate called without an active exception")."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __del__(self):
        self.close()
