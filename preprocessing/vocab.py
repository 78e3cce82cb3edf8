"""Vocabularies: value counts per file (over the counted splits), merged into value -> index tables.

Index semantics (NVIDIA's): values with count >= T get 1..K by descending count, ties by
ascending value; 0 is missing or rare; T=0 and T=1 both keep every seen value; cardinality K+1.

The hash tables on integer values (a block's dictionary codes, count sums, vocabulary lookups) and the gathers and
counts of a block's codes (``take``, ``bincount``) run in the C extension ``preprocessing._vocab`` where it is built,
else in numpy (same results, several times slower at Kaggle-like cardinalities). A list feature's column (a polars
List) counts and looks up its elements (see ``lists``; the C list parse codes them like a one-hot column's values,
see ``fastparse``).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from common.errors import UserError
from common.store import open_uri
from feature_spec import join_uri, path_segment

from . import writer
from .lists import Flat, flat_codes, flatten

log = logging.getLogger(__name__)

try:
    from . import _vocab   # native hash tables (optional: numpy does the same work where it is not built)
except ImportError as e:
    _vocab = None
    log.debug("preprocessing._vocab is not available (%s); vocabulary hashing runs in numpy", e)


def native() -> bool:
    """Whether the C extension ``preprocessing._vocab`` is built (else numpy does its work)."""
    return _vocab is not None


def _native_codes(codes: np.ndarray) -> bool:
    """Whether ``_vocab``'s gather and bincount take these codes as they are (uint32; uint8/uint16 from VERSION 3)."""
    if _vocab is None or not hasattr(_vocab, "gather"):   # an older build of the extension has neither
        return False
    return codes.dtype == np.uint32 or (codes.dtype in (np.uint8, np.uint16) and getattr(_vocab, "VERSION", 1) >= 3)


