"""Named models in the store: ``<store>/models/<name>/champion.json`` (the model in use) and ``history.jsonl``
(one line per pipeline run: date, window, challenger and champion metrics, decision).

``record`` is the one writer: under the model's promotion lock it re-reads the champion, ``decide``s, appends
the history line and then writes champion.json when the challenger wins. Plain Python, with or without a
Prefect run; local folders and s3:// alike.

The promotion lock is ``<model>/promotion.lock`` holding its owner and expiry. It is taken by an exclusive
create: O_EXCL on a local (or NFS) folder, a conditional PUT (``If-None-Match: *``) on S3. A lock past its
expiry (a crashed holder) is taken over: on S3 by a PUT conditional on the stale lock's ETag (``If-Match``),
locally by renaming it away and checking it was the stale one. Limitations: the S3 endpoint must honour
conditional writes (AWS S3, MinIO and moto do; one that ignores them gives no mutual exclusion, which the
read-back after each take detects only sometimes); expiry compares wall clocks, so machines sharing a store
need clocks within a small fraction of ``stale_s``; a holder that runs longer than ``stale_s`` can lose the
lock, which ``record`` checks before each write (it then fails, writing nothing more).
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import posixpath
import re
import socket
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.atomic import write_uri
from common.errors import UserError
from training.rundir import storage_options

CHAMPION_FILE = "champion.json"
BUNDLES = "bundles"   # <model>/bundles/<run name>/: the serving bundles of the champion and the one before
HISTORY_FILE = "history.jsonl"
LOCK_FILE = "promotion.lock"
DECISIONS = ("promoted", "kept", "first")
PROMOTING = ("promoted", "first")  # the decisions that make the challenger the champion
LOCK_TIMEOUT_S = 900.0  # how long record() waits for another promotion of the same model
LOCK_STALE_S = 600.0    # after this a lock is taken to be a crashed holder's; promotion takes seconds
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"


class Champion(BaseModel):
    """The model in use: a training run's checkpoint with the dataset (and so the vocabularies) it was trained on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The model's name (its folder under models/).")
    run: str = Field(description="URI of the training run folder.")
    step: int = Field(description="The checkpoint step of that run.")
    dataset: str = Field(description="URI of the dataset the run trained on (its vocab/ holds the vocabularies).")
    vocab: str = Field(description="URI of the dataset's vocabulary folder.")
    date: str = Field(description="The run's date (ISO), the day it was tested on.")
    window: list[str] = Field(default_factory=list, description="The dates it trained and validated on.")
    metrics: dict[str, float | int] = Field(default_factory=dict, description="auc, logloss and rows on its test "
                                            "day.")
    promoted_at: str = Field(description="When it was promoted (ISO timestamp, UTC).")
    bundle: str | None = Field(None, description="URI of its serving bundle (`dlrmflow export`), once written.")


def check_name(name: str) -> str:
    """``name`` when it can name a model folder, else a UserError saying how to fix it."""
    if not re.match(NAME_PATTERN, name):
        raise UserError(f"model name {name!r} cannot name a folder. Fix: use letters, digits, '.', '_' or '-' "
                        "(at most 64, starting with a letter or digit).")
    return name


def model_uri(store: str, name: str) -> str:
    """``<store>/models/<name>``."""
    return posixpath.join(store.rstrip("/"), "models", check_name(name))


def load_champion(model: str) -> Champion | None:
    """The champion of the model folder ``model`` (``<store>/models/<name>``), None when it has none yet."""
    text = _read(model, CHAMPION_FILE)
    if text is None:
        return None
    try:
        return Champion.model_validate_json(text)
    except ValidationError as e:
        raise UserError(f"{posixpath.join(model, CHAMPION_FILE)} is not a champion record: {e}. Fix: remove it "
                        "(the next run's challenger becomes the champion), or restore it from a backup.") from None


def _fs(model: str):
    return fsspec.core.url_to_fs(model, **storage_options(model))


