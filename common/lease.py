"""Leases: a file in the store (a local folder or s3://) holding its owner and expiry, held by one process at a
time; ``lease(uri, owner, kind, of)`` holds one for a block (the promotion lock of a named model is one).

It is taken by an exclusive create: O_EXCL on a local (or NFS) folder, a conditional PUT (``If-None-Match: *``)
on S3. A lease past its expiry (a crashed holder) is taken over: on S3 by a PUT conditional on the stale lease's
ETag (``If-Match``), locally by renaming it away and checking it was the stale one. Limitations: the S3 endpoint
must honour conditional writes (AWS S3, MinIO and moto do; one that ignores them gives no mutual exclusion, which
the read-back after each take detects only sometimes); expiry compares wall clocks, so machines sharing a store
need clocks within a small fraction of ``stale_s``; a holder that runs longer than ``stale_s`` can lose the
lease, which ``Lease.check`` tells before each write.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Callable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from common.errors import UserError
from common.store import filesystem


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


def _lock_file(uri: str, kind: str, of: str):
    fs, path = filesystem(uri)
    if isinstance(fs, LocalFileSystem):
        return _LocalLockFile(path)
    if "s3" in fs.protocol:
        return _S3LockObject(fs, path)
    raise UserError(f"{of}: a {kind} needs a local folder or s3://. Fix: use such a store.")


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def _holder(data: bytes, mtime: float, stale_s: float) -> dict:
    """The lock's record; an unreadable one (a holder that crashed while writing it) expires ``stale_s``
    after it was written."""
    try:
        info = json.loads(data)
        datetime.fromisoformat(info["expires_at"])
        return info
    except (ValueError, KeyError, TypeError):
        return {"owner": "unknown (unreadable lock)", "expires_at": _iso(mtime + stale_s)}


def _describe(info: dict) -> str:
    where = f" (pid {info['pid']} on {info['host']})" if "pid" in info else ""
    since = f" since {info['acquired_at']}" if "acquired_at" in info else ""
    return f"{info.get('owner')}{where}{since}, expiring at {info['expires_at']}"


class Lease:
    """A held lease: ``check()`` fails with LockLost once another owner has taken it over."""

    def __init__(self, name: str, owner: str, lock, data: bytes):
        self.name, self.owner, self._lock, self._data = name, owner, lock, data

    def check(self) -> None:
        """Fail (LockLost) unless this lease is still the one in the store."""
        held = self._lock.read()
        if held is None or held[0] != self._data:
            now = _describe(_holder(held[0], held[2], 0)) if held else "nobody"
            raise LockLost(f"{self.name} expired while {self.owner} held it; it is now held by {now}. Nothing more "
                           "was written. Fix: re-run (a re-run records the same decision once); raise the lock's "
                           "stale_s if the work under it really takes that long.")


@contextmanager
def lease(uri: str, owner: str | None, kind: str, of: str, timeout_s: float, stale_s: float, poll_s: float = 0.2,
          say: Callable[[str], None] | None = None) -> Iterator[Lease]:
    """Hold the lease file ``uri`` (messages call it "the ``kind`` of ``of``") for the block, waiting up to
    ``timeout_s`` for another holder; a lease older than its expiry (``stale_s`` after it was taken: a crashed
    holder) is taken over. ``owner`` names the holder (default: this process); ``say`` gets the waiting and
    take-over messages (default: this module's logger)."""
    say, owner = say or logging.getLogger(__name__).info, owner or f"pid {os.getpid()} on {socket.gethostname()}"
    name = f"the {kind} of {of}"
    lock = _lock_file(uri, kind, of)
    deadline = time.monotonic() + timeout_s
    seen, token = None, uuid.uuid4().hex
    while True:
        taken = time.time()
        data = json.dumps({"owner": owner, "host": socket.gethostname(), "pid": os.getpid(), "token": token,
                           "acquired_at": _iso(taken), "expires_at": _iso(taken + stale_s)}).encode()
        if lock.create(data):
            break
        held = lock.read()
        if held is None:  # released in between
            continue
        info = _holder(held[0], held[2], stale_s)
        if info.get("token") == token:  # our create succeeded, but its answer was lost (and retried)
            data = held[0]
            break
        if datetime.fromisoformat(info["expires_at"]) < datetime.now(timezone.utc):
            if lock.replace(held[1], data):
                say(f"took over {name} from {_describe(info)} (expired: a crashed run)")
                break
            continue
        if time.monotonic() > deadline:
            raise UserError(f"the {kind} {uri} is held by {_describe(info)}; waited {timeout_s:g} s. Fix: let that "
                            "run finish and re-run; if it crashed, the lock expires by itself at the time given (or "
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
    try:
        yield Lease(name, owner, lock, data)
    finally:
        try:
            lock.replace(mine[1], None)
        except OSError as e:  # the block's own error matters more; the lock expires by itself
            say(f"could not release {name} ({e}); it expires by itself at {_holder(data, 0, 0)['expires_at']}")
