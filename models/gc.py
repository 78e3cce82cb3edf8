"""The store's clean-up, the one owner of what is removed from a store: `dlrmflow gc`, and the pipeline after each
dated night's decision (``collect``; ``removals`` is what it would remove). Local folders and s3:// alike.

Kept (the live set), for every model under ``models/``:

- its champion's run and dataset (and so its vocabularies); ``models/`` is never touched but for stale ``.tmp-*``
  leftovers: the registry keeps each model's bundles (the champion's and the one before it, ``models.registry``);
- the runs its last ``keep_nights`` decided history lines name (the night's run and the champion it met) and
  their datasets, and the dataset of a night that failed its data checks until it is older than those nights;
- what a live lease covers: a run under its run lease (a training or an evaluation), a dataset key under its
  preprocessing lease (its dataset, its work folder and the parsed parts the lease records);
- the parsed parts of every day a model's next window reads, less ``retain_days`` (``parts_cutoff``);
- a run, dataset or work folder that no history line names, for ``keep_nights`` days after its last write (a manual
  run, a night that failed before its decision, a dataset about to be trained on).

Removed: the runs that only older history lines name, and runs no model names that were not written for
``keep_nights`` days; datasets only removed runs use, and those no run uses after ``keep_nights`` days; the parsed
parts of days before every window (of the dated ``inputs`` templates; none without them); ``_work/<key>/``
folders of a finished dataset or of a job abandoned that long ago; ``.tmp-*`` leftovers of killed writes anywhere
in the store after ``TMP_GRACE_S``; what an interrupted gc left in ``_trash/``. Raw inputs (``synthetic/``
included) are never removed.

Safety: a removal runs under the store lease (``common.lease.store_lease``: no preprocessing job starts meanwhile);
a run is removed under its own run lease (one taken since gc listed the run keeps it, and its dataset); a folder's
completion markers go first (a dataset's ``_SUCCESS``; a run's ``_SUCCESS``, evaluations and checkpoint markers:
``RunDir.is_marker``) and a local folder is then renamed into ``_trash/`` and deleted there, so a gc cut short
never leaves something that looks complete; the next gc finishes it. An unreadable champion or history stops the
gc before it removes anything (what that model needs is unknown).

The records name places of the store as the registry reads them (``models.registry``: store-relative, or absolute
URIs of a store that moved since, found where they are now), and a run's dataset as its config says it, a dataset
of the store before it moved found in the store now (``common.store.Store.resolve``): a store restored at another
path keeps what its champion and its recent nights need.
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import yaml
from fsspec.implementations.local import LocalFileSystem

from common.config import load_yaml
from common.errors import UserError
from common.lease import LeaseHeld, holder, store_lease
from common.store import DATASETS, FILES, RUNS, TRASH, WORK, Store, filesystem
from models import registry
from models.config import GcConfig
from preprocessing.dated import day_of
from preprocessing import work
from preprocessing.writer import SUCCESS
from training import RunDir

TMP_GRACE_S = 3600.0   # a `.tmp-*` file or folder not written for this long was left by a killed write
TMP = ".tmp-"          # common.atomic's temporary names: <path>.tmp-<pid>
DAY_S = 86400.0


@dataclass(frozen=True)
class Night:
    """The dated night that runs gc in the pipeline: its model (None: a dated run without one) and the first day
    the model's next window reads (its config decides that, not its recorded history)."""

    model: str | None
    next_window: dt.date


@dataclass(frozen=True)
class Removal:
    """One thing gc removes (or, in a dry run, would remove)."""

    kind: str     # run, dataset, parts, work, tmp, trash
    uri: str
    bytes: int
    reason: str


