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

from helpers.paths import CRITEO_10K, need
from preprocessing import PreprocessConfig, run
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
