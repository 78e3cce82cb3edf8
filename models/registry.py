"""Named models in the store: ``<store>/models/<name>/champion.json`` (the model in use) and ``history.jsonl``
(one line per pipeline run: date, window, run and dataset, challenger and champion metrics, gates, the night's data
checks, decision; or a night the catchup policy skipped: ``record_skipped``; or one whose data checks failed:
``record_data_failed``; or one that failed before its decision: ``record_failed``), ``days.jsonl`` (the data gate's
and the operator's verdicts on the days its nights read: ``record_verdicts``), ``landed.jsonl`` (the days the
day-landed sensor saw complete: ``record_landed``) and ``bundles/`` (the serving bundles of the champion and of the
one before it, kept for a rollback).

``record`` is the one writer of decisions (of a ``NightRecord``). Under the model's promotion lock
(``<model>/promotion.lock``, a ``common.lease``, checked before each write) it re-reads the champion and
``decide``s (``models.decision``); a promotion is one ordered commit: (1) the bundle is exported and verified
(every file re-read against its manifest), (2) champion.json is written once, with the bundle, the sha256 of its
manifest and the history line, (3) the line is appended to history.jsonl, (4) the bundles of older champions are
removed. A re-run of a decided night decides nothing again but repairs what a crash cut short: a missing or
unverifiable bundle, a history line missing for the champion, a champion.json older than the history's last
promotion. Local folders and s3:// alike.

The places these records name in the store (champion.json's run, dataset, vocab and bundle, a history line's run,
dataset and champion_run) are written store-relative (``runs/<name>``: ``common.store.Store.relative``) and
resolved against the store's root when read (``Store.resolve``): a store restored at another path, or copied to
another bucket, keeps its champion. Lines written before hold absolute URIs: one in the store as it is now is
used as it is; one elsewhere whose ``runs/<name>`` (``datasets/<name>``, ``models/<name>``) is in the store now
is found there (the store moved); any other keeps its value, and a champion outside the store is refused
(``champion_to_load``). The days' verdicts (days.jsonl) name input files, not places in the store: as given.

Test hook: ``$DLRMFLOW_CRASH_AFTER`` set to one of ``WRITES`` kills the process (SIGKILL) right after that write
(tests/models/test_promotion_kill.py); unset, it does nothing.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.atomic import write_uri
from common.errors import UserError
from common.lease import lease
from common.store import MODEL_NAME, MODELS, Store, check_model_name, filesystem, read_text, store_of
from common.uri import inside
from models.config import PromoteConfig
from models.decision import PROMOTING, data_refusals, decide, finite
from training import TrainConfig

CHAMPION_FILE = "champion.json"
BUNDLES = "bundles"   # <model>/bundles/<run name>/: the serving bundles of the champion and the one before
HISTORY_FILE = "history.jsonl"
DAYS_FILE = "days.jsonl"   # the data gate's verdicts on the days the model's nights read (nightly.datacheck)
LANDED_FILE = "landed.jsonl"   # the days the day-landed sensor saw complete (nightly.landing)
TUNED_FILE = "tuned.yaml"   # the training config the model's latest tune found best (`dlrmflow tune --model`)
LOCK_FILE = "promotion.lock"
LOCK_TIMEOUT_S = 900.0  # how long record() waits for another promotion of the same model
LOCK_STALE_S = 600.0    # after this a lock is taken to be a crashed holder's; promotion takes seconds
NAME_PATTERN = MODEL_NAME   # a model's folder name (common.store names the store's folders)
CRASH_AFTER = "DLRMFLOW_CRASH_AFTER"   # the test hook (see the module doc)
WRITES = ("bundle", "champion", "history", "prune")   # a promotion's writes, in order
SKIPPED = "skipped"   # the decision of a night a catchup policy skipped (record_skipped)
DATA_FAILED = "data_failed"   # of a night whose data checks failed before training (record_data_failed)
FAILED = "failed"   # of a night that failed before its decision, e.g. in preprocessing or training (record_failed)
UNDECIDED = (SKIPPED, DATA_FAILED, FAILED)   # lines of nights that decided nothing


class Champion(BaseModel):
    """The model in use: a training run's checkpoint with the dataset (and so the vocabularies) it was trained on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The model's name (its folder under models/).")
    run: str = Field(description="The training run folder (in champion.json store-relative, runs/<name>; loaded, "
                     "its URI).")
    step: int = Field(description="The checkpoint step of that run.")
    dataset: str = Field(description="The dataset the run trained on (its vocab/ holds the vocabularies; in "
                         "champion.json store-relative, datasets/<name>; loaded, its URI).")
    vocab: str = Field(description="The dataset's vocabulary folder (store-relative in champion.json).")
    date: str = Field(description="The run's date (ISO), the day it was tested on.")
    window: list[str] = Field(default_factory=list, description="The dates it trained and validated on.")
    metrics: dict[str, float | int | str | None] = Field(default_factory=dict, description="auc, logloss, rows "
                                                         "(and positives, base_logloss, calibration, the rows' "
                                                         "fingerprint) on its test day (null: not finite).")
    promoted_at: str = Field(description="When it was promoted (ISO timestamp, UTC).")
    bundle: str | None = Field(None, description="Its serving bundle (`dlrmflow export`), written and verified "
                               "before this file (store-relative in champion.json, models/<name>/bundles/<run>).")
    bundle_sha256: str | None = Field(None, description="sha256 of the bundle's manifest.json.")
    line: dict | None = Field(None, description="The history line of the decision that promoted it, written here "
                              "before it is appended to history.jsonl (a re-run appends it if a crash came between).")


