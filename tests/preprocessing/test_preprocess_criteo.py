"""Preprocessing correctness on the real Criteo rows against an independent straightforward computation."""

from __future__ import annotations

import gzip
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import feature_spec as fspec
from preprocessing import PreprocessConfig, run
from helpers.datasets import assert_same_files

NUM = [f"I{i}" for i in range(1, 14)]
CAT = [f"C{i}" for i in range(1, 27)]


@pytest.fixture(scope="module")
def rows(criteo_10k) -> list[list[str]]:
    with gzip.open(criteo_10k, "rt") as f:
        return [line.rstrip("\n").split("\t") for line in f]


def _preprocess(criteo_10k, out: Path, threshold: int, **kw) -> Path:
    return Path(run(PreprocessConfig(inputs=[str(criteo_10k)], out=str(out), frequency_threshold=threshold,
                                     progress=False, **kw)))


def _expected_vocab(train_rows, col: int, threshold: int) -> dict[str, int]:
    counts = Counter(r[col] for r in train_rows if r[col] != "")
    kept = [v for v, c in counts.items() if c >= max(threshold, 1)]
    kept.sort(key=lambda v: (-counts[v], int(v, 16)))
    return {v: i + 1 for i, v in enumerate(kept)}


def _smallest_int(cardinality: int) -> str:
    return next(n for n, lim in (("int8", 127), ("int16", 32767), ("int32", 2**31 - 1)) if cardinality < lim)


@pytest.mark.parametrize("threshold", [0, 1, 3])
def test_indices_cardinalities_dtypes_match_independent_computation(criteo_10k, rows, tmp_path, threshold):
    ds = _preprocess(criteo_10k, tmp_path, threshold)
    spec = fspec.load(str(ds))
    bounds = {"train": (0, 8000), "val": (8000, 9000), "test": (9000, 10000)}
    assert spec.metadata["rows"] == {"train": 8000, "val": 1000, "test": 1000}
    for j, name in enumerate(CAT):
        vocab = _expected_vocab(rows[:8000], 14 + j, threshold)
        card = len(vocab) + 1
        assert spec.feature_spec[name].cardinality == card, name
        assert spec.feature_spec[name].dtype == _smallest_int(card), name
        for split, (a, b) in bounds.items():
            got = np.fromfile(ds / split / f"cat_{name}.bin", dtype=spec.feature_spec[name].dtype)
            want = np.array([vocab.get(r[14 + j], 0) for r in rows[a:b]])
            np.testing.assert_array_equal(got, want, err_msg=f"{split}/{name}")
    for split, (a, b) in bounds.items():
        labels = np.fromfile(ds / split / "label.bin", dtype=np.bool_)
        np.testing.assert_array_equal(labels, [r[0] == "1" for r in rows[a:b]])
        num = np.fromfile(ds / split / "numerical.bin", dtype=np.float16).reshape(-1, 13)
        want = np.array([[math.log1p(max(float(v), 0)) if v else 0.0 for v in r[1:14]] for r in rows[a:b]],
                        dtype=np.float32).astype(np.float16)
        np.testing.assert_array_equal(num, want)


def test_threshold_edges_exactly_t_kept_t_minus_1_dropped_missing_never_counted(criteo_10k, rows, tmp_path):
    t = 3
    ds = _preprocess(criteo_10k, tmp_path, t)
    spec = fspec.load(str(ds))
    checked = 0
    for j, name in enumerate(CAT):
        counts = Counter(r[14 + j] for r in rows[:8000])
        got = np.fromfile(ds / "train" / f"cat_{name}.bin", dtype=spec.feature_spec[name].dtype)
        for i, r in enumerate(rows[:8000]):
            value = r[14 + j]
            if value == "" or counts[value] == t - 1:
                assert got[i] == 0, (name, value)
                checked += 1
            elif counts[value] == t:
                assert got[i] > 0, (name, value)
                checked += 1
    assert checked > 1000
    t0 = fspec.load(str(_preprocess(criteo_10k, tmp_path / "t0", 0)))
    t1 = fspec.load(str(_preprocess(criteo_10k, tmp_path / "t1", 1)))
    assert [t0.feature_spec[c].cardinality for c in CAT] == [t1.feature_spec[c].cardinality for c in CAT]


def test_vocab_parquet_and_metadata(criteo_10k, tmp_path):
    import polars as pl
    ds = _preprocess(criteo_10k, tmp_path, 2)
    spec = fspec.load(str(ds))
    v = pl.read_parquet(ds / "vocab" / "C1.parquet")
    assert v.columns == ["value", "count", "index"]
    assert v["index"].to_list() == list(range(1, len(v) + 1))
    assert len(v) + 1 == spec.feature_spec["C1"].cardinality
    assert (ds / "_SUCCESS").exists() and not (tmp_path / "_work").exists()
    meta = spec.metadata
    assert meta["preprocessing"]["frequency_threshold"] == 2 and ds.name == f"criteo-{meta['fingerprint'][:12]}"
    assert v["value"].null_count() == 0  # missing is never counted
    assert set(meta["checksums"]) >= {"train/label.bin", "test/cat_C26.bin", "vocab/C1.parquet"}


def test_workers_and_rerun_give_identical_bytes(criteo_10k, tmp_path, capsys):
    one = _preprocess(criteo_10k, tmp_path / "a", 2)
    two = _preprocess(criteo_10k, tmp_path / "b", 2, workers=2)
    assert one.name == two.name
    assert_same_files(one, two)
    capsys.readouterr()
    assert _preprocess(criteo_10k, tmp_path / "a", 2) == one
    assert "already complete, skipping preprocessing" in capsys.readouterr().err


def test_files_split_and_hash_buckets(criteo_10k, rows, tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec = fspec.criteo_spec()
    spec.feature_spec["C3"].hash_buckets = 1000
    spec_path.write_text(fspec.to_yaml(spec))
    train, test = tmp_path / "train.tsv", tmp_path / "test.tsv"
    train.write_text("".join("\t".join(r) + "\n" for r in rows[:6000]))
    test.write_text("".join("\t".join(r) + "\n" for r in rows[6000:]))
    ds = Path(run(PreprocessConfig(inputs=[f"train={train}", f"test={test}"], spec=str(spec_path),
                                   out=str(tmp_path / "out"), progress=False)))
    out = fspec.load(str(ds))
    assert out.metadata["rows"] == {"train": 6000, "test": 4000}
    assert out.feature_spec["C3"].cardinality == 1000 and out.feature_spec["C3"].dtype == "int16"
    c3 = np.fromfile(ds / "test" / "cat_C3.bin", dtype=np.int16)
    from preprocessing.hashing import splitmix64
    want = [0 if r[16] == "" else 1 + int(splitmix64(np.array([int(r[16], 16)], dtype=np.uint64))[0]) % 999
            for r in rows[6000:]]
    np.testing.assert_array_equal(c3, want)
