"""Fast parse of Criteo TSV blocks by the C extension ``preprocessing._criteo``.

A block whose rows are all regular (40 tab-separated fields ended by LF: label 0/1, integers
of up to 15 digits or empty, categoricals of 1-8 hex digits or empty) is parsed straight into
the parse stage's intermediate columns (label Int8, log1p numericals Float32, hex ids UInt32
with nulls where missing), bit-identical to ``readers`` + ``transforms.to_intermediate``.
Any other block (a bad row, CRLF, quotes, "1.0", "-0", ...) goes to the general polars path,
which reports the problem with its file, line and column as before. Its numericals need no range check
(``transforms.check_numerical``): log1p(max(x, 0)) of at most 15 digits is below 35, finite and within float16;
``nan``/``inf`` are not regular, so the polars path reads them (``nan`` as missing, ``inf`` as an error).

Used only for the ``criteo`` chunk type with the standard layout (label, I1..I13 with log1p,
C1..C26 hex, one value each; hashed categoricals are hashed after the parse). ``PreprocessConfig.fast_parse=False``
turns it off; where the extension is not built (no compiler) the polars path is used (debug log), and where it is
an older build (without the numericals' missing counts) too (a warning: rebuild it with ``pip install -e .``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import polars as pl

from feature_spec import CRITEO_COLUMNS

from . import vocab
from .transforms import Transforms, hashed_index

log = logging.getLogger(__name__)

VERSION = 2   # of the extension's parse(): 2 counts the numericals' missing fields

try:
    from . import _criteo
except ImportError as e:   # not built: the polars path parses every block
    _criteo = None
    log.debug("preprocessing._criteo is not available (%s); Criteo blocks are parsed by polars", e)
if _criteo is not None and getattr(_criteo, "VERSION", 1) != VERSION:
    log.warning("preprocessing._criteo is an older build (version %s, not %s); Criteo blocks are parsed by polars. "
                "Fix: rebuild it (pip install -e .)", getattr(_criteo, "VERSION", 1), VERSION)
    _criteo = None

N_INT, N_CAT = 13, 26


def block_parser(fmt, t: Transforms, types: dict,
                 coded: bool = False) -> Callable[..., pl.DataFrame | vocab.Coded | None] | None:
    """The block parser for this input (block, [missing] -> intermediate rows, or None to use the polars path),
    or None where the input is not plain Criteo TSV with the standard transforms. ``coded``: the vocabulary
    features come as codes into the block's distinct values (``vocab.Coded``, as ``vocab.dictionary_encode``
    would code them) straight from the parsed ids, without null masks in between. ``missing``, a dict, gets
    each numerical's count of missing values (their 0s hide them)."""
    if _criteo is None or fmt.kind != "criteo" or fmt.header or list(fmt.columns or []) != CRITEO_COLUMNS:
        return None
    label, ints, cats = CRITEO_COLUMNS[0], CRITEO_COLUMNS[1:1 + N_INT], CRITEO_COLUMNS[1 + N_INT:]
    if (t.label != label or t.positive is not None or t.positive_if is not None or t.split_column
            or t.numerical != [(n, "log1p") for n in ints]
            or [c.name for c in t.categorical] != cats or any(c.kind != "hex" or c.multi_valued for c in t.categorical)
            or types != {label: pl.Float64, **dict.fromkeys(ints, pl.Float64), **dict.fromkeys(cats, pl.String)}):
        return None
    hashed = [(c.name, c.hash_buckets) for c in t.categorical if c.hash_buckets is not None]
    to_code = t.vocab_features if coded and vocab._vocab is not None else []

    def parse(block: bytes, missing: dict | None = None) -> pl.DataFrame | vocab.Coded | None:
        dictionaries = {}
        df = parse_block(block, to_code, dictionaries, missing)
        if df is not None:
            for name, buckets in hashed:
                df = df.with_columns(hashed_index(df[name], buckets).alias(name))
        return vocab.Coded(df, dictionaries) if df is not None and to_code else df

    return parse


def parse_block(block: bytes, coded: list[str] = (), dictionaries: dict | None = None,
                missing: dict | None = None) -> pl.DataFrame | None:
    """Intermediate rows of a block of regular Criteo rows, or None where any row is not regular. The
    categoricals in ``coded`` are codes instead (``vocab.codes_of``; their distinct values go to ``dictionaries``);
    ``missing`` gets each numerical's count of empty fields."""
    n = _criteo.count_lines(block)
    label = np.empty(n, np.int8)
    num = np.empty((N_INT, n), np.float32)
    cat = np.empty((N_CAT, n), np.uint32)
    valid = np.empty((N_CAT, n), np.bool_)
    empty = np.zeros(N_INT, np.int64)
    if n == 0 or _criteo.parse(block, label, num, cat, valid, empty) != n:
        return None
    if missing is not None:
        missing.update(zip(CRITEO_COLUMNS[1:1 + N_INT], empty.tolist()))
    columns = {CRITEO_COLUMNS[0]: label}
    columns.update({name: num[j] for j, name in enumerate(CRITEO_COLUMNS[1:1 + N_INT])})
    cats = CRITEO_COLUMNS[1 + N_INT:]
    columns.update({name: cat[j] for j, name in enumerate(cats)})
    for j, name in enumerate(cats):
        if name in coded:
            dictionaries[name], columns[name] = vocab.codes_of(cat[j], None if valid[j].all() else valid[j])
    df = pl.DataFrame(columns)
    missing = [j for j, name in enumerate(cats) if name not in coded and not valid[j].all()]
    if missing:
        masks = pl.DataFrame({f"__valid{j}": valid[j] for j in missing})
        df = pl.concat([df, masks], how="horizontal").lazy().select(
            pl.col(CRITEO_COLUMNS[:1 + N_INT]),
            *[pl.when(pl.col(f"__valid{j}")).then(pl.col(c)).alias(c) if j in missing else pl.col(c)
              for j, c in enumerate(cats)]).collect()
    return df
