"""Atomic local writes: a temporary name, then a rename, so a killed run never leaves a half part."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_dir(path: Path):
    """Yield a fresh temporary folder that becomes ``path`` only if the block completes."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    yield tmp
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def write_json(path: Path, data) -> None:
    """Write JSON atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path):
    return json.loads(path.read_text())
