"""`dlrmflow spec check`: every problem of a spec at once, each with its YAML line and a fix; loading a spec anywhere
stops at the first one; with --input, the spec against a sample of its data."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import feature_spec as fspec
from common.errors import UserError
from feature_spec.check import check_spec, check_text, key_lines
from flows.cli import main
from preprocessing import PreprocessConfig, run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult.yaml"

BAD = """\
feature_spec:
  clicked: {}
  price: {transform: log2}
  city: {dtype: str, frequency_treshold: 3}
  shop: {dtype: str}
  orphan: {}
channel_spec:
  label: [clicked]
  numerical: [price]
  categorical: [city, shop]
metadata:
  preprocesing: {split: "random:train=0.8,test=0.2"}
"""


def test_every_problem_at_once_with_its_line_and_fix(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    spec, problems = check_spec(str(path))
    assert spec is None   # a value of a wrong type: no spec to check data against
    got = {(p.line, p.where) for p in problems}
    assert got == {(3, "feature_spec.price.transform"), (4, "feature_spec.city.frequency_treshold"),
                   (6, "feature_spec.orphan"), (12, "metadata.preprocesing")}
    by_where = {p.where: p for p in problems}
    assert "did you mean 'frequency_threshold'?" in by_where["feature_spec.city.frequency_treshold"].problem
    assert "did you mean 'preprocessing'?" in by_where["metadata.preprocesing"].problem
    assert "in no channel" in by_where["feature_spec.orphan"].problem
    assert "channel_spec.numerical or channel_spec.categorical" in by_where["feature_spec.orphan"].fix
    assert "'log1p', 'log3p' or 'identity'" in by_where["feature_spec.price.transform"].problem
    # the command prints them all, by line, and exits 2
    assert main(["spec", "check", str(path)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1] for line in out] == ["line 3", "line 4", "line 6", "line 12"]


def test_loading_stops_at_the_first_problem_in_one_line(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(EXAMPLE.read_text().replace("frequency_threshold: 5", "frequency_treshold: 5"))
    with pytest.raises(fspec.SpecError) as e:
        fspec.load(str(path))
    message = str(e.value)
    assert "\n" not in message
    assert "feature_spec.native-country.frequency_treshold: unknown key 'frequency_treshold' (did you mean " \
           "'frequency_threshold'?)" in message
    assert "Run `dlrmflow spec check SPEC` for all problems." in message
    # preprocessing loads through the same door: nothing is read, the typo is named
    with pytest.raises(fspec.SpecError, match="frequency_treshold"):
        run(PreprocessConfig(inputs=[str(tmp_path / "none.parquet")], spec=str(path), out=str(tmp_path / "out"),
                             progress=False))


def test_a_feature_in_no_channel_is_an_error_unless_the_spec_names_its_column():
    text = EXAMPLE.read_text().replace("  age: {transform: identity}", "  age: {transform: identity}\n  uid: {}")
    spec, problems = check_text(text)
    assert [(p.where, p.line) for p in problems] == [("feature_spec.uid", 10)]
    with pytest.raises(fspec.SpecError, match=r"feature_spec\.uid: is in no channel"):
        fspec.from_dict(__import__("yaml").safe_load(text))
    # the id column (metadata.id) and a column split's column may be defined without a channel
    named = text.replace("  name: adult", "  name: adult\n  id: uid")
    assert check_text(named)[1] == []
    split = text.replace("  uid: {}", "  day: {}").replace("split: random:train=0.8,test=0.2,seed=0",
                                                            "split: 'column:day:train<20,test'")
    assert check_text(split)[1] == []


def test_nvidia_keeps_its_open_sections_and_ours_are_closed():
    dataset = """\
channel_spec: {label: [label], numerical: [num_0], categorical: [cat_0]}
feature_spec:
  label: {dtype: bool}
  num_0: {dtype: float16, description: seconds since the last visit}
  cat_0: {dtype: int8, cardinality: 11, max_hotnes: 3}
metadata: {source: logs 2021, rows: {train: 4}}
source_spec:
  train:
  - {features: [label], files: [train/label.bin], type: split_binary}
  - {features: [num_0], files: [train/numerical.bin], type: split_binary, compression: none}
  - {features: [cat_0], files: [train/cat_0.bin], type: split_binary}
