"""Readers: local files are cut into blocks of whole lines, each byte read once, at any block size (an empty file
into none)."""

from __future__ import annotations

import pytest

from preprocessing import readers


@pytest.mark.parametrize("size", [1, 5, 17, 100, 1 << 20])
@pytest.mark.parametrize("tail", [b"", b"no newline at the end"])
@pytest.mark.parametrize("maps", [True, False])   # False: a file system that maps no files
def test_local_blocks_are_whole_lines(tmp_path, monkeypatch, size, tail, maps):
    if not maps:
        monkeypatch.setattr(readers.mmap, "mmap", _refuse)
    data = b"".join(b"x" * (i * 7 % 50) + b"\t%d\n" % i for i in range(300)) + tail
    path = tmp_path / "f.tsv"
    path.write_bytes(data)
    blocks = [bytes(b) for b in readers._local_blocks(str(path), size)]
    assert all(b.endswith(b"\n") for b in blocks)
    assert b"".join(blocks) == data + (b"\n" if tail else b"")
    if maps and size >= 100:   # (the stream reader's blocks carry the last one's rest: up to twice the size)
        assert all(len(b) <= size for b in blocks[:-1] if b.count(b"\n") > 1)


def _refuse(*args, **kwargs):
    raise OSError(19, "No such device")


def test_an_empty_local_file_has_no_blocks(tmp_path):
    (tmp_path / "empty.tsv").write_bytes(b"")
    assert list(readers._local_blocks(str(tmp_path / "empty.tsv"), 100)) == []


def test_local_path_only_for_plain_local_files(tmp_path):
    (tmp_path / "a.tsv").write_text("1\n")
    (tmp_path / "a.tsv.gz").write_bytes(b"")
    assert readers._local_path(str(tmp_path / "a.tsv")) == str(tmp_path / "a.tsv")
    assert readers._local_path("file://" + str(tmp_path / "a.tsv")) == str(tmp_path / "a.tsv")
    assert readers._local_path(str(tmp_path / "a.tsv.gz")) is None
    assert readers._local_path("s3://bucket/a.tsv") is None
    assert readers._local_path(str(tmp_path / "missing.tsv")) is None