def check_name(name: str) -> str:
    """``name`` when it can name a model folder, else a UserError saying how to fix it."""
    return check_model_name(name)


def model_uri(store: str, name: str) -> str:
    """``<store>/models/<name>`` (``common.store.Store.model_uri``)."""
    return Store(store).model_uri(name)


LOCATIONS = ("run", "dataset", "vocab", "bundle")   # champion.json's places in the store
LINE_LOCATIONS = ("run", "dataset", "champion_run")   # a history line's


def load_champion(model: str) -> Champion | None:
    """The champion of the model folder ``model`` (``<store>/models/<name>``), None when it has none yet; its
    places resolved against the model's store (the module doc)."""
    store = model_store_of(model)
    text = _read(model, CHAMPION_FILE)
    if text is None:
        return None
    try:
        champion = Champion.model_validate_json(text)
    except ValidationError as e:
        raise UserError(f"{posixpath.join(model, CHAMPION_FILE)} is not a champion record: {e}. Fix: remove it "
                        "(the next run's challenger becomes the champion), or restore it from a backup.") from None
    return champion.model_copy(update={**_places(champion.model_dump(include=set(LOCATIONS)), store.resolve),
                                       "line": _line(champion.line, store.resolve)})


def _write_champion(model: str, champion: Champion) -> None:
    """Write ``champion`` as ``<model>/champion.json``, its places store-relative."""
    store = model_store_of(model)
    recorded = champion.model_copy(update={**_places(champion.model_dump(include=set(LOCATIONS)), store.relative),
                                           "line": _line(champion.line, store.relative)})
    write_uri(posixpath.join(model, CHAMPION_FILE), recorded.model_dump_json(indent=2))


def _places(fields: dict, convert: Callable[[str], str]) -> dict:
    """``fields`` with each string value converted (``Store.relative`` or ``Store.resolve``); None stays."""
    return {k: convert(v) if isinstance(v, str) else v for k, v in fields.items()}


def _line(line: dict | None, convert: Callable[[str], str]) -> dict | None:
    """A history line with its places (``LINE_LOCATIONS``) converted."""
    if not isinstance(line, dict):
        return line
    return {**line, **_places({k: line[k] for k in LINE_LOCATIONS if k in line}, convert)}


def model_store(model: str) -> str:
    """The store a model folder ``<store>/models/<name>`` lies in."""
    return store_of(model, MODELS)


def model_store_of(model: str) -> Store:
    """``model_store(model)`` as a ``Store`` (UserError for an s3:// one with '.' or '..' segments)."""
    return Store(model_store(model))


