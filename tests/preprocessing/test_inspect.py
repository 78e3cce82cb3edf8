"""`dlrmflow inspect`: rows per split, cardinality, dtype and the share of index 0 per feature."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from preprocessing import PreprocessConfig, run


def test_inspect_prints_summary(criteo_10k, tmp_path):
    ds = run(PreprocessConfig(inputs=[str(criteo_10k)], out=str(tmp_path), frequency_threshold=3, progress=False))
    r = subprocess.run([sys.executable, "-m", "flows", "inspect", ds], capture_output=True, text=True, check=True)
    assert "rows: train 8,000, val 1,000, test 1,000" in r.stdout
    c3 = next(line for line in r.stdout.splitlines() if line.startswith("C3 "))
    zeros = np.count_nonzero(np.fromfile(f"{ds}/train/cat_C3.bin", dtype=np.int16) == 0) / 8000
    assert f"{zeros:.1%}" in c3 and "int16" in c3


def test_inspect_nvidia_dataset_counts_rows_from_file_sizes(tmp_path):
    from preprocessing.inspect import summary
    from helpers.datasets import write_nvidia_dataset

    text = summary(str(write_nvidia_dataset(tmp_path, {"train": 50, "test": 9})))
    assert "fingerprint none (not written by dlrmflow)" in text and "rows: test 9, train 50" in text
    assert text.startswith(f"dataset {tmp_path.name} ") and "cat_0.bin" in text and "?" not in text
