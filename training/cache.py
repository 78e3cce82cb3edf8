"""Local copies of remote dataset files, so that every reader can memory-map them.

Local paths (and ``file://`` URIs) are used in place. Any other fsspec URI is downloaded
once into the cache folder under a name derived from the URI, its size and its version
(ETag or modification time), so a changed remote file is fetched again. Downloads go to a
temporary name and are renamed when complete: a crash never leaves a partial file that a
later run would take for a finished one.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from common.atomic import atomic_path
from common.store import filesystem

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "dlrmflow"


def is_local(uri: str) -> bool:
    """True for a plain path or a ``file://`` URI."""
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    """The filesystem path of a local URI."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def local_copy(uri: str, cache_dir: str | os.PathLike | None = None, storage_options: dict | None = None) -> str:
    """A local path holding the bytes of ``uri``: the path itself if local, else a cached copy.

    Raises FileNotFoundError when the remote file does not exist.
    """
    if is_local(uri):
        return local_path(uri)
    fs, path = filesystem(uri, **(storage_options or {}))
    info = fs.info(path)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    key = hashlib.sha256(f"{uri}|{info.get('size')}|{version}".encode()).hexdigest()[:24]
    target = Path(cache_dir or DEFAULT_CACHE_DIR) / key / Path(path).name
    if target.exists() and target.stat().st_size == info.get("size"):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        fs.get_file(path, tmp)
    return str(target)
