"""List (multi-valued) categoricals in preprocessing: parse, check, hash, encode and write them.

A list feature's parsed column is a polars List of its raw elements: a CSV/TSV field split at the spec's
``sep`` (an empty element is a missing element), or a Parquet/Arrow list column as it is. An empty or missing
list is a missing list (length 0). ``hotness: N`` rows must hold exactly N elements (or none: N zeros), any
other count is a bad row; ``max_hotness: N`` rows keep their first N elements, the parse marks truncated
rows in a flag column (``truncated_column``) so that the encode stage counts them per split.

Elements are counted, looked up and hashed one by one; a rare or missing element becomes index 0 and stays in
the list (a fixed-hotness row keeps exactly N values, and "has rare items" stays a signal for the model).

Encoded parts: a fixed-hotness feature's ``cat_<f>.bin`` holds rows x N indices row-major; a variable-length
feature's ``cat_<f>.bin`` holds its elements and ``cat_<f>.lengths.bin`` (int64) each row's length, which
the final write turns into the dataset's ``cat_<f>.offsets.bin`` (rows + 1 int64 offsets from 0) across parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from common.errors import UserError
from feature_spec import Feature, FeatureSpec, categorical_file_name, offsets_file_name
from feature_spec.model import VARIABLE

_TRUNCATED = "__truncated:"
_READ_ROWS = 1 << 20   # lengths converted to offsets this many at a time


def truncated_column(feature: str) -> str:
    """The parse's flag column of a max_hotness feature: True where the row's list was cut to max_hotness."""
    return _TRUNCATED + feature


def lengths_file_name(feature: str) -> str:
    """An encoded part's per-row list lengths of a variable-length feature (int64)."""
    return categorical_file_name(feature)[:-len(".bin")] + ".lengths.bin"


def unsplit(f: Feature, kind: str, dtype: pl.DataType | None = None) -> bool:
    """Whether the list feature ``f`` would be read as one-element lists: no ``sep``, and its field is text (csv,
    tsv, criteo) or its Parquet column (of type ``dtype``; None: not known) not a list. The one rule of
    preprocessing (``check_input``) and `dlrmflow spec check --input` (``spec_check``)."""
    listed = isinstance(dtype, (pl.List, pl.Array)) or (kind == "parquet" and dtype is None)
    return f.multi_valued and f.sep is None and not listed


def check_input(spec: FeatureSpec, kind: str, types: dict | None = None, uri: str | None = None) -> None:
    """A list feature of text input (csv, tsv, criteo), or of a Parquet column that is not a list (``types``: the
    first input file's column types, ``uri`` that file), needs ``sep``: UserError naming the feature otherwise (and
    the separator found in a sample of the Parquet column, if any)."""
    for name in spec.categorical_features:
        f = spec.feature_spec[name]
        if not unsplit(f, kind, (types or {}).get(name)):
            continue
        if kind == "parquet":
            sep = _sample_separator(uri, name)
            raise UserError(f"feature_spec.{name}: a list feature ({_hotness_text(f)}), but its Parquet column is "
                            f"{types[name]} in {uri}: without `sep` every row would be a one-element list. Fix: " +
                            (f"add `sep: {sep!r}` (found between the values of a sample) to feature_spec.{name}."
                             if sep else f"remove hotness/max_hotness from feature_spec.{name} (a one-hot feature), "
                             "or write the column as a Parquet list."))
        raise UserError(f"feature_spec.{name}: a list feature ({_hotness_text(f)}) in {kind} input needs the "
                        f"separator of its elements. Fix: add `sep: \"|\"` (the character between the values "
                        f"of one field) to feature_spec.{name}.")


def _sample_separator(uri: str | None, name: str) -> str | None:
    """The separator of the text column ``name`` in a sample of the Parquet file ``uri`` (``spec_check``'s rule)."""
    from .sample import read_sample
    from .spec_check import find_separator   # spec_check imports this module (through transforms)

    return find_separator(read_sample([uri], 1000).rows[name]) if uri else None


def _hotness_text(f: Feature) -> str:
    return f"hotness {f.hotness}" if isinstance(f.hotness, int) else \
        f"max_hotness {f.max_hotness}" if f.max_hotness else "hotness variable"


# ---- parse ----------------------------------------------------------------------------------------------------
def _element(kind: str | None, strings: bool) -> pl.Expr:
    """The typed element of a raw list element (``strings``: elements are text)."""
    e = pl.element()
    if not strings:
        return e
    if kind == "hex":   # as a one-hot hex id: not stripped
        return e.str.to_integer(base=16, dtype=pl.UInt32, strict=False)
    if kind == "int":
        return e.str.strip_chars().cast(pl.Int64, strict=False)
    return e


def _split(name: str, sep: str | None, dtype: pl.DataType, empty: bool = True) -> pl.Expr:
    """The raw column as a list of raw elements (``empty``: an empty text element becomes missing; typed
    elements need not: an empty one does not convert, so it is missing after the conversion anyway)."""
    col = pl.col(name)
    if dtype == pl.String:
        col = col.str.split(sep or "\0")
        if empty:
            col = col.list.eval(pl.when(pl.element().str.strip_chars() != "").then(pl.element()))
    return col


