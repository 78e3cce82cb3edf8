"""List features end to end through preprocessing, checked against a straightforward computation in plain Python.

A small seeded table with list columns (variable-length strings with a threshold, a fixed hotness of ints,
max_hotness hex ids, a hashed variable list, a one-hot column), written as Parquet list columns and as CSV with
``sep``, in two files each: counts, indices, offsets and ``list_lengths`` are recomputed here with dicts and loops.
Also: a fixed-hotness row of the wrong length (error with file, line and column; skip counts it), a run killed
during encoding resumes to identical bytes, scoring's encoder gives the same bytes, and the real list table
(tests/helpers/list_table.py) matches the same computation.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

import feature_spec as fspec
from preprocessing import PreprocessConfig, run
from preprocessing.errors import BadRowError
from preprocessing.hashing import hash_values
from helpers.datasets import assert_same_files
from helpers.paths import HELPERS

ROWS = 2000
SPLIT = "ordered:train=0.8,val=0.1,test=0.1"
FEATURES = {
    "label": {}, "x": {},
    "tags": {"hotness": "variable", "dtype": "str", "frequency_threshold": 3},
    "pair": {"hotness": 3, "dtype": "int", "pooling": "mean"},
    "hx": {"max_hotness": 2, "dtype": "hex"},
    "hb": {"hotness": "variable", "dtype": "str", "hash_buckets": 11},
    "one": {"dtype": "str"},
}
LISTS = ("tags", "pair", "hx", "hb")


def _table(rows: int = ROWS, seed: int = 7) -> dict[str, list]:
    """Columns of the small table: lists with missing lists, empty lists and missing elements."""
    rng = random.Random(seed)
    zipf = lambda n: min(int(rng.paretovariate(1.2)), n)   # noqa: E731 (a skewed id in 1..n)
    t = collections.defaultdict(list)
    for _ in range(rows):
        t["label"].append(rng.randint(0, 1))
        t["x"].append(round(rng.uniform(0, 100), 2))
        n = rng.choice([0, 1, 2, 3, 5])
        tags = [f"t{zipf(40)}" for _ in range(n)]
        if n >= 2 and rng.random() < 0.2:
            tags[1] = None                    # a missing element
        t["tags"].append(None if n == 0 and rng.random() < 0.5 else tags)   # missing or empty
        t["pair"].append(None if rng.random() < 0.1 else [zipf(30) for _ in range(3)])
        t["hx"].append([f"{zipf(50) * 7919:08x}" for _ in range(rng.randint(0, 4))])
        t["hb"].append([f"h{zipf(500)}" for _ in range(rng.randint(0, 3))])
        t["one"].append(f"o{zipf(20)}")
    return dict(t)


def _write_inputs(folder: Path, table: dict[str, list], kind: str, files: int = 2) -> Path:
    """The table as ``files`` Parquet files (list columns) or CSV files (``|``-joined), and its input spec."""
    folder.mkdir(parents=True, exist_ok=True)
    features = {k: dict(v, **({"sep": "|"} if kind == "csv" and k in LISTS else {})) for k, v in FEATURES.items()}
    spec = {"feature_spec": features,
            "channel_spec": {"label": ["label"], "numerical": ["x"], "categorical": ["tags", "pair", "hx", "hb", "one"]},
            "metadata": {"name": "lists"}}
    rows = len(table["label"])
    for k in range(files):
        part = {c: v[k * rows // files:(k + 1) * rows // files] for c, v in table.items()}
        name = f"part{k}.{kind}"
        if kind == "parquet":
            pl.DataFrame(part, schema={"label": pl.Int64, "x": pl.Float64, "tags": pl.List(pl.String),
                                       "pair": pl.List(pl.Int64), "hx": pl.List(pl.String),
                                       "hb": pl.List(pl.String), "one": pl.String}).write_parquet(folder / name)
        else:
            lines = [",".join(FEATURES)]
            for r in range(len(part["label"])):
                lines.append(",".join(_csv_field(part[c][r]) for c in FEATURES))
            (folder / name).write_text("\n".join(lines) + "\n")
    (folder / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder / "spec.yaml"


def _csv_field(value) -> str:
    if isinstance(value, list):
        return "|".join("" if v is None else str(v) for v in value)
    return "" if value is None else str(value)


def _preprocess(spec: Path, out: Path, **options) -> Path:
    """The dataset of the input files beside ``spec``."""
    inputs = sorted(str(p) for p in spec.parent.glob("part*"))
    return Path(run(PreprocessConfig(inputs=inputs, spec=str(spec), out=str(out), split=SPLIT, progress=False,
                                     **options)))


# ---- the straightforward computation ------------------------------------------------------------------------
def _kept(feature: str, value):
    """A row's list as preprocessing keeps it: None/empty -> [], max_hotness -> its first N elements."""
    items = list(value or [])
    cap = FEATURES[feature].get("max_hotness")
    return items[:cap] if cap else items


