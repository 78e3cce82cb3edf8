"""A folder of the store through fsspec (local path or s3://...): the paths of its files and atomic writes. The
classes that name the files of one kind of folder build on it (``training.rundir.RunDir``, ``tuning.study.TuneDir``).
"""

from __future__ import annotations

import posixpath
from typing import Any

from common.atomic import write_atomic
from common.s3 import storage_options
from common.store import filesystem


class Folder:
    """One folder by its URI; every write is atomic (readers see the old content or the new, never a part)."""

    def __init__(self, uri: "str | Folder", options: dict[str, Any] | None = None):
        if isinstance(uri, Folder):
            uri, options = uri.uri, uri.options if options is None else options
        self.uri = uri.rstrip("/")
        self.options = storage_options(uri) if options is None else options
        self.fs, self.root = filesystem(self.uri, **self.options)

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        """The folder's name (its last path segment)."""
        return self.uri.rsplit("/", 1)[-1]

    def join(self, *parts: str) -> str:
        """URI of a path inside the folder."""
        return posixpath.join(self.uri, *parts)

    def path(self, *parts: str) -> str:
        """Filesystem path (as the fsspec filesystem names it) inside the folder."""
        return posixpath.join(self.root, *parts)

    def exists(self, *parts: str) -> bool:
        return self.fs.exists(self.path(*parts))

    def read_text(self, *parts: str) -> str:
        """A file's text as it is now: another process (a rank) may have rewritten it since this one listed the
        folder, and on S3 a read through the listing's cached ETag then fails (s3fs's FileExpired)."""
        path = self.path(*parts)
        self.fs.invalidate_cache(path)
        with self.fs.open(path, "r") as f:
            return f.read()

    def write_text(self, text: str, *parts: str) -> None:
        """Write a text file atomically."""
        write_atomic(self.path(*parts), text, self.fs)

    def write_bytes(self, data: bytes, *parts: str) -> None:
        """Write a binary file atomically."""
        write_atomic(self.path(*parts), data, self.fs)