@dataclass
class Report:
    """What a gc removed (a dry run: would remove), in the order it did."""

    store: str
    dry_run: bool
    removals: list[Removal] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)

    def table(self) -> str:
        """The removals as a text table with the total, one line per removal."""
        if not self.removals:
            return f"gc of {self.store}: nothing to remove"
        rows = [("kind", "what", "size", "why")]
        rows += [(r.kind, _relative(self.store, r.uri), human_bytes(r.bytes), r.reason) for r in self.removals]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row[:3], widths)), row[3]]).rstrip() for row in rows]
        verb, freed = ("would remove", "would be freed") if self.dry_run else ("removed", "freed")
        lines.append(f"gc of {self.store}: {verb} {len(self.removals)} item(s), {human_bytes(self.bytes)} {freed}")
        return "\n".join(lines)

    def rows(self) -> list[dict]:
        """The removals as table rows (a Prefect table artifact)."""
        return [{"kind": r.kind, "what": _relative(self.store, r.uri), "bytes": r.bytes, "size": human_bytes(r.bytes),
                 "why": r.reason} for r in self.removals]


def human_bytes(n: int) -> str:
    """``n`` bytes as B, KiB, MiB, GiB or TiB with one decimal."""
    size, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"


def collect(config: GcConfig, night: Night | None = None, work_dir: str | None = None, owner: str | None = None,
            say: Callable[[str], None] | None = None, now: float | None = None) -> Report:
    """Remove what no champion, retained history line, live lease or window needs from ``config.store`` (the
    module doc), under the store lease; with ``config.dry_run`` only list it (without the lease). ``night``: the
    pipeline's dated night; ``work_dir``: the preprocessing's (the parsed parts' local folder, or a remote store's
    local cache of them). Returns what was removed, in order."""
    say = say or (lambda _: None)
    store = _open(config)
    if config.dry_run:
        items = _removals(config, store, night, work_dir, say, now)
        return Report(store.uri, True, [item.removal for item in items])
    with store_lease(store.uri, owner or f"gc of {store.uri}", "gc", say=say):
        items = _removals(config, store, night, work_dir, say, now)
        report = Report(store.uri, False)
        for item in items:
            if item.remove():
                report.removals.append(item.removal)
        _drop_empty(store, TRASH)
    return report


def removals(config: GcConfig, night: Night | None = None, work_dir: str | None = None,
             say: Callable[[str], None] | None = None, now: float | None = None) -> list[Removal]:
    """What ``collect`` would remove now, in its order (nothing is removed)."""
    return collect(config.model_copy(update={"dry_run": True}), night, work_dir, say=say, now=now).removals


def parts_cutoff(store: str, retain_days: int, night: Night | None = None,
                 say: Callable[[str], None] | None = None) -> dt.date | None:
    """The first day whose parsed parts are kept: the oldest first day of every model's next window (the night's
    model: from ``night``; every other model: from its latest recorded window, ``registry.windows_in_use``), less
    ``retain_days``; None when no window is known (then no parts are removed). An unreadable history: UserError."""
    say = say or (lambda _: None)
    retain = dt.timedelta(days=retain_days)
    cutoff = night.next_window - retain if night else None
    for name, first in sorted(registry.windows_in_use(store).items()):
        if night is not None and name == night.model:
            continue
        day = dt.date.fromisoformat(first) - retain
        if cutoff is None or day < cutoff:
            cutoff = day
            say(f"model {name}'s window reads from {first}: keeping the parsed parts from {cutoff}")
    return cutoff


# --- what goes ---------------------------------------------------------------------------------------------------

@dataclass
class _Item:
    removal: Removal
    remove: Callable[[], bool]   # does it; False when it was left after all (in use since gc listed it)


@dataclass
class _Entry:
    """A file or folder of the store with what the listing says of everything under it."""

    path: str
    bytes: int = 0
    newest: float = 0.0   # modification time of the newest thing in it (0: unknown)
    files: list[str] = field(default_factory=list)   # relative paths of its files
    folder: bool = False

    def add(self, rel: str, info: dict) -> None:
        if info.get("type") != "directory":
            self.bytes += int(info.get("size") or 0)
            if rel:
                self.files.append(rel)
        self.folder = self.folder or bool(rel) or info.get("type") == "directory"
        self.newest = max(self.newest, _mtime(info))


