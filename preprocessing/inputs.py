"""Input discovery: files, folders and globs (local or remote, through fsspec) with their identities."""

from __future__ import annotations

import os
import re

from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel

from common.store import filesystem

from .errors import InputError

_SPLIT_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)=(.+)$")


class InputFile(BaseModel):
    """One input file: its URI, the split it is mapped to (if any) and its identity for the fingerprint."""

    uri: str
    split: str | None = None
    size: int
    version: str    # local: mtime, inode and ctime; remote: ETag (else mtime)

    @property
    def identity(self) -> str:
        """What tells this file's bytes from a rewrite's: its size and version (a verdict on a day is keyed by it)."""
        return f"{self.size}:{self.version}"


def split_mapping(item: str) -> tuple[str | None, str]:
    """'test=PATH' -> ('test', PATH); a plain path (or an existing path containing '=') -> (None, path)."""
    m = _SPLIT_PREFIX.match(item)
    if m and not os.path.exists(item):
        return m.group(1), m.group(2)
    return None, item


def expand(items: list[str]) -> list[InputFile]:
    """Every input file, in command-line order (each folder or glob sorted by name)."""
    files: list[InputFile] = []
    for item in items:
        split, target = split_mapping(item)
        files += [InputFile(uri=u, split=split, size=s, version=v) for u, s, v in _list(target)]
    seen = set()
    for f in files:
        if f.uri in seen:
            raise InputError(f"input '{f.uri}' is given twice. Fix: name each input file once.")
        seen.add(f.uri)
    return files


def _list(target: str) -> list[tuple[str, int, str]]:
    try:
        fs, path = filesystem(target)
        if any(ch in path for ch in "*?["):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            paths = sorted(p for p in fs.find(path) if not os.path.basename(p).startswith(("_", ".")))
        else:
            paths = [path]
        infos = [fs.info(p) for p in paths]
    except FileNotFoundError:
        raise InputError(f"input '{target}' does not exist. Fix: check the path or URI.") from None
    except (OSError, ValueError, ImportError) as e:
        raise InputError(f"input '{target}' cannot be read: {e}. Fix: check the URI, the endpoint "
                         "(AWS_ENDPOINT_URL) and the credentials (AWS_* environment variables).") from None
    if not infos:
        raise InputError(f"input '{target}' matches no files. Fix: check the folder or glob.")
    out = []
    for p, info in zip(paths, infos):
        version = _local_version(p) if isinstance(fs, LocalFileSystem) else \
            info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
        out.append((fs.unstrip_protocol(p) if "://" in target else p, int(info.get("size") or 0), str(version).strip('"')))
    return out


def _local_version(path: str) -> str:
    """A local file's version: its mtime, inode and ctime (ns). A file rewritten in place keeps its size and can be
    given back its mtime (``cp -p``, ``touch -d``, ``rsync -t``), but not its ctime, which the kernel sets on every
    change; a file replaced by another (``mv``) has another inode. So two parses of one identity read one content."""
    st = os.stat(path)
    return f"mtime={st.st_mtime_ns};ino={st.st_ino};ctime={st.st_ctime_ns}"


def file_type(uri: str) -> str:
    """Input type from the file name: parquet, csv or tsv (also .txt and compressed forms)."""
    name = re.sub(r"\.(gz|bz2|xz|zst|zstd)$", "", uri.lower())
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(".csv"):
        return "csv"
    return "tsv"