def champion_to_load(model: str) -> Champion | None:
    """``load_champion(model)`` for loading the champion's weights: UserError when champion.json names a run or a
    bundle outside the model's store. A checkpoint's metadata is a pickle and a bundle's model TorchScript: loading
    either runs code, so only what the store itself holds is loaded (the pipeline promotes nothing else)."""
    champion = load_champion(model)
    if champion is not None:
        store = model_store_of(model).uri
        for what, uri in (("run", champion.run), ("bundle", champion.bundle)):
            if uri is not None and not inside(uri, store):
                raise UserError(f"{posixpath.join(model, CHAMPION_FILE)}: the champion's {what} {uri} lies outside "
                                f"the model's store {store}, so it is not loaded (a checkpoint's metadata is a "
                                "pickle and a bundle's model TorchScript: loading either runs code). Fix: restore "
                                "champion.json from a backup, or remove it (the next night's model becomes the "
                                "champion).")
    return champion


def ineligible(champion: Champion, date: str) -> str | None:
    """Why ``champion`` counts as absent for the night tested on ``date`` (None: it counts), the one rule every use
    of a champion by a night follows (its warm start, its data gate's unseen check, the comparison, the record):
    a champion with non-finite recorded metrics (a diverged model: its weights would make every challenger diverge
    too) counts as absent, and an older day's model never replaces, nor is compared with, a newer day's champion."""
    if not finite(champion.metrics):
        return (f"the champion ({champion.run}) has non-finite recorded metrics (auc {champion.metrics.get('auc')}, "
                f"logloss {champion.metrics.get('logloss')}) and counts as absent")
    if champion.date > date:
        return (f"the champion was tested on a later day ({champion.date}) than this run ({date}), and an older "
                "day's model never replaces a newer one")
    return None


def usable_champion(model: str, date: str) -> tuple[Champion | None, str | None]:
    """The champion of ``model`` as the night tested on ``date`` may use it (``champion_to_load``: only what the
    store holds), and why not (``ineligible``) when it has one that counts as absent: ``(None, reason)``."""
    champion = champion_to_load(model)
    why = None if champion is None else ineligible(champion, date)
    return (None, why) if why else (champion, None)


def check_records(model: str) -> None:
    """Read the model's champion.json and history.jsonl as a night will after training: a damaged one is a
    UserError now, before the night spends its hours (each names the file, the line and the fix)."""
    champion_to_load(model)
    history(model)
    day_verdicts(model)


def save_tuned(model: str, text: str) -> str:
    """Write a tune's best training config (YAML ``text``) as the model's tuned config; returns its URI."""
    uri = posixpath.join(model, TUNED_FILE)
    write_uri(uri, text)
    return uri


def load_tuned(model: str):
    """The model's tuned training config (``save_tuned``), None when no tune wrote one."""
    uri = posixpath.join(model, TUNED_FILE)
    fs, path = filesystem(uri)
    return TrainConfig.from_yaml(uri) if fs.exists(path) else None


def _read(model: str, name: str) -> str | None:
    """The text of ``<model>/<name>``, None when there is no such file."""
    try:
        return read_text(posixpath.join(model, name))
    except FileNotFoundError:
        return None


def promotion_lock(model: str, owner: str | None, timeout_s: float = LOCK_TIMEOUT_S, stale_s: float = LOCK_STALE_S,
                   poll_s: float = 0.2, say: Callable[[str], None] | None = None):
    """Hold ``<model>/promotion.lock`` for the block (a ``common.lease.lease``): a ``Lease``."""
    return lease(posixpath.join(model, LOCK_FILE), owner, "promotion lock", model, timeout_s, stale_s, poll_s, say)


# --- history and record -------------------------------------------------------------------------------------

def history(model: str) -> list[dict]:
    """Every line of ``<model>/history.jsonl``, oldest first ([] when the model has none yet); its places
    resolved against the model's store (the module doc)."""
    store = model_store_of(model)
    text = _read(model, HISTORY_FILE) or ""
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except ValueError as e:
            raise UserError(f"{posixpath.join(model, HISTORY_FILE)} line {number} is not JSON ({e}). Fix: repair or "
                            "remove that line.") from None
    return [_line(line, store.resolve) for line in lines]


