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

Rows with list categoricals (``preprocessing._lists``, ``parse_list_block``): the same layout, as ``criteo`` or
headerless ``tsv`` input, where some categoricals are lists of hex or int elements joined by a one-byte ``sep``
(MLPerf DLRMv2-like multi-hot rows, ``dlrmflow synth --multi-hot-sizes``). A list column is parsed into a List of
its elements (missing elements null, an empty field a missing list, ``max_hotness`` cuts with their flag column),
and a vocabulary list feature's elements straight into codes of the block's distinct values (of the narrowest
unsigned type: MLPerf-like parsed parts 18% smaller), so that the count stage is a bincount and the encode
stage a gather (``vocab``). A block with an odd or bad list (spaces, ``+1``,
9 hex digits, a fixed-hotness list of another length) goes to the polars path, which keeps its errors and
its own reading of odd values. ``fast_parse=False`` turns this off too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from feature_spec import CRITEO_COLUMNS

from . import lists, vocab
from .readers import count_byte
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
try:
    from . import _lists
except ImportError as e:   # not built: the polars path parses every block with list categoricals
    _lists = None
    log.debug("preprocessing._lists is not available (%s); blocks with list categoricals are parsed by polars", e)

N_INT, N_CAT = 13, 26


def block_parser(fmt, t: Transforms, types: dict,
                 coded: bool = False) -> Callable[..., pl.DataFrame | vocab.Coded | None] | None:
    """The block parser for this input (block, [missing] -> intermediate rows, or None to use the polars path),
    or None where the input is not plain Criteo TSV with the standard transforms. ``coded``: the vocabulary
    features come as codes into the block's distinct values (``vocab.Coded``, as ``vocab.dictionary_encode``
    would code them) straight from the parsed ids, without null masks in between. ``missing``, a dict, gets
    each numerical's count of missing values (their 0s hide them)."""
    if any(c.multi_valued for c in t.categorical):
        return _list_parser(fmt, t, types, coded)
    if _criteo is None or fmt.kind != "criteo" or fmt.header or list(fmt.columns or []) != CRITEO_COLUMNS:
        return None
    label, ints, cats = CRITEO_COLUMNS[0], CRITEO_COLUMNS[1:1 + N_INT], CRITEO_COLUMNS[1 + N_INT:]
    if (t.label != label or t.positive is not None or t.positive_if is not None or t.split_column
            or t.numerical != [(n, "log1p") for n in ints]
            or [c.name for c in t.categorical] != cats or any(c.kind != "hex" or c.multi_valued for c in t.categorical)
            or types != {label: pl.Float64, **dict.fromkeys(ints, pl.Float64), **dict.fromkeys(cats, pl.String)}):
        return None
    hashed = [(c.name, c.hash_buckets) for c in t.categorical if c.hash_buckets is not None]
    to_code = t.vocab_features if coded and vocab.native() else []

    distinct: dict[str, int] = {}   # each coded feature's distinct values in the last block: the next one's table

    def parse(block: bytes | memoryview, missing: dict | None = None) -> pl.DataFrame | vocab.Coded | None:
        dictionaries = {}
        df = parse_block(block, to_code, dictionaries, missing, distinct)
        if df is not None:
            for name, buckets in hashed:
                df = df.with_columns(hashed_index(df[name], buckets).alias(name))
        return vocab.Coded(df, dictionaries) if df is not None and to_code else df

    return parse