def _key(feature: str, element):
    return int(element, 16) if FEATURES[feature].get("dtype") == "hex" else element


def _vocabulary(feature: str, train_rows: list) -> dict:
    counts = collections.Counter(_key(feature, e) for v in train_rows for e in _kept(feature, v) if e is not None)
    threshold = max(FEATURES[feature].get("frequency_threshold", 0), 1)
    kept = sorted((v for v, c in counts.items() if c >= threshold), key=lambda v: (-counts[v], v))
    return {v: i + 1 for i, v in enumerate(kept)}


def _index(feature: str, element, vocab: dict | None) -> int:
    if element is None:
        return 0
    if vocab is None:   # hash buckets: 1 + hash mod (buckets - 1)
        return int(hash_values([element])[0] % np.uint64(FEATURES[feature]["hash_buckets"] - 1)) + 1
    return vocab.get(_key(feature, element), 0)


def _expected(table: dict[str, list]) -> dict:
    """Per split and list feature: (values, offsets or None) and the list_lengths entry."""
    rows = len(table["label"])
    bounds = {"train": (0, int(0.8 * rows)), "val": (int(0.8 * rows), int(0.9 * rows)), "test": (int(0.9 * rows), rows)}
    lo, hi = bounds["train"]
    vocabs = {f: None if "hash_buckets" in FEATURES[f] else _vocabulary(f, table[f][lo:hi]) for f in LISTS}
    out = {}
    for split, (lo, hi) in bounds.items():
        for f in LISTS:
            hotness = FEATURES[f].get("hotness")
            values, offsets, stats = [], [0], {"rows": 0, "values": 0, "max": 0, "index0": 0, "truncated": 0}
            for v in table[f][lo:hi]:
                kept = _kept(f, v)
                idx = [_index(f, e, vocabs[f]) for e in kept]
                if isinstance(hotness, int) and not idx:
                    idx = [0] * hotness
                values += idx
                offsets.append(len(values))
                stats["rows"] += 1
                stats["values"] += len(idx)
                stats["max"] = max(stats["max"], len(idx))
                stats["index0"] += idx.count(0)
                stats["truncated"] += len(v or []) > len(kept)
            out[split, f] = (values, None if isinstance(hotness, int) else offsets, stats)
    return out


def _check_dataset(dataset: Path, table: dict[str, list]) -> None:
    spec = fspec.load(str(dataset))
    for (split, f), (values, offsets, stats) in _expected(table).items():
        feature = spec.feature_spec[f]
        got = np.fromfile(dataset / split / fspec.categorical_file_name(f), feature.dtype)
        assert got.tolist() == values, (split, f)
        if offsets is None:
            assert spec.offsets_file_of(split, f) is None and feature.hotness == FEATURES[f]["hotness"]
        else:
            assert spec.offsets_file_of(split, f) == f"{split}/{fspec.offsets_file_name(f)}"
            assert np.fromfile(dataset / split / fspec.offsets_file_name(f), np.int64).tolist() == offsets
            assert feature.hotness == "variable" and feature.variable_length
        assert spec.metadata["list_lengths"][split][f] == stats, (split, f)
        assert feature.pooling == FEATURES[f].get("pooling", "sum")
    assert spec.feature_spec["hx"].max_hotness == 2
    assert spec.feature_spec["hb"].cardinality == 11
    assert spec.feature_spec["tags"].cardinality == len(_vocabulary("tags", table["tags"][:int(0.8 * ROWS)])) + 1


