"""Fast parse of Criteo TSV blocks by the C extension ``preprocessing._criteo``.

A block whose rows are all regular (40 tab-separated fields ended by LF: label 0/1, integers
of up to 15 digits or empty, categoricals of 1-8 hex digits or empty) is parsed straight into
the parse stage's intermediate columns (label Int8, log1p numericals Float32, hex ids UInt32
with nulls where missing), bit-identical to ``readers`` + ``transforms.to_intermediate``.
Any other block (a bad row, CRLF, quotes, "1.0", "-0", ...) goes to the general polars path,
which reports the problem with its file, line and column as before.

Used only for the ``criteo`` chunk type with the standard layout (label, I1..I13 with log1p,
C1..C26 hex, one value each; hashed categoricals are hashed after the parse). ``PreprocessConfig.fast_parse=False``
turns it off; where the extension is not built (no compiler) the polars path is used (debug log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import polars as pl

from feature_spec import CRITEO_COLUMNS

from .transforms import Transforms, hashed_index

log = logging.getLogger(__name__)

try:
    from . import _criteo
except ImportError as e:   # not built: the polars path parses every block
    _criteo = None
    log.debug("preprocessing._criteo is not available (%s); Criteo blocks are parsed by polars", e)

N_INT, N_CAT = 13, 26


def block_parser(fmt, t: Transforms, types: dict) -> Callable[[bytes], pl.DataFrame | None] | None:
    """The block parser for this input (block -> intermediate rows, or None to use the polars path),
    or None where the input is not plain Criteo TSV with the standard transforms."""
    if _criteo is None or fmt.kind != "criteo" or fmt.header or list(fmt.columns or []) != CRITEO_COLUMNS:
        return None
    label, ints, cats = CRITEO_COLUMNS[0], CRITEO_COLUMNS[1:1 + N_INT], CRITEO_COLUMNS[1 + N_INT:]
    if (t.label != label or t.positive is not None or t.positive_if is not None or t.split_column
            or t.numerical != [(n, "log1p") for n in ints]
            or [c.name for c in t.categorical] != cats or any(c.kind != "hex" or c.multi_valued for c in t.categorical)
            or types != {label: pl.Float64, **dict.fromkeys(ints, pl.Float64), **dict.fromkeys(cats, pl.String)}):
        return None
    hashed = [(c.name, c.hash_buckets) for c in t.categorical if c.hash_buckets is not None]

    def parse(block: bytes) -> pl.DataFrame | None:
        df = parse_block(block)
        if df is not None:
            for name, buckets in hashed:
                df = df.with_columns(hashed_index(df[name], buckets).alias(name))
        return df

    return parse


def parse_block(block: bytes) -> pl.DataFrame | None:
    """Intermediate rows of a block of regular Criteo rows, or None where any row is not regular."""
    n = _criteo.count_lines(block)
    label = np.empty(n, np.int8)
    num = np.empty((N_INT, n), np.float32)
    cat = np.empty((N_CAT, n), np.uint32)
    valid = np.empty((N_CAT, n), np.bool_)
    if n == 0 or _criteo.parse(block, label, num, cat, valid) != n:
        return None
    columns = {CRITEO_COLUMNS[0]: label}
    columns.update({name: num[j] for j, name in enumerate(CRITEO_COLUMNS[1:1 + N_INT])})
    cats = CRITEO_COLUMNS[1 + N_INT:]
    columns.update({name: cat[j] for j, name in enumerate(cats)})
    df = pl.DataFrame(columns)
    missing = [j for j in range(N_CAT) if not valid[j].all()]
    if missing:
        masks = pl.DataFrame({f"__valid{j}": valid[j] for j in missing})
        df = pl.concat([df, masks], how="horizontal").lazy().select(
            pl.col(CRITEO_COLUMNS[:1 + N_INT]),
            *[pl.when(pl.col(f"__valid{j}")).then(pl.col(c)).alias(c) if j in missing else pl.col(c)
              for j, c in enumerate(cats)]).collect()
    return df