"""
    _, problems = check_text(dataset)
    # a dataset's feature properties and metadata are NVIDIA's open sections: a new key stays, a near miss of ours
    # does not; a chunk has NVIDIA's three keys only
    assert [(p.line, p.where) for p in problems] == [(5, "feature_spec.cat_0.max_hotnes"),
                                                     (10, "source_spec.train.1.compression")]
    assert "did you mean 'max_hotness'?" in problems[0].problem
    # an input spec's feature options are ours: an unknown one is an error even when nothing is near it
    _, problems = check_text(EXAMPLE.read_text().replace("  fnlwgt: {}", "  fnlwgt: {description: census weight}"))
    assert [(p.line, p.where) for p in problems] == [(10, "feature_spec.fnlwgt.description")]
    assert "a feature's keys are dtype, cardinality" in problems[0].fix


def test_against_the_data(adult_parquet, tmp_path, capsys):
    """A text column under numerical, a label that is not 0/1, a missing column, a Parquet text column read as a
    list without sep and negatives under log1p: all named at once, each with its line."""
    raw = pl.read_parquet(adult_parquet).head(2000).with_columns(
        balance=pl.col("capital-gain") - pl.col("capital-loss"), tags=pl.lit("a|b"))
    data = tmp_path / "adult.parquet"
    raw.write_parquet(data)
    spec = tmp_path / "spec.yaml"
    spec.write_text("""\
feature_spec:
  income: {}
  age: {transform: identity}
  workclass: {}
  balance: {}
  occupaton: {dtype: str}
  tags: {dtype: str, hotness: variable}
channel_spec:
  label: [income]
  numerical: [age, workclass, balance]
  categorical: [occupaton, tags]
""")
    assert main(["spec", "check", str(spec), "--input", str(data)]) == 2
    out = capsys.readouterr().out
    lines = {line.split(": ", 3)[2]: line for line in out.splitlines()}
    assert "line 2" in lines["feature_spec.income"] and "the label is not 0/1 (values: '<=50K', '>50K')" in out
    assert "set `positive: '>50K'`" in lines["feature_spec.income"]
    assert "line 5" in lines["feature_spec.balance"] and "negative values" in lines["feature_spec.balance"]
    assert "line 6" in lines["feature_spec.occupaton"] and "did you mean 'occupation'?" in out
    assert "line 7" in lines["feature_spec.tags"] and "add `sep: '|'`" in lines["feature_spec.tags"]
    numerical = lines["channel_spec.numerical.1"]
    assert "line 10" in numerical and "'workclass' is a numerical but holds text (e.g. 'Private'" in numerical
    assert "move 'workclass' from channel_spec.numerical to channel_spec.categorical" in numerical
    # the shipped example matches its data
    assert main(["spec", "check", str(EXAMPLE), "--input", str(adult_parquet)]) == 0
    assert "no problems" in capsys.readouterr().out


def test_an_alias_bomb_is_one_problem_and_bad_yaml_has_its_line():
    # an alias of a small value reads as load_yaml reads it (NVIDIA's tools write some); nested ones that stand for
    # millions of values are refused by it, and the line numbers' node walk never expands them
    assert check_text("feature_spec:\n  a: &x {}\n  b: *x\nchannel_spec: {label: [a], numerical: [b]}\n")[1] == []
    bomb = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else 'x'] * 10)}]\n" for i in range(9))
    text = "feature_spec: {a: {}, b: {}}\nchannel_spec: {label: [a], numerical: [b]}\nmetadata:\n  " + \
        bomb.replace("\n", "\n  ")
    spec, problems = check_text(text)
    assert spec is None and len(problems) == 1 and "alias" in problems[0].problem
    assert key_lines(text)[("metadata", "l8")] == 12
    _, problems = check_text("feature_spec:\n  a: {\nchannel_spec: [\n")
    assert problems[0].line is not None and "not valid YAML" in problems[0].problem
    with pytest.raises(UserError, match="spec check takes SPEC"):
        from flows.commands.spec import run as spec_run
        spec_run(type("Args", (), {"verb": "check", "spec": None, "label": None, "out": None, "name": None,
                                   "input": []})())


def test_a_headerless_tsv_is_read_by_the_spec_order(tmp_path, capsys):
    """A TSV has no header (as preprocessing reads it): its columns are feature_spec's, and a few bad values in a
    number column are bad rows, not a text column."""
    data = tmp_path / "day.tsv"
    data.write_text("1\t3.5\tfoo\n0\t2\tbar\n1\tx\tbaz\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("feature_spec:\n  click: {}\n  price: {}\n  shop: {dtype: str}\n"
                    "channel_spec:\n  label: [click]\n  numerical: [price]\n  categorical: [shop]\n")
    assert main(["spec", "check", str(spec), "--input", str(data)]) == 2
    [line] = capsys.readouterr().out.splitlines()
    assert line == f"{spec}: line 7: channel_spec.numerical.0: 1 of 3 sampled rows hold text in numerical 'price' " \
        "(e.g. 'x'): preprocessing stops at the first. Fix: correct those rows, or preprocess with --on-bad-row skip " \
        "(they are left out and counted)."
