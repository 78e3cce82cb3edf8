"""The profile the parse records per input file for the data gate (``preprocessing.profile``): the same from the C
fast path and the polars path, and the numbers the raw rows give (rows, positives, missing fields, values and the
most frequent ones, a histogram holding every present numerical)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from helpers.datasets import assert_same_files
from helpers.paths import CRITEO_10K, need
from preprocessing import PreprocessConfig, readers, run, vocab
from preprocessing.profile import StoredProfiles, bins


@pytest.fixture(scope="module")
def day(tmp_path_factory) -> Path:
    """3,000 real Criteo rows as one day's file."""
    lines = gzip.decompress(need(CRITEO_10K).read_bytes()).decode().splitlines(keepends=True)
    path = tmp_path_factory.mktemp("day") / "part-0.tsv"
    path.write_text("".join(lines[:3000]))
    return path


def _profile(day: Path, store: Path, **options) -> dict:
    config = PreprocessConfig(inputs=[f"train={day}"], out=str(store), progress=False, **options)
    run(config)
    return dict(StoredProfiles(config).profiles())[str(day)]


def test_the_profile_is_the_raw_rows_numbers_on_either_parse_path(day, tmp_path):
    fast, slow = _profile(day, tmp_path / "fast"), _profile(day, tmp_path / "slow", fast_parse=False)
    assert fast == slow
    rows = [line.split("\t") for line in day.read_text().splitlines()]
    assert (fast["rows"], fast["positives"]) == (len(rows), sum(r[0] == "1" for r in rows))
    names = [f"I{k}" for k in range(1, 14)] + [f"C{k}" for k in range(1, 27)]
    assert fast["missing"] == {name: sum(not r[k] for r in rows) for k, name in enumerate(names, 1)}
    for k, name in enumerate(names[:13], 1):   # every present value in its bin (log1p(max(x, 0)) of the field)
        present = [np.log1p(max(float(r[k]), 0)) for r in rows if r[k]]
        expected = Counter(str(b) for b in bins(np.asarray(present, np.float32)).tolist())
        assert fast["histograms"][name] == dict(expected)
    counts = Counter(r[14] for r in rows if r[14])   # C1, as the parse codes it
    assert fast["values"]["C1"] == sum(counts.values())
    top = sorted(counts.items(), key=lambda kv: (-kv[1], int(kv[0], 16)))[:100]
    assert fast["top"]["C1"] == {"values": [int(v, 16) for v, _ in top], "counts": [n for _, n in top]}


def test_bins_are_fixed_quarter_octaves():
    x = np.array([0, 1e-9, 2.0**-6, 0.69, 1.0, 1.25, 1.5, 2.0, 35.0, -1.0, 1e30], np.float32)
    assert bins(x).tolist() == [0, 0, 1, 22, 25, 26, 27, 29, 45, -25, 188]
    assert json.dumps(bins(x).tolist())   # plain ints


def test_counts_that_keep_repeated_values_give_the_same_dataset_and_profile(day, tmp_path, monkeypatch):
    """Where summing a feature's block counts does not pay (mostly distinct values, ``vocab._PAYS``), its count
    table keeps a value in several rows: the vocabularies, the dataset and the profile are those of summed counts
    (on the count stage's path, an ordered split, and the parse's, a dated train file)."""
    monkeypatch.setattr(readers, "BLOCK_BYTES", 24 << 10)   # ~100 rows a block: 30 blocks
    monkeypatch.setattr(vocab, "_COMPACT_MIN", 64)          # sums while the blocks come, as on large files
    lines = day.read_text().splitlines(keepends=True)
    files = tmp_path / "files"
    files.mkdir()
    for k in range(3):   # the first two all train rows: their counts are kept in the store
        (files / f"part-{k}.tsv").write_text("".join(lines[1000 * k:1000 * (k + 1)]))

    def dataset(store: Path) -> Path:
        run(PreprocessConfig(inputs=[str(files)], out=str(store), progress=False, frequency_threshold=2,
                             split="ordered:train=0.7,val=0.15,test=0.15"))
        return next((store / "datasets").iterdir())

    summed = dataset(tmp_path / "summed"), _profile(day, tmp_path / "summed-dated")
    monkeypatch.setattr(vocab, "_PAYS", 0.0)   # no sum pays: every table that was summed once keeps repeats
    repeated = dataset(tmp_path / "repeated"), _profile(day, tmp_path / "repeated-dated")
    for store in ("repeated", "repeated-dated"):   # the count folders kept repeats, of the high-cardinality features
        listed = [json.loads(p.read_text()) for p in (tmp_path / store).rglob(vocab._REPEATED)]
        assert listed and all("C3" in names for names in listed)
    assert_same_files(summed[0], repeated[0])
    assert summed[1] == repeated[1]
