"""Split rules `column:COL` (the value names the split), `column:COL:a<v1,b<v2,c` (cut points, numeric
or string) and `--count-on all`, checked against an independent row-by-row computation."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import feature_spec as fspec
from preprocessing import PreprocessConfig, run

SPEC = """\
feature_spec:
  click: {}
  n1: {}
  c1: {dtype: str}
  c2: {dtype: int}
channel_spec:
  label: [click]
  numerical: [n1]
  categorical: [c1, c2]
metadata:
  name: splits
"""
N = 3000
THRESHOLD = 2


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, Path, list[dict]]:
    """A CSV with a label, a numerical, a string and an int categorical (Zipf-like, some missing) and three
    split columns: `part` (split names), `day` (numbers) and `date` (ISO dates as strings)."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(N):
        c1 = "" if rng.random() < 0.05 else f"v{min(int(rng.zipf(1.3)), 400)}"
        c2 = "" if rng.random() < 0.05 else str(min(int(rng.zipf(1.5)), 300) * 7 - 50)
        day = int(rng.integers(0, 30))
        rows.append({"click": int(rng.random() < 0.3), "n1": "" if i % 11 == 0 else str(int(rng.integers(-3, 500))),
                     "c1": c1, "c2": c2, "part": str(rng.choice(["train", "train", "train", "val", "test"])),
                     "day": day, "date": f"2024-01-{day + 1:02d}"})
    folder = tmp_path_factory.mktemp("splits")
    csv = folder / "data.csv"
    cols = ["click", "n1", "c1", "part", "c2", "day", "date"]
    csv.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    spec = folder / "spec.yaml"
    spec.write_text(SPEC)
    return csv, spec, rows


def _run(table, out: Path, split: str, **kw) -> Path:
    csv, spec, _ = table
    return Path(run(PreprocessConfig(inputs=[str(csv)], spec=str(spec), out=str(out), split=split,
                                     frequency_threshold=THRESHOLD, progress=False, **kw)))


def _vocab(rows: list[dict], name: str, key) -> dict:
    counts = Counter(r[name] for r in rows if r[name] != "")
    kept = sorted((v for v, c in counts.items() if c >= THRESHOLD), key=lambda v: (-counts[v], key(v)))
    return {v: i + 1 for i, v in enumerate(kept)}


def _check(ds: Path, members: dict[str, list[dict]], counted: list[dict]) -> None:
    """Every split holds exactly its rows, in input order, encoded with the vocabulary of ``counted``."""
    spec = fspec.load(str(ds))
    assert spec.metadata["rows"] == {s: len(r) for s, r in members.items()}
    assert sorted(p.name for p in ds.iterdir() if p.is_dir() and p.name != "vocab") == sorted(members)
    vocabs = {"c1": _vocab(counted, "c1", str), "c2": _vocab(counted, "c2", int)}
    for name, vocab in vocabs.items():
        assert spec.feature_spec[name].cardinality == len(vocab) + 1, name
    for split, rows in members.items():
        labels = np.fromfile(ds / split / "label.bin", dtype=np.bool_)
        np.testing.assert_array_equal(labels, [r["click"] == 1 for r in rows])
        num = np.fromfile(ds / split / "numerical.bin", dtype=np.float16)
        want = [np.float16(np.float32(math.log1p(max(int(r["n1"]), 0)) if r["n1"] != "" else 0.0)) for r in rows]
        np.testing.assert_array_equal(num, np.array(want, dtype=np.float16))
        for name, vocab in vocabs.items():
            got = np.fromfile(ds / split / f"cat_{name}.bin", dtype=spec.feature_spec[name].dtype)
            np.testing.assert_array_equal(got, [vocab.get(r[name], 0) for r in rows], err_msg=f"{split}/{name}")


def test_column_value_names_the_split(table, tmp_path):
    rows = table[2]
    ds = _run(table, tmp_path, "column:part")
    members = {s: [r for r in rows if r["part"] == s] for s in ("train", "val", "test")}
    _check(ds, members, members["train"])
    assert fspec.load(str(ds)).metadata["preprocessing"]["split"] == "column:part"


def test_numeric_cut_points(table, tmp_path):
    rows = table[2]
    ds = _run(table, tmp_path, "column:day:train<20,val<25,test")
    members = {"train": [r for r in rows if r["day"] < 20], "val": [r for r in rows if 20 <= r["day"] < 25],
               "test": [r for r in rows if r["day"] >= 25]}
    _check(ds, members, members["train"])


def test_string_cut_points(table, tmp_path):
    rows = table[2]
    ds = _run(table, tmp_path, "column:date:train<2024-01-11,test")
    members = {"train": [r for r in rows if r["date"] < "2024-01-11"],
               "test": [r for r in rows if r["date"] >= "2024-01-11"]}
    assert 0 < len(members["train"]) < N
    _check(ds, members, members["train"])


@pytest.mark.parametrize("split", ["ordered:train=0.7,val=0.2,test=0.1", "column:part"])
def test_count_on_all_uses_every_split(table, tmp_path, split):
    rows = table[2]
    ds = _run(table, tmp_path, split, count_on="all")
    if split.startswith("ordered"):
        a, b = round(0.7 * N), round(0.9 * N)
        members = {"train": rows[:a], "val": rows[a:b], "test": rows[b:]}
    else:
        members = {s: [r for r in rows if r["part"] == s] for s in ("train", "val", "test")}
    _check(ds, members, rows)
    train_only = _run(table, tmp_path / "train_only", split)
    assert fspec.load(str(ds)).feature_spec["c1"].cardinality > fspec.load(str(train_only)).feature_spec["c1"].cardinality
