"""Bad input: errors name file, line and column; skip counts; truncated/missing files fail clearly."""

from __future__ import annotations

import gzip

import pytest

from common.errors import UserError
from preprocessing import PreprocessConfig, run


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


def test_cli_prints_error_without_traceback(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "flows", "preprocess", "--input", str(tmp_path / "nope.tsv"),
                        "--out", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