@pytest.fixture(scope="module")
def table() -> dict[str, list]:
    return _table()


@pytest.fixture(scope="module")
def parquet_dataset(table, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lists_parquet")
    return _preprocess(_write_inputs(root / "in", table, "parquet"), root / "out")


def test_parquet_list_columns_match_a_straightforward_computation(parquet_dataset, table):
    _check_dataset(parquet_dataset, table)
    rows = fspec.load(str(parquet_dataset)).metadata["rows"]
    assert rows == {"train": 1600, "val": 200, "test": 200}


def test_csv_with_sep_gives_the_same_bytes_as_parquet(parquet_dataset, table, tmp_path):
    dataset = _preprocess(_write_inputs(tmp_path / "in", table, "csv", files=3), tmp_path / "out")
    _check_dataset(dataset, table)
    for path in parquet_dataset.glob("*/cat_*.bin"):
        assert path.read_bytes() == (dataset / path.parent.name / path.name).read_bytes(), path


def test_scoring_encodes_lists_as_preprocessing_did(parquet_dataset, table, tmp_path):
    from preprocessing.apply import encode_inputs

    inputs = sorted(str(p) for p in (parquet_dataset.parents[2] / "in").glob("part*.parquet"))
    encoded = Path(encode_inputs(str(parquet_dataset), inputs, tmp_path, progress=False).dataset)
    spec = fspec.load(str(encoded))
    for f in LISTS:   # the score split holds every row: train's indices, then val's and test's
        got = np.fromfile(encoded / "score" / fspec.categorical_file_name(f), spec.feature_spec[f].dtype)
        want = np.concatenate([np.fromfile(parquet_dataset / s / fspec.categorical_file_name(f),
                                           spec.feature_spec[f].dtype) for s in ("train", "val", "test")])
        assert got.tolist() == want.tolist(), f
        if spec.feature_spec[f].variable_length:
            offsets = np.fromfile(encoded / "score" / fspec.offsets_file_name(f), np.int64)
            assert offsets[0] == 0 and offsets[-1] == len(got) and len(offsets) == ROWS + 1
            lengths = [len(_kept(f, v)) for v in table[f]]
            assert np.diff(offsets).tolist() == lengths


def _bad_pair_input(folder: Path, table: dict[str, list]) -> Path:
    spec = _write_inputs(folder, table, "csv", files=1)
    path = folder / "part0.csv"
    lines = path.read_text().splitlines()
    fields = lines[11].split(",")   # the 11th data row (line 12 of the file)
    fields[3] = "1|2"               # pair: 2 values where hotness is 3
    lines[11] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return spec


def test_fixed_hotness_row_of_wrong_length_is_a_bad_row(table, tmp_path):
    small = {c: v[:200] for c, v in table.items()}
    spec = _bad_pair_input(tmp_path / "in", small)
    with pytest.raises(BadRowError) as e:
        _preprocess(spec, tmp_path / "out")
    assert "part0.csv: line 12, column pair" in str(e.value) and "hotness 3" in str(e.value) and "Fix:" in str(e.value)
    dataset = _preprocess(spec, tmp_path / "out", on_bad_row="skip", max_bad_fraction=0.01)
    meta = fspec.load(str(dataset)).metadata
    assert meta["bad_rows"] == 1 and sum(meta["rows"].values()) == 199
    pair = np.fromfile(dataset / "train" / "cat_pair.bin", fspec.load(str(dataset)).feature_spec["pair"].dtype)
    assert len(pair) == 3 * meta["rows"]["train"]


def test_list_element_that_is_not_hex_is_a_bad_row(table, tmp_path):
    spec = _write_inputs(tmp_path / "in", {c: v[:50] for c, v in table.items()}, "csv", files=1)
    path = tmp_path / "in" / "part0.csv"
    lines = path.read_text().splitlines()
    fields = lines[5].split(",")
    fields[4] = "0000000a|zz"   # hx: the second element is not hex
    lines[5] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadRowError, match=r"part0.csv: line 6, column hx: .*not a 32-bit hex id"):
        _preprocess(spec, tmp_path / "out")


