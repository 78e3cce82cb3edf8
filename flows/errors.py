"""User errors at the boundary of each flow and task: the run fails with the error's message as its state
message and one ERROR line in its logs (the traceback at DEBUG), instead of Prefect logging the traceback
again at every enclosing task, subflow and flow. A store that cannot be used (an S3 endpoint lost or frozen,
a read-only store: ``common.store_errors.store_error``) is such an error too. ``transient``: which failed tasks are
retried."""

from __future__ import annotations

import functools
import inspect

from prefect import get_run_logger
from prefect.states import Failed

from common.errors import UserError
from common.store import RUNS, Store, store_of
from common.store_errors import store_error
from training import RunDir

LOGGED = "dlrmflow_user_error"  # set on a log record (and on the error) once the message is logged


def user_errors(fn):
    """``fn`` that returns a Failed state holding a UserError it raised (logged once, by the innermost run), or
    the one-line error of a store it could not use (``store_error``: the store named by its arguments).

    A calling flow gets the error raised again from a subflow, a task's future's ``result()`` or
    ``task(..., return_state=True).result()``; a task's plain call would return the state instead."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            return _failed(e)
        except Exception as e:
            error = store_error(e, _store_in(args, kwargs))
            if error is None:
                raise
            return _failed(error)

    run.__signature__ = inspect.signature(fn, eval_str=True)  # resolved: Prefect would read them in this module
    return run


def _failed(error: UserError) -> Failed:
    """``error`` logged (once; the traceback of the error being handled at DEBUG) as a Failed state."""
    if not getattr(error, LOGGED, False):
        log = get_run_logger()
        log.debug("traceback of the error below", exc_info=True)
        log.error("%s", error, extra={LOGGED: True})
        setattr(error, LOGGED, True)
    return Failed(message=str(error), data=error)


def _store_in(args, kwargs) -> str | None:
    """The store a flow or task works on, by its arguments: a ``Store``, a config's ``store``, or the store of a run
    folder (a ``RunDir``: ``STORE/runs/NAME``); else None."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, RunDir):
            return store_of(value.uri, RUNS)
        try:
            field = getattr(value, "store", None)
        except Exception:   # a property that fails: not a config
            field = None
        for candidate in (value, field):
            if isinstance(candidate, Store):
                return candidate.uri
            if isinstance(candidate, str) and candidate is not value:
                try:
                    return Store(candidate).uri
                except UserError:
                    return None
    return None


def transient(task, task_run, state) -> bool:
    """Prefect ``retry_condition_fn``: retry remote I/O failures (timeouts, dropped connections), never a
    missing file, a refused permission, bad input, a bug, or a store that cannot be used (``store_error``: its
    S3 client has retried already, within DLRMFLOW_S3_* bounds; a read-only store stays read-only)."""
    exc = state.data
    return isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, PermissionError, UserError)) \
        and store_error(exc) is None