def day_verdicts(model: str) -> list[dict]:
    """Every line of ``<model>/days.jsonl`` (the data gate's and the operator's verdicts on days, oldest first; the
    line's fields are ``nightly.datacheck``'s: a judged day's line keeps its stats, the reference of the days after
    it), [] when there is none yet."""
    return _json_lines(model, DAYS_FILE, "the day it held is judged again")


def _json_lines(model: str, name: str, if_removed: str) -> list[dict]:
    """The JSON lines of ``<model>/NAME``, [] when there is none yet; a line that is not JSON is a UserError naming
    it and what removing it does (``if_removed``)."""
    lines = []
    for number, line in enumerate((_read(model, name) or "").splitlines(), 1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except ValueError as e:
                raise UserError(f"{posixpath.join(model, name)} line {number} is not JSON ({e}). Fix: repair or "
                                f"remove that line ({if_removed}).") from None
    return lines


def record_verdicts(model: str, verdicts: list[dict], owner: str | None = None,
                    say: Callable[[str], None] | None = None) -> None:
    """Append ``verdicts`` (one line a day) to ``<model>/days.jsonl`` under the model's lock."""
    if not verdicts:
        return
    with promotion_lock(model, owner, say=say) as lock:
        text = _read(model, DAYS_FILE) or ""
        if text and not text.endswith("\n"):
            text += "\n"
        lock.check()
        write_uri(posixpath.join(model, DAYS_FILE),
                  text + "".join(json.dumps(v, allow_nan=False, default=str) + "\n" for v in verdicts))


def landed(model: str) -> list[dict]:
    """Every line of ``<model>/landed.jsonl`` (the day-landed sensor's record of the days it saw: ``nightly.landing``),
    oldest first; [] when there is none yet."""
    return _json_lines(model, LANDED_FILE, "a day it held may land again: its night runs once")


def record_landed(model: str, lines: list[dict]) -> None:
    """Append ``lines`` to ``<model>/landed.jsonl``. No lock: its one writer is the model's day-landed sensor, whose
    deployment runs one flow run at a time."""
    if not lines:
        return
    text = _read(model, LANDED_FILE) or ""
    if text and not text.endswith("\n"):
        text += "\n"
    write_uri(posixpath.join(model, LANDED_FILE), text + "".join(json.dumps(v, default=str) + "\n" for v in lines))


RECORDED = ("auc", "logloss", "rows", "positives", "base_logloss", "calibration", "fingerprint")  # of each model


def _plain(metrics: dict | None) -> dict | None:
    """The ``RECORDED`` metrics of ``metrics`` as JSON values (NaN as null)."""
    if metrics is None:
        return None
    out = {}
    for key in RECORDED:
        value = metrics.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = int(value) if key in ("rows", "positives") and value is not None else value
    return out


def decided(model: str, date: str, run: str) -> dict | None:
    """The decision recorded for ``run`` on ``date``: its history line, or the line champion.json holds when a
    crash came before it was appended; None when the night is not decided yet."""
    line = next((e for e in reversed(history(model)) if (e.get("date"), e.get("run")) == (date, run)), None)
    if line is None:
        champion = load_champion(model)
        if champion is not None and champion.line and \
                (champion.line.get("date"), champion.line.get("run")) == (date, run):
            line = champion.line
    return line


@dataclass(frozen=True)
class NightRecord:
    """What ``record`` decides on, and how. ``candidate``: the challenger (Champion's fields but ``name`` and
    ``promoted_at``: run, step, dataset, vocab, date, window, metrics on day ``date``: auc, logloss, rows and the
    rest of ``RECORDED``); the champion's metrics on the same day, ``champion_metrics``, when they are of
    ``champion_run``; the ``gates``; ``score_champion(champion)`` to measure the champion otherwise (None: the
    champion is kept); ``export(run, step, out)``, which writes and verifies the bundle and returns its manifest's
    sha256 (``training.export.export_verified``; None: no bundle); ``data_checks``, the night's data checks
    (``nightly.datacheck.summary``), recorded, and ``failed_checks`` the texts of its failed ones, each refusing the
    promotion. ``owner``, ``timeout_s``, ``stale_s`` and ``say``: the promotion lock's (``promotion_lock``)."""

    candidate: dict
    champion_metrics: dict | None = None
    champion_run: str | None = None
    gates: PromoteConfig = field(default_factory=PromoteConfig)
    score_champion: Callable[[Champion], dict] | None = None
    owner: str | None = None
    timeout_s: float = LOCK_TIMEOUT_S
    stale_s: float = LOCK_STALE_S
    say: Callable[[str], None] | None = None
    export: Callable[[str, int, str], str] | None = None
    data_checks: dict | None = None
    failed_checks: tuple[str, ...] = ()


def record(model: str, night: NightRecord) -> dict:
    """Decide on the challenger ``night.candidate`` and record it, under the model's promotion lock: re-read the
    champion (another run may have promoted since), ``decide`` with the gates against its metrics on the same day
    (``night.champion_metrics`` when they are of ``night.champion_run``, the current champion; else
    ``night.score_champion(champion)``; else the champion is kept), then commit in order (module doc): bundle
    (``night.export``), champion.json, history line (with the gates and the champion metrics' ``paired``
    comparison), removal of older bundles. Returns the history line. A re-run for the same date and run returns the
    line recorded before and repairs the store (a promotion cut short, a missing or unverifiable bundle), ending as
    an uninterrupted run would."""
    candidate, gates, owner, say, export = night.candidate, night.gates, night.owner, night.say, night.export
    name = posixpath.basename(model.rstrip("/"))
    try:
        challenger = Champion(**{**candidate, "name": check_name(name), "promoted_at": ""})
        problems = [f"metrics.{k}: missing" for k in ("auc", "logloss", "rows") if k not in challenger.metrics]
    except ValidationError as e:
        problems = [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]
    if problems:
        raise UserError(f"the challenger of model {model} is incomplete ({'; '.join(problems)}). Fix: give run, "
                        "step, dataset, vocab, date, window and metrics (auc, logloss, rows).")
    with promotion_lock(model, owner, timeout_s=night.timeout_s, stale_s=night.stale_s, say=say) as lock:
        lines = history(model)
        current = load_champion(model)
        key = (challenger.date, challenger.run)
        done = next((e for e in reversed(lines) if (e.get("date"), e.get("run")) == key), None)
        if done is None and current is not None and current.line and \
                (current.line.get("date"), current.line.get("run")) == key:
            done = current.line   # champion.json was written, its history line not yet
            lines = _append(model, lines, done, lock, say)
        if done is not None:
            _repair(model, challenger, done, lines, current, export, lock, say)
            return done
        reason_prefix = ""
        absent = None if current is None else ineligible(current, challenger.date)
        if current is None or absent:   # absent: e.g. a diverged model promoted before this check, or a backfill
            measured = None
            reason_prefix = f"{absent}: " if absent else ""
        elif night.champion_metrics is not None and night.champion_run == current.run:
            measured = night.champion_metrics
        elif night.score_champion is not None:
            measured = night.score_champion(current)
        else:
            measured = None
            reason_prefix = (f"the champion is now run {current.run} (metrics were given for {night.champion_run}) and "
                             f"no metrics of it on {challenger.date} are known: ")
        if current is not None and measured is None and finite(current.metrics):   # kept: a newer day's, or unmeasured
            data = data_refusals(list(night.failed_checks))
            decision, reason, refused = "kept", reason_prefix + "champion kept" + "".join(f"; {r}" for r in data), \
                ("data_check",) if data else ()
        else:
            decision, reason, refused = decide(challenger.metrics, measured, gates, list(night.failed_checks))
            reason = reason_prefix + reason
        entry = {"date": challenger.date, "window": challenger.window, "run": challenger.run,
                 "dataset": challenger.dataset, "challenger": _plain(challenger.metrics), "champion": _plain(measured),
                 "champion_run": current.run if current else None,
                 "paired": measured.get("paired") if measured else None, "promote_margin": gates.margin,
                 "gates": gates.recorded(), "data_checks": night.data_checks, "decision": decision, "reason": reason,
                 "refused": list(refused), "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "by": owner,
                 "slices": (measured or {}).get("slices"), "watch": (measured or {}).get("watch")}
        if decision in PROMOTING:
            _promote(model, challenger, entry, export, lock)
        lines = _append(model, lines, entry, lock)
        _remove_old_bundles(model, lines, lock)
    return entry


def record_skipped(model: str, date: str, reason: str, owner: str | None = None,
                   say: Callable[[str], None] | None = None) -> dict:
    """Append a ``skipped`` line for the night ``date`` (a catchup policy's decision, nothing trained) under the
    model's lock, unless the night is already in the history; returns the line."""
    with promotion_lock(model, owner, say=say) as lock:
        lines = history(model)
        done = next((e for e in reversed(lines) if e.get("date") == date), None)
        if done is not None:
            return done
        entry = {"date": date, "window": [], "run": None, "challenger": None, "champion": None, "champion_run": None,
                 "decision": SKIPPED, "reason": reason, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "by": owner}
        _append(model, lines, entry, lock)
    return entry


def record_data_failed(model: str, date: str, window: list[str], data_checks: dict, reason: str,
                       owner: str | None = None, say: Callable[[str], None] | None = None,
                       dataset: str | None = None) -> dict:
    """Append a ``data_failed`` line for the night ``date`` whose data checks (``data_checks``: ``datacheck.summary``)
    failed before training, under the model's lock, with the ``dataset`` it preprocessed (``models.gc`` removes it
    with the nights before the model's last ``keep_nights``); a re-run that fails the same way appends nothing.
    Returns the line."""
    with promotion_lock(model, owner, say=say) as lock:
        lines = history(model)
        last = next((e for e in reversed(lines) if e.get("date") == date), None)
        if last is not None and last.get("decision") == DATA_FAILED and last.get("reason") == reason:
            return last
        entry = {"date": date, "window": window, "run": None, "dataset": dataset, "challenger": None, "champion": None,
                 "champion_run": None, "data_checks": data_checks, "decision": DATA_FAILED, "reason": reason,
                 "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "by": owner}
        _append(model, lines, entry, lock)
    return entry


def record_failed(model: str, date: str, stage: str, error: str, owner: str | None = None,
                  timeout_s: float = LOCK_TIMEOUT_S, say: Callable[[str], None] | None = None) -> dict | None:
    """Append a ``failed`` line for the night ``date`` that failed at ``stage`` (e.g. preprocess, train) before its
    decision, ``error`` its message, under the model's lock; returns it. Nothing is appended (None) when the
    night's last line is a decision (a later stage's failure undoes none) or this same failure (a re-run that
    fails the same way)."""
    reason = f"failed at {stage}: {error}"
    with promotion_lock(model, owner, timeout_s=timeout_s, say=say) as lock:
        lines = history(model)
        last = next((e for e in reversed(lines) if e.get("date") == date), None)
        if last is not None and (last.get("decision") not in UNDECIDED or
                                 (last.get("decision"), last.get("reason")) == (FAILED, reason)):
            return None
        entry = {"date": date, "window": [], "run": None, "challenger": None, "champion": None,
                 "champion_run": None, "stage": stage, "decision": FAILED, "reason": reason,
                 "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "by": owner}
        _append(model, lines, entry, lock)
    return entry


def decided_dates(model: str) -> list[str]:
    """The dates (ISO) of the nights the model decided (promoted, first or kept; not skipped, nor failed)."""
    return [e["date"] for e in history(model) if e.get("decision") not in UNDECIDED and e.get("date")]


def _promote(model: str, challenger: Champion, entry: dict, export, lock) -> None:
    """Steps 1 and 2 of the commit: the verified bundle, then champion.json (with the line ``entry``)."""
    bundle = sha = None
    if export is not None:
        bundle = posixpath.join(model, BUNDLES, bundle_name(challenger.run))
        lock.check()
        sha = export(challenger.run, challenger.step, bundle)
        _written("bundle")
    lock.check()
    champion = challenger.model_copy(update={"promoted_at": entry["at"], "bundle": bundle, "bundle_sha256": sha,
                                             "line": entry})
    _write_champion(model, champion)
    _written("champion")


def _append(model: str, lines: list[dict], entry: dict, lock, say=None) -> list[dict]:
    """Step 3: ``entry`` appended to history.jsonl; returns the lines with it."""
    if say:
        say(f"{model}: appending the history line of {entry['date']} (a crash cut the promotion short)")
    lock.check()
    text = _read(model, HISTORY_FILE) or ""
    if text and not text.endswith("\n"):
        text += "\n"
    recorded = _line(entry, model_store_of(model).relative)
    write_uri(posixpath.join(model, HISTORY_FILE), text + json.dumps(recorded, allow_nan=False) + "\n")
    _written("history")
    return [*lines, entry]


def _repair(model: str, challenger: Champion, done: dict, lines: list[dict], current: Champion | None, export,
            lock, say) -> None:
    """A decided night again: champion.json and the bundle made what the recorded decision left, if it is
    still the last promotion (a later night's promotion wins); then step 4."""
    last = next((e for e in reversed(lines) if e.get("decision") in PROMOTING), None)
    if last is not None and (last.get("date"), last.get("run")) == (done.get("date"), done.get("run")):
        if current is None or current.run != challenger.run:   # history says promoted, champion.json older
            if say:
                say(f"{model}: writing champion.json of {challenger.run} (a crash cut the promotion short)")
            _promote(model, challenger, done, export, lock)
        elif export is not None:   # the bundle: missing, altered or never attached -> exported again
            bundle = posixpath.join(model, BUNDLES, bundle_name(challenger.run))
            lock.check()
            sha = export(challenger.run, challenger.step, bundle)
            if (current.bundle, current.bundle_sha256) != (bundle, sha):
                if say:
                    say(f"{model}: the champion's bundle {bundle} was exported again (it was missing or altered)")
                lock.check()
                _write_champion(model, current.model_copy(
                    update={"bundle": bundle, "bundle_sha256": sha, "line": current.line or done}))
                _written("champion")
    _remove_old_bundles(model, lines, lock)


def _remove_old_bundles(model: str, lines: list[dict], lock) -> None:
    """Step 4, under the lock: every entry of ``<model>/bundles/`` but the bundles of the last two promoted runs
    (the champion and the one before it, for a rollback), leftovers of a killed export included."""
    promoted = [e["run"] for e in lines if e.get("decision") in PROMOTING]
    keep = {bundle_name(r) for r in promoted[-2:]}
    fs, bundles = filesystem(posixpath.join(model, BUNDLES))
    old = [f for f in (fs.ls(bundles, detail=False) if fs.exists(bundles) else [])
           if posixpath.basename(f.rstrip("/")) not in keep]
    for folder in old:
        lock.check()
        fs.rm(folder, recursive=True)
    if old:
        _written("prune")


def _written(what: str) -> None:
    """The test hook: SIGKILL this process when ``$DLRMFLOW_CRASH_AFTER`` names the write ``what`` just made."""
    if os.environ.get(CRASH_AFTER) == what:
        os.kill(os.getpid(), signal.SIGKILL)


def model_names(store: str) -> list[str]:
    """The names of the model folders under ``<store>/models/`` (sorted; other entries left out:
    ``Store.models``)."""
    return Store(store).models()


def windows_in_use(store: str) -> dict[str, str]:
    """Per model under ``<store>/models/``: the first day (ISO) of the window its latest night (by date) recorded
    in its history, the oldest day its next nights still read (a window slides one day a night; kept from that
    day itself, in case missing days had shortened it). Models without a recorded window are left out."""
    found, where = {}, Store(store)
    for name in where.models():
        lines = [e for e in history(where.model_uri(name)) if e.get("window")]
        if lines:
            found[name] = min(max(lines, key=lambda e: e.get("date") or "")["window"])
    return found


def champion_init(init):
    """``init`` (a ``training.config.InitFrom``) with a named model's folder resolved to its champion's run and
    checkpoint step (``champion_to_load``: a run of the model's store): ``init_from: STORE/models/NAME`` starts
    from the model in use. Anything else unchanged."""
    champion = champion_to_load(init.run) if init is not None else None
    if champion is not None and (why := ineligible(champion, champion.date)):
        raise UserError(f"init_from {init.run}: {why}, so its weights are not used (step {champion.step}). "
                        "Fix: train from scratch (no init_from), or name a run's checkpoint to start from.")
    return init if champion is None else init.model_copy(update={"run": champion.run, "checkpoint": str(champion.step)})


def bundle_name(run: str) -> str:
    """The folder name of a run's bundle under ``<model>/bundles/``."""
    return posixpath.basename(run.rstrip("/"))