def _mtime(info: dict) -> float:
    value = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return float(value) if value else 0.0


def _open(config: GcConfig) -> Store:
    store = Store(config.store)
    if store.is_s3 and not config.dry_run:
        store.check()   # a missing bucket or credentials: one clear error (it writes and removes a probe)
    fs, root = filesystem(store.uri)
    try:
        there = fs.exists(root)
    except (OSError, ValueError) as e:
        raise UserError(f"store '{store.uri}' cannot be read: {e}. Fix: check --store (and for s3://, "
                        "AWS_ENDPOINT_URL and the credentials).") from None
    if not there:
        raise UserError(f"store '{store.uri}' does not exist, so there is nothing to clean. Fix: check --store.")
    return store


def _listing(store: Store) -> tuple[dict[str, dict[str, _Entry]], dict[str, str]]:
    """Every top-level folder's entries (``runs`` -> run name -> entry, ...) and under ``TMP`` every ``.tmp-*``
    leftover (its path relative to the store -> entry), from one recursive listing of the store; and the symbolic
    links met (relative path -> where it points), left out of both: gc never follows one (it may leave the store),
    nor removes it (a link of a top-level folder or of a run, dataset... is said: ``_links``), and a folder that
    holds one goes by rename and a tree removal that deletes the link, not what it points to."""
    fs, root = filesystem(store.uri)
    root = root.rstrip("/")
    try:
        found = fs.find(root, withdirs=True, detail=True)
    except (OSError, ValueError) as e:
        raise UserError(f"store '{store.uri}' cannot be listed: {e}. Fix: check --store and its permissions.") from None
    tops: dict[str, dict[str, _Entry]] = {}
    links: dict[str, str] = {}
    for path, info in sorted(found.items()):
        rel = path[len(root):].strip("/")
        parts = rel.split("/")
        if not rel:
            continue
        if info.get("islink") or any(rel.startswith(link + "/") for link in links):
            links.setdefault(rel, str(info.get("destination") or "?"))
            continue
        if len(parts) >= 2:
            entry = tops.setdefault(parts[0], {}).setdefault(parts[1], _Entry(f"{root}/{parts[0]}/{parts[1]}"))
            entry.add("/".join(parts[2:]), info)
        elif info.get("type") == "directory":
            tops.setdefault(parts[0], {})
        tmp = next((i for i, p in enumerate(parts) if TMP in p), None)
        if tmp is not None:
            key = "/".join(parts[:tmp + 1])
            tops.setdefault(TMP, {}).setdefault(key, _Entry(f"{root}/{key}")).add("/".join(parts[tmp + 1:]), info)
    return tops, links


def _links(links: dict[str, str], say: Callable[[str], None]) -> None:
    """Say which top-level folders and things of the store are symbolic links, which gc skips; a link in place of
    ``_trash/`` stops it (a removal would move things through it)."""
    if TRASH in links:
        raise UserError(f"the store's {TRASH}/ is a symbolic link (to {links[TRASH]}), where gc would move what it "
                        f"removes. Nothing was removed. Fix: remove the link {TRASH}.")
    for rel, where in sorted(links.items()):
        if rel.count("/") <= 1 and not any(rel.startswith(other + "/") for other in links):
            say(f"skipped {rel}: a symbolic link (to {where}); gc follows no link, nor removes one. Fix: remove "
                "the link if it is not needed, or move what it points to into the store.")