def test_inspect_shows_hotness_and_list_lengths(parquet_dataset, table):
    from preprocessing.inspect import summary

    lines = {line.split()[0]: line.split() for line in summary(str(parquet_dataset)).splitlines() if line.strip()}
    train = table["tags"][:int(0.8 * ROWS)]
    lengths = [len(v or []) for v in train]
    values, offsets, stats = _expected(table)["train", "tags"]
    assert lines["tags"][4:7] == ["variable", f"{sum(lengths) / len(lengths):.2f}", str(max(lengths))]
    assert lines["tags"][3] == f"{values.count(0) / len(values):.1%}/el"
    assert lines["pair"][4:7] == ["3", "3.00", "3"] and lines["one"][4:7] == ["1", "1", "1"]


def test_text_list_without_sep_is_refused(table, tmp_path):
    from common.errors import UserError

    spec = _write_inputs(tmp_path / "in", {c: v[:10] for c, v in table.items()}, "csv", files=1)
    text = yaml.safe_load(spec.read_text())
    del text["feature_spec"]["tags"]["sep"]
    spec.write_text(yaml.safe_dump(text))
    with pytest.raises(UserError, match=r"feature_spec.tags: .* needs the separator .* Fix: add `sep"):
        _preprocess(spec, tmp_path / "out")


def test_killed_run_resumes_to_identical_bytes(parquet_dataset, table, tmp_path):
    inputs = tmp_path / "in"
    spec = _write_inputs(inputs, table, "parquet", files=6)
    reference = _preprocess(spec, tmp_path / "ref")
    out = tmp_path / "out"
    cmd = [sys.executable, str(HELPERS / "slow_preprocess.py"), "0.5", "preprocess", "--spec",
           str(spec), "--out", str(out), "--split", SPLIT, "--no-progress"]
    cmd += [a for p in sorted(inputs.glob("part*")) for a in ("--input", str(p))]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(list(out.glob("_work/*/encoded/0*"))) < 2:   # killed during encoding (per-file list parts)
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "no encoded parts after 120 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list(out.glob("datasets/*/_SUCCESS"))
    dataset = _preprocess(spec, out)
    assert dataset.name == reference.name
    assert_same_files(reference, dataset)
    _check_dataset(dataset, table)


def test_real_list_table(tmp_path):
    """The real Criteo rows as a list table (tests/helpers/list_table.py): bag offsets and pair indices recomputed."""
    from helpers.list_table import BAG, PAIR, real_list_csv, real_list_table

    spec_path, data = real_list_table(tmp_path)
    dataset = Path(run(PreprocessConfig(inputs=[str(data)], spec=str(spec_path), out=str(tmp_path / "out"),
                                        progress=False)))
    spec = fspec.load(str(dataset))
    raw = pl.read_parquet(data)
    train = int(0.8 * len(raw))
    bags, pairs = raw["bag"].to_list(), raw["pair"].to_list()
    counts = collections.Counter(e for b in bags[:train] for e in b)
    kept = sorted((v for v, c in counts.items() if c >= 2), key=lambda v: (-counts[v], v))
    vocab = {v: i + 1 for i, v in enumerate(kept)}
    offsets = np.fromfile(dataset / "train" / "cat_bag.offsets.bin", np.int64)
    assert np.diff(offsets).tolist() == [len(b) for b in bags[:train]]
    values = np.fromfile(dataset / "train" / "cat_bag.bin", spec.feature_spec["bag"].dtype)
    assert values.tolist() == [vocab.get(e, 0) for b in bags[:train] for e in b]
    assert 0 < spec.metadata["list_lengths"]["train"]["bag"]["index0"] < len(values)
    assert max(len(b) for b in bags) == len(BAG) and min(len(b) for b in bags) < len(BAG)
    pair_counts = collections.Counter(int(e, 16) for p in pairs[:train] for e in p if e is not None)
    pair_vocab = {v: i + 1 for i, v in enumerate(sorted(pair_counts, key=lambda v: (-pair_counts[v], v)))}
    pair = np.fromfile(dataset / "train" / "cat_pair.bin", spec.feature_spec["pair"].dtype).reshape(-1, len(PAIR))
    assert pair.tolist() == [[0 if e is None else pair_vocab[int(e, 16)] for e in p] for p in pairs[:train]]
    assert spec.feature_spec["pair"].pooling == "mean" and spec.feature_spec["pair"].hotness == 2
    csv_spec, csv_data = real_list_csv(tmp_path)
    from_csv = Path(run(PreprocessConfig(inputs=[str(csv_data)], spec=str(csv_spec), out=str(tmp_path / "out_csv"),
                                         progress=False)))
    for path in dataset.glob("*/cat_*.bin"):
        assert path.read_bytes() == (from_csv / path.parent.name / path.name).read_bytes(), path


