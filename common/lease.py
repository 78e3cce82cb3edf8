"""Leases: a file in the store (a local folder or s3://) holding its owner and expiry, held by one process at a
time; ``lease(uri, owner, kind, of)`` holds one for a block (the promotion lock of a named model is one).

It is taken by an exclusive create: O_EXCL on a local (or NFS) folder, a conditional PUT (``If-None-Match: *``)
on S3. A lease past its expiry (a crashed holder) is taken over: on S3 by a PUT conditional on the stale lease's
ETag (``If-Match``), locally by renaming it away and checking it was the stale one. Limitations: the S3 endpoint
must honour conditional writes (AWS S3, MinIO and moto do; one that ignores them gives no mutual exclusion, which
the read-back after each take detects only sometimes); expiry compares wall clocks, so machines sharing a store
need clocks within a small fraction of ``stale_s``; a lease of a process of this host that no longer exists is
taken over at once (``_gone``: the same hostname, boot and pid namespace, and its pid gone or reused by a later
process; hosts sharing a store need distinct hostnames); a holder that runs longer than ``stale_s`` can lose the
lease unless it renews it (``heartbeat_s``: a thread rewrites the record with a new expiry by the same
conditional replace), and ``Lease.check`` tells a lost lease before each write.

A holder whose work runs elsewhere (a cluster job) records that job in the lease (``Lease.record({"job": ...})``:
a dict with a ``kind`` and ``what``, a line naming it); the job may outlive its holder, so a stale lease that records
one is taken over only after ``fence`` (an argument of ``acquire``; the launchers' ``Launcher.fence``) has stopped
it, and never by a taker without one (``LeaseHeld`` naming the job), unless the job has provably ended: a job of a
process group of this host (``pgid``, as the local launcher records it), recorded by a holder of this host's boot and
pid namespace, with no live process left in that group or in a session of that id (``_job_ended``; gc's removal of
such a run takes it over at once).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import posixpath
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from common import process
from common.errors import UserError
from common.store import STORE_LEASE, TOP, WORK, filesystem
from common.store_errors import store_error


class LockLost(UserError):
    """The lease expired and another owner took it over while this one held it."""


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
        except FileNotFoundError:   # its folder was removed as empty meanwhile
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            return self.create(data)
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

    def replace(self, version: object, data: bytes | None, renew: bool = False) -> bool:
        """Replace the lock of ``version`` by ``data`` (None: remove it); False when it is another lock now.
        The lock is renamed aside first, so of two processes replacing the same stale lock one wins. ``renew``
        (the holder rewriting its live lock): ``data`` is renamed over it, so the file never goes missing (a
        waiter's create would win in that instant); only a holder past its expiry can race a take-over there,
        which the new holder's ``check`` then reports."""
        if renew and data is not None:
            tmp = f"{self.path}.renew-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            held = self.read()
            if held is None or held[1] != version:
                os.unlink(tmp)
                return False
            os.replace(tmp, self.path)
            return True
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

    def replace(self, version: object, data: bytes | None, renew: bool = False) -> bool:
        """Replace the lock object of ETag ``version`` by ``data`` (None: delete it), conditionally (If-Match)."""
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


def _lock_file(uri: str, kind: str, of: str):
    fs, path = filesystem(uri)
    if isinstance(fs, LocalFileSystem):
        _refuse_link_out(path, kind, of)
        return _LocalLockFile(path)
    if "s3" in fs.protocol:
        return _S3LockObject(fs, path)
    raise UserError(f"{of}: a {kind} needs a local folder or s3://. Fix: use such a store.")


def _store_root(path: str) -> str | None:
    """The store folder that holds the local lease file ``path`` by the store's layout (``STORE_LEASE`` at its top,
    ``_work/<key>.lease``, ``<top-level folder>/<name>/<lease>``); None for a lease outside a store's layout."""
    folder = os.path.dirname(path)
    if os.path.basename(path) == STORE_LEASE:
        return folder
    if os.path.basename(folder) == WORK:
        return os.path.dirname(folder)
    if os.path.basename(os.path.dirname(folder)) in TOP:
        return os.path.dirname(os.path.dirname(folder))
    return None


def _refuse_link_out(path: str, kind: str, of: str) -> None:
    """A UserError where the lease file ``path`` would be written through a symbolic link to a folder outside its
    store (a run folder that is a link: gc once wrote its removal lease there)."""
    root = _store_root(path)
    if root is None:
        return
    folder, store = os.path.realpath(os.path.dirname(path)), os.path.realpath(root)
    if folder != store and not folder.startswith(store.rstrip("/") + "/"):
        raise UserError(f"{of}: the {kind} {path} would be written through a symbolic link, into {folder}, outside "
                        f"the store {root}. Nothing is written through a link out of a store. Fix: remove the link, "
                        "or move what it points to into the store.")


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds")


def _holder(data: bytes, mtime: float, stale_s: float) -> dict:
    """The lock's record; an unreadable one (a holder that crashed while writing it) expires ``stale_s``
    after it was written."""
    try:
        info = json.loads(data)
        datetime.fromisoformat(info["expires_at"])
        return info
    except (ValueError, KeyError, TypeError):
        return {"owner": "unknown (unreadable lock)", "expires_at": _iso(mtime + stale_s)}


def _expired(info: dict) -> bool:
    """Past its expiry, or held by a process of this host that no longer exists (``_gone``: a killed run, taken over
    at once rather than after ``stale_s``)."""
    if datetime.fromisoformat(info["expires_at"]) < datetime.now(timezone.utc):
        return True
    return _gone(info)


def _here(info: dict) -> bool:
    """Whether the pids of the lease record ``info`` are this host's: its hostname and, where the record has them
    (records of older versions do not), the same boot and pid namespace."""
    here = process.pid_space()
    return info.get("host") == socket.gethostname() and info.get("pid_space", here) == here


def _gone(info: dict) -> bool:
    """Held by a process of this host (``_here``) that has ended, exited unreaped (a zombie), or whose pid a later
    process reuses (another start time than the recorded one; a record without one waits for its expiry then)."""
    pid = info.get("pid")
    if not _here(info) or not isinstance(pid, int):
        return False
    if process.LINUX:
        now = process.started(pid)
        return now is None or (isinstance(info.get("started"), int) and info["started"] != now)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:   # exists, owned by another user
        pass
    return False


def _job_ended(info: dict) -> str | None:
    """How the job that the stale lease record ``info`` records is known to have ended, None when it is not: a job of
    a process group of this host (``pgid`` and ``host``, as ``training.launchers.local`` records it) whose holder was
    of this host too (``_here``), with no live process left in that group or in a session of that id."""
    job, host = info["job"], info.get("host")
    pgid = job.get("pgid")
    if not process.LINUX or not isinstance(pgid, int) or job.get("host") != host or not _here(info):
        return None
    if process.live_processes(group=pgid, session=pgid):
        return None
    return f"its job had ended (no process left in process group {pgid} on {host})"


def _describe(info: dict) -> str:
    where = f" (pid {info['pid']} on {info['host']})" if "pid" in info else ""
    since = f" since {info['acquired_at']}" if "acquired_at" in info else ""
    job = f" (its job: {job_of(info)})" if isinstance(info.get("job"), dict) else ""
    return f"{info.get('owner')}{where}{since}{job}, expiring at {info['expires_at']}"


def job_of(info: dict) -> str | None:
    """The line naming the job that the lease record ``info`` records (``Lease.record``), None when none."""
    job = info.get("job")
    if not isinstance(job, dict):
        return None
    return str(job.get("what") or ", ".join(f"{k} {v}" for k, v in job.items()))


class LeaseHeld(UserError):
    """The lease is held by another (live) owner and the wait for it timed out."""


def _data(owner: str, token: str, stale_s: float, acquired_at: str | None, extra: dict | None) -> bytes:
    now = time.time()
    here = {"started": process.started(os.getpid()), "pid_space": process.pid_space()}   # None off Linux
    return json.dumps({"owner": owner, "host": socket.gethostname(), "pid": os.getpid(), "token": token,
                       "acquired_at": acquired_at or _iso(now), "expires_at": _iso(now + stale_s),
                       **{k: v for k, v in here.items() if v is not None}, **(extra or {})}).encode()


def _live(held: tuple[bytes, object, float] | None, stale_s: float) -> dict | None:
    """The record of ``held`` when it is a lease not past its expiry, else None."""
    if held is None:
        return None
    info = _holder(held[0], held[2], stale_s)
    return None if _expired(info) else info


class Lease:
    """A held lease: ``check()`` fails with LockLost once another owner has taken it over; ``renew()`` pushes its
    expiry ``stale_s`` ahead (a heartbeat thread does it every ``heartbeat_s`` when asked); ``release()`` ends it.

    No lock is held across a call of the store: a heartbeat that waits on a store that stopped answering (up to
    ``common.s3.s3_bound``) never blocks ``record`` or ``check`` in another thread. Rewrites may so overlap;
    each is conditional on the version it saw, and one that meets another rewrite of this lease (the lease's
    token, which only its holder writes) writes again on top of it until the store holds the record as it
    stands (``record``'s latest fields), so none is lost and neither takes the other for a take-over."""

    def __init__(self, name: str, owner: str, lock, data: bytes, version: object, stale_s: float = 0.0,
                 say: Callable[[str], None] | None = None):
        self.name, self.owner, self._lock, self._data, self._version = name, owner, lock, data, version
        self.stale_s, self._say = stale_s, say or logging.getLogger(__name__).info
        info = json.loads(data)
        self._token, self._acquired_at = info["token"], info["acquired_at"]
        self._extra = _extra_of(info)   # the record's own fields as they stand (record's), written by each rewrite
        self._mutex = threading.Lock()   # the fields above; never held across a store call
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: LockLost | None = None

    def _lost(self, held) -> LockLost:
        now = _describe(_holder(held[0], held[2], 0)) if held else "nobody"
        return LockLost(f"{self.name} expired while {self.owner} held it; it is now held by {now}. Nothing more "
                        "was written. Fix: re-run (a re-run finds the finished work and redoes the rest); raise the "
                        "lease's stale_s if the work under it really takes that long without a heartbeat.")

    def _mine(self, held) -> dict | None:
        """The record of ``held`` (the lock as read) when it is this lease's (its token), else None."""
        if held is None:
            return None
        info = _holder(held[0], held[2], self.stale_s)
        return info if info.get("token") == self._token else None

    def _fail(self, held) -> LockLost:
        """The lease is another owner's now (``held``): remembered (the first finding stays), to raise."""
        with self._mutex:
            if self.lost is None:
                self.lost = self._lost(held)
            return self.lost

    def check(self) -> None:
        """Fail (LockLost) unless this lease is still the one in the store."""
        if self.lost is not None:
            raise self.lost
        held = self._lock.read()
        if self._mine(held) is None:
            raise self._fail(held)

    def renew(self) -> None:
        """Rewrite the lease with a new expiry (``stale_s`` from now), conditional on it being still ours."""
        self._rewrite({})

    def record(self, fields: dict) -> None:
        """Rewrite the lease's record with ``fields`` among its extra fields (a None value removes one), and a new
        expiry, conditional on it being still ours (LockLost when another owner took it over). A holder records
        the job it started so (``{"job": {...}}``) and removes it once the job has ended (``{"job": None}``).
        A store error is raised as it came; the fields stay the record's, written by the next renewal too."""
        self._rewrite(fields)

    def _rewrite(self, fields: dict) -> None:
        with self._mutex:
            if self.lost is not None:
                raise self.lost
            merged = {k: v for k, v in {**self._extra, **fields}.items() if k not in _FIELDS and v is not None}
            self._extra = json.loads(json.dumps(merged))   # as the store gives it back (tuples as lists...)
            version = self._version
        while True:
            with self._mutex:
                extra = dict(self._extra)
            data = _data(self.owner, self._token, self.stale_s, self._acquired_at, extra)
            self._lock.replace(version, data, renew=True)   # False: another version now, ours or not (read next)
            held = self._lock.read()
            info = self._mine(held)
            if info is None:
                raise self._fail(held)
            with self._mutex:
                if self.lost is not None:
                    raise self.lost
                self._data, self._version = held[0], held[1]
                if _extra_of(info) == self._extra:   # ours, with the fields as they stand: written
                    return
            version = held[1]   # another rewrite of ours came between (or fields changed meanwhile): on top of it

    def start_heartbeat(self, every_s: float) -> None:
        """Renew the lease every ``every_s`` seconds in a daemon thread until ``release()``; a failed renewal
        is kept (``check()`` raises it) and ends the heartbeat. A store that fails a renewal (within its client's
        bound) is said, as ``common.store_errors.store_error`` puts it, and the next beat tries again."""
        def beat():
            while not self._stop.wait(every_s):
                try:
                    self.renew()
                except LockLost:
                    self._say(f"lost {self.name}: another owner took it over")
                    return
                except Exception as e:   # a store hiccup: the next beat tries again before the lease expires
                    self._say(f"could not renew {self.name} ({_hiccup(e)}); retrying")

        self._thread = threading.Thread(target=beat, name=f"lease-heartbeat {self.name}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours (another owner's is left alone)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()   # a renewal under way ends within the store's bound
        with self._mutex:
            if self.lost is not None:   # another owner's now: leave it alone
                return
            version = self._version
        try:
            if not self._lock.replace(version, None):   # a rewrite of ours came between: the version it left
                held = self._lock.read()
                if self._mine(held) is not None:
                    self._lock.replace(held[1], None)
        except Exception as e:  # the block's own error matters more; the lease expires by itself
            self._say(f"could not release {self.name} ({_hiccup(e)}); it expires by itself at "
                      f"{_holder(self._data, 0, 0)['expires_at']}")


def _hiccup(e: Exception) -> str:
    """What the store said when it failed a renewal or a release (its one line:
    ``common.store_errors.store_error``, for an S3 endpoint that is lost or does not answer too); ``e`` raised again
    when it is no store error."""
    found = store_error(e)
    if found is None and not isinstance(e, OSError):
        raise e
    return str(found or e)


def _extra_of(info: dict) -> dict:
    """A lease record's own fields (``extra``, ``Lease.record``'s): all but those every lease has."""
    return {k: v for k, v in info.items() if k not in _FIELDS}


_FIELDS = ("owner", "host", "pid", "started", "pid_space", "token", "acquired_at", "expires_at")


def acquire(uri: str, owner: str | None, kind: str, of: str, timeout_s: float, stale_s: float, poll_s: float = 0.2,
            say: Callable[[str], None] | None = None, heartbeat_s: float | None = None,
            extra: dict | None = None, fence: Callable[[dict], str] | None = None) -> Lease:
    """Take the lease file ``uri`` (messages call it "the ``kind`` of ``of``"), waiting up to ``timeout_s`` for
    another holder (then LeaseHeld); a lease past its expiry (``stale_s`` after it was taken or last renewed: a
    crashed holder) is taken over. ``owner`` names the holder (default: this process); ``say`` gets the waiting
    and take-over messages (default: this module's logger); ``heartbeat_s``: renew it that often in a thread;
    ``extra``: more fields of the lease's record (what the holder uses). Release it with ``Lease.release()``.

    A stale lease that records a job (``Lease.record``) is taken over only once ``fence(job)`` has stopped it:
    it returns a line saying what it did (said with the take-over) or raises (a UserError naming the job and the
    fix) to refuse the take-over; without ``fence`` such a lease is not taken over (LeaseHeld naming the job)."""
    say, owner = say or logging.getLogger(__name__).info, owner or f"pid {os.getpid()} on {socket.gethostname()}"
    name = f"the {kind} of {of}"
    lock = _lock_file(uri, kind, of)
    deadline = time.monotonic() + timeout_s
    seen, token = None, uuid.uuid4().hex
    while True:
        data = _data(owner, token, stale_s, None, extra)
        if lock.create(data):
            break
        held = lock.read()
        if held is None:  # released in between
            continue
        info = _holder(held[0], held[2], stale_s)
        if info.get("token") == token:  # our create succeeded, but its answer was lost (and retried)
            data = held[0]
            break
        if _expired(info):
            if fenced := _fence(info, fence, name, uri):   # it may have taken a while: a fresh expiry
                data = _data(owner, token, stale_s, None, extra)
            if lock.replace(held[1], data):
                say(f"took over {name} from {_describe(info)} (expired, or its process is gone: a crashed run)"
                    + (f"; {fenced}" if fenced else ""))
                break
            continue
        if time.monotonic() > deadline:
            raise LeaseHeld(f"the {kind} {uri} is held by {_describe(info)}; waited {timeout_s:g} s. Fix: let that "
                            "run finish and re-run; if it crashed, the lease expires by itself at the time given (or "
                            "remove the file).")
        if held[1] != seen:
            say(f"waiting for {name}, held by {_describe(info)}")
            seen = held[1]
        time.sleep(poll_s)
    mine = lock.read()  # read back: an endpoint that ignored the condition may have let another writer win
    if mine is None or mine[0] != data:
        raise LockLost(f"{name} was overwritten just after {owner} took it: the store does not honour conditional "
                       "writes. Fix: use an S3 endpoint with conditional writes (AWS S3, MinIO) and let one "
                       f"deployment at a time take {name}.")
    held = Lease(name, owner, lock, data, mine[1], stale_s, say)
    if heartbeat_s:
        held.start_heartbeat(heartbeat_s)
    return held


def _fence(info: dict, fence: Callable[[dict], str] | None, name: str, uri: str) -> str | None:
    """Stop the job that the stale record ``info`` records before it is taken over (``acquire``): what was done, or
    how it is known to have ended (``_job_ended``: no fence needed), None when it records none."""
    if not isinstance(info.get("job"), dict):
        return None
    if ended := _job_ended(info):
        return ended
    if fence is None:
        raise LeaseHeld(f"{name} is stale (held by {_describe(info)}), but its job ({job_of(info)}) may still be "
                        "running, and this taker cannot stop it. Fix: re-run what held it (it stops the job first), "
                        f"or stop the job yourself and remove {uri}.")
    return f"its job was stopped first: {fence(info['job'])}"


@contextmanager
def lease(uri: str, owner: str | None, kind: str, of: str, timeout_s: float, stale_s: float, poll_s: float = 0.2,
          say: Callable[[str], None] | None = None, heartbeat_s: float | None = None,
          extra: dict | None = None, fence: Callable[[dict], str] | None = None) -> Iterator[Lease]:
    """Hold the lease file ``uri`` for the block (``acquire``'s arguments); released at its end."""
    held = acquire(uri, owner, kind, of, timeout_s, stale_s, poll_s, say, heartbeat_s, extra, fence)
    try:
        yield held
    finally:
        held.release()


def holder(uri: str, stale_s: float = 60.0) -> dict | None:
    """The record of the live (not expired) lease ``uri``, None when there is none (or it expired)."""
    return _live(_lock_file(uri, "lease", uri).read(), stale_s)


def wait_released(uri: str, kind: str, of: str, timeout_s: float, poll_s: float = 0.5,
                  say: Callable[[str], None] | None = None) -> None:
    """Wait until nobody holds the lease ``uri`` (or it expired), saying once what for (LeaseHeld after
    ``timeout_s``). A lease taken right after this returns is not excluded: callers then take it themselves."""
    say = say or logging.getLogger(__name__).info
    lock, deadline, said = _lock_file(uri, kind, of), time.monotonic() + timeout_s, False
    while (info := _live(lock.read(), 60.0)) is not None:
        if time.monotonic() > deadline:
            raise LeaseHeld(f"the {kind} {uri} is held by {_describe(info)}; waited {timeout_s:g} s. Fix: let that "
                            "run finish and re-run; if it crashed, the lease expires by itself at the time given.")
        if not said:
            say(f"waiting for the {kind} of {of}, held by {_describe(info)}")
            said = True
        time.sleep(poll_s)


STORE_LEASE_TIMEOUT_S = 1800.0   # removals (gc, prune) take seconds to minutes
STORE_LEASE_STALE_S = 120.0      # renewed by a heartbeat every third of it


def store_lease(store: str, owner: str | None, what: str, timeout_s: float = STORE_LEASE_TIMEOUT_S,
                say: Callable[[str], None] | None = None):
    """Hold the store-wide lease (``<store>/_store.lease``) for the block: removals (``what`` says which) run
    under it, and a job registers the lease of what it uses under it, so a removal never races a job's start."""
    return lease(posixpath.join(store.rstrip("/"), STORE_LEASE), owner, f"store lease ({what})", store, timeout_s,
                 STORE_LEASE_STALE_S, say=say, heartbeat_s=STORE_LEASE_STALE_S / 3)
