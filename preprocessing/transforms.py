"""Per-feature value transforms: label derivation, numerical transform, raw categorical types, hashing."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from common.errors import UserError, quoted
from feature_spec import FeatureSpec, categorical_dtype

from . import lists
from .errors import FIELD_BYTES, BadRows, blame
from .hashing import hash_values

_OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
SPLIT_COLUMN = "__split"


@dataclass
class Categorical:
    """How one categorical is encoded: raw type (hex/int/str/None), vocabulary threshold or hash buckets; a list
    feature's values a row (``hotness``: N, or None for variable length), ``max_hotness`` and element ``sep``."""

    name: str
    kind: str | None
    threshold: int = 0
    hash_buckets: int | None = None
    hotness: int | None = 1
    max_hotness: int | None = None
    sep: str | None = None

    @property
    def multi_valued(self) -> bool:
        return self.hotness != 1


@dataclass
class Transforms:
    """What to do with each input column, taken from the input spec and the config."""

    label: str
    positive: list[str] | None = None
    positive_if: tuple[str, float] | None = None
    numerical: list[tuple[str, str]] = field(default_factory=list)   # (name, transform)
    categorical: list[Categorical] = field(default_factory=list)
    split_column: str | None = None
    split_numeric: bool = False

    @classmethod
    def from_spec(cls, spec: FeatureSpec, threshold: int, split_column: str | None = None,
                  split_numeric: bool = False) -> "Transforms":
        """The transforms of a spec; ``threshold`` applies where a feature sets none."""
        fs = spec.feature_spec
        label = fs[spec.label_feature]
        positive = label.positive
        return cls(
            label=spec.label_feature,
            positive=None if positive is None else [str(v) for v in (positive if isinstance(positive, list) else [positive])],
            positive_if=label.positive_rule(),
            numerical=[(n, fs[n].transform or "log1p") for n in spec.numerical_features],
            categorical=[Categorical(n, fs[n].dtype, threshold if fs[n].frequency_threshold is None
                                     else fs[n].frequency_threshold, fs[n].hash_buckets, fs[n].values_per_row,
                                     fs[n].max_hotness, fs[n].sep)
                         for n in spec.categorical_features],
            split_column=split_column, split_numeric=split_numeric)

    @property
    def vocab_features(self) -> list[str]:
        return [c.name for c in self.categorical if c.hash_buckets is None]

    def categorical_dtypes(self, cards: dict[str, int]) -> dict[str, str]:
        """Output dtype of each categorical: the smallest integer type that holds its cardinality."""
        return {c.name: categorical_dtype(cards[c.name]) for c in self.categorical}

    def parse_types(self, native: dict[str, pl.DataType] | None = None) -> dict[str, pl.DataType]:
        """Column -> type to parse the raw column as (``native``: a Parquet file's own types)."""
        types: dict[str, pl.DataType] = {self.label: pl.String if self.positive else pl.Float64}
        types.update({n: pl.Float64 for n, _ in self.numerical})
        for c in self.categorical:
            own = (native or {}).get(c.name, pl.String)
            if c.multi_valued:   # a Parquet list column, else text split at ``sep`` after the parse
                integer = isinstance(own, pl.List) and (c.kind == "int" or (c.kind is None and own.inner.is_integer()))
                types[c.name] = pl.List(pl.Int64 if integer else pl.String) if isinstance(own, pl.List) else pl.String
            elif c.kind == "int" or (c.kind is None and own.is_integer()):
                types[c.name] = pl.Int64
            else:
                types[c.name] = pl.String
        if self.split_column:
            types[self.split_column] = pl.Float64 if self.split_numeric else pl.String
        return types


class NumericalRangeError(UserError):
    """A numerical value that is not finite after its transform, or does not fit the output dtype."""


def numerical_max(dtype: str) -> float:
    """The largest magnitude a numerical output dtype holds (float16: 65504)."""
    return float(np.finfo(dtype).max)


