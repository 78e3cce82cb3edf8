"""`dlrmflow synth --multi-hot-sizes`: MLPerf-like multi-hot rows, the same bytes whatever --files/--workers,
the one-hot rows' ids first, the planted term of a list the mean of its ids' effects, and an input spec that
`dlrmflow preprocess --spec` reads into fixed-hotness features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import feature_spec as fspec
from feature_spec.presets import CRITEO_CATEGORICAL, CRITEO_COLUMNS
from common.metrics import roc_auc
from flows.cli import main
from preprocessing import PreprocessConfig, run
from synthetic.generator import METADATA_FILE, SPEC_FILE, SynthConfig, SyntheticData, generate

MLPERF = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
ROWS = 3_000


def _read(path: Path) -> pl.DataFrame:
    return pl.read_csv(path, separator="\t", has_header=False, new_columns=CRITEO_COLUMNS, quote_char=None,
                       infer_schema=False)


@pytest.fixture(scope="module")
def multi_hot(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "mh"
    assert main(["synth", "--rows", str(ROWS), "--seed", "5", "--out", str(out), "--quiet",
                 "--multi-hot-sizes", ",".join(map(str, MLPERF))]) == 0
    return out


def test_fields_are_lists_of_n_ids_after_the_one_hot_id(multi_hot, tmp_path):
    generate(str(tmp_path / "one"), ROWS, seed=5)
    rows, one = _read(multi_hot / "part-00000.tsv"), _read(tmp_path / "one" / "part-00000.tsv")
    for c, n in zip(CRITEO_CATEGORICAL, MLPERF):
        lists = rows[c].str.split("|")
        present = lists.is_not_null()
        assert (present == one[c].is_not_null()).all(), c          # a missing field stays missing (empty)
        assert set(lists.filter(present).list.len().unique().to_list()) == {n}, c
        assert (lists.filter(present).list.first() == one[c].filter(present)).all(), c
    assert rows.select(CRITEO_COLUMNS[1:14]).equals(one.select(CRITEO_COLUMNS[1:14]))


def test_same_bytes_whatever_files_and_workers(multi_hot, tmp_path):
    split = generate(str(tmp_path / "split"), ROWS, files=3, seed=5, workers=2, multi_hot_sizes=MLPERF)
    whole = (multi_hot / "part-00000.tsv").read_bytes()
    assert b"".join((tmp_path / "split" / f["name"]).read_bytes() for f in split["files"]) == whole
    assert (tmp_path / "split" / SPEC_FILE).read_bytes() == (multi_hot / SPEC_FILE).read_bytes()
    other = generate(str(tmp_path / "other"), ROWS, seed=5, multi_hot_sizes=[2])
    assert (tmp_path / "other" / "part-00000.tsv").read_bytes() != whole
    assert other["multi_hot_sizes"] == dict.fromkeys(CRITEO_CATEGORICAL, 2)


def test_planted_model_averages_the_ids_effects(multi_hot):
    import json

    meta = json.loads((multi_hot / METADATA_FILE).read_text())
    data = SyntheticData(SynthConfig(out=str(multi_hot), rows=ROWS, seed=5, multi_hot_sizes=MLPERF))
    block = data.block(0)
    labels = _read(multi_hot / "part-00000.tsv")["label"].cast(pl.Int8).to_numpy().astype(bool)
    assert np.array_equal(labels, block.label)
    assert meta["best_auc"] == pytest.approx(roc_auc(block.probability, block.label), abs=1e-12)
    assert 0.65 < meta["best_auc"] < 0.9 and meta["format"] == "criteo-tsv-multi-hot"
    # one multi-hot column's term, by hand: the mean over its ids of the effect of each id's bucket
    name = next(c for c in data.model.categorical if block.values[c].ndim == 2)
    effects, ids, missing = data.model.categorical[name], block.values[name], block.missing[name]
    k = len(effects) - 1
    by_hand = np.array([effects[k] if missing[r] else np.mean([effects[min(i, k)] for i in ids[r]])
                        for r in range(len(ids))])
    without = {**block.values, name: ids[:, 0]}
    delta = data.model.terms(block.values, block.missing) - data.model.terms(without, block.missing)
    first = np.where(missing, effects[k], effects[np.minimum(ids[:, 0], k)])
    assert np.allclose(delta, by_hand - first)


def test_written_spec_preprocesses_into_fixed_hotness_features(multi_hot, tmp_path):
    dataset = Path(run(PreprocessConfig(inputs=[str(multi_hot)], spec=str(multi_hot / SPEC_FILE),
                                        out=str(tmp_path), progress=False)))
    spec = fspec.load(str(dataset))
    rows = spec.metadata["rows"]["train"]
    for c, n in zip(CRITEO_CATEGORICAL, MLPERF):
        f = spec.feature_spec[c]
        assert f.values_per_row == n and (f.hotness == n if n > 1 else f.hotness is None)
        size = np.fromfile(dataset / "train" / fspec.categorical_file_name(c), f.dtype).size
        assert size == rows * n
        if n > 1:
            assert spec.metadata["list_lengths"]["train"][c]["values"] == rows * n