def _removals(config: GcConfig, store: Store, night: Night | None, work_dir: str | None,
              say: Callable[[str], None], now: float | None) -> list[_Item]:
    """What gc removes now, in the order it removes it: what an interrupted removal left, the runs, the datasets,
    the work folders, the parsed parts and the ``.tmp-*`` leftovers (the module doc says what each keeps)."""
    now = time.time() if now is None else now
    fs, root = filesystem(store.uri)
    local = isinstance(fs, LocalFileSystem)
    keep_runs, keep_datasets, retired, retired_datasets = _named(store, config.keep_nights)
    listing, links = _listing(store)
    _links(links, say)
    scan = _Scan(store, fs, root.rstrip("/"), local, listing, now, now - config.keep_nights * DAY_S,
                 config.keep_nights, say)
    items = _interrupted(scan)
    runs = _retired_runs(scan, keep_runs, retired)
    items += runs.items
    datasets = _unused_datasets(scan, runs, keep_datasets, retired_datasets)
    items += datasets
    items += _spent_work(scan, {posixpath.basename(i.removal.uri) for i in datasets}, work_dir)
    items += _old_parts(config, store, night, work_dir, say)
    items += _stale_tmp(scan, [i.removal.uri for i in items])
    return items


@dataclass(frozen=True)
class _Scan:
    """The store as this gc found it: its listing (``_listing``), where it lies, and what is old."""

    store: Store
    fs: object
    root: str
    local: bool
    listing: dict[str, dict[str, _Entry]]
    now: float
    old: float          # last written before this: not for keep_nights days
    keep_nights: int
    say: Callable[[str], None]


@dataclass
class _Runs:
    """What ``_retired_runs`` decided: its removals, the runs that go (URI -> why), each listed run's dataset (None:
    none, or its config unreadable), the kept runs whose dataset could not be read, and the runs removed so far
    (their removers add them: a dataset goes only once every run that uses it went)."""

    items: list[_Item]
    going: dict[str, str]
    dataset: dict[str, str | None]
    unreadable: list[str]
    removed: set[str]


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d") if t else "at an unknown time"


def _leased(lease_uri: str, stale_s: float) -> dict | None:
    """The holder of the live lease ``lease_uri``; None when there is none, or it cannot be read."""
    try:
        return holder(lease_uri, stale_s)
    except (OSError, ValueError):
        return None


def _interrupted(scan: _Scan) -> list[_Item]:
    """What an interrupted gc or removal left: everything in ``_trash/``, and parts and work folders marked removed."""
    trash = [(scan.store.join(TRASH, name), e) for name, e in scan.listing.get(TRASH, {}).items()]
    trash += [(scan.store.join(top, name), e) for top in (FILES, WORK) for name, e in scan.listing.get(top, {}).items()
              if work.is_removed(name)]
    return [_Item(Removal("trash", where, e.bytes, "left by an interrupted removal"),
                  _deleter(scan.fs, e.path, recursive=True)) for where, e in trash]


def _retired_runs(scan: _Scan, keep: dict[str, str], retired: dict[str, str]) -> _Runs:
    """The runs that go: those only older nights name (``retired``), and those nothing names (``keep``) that were
    not written for ``keep_nights`` days; a run under a live run lease stays."""
    runs = _Runs([], {}, {}, [], set())
    for name, e in sorted(scan.listing.get(RUNS, {}).items()):
        if TMP in name:
            continue   # a leftover of a killed write: _stale_tmp
        uri = scan.store.join(RUNS, name)
        here = _norm(uri)
        dataset, readable = _dataset_of(RunDir(uri), e, scan.store)
        runs.dataset[here] = dataset
        reason = None
        if here in keep:
            pass
        elif RunDir.LEASE in e.files and (info := _leased(scan.store.join(RUNS, name, RunDir.LEASE), RunDir.LEASE_STALE_S)):
            scan.say(f"kept run {name}: in use, its run lease is held by {info.get('owner')}")
        elif here in retired:
            reason = retired[here]
        elif e.newest < scan.old:
            reason = f"no model's last {scan.keep_nights} nights name it; last written {_when(e.newest)}"
        if reason is None:
            if not readable:
                runs.unreadable.append(name)
            continue
        runs.going[here] = reason
        runs.items.append(_Item(Removal("run", uri, e.bytes, reason),
                                _run_remover(scan.fs, e, uri, scan.local, scan.root, runs.removed, here, scan.say)))
    return runs