def to_intermediate(df: pl.DataFrame, transforms: Transforms, lines: np.ndarray, bad: BadRows,
                    split_names, max_abs: float = np.inf, missing: dict | None = None) -> pl.DataFrame:
    """Typed raw rows -> label (Int8), transformed numericals (Float32), categoricals (hex -> UInt32,
    int -> Int64, str -> String, hashed -> final Int64 index), and ``__split`` (String) for column rules.
    Rows failing a check (non-hex id, label not 0/1, no split value) go to the bad-row policy. A numerical
    ``nan`` is missing, as an empty field is; one that is not finite after its transform or above ``max_abs``
    (the output dtype's largest value, ``numerical_max``) is a ``NumericalRangeError`` naming feature, file
    (``bad.uri``), line and value, whatever the bad-row policy (it is no malformed row: it needs another transform
    or dtype). ``missing``, a dict, gets each numerical's count of missing values in the rows kept (filled with 0)."""
    cols = [_label(transforms).alias(transforms.label)]
    cols += [_numerical(n, t).alias(n) for n, t in transforms.numerical]
    for c in transforms.categorical:
        if c.multi_valued:
            cols += lists.parse_exprs(c, df[c.name].dtype)
        else:
            cols.append(pl.col(c.name).str.to_integer(base=16, dtype=pl.UInt32, strict=False).alias(c.name)
                        if c.kind == "hex" else pl.col(c.name))
    if transforms.split_column:
        cols.append(split_names(df[transforms.split_column]).alias(SPLIT_COLUMN))
    out = df.lazy().select(cols).collect()   # lazy: the columns are computed in parallel
    ok = _check(df, out, transforms, lines, bad)
    if ok is not None:
        out = out.filter(ok)
    if missing is not None and transforms.numerical:
        kept = df if ok is None else df.filter(ok)
        names = [n for n, _ in transforms.numerical]
        missing.update(zip(names, kept.select(pl.col(n).fill_nan(None).is_null().sum() for n in names).row(0)))
    try:
        check_numerical(out, transforms, max_abs, lambda i: f"{bad.uri}: line {_lines_kept(lines, ok)[i]}",
                        lambda name, i: df.filter(ok)[name][i] if ok is not None else df[name][i])
    except NumericalRangeError as e:   # a value in this file's rows (a part parsed for another dtype: encode_batch)
        raise blame(e, bad.uri)
    for c in transforms.categorical:
        if c.hash_buckets is not None:
            index = lists.hashed(out[c.name], c.hash_buckets, hashed_index) if c.multi_valued \
                else hashed_index(out[c.name], c.hash_buckets)
            out = out.with_columns(index.alias(c.name))
    return out


def _label(transforms: Transforms) -> pl.Expr:
    col = pl.col(transforms.label)
    if transforms.positive is not None:
        return pl.when(col.is_null()).then(None).otherwise(col.is_in(transforms.positive)).cast(pl.Int8)
    if transforms.positive_if is not None:
        op, number = transforms.positive_if
        return _OPS[op](col, number).cast(pl.Int8)
    return pl.when(col == 1).then(1).when(col == 0).then(0).otherwise(None).cast(pl.Int8)


def _lines_kept(lines: np.ndarray, ok: pl.Series | None) -> np.ndarray:
    return lines if ok is None else lines[ok.to_numpy()]


def check_numerical(out: pl.DataFrame, transforms: Transforms, max_abs: float, where, raw_value=None) -> None:
    """NumericalRangeError at the first transformed numerical (Float32, nulls filled) of ``out`` that is not finite
    or above ``max_abs`` in magnitude: a min and a max per column (the row is looked for only then).
    ``where(i)``: the file and line of row i; ``raw_value(name, i)``: its value in the input."""
    for name, transform in transforms.numerical:
        values = out[name].to_numpy()
        if len(values) == 0 or (values.max() <= max_abs and values.min() >= -max_abs):   # NaN propagates: False
            continue
        i = int(np.argmax(~(np.abs(values) <= max_abs)))
        raw = raw_value(name, i) if raw_value else float(values[i])
        problem = (f"is {values[i]} after its {transform} transform" if not np.isfinite(values[i]) else
                   f"is {values[i]:g} after its {transform} transform, above the output dtype's largest value "
                   f"{max_abs:g}")
        raise NumericalRangeError(
            f"{where(i)}: numerical feature {name!r}: value {quoted(raw)} {problem}, so it would be written as inf. "
            f"Fix: give {name!r} a `transform: log1p` (or `log3p`) in the input spec, or write float32 numericals "
            "(--numerical-dtype float32).")


