"""Bad input: errors name file, line and column; skip counts; truncated/missing files fail clearly."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import feature_spec as fspec

from common.errors import UserError
from preprocessing import PreprocessConfig, readers, run


@pytest.fixture(scope="module")
def lines(criteo_10k) -> list[str]:
    with gzip.open(criteo_10k, "rt") as f:
        return [next(f) for _ in range(200)]


def _write(tmp_path, lines, edits: dict[int, str]):
    path = tmp_path / "bad.tsv"
    path.write_text("".join(edits.get(i + 1, ln) for i, ln in enumerate(lines)))
    return path


def _replace_field(line: str, col: int, value: str) -> str:
    f = line.rstrip("\n").split("\t")
    f[col] = value
    return "\t".join(f) + "\n"


def _run(path, tmp_path, **kw):
    return run(PreprocessConfig(inputs=[str(path)], out=str(tmp_path / "out"), progress=False, **kw))


@pytest.mark.parametrize("line,edit,column,words", [
    (5, lambda ln: ln.rstrip("\n") + "\textra\n", None, "41 fields, expected 40"),
    (6, lambda ln: "\t".join(ln.split("\t")[:30]) + "\n", None, "30 fields"),
    (7, lambda ln: _replace_field(ln, 3, "abc"), "I3", "'abc' is not a number"),
    (9, lambda ln: _replace_field(ln, 16, "zz12"), "C3", "not a 32-bit hex id"),
    (11, lambda ln: _replace_field(ln, 0, "2"), "label", "not 0/1"),
])
def test_error_names_file_line_column(lines, tmp_path, line, edit, column, words):
    path = _write(tmp_path, lines, {line: edit(lines[line - 1])})
    with pytest.raises(UserError) as e:
        _run(path, tmp_path)
    msg = str(e.value)
    assert f"{path}: line {line}" in msg and words in msg and "--on-bad-row skip" in msg
    if column:
        assert f"column {column}" in msg


def test_skip_counts_bad_rows_and_guard(lines, tmp_path):
    edits = {5: lines[4].rstrip("\n") + "\tx\n", 7: _replace_field(lines[6], 3, "abc"), 9: _replace_field(lines[8], 16, "zz")}
    path = _write(tmp_path, lines, edits)
    import feature_spec as fspec
    ds = _run(path, tmp_path, on_bad_row="skip", max_bad_fraction=0.05)
    spec = fspec.load(ds)
    assert spec.metadata["bad_rows"] == 3 and sum(spec.metadata["rows"].values()) == 197
    with pytest.raises(UserError, match="3 of 200 rows are malformed"):
        _run(path, tmp_path / "strict", on_bad_row="skip", max_bad_fraction=0.01)


def test_truncated_gz_and_missing_file(criteo_10k, tmp_path):
    data = criteo_10k.read_bytes()
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated"):
        _run(cut, tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        _run(tmp_path / "nope.tsv", tmp_path)


def test_a_gz_with_trailing_garbage_is_named_so_not_truncated(criteo_10k, tmp_path):
    whole = criteo_10k.read_bytes()   # a .gz
    appended = tmp_path / "appended.txt.gz"
    appended.write_bytes(whole + b"label\tI1\n")
    with pytest.raises(UserError, match=rf"after the end of its last complete gzip member \(byte {len(whole):,} of "
                                        r"the file\) come bytes that are not gzip data.*Fix: re-create the file"):
        _run(appended, tmp_path / "a")


def test_cli_prints_error_without_traceback(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "flows", "preprocess", "--input", str(tmp_path / "nope.tsv"),
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr


# ---- a byte that is not UTF-8; a row with several bad fields is one bad row (issue 34 §4) --------------------------
def _write_bytes(path, lines: list[str], edits: dict[int, bytes] = {}, drop: int | None = None, header: bytes = b""):
    """``lines`` as bytes with line k (1-based) replaced by ``edits[k]`` or left out (``drop``), after ``header``."""
    rows = [edits.get(i + 1, ln.encode()) for i, ln in enumerate(lines) if i + 1 != drop]
    path.write_bytes(header + b"".join(rows))
    return path


def _with_field(line: str, col: int, value: bytes) -> bytes:
    f = line.rstrip("\n").encode().split(b"\t")
    f[col] = value
    return b"\t".join(f) + b"\n"


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "flows", "preprocess", *map(str, args), "--no-progress"],
                          capture_output=True, text=True)


def _dataset(out) -> Path:
    (ds,) = (Path(out) / "datasets").iterdir()
    return ds


def _assert_same_data(a: Path, b: Path) -> None:
    """The same rows written: every file but the feature spec, whose metadata names the inputs and counts."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != "feature_spec.yaml")
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()
                                     and p.name != "feature_spec.yaml")
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def _parsed_bad_rows(out) -> list[int]:
    """The bad rows each input file's stored parse recorded (``_files/<key>/parsed.json``)."""
    import json
    return [json.loads(p.read_text())["bad_rows"] for p in sorted((Path(out) / "_files").glob("*/parsed.json"))]