def _unused_datasets(scan: _Scan, runs: _Runs, keep: dict[str, str], retired: dict[str, str]) -> list[_Item]:
    """The datasets that go: those only removed runs use, those of nights only older ones name (``retired``), and
    those no run uses that were not written for ``keep_nights`` days; none when a kept run's dataset is unknown,
    and never one being preprocessed (its live lease) or that a kept run or ``keep`` names."""
    used_by_kept = {_norm(d) for r, d in runs.dataset.items() if r not in runs.going and d}
    users: dict[str, list[str]] = {}
    for r, d in runs.dataset.items():
        if d:
            users.setdefault(_norm(d), []).append(r)
    if runs.unreadable:
        scan.say(f"kept every dataset: the dataset of run(s) {', '.join(runs.unreadable)} cannot be read from their "
                 "config")
    items = []
    for name, e in sorted(scan.listing.get(DATASETS, {}).items()):
        if TMP in name:
            continue
        here = _norm(scan.store.join(DATASETS, name))
        if here in keep or here in used_by_kept or runs.unreadable:
            continue
        if (info := _leased(work.dataset_lease_uri(scan.store.uri, name), work.DATASET_LEASE_STALE_S)) is not None:
            scan.say(f"kept dataset {name}: being preprocessed, its lease is held by {info.get('owner')}")
            continue
        if here in users:
            names = ", ".join(posixpath.basename(r) for r in sorted(users[here]))
            reason = f"only removed runs use it ({names})"
        elif here in retired:   # its night's run is gone already (a gc cut short, or by hand)
            reason = retired[here]
        elif e.newest < scan.old:
            reason = f"no run uses it; last written {_when(e.newest)}"
        else:
            continue
        items.append(_Item(Removal("dataset", scan.store.join(DATASETS, name), e.bytes, reason),
                           _dataset_remover(scan.fs, e, scan.local, scan.root, users.get(here, []), runs.removed,
                                            name, scan.say)))
    return items


def _spent_work(scan: _Scan, going_datasets: set[str], work_dir: str | None) -> list[_Item]:
    """The ``_work/`` folders that go: a finished dataset's, a removed one's (``going_datasets``: names), and an
    abandoned job's (no live lease, not written for ``keep_nights`` days)."""
    datasets, items = scan.listing.get(DATASETS, {}), []
    for name, e in sorted(scan.listing.get(WORK, {}).items()):
        if name.endswith(work.LEASE_SUFFIX) or work.is_removed(name) or TMP in name or not e.folder:
            continue
        if _leased(work.dataset_lease_uri(scan.store.uri, name), work.DATASET_LEASE_STALE_S) is not None:
            continue
        finished = SUCCESS in datasets.get(name, _Entry("")).files
        if finished or name in going_datasets:
            reason = "its dataset is finished" if name not in going_datasets else "its dataset is removed"
        elif e.newest < scan.old:
            reason = f"an abandoned preprocessing job's (no lease), last written {_when(e.newest)}"
        else:
            continue
        items.append(_Item(Removal("work", scan.store.join(WORK, name), e.bytes, reason),
                           _work_remover(scan.store.uri, name, None if scan.local else work_dir)))
    return items


def _stale_tmp(scan: _Scan, gone: list[str]) -> list[_Item]:
    """The ``.tmp-*`` leftovers of killed writes not written for ``TMP_GRACE_S``, outside what goes anyway
    (``gone``: URIs)."""
    items = []
    for rel, e in sorted(scan.listing.get(TMP, {}).items()):
        where = scan.store.join(rel)
        if e.newest >= scan.now - TMP_GRACE_S or any(where == g or where.startswith(g + "/") for g in gone):
            continue
        items.append(_Item(Removal("tmp", where, e.bytes, f"left by a killed write; last written "
                                   f"{dt.datetime.fromtimestamp(e.newest, dt.timezone.utc):%Y-%m-%d %H:%M} UTC"),
                           _deleter(scan.fs, e.path, recursive=True)))
    return items


