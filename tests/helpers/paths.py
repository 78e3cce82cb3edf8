"""Where things are: the repository, the virtual environment's executables and the real data beside the repo
(../shared/data, or $DLRMFLOW_SHARED_DATA)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHARED_DATA = Path(os.environ.get("DLRMFLOW_SHARED_DATA", REPO.parent / "shared" / "data"))
CRITEO_10K = SHARED_DATA / "criteo" / "criteo_kaggle_train_head10k.txt.gz"
ADULT = SHARED_DATA / "byo" / "adult.parquet"


def need(path: Path) -> Path:
    """``path``, or skip the test where the real data is absent."""
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return path
HELPERS = Path(__file__).resolve().parent   # its scripts: slow_preprocess.py, warm_worker.py