def parse_block(block: bytes | memoryview, coded: list[str] = (), dictionaries: dict | None = None,
                missing: dict | None = None, distinct: dict[str, int] | None = None) -> pl.DataFrame | None:
    """Intermediate rows of a block of regular Criteo rows, or None where any row is not regular. The
    categoricals in ``coded`` are codes instead (``vocab.codes_of``; their distinct values go to ``dictionaries``,
    their number to ``distinct``, whose previous block's numbers size the tables); ``missing`` gets each
    numerical's count of empty fields."""
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
            dictionaries[name], columns[name] = _coded(name, cat[j], None if valid[j].all() else valid[j], distinct)
    df = pl.DataFrame(columns)
    missing = [j for j, name in enumerate(cats) if name not in coded and not valid[j].all()]
    if missing:
        masks = pl.DataFrame({f"__valid{j}": valid[j] for j in missing})
        df = pl.concat([df, masks], how="horizontal").lazy().select(
            pl.col(CRITEO_COLUMNS[:1 + N_INT]),
            *[pl.when(pl.col(f"__valid{j}")).then(pl.col(c)).alias(c) if j in missing else pl.col(c)
              for j, c in enumerate(cats)]).collect()
    return df


# ---- Criteo-layout rows with list categoricals (preprocessing._lists) ------------------------------------------
_LIST_KINDS = {"hex": 1, "int": 2}


@dataclass(frozen=True)
class _ListLayout:
    """The arguments of ``_lists.parse`` that do not change from block to block: per categorical its kind
    (0 one-hot hex, 1 hex list, 2 int list), separator, fixed hotness and max_hotness (0: none)."""

    kinds: bytes
    seps: bytes
    fixed: np.ndarray
    keep: np.ndarray
    lists: tuple   # the list categoricals (transforms.Categorical) in column order


def _list_parser(fmt, t: Transforms, types: dict, coded: bool):
    """``block_parser`` for Criteo-layout TSV rows with list categoricals (hex or int elements joined by a
    one-byte ``sep``, one-hot categoricals hex), or None where the input or transforms differ."""
    label, ints, cats = CRITEO_COLUMNS[0], CRITEO_COLUMNS[1:1 + N_INT], CRITEO_COLUMNS[1 + N_INT:]
    if (_lists is None or fmt.kind not in ("criteo", "tsv") or fmt.header or list(fmt.columns or []) != CRITEO_COLUMNS
            or t.label != label or t.positive is not None or t.positive_if is not None or t.split_column
            or t.numerical != [(n, "log1p") for n in ints] or [c.name for c in t.categorical] != cats
            or types != {label: pl.Float64, **dict.fromkeys(ints, pl.Float64), **dict.fromkeys(cats, pl.String)}):
        return None
    for c in t.categorical:
        if not c.multi_valued:
            if c.kind != "hex":
                return None
        elif c.kind not in _LIST_KINDS or len((c.sep or "").encode()) != 1 or \
                c.sep in "\t\n\r\"-+ 0123456789abcdefABCDEF":
            return None
    layout = _ListLayout(
        kinds=bytes(_LIST_KINDS[c.kind] if c.multi_valued else 0 for c in t.categorical),
        seps=bytes(ord(c.sep) if c.multi_valued else 0 for c in t.categorical),
        fixed=np.array([c.hotness or 0 if c.multi_valued else 0 for c in t.categorical], np.int64),
        keep=np.array([c.max_hotness or 0 for c in t.categorical], np.int64),
        lists=tuple(c for c in t.categorical if c.multi_valued))
    hashed = [c for c in t.categorical if c.hash_buckets is not None]
    to_code = t.vocab_features if coded and vocab.native() else []

    distinct: dict[str, int] = {}   # as in block_parser

    def parse(block: bytes | memoryview, missing: dict | None = None) -> pl.DataFrame | vocab.Coded | None:
        dictionaries = {}
        df = parse_list_block(block, layout, to_code, dictionaries, missing, distinct)
        if df is not None:
            df = df.with_columns((lists.hashed(df[c.name], c.hash_buckets, hashed_index) if c.multi_valued
                                  else hashed_index(df[c.name], c.hash_buckets)).alias(c.name) for c in hashed)
        return vocab.Coded(df, dictionaries) if df is not None and to_code else df

    return parse


