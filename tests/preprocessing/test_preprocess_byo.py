"""Bring-your-own data: UCI Adult (Parquet) with the shipped example spec (label income == '>50K')."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl

import feature_spec as fspec
from preprocessing import PreprocessConfig, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult.yaml"


def test_adult_with_example_spec(adult_parquet, tmp_path):
    raw = pl.read_parquet(adult_parquet)
    ds = Path(run(PreprocessConfig(inputs=[str(adult_parquet)], spec=str(EXAMPLE), out=str(tmp_path),
                                   split="ordered:train=0.8,test=0.2", progress=False)))
    spec = fspec.load(str(ds))
    n_train = round(0.8 * len(raw))
    assert spec.metadata["rows"] == {"train": n_train, "test": len(raw) - n_train}
    assert spec.metadata["preprocessing"]["frequency_threshold"] == 1  # the spec's default
    train, test = raw[:n_train], raw[n_train:]
    labels = np.fromfile(ds / "test" / "label.bin", dtype=np.bool_)
    np.testing.assert_array_equal(labels, (test["income"] == ">50K").to_numpy())
    num = np.fromfile(ds / "train" / "numerical.bin", dtype=np.float16).reshape(-1, 6)
    np.testing.assert_array_equal(num[:, 0], train["age"].to_numpy().astype(np.float16))       # identity
    np.testing.assert_array_equal(num[:, 1], np.log1p(train["fnlwgt"].to_numpy().astype(np.float64))
                                  .astype(np.float32).astype(np.float16))                        # log1p
    for name, t in (("occupation", 1), ("native-country", 5)):                                   # per-feature T
        counts = Counter(v for v in train[name].to_list() if v is not None)
        kept = sorted((v for v, c in counts.items() if c >= t), key=lambda v: (-counts[v], v))
        index = {v: i + 1 for i, v in enumerate(kept)}
        assert spec.feature_spec[name].cardinality == len(kept) + 1
        got = np.fromfile(ds / "test" / f"cat_{name}.bin", dtype=spec.feature_spec[name].dtype)
        np.testing.assert_array_equal(got, [index.get(v, 0) for v in test[name].to_list()])


def test_adult_default_random_split_is_stable(adult_parquet, tmp_path):
    a = Path(run(PreprocessConfig(inputs=[str(adult_parquet)], spec=str(EXAMPLE), out=str(tmp_path / "a"), progress=False)))
    spec = fspec.load(str(a))
    assert spec.metadata["preprocessing"]["split"] == "random:train=0.8,test=0.2,seed=0"
    assert abs(spec.metadata["rows"]["train"] / 48842 - 0.8) < 0.01
    b = Path(run(PreprocessConfig(inputs=[str(adult_parquet)], spec=str(EXAMPLE), out=str(tmp_path / "b"),
                                  split="random:train=0.8,test=0.2,seed=1", progress=False)))
    assert (a / "test" / "label.bin").read_bytes() != (b / "test" / "label.bin").read_bytes()
