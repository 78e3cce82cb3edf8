"""Free space on a local store, and a full disk as one line that names the path, the free space and the fix.

``usage(uri)`` is the free and total bytes of the filesystem that holds (or would hold) a local path, and its mount
point; None for an object store (s3://, memory://: no free space to speak of). ``writing(uri)`` turns an ``OSError``
of errno ENOSPC or EDQUOT raised in its block (also inside torch's DCP ``CheckpointException``, an exception's
causes or an exception group: ``space_error``) into ``NoSpace``::

    no space left on device writing /store/runs/x/checkpoints/40 (free: 12 MiB of 50 GiB on /store). Fix: ...

``check_free(uri, need, what, estimate)`` refuses, before a stage that writes much, when the free space is below
what the stage is estimated to need (local paths only; the estimate is named in the message).
``common.atomic`` writes through ``writing``, so every atomic write says so when the disk is full.
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from typing import Iterator

from fsspec.implementations.local import LocalFileSystem

from common.errors import UserError
from common.store import filesystem

ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FIX = ("free space on {mount} (`dlrmflow gc` removes what the store no longer needs), or use a filesystem with room "
       "(--store, --work-dir, --out)")


class NoSpace(UserError):
    """A write that found no space (ENOSPC) or quota (EDQUOT) left, or a stage refused for lack of free space:
    ``what`` happened (path and free space) and the ``fix``."""

    def __init__(self, what: str, fix: str):
        super().__init__(f"{what}. Fix: {fix}")
        self.what, self.fix = what, fix

    def __reduce__(self):   # pickled whole across processes (a worker pool, an export's child)
        return type(self), (self.what, self.fix)

    def with_fix(self, fix: str) -> "NoSpace":
        """The same error with the fix of the stage that knows better."""
        return NoSpace(self.what, fix)


def local_path(uri: str | os.PathLike) -> str | None:
    """The local filesystem path of ``uri`` (a path or file://), None for any other filesystem."""
    fs, path = filesystem(os.fspath(uri))
    return path if isinstance(fs, LocalFileSystem) else None


def usage(uri: str | os.PathLike) -> tuple[int, int, str] | None:
    """``(free, total, mount point)`` of the local filesystem that holds ``uri`` (its nearest existing folder:
    the path need not exist yet), ``free`` as an unprivileged writer sees it; None for an object store."""
    path = local_path(uri)
    if path is None:
        return None
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        found = shutil.disk_usage(path)
    except OSError:
        return None
    mount = path if os.path.isdir(path) else os.path.dirname(path)
    while not os.path.ismount(mount) and os.path.dirname(mount) != mount:
        mount = os.path.dirname(mount)
    return found.free, found.total, mount


def free_bytes(uri: str | os.PathLike) -> int | None:
    """The bytes free for writing at the local ``uri`` (see ``usage``); None for an object store."""
    found = usage(uri)
    return None if found is None else found[0]


def size_text(n: int) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 KiB``, ``12 MiB``, ``50 GiB``."""
    value, unit = float(n), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def free_text(uri: str | os.PathLike) -> str:
    """``free: 12 MiB of 50 GiB on /store`` for a local ``uri``; ``free space unknown`` for an object store."""
    found = usage(uri)
    if found is None:
        return "free space unknown"
    free, total, mount = found
    return f"free: {size_text(free)} of {size_text(total)} on {mount}"


def _mount(uri: str | os.PathLike) -> str:
    found = usage(uri)
    return found[2] if found else os.fspath(uri)


def space_error(error: BaseException | None) -> OSError | None:
    """The ``OSError`` of errno ENOSPC or EDQUOT that ``error`` is or carries: itself, its causes and contexts, the
    exceptions of an exception group, or the per-rank failures of torch DCP's ``CheckpointException`` (its
    ``failures``: rank -> (exception, traceback)); None when there is none."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in ERRNOS:
            return e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo += [f[0] if isinstance(f, tuple) and f else f for f in failures.values()]
    return None


def no_space(uri: str | os.PathLike, error: OSError | None = None, fix: str | None = None) -> NoSpace:
    """The ``NoSpace`` of a write to ``uri`` that failed with ``error`` (ENOSPC, EDQUOT): names the path and the
    free space now. ``fix``: the stage's fix (``{mount}`` is filled in), else free space or write elsewhere."""
    reason = "disk quota exceeded" if error is not None and error.errno == errno.EDQUOT else "no space left on device"
    return NoSpace(f"{reason} writing {os.fspath(uri)} ({free_text(uri)})", (fix or FIX).replace("{mount}", _mount(uri)))


@contextmanager
def writing(uri: str | os.PathLike, fix: str | None = None) -> Iterator[None]:
    """A block that writes ``uri``: a full disk or quota in it (``space_error``) becomes ``no_space(uri)``; a
    ``NoSpace`` raised inside gets ``fix`` (when given: the stage around knows its fix better)."""
    try:
        yield
    except NoSpace as e:
        if fix is None:
            raise
        raise e.with_fix(fix.replace("{mount}", _mount(uri))) from e.__cause__
    except BaseException as e:   # BaseException: DCP's CheckpointException is one
        found = space_error(e)
        if found is None:
            raise
        raise no_space(uri, found, fix) from e


def check_free(uri: str | os.PathLike, need: int, what: str, estimate: str, fix: str | None = None) -> None:
    """NoSpace when the local filesystem of ``uri`` has less than ``need`` bytes free for ``what`` (``estimate``:
    what ``need`` is, e.g. "the previous checkpoint's size"); nothing for an object store or ``need`` <= 0."""
    found = usage(uri) if need > 0 else None
    if found is None or found[0] >= need:
        return
    free, total, mount = found
    raise NoSpace(f"not enough free space to write {what} at {os.fspath(uri)}: it needs about {size_text(need)} "
                  f"({estimate}), free: {size_text(free)} of {size_text(total)} on {mount}",
                  (fix or FIX).replace("{mount}", mount))
