"""Numerical transforms against a straightforward numpy computation, end to end (spec -> numerical.bin)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import feature_spec as fspec
from preprocessing import PreprocessConfig, run

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
