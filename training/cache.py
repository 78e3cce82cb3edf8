"""Local copies of remote dataset files, so that every reader can memory-map them.

Local paths (and ``file://`` URIs) are used in place. Any other fsspec URI is downloaded
once into the cache folder under a name derived from the URI, its size and its version
(ETag or modification time), so a changed remote file is fetched again. Downloads go to a
temporary name and are renamed when complete: a crash never leaves a partial file that a
later run would take for a finished one.

The folder is bounded: after each download the least recently used entries are removed until it holds at most
``max_bytes`` (``data.cache_max_gib``), sparing every entry used in the last ``IN_USE_S`` seconds (a rank of a
running job may be about to open it; one already memory-mapped keeps its bytes after the unlink) and sweeping the
``.tmp-*`` leftovers of killed downloads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from common.atomic import atomic_path
from common.store import filesystem

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "dlrmflow"
IN_USE_S = 3600.0


def is_local(uri: str) -> bool:
    """True for a plain path or a ``file://`` URI."""
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    """The filesystem path of a local URI."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def local_copy(uri: str, cache_dir: str | os.PathLike | None = None, storage_options: dict | None = None,
               max_bytes: int | None = None) -> str:
    """A local path holding the bytes of ``uri``: the path itself if local, else a cached copy (the cache then
    trimmed to ``max_bytes``, see ``evict``; None: unbounded).

    Raises FileNotFoundError when the remote file does not exist.
    """
    if is_local(uri):
        return local_path(uri)
    fs, path = filesystem(uri, **(storage_options or {}))
    info = fs.info(path)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    key = hashlib.sha256(f"{uri}|{info.get('size')}|{version}".encode()).hexdigest()[:24]
    root = Path(cache_dir or DEFAULT_CACHE_DIR)
    target = root / key / Path(path).name
    if target.exists() and target.stat().st_size == info.get("size"):
        os.utime(target.parent)   # its last use, for the LRU order
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        fs.get_file(path, tmp)
    os.utime(target.parent)
    if max_bytes is not None:
        evict(root, max_bytes)
    return str(target)


def evict(root: Path, max_bytes: int, now: float | None = None) -> list[Path]:
    """Remove the least recently used entries of the cache folder ``root`` until it holds at most ``max_bytes``,
    never one used within ``IN_USE_S`` (so the bound can be exceeded by what running jobs use); first remove the
    ``.tmp-*`` files of downloads that ended (killed) over ``IN_USE_S`` ago. Returns the entries removed."""
    now = time.time() if now is None else now
    entries = []
    for entry in (p for p in root.iterdir() if p.is_dir()) if root.is_dir() else ():
        size = 0
        for f in entry.iterdir():
            st = f.stat()
            if ".tmp-" in f.name and now - st.st_mtime > IN_USE_S:
                f.unlink(missing_ok=True)
            else:
                size += st.st_size
        entries.append((entry.stat().st_mtime, size, entry))
    total, removed = sum(size for _, size, _ in entries), []
    for used, size, entry in sorted(entries):
        if total <= max_bytes:
            break
        if now - used > IN_USE_S:
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
            removed.append(entry)
    return removed
