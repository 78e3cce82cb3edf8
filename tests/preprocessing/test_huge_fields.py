"""A field of megabytes in an input file: its error quotes a short prefix of it and its size, a text category that
long is a bad row (``errors.FIELD_BYTES``), and nothing preprocessing writes is large."""

from __future__ import annotations

import gzip

import pytest

from common.errors import UserError
from preprocessing import PreprocessConfig, run
from preprocessing.errors import FIELD_BYTES

BIG = 5 << 20   # 5 MB: the shape of the 100 MB field of the review, small enough for the suite
SHORT = 1000    # an error line's length at most


@pytest.fixture(scope="module")
def lines(criteo_10k) -> list[str]:
    with gzip.open(criteo_10k, "rt") as f:
        return [next(f) for _ in range(200)]


def _field(line: str, col: int, value: str) -> str:
    f = line.rstrip("\n").split("\t")
    f[col] = value
    return "\t".join(f) + "\n"


def _largest_written(folder) -> int:
    return max(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("col,words", [(3, "is not a number"), (16, "is not a 32-bit hex id")])
def test_a_huge_criteo_field_is_quoted_short(lines, tmp_path, col, words):
    path = tmp_path / "day.tsv"
    path.write_text("".join(_field(ln, col, "x" * BIG) if i == 10 else ln for i, ln in enumerate(lines)))
    with pytest.raises(UserError) as e:
        run(PreprocessConfig(inputs=[str(path)], out=str(tmp_path / "a"), progress=False))
    message = str(e.value)
    assert len(message) < SHORT and f"line 11, column {'I3' if col == 3 else 'C3'}" in message, message[:SHORT]
    assert f"'{'x' * 80}'... ({BIG:,} bytes) {words}" in message
    run(PreprocessConfig(inputs=[str(path)], out=str(tmp_path / "b"), progress=False, on_bad_row="skip",
                         max_bad_fraction=0.01))
    assert _largest_written(tmp_path / "b") < 1 << 20


def test_a_text_category_over_the_field_limit_is_a_bad_row(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("feature_spec:\n  y: {}\n  n: {}\n  s: {dtype: str}\n"
                    "channel_spec:\n  label: [y]\n  numerical: [n]\n  categorical: [s]\n")
    rows = [f"{i % 2},{i},v{i % 7}\n" for i in range(200)]
    rows[5] = f'1,5,"{"y" * BIG}"\n'                  # over the csv module's own limit: read all the same
    rows[6] = f"0,6,{'z' * (FIELD_BYTES + 1)}\n"       # just over the limit
    rows[7] = f"0,7,{'w' * FIELD_BYTES}\n"             # at the limit: a category
    path = tmp_path / "day.csv"
    path.write_text("y,n,s\n" + "".join(rows))
    with pytest.raises(UserError) as e:
        run(PreprocessConfig(inputs=[str(path)], out=str(tmp_path / "a"), spec=str(spec), progress=False))
    message = str(e.value)
    assert len(message) < SHORT and "line 7, column s" in message, message[:SHORT]
    assert f"({BIG:,} bytes) is longer than 64 KiB, the limit of a categorical value" in message
    rows[8] = "0,8,a,b\n"   # a long row: the block is read line by line (the csv module's field limit, lifted)
    path.write_text("y,n,s\n" + "".join(rows))
    ds = run(PreprocessConfig(inputs=[str(path)], out=str(tmp_path / "b"), spec=str(spec), progress=False,
                              on_bad_row="skip", max_bad_fraction=0.02))
    import feature_spec as fspec

    spec_out = fspec.load(ds)
    assert spec_out.metadata["bad_rows"] == 3 and sum(spec_out.metadata["rows"].values()) == 197
    assert _largest_written(tmp_path / "b") < 1 << 20   # the category at the limit is one 64 KiB vocabulary entry