HEADER = ("\t".join(["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))]) + "\n").encode()


def test_invalid_utf8_byte_error_names_file_and_line(lines, tmp_path):
    path = _write_bytes(tmp_path / "bad.tsv", lines, {10: _with_field(lines[9], 16, b"zz\xffzz")})
    r = _cli("--input", path, "--out", tmp_path / "out")
    err = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("preprocessing 1 input files")]
    assert r.returncode == 2 and len(err) == 1, r.stderr   # the one error line, after the run's first line
    assert err[0].startswith(f"error: {path}: line 10, column C3: ") and "not UTF-8" in err[0]
    assert "--on-bad-row skip" in err[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("where", ["criteo", "block"])
def test_invalid_utf8_byte_skipped_as_one_bad_row(lines, tmp_path, where):
    """Skipped and counted once, the rest of its block read: the dataset is the one of the file without the row
    (``block``: a small block size, the row in the middle of a later block, blocks parsed in parallel)."""
    bad = _write_bytes(tmp_path / "bad.tsv", lines, {120: _with_field(lines[119], 20, b"\xe9t\xe9")})
    clean = _write_bytes(tmp_path / "clean.tsv", lines, drop=120)
    if where == "block":   # 3 blocks, line 120 in the second; the others parsed by the C fast path where built
        from unittest import mock
        with mock.patch.object(readers, "BLOCK_BYTES", 32 << 10):
            a = run(PreprocessConfig(inputs=[str(bad)], out=str(tmp_path / "a"), progress=False, workers=2,
                                     on_bad_row="skip", max_bad_fraction=0.01))
            b = run(PreprocessConfig(inputs=[str(clean)], out=str(tmp_path / "b"), progress=False, workers=2))
        a, b = Path(a), Path(b)
    else:
        r = _cli("--input", bad, "--out", tmp_path / "a", "--on-bad-row", "skip", "--max-bad-fraction", "0.01")
        assert r.returncode == 0, r.stderr
        assert _cli("--input", clean, "--out", tmp_path / "b").returncode == 0
        a, b = _dataset(tmp_path / "a"), _dataset(tmp_path / "b")
    import feature_spec as fspec
    meta = fspec.load(str(a)).metadata
    assert meta["bad_rows"] == 1 and sum(meta["rows"].values()) == 199
    assert _parsed_bad_rows(tmp_path / "a") == [1]
    _assert_same_data(a, b)


def test_header_line_is_one_bad_row(lines, tmp_path):
    path = _write_bytes(tmp_path / "header.tsv", lines, header=HEADER)
    r = _cli("--input", path, "--out", tmp_path / "strict")   # error mode: line 1 named, its other fields listed
    assert r.returncode == 2 and f"{path}: line 1, column label: value 'label' is not a number" in r.stderr
    assert "Also bad in this row: I1, I2" in r.stderr and "Traceback" not in r.stderr
    r = _cli("--input", path, "--out", tmp_path / "skip", "--on-bad-row", "skip")   # 1 of 201 > 0.1%
    assert r.returncode == 2 and "1 of 201 rows are malformed" in r.stderr, r.stderr
    assert _parsed_bad_rows(tmp_path / "skip") == [1]
    r = _cli("--input", path, "--out", tmp_path / "ok", "--on-bad-row", "skip", "--max-bad-fraction", "0.005")
    assert r.returncode == 0, r.stderr
    import feature_spec as fspec
    meta = fspec.load(str(_dataset(tmp_path / "ok"))).metadata
    assert meta["bad_rows"] == 1 and sum(meta["rows"].values()) == 200
    _assert_same_data(_dataset(tmp_path / "ok"), Path(_run(_write_bytes(tmp_path / "plain.tsv", lines),
                                                           tmp_path / "plain")))


def test_max_bad_fraction_counts_rows_not_fields(lines, tmp_path):
    """3 bad rows with 14 + 2 + 3 bad fields in 201 lines (the header, two numbers, label and two ids): 3 rows,
    so the budget holds at 1.5% (3 <= 3.015) and trips at 1.4% (3 > 2.814), naming 3 of 201."""
    two_numbers = _replace_field(_replace_field(lines[49], 1, "x"), 2, "y")
    label_and_ids = _replace_field(_replace_field(_replace_field(lines[59], 0, "2"), 16, "zz"), 17, "qq")
    path = _write_bytes(tmp_path / "bad.tsv", lines, {50: two_numbers.encode(), 60: label_and_ids.encode()},
                        header=HEADER)
    import feature_spec as fspec
    ds = _run(path, tmp_path / "ok", on_bad_row="skip", max_bad_fraction=0.015)
    meta = fspec.load(ds).metadata
    assert meta["bad_rows"] == 3 and sum(meta["rows"].values()) == 198
    assert _parsed_bad_rows(tmp_path / "ok" / "out") == [3]
    with pytest.raises(UserError, match=r"3 of 201 rows are malformed \(1.49%\), more than --max-bad-fraction 0.014"):
        _run(path, tmp_path / "strict", on_bad_row="skip", max_bad_fraction=0.014)
    with pytest.raises(UserError, match=r"line 60, column label: .* Also bad in this row: C3, C4\."):   # error mode
        _run(_write_bytes(tmp_path / "row.tsv", lines, {60: label_and_ids.encode()}), tmp_path / "error")


CSV_SPEC = """\
feature_spec:
  clicked: {}
  price: {transform: identity}
  city: {dtype: str}
  shop: {dtype: str}
channel_spec:
  label: [clicked]
  numerical: [price]
  categorical: [city, shop]
metadata:
  preprocessing:
    split: ordered:train=0.8,test=0.2
"""


def test_invalid_utf8_in_a_csv_string_column(tmp_path):
    """A Latin-1 byte in a string categorical of a CSV with a header (the polars path: no fast path to fall from),
    also inside a quoted field: line named in error mode, the row skipped and counted once in skip mode."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(CSV_SPEC)
    rows = [f'{i % 2},{i}.5,"city {i % 7}, north",shop{i % 5}\n'.encode() for i in range(300)]
    bad = list(rows)
    bad[149] = b'1,3.5,"Mal\xf6, north",shop\xe9\n'   # line 151 (after the header)
    header = b"clicked,price,city,shop\n"
    (tmp_path / "bad.csv").write_bytes(header + b"".join(bad))
    (tmp_path / "clean.csv").write_bytes(header + b"".join(rows[:149] + rows[150:]))
    with pytest.raises(UserError, match=r"bad.csv: line 151, column city: value b'Mal\\xf6, north' holds a byte "
                                        r"that is not UTF-8"):
        run(PreprocessConfig(inputs=[str(tmp_path / "bad.csv")], spec=str(spec), out=str(tmp_path / "e"),
                             progress=False))
    import feature_spec as fspec
    a = Path(run(PreprocessConfig(inputs=[str(tmp_path / "bad.csv")], spec=str(spec), out=str(tmp_path / "a"),
                                  progress=False, on_bad_row="skip", max_bad_fraction=0.01)))
    b = Path(run(PreprocessConfig(inputs=[str(tmp_path / "clean.csv")], spec=str(spec), out=str(tmp_path / "b"),
                                  progress=False)))
    assert fspec.load(str(a)).metadata["bad_rows"] == 1 and sum(fspec.load(str(a)).metadata["rows"].values()) == 299
    _assert_same_data(a, b)


def test_a_categorical_empty_in_every_row_of_a_block_is_all_missing(criteo_10k, tmp_path):
    """A feature absent from a whole block (a day's logs without C22) is missing there, not a failed parse."""
    lines = gzip.decompress(criteo_10k.read_bytes()).decode().splitlines(keepends=True)[:200]
    column = 1 + 13 + 21   # C22
    blank = tmp_path / "no_c22.tsv"
    blank.write_text("".join("\t".join("" if k == column else v for k, v in enumerate(line.split("\t")))
                             for line in lines))
    ds = Path(_run(blank, tmp_path, split="ordered:train=1"))
    spec = fspec.load(str(ds))
    c22 = np.fromfile(ds / "train" / fspec.categorical_file_name("C22"), dtype=spec.feature_spec["C22"].dtype)
    assert len(c22) == 200 and not c22.any()   # index 0: missing
