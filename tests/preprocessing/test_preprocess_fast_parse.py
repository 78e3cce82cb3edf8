"""The C fast parse of Criteo blocks (preprocessing._criteo) gives the polars path's intermediate rows bit for bit,
and every irregular block falls back to the polars path (same rows, same bad-row reports and errors)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from feature_spec import CRITEO_COLUMNS, criteo_spec
from preprocessing import PreprocessConfig, fastparse, readers
from preprocessing import run as preprocess
from preprocessing.errors import BadRowError, BadRows
from preprocessing.transforms import Transforms, to_intermediate
from helpers.datasets import assert_same_files

pytestmark = pytest.mark.skipif(fastparse._criteo is None, reason="preprocessing._criteo is not built")

REAL = Path("/work/shared/data/criteo/criteo_kaggle_train_head10k.txt.gz")
TRANSFORMS = Transforms.from_spec(criteo_spec(), 3)
TYPES = TRANSFORMS.parse_types()
FMT = readers.Format("criteo", columns=list(CRITEO_COLUMNS))


def _row(label="1", ints=None, cats=None) -> str:
    ints = ["1"] * 13 if ints is None else ints
    cats = ["68fd1e64"] * 26 if cats is None else cats
    return "\t".join([label, *ints, *cats])


def _polars(block: bytes, policy: str = "skip"):
    """The general path: readers + to_intermediate, with the bad rows it reports."""
    bad = BadRows("f.tsv", policy)
    df, lines, _ = readers._parse_block(block, 1, CRITEO_COLUMNS, FMT, TYPES, bad)
    return to_intermediate(df, TRANSFORMS, lines, bad, None), bad.count


def _assert_same(fast: pl.DataFrame, slow: pl.DataFrame) -> None:
    assert fast.schema == slow.schema
    assert len(fast) == len(slow)
    for c in slow.columns:
        a, b = fast[c], slow[c]
        assert a.null_count() == b.null_count(), c
        assert a.is_null().equals(b.is_null()), c
        if a.dtype == pl.Float32:   # bit-identical, incl. the sign of zero
            assert np.array_equal(a.fill_null(0).to_numpy().view(np.uint32), b.fill_null(0).to_numpy().view(np.uint32)), c
        else:
            assert a.equals(b), c


def test_applies_only_to_the_standard_criteo_transforms():
    assert fastparse.block_parser(FMT, TRANSFORMS, TYPES) is not None
    assert fastparse.block_parser(readers.Format("tsv", columns=list(CRITEO_COLUMNS)), TRANSFORMS, TYPES) is None
    other = Transforms.from_spec(criteo_spec(), 3)
    other.numerical = [(n, "none") for n, _ in other.numerical]
    assert fastparse.block_parser(FMT, other, other.parse_types()) is None


@pytest.mark.skipif(not REAL.exists(), reason="real Criteo rows not available")
def test_config_switch_turns_it_off_with_the_same_bytes(monkeypatch, tmp_path):
    calls, parse_block = [], fastparse.parse_block
    monkeypatch.setattr(fastparse, "parse_block", lambda *a: calls.append(1) or parse_block(*a))
    datasets = []
    for fast in (True, False):
        calls.clear()
        datasets.append(Path(preprocess(PreprocessConfig(inputs=[str(REAL)], out=str(tmp_path / str(fast)),
                                                         progress=False, frequency_threshold=2, fast_parse=fast))))
        assert bool(calls) == fast
    on, off = datasets
    assert on.name == off.name   # not part of the fingerprint
    assert_same_files(on, off)


@pytest.mark.skipif(not REAL.exists(), reason="real Criteo rows not available")
def test_real_rows_identical():
    block = gzip.open(REAL).read()
    block = block[:block.rfind(b"\n") + 1]
    fast = fastparse.parse_block(block)
    assert fast is not None and len(fast) == 10_000
    slow, bad = _polars(block)
    assert bad == 0
    _assert_same(fast, slow)


EDGE_ROWS = [
    _row(),
    _row("0", ints=[""] * 13, cats=[""] * 26),                          # everything missing
    _row(ints=["-1", "-5", "0", "00", "007", "65535", "65536", "999999999999999", "123456789012", "", "2", "3", "-999"]),
    _row(cats=["ffffffff", "FFFFFFFF", "0", "00000000", "a", "0001f", "DeadBeef", *[""] * 19]),
    _row(cats=["68fd1e64"] * 25 + [""]),                                # empty trailing field
    _row(ints=["1"] * 12 + [""], cats=[""] * 26),                       # only tabs at the end
]


def test_edge_cases_identical():
    block = ("\n".join(EDGE_ROWS) + "\n").encode()
    fast = fastparse.parse_block(block)
    assert fast is not None
    slow, bad = _polars(block)
    assert bad == 0
    _assert_same(fast, slow)


def test_hashed_categoricals_identical():
    transforms = Transforms.from_spec(criteo_spec(), 3)
    transforms.categorical[0].hash_buckets = 1000
    block = ("\n".join(EDGE_ROWS) + "\n").encode()
    fast = fastparse.block_parser(FMT, transforms, transforms.parse_types())(block)
    df, lines, _ = readers._parse_block(block, 1, CRITEO_COLUMNS, FMT, TYPES, BadRows("f", "skip"))
    _assert_same(fast, to_intermediate(df, transforms, lines, BadRows("f", "skip"), None))


BAD_ROWS = {
    "too few fields": _row()[:-9],
    "too many fields": _row() + "\t1",
    "empty line": "",
    "label 2": _row("2"),
    "label missing": _row(""),
    "label 1.0": _row("1.0"),
    "float int": _row(ints=["1.5"] + ["1"] * 12),
    "negative zero": _row(ints=["-0"] + ["1"] * 12),
    "plus sign": _row(ints=["+3"] + ["1"] * 12),
    "non-numeric int": _row(ints=["abc"] + ["1"] * 12),
    "too many digits": _row(ints=["1234567890123456"] + ["1"] * 12),
    "hex too long": _row(cats=["100000000"] + ["68fd1e64"] * 25),
    "non-hex": _row(cats=["xyz"] + ["68fd1e64"] * 25),
    "0x prefix": _row(cats=["0x1f"] + ["68fd1e64"] * 25),
    "space": _row(cats=[" 1f"] + ["68fd1e64"] * 25),
    "quotes": _row(cats=['"1f"'] + ["68fd1e64"] * 25),
    "crlf": _row() + "\r",
}


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_irregular_blocks_fall_back(tmp_path, kind):
    text = "\n".join([_row(), BAD_ROWS[kind], _row("0")]) + "\n"
    assert fastparse.parse_block(text.encode()) is None
    path = tmp_path / "f.tsv"
    path.write_text(text)
    fast = fastparse.block_parser(FMT, TRANSFORMS, TYPES)

    def run(policy, use_fast):
        bad = BadRows(str(path), policy)
        parts = [df if from_fast_path else to_intermediate(df, TRANSFORMS, lines, bad, None)
                 for df, lines, from_fast_path, _ in readers.read(str(path), FMT, TYPES, bad,
                                                               fast=fast if use_fast else None)]
        return pl.concat(parts), bad.count

    (with_fast, n_fast), (without, n_without) = run("skip", True), run("skip", False)
    assert n_fast == n_without
    _assert_same(with_fast, without)
    errors = []
    for use_fast in (True, False):
        try:
            run("error", use_fast)
            errors.append(None)
        except BadRowError as e:
            errors.append(str(e))
    assert errors[0] == errors[1]


def test_no_trailing_newline_and_empty_block():
    assert fastparse.parse_block(_row().encode()) is None
    assert fastparse.parse_block(b"") is None


def test_a_nan_integer_falls_back_and_is_missing_like_an_empty_field():
    """`nan` is no regular Criteo integer: the C parse declines the block, and the polars path reads it as missing,
    bit for bit what the C parse makes of an empty field (no NaN reaches numerical.bin)."""
    ints = ["5", "", "nan", "NaN", "70000"] + ["1"] * 8
    nan_block = ("\n".join([_row(ints=ints), _row()]) + "\n").encode()
    empty_block = nan_block.replace(b"\tnan\t", b"\t\t").replace(b"\tNaN\t", b"\t\t")
    assert fastparse.parse_block(nan_block) is None
    fast = fastparse.parse_block(empty_block)
    slow, bad = _polars(nan_block)
    assert bad == 0
    _assert_same(fast, slow)
    assert np.isfinite(slow.select(CRITEO_COLUMNS[1:14]).to_numpy()).all()