def parse_exprs(c, dtype: pl.DataType) -> list[pl.Expr]:
    """Expressions of a list categorical ``c`` (transforms.Categorical) over the raw column of type ``dtype``:
    its typed, truncated list and, with max_hotness, its truncation flag."""
    strings = dtype == pl.String or (isinstance(dtype, pl.List) and dtype.inner == pl.String)
    converted = strings and c.kind in ("hex", "int")
    listed = _split(c.name, c.sep, dtype, empty=not converted)
    typed = listed.list.eval(_element(c.kind, strings)) if converted else listed
    if c.max_hotness is None:
        return [typed.alias(c.name)]
    return [typed.list.head(c.max_hotness).alias(c.name),
            (listed.list.len() > c.max_hotness).fill_null(False).alias(truncated_column(c.name))]


def from_flat(name: str, values: np.ndarray, valid: np.ndarray | None, lengths: np.ndarray) -> pl.Series:
    """A list column from all rows' elements in order (``valid``: False for a missing element; None: all present)
    and each row's length (0: a missing list, as the split of an empty field gives)."""
    import pyarrow as pa   # here only: a zero-copy List from offsets (polars has no constructor of its own)

    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    elements = pa.array(values, mask=None if valid is None or valid.all() else ~valid)
    gone = lengths == 0
    column = pa.LargeListArray.from_arrays(pa.array(offsets), elements, mask=pa.array(gone) if gone.any() else None)
    return pl.Series(name, column)


def element_type(c, parsed: pl.DataType) -> pl.DataType:
    """The type of a list categorical's elements after the parse (``parsed``: the type its column is read as)."""
    if c.kind == "hex":
        return pl.UInt32
    if isinstance(parsed, pl.List):
        return parsed.inner
    return pl.Int64 if c.kind == "int" else pl.String


def checks(raw: pl.DataFrame, out: pl.DataFrame, c) -> list[tuple[str, pl.Series, str]]:
    """(column, bad-row mask, problem) of a list categorical's parsed rows: elements that do not convert,
    a fixed-hotness row with another number of elements."""
    found = []
    dtype = raw[c.name].dtype
    strings = dtype == pl.String or (isinstance(dtype, pl.List) and dtype.inner == pl.String)
    nulls = pl.element().is_null()
    after = out[c.name].list.eval(nulls).list.sum() if strings and c.kind in ("hex", "int") else None
    if after is not None and after.sum():   # some missing elements: missing in the raw list too, or not converted?
        listed = _split(c.name, c.sep, dtype)
        if c.max_hotness is not None:   # a truncated list is compared on its kept elements
            listed = listed.list.head(c.max_hotness)
        bad = (after > raw.select(listed.list.eval(nulls).list.sum())[c.name]).fill_null(False)
        if bad.any():
            what = "a 32-bit hex id (Criteo ids are 8 hex digits)" if c.kind == "hex" else "an integer"
            found.append((c.name, bad, f"has an element that is not {what}."))
    if c.hotness is not None and c.hotness != 1:
        n = out[c.name].list.len().fill_null(0)
        wrong = (n != 0) & (n != c.hotness)
        if wrong.any():
            found.append((c.name, wrong, f"has a list whose number of values is not hotness {c.hotness} (exactly "
                          f"{c.hotness} values a row, or none for a missing list)."))
    return found


def hashed(values: pl.Series, buckets: int, index: Callable[[pl.Series, int], pl.Series]) -> pl.Series:
    """A list column with each element replaced by its hash-bucket index (``index``: the one-hot rule)."""
    flat = values.explode(empty_as_null=False, keep_nulls=False).drop_nulls().unique()
    return values.list.eval(pl.element().replace_strict(flat, index(flat, buckets), default=0,
                                                        return_dtype=pl.Int64))


# ---- encode ---------------------------------------------------------------------------------------------------
@dataclass
class Flat:
    """A batch's list column as its elements (all rows' elements in order; raw, or their indices) and each
    row's length."""

    values: pl.Series | np.ndarray
    lengths: np.ndarray


def flatten(column: pl.Series) -> Flat:
    """The elements and lengths of a list column (a missing list has length 0)."""
    lengths = column.list.len().fill_null(0).to_numpy().astype(np.int64)
    return Flat(column.explode(empty_as_null=False, keep_nulls=False), lengths)


def flat_codes(column: pl.Series) -> Flat:
    """``flatten`` of a list column without missing elements (the parse's codes, ``from_flat``) as numpy views of
    its buffers, without the copy of an explode."""
    import pyarrow as pa

    arr = column.rechunk().to_arrow()
    if isinstance(arr, pa.LargeListArray) and not arr.values.null_count:
        offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
        lengths = np.diff(offsets)
        if not arr.null_count or not lengths[arr.is_null().to_numpy(zero_copy_only=False)].any():
            return Flat(arr.values.to_numpy(zero_copy_only=True)[offsets[0]:offsets[-1]], lengths)
    flat = flatten(column)   # another layout (a missing list over elements, missing elements): explode it
    return Flat(flat.values.to_numpy(), flat.lengths)