def take(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]`` for unsigned codes, by ``_vocab.gather`` where built (no intp copy of the codes)."""
    if not _native_codes(codes) or table.dtype.itemsize not in (1, 2, 4, 8):
        return table[codes]
    out = np.empty(len(codes), table.dtype)
    _vocab.gather(np.ascontiguousarray(table), np.ascontiguousarray(codes), out)
    return out


def bincount(codes: np.ndarray, length: int, weights: np.ndarray | None = None) -> np.ndarray:
    """``np.bincount(codes, weights, minlength=length)`` as int64 (``weights``: int64, summed exactly) of codes below
    ``length``, by ``_vocab.bincount`` for unsigned codes where built (no intp copy of the codes, no float64
    weights); a code not below ``length`` is a ValueError there."""
    if not _native_codes(codes) or (weights is not None and getattr(_vocab, "VERSION", 1) < 3):
        if weights is None:
            return np.bincount(codes, minlength=length)
        counts = np.zeros(length, np.int64)
        np.add.at(counts, codes, weights)   # exact (np.bincount's float64 weights round above 2^53)
        return counts
    counts = np.zeros(length, np.int64)
    _vocab.bincount(np.ascontiguousarray(codes), counts,
                    None if weights is None else np.ascontiguousarray(weights, dtype=np.int64))
    return counts


# re-aggregate pending per-batch counts once they outgrow the running totals (at least _COMPACT_MIN rows) by this
# factor
_COMPACT_FACTOR, _COMPACT_MIN = 4, 1 << 16
# a sum of count tables that keeps more than this share of their rows did not pay: the feature's values are mostly
# distinct, and its last pending tables are written as they are (the vocabulary merge sums them anyway). C21 of
# MLPerf-like rows: a 250k-row file's 6.4M block counts sum to 5.4M; left unsummed, the count stage of 1M rows
# takes 1.1 CPU s instead of 2.4, the vocabulary merge 0.25 more
_PAYS = 0.8


class Counter:
    """Running value counts of some categorical columns, bounded by their vocabulary size."""

    def __init__(self, features: list[str], compact_factor: int = _COMPACT_FACTOR):
        self.pending: dict[str, list[pl.DataFrame]] = {f: [] for f in features}
        self.sizes = dict.fromkeys(features, 0)
        self.factor = compact_factor
        self.pays = dict.fromkeys(features, True)   # whether the feature's last sum shrank its tables enough

    def add(self, df: pl.DataFrame, dictionaries: dict[str, np.ndarray] | None = None) -> None:
        """Count the non-missing values of each feature in ``df`` (see ``block_counts``)."""
        self.merge(block_counts(df, list(self.pending), dictionaries))

    def merge(self, found: dict[str, pl.DataFrame]) -> None:
        """Add (value, count) tables of some features (``block_counts``: one block's, computed in any thread)."""
        for f, counts in found.items():
            parts = self.pending[f]
            parts.append(counts)
            if sum(map(len, parts)) > self.factor * max(self.sizes[f], _COMPACT_MIN):
                self._compact(f)

    def _compact(self, f: str) -> pl.DataFrame:
        parts = self.pending[f]
        if len(parts) == 1:   # one part is already summed
            merged = parts[0]
        else:
            merged = sum_counts(parts)
            self.pays[f] = len(merged) < _PAYS * sum(map(len, parts))
        self.pending[f], self.sizes[f] = [merged], len(merged)
        return merged

    def write(self, folder: Path) -> None:
        """One Arrow IPC file of (value, count) per feature: summed by value, except where the feature's last sum
        did not pay (``_PAYS``): there a value may be in several rows (the features listed in ``_REPEATED``)."""
        repeated = []
        for f, parts in self.pending.items():
            if self.pays[f]:
                table = self._compact(f)
            else:
                table = pl.concat(parts, rechunk=False)
                repeated.append(f)
            table.write_ipc(_counts_file(folder, f), compression="uncompressed")
        if repeated:
            (folder / _REPEATED).write_text(json.dumps(repeated))


def block_counts(df: pl.DataFrame, features: list[str],
                 dictionaries: dict[str, np.ndarray] | None = None) -> dict[str, pl.DataFrame]:
    """(value, count) of the non-missing values of each feature in ``df`` (all features in one parallel pass); a
    feature in ``dictionaries`` holds codes into it (see ``dictionary_encode``) and is counted by a bincount."""
    dictionaries = dictionaries or {}
    lazy = df.lazy()
    grouped = [f for f in features if f not in dictionaries]
    queries = [lazy.select(_elements(f, df[f].dtype)).drop_nulls().group_by("value")
               .agg(pl.len().cast(pl.Int64).alias("count")) for f in grouped]
    found = dict(zip(grouped, pl.collect_all(queries))) if queries else {}
    for f in features:
        if f in dictionaries:
            values = dictionaries[f]
            n = bincount(_codes(df[f]), len(values) + 1)[1:].astype(np.int64, copy=False)
            seen = n > 0   # all but the codes of rows filtered out
            if not seen.all():
                values, n = values[seen], n[seen]
            found[f] = pl.DataFrame({"value": values, "count": n})
    return found


def _codes(column: pl.Series) -> np.ndarray:
    """A coded column's codes (a list column's: all its elements')."""
    return flat_codes(column).values if isinstance(column.dtype, pl.List) else column.to_numpy()


def _elements(f: str, dtype: pl.DataType) -> pl.Expr:
    """A column's values to count: a list column's elements, one a row."""
    col = pl.col(f)
    return (col.explode(empty_as_null=False, keep_nulls=False) if isinstance(dtype, pl.List) else col).alias("value")


def _counts_file(folder: Path, feature: str) -> Path:
    return folder / f"{path_segment(feature)}.arrow"


# a count folder's list of the features whose tables may hold a value in several rows (absent: none do)
_REPEATED = "repeated.json"


def read_counts(folder: Path, feature: str, summed: bool = False) -> pl.DataFrame:
    """The (value, count) table of ``feature`` in a count folder (written by ``Counter.write``): a value may be
    in several rows, unless ``summed`` (then summed here where the folder left repeats)."""
    table = pl.read_ipc(_counts_file(folder, feature))
    if summed and (folder / _REPEATED).exists() and feature in json.loads((folder / _REPEATED).read_text()):
        table = sum_counts([table])
    return table


def sum_counts(parts: list[pl.DataFrame], threads: int = 1) -> pl.DataFrame:
    """(value, count) tables summed by value, in no particular order: integer values by the native radix-partitioned
    sum (``_vocab.sum_by_key``, in ``threads`` threads; 5-8x a polars group_by on 2 cores), else a polars group_by."""
    if not _sums_natively(parts[0]["value"].dtype):
        return pl.concat(parts).group_by("value").agg(pl.col("count").sum())
    dtype = parts[0]["value"].dtype
    if getattr(_vocab, "VERSION", 1) < 5:   # an older build: its dictionary codes and a bincount
        distinct, codes = codes_of(np.concatenate([p["value"].to_numpy() for p in parts]))
        counts = np.concatenate([p["count"].to_numpy() for p in parts])
        return pl.DataFrame({"value": distinct, "count": bincount(codes, len(distinct) + 1, counts)[1:]})
    values, counts = _chunks(parts)
    n = sum(map(len, values))
    out_values, out_counts = np.empty(n, values[0].dtype if values else np.int64), np.empty(n, np.int64)
    k = _vocab.sum_by_key(values, counts, out_values, out_counts, threads)
    return pl.DataFrame({"value": out_values[:k], "count": out_counts[:k]}).with_columns(pl.col("value").cast(dtype))


def _chunks(parts: list[pl.DataFrame]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The (value, count) tables' columns as numpy views of their chunks (values of 1 or 2 bytes widened)."""
    values, counts = [], []
    for p in parts:
        if p["value"].n_chunks() != p["count"].n_chunks():
            p = p.rechunk()
        for v, c in zip(p["value"].get_chunks(), p["count"].get_chunks()):
            if len(v):
                v = v.to_numpy()
                values.append(v if v.dtype.itemsize in (4, 8) else v.astype(np.int64))
                counts.append(c.to_numpy().astype(np.int64, copy=False))
    return values, counts


def _sums_natively(dtype: pl.DataType) -> bool:
    return _vocab is not None and dtype.is_integer()


def build_many(features: dict[str, tuple[list[Path], int, pl.DataType]],
               threads: int = 1) -> dict[str, pl.DataFrame]:
    """Merge the counts in the count folders (written by ``Counter.write``) into each feature's vocabulary
    (value, count, index) with its threshold: integer values one feature at a time by ``sum_counts`` in ``threads``
    threads; other values by polars queries, a few features at a time run together (in parallel; not all at once,
    so that the merged counts of only a few large vocabularies are in memory at a time)."""
    out = {name: _build_native(name, *feature, threads) for name, feature in features.items()
           if _sums_natively(feature[2])}
    rest = [name for name in features if name not in out]
    group = 2 * pl.thread_pool_size()
    for k in range(0, len(rest), group):
        out |= _build_group({n: features[n] for n in rest[k:k + group]})
    return {name: out[name] for name in features}


# count folders folded into a feature's running total at a time: the merge then holds the feature's distinct
# values plus a few files' count tables, never all files' tables at once (whose total grows with the rows
# wherever values recur across files: measured 361 / 889 / 2,301 MB for 4 / 20 / 100 files of the same values)
_MERGE_FOLDERS = 4


def _build_native(name: str, folders: list[Path], threshold: int, dtype: pl.DataType,
                  threads: int) -> pl.DataFrame:
    total = pl.DataFrame(schema={"value": dtype, "count": pl.Int64})
    for k in range(0, len(folders), _MERGE_FOLDERS):
        total = sum_counts([total, *(read_counts(p, name) for p in folders[k:k + _MERGE_FOLDERS])], threads)
    return _ranked(total.lazy(), threshold).collect()


def _ranked(totals: pl.LazyFrame, threshold: int) -> pl.LazyFrame:
    """A feature's summed counts -> its vocabulary: values with count >= the threshold, indexed from 1 by descending
    count, ties by ascending value."""
    kept = totals.filter(pl.col("count") >= max(threshold, 1)).sort(["count", "value"], descending=[True, False])
    return kept.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("index"))


def _build_group(features: dict[str, tuple[list[Path], int, pl.DataType]]) -> dict[str, pl.DataFrame]:
    totals = {name: pl.DataFrame(schema={"value": dtype, "count": pl.Int64})
              for name, (_, _, dtype) in features.items()}
    longest = max((len(folders) for folders, _, _ in features.values()), default=0)
    for k in range(0, longest, _MERGE_FOLDERS):
        step = {name: folders[k:k + _MERGE_FOLDERS] for name, (folders, _, _) in features.items()
                if folders[k:k + _MERGE_FOLDERS]}
        queries = [pl.concat([totals[name].lazy(), *(pl.scan_ipc(_counts_file(p, name)) for p in chunk)])
                   .group_by("value").agg(pl.col("count").sum()) for name, chunk in step.items()]
        totals |= dict(zip(step, pl.collect_all(queries)))
    queries = [_ranked(totals.pop(name).lazy(), threshold) for name, (_, threshold, _) in features.items()]
    return dict(zip(features, pl.collect_all(queries)))


class IntLookup:
    """Integer value -> vocabulary index (0 when absent): an open-addressing hash table in numpy, built
    once per vocabulary and looked up a whole column at a time (polars' replace rebuilds its map per call)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        self.dtype = np.uint32 if keys.dtype.itemsize <= 4 else np.uint64
        keys = keys.astype(self.dtype)
        n = len(keys)
        bits = max(4, (4 * n - 1 if n < 1 << 20 else 2 * n - 1).bit_length())   # load factor <= 1/4 (1/2 if big)
        bits = min(bits, 8 * np.dtype(self.dtype).itemsize)
        self.mul = self.dtype(0x9E3779B1 if self.dtype == np.uint32 else 0x9E3779B97F4A7C15)
        self.shift = self.dtype(8 * np.dtype(self.dtype).itemsize - bits)
        self.mask = (1 << bits) - 1
        self.keys = np.zeros(1 << bits, self.dtype)
        self.vals = np.zeros(1 << bits, np.int32 if n < 2**31 - 1 else np.int64)   # 0: empty (indices start at 1)
        vals = values.astype(self.vals.dtype)
        slot = self._slots(keys)
        todo = np.arange(n)
        while len(todo):   # insert; keys colliding on a slot move to the next one (linear probing)
            s = slot[todo]
            free = self.vals[s] == 0
            c, sc = todo[free], s[free]
            self.keys[sc], self.vals[sc] = keys[c], vals[c]
            placed = np.zeros(len(todo), bool)
            placed[free] = self.keys[sc] == keys[c]
            todo = todo[~placed]
            slot[todo] = (slot[todo] + 1) & self.mask

    def _slots(self, q: np.ndarray) -> np.ndarray:
        h = q * self.mul
        h >>= self.shift
        return h.astype(np.intp)

    def __call__(self, q: np.ndarray) -> np.ndarray:
        q = np.ascontiguousarray(q.astype(self.dtype, copy=False))
        if _vocab is not None:
            out = np.empty(len(q), self.vals.dtype)
            _vocab.lookup(self.keys, self.vals, int(self.mul), int(self.shift), q, out)
            return out
        slot = self._slots(q)
        out = self.vals[slot]
        todo = np.flatnonzero(self.keys[slot] != q)
        if len(todo):
            out[todo] = 0
            todo = todo[self.vals[slot[todo]] != 0]   # slot taken by another value: probe on
        while len(todo):
            s = (slot[todo] + 1) & self.mask
            slot[todo] = s
            v = self.vals[s]
            hit = self.keys[s] == q[todo]
            out[todo[hit]] = v[hit]
            todo = todo[~hit & (v != 0)]
        return out


@dataclass
class Coded:
    """Rows whose integer vocabulary features already hold codes (as ``dictionary_encode`` returns them)."""

    rows: pl.DataFrame
    dictionaries: dict[str, np.ndarray]


def dictionary_encode(df: pl.DataFrame, features: list[str]) -> tuple[pl.DataFrame, dict[str, np.ndarray]]:
    """Replace each integer column of ``features`` by UInt32 codes into its distinct values (1..n; 0: missing);
    returns the coded rows and each feature's values in code order (code k is values[k - 1]). Counting is then a
    bincount and encoding one vocabulary lookup per distinct value plus a gather (``Encoder``)."""
    coded = [f for f in features if df[f].dtype.is_integer()]
    if not coded:
        return df, {}
    values, codes = {}, {}
    if _vocab is None:
        uniques = df.lazy().select(pl.col(f).drop_nulls().unique().implode() for f in coded).collect()
    nulls = [f for f in coded if df[f].null_count()]
    if nulls:   # one parallel polars pass: nulls -> 0 and the valid masks
        filled = df.lazy().select([pl.col(f).fill_null(0) for f in nulls]
                                  + [pl.col(f).is_not_null().alias(f"{f}\0") for f in nulls]).collect()
    for f in coded:
        column = df[f]
        raw = filled[f].to_numpy() if f in nulls else column.to_numpy()
        if _vocab is not None:
            values[f], c = codes_of(raw, filled[f"{f}\0"].to_numpy() if f in nulls else None)
        else:
            values[f] = uniques[f][0].to_numpy()
            c = IntLookup(values[f], np.arange(1, len(values[f]) + 1))(raw).astype(np.uint32)
            if f in nulls:
                c[~filled[f"{f}\0"].to_numpy()] = 0
        codes[f] = pl.Series(f, c)
    return df.with_columns(**codes), values


def codes_of(values: np.ndarray, valid: np.ndarray | None = None,
             expected: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in order of first occurrence, codes: uint32, 1 + each value's position there, 0 where
    ``valid`` is False) of an integer array, by the native hash table (``_vocab`` must be built). ``expected``:
    about how many distinct values there are (e.g. the previous block's; 0: unknown), which sizes the table."""
    dtype = values.dtype
    values = np.ascontiguousarray(values if dtype.itemsize in (4, 8) else values.astype(np.int64))
    codes = np.empty(len(values), np.uint32)
    distinct = np.empty(len(values), values.dtype)
    hint = (expected,) if expected > 0 and getattr(_vocab, "VERSION", 1) >= 4 else ()
    k = _vocab.dict_encode(values, None if valid is None else np.ascontiguousarray(valid).view(np.uint8),
                           codes, distinct, *hint)
    return distinct[:k].astype(dtype), codes


class Encoder:
    """Rows -> {feature: index array} per vocabulary feature (0: missing or not kept), built once per vocabulary."""

    def __init__(self, vocabs: dict[str, pl.DataFrame]):
        self.lookups, self.exprs = {}, {}
        for f, v in vocabs.items():
            if v["value"].dtype.is_integer():
                self.lookups[f] = IntLookup(v["value"].to_numpy(), v["index"].to_numpy())
            else:
                self.exprs[f] = pl.col(f).replace_strict(v["value"], v["index"], default=0, return_dtype=pl.Int64)

    def __call__(self, df: pl.DataFrame, dictionaries: dict[str, np.ndarray] | None = None,
                 dtypes: dict[str, str] | None = None) -> dict:
        """Indices of ``df``'s rows; a feature in ``dictionaries`` holds codes into it (``dictionary_encode``; a
        list column, codes of its elements: ``fastparse``), whose indices come in ``dtypes[feature]`` where given
        (gathered from a table of that dtype: no wide copy); a list column's indices are a ``lists.Flat`` (its
        elements' indices, its rows' lengths)."""
        dictionaries, out = dictionaries or {}, {}
        listed = [f for f in (*self.lookups, *self.exprs) if isinstance(df[f].dtype, pl.List)]
        for f, values in dictionaries.items():
            if f in self.lookups:
                remap = np.zeros(len(values) + 1, self.lookups[f].vals.dtype)
                remap[1:] = self.lookups[f](values)
                if dtypes and f in dtypes:
                    remap = remap.astype(dtypes[f])
                if f in listed:
                    flat = flat_codes(df[f])
                    out[f] = Flat(take(remap, flat.values), flat.lengths)
                    continue
                out[f] = take(remap, df[f].to_numpy())
        out |= {f: self._elements(f, flatten(df[f])) for f in listed if f not in out}
        if listed:
            df = df.drop(listed)
        exprs = [e for f, e in self.exprs.items() if f not in dictionaries and f not in out]
        lookups = {f: lk for f, lk in self.lookups.items() if f not in dictionaries and f not in out}
        if exprs:
            out |= {f: c.to_numpy() for f, c in df.select(exprs).to_dict().items()}
        nulls = [f for f in lookups if df[f].null_count()]
        if nulls:   # one parallel polars pass: nulls -> 0 (looked up, then set to index 0) and null masks
            filled = df.select([pl.col(f).fill_null(0) for f in nulls] + [pl.col(f).is_null().alias(f"{f}\0")
                                                                         for f in nulls])
        for f, lookup in lookups.items():
            if f in nulls:
                idx = lookup(filled[f].to_numpy())
                idx[filled[f"{f}\0"].to_numpy()] = 0
            else:
                idx = lookup(df[f].to_numpy())
            out[f] = idx
        return out

    def _elements(self, f: str, flat: Flat) -> Flat:
        """A list column's elements looked up (a missing element: index 0)."""
        if f in self.lookups:
            idx = self.lookups[f](flat.values.fill_null(0).to_numpy())
            if flat.values.null_count():
                idx[flat.values.is_null().to_numpy()] = 0
        else:
            idx = pl.DataFrame({f: flat.values}).select(self.exprs[f])[f].fill_null(0).to_numpy()
        return Flat(idx, flat.lengths)


def read_vocab(dataset: str, spec, feature: str) -> pl.DataFrame:
    """The vocabulary (value, count, index) of ``feature`` in ``dataset`` (whose feature spec is ``spec``)."""
    rel = (spec.metadata.get("vocab") or {}).get(feature) or writer.vocab_file(feature)
    uri = join_uri(dataset, rel)
    try:
        with open_uri(uri) as f:
            return pl.read_parquet(f)
    except FileNotFoundError:
        raise UserError(f"{uri}: the vocabulary of feature '{feature}' is missing. Fix: re-run preprocessing "
                        "for the model's dataset (its folder is incomplete).") from None