def _read(model: str, name: str) -> str | None:
    """The text of ``<model>/<name>``, None when there is no such file."""
    fs, path = _fs(model)
    try:
        return fs.cat_file(posixpath.join(path, name)).decode()
    except FileNotFoundError:
        return None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


# --- the decision --------------------------------------------------------------------------------------------

def _number(metrics: dict | None, key: str) -> float:
    value = (metrics or {}).get(key)
    return float("nan") if value is None else float(value)


def _summary(metrics: dict) -> str:
    return f"AUC {_number(metrics, 'auc'):.4f}, log loss {_number(metrics, 'logloss'):.4f}"


def _check_margin(margin: float) -> None:
    if not math.isfinite(margin) or margin < 0:
        raise UserError(f"promote_margin {margin} is not a number >= 0. Fix: give the AUC gain a challenger needs "
                        "over the champion, e.g. 0 or 0.001.")


def decide(challenger: dict, champion: dict | None, margin: float = 0.0) -> tuple[str, str]:
    """("first" | "promoted" | "kept", reason) for the challenger's and the champion's metrics on the same day:
    the challenger wins when there is no champion or when its AUC >= the champion's AUC + ``margin``; a NaN
    AUC (a day with one class) never promotes. The reason reports both AUCs and log losses."""
    _check_margin(margin)
    new = _number(challenger, "auc")
    if champion is None:
        if math.isnan(new):
            return "kept", f"no champion yet, but the challenger's AUC is NaN ({_summary(challenger)}): not promoted"
        return "first", f"no champion yet: the challenger ({_summary(challenger)}) becomes the first"
    old = _number(champion, "auc")
    if math.isnan(new) or math.isnan(old):
        return "kept", (f"an AUC is NaN, so the models cannot be compared: champion kept (challenger "
                        f"{_summary(challenger)}; champion {_summary(champion)})")
    losses = f"log loss {_number(challenger, 'logloss'):.4f} vs {_number(champion, 'logloss'):.4f}"
    if new >= old + margin:
        return "promoted", f"challenger AUC {new:.4f} >= champion AUC {old:.4f} + margin {margin:g}; {losses}"
    return "kept", f"challenger AUC {new:.4f} < champion AUC {old:.4f} + margin {margin:g}; {losses}"


# --- the promotion lock --------------------------------------------------------------------------------------

class LockLost(UserError):
    """The promotion lock expired and another owner took it over while this one held it."""


