"""A finished dataset that a run reuses is verified against its recorded checksums, once per write of it (issue 34
section 2): a flipped byte is refused naming the file, an intact dataset is read once (its record,
``writer.VERIFIED``, spares the next reuse), a dataset or a file written since is read again."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

import feature_spec as fspec
from common.errors import UserError
from preprocessing import PreprocessConfig, Preprocessing, inspect, run, writer

ROWS = 400


@pytest.fixture(scope="module")
def written(criteo_10k, tmp_path_factory) -> tuple[list[str], Path]:
    """(the inputs, a store holding their one finished dataset), written once for the module."""
    root = tmp_path_factory.mktemp("raw")
    with gzip.open(criteo_10k, "rt") as f:
        lines = [next(f) for _ in range(ROWS)]
    inputs = []
    for split, part in (("train", lines[:300]), ("test", lines[300:])):
        (root / f"{split}.tsv").write_text("".join(part))
        inputs.append(f"{split}={root / f'{split}.tsv'}")
    store = tmp_path_factory.mktemp("store")
    run(_config(inputs, store))
    return inputs, store


def _config(inputs: list[str], store: Path) -> PreprocessConfig:
    return PreprocessConfig(inputs=inputs, out=str(store), progress=False, workers=1, frequency_threshold=2)


def _copy(written, tmp_path) -> tuple[list[str], Path, Path]:
    """(the inputs, a copy of the store, its dataset) for a test to damage."""
    inputs, store = written
    shutil.copytree(store, tmp_path / "store")
    (dataset,) = (tmp_path / "store" / "datasets").iterdir()
    return inputs, tmp_path / "store", dataset


def _reuse(inputs, store) -> tuple[str, list[str]]:
    said = []
    return Preprocessing(_config(inputs, store)).run(say=said.append), said


def _touch(path: Path, seconds: int) -> None:
    """A modification time of its own (not the clock's: two writes within one tick would look alike)."""
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The files the verification reads (relative paths), in order."""
    seen, differs = [], inspect._differs

    def counted(fs, path, rel, *args, **kwargs):
        seen.append(rel)
        return differs(fs, path, rel, *args, **kwargs)

    monkeypatch.setattr(inspect, "_differs", counted)
    return seen


def test_a_reused_dataset_with_a_flipped_byte_is_refused_naming_the_file(written, tmp_path, reads):
    inputs, store, dataset = _copy(written, tmp_path)
    assert not (dataset / writer.VERIFIED).exists()   # a dataset is handed on as its writing run wrote it
    damaged = dataset / "train" / "cat_C3.bin"
    stat = damaged.stat()
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0x01
    damaged.write_bytes(bytes(data))
    os.utime(damaged, ns=(stat.st_atime_ns, stat.st_mtime_ns))   # as a disk's rot: same size, same time
    for _ in range(2):   # refused every time: a dataset that fails is never recorded as verified
        with pytest.raises(UserError) as e:
            _reuse(inputs, store)
        message = str(e.value)
        assert "\n" not in message
        assert message.startswith(f"dataset {dataset} does not match what was written: train/cat_C3.bin: checksum ")
        assert f"Fix: delete the folder {dataset} and run again, it is preprocessed again" in message
        assert not (dataset / writer.VERIFIED).exists()
    assert "train/cat_C3.bin" in reads


def test_an_intact_dataset_is_verified_once(written, tmp_path, reads):
    inputs, store, dataset = _copy(written, tmp_path)
    checksums = fspec.load(str(dataset)).metadata["checksums"]
    uri, said = _reuse(inputs, store)
    assert Path(uri) == dataset and sorted(reads) == sorted(checksums)
    assert any(s.startswith(f"verifying dataset {dataset} against its recorded checksums (its first use since it "
                            f"was written): {len(checksums)} of {len(checksums)} files") for s in said)
    record = json.loads((dataset / writer.VERIFIED).read_text())
    assert set(record["files"]) == set(checksums) and record["read"]["files"] == len(checksums)
    assert record["verified_at"] and record["success"] and record["spec"]
    first = (dataset / writer.VERIFIED).read_bytes()

    reads.clear()
    uri, said = _reuse(inputs, store)   # the second reuse reads no file and leaves the record as it was
    assert Path(uri) == dataset and reads == []
    assert f"dataset {dataset}: verified {record['verified_at']}, no file written since: not read again" in said
    assert (dataset / writer.VERIFIED).read_bytes() == first


def test_a_dataset_or_file_written_again_is_verified_again(written, tmp_path, reads):
    inputs, store, dataset = _copy(written, tmp_path)
    checksums = fspec.load(str(dataset)).metadata["checksums"]
    _reuse(inputs, store)
    # one file written since its verification (the same bytes, another time): that file alone is read again
    _touch(dataset / "test" / "label.bin", 1_000_000_000)
    reads.clear()
    _, said = _reuse(inputs, store)
    assert reads == ["test/label.bin"]
    assert any("(written since its verification of " in s and ": 1 of " in s for s in said)
    reads.clear()
    _reuse(inputs, store)
    assert reads == []
    # the dataset written again (another _SUCCESS; its record and files' times as they were): every file is read
    _touch(dataset / writer.SUCCESS, 1_000_000_100)
    reads.clear()
    _, said = _reuse(inputs, store)
    assert sorted(reads) == sorted(checksums) and any("(its first use since it was written)" in s for s in said)
    # a file changed since its verification: refused, though the dataset was verified before
    label = dataset / "test" / "label.bin"
    label.write_bytes(bytes(1 - b for b in label.read_bytes()))
    _touch(label, 1_000_000_200)
    with pytest.raises(UserError, match=f"^dataset {dataset} does not match what was written: test/label.bin: "):
        _reuse(inputs, store)
