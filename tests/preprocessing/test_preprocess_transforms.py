"""Numerical transforms against a straightforward numpy computation, end to end (spec -> numerical.bin)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import feature_spec as fspec
from preprocessing import PreprocessConfig, run
from preprocessing.transforms import NumericalRangeError

SPEC = """\
feature_spec:
  click: {}
  a: {transform: log3p}
  b: {transform: log1p}
  c: {transform: identity}
  cat: {dtype: str}
channel_spec:
  label: [click]
  numerical: [a, b, c]
  categorical: [cat]
metadata:
  name: transforms
"""
VALUES = ["", "-7", "-3", "-2.5", "-2", "-1", "0", "0.5", "1", "2", "7", "1000", "123456789", "1e12"]


def test_log3p_log1p_identity_match_numpy(tmp_path):
    (tmp_path / "spec.yaml").write_text(SPEC)
    rows = "".join(f"{i % 2},{v},{v},{v},x\n" for i, v in enumerate(VALUES))
    (tmp_path / "t.csv").write_text("click,a,b,c,cat\n" + rows)
    ds = Path(run(PreprocessConfig(inputs=[str(tmp_path / "t.csv")], spec=str(tmp_path / "spec.yaml"),
                                   out=str(tmp_path / "out"), split="ordered:train=1", numerical_dtype="float32",
                                   progress=False)))
    assert fspec.load(str(ds)).numerical_features == ["a", "b", "c"]
    got = np.fromfile(ds / "train" / "numerical.bin", dtype=np.float32).reshape(-1, 3)
    x = np.array([float(v) if v else np.nan for v in VALUES])
    with np.errstate(invalid="ignore", divide="ignore"):
        log3p = np.where(x > -3, np.log(x + 3), 0.0)     # NVIDIA DLRM / TorchRec: log(x + 3); missing -> 0
    log1p = np.log1p(np.maximum(x, 0))                   # the default: log1p(max(x, 0)); missing -> 0
    for column, want in enumerate((log3p, log1p, x)):
        np.testing.assert_array_equal(got[:, column], np.nan_to_num(want, nan=0.0).astype(np.float32))
    assert got[VALUES.index("-3"), 0] == got[VALUES.index(""), 0] == 0
    assert got[VALUES.index("0"), 0] == np.log(3, dtype=np.float32)


# --- values that do not fit, and nan ------------------------------------------------------------------------------

def _preprocess(tmp_path, rows: list[str], dtype: str, name: str = "t.csv", **kwargs) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    (tmp_path / name).write_text("click,a,b,c,cat\n" + "".join(rows))
    return Path(run(PreprocessConfig(inputs=[str(tmp_path / name)], spec=str(tmp_path / "spec.yaml"),
                                     out=str(tmp_path / kwargs.pop("out", "out")), split="ordered:train=1",
                                     numerical_dtype=dtype, progress=False, **kwargs)))


def test_an_identity_value_above_float16_is_an_error_naming_feature_file_line_and_value(tmp_path):
    """70000 (`identity`) does not fit float16 (max 65504): once it became inf in numerical.bin and training
    diverged. Now an error, whatever the bad-row policy; with float32 it is written as is."""
    rows = ["1,1,1,1,x\n", "0,2,2,65504,x\n", "1,3,3,70000,x\n", "0,4,4,5,x\n"]
    for policy in ("error", "skip"):
        with pytest.raises(NumericalRangeError) as e:
            _preprocess(tmp_path, rows, "float16", on_bad_row=policy)
        message = str(e.value)
        assert f"{tmp_path / 't.csv'}: line 4: numerical feature 'c': value 70000.0" in message, message
        assert "65504" in message and "log1p" in message and "--numerical-dtype float32" in message
    ds = _preprocess(tmp_path, rows, "float32", out="out32")
    assert np.fromfile(ds / "train" / "numerical.bin", np.float32).reshape(-1, 3)[:, 2].tolist() == [1, 65504, 70000, 5]


def test_the_encode_stage_checks_the_dtype_too():
    """The parsed parts of a file are shared by datasets whatever their numerical dtype (the parse checked the
    dtype of the dataset it ran for): the encode stage compares again (vectorised, per block), naming the file."""
    import polars as pl

    from preprocessing.stages import encode_batch
    from preprocessing.transforms import Transforms

    t = Transforms(label="click", numerical=[("a", "log1p"), ("c", "identity")])
    df = pl.DataFrame({"click": [1, 0], "a": [0.5, 1.0], "c": [1.0, 70000.0]},
                      schema={"click": pl.Int8, "a": pl.Float32, "c": pl.Float32})
    assert encode_batch(t, "float32", {}, df, lambda *_: {})["numerical.bin"][1, 1] == 70000
    with pytest.raises(NumericalRangeError, match=r"^s3://b/day\.tsv, parsed row 2 of a block: numerical feature 'c': "
                                                  r"value 70000\.0 .*--numerical-dtype float32"):
        encode_batch(t, "float16", {}, df, lambda *_: {}, source="s3://b/day.tsv")


@pytest.mark.parametrize("literal", ["inf", "-inf", "1e39"])
def test_values_not_finite_after_their_transform_are_errors(tmp_path, literal):
    """inf (or a float64 beyond float32) is not finite after log1p or identity, even in float32. (log1p of -inf
    is log1p(0): the default transform clips at 0, so only the identity column fails then.)"""
    with pytest.raises(NumericalRangeError, match=r"t\.csv: line 3: numerical feature '(b|c)': value -?(inf|1e\+39) "
                                                  r"is -?inf after its (log1p|identity) transform"):
        _preprocess(tmp_path, ["1,1,1,1,x\n", f"0,1,{literal},{literal},x\n"], "float32")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_nan_literal_is_a_missing_value(tmp_path, dtype):
    """`nan` (any case) in a numerical column is missing, as an empty field is: the same bytes for every transform."""
    rows = lambda v: [f"{i % 2},{v},{v},{v},x\n" if i in (1, 3) else f"{i % 2},{i},{i},{i},x\n" for i in range(5)]
    empty = _preprocess(tmp_path, rows(""), dtype, name="empty.csv", out="empty")
    for literal in ("nan", "NaN"):
        ds = _preprocess(tmp_path, rows(literal), dtype, name=f"{literal}.csv", out=literal)
        got, want = (np.fromfile(d / "train" / "numerical.bin", np.uint8) for d in (ds, empty))
        assert np.array_equal(got, want) and np.isfinite(np.fromfile(ds / "train" / "numerical.bin", dtype)).all()
