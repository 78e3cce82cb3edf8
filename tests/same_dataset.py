"""``assert_same_files(a, b)``: two dataset folders hold the same files with the same bytes."""

from __future__ import annotations

from pathlib import Path


def assert_same_files(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
