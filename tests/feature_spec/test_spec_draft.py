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
    line = next(line for line in text.splitlines() if line.startswith(f"  {name}: ") and "# " in line)
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


def _preprocess(data, spec, tmp_path) -> str:
    return run(PreprocessConfig(inputs=[str(data)], spec=str(spec), out=str(tmp_path / "store"), progress=False,
                                workers=1))


def _labels(ds: str) -> float:
    return float(np.concatenate([np.fromfile(f"{ds}/{s}/label.bin", np.bool_) for s in ("train", "val", "test")])
                 .mean())


def test_draft_of_raw_criteo_reads_it_headerless(criteo_10k, tmp_path, capsys):
    """Raw Criteo (headerless gzipped TSV): no header found, Criteo's column names, a tsv chunk that has
    preprocessing read it by position, the first 0/1 column the label; it preprocesses and checks as drafted."""
    import gzip
    data = tmp_path / "day_0.gz"
    with gzip.open(criteo_10k, "rt") as f:
        data.write_bytes(gzip.compress("".join(next(f) for _ in range(600)).encode()))
    out = tmp_path / "day.yaml"
    assert main(["spec", "draft", "--input", str(data), "--out", str(out)]) == 0
    text = out.read_text()
    spec = fspec.load(str(out))
    [chunk] = spec.source_spec["train"]
    assert (chunk.type, chunk.model_extra["header"], chunk.model_extra["separator"]) == ("tsv", False, "\t")
    assert chunk.features == fspec.CRITEO_COLUMNS and not chunk.files
    assert "no header row: the first row holds data" in text and "named label, I1..I13, C1..C26" in text
    assert spec.label_feature == "label" and "label (0/1)" in _comment(text, "label")
    assert {spec.feature_spec[c].dtype for c in spec.categorical_features if c.startswith("C")} == {"hex"}
    assert {spec.feature_spec[c].frequency_threshold for c in spec.categorical_features} == {10}
    assert spec.feature_spec["I2"].transform == "log3p"   # -2..thousands: log(x + 3), not the raw values
    ds = _preprocess(data, out, tmp_path)
    assert sum(fspec.load(ds).metadata["rows"].values()) == 600
    rate = np.mean([line.split(b"\t")[0] == b"1" for line in gzip.decompress(data.read_bytes()).splitlines()])
    assert _labels(ds) == pytest.approx(rate)
    capsys.readouterr()
    assert main(["spec", "check", str(out), "--input", str(data)]) == 0
    # --names for a headerless file (and the count must match); --no-header names columns c0..
    with pytest.raises(UserError, match="--names gives 2 names, but .* has 40 fields a line"):
        draft_spec([str(data)], names=["a", "b"])
    renamed = draft_spec([str(data)], label="click", names=["click", *[f"f{k}" for k in range(39)]])
    assert fspec.from_dict(yaml.safe_load(renamed)).label_feature == "click"


def test_draft_of_a_semicolon_csv_with_quotes_marks_and_a_yes_no_label(tmp_path):
    """A ';' file with a header, a quoted free-text field holding ';' and ',', NA in number columns, '?' in a text
    column and a yes/no label named y: a csv chunk with the separator and null_values, `positive: 'yes'`."""
    rng = np.random.default_rng(1)
    n = 400
    age = rng.integers(18, 90, n).astype(object)
    age[rng.random(n) < 0.1] = "NA"
    balance = np.round(rng.lognormal(6, 2, n), 2).astype(object)
    balance[::17] = "NA"
    job = rng.choice(["admin.", "blue-collar", "technician", "?"], n)
    note = [f'"called on {d}; said: {w}, later"' for d, w in zip(rng.integers(1, 28, n),
                                                                 rng.choice(["maybe", "no thanks", "call back"], n))]
    y = np.where(rng.random(n) < 0.2, "yes", "no")
    fee = [f"{v:.2f}".replace(".", ",") for v in rng.gamma(2, 30, n)]   # a decimal comma
    data = tmp_path / "bank.csv"
    data.write_text("age;balance;job;note;fee;y\n" + "".join(
        f"{a};{b};{j};{t};{f};{lab}\n" for a, b, j, t, f, lab in zip(age, balance, job, note, fee, y)))
    out = tmp_path / "bank.yaml"
    assert main(["spec", "draft", "--input", str(data), "--out", str(out)]) == 0
    text = out.read_text()
    spec = fspec.load(str(out))
    [chunk] = spec.source_spec["train"]
    assert (chunk.type, chunk.model_extra["separator"], chunk.model_extra["header"]) == ("csv", ";", True)
    assert chunk.model_extra["null_values"] == ["?", "NA"]
    assert spec.label_feature == "y" and spec.feature_spec["y"].positive == "yes"
    assert "y == 'yes' (a word for yes" in _comment(text, '"y"')
    assert spec.numerical_features == ["balance"] and spec.feature_spec["note"].sep is None   # its ';' is quoted
    assert "fee" not in spec.channel_spec["categorical"] and "left out (in no channel): numbers with a decimal " \
        "comma" in _comment(text, "fee")
    ds = _preprocess(data, out, tmp_path)
    assert sum(fspec.load(ds).metadata["rows"].values()) == n and _labels(ds) == pytest.approx((y == "yes").mean())
    out.write_text(text.replace('separator: ";"', 'separator: ";;"'))
    with pytest.raises(UserError, match=r"source_spec's `separator: ';;'` is not one character. Fix: "):
        _preprocess(data, out, tmp_path)


