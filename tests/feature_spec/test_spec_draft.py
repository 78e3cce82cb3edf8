"""`dlrmflow spec draft`: a commented spec drafted from a sample of the data that preprocesses without edits."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pytest
import yaml

import feature_spec as fspec
from common.errors import UserError
from flows.cli import main
from helpers.movielens import movielens_like
from preprocessing import PreprocessConfig, run
from preprocessing.draft import draft_spec
from preprocessing.inspect import summary


def _comment(text: str, name: str) -> str:
    """The comment on feature ``name``'s line of a drafted spec."""
    [line] = [line for line in text.splitlines() if line.startswith(f"  {name}: ")]
    return line.split("# ", 1)[1]


def test_draft_of_adult_preprocesses_as_written(adult_parquet, tmp_path, capsys):
    out = tmp_path / "adult.yaml"
    assert main(["spec", "draft", "--input", str(adult_parquet), "--label", "income==>50K", "--out", str(out)]) == 0
    text = out.read_text()
    spec = fspec.load(str(out))
    assert spec.label_feature == "income" and spec.feature_spec["income"].positive == ">50K"
    rate = (pl.read_parquet(adult_parquet)["income"] == ">50K").mean()
    assert f"click rate {rate:.1%} of 48,842 sampled rows" in _comment(text, "income")
    assert spec.numerical_features == ["fnlwgt"] and spec.feature_spec["fnlwgt"].transform == "log1p"
    assert "28,523 distinct, 12285..1.4904e+06, median 178144: beyond 0..10, so log(1 + x)" in _comment(text, "fnlwgt")
    strings = {"workclass", "education", "marital-status", "occupation", "relationship", "race", "gender",
               "native-country"}
    assert {n for n in spec.categorical_features if spec.feature_spec[n].dtype == "str"} == strings
    # integers with up to 128 distinct values: an embedding per value
    integers = {"age", "educational-num", "capital-gain", "capital-loss", "hours-per-week"}
    assert {n for n in spec.categorical_features if spec.feature_spec[n].dtype == "int"} == integers
    assert _comment(text, "capital-gain").startswith("integers, 0..99999: an embedding per value")
    assert re.search(r"42 distinct; threshold \d+ keeps 4\d, 99\.\d\d% of occurrences", _comment(text,
                                                                                                "native-country"))
    # it runs without edits, and `spec check` finds nothing
    ds = run(PreprocessConfig(inputs=[str(adult_parquet)], spec=str(out), out=str(tmp_path / "store"),
                              progress=False, workers=1))
    assert sum(fspec.load(ds).metadata["rows"].values()) == 48842
    # `dlrmflow inspect` says each split's label rate, read from its label file
    labels = {s: np.fromfile(f"{ds}/{s}/label.bin", np.bool_).mean() for s in ("train", "val", "test")}
    assert f"label: income; label rate train {labels['train']:.2%}, val {labels['val']:.2%}, test " \
           f"{labels['test']:.2%}" in summary(ds)
    capsys.readouterr()
    assert main(["spec", "check", str(out), "--input", str(adult_parquet)]) == 0


@pytest.mark.parametrize("listed", [True, False], ids=["parquet-list", "csv-text"])
def test_draft_of_a_movielens_like_table(listed, tmp_path):
    rng = np.random.default_rng(0)
    table = movielens_like(3000, listed=listed).with_columns(   # three numericals of a wider table
        price=rng.lognormal(2, 1.5, 3000), share=rng.random(3000), balance=rng.normal(0, 50, 3000))
    data = tmp_path / ("ratings.parquet" if listed else "ratings.csv")
    table.write_parquet(data) if listed else table.write_csv(data)
    text = draft_spec([str(data)], label="rating>=4", rows=2000)
    spec = fspec.from_dict(yaml.safe_load(text))
    assert spec.feature_spec["rating"].positive_if == ">= 4"
    rate = re.search(r"rating >= 4 -> click rate ([\d.]+)% of 2,000 sampled rows", _comment(text, "rating"))
    assert abs(float(rate.group(1)) / 100 - (table["rating"] >= 4).mean()) < 0.03
    genres = spec.feature_spec["genres"]
    assert (genres.hotness, genres.pooling, genres.sep) == ("variable", "mean", None if listed else "|")
    assert "a list (a Parquet list)" in _comment(text, "genres") if listed else \
        "a list (split at '|')" in _comment(text, "genres")
    assert set(spec.categorical_features) == {"user_id", "item_id", "age", "gender", "occupation", "title", "genres",
                                              "year"}
    assert {n: spec.feature_spec[n].transform for n in spec.numerical_features} == {
        "price": "log1p", "share": "identity", "balance": "identity"}
    assert "heavy-tailed, so log(1 + x)" in _comment(text, "price")
    assert "negative values, kept as they are" in _comment(text, "balance")
    assert "small range, kept as it is" in _comment(text, "share")
    assert "integers, 1..56: an embedding per value" in _comment(text, "age")
    assert "  #   timestamp: a timestamp (" in text and "  #   rating_id: near-unique" in text
    assert "timestamp" not in spec.feature_spec and "rating_id" not in spec.feature_spec
    cut = re.search(r"# split: column:timestamp:train<(\d+),val<\d+,test", text)   # offered, not chosen
    if listed:   # a Parquet sample spreads over the file (in time order): its 80th percentile is the table's
        assert table["timestamp"].quantile(0.78) < int(cut.group(1)) < table["timestamp"].quantile(0.82)
    # a rating column without a rule: its top values are the clicks
    assert fspec.from_dict(yaml.safe_load(draft_spec([str(data)], label="rating", rows=500))) \
        .feature_spec["rating"].positive_if == ">= 4"


def test_draft_keeps_a_numerical_and_needs_a_label_it_can_read(tmp_path):
    data = tmp_path / "ratings.parquet"
    movielens_like(300).write_parquet(data)
    # no column but year is a quantity: it stays numerical (the model's dense input), though it has few values
    text = draft_spec([str(data)], label="rating>=4")
    assert fspec.from_dict(yaml.safe_load(text)).numerical_features == ["year"]
    assert _comment(text, "year").endswith("so log(1 + x) (numerical: no other column is)")
    with pytest.raises(UserError, match=r"no column named like a label .* Fix: pass --label"):
        draft_spec([str(data)])
    with pytest.raises(UserError, match=r"no column 'ratng'"):
        draft_spec([str(data)], label="ratng>=4")
    with pytest.raises(UserError, match=r"every sampled row is a non-click"):
        draft_spec([str(data)], label="rating>5")
