"""A hand-made serving bundle (``training.export``'s layout without a model: the checks of ``load_bundle`` need
no torch module): ``fake_bundle(folder, files)`` writes the files and a manifest listing them, returns the sha256
of the manifest (what champion.json pins)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FILES = {"model.json": b"{}", "model.pt": b"not a module"}   # what every bundle's manifest must list


def fake_bundle(folder: Path, files: dict[str, bytes] | None = None, listed: dict[str, bytes] | None = None) -> str:
    """Write ``files`` (default ``FILES``) into ``folder`` and a manifest.json with the sha256 of each of them and of
    ``listed`` (names the manifest lists, written nowhere); returns the manifest's sha256."""
    files = FILES if files is None else files
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    entries = {**files, **(listed or {})}
    manifest = {"format": 1, "kind": "torchscript", "module": "model.pt", "source": {"run": "r", "step": 1},
                "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in entries.items()}}
    raw = (json.dumps(manifest, indent=2) + "\n").encode()
    (folder / "manifest.json").write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()
