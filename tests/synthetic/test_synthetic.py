"""Synthetic Criteo data: format, determinism, calibration against the real rows, planted-model metrics."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import polars as pl
import pytest

from common.metrics import log_loss, roc_auc
from helpers.datasets import read_tsv

from feature_spec.presets import CRITEO_CATEGORICAL, CRITEO_COLUMNS, CRITEO_NUMERICAL
from flows.cli import main
from synthetic import columns as sc
from synthetic.generator import BLOCK_ROWS, METADATA_FILE, SynthConfig, SyntheticData, generate

HEX = re.compile(rb"^[0-9a-f]{8}$")
INT = re.compile(rb"^-?\d+$")


def missing_rates(df: pl.DataFrame) -> dict[str, float]:
    return {c: df[c].null_count() / df.height for c in CRITEO_COLUMNS[1:]}


@pytest.fixture(scope="module")
def synth_50k(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth50k")
    meta = generate(str(out), 50_000, seed=7)
    return out, meta, read_tsv(out / "part-00000.tsv")


def test_format_is_criteo_tsv(synth_50k):
    out, meta, _ = synth_50k
    raw = (out / "part-00000.tsv").read_bytes()
    assert b"\r" not in raw and raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == 50_000 == meta["rows"]
    for line in lines[:3000]:
        fields = line.split(b"\t")
        assert len(fields) == 40
        assert fields[0] in (b"0", b"1")
        assert all(f == b"" or INT.match(f) for f in fields[1:14])
        assert all(f == b"" or HEX.match(f) for f in fields[14:])
    assert json.loads((out / METADATA_FILE).read_text()) == meta


def test_missing_rates_and_groups(synth_50k):
    _, _, df = synth_50k
    rates = missing_rates(df)
    for c, r in rates.items():
        assert abs(r - sc.missing_rate(c)) < 0.012, c
    for _, group in sc.MISSING_GROUPS:
        first = df[group[0]].is_null()
        for other in group[1:]:
            assert (df[other].is_null() & first).sum() >= 0.95 * df[group[0]].null_count() * min(
                1, sc.missing_rate(other) / sc.missing_rate(group[0]))


def test_label_rate_and_values(synth_50k):
    _, meta, df = synth_50k
    labels = df["label"].cast(pl.Int8)
    assert abs(labels.mean() - 0.25) < 0.015
    assert meta["label_rate"] == pytest.approx(labels.mean())
    counts = {c: df[c].drop_nulls().cast(pl.Int64) for c in CRITEO_NUMERICAL}
    assert counts["I2"].min() < 0 and all(counts[c].min() >= 0 for c in CRITEO_NUMERICAL if c != "I2")
    assert counts["I5"].median() < counts["I5"].mean() / 3  # heavy tail


def test_skew_of_categoricals(synth_50k):
    _, _, df = synth_50k
    for c in ("C1", "C9", "C10", "C19"):
        values = df[c].drop_nulls()
        top_share = values.value_counts(sort=True)["count"][0] / values.len()
        assert abs(top_share - sc.CATEGORICAL[c].top1) < 0.02, c


def test_cardinality_grows_with_rows(tmp_path):
    """The vocabularies are fitted to the row count (``sc.fit``, what SyntheticData holds for each column and what
    the metadata's vocabulary_sizes report): C3's expected distinct count is the real rows' at 10k rows and over
    100 times that at 10M, C9 keeps its 3 values; written files: 40k rows hold over 4 times the distinct C3
    values of 5k. (At 10M only C3 and C9 are fitted: a SyntheticData fits all 26 columns, ~11 CPU-seconds.)"""
    prof = sc.CATEGORICAL["C3"]
    fitted = {n: sc.fit(prof, n) for n in (10_000, 10_000_000)}
    distinct = {n: sc.expected_distinct(shape, vocab, n * (1 - prof.missing)) for n, (shape, vocab) in fitted.items()}
    assert distinct[10_000] == pytest.approx(5520, rel=0.02)
    assert distinct[10_000_000] > 100 * distinct[10_000] and sc.fit(sc.CATEGORICAL["C9"], 10_000_000)[1] == 3
    a = generate(str(tmp_path / "a"), 5_000, seed=1)
    b = generate(str(tmp_path / "b"), 40_000, seed=1)
    assert [m["vocabulary_sizes"]["C3"] for m in (a, b)] == [sc.fit(prof, n)[1] for n in (5_000, 40_000)]
    n_a, n_b = (read_tsv(tmp_path / d / "part-00000.tsv")["C3"].n_unique() for d in "ab")
    assert n_b > 4 * n_a


def test_deterministic_bytes_whatever_the_split(tmp_path):
    rows = BLOCK_ROWS + 3_000  # two blocks; file boundaries fall inside blocks
    one = generate(str(tmp_path / "one"), rows, seed=11)
    split = generate(str(tmp_path / "split"), rows, files=3, gzip=True, seed=11, workers=2)
    other = generate(str(tmp_path / "other"), rows, seed=12)
    whole = (tmp_path / "one" / "part-00000.tsv").read_bytes()
    parts = [gzip.decompress((tmp_path / "split" / f["name"]).read_bytes()) for f in split["files"]]
    assert [len(p.splitlines()) for p in parts] == [f["rows"] for f in split["files"]]
    assert b"".join(parts) == whole
    assert (tmp_path / "other" / "part-00000.tsv").read_bytes() != whole
    assert one["best_auc"] == split["best_auc"] != other["best_auc"]
    gz = [(tmp_path / "split" / f["name"]).read_bytes() for f in split["files"]]
    again = generate(str(tmp_path / "split"), rows, files=3, gzip=True, seed=11, workers=1)
    assert {**again, "config": None} == {**split, "config": None}
    assert [(tmp_path / "split" / f["name"]).read_bytes() for f in split["files"]] == gz


def test_large_data_has_the_real_share_of_values_seen_once():
    """From FRESH_MIN_ROWS rows on, a column's distinct count follows the real power law and the share of its
    values seen once is the power law's exponent (the Pareto alone leaves C10 with none seen once)."""
    rows, rng = 2_000_000, np.random.default_rng(0)
    for c in ("C3", "C10", "C26"):
        prof = sc.CATEGORICAL[c]
        fitted, vocab = sc.fit(prof, rows)
        assert fitted.fresh > 0, c
        _, counts = np.unique(sc.sample_ids(rng, fitted, vocab, round(rows * (1 - prof.missing))), return_counts=True)
        assert len(counts) == pytest.approx(prof.target_distinct(rows), rel=0.02), c
        assert (counts == 1).mean() == pytest.approx(prof.exponent, abs=0.015), c
        assert sc.fit(prof, sc.FRESH_MIN_ROWS - 1) == (prof, sc.vocabulary_size(prof, sc.FRESH_MIN_ROWS - 1))


FRESH_COLUMNS = ("C3", "C10")   # a vocabulary of MAX_VOCAB (C3) and a finite one (C10) with fresh ids above it


@pytest.fixture
def fresh_from_10k(monkeypatch):
    """Fresh ids already at 10k rows in FRESH_COLUMNS; the other columns keep the default (none below
    FRESH_MIN_ROWS), as fitting the fresh share of all 22 columns that would get one costs ~6 CPU-seconds, the
    same code on each column. The generator's caches are cleared around the change."""
    from synthetic import generator as synthetic

    fit, fresh = sc.fit, [sc.CATEGORICAL[c] for c in FRESH_COLUMNS]

    def fit_fresh_from_10k(prof, rows):
        if prof not in fresh:
            return fit(prof, rows)
        default, sc.FRESH_MIN_ROWS = sc.FRESH_MIN_ROWS, 10_000
        try:
            return fit(prof, rows)
        finally:
            sc.FRESH_MIN_ROWS = default

    monkeypatch.setattr(sc, "fit", fit_fresh_from_10k)
    for cached in (synthetic._shapes, synthetic._calibration):
        cached.cache_clear()
    yield
    monkeypatch.undo()
    for cached in (synthetic._shapes, synthetic._calibration):
        cached.cache_clear()


def test_fresh_ids_keep_the_bytes_whatever_the_split(tmp_path, fresh_from_10k):
    """Columns with fresh ids, cut into 3 files inside blocks: the one file's bytes. The files are written in this
    process (workers=1): writers in processes of their own, test_deterministic_bytes_whatever_the_split, would
    only get the fitted shapes pickled here, and each costs an interpreter importing polars (~1.7 CPU-seconds)."""
    rows = BLOCK_ROWS + 3_000
    one = generate(str(tmp_path / "one"), rows, seed=11)
    split = generate(str(tmp_path / "split"), rows, files=3, seed=11, workers=1)
    assert set(one["fresh_id_shares"]) == set(FRESH_COLUMNS) and min(one["fresh_id_shares"].values()) > 0
    assert one["fresh_id_shares"] == split["fresh_id_shares"]
    whole = (tmp_path / "one" / "part-00000.tsv").read_bytes()
    assert b"".join((tmp_path / "split" / f["name"]).read_bytes() for f in split["files"]) == whole
    assert one["best_auc"] == split["best_auc"]


def test_best_auc_matches_true_probabilities(tmp_path):
    meta = generate(str(tmp_path), 4_000, seed=3)
    data = SyntheticData(SynthConfig(out=str(tmp_path), rows=4_000, seed=3))
    block = data.block(0)
    labels = read_tsv(tmp_path / "part-00000.tsv")["label"].cast(pl.Int8).to_numpy()
    assert np.array_equal(labels.astype(bool), block.label)
    p, y = block.probability, block.label
    pairwise = (p[y][:, None] > p[~y][None, :]).mean() + 0.5 * (p[y][:, None] == p[~y][None, :]).mean()
    assert meta["best_auc"] == pytest.approx(pairwise, abs=1e-12)
    assert 0.7 < meta["best_auc"] < 0.85
    assert meta["best_logloss"] == pytest.approx(log_loss(p, y))
    assert meta["best_normalized_entropy"] < 1
    description = meta["planted_model"]
    assert description["bias"] == pytest.approx(data.model.bias, abs=1e-6)
    assert set(description["categorical"]) <= set(CRITEO_CATEGORICAL)


def test_roc_auc_handles_ties():
    score = np.array([0.1, 0.4, 0.4, 0.8, 0.4])
    label = np.array([0, 1, 0, 1, 0], bool)
    assert roc_auc(score, label) == pytest.approx(5 / 6)  # 0.4 beats 0.1 and ties two 0.4s; 0.8 beats all


def test_signal_sets_difficulty(tmp_path):
    weak = generate(str(tmp_path / "w"), 30_000, seed=5, signal=0.5)
    strong = generate(str(tmp_path / "s"), 30_000, seed=5, signal=2.0)
    assert 0.5 < weak["best_auc"] < strong["best_auc"] < 1
    assert abs(weak["label_rate"] - 0.25) < 0.02 and abs(strong["label_rate"] - 0.25) < 0.02


def test_fsspec_memory_output():
    import fsspec

    meta = generate("memory://synth-test/out", 1_000, seed=2)
    fs = fsspec.filesystem("memory")
    assert json.loads(fs.cat("/synth-test/out/" + METADATA_FILE)) == meta
    assert len(fs.cat("/synth-test/out/part-00000.tsv").splitlines()) == 1_000


def test_cli(tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["synth", "--rows", "2k", "--files", "2", "--seed", "4", "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().out.strip().endswith(METADATA_FILE)
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["rows"] == 2000 and [f["rows"] for f in meta["files"]] == [1000, 1000]
    assert main(["synth", "--rows", "10", "--label-rate", "1.5", "--out", str(tmp_path / "bad")]) == 2
    assert "label_rate: Input should be less than 1" in capsys.readouterr().err
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    assert main(["synth", "--rows", "10", "--quiet", "--out", str(tmp_path / "foreign")]) == 2
    assert (tmp_path / "foreign" / "notes.txt").exists()


def test_matches_real_criteo_rows(criteo_10k, tmp_path):
    """Missing rates, distinct counts and top-value shares of 10k synthetic rows vs the real first 10k rows."""
    real = read_tsv(criteo_10k)
    generate(str(tmp_path), real.height, seed=0)
    fake = read_tsv(tmp_path / "part-00000.tsv")
    real_missing, fake_missing = missing_rates(real), missing_rates(fake)
    for c in CRITEO_COLUMNS[1:]:
        assert abs(real_missing[c] - fake_missing[c]) < 0.02, c
    for c in CRITEO_CATEGORICAL:
        n_real, n_fake = real[c].n_unique(), fake[c].n_unique()
        assert 0.6 < n_fake / n_real < 1.6, (c, n_real, n_fake)
        top_real, top_fake = (df[c].drop_nulls().value_counts(sort=True)["count"][0] / df[c].drop_nulls().len()
                              for df in (real, fake))
        assert abs(top_real - top_fake) < 0.05, c
    for c in CRITEO_NUMERICAL:
        med_real, med_fake = (np.median(np.log1p(df[c].drop_nulls().cast(pl.Int64).clip(0).to_numpy()))
                              for df in (real, fake))
        assert abs(med_real - med_fake) < 0.6, c


def test_a_generated_folder_is_a_preprocessing_input(tmp_path):
    """The README's quick start: `dlrmflow preprocess --input <synth folder>` (the metadata file is skipped)."""
    import feature_spec
    from preprocessing import PreprocessConfig, run

    generate(str(tmp_path / "synth"), 3_000, files=2, seed=1)
    dataset = run(PreprocessConfig(inputs=[str(tmp_path / "synth")], out=str(tmp_path / "store"), spec="criteo",
                                   progress=False))
    assert sum(feature_spec.load(dataset).metadata["rows"].values()) == 3_000