class _LocalLockFile:
    """A lock file in a local (or NFS) folder; its version is its content (every lock holds a fresh token)."""

    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def create(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def read(self) -> tuple[bytes, object, float] | None:
        """(content, version, modification time) or None when there is no lock."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
                return data, data, os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None

    def replace(self, version: object, data: bytes | None) -> bool:
        """Replace the lock of ``version`` by ``data`` (None: remove it); False when it is another lock now.
        The lock is renamed aside first, so of two processes replacing the same stale lock one wins."""
        aside = f"{self.path}.aside-{uuid.uuid4().hex}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        with open(aside, "rb") as f:
            moved = f.read()
        if moved != version:  # another process took the lock meanwhile: give it back
            try:
                os.link(aside, self.path)
            except FileExistsError:  # a third one created a lock in that instant (the documented race)
                pass
            os.unlink(aside)
            return False
        os.unlink(aside)
        return data is None or self.create(data)


class _S3LockObject:
    """A lock object on S3 written with conditional PUTs; its version is its ETag."""

    def __init__(self, fs, path: str):
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)

    def create(self, data: bytes) -> bool:
        try:
            self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*")
        except FileExistsError:  # s3fs's translation of 412 PreconditionFailed on If-None-Match
            return False
        return True

    def read(self) -> tuple[bytes, object, float] | None:
        async def get():
            response = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key)
            async with response["Body"] as body:
                return await body.read(), response["ETag"], response["LastModified"].timestamp()

        try:
            return fsspec.asyn.sync(self.fs.loop, get)
        except FileNotFoundError:
            return None

    def replace(self, version: object, data: bytes | None) -> bool:
        try:
            if data is None:
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=version)
            else:
                self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, IfMatch=version)
        except FileNotFoundError:
            return False
        except OSError as e:  # 412 PreconditionFailed on If-Match: another lock now
            if e.errno == errno.EINVAL:
                return False
            raise
        return True


def _lock_file(model: str):
    fs, path = _fs(model)
    target = posixpath.join(path, LOCK_FILE)
    if isinstance(fs, LocalFileSystem):
        return _LocalLockFile(target)
    if "s3" in fs.protocol:
        return _S3LockObject(fs, target)
    raise UserError(f"model folder {model}: a promotion lock needs a local folder or s3://. Fix: use such a store.")


def _holder(data: bytes, mtime: float, stale_s: float) -> dict:
    """The lock's record; an unreadable one (a holder that crashed while writing it) expires ``stale_s``
    after it was written."""
    try:
        info = json.loads(data)
        datetime.fromisoformat(info["expires_at"])
        return info
    except (ValueError, KeyError, TypeError):
        return {"owner": "unknown (unreadable lock)", "expires_at": _iso(datetime.fromtimestamp(mtime + stale_s,
                                                                                                   timezone.utc))}


def _describe(info: dict) -> str:
    where = f" (pid {info['pid']} on {info['host']})" if "pid" in info else ""
    since = f" since {info['acquired_at']}" if "acquired_at" in info else ""
    return f"{info.get('owner')}{where}{since}, expiring at {info['expires_at']}"


class PromotionLock:
    """A held promotion lock: ``check()`` fails with LockLost once another owner has taken it over."""

    def __init__(self, model: str, owner: str, lock, data: bytes):
        self.model, self.owner, self._lock, self._data = model, owner, lock, data

    def check(self) -> None:
        """Fail (LockLost) unless this lock is still the one in the store."""
        held = self._lock.read()
        if held is None or held[0] != self._data:
            now = _describe(_holder(held[0], held[2], 0)) if held else "nobody"
            raise LockLost(f"the promotion lock of {self.model} expired while {self.owner} held it; it is now held "
                           f"by {now}. Nothing more was written. Fix: re-run (a re-run records the same decision "
                           "once); raise the lock's stale_s if promotion really takes that long.")


@contextmanager
def promotion_lock(model: str, owner: str, timeout_s: float = LOCK_TIMEOUT_S, stale_s: float = LOCK_STALE_S,
                   poll_s: float = 0.2, say: Callable[[str], None] | None = None) -> Iterator[PromotionLock]:
    """Hold ``<model>/promotion.lock`` for the block, waiting up to ``timeout_s`` for another holder; a lock
    older than its expiry (``stale_s`` after it was taken: a crashed holder) is taken over. ``say`` gets the
    waiting and take-over messages (default: this module's logger)."""
    say = say or logging.getLogger(__name__).info
    lock = _lock_file(model)
    deadline = time.monotonic() + timeout_s
    seen, token = None, uuid.uuid4().hex
    while True:
        taken = _now()
        data = json.dumps({"owner": owner, "host": socket.gethostname(), "pid": os.getpid(),
                           "token": token, "acquired_at": _iso(taken),
                           "expires_at": _iso(datetime.fromtimestamp(taken.timestamp() + stale_s, timezone.utc))
                           }).encode()
        if lock.create(data):
            break
        held = lock.read()
        if held is None:  # released in between
            continue
        info = _holder(held[0], held[2], stale_s)
        if info.get("token") == token:  # our create succeeded, but its answer was lost (and retried)
            data = held[0]
            break
        if datetime.fromisoformat(info["expires_at"]) < _now():
            if lock.replace(held[1], data):
                say(f"took over the promotion lock of {model} from {_describe(info)} (expired: a crashed run)")
                break
            continue
        if time.monotonic() > deadline:
            raise UserError(f"the promotion lock {posixpath.join(model, LOCK_FILE)} is held by {_describe(info)}; "
                            f"waited {timeout_s:g} s. Fix: let that run finish and re-run; if it crashed, the lock "
                            "expires by itself at the time given (or remove the file).")
        if held[1] != seen:
            say(f"waiting for the promotion lock of {model}, held by {_describe(info)}")
            seen = held[1]
        time.sleep(poll_s)
    mine = lock.read()  # read back: an endpoint that ignored the condition may have let another writer win
    if mine is None or mine[0] != data:
        raise LockLost(f"the promotion lock of {model} was overwritten just after {owner} took it: the store "
                       "does not honour conditional writes. Fix: use an S3 endpoint with conditional writes "
                       "(AWS S3, MinIO) and let one deployment at a time promote this model.")
    handle = PromotionLock(model, owner, lock, data)
    try:
        yield handle
    finally:
        try:
            lock.replace(mine[1], None)
        except OSError as e:  # the block's own error matters more; the lock expires by itself
            expiry = _holder(data, 0, 0)["expires_at"]
            say(f"could not release the promotion lock of {model} ({e}); it expires by itself at {expiry}")


# --- history and record -------------------------------------------------------------------------------------

def history(model: str) -> list[dict]:
    """Every line of ``<model>/history.jsonl``, oldest first ([] when the model has none yet)."""
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
    return lines


def _plain(metrics: dict | None) -> dict | None:
    """auc, logloss and rows of ``metrics`` as JSON values (NaN as null)."""
    if metrics is None:
        return None
    out = {}
    for key in ("auc", "logloss", "rows"):
        value = metrics.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = int(value) if key == "rows" and value is not None else value
    return out


def _default_owner() -> str:
    try:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
        if ctx and ctx.flow_run:
            return f"flow run {ctx.flow_run.name} ({ctx.flow_run.id})"
    except ImportError:
        pass
    return f"pid {os.getpid()} on {socket.gethostname()}"


def record(model: str, candidate: dict, champion_metrics: dict | None = None, champion_run: str | None = None,
           margin: float = 0.0, score_champion: Callable[[Champion], dict] | None = None, owner: str | None = None,
           timeout_s: float = LOCK_TIMEOUT_S, stale_s: float = LOCK_STALE_S,
           say: Callable[[str], None] | None = None) -> dict:
    """Decide on the challenger ``candidate`` (Champion's fields but ``name`` and ``promoted_at``: run, step,
    dataset, vocab, date, window, metrics {auc, logloss, rows} on day ``date``) and record it, under the
    model's promotion lock: re-read the champion (another run may have promoted since), ``decide`` against its
    metrics on the same day (``champion_metrics`` when they are of ``champion_run``, the current champion;
    else ``score_champion(champion)``; else the champion is kept), append the history line, then write
    champion.json if the challenger won. Returns the history line. A re-run for the same date and run returns
    the line recorded before (and completes a promotion a crash cut short)."""
    name = posixpath.basename(model.rstrip("/"))
    try:
        challenger = Champion(**{**candidate, "name": check_name(name), "promoted_at": ""})
        problems = [f"metrics.{k}: missing" for k in ("auc", "logloss", "rows") if k not in challenger.metrics]
    except ValidationError as e:
        problems = [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]
    if problems:
        raise UserError(f"the challenger of model {model} is incomplete ({'; '.join(problems)}). Fix: give run, "
                        "step, dataset, vocab, date, window and metrics (auc, logloss, rows).")
    _check_margin(margin)
    owner = owner or _default_owner()
    with promotion_lock(model, owner, timeout_s=timeout_s, stale_s=stale_s, say=say) as lock:
        lines = history(model)
        done = next((e for e in reversed(lines) if (e.get("date"), e.get("run")) == (challenger.date, challenger.run)),
                    None)
        if done is not None:
            last_promoted = next((e for e in reversed(lines) if e.get("decision") in PROMOTING), None)
            current = load_champion(model)
            if done is last_promoted and (current is None or current.run != challenger.run):
                lock.check()
                _write_champion(model, challenger, done["at"])
            return done
        current = load_champion(model)
        reason_prefix = ""
        if current is None:
            measured = None
        elif current.date > challenger.date:   # a backfill, or runs that started out of order
            measured = None
            reason_prefix = (f"the champion was tested on a later day ({current.date}) than this run "
                             f"({challenger.date}), and an older day's model never replaces a newer one: ")
        elif champion_metrics is not None and champion_run == current.run:
            measured = champion_metrics
        elif score_champion is not None:
            measured = score_champion(current)
        else:
            measured = None
            reason_prefix = (f"the champion is now run {current.run} (metrics were given for {champion_run}) and "
                             f"no metrics of it on {challenger.date} are known: ")
        if current is not None and measured is None:
            decision, reason = "kept", reason_prefix + "champion kept"
        else:
            decision, reason = decide(challenger.metrics, measured, margin)
        entry = {"date": challenger.date, "window": challenger.window, "run": challenger.run,
                 "challenger": _plain(challenger.metrics), "champion": _plain(measured),
                 "champion_run": current.run if current else None, "promote_margin": margin,
                 "decision": decision, "reason": reason, "at": _iso(_now())}
        lock.check()
        text = _read(model, HISTORY_FILE) or ""
        if text and not text.endswith("\n"):
            text += "\n"
        write_uri(posixpath.join(model, HISTORY_FILE), text + json.dumps(entry, allow_nan=False) + "\n",
                  **storage_options(model))
        if decision in PROMOTING:
            lock.check()
            _write_champion(model, challenger, entry["at"])
    return entry


def attach_bundle(model: str, run: str, bundle: str, say: Callable[[str], None] | None = None) -> bool:
    """Record ``bundle`` as the serving bundle of the champion, under the lock, if ``run`` is still the champion
    (returns whether it was); then remove the bundles under ``<model>/bundles/`` of runs that are neither it nor
    the champion before it (kept for a rollback)."""
    with promotion_lock(model, _default_owner(), say=say) as lock:
        current = load_champion(model)
        if current is None or current.run != run:
            return False
        lock.check()
        write_uri(posixpath.join(model, CHAMPION_FILE), current.model_copy(update={"bundle": bundle})
                  .model_dump_json(indent=2), **storage_options(model))
        promoted = [e["run"] for e in history(model) if e.get("decision") in PROMOTING]
    keep = {bundle_name(r) for r in promoted[-2:]}
    fs, path = _fs(model)
    for folder in fs.ls(posixpath.join(path, BUNDLES), detail=False) if fs.exists(posixpath.join(path, BUNDLES)) else []:
        if posixpath.basename(folder.rstrip("/")) not in keep:
            fs.rm(folder, recursive=True)
    return True


def champion_init(init):
    """``init`` (a ``training.config.InitFrom``) with a named model's folder resolved to its champion's run and
    checkpoint step: ``init_from: STORE/models/NAME`` starts from the model in use. Anything else unchanged."""
    if init is None:
        return None
    fs, path = _fs(init.run)
    if not fs.exists(posixpath.join(path, CHAMPION_FILE)):
        return init
    champion = load_champion(init.run)
    return init.model_copy(update={"run": champion.run, "checkpoint": str(champion.step)})


def bundle_name(run: str) -> str:
    """The folder name of a run's bundle under ``<model>/bundles/``."""
    return posixpath.basename(run.rstrip("/"))


def _write_champion(model: str, challenger: Champion, promoted_at: str) -> None:
    champion = challenger.model_copy(update={"promoted_at": promoted_at})
    write_uri(posixpath.join(model, CHAMPION_FILE), champion.model_dump_json(indent=2), **storage_options(model))
