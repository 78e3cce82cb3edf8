"""Per-file parts shared across datasets: a rolling window parses and counts only its new day, the dataset is
byte-identical to preprocessing the same files from scratch, a changed file is parsed again, prune removes
exactly what it is told."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preprocessing import PreprocessConfig, file_parts, prune_file_parts, run
from synthetic.generator import generate
from helpers.datasets import assert_same_files

ROWS = 4000


@pytest.fixture(scope="module")
def days(tmp_path_factory) -> list[Path]:
    """Five synthetic day files (one per seed)."""
    root = tmp_path_factory.mktemp("days")
    for d in range(1, 6):
        generate(str(root / f"day{d}"), ROWS, 1, seed=d)
    return [root / f"day{d}" / "part-00000.tsv" for d in range(1, 6)]


def _window(days: list[Path], first: int, out: Path, **options) -> Path:
    """Train on days first..first+1, validate on the next, test on the one after (0-based ``first``)."""
    inputs = [f"train={days[first]}", f"train={days[first + 1]}", f"val={days[first + 2]}", f"test={days[first + 3]}"]
    return Path(run(PreprocessConfig(inputs=inputs, out=str(out), frequency_threshold=2, progress=False, **options)))


def _entries(out: Path) -> dict[str, dict[str, int]]:
    """Per stored file entry: the modification times of its parse and counts (absent where not made)."""
    return {e.name: {p: (e / p).stat().st_mtime_ns for p in ("parsed.json", "counts") if (e / p).exists()}
            for e in (out / "_files").iterdir()}


def test_next_window_parses_only_the_new_day_and_equals_from_scratch(days, tmp_path):
    store = tmp_path / "store"
    _window(days, 0, store)
    first = _entries(store)
    assert file_parts(str(store)) == sorted(str(d) for d in days[:4])
    # every day counted in its parse (the data gate compares the val and test days' values; later windows train
    # on them)
    assert len(first) == 4 and all("counts" in e for e in first.values())
    assert not (store / "_work").exists()

    second = _window(days, 1, store)
    after = _entries(store)
    assert len(after) == 5 and file_parts(str(store)) == sorted(str(d) for d in days)
    new = set(after) - set(first)
    assert len(new) == 1 and "counts" in after[new.pop()]   # day 5 parsed and counted
    for key, times in first.items():   # nothing parsed or counted again (day 3, val then train, counted once)
        assert after[key] == times

    fresh = _window(days, 1, tmp_path / "fresh")
    assert second.name == fresh.name
    assert_same_files(fresh, second)


def test_other_split_rules_reuse_the_parse_and_match_from_scratch(days, tmp_path):
    store = tmp_path / "store"
    _window(days, 0, store)
    parsed = {k: v["parsed.json"] for k, v in _entries(store).items()}
    for split in ("ordered:train=0.7,val=0.15,test=0.15", "random:train=0.8,test=0.2,seed=3"):
        config = dict(inputs=[str(d) for d in days[:4]], split=split, frequency_threshold=2, progress=False)
        shared = Path(run(PreprocessConfig(out=str(store), **config)))
        assert {k: v["parsed.json"] for k, v in _entries(store).items()} == parsed   # no new parse
        assert_same_files(Path(run(PreprocessConfig(out=str(tmp_path / split[:6]), **config))), shared)


def test_changed_file_is_parsed_again(days, tmp_path):
    local = [tmp_path / f"day{d}.tsv" for d in range(1, 5)]
    for src, dst in zip(days, local):
        dst.write_bytes(src.read_bytes())
    store = tmp_path / "store"
    _window(local, 0, store)
    before = _entries(store)
    lines = local[1].read_bytes().splitlines(keepends=True)
    local[1].write_bytes(b"".join(lines[: len(lines) // 2]))   # day 2 (train) rewritten: another size and mtime
    changed = _window(local, 0, store)
    after = _entries(store)
    assert set(before) < set(after) and len(after) == 5
    assert {k: after[k] for k in before} == before
    assert_same_files(_window(local, 0, tmp_path / "fresh"), changed)


def test_a_file_rewritten_with_the_same_size_and_mtime_is_parsed_again(days, tmp_path):
    """Rewritten in place with other rows of the same length and its mtime set back (`cp -p`, `touch -d`): the
    kernel's ctime still moved, so the file is parsed again and the dataset is the new content's."""
    local = [tmp_path / f"day{d}.tsv" for d in range(1, 5)]
    for src, dst in zip(days, local):
        dst.write_bytes(src.read_bytes())
    store = tmp_path / "store"
    first = _window(local, 0, store)
    before = _entries(store)
    stat = local[1].stat()
    rows = local[1].read_bytes().splitlines(keepends=True)
    local[1].write_bytes(b"".join(rows[1:] + rows[:1]))   # the same bytes in another order: same size
    os.utime(local[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (local[1].stat().st_size, local[1].stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    second = _window(local, 0, store)
    after = _entries(store)
    assert second.name != first.name and set(before) < set(after) and len(after) == 5
    assert_same_files(_window(local, 0, tmp_path / "fresh"), second)


def test_prune_removes_exactly_the_entries_it_is_told(days, tmp_path):
    store = tmp_path / "store"
    _window(days, 0, store)
    _window(days, 1, store)
    keep = _entries(store)
    gone = {str(days[0]), str(days[2])}
    assert prune_file_parts(str(store), lambda uri: uri in gone) == sorted(gone)
    assert file_parts(str(store)) == sorted({str(d) for d in days} - gone)
    left = _entries(store)
    assert len(left) == 3 and all(keep[k] == v for k, v in left.items())
    assert prune_file_parts(str(store), lambda uri: uri in gone) == []
    # a work_dir store keeps its parts there
    work = tmp_path / "scratch"
    _window(days, 0, tmp_path / "other", work_dir=str(work))
    assert len(os.listdir(work / "_files")) == 4 and file_parts(str(tmp_path / "other")) == []
    assert prune_file_parts(str(tmp_path / "other"), lambda uri: True, work_dir=str(work)) == \
        sorted(str(d) for d in days[:4])
    assert os.listdir(work / "_files") == []