def test_draft_of_a_headerless_pipe_file_with_a_true_false_label(tmp_path):
    """A headerless '|' file (no name to go by): columns c0.., \\N as missing, text dates left out as a timestamp,
    the two-valued true/false column the label; a -1/1 label's clicks are its 1s."""
    rng = np.random.default_rng(2)
    n = 300
    label, missing = rng.random(n) < 0.3, "\\N"
    rows = [f"2024-03-{rng.integers(1, 29):02d} 10:00:00|{rng.choice(['FR', 'DE', 'US'])}|{rng.integers(0, 500)}|"
            f"{missing if k % 9 == 0 else f'{rng.normal():.3f}'}|{'true' if label[k] else 'false'}" for k in range(n)]
    data = tmp_path / "events.txt"
    data.write_text("\n".join(rows) + "\n")
    text = draft_spec([str(data)])
    spec = fspec.from_dict(yaml.safe_load(text))
    [chunk] = spec.source_spec["train"]
    assert chunk.features == ["c0", "c1", "c2", "c3", "c4"] and chunk.model_extra["null_values"] == ["\\N"]
    assert spec.label_feature == "c4" and "true" in spec.feature_spec["c4"].positive
    assert "left out (in no channel): a timestamp" in _comment(text, "c0") and "c0" not in spec.numerical_features
    assert spec.numerical_features == ["c2", "c3"]
    (tmp_path / "events.yaml").write_text(text)
    ds = _preprocess(data, tmp_path / "events.yaml", tmp_path)
    assert sum(fspec.load(ds).metadata["rows"].values()) == n and _labels(ds) == pytest.approx(label.mean())
    signs = tmp_path / "signs.csv"
    signs.write_text("target,x\n" + "".join(f"{1 if v else -1},{k % 7}\n" for k, v in enumerate(label)))
    assert fspec.from_dict(yaml.safe_load(draft_spec([str(signs)]))).feature_spec["target"].positive_if == ">= 1"


def test_draft_refuses_in_one_line_what_preprocessing_cannot_read(tmp_path):
    (tmp_path / "events.jsonl").write_text('{"click": 1, "x": 2}\n{"click": 0, "x": 3}\n')
    with pytest.raises(UserError, match=r"JSON lines, which preprocessing does not read .* Fix: convert it: "
                                        r"python -c \"import polars as pl; pl.read_ndjson") as e:
        draft_spec([str(tmp_path / "events.jsonl")])
    assert "\n" not in str(e.value)
    (tmp_path / "one.txt").write_text("just some words\nand more\n")
    with pytest.raises(UserError, match="no separator .* splits its lines into one number of fields"):
        draft_spec([str(tmp_path / "one.txt")])
    pq = tmp_path / "t.parquet"
    pl.DataFrame({"click": [0, 1], "x": [1, 2]}).write_parquet(pq)
    with pytest.raises(UserError, match="--no-header and --names are for text files"):
        draft_spec([str(pq)], header=False)


def test_draft_of_raw_uci_adult_takes_its_last_column_as_the_label(adult_parquet, tmp_path):
    """UCI's adult.data: headerless, ', '-separated (numbers with a space before them), the label last as
    ' <=50K'/' >50K' and a two-valued column (gender) in the middle: the label is the last column, its '>' side."""
    table = pl.read_parquet(adult_parquet).head(500)
    data = tmp_path / "adult.data"
    data.write_text("".join(", ".join(str(v) for v in row) + "\n" for row in table.iter_rows()))
    text = draft_spec([str(data)])
    spec = fspec.from_dict(yaml.safe_load(text))
    last = f"c{table.width - 1}"
    assert spec.label_feature == last and spec.feature_spec[last].positive == " >50K"
    assert "(the upper side;" in _comment(text, last)
    fnlwgt = f"c{table.columns.index('fnlwgt')}"
    assert spec.feature_spec[fnlwgt].transform == "log1p" and fnlwgt in spec.numerical_features
    (tmp_path / "adult.yaml").write_text(text)
    ds = _preprocess(data, tmp_path / "adult.yaml", tmp_path)
    assert _labels(ds) == pytest.approx((table["income"] == ">50K").mean())


def test_draft_of_an_excel_export_with_a_bom_and_crlf_line_ends(tmp_path):
    """A ';' CSV as Excel writes it (a UTF-8 byte order mark, CRLF line ends, the label last): read as drafted."""
    rng = np.random.default_rng(3)
    clicked = rng.random(300) < 0.3
    rows = ["\ufeffcity;price;clicked"] + [f"{rng.choice(['a', 'b', 'c'])};{rng.random() * 100:.1f};{int(c)}"
                                            for c in clicked]
    data = tmp_path / "export.csv"
    data.write_bytes(("\r\n".join(rows) + "\r\n").encode())
    (tmp_path / "export.yaml").write_text(text := draft_spec([str(data)]))
    assert fspec.from_dict(yaml.safe_load(text)).label_feature == "clicked"
    ds = _preprocess(data, tmp_path / "export.yaml", tmp_path)
    assert sum(fspec.load(ds).metadata["rows"].values()) == 300 and _labels(ds) == pytest.approx(clicked.mean())