def parse_list_block(block: bytes | memoryview, layout: _ListLayout, coded: list[str] = (),
                     dictionaries: dict | None = None, missing: dict | None = None,
                     distinct: dict[str, int] | None = None) -> pl.DataFrame | None:
    """Intermediate rows of a block of regular Criteo-layout rows with list categoricals (as ``parse_block``;
    a list column is a List of its typed elements, or in ``coded`` of codes, 0 for a missing element), or None
    where any row is not regular (a bad row among them: the polars path reports it)."""
    n = _lists.count_lines(block)
    if n == 0:
        return None
    label = np.empty(n, np.int8)
    num = np.empty((N_INT, n), np.float32)
    cat = np.empty((N_CAT, n), np.uint32)
    valid = np.empty((N_CAT, n), np.bool_)
    empty = np.zeros(N_INT, np.int64)
    used = np.zeros(N_CAT, np.int64)
    room = {}   # a variable-length list has at most one element a row plus one per separator
    values, elements = [], []
    for c in layout.lists:
        cap = n * (c.max_hotness or c.hotness or 0) or \
            room.setdefault(c.sep, count_byte(block, ord(c.sep)) + n)
        values.append(np.empty(cap, np.uint32 if c.kind == "hex" else np.int64))
        elements.append(np.empty(cap, np.bool_))
    lengths = tuple(np.empty(n, np.int64) for _ in layout.lists)
    truncated = tuple(np.empty(n, np.bool_) for _ in layout.lists)
    if _lists.parse(block, layout.kinds, layout.seps, layout.fixed, layout.keep, label, num, cat, valid, empty,
                    tuple(values), tuple(elements), lengths, truncated, used) != n:
        return None
    if missing is not None:
        missing.update(zip(CRITEO_COLUMNS[1:1 + N_INT], empty.tolist()))
    columns = {CRITEO_COLUMNS[0]: pl.Series(CRITEO_COLUMNS[0], label)}
    columns.update({name: pl.Series(name, num[j]) for j, name in enumerate(CRITEO_COLUMNS[1:1 + N_INT])})
    cats = CRITEO_COLUMNS[1 + N_INT:]
    k = 0
    for j, name in enumerate(cats):
        if layout.kinds[j]:
            c = layout.lists[k]
            m = int(used[j])
            flat, present = values[k][:m], elements[k][:m]
            if name in coded:
                dictionaries[name], flat = _coded(name, flat, None if present.all() else present, distinct)
                flat, present = flat.astype(_narrowest(len(dictionaries[name])), copy=False), None
            columns[name] = lists.from_flat(name, flat, present, lengths[k])
            if c.max_hotness is not None:
                columns[lists.truncated_column(name)] = pl.Series(lists.truncated_column(name), truncated[k])
            k += 1
        elif name in coded:
            dictionaries[name], codes = _coded(name, cat[j], None if valid[j].all() else valid[j], distinct)
            columns[name] = pl.Series(name, codes)
        else:
            columns[name] = _with_nulls(name, cat[j], valid[j])
    return pl.DataFrame(list(columns.values()))


def _coded(name: str, values: np.ndarray, valid: np.ndarray | None,
           distinct: dict[str, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """``vocab.codes_of`` of a block's feature ``name`` with its table sized by the previous block's number of
    distinct values (``distinct``, updated here; a file's blocks are alike). Blocks parsed at once share
    ``distinct``: it is only a hint, the codes do not depend on it."""
    hint = distinct.get(name, 0) if distinct is not None else 0
    values, codes = vocab.codes_of(values, valid, expected=hint + hint // 8)
    if distinct is not None:
        distinct[name] = len(values)
    return values, codes


def _with_nulls(name: str, values: np.ndarray, valid: np.ndarray) -> pl.Series:
    if valid.all():
        return pl.Series(name, values)
    return pl.DataFrame({name: values, "\0valid": valid}).select(pl.when(pl.col("\0valid")).then(pl.col(name))
                                                                 .alias(name)).to_series()


def _narrowest(k: int) -> type:
    """The smallest unsigned type of codes 0..k (a list's codes are most of a parsed part's bytes)."""
    return np.uint8 if k < 1 << 8 else np.uint16 if k < 1 << 16 else np.uint32