def test_ragged_rows_by_mask_and_slice():
    """Random and column split rules pick a batch's rows by a mask, ordered ones by a slice."""
    from preprocessing.lists import Ragged

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 4, 50)
    values = np.arange(lengths.sum())
    rows = np.split(values, np.cumsum(lengths)[:-1])
    r = Ragged(values, lengths, lengths > 2)
    mask = rng.random(50) < 0.4
    for picked, want in ((r[mask], [x for x, m in zip(rows, mask) if m]), (r[slice(7, 31)], rows[7:31]),
                         (r[slice(0, 0)], [])):
        assert picked.values.tolist() == [v for x in want for v in x]
        assert picked.lengths.tolist() == [len(x) for x in want]
    assert r[mask].truncated.tolist() == (lengths > 2)[mask].tolist()


# ---- the C list parse (preprocessing/_lists.c): the polars path's bytes, its bad rows left to that path -------
MLPERF_SIZES = "3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1"


def _with_and_without_c_lists(spec: Path, data: Path, out: Path, taken: bool = True, **options) -> list[Path]:
    """The datasets of ``data``: with the C list parse (``taken``: after checking that it takes the rows of the
    first MB), without."""
    from preprocessing import fastparse
    from preprocessing.job import Job

    if fastparse._lists is None:
        pytest.skip("preprocessing._lists is not built")
    config = PreprocessConfig(inputs=[str(data)], spec=str(spec), out=str(out / "c"), progress=False, **options)
    job = Job.from_config(config)
    parse = fastparse.block_parser(job.fmt, job.transforms, job.types, coded=True)
    first = next(p for p in sorted(Path(data).glob("part-*")) or [Path(data)])
    block = first.read_bytes()[:1 << 20]
    assert parse is not None and (parse(block[:block.rfind(b"\n") + 1]) is not None) == taken
    return [Path(run(config)),
            Path(run(config.model_copy(update={"fast_parse": False, "out": str(out / "polars")})))]


def test_c_list_parse_writes_the_polars_bytes_on_synthetic_multi_hot(tmp_path):
    """MLPerf-like rows (`dlrmflow synth --multi-hot-sizes`): 20 fixed-hotness hex lists, 6 one-hot."""
    from synthetic.generator import SPEC_FILE, generate

    generate(str(tmp_path / "in"), 2000, 1, seed=3, multi_hot_sizes=MLPERF_SIZES)
    fast, polars = _with_and_without_c_lists(tmp_path / "in" / SPEC_FILE, tmp_path / "in", tmp_path,
                                             split=SPLIT, frequency_threshold=2)
    assert_same_files(fast, polars)


def test_c_list_parse_writes_the_polars_bytes_on_real_rows(tmp_path):
    """The real rows in the Criteo layout with a fixed pair, variable, max_hotness, int and hashed lists."""
    from helpers.list_table import real_list_tsv

    spec, data = real_list_tsv(tmp_path)
    fast, polars = _with_and_without_c_lists(spec, data, tmp_path)
    assert fspec.load(str(fast)).metadata["list_lengths"]["train"]["C20"]["truncated"] > 0
    assert_same_files(fast, polars)