@dataclass
class Ragged:
    """Encoded variable-length rows: indices of all elements, each row's length, its truncation flag."""

    values: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray | None = None

    def __getitem__(self, rows) -> Ragged:
        """The rows selected by a slice or a boolean mask."""
        if isinstance(rows, slice):
            ends = np.cumsum(self.lengths)
            start, stop, _ = rows.indices(len(self.lengths))
            lo = int(ends[start - 1]) if start else 0
            hi = int(ends[stop - 1]) if stop > start else lo
            values = self.values[lo:hi]
        else:
            values = self.values[np.repeat(rows, self.lengths)]
        return Ragged(values, self.lengths[rows], None if self.truncated is None else self.truncated[rows])


def layout(indices: np.ndarray, lengths: np.ndarray, hotness: int | None, dtype: str,
           truncated: np.ndarray | None = None):
    """A batch's encoded list feature: fixed hotness -> [rows, N] (a missing row: N zeros); variable -> Ragged."""
    values = indices.astype(dtype, copy=False)
    if hotness is None:
        return Ragged(values, lengths, truncated)
    if len(values) == len(lengths) * hotness:   # no missing list: the elements are the rows already
        return values.reshape(-1, hotness)
    out = np.zeros((len(lengths), hotness), dtype)
    out[lengths == hotness] = values.reshape(-1, hotness)
    return out


def empty_stats() -> dict:
    """One split's list statistics of one feature (the dataset metadata's ``list_lengths`` entry)."""
    return {"rows": 0, "values": 0, "max": 0, "index0": 0, "truncated": 0}


def merge_stats(parts: Iterable[dict]) -> dict:
    """The statistics of several parts of a split, summed (``max``: the largest)."""
    out = empty_stats()
    for p in parts:
        for k in out:
            out[k] = max(out[k], p[k]) if k == "max" else out[k] + p[k]
    return out


def write(chosen, name: str, out: Callable[[str], object], stats: dict) -> int:
    """Write a batch's encoded rows of list feature ``name`` (an [rows, N] array or Ragged) through ``out``
    (file name -> open binary file), add to ``stats`` (``empty_stats``); returns its rows without a nonzero
    index (the feature's ``index0_rows``)."""
    if isinstance(chosen, Ragged):
        values, lengths = np.ascontiguousarray(chosen.values), chosen.lengths.astype(np.int64, copy=False)
        out(categorical_file_name(name)).write(memoryview(values))
        out(lengths_file_name(name)).write(memoryview(np.ascontiguousarray(lengths)))
        nonzero = np.concatenate([[0], np.cumsum(values != 0)])
        ends = np.cumsum(lengths)
        rows_nonzero = nonzero[ends] - nonzero[ends - lengths]
        stats["truncated"] += int(chosen.truncated.sum()) if chosen.truncated is not None else 0
    else:
        values = np.ascontiguousarray(chosen)
        out(categorical_file_name(name)).write(memoryview(values))
        lengths = np.full(len(values), values.shape[1], np.int64)
        rows_nonzero = np.count_nonzero(values, axis=1)
    stats["rows"] += len(lengths)
    stats["values"] += int(lengths.sum())
    stats["max"] = max(stats["max"], int(lengths.max(initial=0)))
    stats["index0"] += int(np.count_nonzero(values == 0))
    return int(np.count_nonzero(rows_nonzero == 0))


def offsets_chunks(sources: list[Path]) -> Iterator[bytes]:
    """The bytes of a split's offsets file (int64: 0, then the running end of each row) from the per-part
    lengths files ``sources`` in order."""
    carry = np.int64(0)
    yield np.zeros(1, np.int64).tobytes()
    for src in sources:
        with open(src, "rb") as f:
            while data := f.read(8 * _READ_ROWS):
                ends = np.cumsum(np.frombuffer(data, np.int64)) + carry
                if len(ends):
                    carry = ends[-1]
                yield ends.tobytes()


# ---- the dataset spec -----------------------------------------------------------------------------------------
def output_fields(f: Feature) -> dict:
    """The dataset spec's fields of an input feature: for a list feature hotness (N or variable), max_hotness
    when given and pooling (written explicitly); nothing for a one-hot feature."""
    if not f.multi_valued:
        return {}
    fields = {"hotness": VARIABLE if f.variable_length else f.values_per_row, "pooling": f.pooling or "sum"}
    if f.max_hotness is not None:
        fields["max_hotness"] = f.max_hotness
    return fields


def output_files(split: str, feature: str, f: Feature) -> list[str]:
    """The dataset files of a categorical in ``split``: its values file, and a variable-length one's offsets."""
    files = [f"{split}/{categorical_file_name(feature)}"]
    return files + [f"{split}/{offsets_file_name(feature)}"] if f.variable_length else files