def _old_parts(config: GcConfig, store: Store, night: Night | None, work_dir: str | None,
               say: Callable[[str], None]) -> list[_Item]:
    """The parsed parts of the dated inputs' days before every model's window (``parts_cutoff``); none without
    ``config.inputs``."""
    if not config.inputs:
        return []
    templates = [t if "://" in t else os.path.abspath(t) for t in config.inputs]   # as nightly.window.window
    cutoff = parts_cutoff(store.uri, config.retain_days, night, say)
    if cutoff is None:
        say("parsed parts kept: no model has a recorded window")
        return []

    def old(uri: str) -> bool:
        day = day_of(templates, uri)
        return day is not None and day < cutoff

    found = work.removable_parts(store.uri, old, work_dir, say)
    items = [_Item(Removal("parts", p.where, p.bytes, f"input of {day_of(templates, p.uri)}, before every window "
                           f"(parts kept from {cutoff}): {p.uri}"), _parts_remover(store.uri, p, work_dir))
             for p in found]
    if items:
        say(f"the parsed parts of {len({p.uri for p in found})} input file(s) are older than {cutoff}, the first day "
            "a window reads")
    return items


def _named(store: Store, keep_nights: int) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]:
    """(runs kept, datasets kept, runs retired, datasets retired) by the models' records, URI -> why: each
    champion's run and dataset, the runs and datasets the last ``keep_nights`` decided nights name; those that
    only older nights name. The dataset of a night that failed its data checks (no run) goes with the decided nights
    before it."""
    keep_runs, keep_datasets, retired, retired_datasets = {}, {}, {}, {}
    for name in store.models():
        model = store.model_uri(name)
        try:
            champion = registry.load_champion(model)
            everything = registry.history(model)
            lines = [e for e in everything if e.get("run")]
        except UserError as e:
            raise UserError(f"{e} Nothing was removed: what model {name} needs is unknown.") from None
        if champion is not None:
            keep_runs[_norm(champion.run)] = keep_datasets[_norm(champion.dataset)] = f"the champion of model {name}"
        for line in lines[-keep_nights:]:
            for run in (line.get("run"), line.get("champion_run")):
                if run:
                    keep_runs.setdefault(_norm(run), f"model {name}'s night {line.get('date')}")
            if line.get("dataset"):
                keep_datasets.setdefault(_norm(line["dataset"]), f"model {name}'s night {line.get('date')}")
        for line in lines[:-keep_nights]:
            why = f"model {name}'s night {line.get('date')}, before its last {keep_nights} nights"
            for run in (line.get("run"), line.get("champion_run")):
                if run:
                    retired.setdefault(_norm(run), why)
            if line.get("dataset"):   # recorded since gc; older lines: the run's config says
                retired_datasets.setdefault(_norm(line["dataset"]), why)
        since = min((e.get("date") or "" for e in lines[-keep_nights:]), default=None)
        for line in (e for e in everything if not e.get("run") and e.get("dataset")):   # failed its data checks
            what = f"model {name}'s night {line.get('date')} (failed its data checks)"
            if since is not None and (line.get("date") or "") < since:
                retired_datasets.setdefault(_norm(line["dataset"]), f"{what}, before its last {keep_nights} nights")
            else:
                keep_datasets.setdefault(_norm(line["dataset"]), what)
    return (keep_runs, keep_datasets, {r: why for r, why in retired.items() if r not in keep_runs},
            {d: why for d, why in retired_datasets.items() if d not in keep_datasets})