def test_c_list_parse_leaves_malformed_lists_to_the_polars_path(tmp_path):
    """Bad list values (a pair of 3, a non-hex element, 9 hex digits, a non-integer) and an odd valid one (a
    spaced int element, which the polars path strips): the same errors and the same skipped rows either way."""
    from helpers.list_table import real_list_tsv

    spec, data = real_list_tsv(tmp_path)
    rows = data.read_text().splitlines()[:300]
    for line, column, value in ((12, "C5", "1|2|3"), (30, "C19", "0000000a|zz"), (50, "C20", "123456789"),
                                (70, "C21", "1| 5|"), (90, "C21", "1.5")):
        fields = rows[line - 1].split("\t")
        fields[14 + int(column[1:]) - 1] = value
        rows[line - 1] = "\t".join(fields)
    data.write_text("\n".join(rows) + "\n")
    errors = []
    for fast in (True, False):
        with pytest.raises(BadRowError) as e:
            run(PreprocessConfig(inputs=[str(data)], spec=str(spec), out=str(tmp_path / "err"), progress=False,
                                 fast_parse=fast))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "part-0.tsv: line 12, column C5" in errors[0]
    fast, polars = _with_and_without_c_lists(spec, data, tmp_path, False, on_bad_row="skip", max_bad_fraction=0.05)
    assert fspec.load(str(fast)).metadata["bad_rows"] == 4
    assert_same_files(fast, polars)


def test_c_list_parse_is_the_polars_parse_on_random_odd_rows():
    """Blocks of random rows with odd and bad list values (uppercase hex, "-0", 18 digits, empty elements, 9 hex
    digits, spaces, "+3", lists of the wrong length): where the C parse takes a block, the polars path finds no
    bad row and the same columns (fixed, variable, max_hotness with `;`, int and hashed lists, one-hot)."""
    from feature_spec import CRITEO_COLUMNS
    from preprocessing import fastparse, readers
    from preprocessing.errors import BadRows
    from preprocessing.transforms import Categorical, Transforms, to_intermediate

    if fastparse._lists is None:
        pytest.skip("preprocessing._lists is not built")
    shapes = [(1, None, None, "hex", None), (3, None, "|", "hex", None), (None, None, "|", "hex", None),
              (None, 2, ";", "hex", None), (None, None, "|", "int", None), (None, None, "|", "hex", 50)]
    t = Transforms(label="label", numerical=[(f"I{i}", "log1p") for i in range(1, 14)],
                   categorical=[Categorical(n, kind, 0, buckets, hotness, cap, sep) for n, (hotness, cap, sep, kind,
                                buckets) in zip(CRITEO_COLUMNS[14:], shapes * 5)])
    types, fmt = t.parse_types(), readers.Format("tsv", columns=list(CRITEO_COLUMNS))
    parse = fastparse.block_parser(fmt, t, types, coded=False)
    values = {"hex": ["", "0", "a", "ABCDEF12", "abcdef12", "ffffffff", "1234567", "Ab"],
              "int": ["", "0", "-0", "7", "-12", "007", "123456789012345678"]}
    bad = {"hex": ["123456789", "zz", " 1", "0x1", "-1", "+1"], "int": ["1.5", " 5", "+3", "-", "1234567890123456789"]}
    rng = random.Random(5)

    def field(c, odd: bool) -> str:
        n = c.hotness if c.hotness and rng.random() < 0.9 else rng.randint(0, 4)
        elements = [rng.choice(values[c.kind]) for _ in range(max(n, 1))]
        if odd:
            elements[rng.randrange(len(elements))] = rng.choice(bad[c.kind])
        return "" if n == 0 and rng.random() < 0.5 else (c.sep or "").join(elements[:1] if c.hotness == 1 else elements)

    taken = 0
    for _ in range(200):
        rows = ["\t".join([rng.choice("01"), *(rng.choice(["", "0", "5", "-2"]) for _ in range(13)),
                           *(field(c, rng.random() < 0.01) for c in t.categorical)]) for _ in range(rng.randint(1, 4))]
        block = ("\n".join(rows) + "\n").encode()
        got = parse(block, {})
        if got is None:
            continue
        taken += 1
        found = BadRows("f", "skip")
        df, lines, _ = readers._parse_block(block, 1, fmt.columns, fmt, types, found)
        want = to_intermediate(df, t, lines, found, None, 65504.0, {})
        assert found.count == 0, block
        assert got.schema == want.schema and all(got[c].equals(want[c]) for c in want.columns), block
    assert taken > 30
