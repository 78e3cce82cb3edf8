"""The work folder of one preprocessing job: the only place that names its resumable intermediate parts."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

_FOLDERS = ("parsed", "counts", "encoded", "vocab")
_SHARED = "_work"   # the folder under a local store that holds every job's work folder


@dataclass(frozen=True)
class WorkFolder:
    """``parsed/<i>.arrow`` (one IPC file per block), ``parsed/<i>.json`` (the parse's meta),
    ``parsed/<i>.counts`` (counts made by the parse), ``counts/<i>``, ``encoded/<i>``, ``vocab/<f>.parquet``;
    ``<i>`` is the input file's position, six digits."""

    root: Path

    @classmethod
    def locate(cls, work_dir: str | None, out: str, key: str) -> WorkFolder:
        """``<work_dir>/<key>``; by default ``<out>/_work/<key>`` for a local store, else under the temp folder."""
        if work_dir:
            return cls(Path(work_dir) / key)
        fs, path = fsspec.core.url_to_fs(out)
        if isinstance(fs, LocalFileSystem):
            return cls(Path(path) / _SHARED / key)
        return cls(Path(tempfile.gettempdir()) / "dlrmflow-work" / key)

    def create(self) -> None:
        for folder in _FOLDERS:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def parsed(self, i: int) -> Path:
        return self.root / "parsed" / f"{_part(i)}.arrow"

    def parse_meta(self, i: int) -> Path:
        return self.root / "parsed" / f"{_part(i)}.json"

    def parse_counts(self, i: int) -> Path:
        return self.root / "parsed" / f"{_part(i)}.counts"

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


def _part(i: int) -> str:
    return f"{i:06d}"