def _dataset_of(run: RunDir, e: _Entry, store: Store) -> tuple[str | None, bool]:
    """(the dataset a run trains on, whether that could be read): its config.yaml's, else its pipeline.yaml's; an
    absolute URI of the store before it moved found in ``store`` now (``Store.resolve``)."""
    for name, key in ((RunDir.CONFIG, ("dataset",)), (RunDir.PIPELINE, ("train", "dataset"))):
        if name not in e.files:
            continue
        try:
            value = load_yaml(run.read_text(name), run.join(name))
            for k in key:
                value = value.get(k) if isinstance(value, dict) else None
            value = str(value) if value else None
            if value and ("://" in value or value.startswith("/")):   # a relative one is its writer's: as given
                value = store.resolve(value)
            return value, True
        except (OSError, yaml.YAMLError, UnicodeDecodeError, UserError):   # UserError: an alias bomb, say
            return None, False
    return None, True


def _norm(uri: str) -> str:
    uri = uri.rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return uri if "://" in uri else os.path.abspath(uri)


def _relative(store: str, uri: str) -> str:
    return uri[len(store) + 1:] if uri.startswith(store.rstrip("/") + "/") else uri


# --- removing ---------------------------------------------------------------------------------------------------

def _delete(fs, path: str | list[str], recursive: bool = False) -> None:
    """Delete a file, files or a folder tree: every deletion of gc goes through here."""
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass


def _deleter(fs, path: str, recursive: bool = False) -> Callable[[], bool]:
    def remove() -> bool:
        _delete(fs, path, recursive)
        return True
    return remove


def _remove_tree(fs, e: _Entry, local: bool, root: str, is_marker: Callable[[str], bool],
                 spare: str | None = None) -> None:
    """Delete the folder of ``e``: its markers first; then a local folder is renamed into ``_trash/`` and deleted
    there, a remote one deleted file by file (``spare``, a relative path, is left: the caller's lease)."""
    markers = [f"{e.path}/{f}" for f in e.files if is_marker(f)]
    if markers:
        _delete(fs, markers)
    if local:
        trash = f"{root}/{TRASH}/{posixpath.basename(e.path)}-{uuid.uuid4().hex[:8]}"
        fs.makedirs(posixpath.dirname(trash), exist_ok=True)
        try:
            os.rename(e.path, trash)
        except FileNotFoundError:
            return
        _delete(fs, trash, recursive=True)
        return
    rest = [f"{e.path}/{f}" for f in e.files if not is_marker(f) and f != spare]
    if rest:
        _delete(fs, rest)
    if spare is None and fs.exists(e.path):
        _delete(fs, e.path, recursive=True)


def _run_remover(fs, e: _Entry, run_uri: str, local: bool, root: str, removed: set[str], key: str,
                 say: Callable[[str], None]) -> Callable[[], bool]:
    def remove() -> bool:
        try:
            with RunDir(run_uri).lease("removal by gc", owner="gc (removing the run)", say=say):
                _remove_tree(fs, e, local, root, RunDir.is_marker, spare=RunDir.LEASE)
        except LeaseHeld as held:
            say(f"kept run {posixpath.basename(run_uri)}: it came into use since gc listed it ({held})")
            return False
        removed.add(key)
        return True
    return remove


def _dataset_remover(fs, e: _Entry, local: bool, root: str, users: list[str], removed: set[str], name: str,
                     say: Callable[[str], None]) -> Callable[[], bool]:
    def remove() -> bool:
        if any(u not in removed for u in users):
            say(f"kept dataset {name}: a run that uses it was kept")
            return False
        _remove_tree(fs, e, local, root, lambda rel: rel == SUCCESS)
        return True
    return remove


def _work_remover(store: str, key: str, work_dir: str | None) -> Callable[[], bool]:
    def remove() -> bool:
        work.remove_work(store, key, work_dir)
        return True
    return remove


def _parts_remover(store: str, parts: work.StoredParts, work_dir: str | None) -> Callable[[], bool]:
    def remove() -> bool:
        work.remove_parts(store, [parts], work_dir)
        return True
    return remove


def _drop_empty(store: Store, top: str) -> None:
    """Remove the local folder ``<store>/<top>`` once it is empty."""
    fs, root = filesystem(store.join(top))
    if isinstance(fs, LocalFileSystem):
        try:
            os.rmdir(root)
        except OSError:
            pass
