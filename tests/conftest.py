"""Shared fixtures: where the real data lives (../shared/data, beside the repo), skipping cleanly if absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("DLRMFLOW_SHARED_DATA", REPO.parent / "shared" / "data"))
CRITEO_10K = SHARED_DATA / "criteo" / "criteo_kaggle_train_head10k.txt.gz"
ADULT = SHARED_DATA / "byo" / "adult.parquet"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return path


@pytest.fixture(scope="session")
def criteo_10k() -> Path:
    """The 10,000 real Criteo Kaggle rows (gzipped raw TSV)."""
    return _need(CRITEO_10K)


@pytest.fixture(scope="session")
def adult_parquet() -> Path:
    """The UCI Adult table (bring-your-own path)."""
    return _need(ADULT)

# The flow, store and UI tests' fixtures (tests/prefect_fixtures.py), registered here so that the Prefect
# test harness starts once per session.
from prefect_fixtures import prefect_harness, s3_server  # noqa: E402,F401
