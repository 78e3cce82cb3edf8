"""Atomic writes through fsspec: a reader sees the old content or the new one, never a part.

On a local (or any renaming) filesystem the data goes to ``<path>.tmp-<pid>`` first and is then
renamed over ``path``. On an object store (s3://, memory://) an object becomes visible only when its
upload is committed, so ``atomic_open`` writes it in place with the commit deferred: the upload is
committed when the block completes and discarded (a multipart upload aborted) when it raises, so a failed
write publishes nothing. On S3 a file smaller than the filesystem's block size (s3fs: 50 MiB) is one PUT when
the block completes (a PUT is atomic too: the object appears whole or not at all; a failed block sends nothing),
a larger one streams in parts of a multipart upload, completed when the block completes. S3 has no folders:
nothing is made before a write there (``common.store.make_folder``: no request for the bucket either).
A copy-then-delete "rename" there would only double the traffic. This is the only place in the project that
spells temp-then-rename.

A full disk (ENOSPC, EDQUOT) in any of these writes is ``common.space.NoSpace``: the path written, the free space
left once the partial file is removed, and the fix.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from fsspec.implementations.local import LocalFileSystem

from common.space import writing
from common.store import filesystem, make_folder

_LOCAL = LocalFileSystem()


def _renames(fs) -> bool:
    return isinstance(fs, LocalFileSystem)


@contextmanager
def atomic_path(path: str | os.PathLike, fs=None) -> Iterator[str]:
    """Yield the path to write instead of ``path`` (a temporary sibling where the filesystem renames);
    when the block completes it becomes ``path``. A failed block leaves ``path`` as it was. On an object store
    it yields ``path`` itself: write there through ``atomic_open``, which discards a failed upload."""
    fs = fs or _LOCAL
    path = str(path)
    with writing(path if _renames(fs) else fs.unstrip_protocol(path)):
        make_folder(fs, posixpath.dirname(path))
        if not _renames(fs):
            yield path
            return
        tmp = temp_name(path)
        try:
            yield tmp
        except BaseException:
            if fs.exists(tmp):
                fs.rm(tmp, recursive=True)
            raise
        os.replace(tmp, path)


def temp_name(path: str | os.PathLike, pid: int | None = None) -> str:
    """The temporary sibling that process ``pid`` (default: this one) writes ``path`` in (``atomic_path``,
    ``atomic_dir``) before renaming it into place."""
    return f"{os.fspath(path)}.tmp-{os.getpid() if pid is None else pid}"


def remove_temp(path: str | os.PathLike, pid: int) -> bool:
    """Remove what process ``pid`` left of an atomic write of the local ``path`` when it died in it (killed, or
    crashed: no ``except`` of its own ran); True when there was something. ``path`` itself is never touched."""
    tmp = Path(temp_name(path, pid))
    if tmp.is_dir() and not tmp.is_symlink():
        shutil.rmtree(tmp, ignore_errors=True)
        return True
    if tmp.exists() or tmp.is_symlink():
        tmp.unlink(missing_ok=True)
        return True
    return False


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", fs=None):
    """``open`` for writing bytes that commits only when the block completes (see the module doc)."""
    fs = fs or _LOCAL
    if _renames(fs):
        with atomic_path(path, fs) as target, fs.open(target, mode) as f:
            yield f
        return
    if "b" not in mode:
        raise ValueError(f"atomic_open writes bytes on an object store, not mode {mode!r}")
    path = str(path)
    with writing(fs.unstrip_protocol(path)):
        make_folder(fs, posixpath.dirname(path))
        # _open, not open: open would also enlist the file in the filesystem's one shared transaction
        f = fs._open(fs._strip_protocol(path), mode, autocommit=False)
        if "s3" in fs.protocol:
            _one_put_when_small(f)
        try:
            with f:   # closing uploads the rest, still uncommitted
                yield f
        except BaseException:
            with suppress(Exception):   # the write's own error is the one to report; an aborted upload stays invisible
                f.discard()
            raise
        f.commit()


def _one_put_when_small(f) -> None:
    """Make the uncommitted s3fs file ``f`` send nothing on close while it holds less than a block: its ``commit``
    then PUTs the buffer as one object (an empty file as an empty one), and a ``discard`` has nothing to abort. A
    file that outgrew a block has started its multipart upload: it uploads the rest on close, as before."""
    flush = f.flush

    def deferred(force=False):
        if force and f.offset is None:   # the close of a file that never filled a block: commit() PUTs it whole
            f.forced = True
            return
        flush(force)

    f.flush = deferred


def write_atomic(path: str | os.PathLike, data: bytes | str, fs=None) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically."""
    with atomic_open(path, "wb", fs) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def write_uri(uri: str, data: bytes | str, **storage_options) -> None:
    """``write_atomic`` for a URI (local path, file://, s3://, ...; options: ``common.store.filesystem``'s)."""
    fs, path = filesystem(uri, **storage_options)
    write_atomic(path, data, fs)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a fresh local temporary folder that replaces ``path`` only if the block completes."""
    path = Path(path)
    tmp = Path(temp_name(path))
    with writing(path):
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)


COMPLETE = ".complete"   # a file's completion marker: <file>.complete, written after the file


def mark_complete(path: str, fs, **info) -> None:
    """Write ``<path>.complete``: ``info`` and the size of ``path`` (JSON), once ``path`` is whole."""
    write_atomic(path + COMPLETE, json.dumps({**info, "bytes": fs.size(path)}), fs)


def unmark(path: str, fs) -> None:
    """Remove the completion marker of ``path`` (before ``path`` is written again)."""
    if fs.exists(path + COMPLETE):
        fs.rm_file(path + COMPLETE)


def completed(path: str, fs) -> dict | None:
    """The completion marker of ``path`` when it is there and matches the file's size, else None."""
    try:
        with fs.open(path + COMPLETE, "rb") as f:
            marker = json.loads(f.read())
        size = fs.size(path)
    except FileNotFoundError:
        return None
    return marker if marker.get("bytes") == size else None