def _numerical(name: str, transform: str) -> pl.Expr:
    col = pl.col(name).fill_nan(None)   # a literal nan is a missing value, as an empty field is
    if transform == "log1p":
        col = col.clip(lower_bound=0).log1p()
    elif transform == "log3p":   # as NVIDIA DLRM's Spark job: log(x + 3), and 0 where that is undefined
        col = pl.when(col > -3).then((col + 3).log())
    return col.fill_null(0).cast(pl.Float32)


def _check(raw: pl.DataFrame, out: pl.DataFrame, transforms: Transforms, lines: np.ndarray, bad: BadRows):
    """Report rows whose values fail a check (one bad row each, however many of its fields fail); returns the keep
    mask (None when all rows are fine).
    A check fails only where the output has more nulls than the raw column, so null counts (kept by polars
    with each column) rule out most checks without a pass over the rows."""
    checks = []
    if out[transforms.label].null_count():
        checks.append((transforms.label, out[transforms.label].is_null(), "label is missing or not 0/1 (set "
                       "`positive:` or `positive_if:` on the label feature in the spec for other labels)."))
    for c in transforms.categorical:
        if c.multi_valued:
            checks += lists.checks(raw, out, c)
        elif c.kind == "hex" and out[c.name].null_count() > raw[c.name].null_count():
            checks.append((c.name, raw[c.name].is_not_null() & out[c.name].is_null(),
                           "is not a 32-bit hex id (Criteo categoricals are 8 hex digits)."))
    checks += _too_long(raw, transforms)
    if transforms.split_column and out[SPLIT_COLUMN].null_count():
        checks.append((transforms.split_column, out[SPLIT_COLUMN].is_null(), "is empty, so the row has no split."))

    def problem(name: str, text: str):
        def at(i: int) -> str:
            value = raw[name][i]
            return f"value {quoted(value)} {text}" if value is not None else text
        return at

    failed = bad.report_rows(lines, [(name, mask.to_numpy(), problem(name, text)) for name, mask, text in checks])
    return None if failed is None else pl.Series(~failed)   # one report a row, however many of its fields fail


def _too_long(raw: pl.DataFrame, transforms: Transforms) -> list[tuple[str, pl.Series, str]]:
    """(column, mask, problem) of the text categoricals (a text list's whole field) with a value over
    ``FIELD_BYTES``: a bad row, not a category (hex and int ones that long do not convert: bad rows too)."""
    found = []
    for c in transforms.categorical:
        if c.kind in ("hex", "int") or raw[c.name].dtype != pl.String:
            continue
        size = raw[c.name].str.len_bytes()
        if (size.max() or 0) > FIELD_BYTES:
            found.append((c.name, (size > FIELD_BYTES).fill_null(False),
                          f"is longer than {FIELD_BYTES >> 10} KiB, the limit of a categorical value."))
    return found


def hashed_index(values: pl.Series, buckets: int) -> pl.Series:
    """Index 1 + stable_hash(value) mod (buckets - 1); 0 for missing. Hashes unique values only."""
    uniq = values.drop_nulls().unique()
    raw = uniq.to_numpy() if uniq.dtype.is_integer() else uniq.to_list()
    idx = (hash_values(raw) % np.uint64(buckets - 1) + np.uint64(1)).astype(np.int64)
    return values.replace_strict(uniq, pl.Series(idx), default=0, return_dtype=pl.Int64)
