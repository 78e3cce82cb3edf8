"""Where preprocessing keeps its resumable intermediate parts, the only place that names them:

- ``FileParts``: the parse and the all-rows counts of one input file, ``_files/<key>/``, keyed by the
  file's identity and the settings that change them, shared by every dataset (window) that uses the file and
  kept after the dataset is written (``removable_parts`` and ``remove_parts`` remove them, as ``models.gc``
  decides; ``prune_file_parts`` does both under the store lease);
- ``WorkFolder``: one job's counts of partly counted files, vocabularies and encoded parts,
  ``_work/<dataset key>/`` (``<work_dir>/<dataset key>`` with ``--work-dir`` and a local store), deleted when
  the dataset is written;
- the preprocessing lease of a dataset key, ``_work/<dataset key>.lease`` in the store (``take_dataset_lease``):
  one job per key at a time, the second waits, then finds the finished dataset; it records the file parts the
  job uses, which a removal of parts (under the store lease) leaves alone;
- the parse lease of one input file's parts, ``_files/<key>/parse.lease`` in the store (``FileParts.parse_lease``):
  jobs of different dataset keys (two windows, two models) that need the same file parsed or counted at once
  take turns, so the second finds the first's parts instead of parsing the file again and replacing the folders
  the first is reading.

Both live under a ``Mirror``: for a local store, the store itself (or ``work_dir``); for a remote store
(s3://...), the store, so that workers on other machines share them, each worker reading and writing them
through a local cache folder (``work_dir``, else ``<temp>/dlrmflow-work``) laid out like the store.

A full disk is ``common.space.NoSpace`` (the part's path, the free space, the fix): ``FileParts.create`` refuses
before a file is parsed when the local folder of its parts has less free space than the input file's size (about
what its parsed parts take), and every write of a part (atomic: ``common.atomic``) that finds no space says so.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fsspec.implementations.local import LocalFileSystem

from common.atomic import atomic_dir, atomic_path, write_atomic, write_uri
from common.lease import Lease, LeaseHeld, acquire, holder, store_lease, wait_released
from common.space import check_free, writing
from common.store import FILES, WORK, filesystem, make_folder
from feature_spec import join_uri, path_segment

_FOLDERS = ("counts", "encoded", "vocab")
LEASE_SUFFIX = ".lease"        # _work/<dataset key>.lease: the preprocessing lease of a dataset key
DATASET_LEASE_STALE_S = 300.0  # renewed by a heartbeat every fifth of it: only a crashed job's lease expires
DATASET_LEASE_WAIT_S = 24 * 3600.0
_COMPLETE = ".complete"   # in a remote store: the marker beside a folder part, written after its files
NO_SPACE_FIX = ("free space on {mount} (`dlrmflow gc` removes parsed parts that no dataset needs), or point --work-dir "
                "(or --store) at a filesystem with room; running the same command again resumes from the parts made")


@dataclass(frozen=True)
class Mirror:
    """The root of the parts: local folder ``cache``, which is the parts' home when ``store`` is None, else a
    cache of the remote ``store``'s parts (same relative paths). A part is a file (its name has a suffix:
    ``parsed.json``, ``vocab/f.parquet``), complete once it exists, or a folder, complete once it exists
    locally (written by ``atomic_dir``) or, in the store, once its ``<folder>.complete`` marker exists."""

    cache: Path
    store: str | None = None

    @classmethod
    def locate(cls, work_dir: str | None, out: str) -> Mirror:
        """The parts' root of store ``out`` (``work_dir``: the local folder to use instead of a local store,
        or the cache of a remote one)."""
        fs, path = filesystem(out)
        if isinstance(fs, LocalFileSystem):
            return cls(Path(work_dir or path))
        return cls(Path(work_dir) if work_dir else Path(tempfile.gettempdir()) / "dlrmflow-work", out)

    def _remote(self, local: Path) -> tuple[object, str, bool]:
        fs, path = filesystem(join_uri(self.store, local.relative_to(self.cache).as_posix()))
        return fs, path, not local.suffix

    def complete(self, local: Path) -> bool:
        """Whether the part at ``local`` is complete (in the store, when remote)."""
        if self.store is None:
            return local.exists()
        fs, path, folder = self._remote(local)
        return fs.exists(path + _COMPLETE if folder else path)

    def pull(self, local: Path) -> bool:
        """Make a complete part present at ``local`` (downloaded from the store unless cached); False when the
        part is not complete."""
        if not self.complete(local):
            return False
        if self.store is None or local.exists():
            return True   # a cached part is the same: a part's key fixes its content
        fs, path, folder = self._remote(local)
        if not folder:
            with writing(local, NO_SPACE_FIX), atomic_path(local) as tmp:
                fs.get_file(path, tmp)
            return True
        with writing(local, NO_SPACE_FIX), atomic_dir(local) as tmp:
            files = [f for f in fs.find(path) if not f.endswith(_COMPLETE)]
            targets = [str(tmp / Path(f).relative_to(path)) for f in files]
            for t in targets:
                Path(t).parent.mkdir(parents=True, exist_ok=True)
            if files:
                fs.get(files, targets)
        return True

    def push(self, local: Path) -> None:
        """Upload the complete part at ``local`` to the store (a folder's marker last); nothing when local."""
        if self.store is None:
            return
        fs, path, folder = self._remote(local)
        if not folder:
            make_folder(fs, os.path.dirname(path))
            fs.put_file(str(local), path)
            return
        files = sorted(p for p in local.rglob("*") if p.is_file())
        if files:
            fs.put([str(p) for p in files], [f"{path}/{p.relative_to(local).as_posix()}" for p in files])
        write_uri(join_uri(self.store, local.relative_to(self.cache).as_posix() + _COMPLETE), "")

    def read_text(self, local: Path) -> str:
        """The text of a file of a complete part (from the cache, else the store)."""
        if self.store is None or local.exists():
            return local.read_text()
        fs, path, _ = self._remote(local)
        return fs.cat_file(path).decode()

    def uri(self, local: Path) -> str:
        """The URI in the store of the local path ``local`` (itself for a local store)."""
        return str(local) if self.store is None else join_uri(self.store, local.relative_to(self.cache).as_posix())

    def write_text(self, local: Path, text: str) -> None:
        """Write a file part (atomically) and push it."""
        with writing(local, NO_SPACE_FIX):
            write_atomic(local, text)
        self.push(local)

    def remove(self, local: Path) -> None:
        """Delete a part (a folder: its marker first) here and in the store."""
        if self.store is not None:
            fs, path, folder = self._remote(local)
            for p in ([path + _COMPLETE] if folder else []) + [path]:
                if fs.exists(p):
                    fs.rm(p, recursive=True)
        shutil.rmtree(local, ignore_errors=True) if local.is_dir() else local.unlink(missing_ok=True)


@dataclass(frozen=True)
class WorkFolder:
    """``counts/<i>`` (counts of a file only partly counted), ``encoded/<i>``, ``vocab/<f>.parquet``;
    ``<i>`` is the input file's position, six digits."""

    root: Path
    mirror: Mirror

    @classmethod
    def locate(cls, work_dir: str | None, mirror: Mirror, key: str) -> WorkFolder:
        """``<work_dir>/<key>`` for a local store with ``work_dir``, else ``_work/<key>`` under the mirror."""
        local_work_dir = work_dir and mirror.store is None
        return cls(mirror.cache / key if local_work_dir else mirror.cache / WORK / key, mirror)

    def create(self) -> None:
        for folder in _FOLDERS:
            (self.root / folder).mkdir(parents=True, exist_ok=True)

    def counts(self, i: int) -> Path:
        return self.root / "counts" / _part(i)

    def encoded(self, i: int) -> Path:
        return self.root / "encoded" / _part(i)

    def vocab(self, feature: str) -> Path:
        return self.root / "vocab" / f"{path_segment(feature)}.parquet"

    def remove(self) -> None:
        """Delete the work folder, in the store too (and the local shared ``_work`` folder once it is empty). A
        removal cut short never leaves a part that looks complete: in the store the folder parts' ``.complete``
        markers go first; a local folder is renamed away (``<key>.removed``) and then deleted."""
        if self.mirror.store is not None:
            fs, path, _ = self.mirror._remote(self.root)
            if fs.exists(path):
                markers = [f for f in fs.find(path) if f.endswith(_COMPLETE)]
                if markers:
                    fs.rm(markers)
                fs.rm(path, recursive=True)
        _delete_local(self.root)
        if self.root.parent.name == WORK and self.root.parent.exists() and not any(self.root.parent.iterdir()):
            try:
                self.root.parent.rmdir()
            except OSError:
                pass   # another job's work or lease appeared meanwhile


def dataset_lease_uri(out: str, key: str) -> str:
    """The preprocessing lease of dataset ``key`` in store ``out``: beside its work folder, always in the store."""
    return join_uri(out, WORK, key + LEASE_SUFFIX)


def take_dataset_lease(out: str, key: str, parts: list[FileParts], owner: str | None = None,
                       say: Callable[[str], None] | None = None, stale_s: float = DATASET_LEASE_STALE_S,
                       wait_s: float = DATASET_LEASE_WAIT_S) -> Lease:
    """Take the preprocessing lease of dataset ``key`` (renewed by a heartbeat), waiting while another job holds
    it (``say`` tells once what for). It is taken under the store lease, recording the file parts the job uses,
    so a prune either finishes first or sees them in use."""
    uri, of = dataset_lease_uri(out, key), f"dataset {key}"
    while True:
        wait_released(uri, "preprocessing lease", of, wait_s, say=say)
        with store_lease(out, owner, f"preprocessing {key} starts", say=say):
            try:
                return acquire(uri, owner, "preprocessing lease", of, 0, stale_s, say=say, heartbeat_s=stale_s / 5,
                               extra={"parts": sorted(p.root.name for p in parts)})
            except LeaseHeld:   # another job took it in between: wait for that one
                continue


def release_dataset_lease(held: Lease, out: str) -> None:
    """Release the lease; a local store's ``_work`` folder goes once it is empty."""
    held.release()
    fs, path = filesystem(join_uri(out, WORK))
    if isinstance(fs, LocalFileSystem):
        try:
            os.rmdir(path)
        except OSError:
            pass   # not empty (another job's work or lease), or gone


def parts_in_use(out: str) -> set[str]:
    """The keys of the file parts that running preprocessing jobs use (their live leases say)."""
    fs, path = filesystem(join_uri(out, WORK))
    used = set()
    for found in fs.glob(f"{path}/*{LEASE_SUFFIX}") if fs.exists(path) else []:
        info = holder(fs.unstrip_protocol(found) if "s3" in fs.protocol else found)
        used |= set((info or {}).get("parts", []))
    return used


_ENTRY = "entry.json"   # the input file's identity (uri, size, version) and the settings of the key
_REMOVED = ".removed"   # suffix of a parts entry's or a work folder's name while it is deleted
_PARSE_META = "parsed.json"
_PROFILE = "profile.json"
_PARSE_LEASE = "parse.lease"   # in the entry's folder: held while a job parses or counts the file


@dataclass(frozen=True)
class FileParts:
    """One input file's parts: ``entry.json`` (written first), ``parsed/`` (one Arrow IPC file per block),
    ``counts/`` (counts of all the file's rows), ``profile.json`` (what the data gate compares, ``profile``),
    ``parsed.json`` (the parse's meta, written last)."""

    root: Path
    mirror: Mirror

    @classmethod
    def locate(cls, mirror: Mirror, key: str) -> FileParts:
        return cls(mirror.cache / FILES / key, mirror)

    def create(self, identity: dict) -> None:
        """Make the folder and record the file's identity (once); NoSpace when the local folder of the parts has
        less free space than the input file's ``size`` (the identity's; about what its parsed parts take)."""
        check_free(self.root, int(identity.get("size") or 0), f"the parsed parts of {identity.get('uri')}",
                   "about the input file's size", NO_SPACE_FIX)
        if not self.mirror.complete(self.root / _ENTRY):
            self.mirror.write_text(self.root / _ENTRY, json.dumps(identity, sort_keys=True))

    def parse_lease(self, uri: str, owner: str | None = None, say: Callable[[str], None] | None = None,
                    stale_s: float = DATASET_LEASE_STALE_S, wait_s: float = DATASET_LEASE_WAIT_S) -> Lease:
        """Take the parse lease of these parts (of input file ``uri``; renewed by a heartbeat), waiting while
        another job holds it: one job at a time writes them. Release it with ``Lease.release()``."""
        return acquire(self.mirror.uri(self.root / _PARSE_LEASE), owner, "parse lease", f"input file {uri}", wait_s,
                       stale_s, say=say, heartbeat_s=stale_s / 5)

    @property
    def parsed(self) -> Path:
        return self.root / "parsed"

    @property
    def parse_meta(self) -> Path:
        return self.root / _PARSE_META

    @property
    def counts(self) -> Path:
        return self.root / "counts"

    @property
    def profile(self) -> Path:
        return self.root / _PROFILE


def _entries(mirror: Mirror) -> list[tuple[Path, dict]]:
    """(local folder, entry) of every input file's parts (in the store, when remote)."""
    folder = mirror.cache / FILES
    if mirror.store is not None:
        fs, path, _ = mirror._remote(folder)
        found = sorted(fs.glob(f"{path}/*/{_ENTRY}"))
        entries = []
        for entry in found:
            try:
                entries.append((folder / entry.split("/")[-2], json.loads(fs.cat_file(entry))))
            except (OSError, ValueError):
                continue   # removed meanwhile, or not ours
        return entries
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
    return sorted({meta["uri"] for _, meta in _entries(Mirror.locate(work_dir, out))})


def prune_file_parts(out: str, remove: Callable[[str], bool], work_dir: str | None = None, owner: str | None = None,
                     say: Callable[[str], None] | None = None) -> list[str]:
    """Delete the per-file parts of every input URI for which ``remove(uri)`` is true (all its versions and
    settings) unless a running preprocessing job uses them (its lease records them); returns the URIs removed,
    sorted. Runs under the store lease, so no job starts using parts meanwhile."""
    with store_lease(out, owner, "prune of parsed parts", say=say):
        parts = removable_parts(out, remove, work_dir, say)
        remove_parts(out, parts, work_dir)
        return sorted({p.uri for p in parts})


@dataclass(frozen=True)
class StoredParts:
    """One entry of ``_files/``: the parts of the input file ``uri`` (one version of it, one set of settings)."""

    key: str     # the entry's folder name
    uri: str     # the input file
    where: str   # the entry's folder: a local path, or its URI in a remote store
    bytes: int


def removable_parts(out: str, remove: Callable[[str], bool], work_dir: str | None = None,
                    say: Callable[[str], None] | None = None) -> list[StoredParts]:
    """The stored parts (with their sizes) of every input URI for which ``remove(uri)`` is true, less those a
    running preprocessing job uses (its lease records them; ``say`` names each). Call it, and ``remove_parts``
    after it, under the store lease (``common.lease.store_lease``): no job starts using parts meanwhile."""
    mirror, say = Mirror.locate(work_dir, out), say or (lambda _: None)
    found, in_use = [], parts_in_use(out)
    for folder, meta in _entries(mirror):
        if not remove(meta["uri"]):
            continue
        if folder.name in in_use:
            say(f"kept the parsed parts of {meta['uri']}: a running preprocessing job uses them")
            continue
        if mirror.store is not None:
            fs, path, _ = mirror._remote(folder)
            found.append(StoredParts(folder.name, meta["uri"], fs.unstrip_protocol(path), int(fs.du(path))))
        else:
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            found.append(StoredParts(folder.name, meta["uri"], str(folder), size))
    return found


def remove_parts(out: str, parts: list[StoredParts], work_dir: str | None = None) -> None:
    """Delete ``parts`` (``removable_parts``' answer) so that a removal cut short never leaves an entry that is
    found (or used) again: in a remote store its markers first, a local entry renamed away first. Also deletes
    what an interrupted removal left."""
    mirror = Mirror.locate(work_dir, out)
    for p in parts:
        folder = mirror.cache / FILES / p.key
        if mirror.store is not None:
            for part in (folder / _ENTRY, folder / _PARSE_META, folder / "parsed", folder / "counts",
                         folder / _PROFILE, folder):
                mirror.remove(part)
        elif folder.exists():
            _delete_local(folder)
    for trash in (mirror.cache / FILES).glob(f"*{_REMOVED}"):
        shutil.rmtree(trash, ignore_errors=True)   # left by an interrupted removal


def remove_work(out: str, key: str, work_dir: str | None = None) -> None:
    """Delete the work folder ``_work/<key>`` of the store ``out`` (that of an abandoned or finished job), and a
    remote store's local copy of it (under ``work_dir``); see ``WorkFolder.remove``."""
    mirror = Mirror.locate(work_dir, out)
    if mirror.store is None:   # a local store's own _work (a job given --work-dir keeps its folder elsewhere)
        WorkFolder(Path(filesystem(out)[1]) / WORK / key, mirror).remove()
    else:
        WorkFolder(mirror.cache / WORK / key, mirror).remove()


def is_removed(name: str) -> bool:
    """Whether an entry name under ``_files/`` or ``_work/`` is one being deleted (renamed away by a removal)."""
    return name.endswith(_REMOVED)


def _delete_local(folder: Path) -> None:
    """Rename ``folder`` away (``<name>.removed``), then delete it: cut short, it leaves no folder by its name."""
    trash = folder.with_name(folder.name + _REMOVED)
    shutil.rmtree(trash, ignore_errors=True)
    try:
        folder.rename(trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _part(i: int) -> str:
    return f"{i:06d}"
