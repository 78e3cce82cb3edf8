"""Where preprocessing keeps its resumable intermediate parts, the only place that names them:

- ``FileParts``: the parse and the all-rows counts of one input file, ``<root>/_files/<key>/``, keyed by the
  file's identity and the settings that change them, shared by every dataset (window) that uses the file and
  kept after the dataset is written (``prune_file_parts`` removes them);
- ``WorkFolder``: one job's counts of partly counted files, vocabularies and encoded parts,
  ``<root>/_work/<dataset key>/`` (``<work_dir>/<dataset key>`` with ``--work-dir``), deleted when the dataset
  is written.

``<root>`` is ``locate_root``'s: the local store, else ``work_dir``, else the system temp folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import fsspec
from fsspec.implementations.local import LocalFileSystem

from common.atomic import write_atomic

_FOLDERS = ("counts", "encoded", "vocab")
_SHARED = "_work"   # the folder under a local store that holds every job's work folder
_FILES = "_files"   # the folder under the root that holds every input file's parts


def locate_root(work_dir: str | None, out: str) -> tuple[Path, bool]:
    """The local folder holding the work of a store, and whether it is the store itself (else a scratch folder:
    ``work_dir`` or ``<temp>/dlrmflow-work``)."""
    if work_dir:
        return Path(work_dir), False
    fs, path = fsspec.core.url_to_fs(out)
    if isinstance(fs, LocalFileSystem):
        return Path(path), True
    return Path(tempfile.gettempdir()) / "dlrmflow-work", False


@dataclass(frozen=True)
class WorkFolder:
    """``counts/<i>`` (counts of a file only partly counted), ``encoded/<i>``, ``vocab/<f>.parquet``;
    ``<i>`` is the input file's position, six digits."""

    root: Path

    @classmethod
    def locate(cls, work_dir: str | None, out: str, key: str) -> WorkFolder:
        """``<work_dir>/<key>``; by default ``<out>/_work/<key>`` for a local store, else under the temp folder."""
        root, is_store = locate_root(work_dir, out)
        return cls(root / _SHARED / key if is_store else root / key)

    def create(self) -> None:
        for folder in _FOLDERS:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def counts(self, i: int) -> Path:
        return self.root / "counts" / _part(i)

    def encoded(self, i: int) -> Path:
        return self.root / "encoded" / _part(i)

    def vocab(self, feature: str) -> Path:
        return self.root / "vocab" / f"{feature}.parquet"

    def remove(self) -> None:
        """Delete the work folder (and the shared ``_work`` folder once it is empty)."""
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.parent.name == _SHARED and not any(self.root.parent.iterdir()):
            self.root.parent.rmdir()


_ENTRY = "entry.json"   # the input file's identity (uri, size, version) and the settings of the key
_REMOVED = ".removed"   # suffix of an entry's folder while prune deletes it


@dataclass(frozen=True)
class FileParts:
    """One input file's parts: ``entry.json`` (written first), ``parsed/`` (one Arrow IPC file per block),
    ``parsed.json`` (the parse's meta, written last), ``counts/`` (counts of all the file's rows)."""

    root: Path

    @classmethod
    def locate(cls, work_dir: str | None, out: str, key: str) -> FileParts:
        return cls(locate_root(work_dir, out)[0] / _FILES / key)

    def create(self, identity: dict) -> None:
        """Make the folder and record the file's identity (once)."""
        if not (self.root / _ENTRY).exists():
            write_atomic(self.root / _ENTRY, json.dumps(identity, sort_keys=True))

    @property
    def parsed(self) -> Path:
        return self.root / "parsed"

    @property
    def parse_meta(self) -> Path:
        return self.root / "parsed.json"

    @property
    def counts(self) -> Path:
        return self.root / "counts"


def _entries(work_dir: str | None, out: str) -> list[tuple[Path, dict]]:
    folder = locate_root(work_dir, out)[0] / _FILES
    entries = []
    for entry in sorted(folder.glob(f"*/{_ENTRY}")):
        if "." in entry.parent.name:
            continue   # a removed entry's folder, still being deleted
        try:
            entries.append((entry.parent, json.loads(entry.read_text())))
        except (OSError, ValueError):
            continue   # removed meanwhile, or not ours
    return entries


def file_parts(out: str, work_dir: str | None = None) -> list[str]:
    """The input URIs that have stored per-file parts under store ``out`` (sorted, each once)."""
    return sorted({meta["uri"] for _, meta in _entries(work_dir, out)})


def prune_file_parts(out: str, remove: Callable[[str], bool], work_dir: str | None = None) -> list[str]:
    """Delete the per-file parts of every input URI for which ``remove(uri)`` is true (all its versions and
    settings); returns those URIs, sorted. Call it only when no preprocessing that may use them is running."""
    removed = set()
    for folder, meta in _entries(work_dir, out):
        if remove(meta["uri"]):
            trash = folder.with_name(folder.name + _REMOVED)
            shutil.rmtree(trash, ignore_errors=True)
            folder.rename(trash)   # first: a half-deleted entry is never found (nor used) again
            shutil.rmtree(trash, ignore_errors=True)
            removed.add(meta["uri"])
    for trash in (locate_root(work_dir, out)[0] / _FILES).glob(f"*{_REMOVED}"):
        shutil.rmtree(trash, ignore_errors=True)   # left by an interrupted prune
    return sorted(removed)


def _part(i: int) -> str:
    return f"{i:06d}"
