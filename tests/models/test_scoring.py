"""Batch scoring with a model's own vocabulary (`dlrmflow score`, models.scoring.score), on real Criteo rows and
UCI Adult: raw rows encode to the same bytes as preprocessing wrote for them (vocabularies, hex ids, hash buckets,
numerical transforms), the scores of a test split's raw rows equal the checkpoint's predictions that evaluation
uses, unseen values map to index 0, bad rows follow the policy, the CLI runs end to end on 2 ranks, and bad
inputs fail with clear errors before any work."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import feature_spec as fspec
from common.errors import UserError
from flows import artifacts
from models.registry import CHAMPION_FILE, Champion
from flows.score import score as score_flow
from models.config import ScoreConfig
from models.scoring import score
from preprocessing import PreprocessConfig, run as preprocess
from helpers.bundles import FILES, fake_bundle
from helpers.fixtures import CHILD_ENV, CRITEO_ROWS
from helpers.prefect_api import latest_artifacts
from preprocessing.apply import SCORE_SPLIT, encode_inputs
from helpers.paths import REPO
from helpers.processes import run_dlrmflow
from training.config import TrainConfig

EXAMPLE = REPO / "examples" / "adult.yaml"
ROWS = CRITEO_ROWS
ENV = CHILD_ENV


def _split_files(dataset: Path, split: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((dataset / split).iterdir())}


def test_raw_rows_encode_to_the_bytes_preprocessing_wrote(criteo, tmp_path):
    """The test file's raw rows, encoded with the dataset's stored vocabularies, are its test split, byte for byte."""
    enc = encode_inputs(str(criteo["dataset"]), [str(criteo["raw"]["test"])], tmp_path / "enc", progress=False)
    assert (enc.rows, enc.bad_rows, enc.has_label, enc.id_column) == (ROWS["test"], 0, True, None)
    assert _split_files(Path(enc.dataset), SCORE_SPLIT) == _split_files(criteo["dataset"], "test")
    model, scored = fspec.load(str(criteo["dataset"])), fspec.load(enc.dataset)
    assert {f: v.cardinality for f, v in scored.feature_spec.items()} == \
        {f: v.cardinality for f, v in model.feature_spec.items()}
    positions = pl.read_parquet(enc.positions)
    assert positions.columns == ["file", "row", "label"]
    assert positions["row"].to_list() == list(range(ROWS["test"]))
    assert set(positions["file"]) == {str(criteo["raw"]["test"])}
    labels = np.fromfile(criteo["dataset"] / "test" / "label.bin", np.uint8)
    np.testing.assert_array_equal(positions["label"].to_numpy(), labels)


def test_byo_parquet_with_hash_buckets_and_an_id_column(adult_parquet, tmp_path):
    """A user's Parquet and spec: hash-bucket and vocabulary features encode as preprocessing did, rows without a
    label column are scored too, and the spec's id column (metadata.id) comes with every row."""
    raw = pl.read_parquet(adult_parquet).head(3000).with_columns(uid=pl.int_range(10_000, 13_000, dtype=pl.Int64))
    data = tmp_path / "adult.parquet"
    raw.write_parquet(data)
    spec = fspec.load(str(EXAMPLE))
    spec.feature_spec["education"].hash_buckets = 16
    spec.metadata["id"] = "uid"
    spec.metadata["preprocessing"]["split"] = "ordered:train=0.8,test=0.2"
    spec_path = tmp_path / "spec" / "adult.yaml"
    fspec.save(spec, str(spec_path.parent))
    (spec_path.parent / "feature_spec.yaml").rename(spec_path)
    ds = Path(preprocess(PreprocessConfig(inputs=[str(data)], spec=str(spec_path), out=str(tmp_path / "store"),
                                          progress=False)))
    assert fspec.load(str(ds)).metadata["hash_buckets"] == {"education": 16}
    enc = encode_inputs(str(ds), [str(data)], tmp_path / "enc", progress=False)
    assert enc.id_column == "uid" and enc.rows == 3000
    test_rows = 3000 - 2400
    for name, scored in _split_files(Path(enc.dataset), SCORE_SPLIT).items():
        width = len(scored) // 3000
        assert scored[2400 * width:] == _split_files(ds, "test")[name], name
        assert len(scored[2400 * width:]) == test_rows * width
    positions = pl.read_parquet(enc.positions)
    assert positions.columns == ["file", "row", "uid", "label"]
    assert positions["uid"].to_list() == raw["uid"].to_list() and positions["row"].to_list() == list(range(3000))

    unlabeled = tmp_path / "unlabeled.parquet"
    raw.drop("income").tail(test_rows).write_parquet(unlabeled)
    enc2 = encode_inputs(str(ds), [str(unlabeled)], tmp_path / "enc2", progress=False)
    assert not enc2.has_label and pl.read_parquet(enc2.positions).columns == ["file", "row", "uid"]
    for name, scored in _split_files(Path(enc2.dataset), SCORE_SPLIT).items():
        if name != "label.bin":
            assert scored == _split_files(ds, "test")[name], name


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_scores_equal_evaluation_unseen_values_and_bad_rows(prefect_harness, criteo, criteo_run, tmp_path):
    """Train/serve consistency: the scores of the test file's raw rows are the predictions evaluation computed;
    an unseen C1 scores as a missing C1 (both index 0 at threshold 2); a bad row is skipped and still counted.
    Through the score flow (a summary artifact); a model without a champion fails it with the error's text."""
    test_lines = criteo["raw"]["test"].read_text().splitlines()
    vocab = pl.read_parquet(criteo["dataset"] / "vocab" / "C1.parquet")
    picked = [ln.split("\t") for ln in test_lines[:5]]
    assert all(int(f[14], 16) in set(vocab["value"].to_list()) for f in picked)   # C1 (column 14) kept by the model
    assert 0xDEADBEEF not in set(vocab["value"].to_list())
    unseen = ["\t".join(f[:14] + ["deadbeef"] + f[15:]) for f in picked]
    missing = ["\t".join(f[:14] + [""] + f[15:]) for f in picked]
    extra = tmp_path / "extra.tsv"
    extra.write_text("\n".join(unseen + ["1\tnot\tenough\tfields"] + missing) + "\n")
    out = tmp_path / "scores.parquet"
    summary = score_flow(ScoreConfig(run=str(criteo_run["run"]), inputs=[str(criteo["raw"]["test"]), str(extra)],
                                     out=str(out), on_bad_row="skip", max_bad_fraction=0.1))   # (per file: 1 of 11)
    assert summary["rows"] == ROWS["test"] + 10 and summary["bad_rows"] == 1
    assert summary["step"] == criteo_run["evaluation"]["step"]
    scores = pl.read_parquet(out)
    assert scores.columns == ["file", "row", "probability", "label"] and scores["probability"].dtype == pl.Float32
    test = scores.filter(pl.col("file") == str(criteo["raw"]["test"]))
    assert test["row"].to_list() == list(range(ROWS["test"]))
    np.testing.assert_allclose(test["probability"].to_numpy(), criteo_run["p"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(test["label"].to_numpy(), criteo_run["y"])
    from training.metrics import compute_metrics
    m = compute_metrics(test["probability"].to_numpy(), test["label"].to_numpy().astype(np.float32))
    assert m["auc"] == pytest.approx(criteo_run["evaluation"]["auc"], abs=1e-6)
    assert m["logloss"] == pytest.approx(criteo_run["evaluation"]["logloss"], abs=1e-6)

    ext = scores.filter(pl.col("file") == str(extra))
    assert ext["row"].to_list() == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]   # row 5 was the bad one
    p = ext["probability"].to_numpy()
    np.testing.assert_allclose(p[:5], p[5:], rtol=0, atol=1e-7)       # unseen == missing: index 0
    assert np.abs(p[:5] - test["probability"].to_numpy()[:5]).max() > 1e-4   # and C1 matters to the model

    summary_md = latest_artifacts()[artifacts.SCORE_SUMMARY]
    assert str(out) in summary_md and "ROC AUC" in summary_md and f"{ROWS['test'] + 10:,}" in summary_md
    no_champion = tmp_path / "models" / "none"
    no_champion.mkdir(parents=True)
    state = score_flow(ScoreConfig(model=str(no_champion), inputs=[str(extra)], out=str(tmp_path / "x.parquet")),
                       return_state=True)
    assert state.is_failed() and state.message.startswith(f"{no_champion}: no champion.json there"), state.message


def _champion(store: Path, run: Path, step: int, dataset: Path) -> Path:
    model = store / "models" / "ctr"
    model.mkdir(parents=True)
    (store / "runs").mkdir()
    (store / "runs" / run.name).symlink_to(run)   # a champion's run lies in its model's store (or is not loaded)
    champion = Champion(name="ctr", run=str(store / "runs" / run.name), step=step, dataset=str(dataset),
                        vocab=str(dataset / "vocab"), date="2026-11-20", promoted_at="2026-11-21T02:00:00Z")
    (model / CHAMPION_FILE).write_text(champion.model_dump_json())
    return model


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cli_scores_with_a_models_champion_on_two_ranks(criteo, criteo_run, tmp_path):
    model = _champion(tmp_path, criteo_run["run"], criteo_run["evaluation"]["step"], criteo["dataset"])
    out = tmp_path / "out" / "scores.parquet"
    proc = run_dlrmflow("score", "--model", model, "--input", criteo["raw"]["test"], "--out", out, "--nproc", "2",
                        "--no-progress", cwd=REPO, env={**os.environ, **ENV}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ROC AUC" in proc.stdout and f"{ROWS['test']:,} rows scored" in proc.stdout
    scores = pl.read_parquet(out)
    assert scores["row"].to_list() == list(range(ROWS["test"]))
    np.testing.assert_allclose(scores["probability"].to_numpy(), criteo_run["p"], rtol=0, atol=1e-6)
    # no temporary left beside it; the completion marker readers check
    assert sorted(p.name for p in out.parent.iterdir()) == ["scores.parquet", "scores.parquet.complete"]


def test_a_champion_loads_only_from_its_store_and_its_bundle_only_as_pinned(tmp_path):
    """Scoring with a model's champion: its bundle loads only when its manifest is the one champion.json pins;
    a run or bundle outside the model's store is not loaded at all."""
    store, quiet = tmp_path / "store", (lambda _: None)
    model, bundle = store / "models" / "ctr", store / "models" / "ctr" / "bundles" / "r1"
    spec = b'{"input_spec": null}'
    pinned = fake_bundle(bundle, {**FILES, "model.json": spec})
    champion = Champion(name="ctr", run=str(store / "runs" / "r1"), step=1, dataset=str(store / "datasets" / "d"),
                        vocab=str(store / "datasets" / "d" / "vocab"), date="2026-11-20",
                        promoted_at="2026-11-21T02:00:00Z", bundle=str(bundle), bundle_sha256=pinned)
    (model / CHAMPION_FILE).write_text(champion.model_dump_json())
    config = ScoreConfig(model=str(model), inputs=["x"], out=str(tmp_path / "o.parquet"))
    with pytest.raises(UserError, match="records no input spec"):   # the pinned bundle loaded
        score(config, on_line=quiet)
    fake_bundle(bundle, {**FILES, "model.json": spec, "model.pt": b"another module"})   # replaced after promotion
    with pytest.raises(UserError, match=rf"{bundle}: the bundle's manifest.json is not the one champion.json pins"):
        score(config, on_line=quiet)
    for fields in [{"run": "s3://elsewhere/runs/r1"}, {"run": str(tmp_path / "runs" / "r1"), "bundle": None},
                   {"bundle": str(tmp_path / "bundles" / "r1")}]:
        (model / CHAMPION_FILE).write_text(champion.model_copy(update=fields).model_dump_json())
        with pytest.raises(UserError, match=rf"champion.json: the champion's \w+ .* lies outside the model's store "
                                            rf"{store}, so it is not loaded"):
            score(config, on_line=quiet)


def test_clear_errors_before_any_work(criteo, tmp_path):
    ds = criteo["dataset"]
    empty = tmp_path / "models" / "none"
    empty.mkdir(parents=True)
    cases = [
        (ScoreConfig(model=str(empty), inputs=["x"], out="o.parquet"), "no champion.json there"),
        (ScoreConfig(inputs=["x"], out="o.parquet"), "needs one of a model, a run or a bundle, not none"),
        (ScoreConfig(model=str(empty), run=str(tmp_path), inputs=["x"], out="o.parquet"), "not model and run"),
        (ScoreConfig(run=str(tmp_path), inputs=["x"], out="o.parquet"), "not a training run"),
    ]
    run = tmp_path / "runs" / "untrained"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(TrainConfig(dataset=str(ds)).to_yaml())
    cases.append((ScoreConfig(run=str(run), inputs=["x"], out="o.parquet"), "no complete checkpoint 'best'"))
    for config, message in cases:
        with pytest.raises(UserError, match=message) as e:
            score(config, on_line=lambda _: None)
        assert "Fix:" in str(e.value)
    with pytest.raises(UserError, match="does not exist") as e:
        encode_inputs(str(ds), [str(tmp_path / "missing.tsv")], tmp_path / "enc", progress=False)
    assert "missing.tsv" in str(e.value) and "Fix:" in str(e.value)
    bad = tmp_path / "bad.tsv"
    bad.write_text(criteo["raw"]["test"].read_text().splitlines()[0] + "\n1\t2\n")
    with pytest.raises(UserError, match=r"bad.tsv: line 2: has 2 fields, expected 40"):
        encode_inputs(str(ds), [str(bad)], tmp_path / "enc", progress=False)   # the dataset's policy: error
    with pytest.raises(UserError, match=r"1 of 2 rows are malformed \(50.00%\), more than --max-bad-fraction 0.001. "
                       r"Fix: correct the inputs or raise --max-bad-fraction.$"):
        encode_inputs(str(ds), [str(bad)], tmp_path / "enc", on_bad_row="skip", progress=False)
    moved = tmp_path / "moved"
    shutil.copytree(ds, moved)
    spec = fspec.load(str(moved))
    spec.metadata["preprocessing"]["spec"] = str(tmp_path / "gone" / "spec.yaml")
    fspec.save(spec, str(moved))
    with pytest.raises(UserError, match=r"preprocessed with the input spec '.*gone/spec.yaml', which does not exist"):
        encode_inputs(str(moved), [str(bad)], tmp_path / "enc", progress=False)
    nvidia = tmp_path / "nvidia"
    from helpers.datasets import write_dataset
    write_dataset(nvidia, {"train": 16})
    with pytest.raises(UserError, match="records no input spec"):
        encode_inputs(str(nvidia), [str(bad)], tmp_path / "enc", progress=False)
